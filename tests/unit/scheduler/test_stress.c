/* The stress scenarios (stress.c) as Criterion tests. Full size: 1,000 keys x 1,000 tasks
 * for the first; MG_STRESS_SCALE=0.1 (say) makes them smaller. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include "stress.h"

static void scenario(size_t i)
{
    const char *env = getenv("MG_STRESS_SCALE");
    stress_params_t p[8];
    size_t n = stress_scenarios(env ? atof(env) : 1.0, p, 8);
    cr_assert_lt(i, n);
    stress_result_t r;
    int rc = stress_run(&p[i], &r);
    cr_log_info("%s: %llu tasks, %llu started, %llu timeouts, %llu cancelled, %llu withdrawn, %llu refused, %llu notices, "
                "at most %u in flight, %.2f s",
                p[i].name, (unsigned long long)r.tasks, (unsigned long long)r.started, (unsigned long long)r.timeouts,
                (unsigned long long)r.cancelled, (unsigned long long)r.withdrawn, (unsigned long long)r.refused,
                (unsigned long long)r.notices, r.most_in_flight, r.seconds);
    cr_assert_eq(rc, 0, "%s: %s", p[i].name, r.failure);
}

Test(stress, many_keys_from_several_threads, .timeout = 300)
{
    scenario(0);
}

Test(stress, hot_keys, .timeout = 300)
{
    scenario(1);
}

Test(stress, timeouts_withdrawals_and_drains, .timeout = 300)
{
    scenario(2);
}

Test(stress, one_slot, .timeout = 300)
{
    scenario(3);
}

Test(stress, fair_shares, .timeout = 300)
{
    scenario(4);
}
