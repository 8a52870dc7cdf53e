/* Deadline timers over h2o's fixed-length timeout lists: never early, in deadline order,
 * cancel and re-arm. Runs a real h2o loop, bounded by a loop-time guard. */
#include <criterion/criterion.h>
#include "gateway/internal.h"

typedef struct probe {
    mg_timer_t timer;
    uint64_t set_at, delay, fired_at;
    int fired;
} probe_t;

static h2o_loop_t *loop;
static mg_timers_t timers;
static probe_t probes[5];
static int order[5], num_fired;

static void setup(void)
{
    loop = h2o_evloop_create();
    mg_timers_init(&timers, loop);
    memset(probes, 0, sizeof(probes));
    num_fired = 0;
}

TestSuite(timer, .init = setup);

static void on_fire(mg_timer_t *timer)
{
    probe_t *p = H2O_STRUCT_FROM_MEMBER(probe_t, timer, timer);
    p->fired++;
    p->fired_at = h2o_now(loop);
    order[num_fired++ % 5] = (int)(p - probes);
}

static void arm(size_t i, uint64_t delay)
{
    mg_timer_init(&probes[i].timer, &timers, on_fire);
    probes[i].delay = delay;
    probes[i].set_at = h2o_now(loop);
    mg_timer_set(&probes[i].timer, delay);
}

/* Runs the loop for `ms` of loop time, or until `count` timers fired. */
static void run(uint64_t ms, int count)
{
    uint64_t start = h2o_now(loop);
    while (num_fired < count && h2o_now(loop) - start < ms)
        h2o_evloop_run(loop, 10);
}

Test(timer, fires_once_never_early_and_in_deadline_order)
{
    static const uint64_t delays[] = {1234, 3, 0, 37, 260};
    for (size_t i = 0; i < 5; i++)
        arm(i, delays[i]);
    run(5000, 5);
    static const int expected_order[] = {2, 1, 3, 4, 0};
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(probes[i].fired, 1, "timer %zu fired %d times", i, probes[i].fired);
        cr_expect_geq(probes[i].fired_at, probes[i].set_at + probes[i].delay, "timer %zu fired early", i);
        cr_expect_eq(order[i], expected_order[i]);
    }
}

Test(timer, cancelled_timer_never_fires_and_rearming_replaces_the_deadline)
{
    arm(0, 20);
    arm(1, 5);
    mg_timer_cancel(&probes[0].timer);
    cr_expect(!mg_timer_is_set(&probes[0].timer));
    arm(2, 2000);
    mg_timer_set(&probes[2].timer, 40); /* the 2 s deadline is gone */
    run(5000, 2);
    run(100, 3); /* give the cancelled one a chance to misfire */
    cr_expect_eq(probes[0].fired, 0, "a cancelled timer fired");
    cr_expect_eq(probes[1].fired, 1);
    cr_expect_eq(probes[2].fired, 1);
    cr_expect_lt(probes[2].fired_at, probes[2].set_at + 2000, "re-arming kept the old deadline");
}
