/* gateway/backend/health.c: outlier ejection on a fake clock, the servers the balancers pass over,
 * panic, and the health words across reloads. */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/backend/internal.h"

static uint64_t fake_now;

static uint64_t fake_clock(void)
{
    return fake_now;
}

/* A configuration of one backend of `n` servers (at most 4), outlier on with the defaults. */
typedef struct fixture {
    mg_server_conf_t servers[4];
    size_t schedule[4];
    mg_backend_conf_t b;
    mg_config_t conf;
} fixture_t;

static void setup(fixture_t *f, const char *name, size_t n, mg_balance_t balance)
{
    static char *urls[] = {"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4"};
    memset(f, 0, sizeof(*f));
    for (size_t i = 0; i < n; i++) {
        f->servers[i] = (mg_server_conf_t){.url = urls[i], .weight = 1, .backend = &f->b};
        f->schedule[i] = i;
    }
    f->b.name = (char *)name;
    f->b.servers = f->servers;
    f->b.num_servers = n;
    f->b.schedule = f->schedule;
    f->b.schedule_len = n;
    f->b.balance = balance;
    f->b.retries = 3;
    f->b.outlier = (mg_outlier_conf_t){
        .consecutive_failures = 5, .eject_for_ms = 30000, .max_eject_for_ms = 300000, .max_ejected_percent = 50};
    atomic_init(&f->b.next, 0);
    f->conf.backends = &f->b;
    f->conf.num_backends = 1;
    mg_health_clock = fake_clock;
    fake_now = 1000000;
    cr_assert_eq(mg_backend_bind_health(&f->conf), 0);
}

static void fail_n(const mg_server_conf_t *s, unsigned n, mg_attempt_result_t result)
{
    for (unsigned i = 0; i < n; i++)
        mg_server_report(s, result, 0);
}

static mg_server_state_t state(const mg_server_conf_t *s)
{
    return mg_server_state(s, fake_now, NULL);
}

Test(health, consecutive_failures_eject_and_a_success_resets_the_count)
{
    fixture_t f;
    setup(&f, "a", 4, MG_BALANCE_ROUND_ROBIN);
    const mg_attempt_result_t kinds[] = {MG_ATTEMPT_NOT_CONNECTED, MG_ATTEMPT_CONNECT_TIMEOUT, MG_ATTEMPT_TIMED_OUT,
                                         MG_ATTEMPT_FAILED};
    for (size_t k = 0; k < 4; k++) {
        const mg_server_conf_t *s = &f.servers[k];
        fail_n(s, 4, kinds[k]);
        mg_server_report(s, MG_ATTEMPT_OK, 200); /* the server answers: the count starts again */
        fail_n(s, 4, kinds[k]);
        cr_expect_eq(state(s), MG_SERVER_HEALTHY, "kind %zu", k);
        if (k < 2) { /* at most 2 of 4 at once (max_ejected 50%) */
            cr_expect_eq(mg_server_report(s, kinds[k], 0), 1, "kind %zu", k);
            cr_expect_eq(state(s), MG_SERVER_EJECTED);
            uint64_t until = 0;
            mg_server_state(s, fake_now, &until);
            cr_expect_eq(until, fake_now + 30000);
            cr_expect_eq(mg_server_ejections(s), 1);
        }
    }
}

Test(health, not_counted_an_answer_an_abort_or_a_5xx_when_off)
{
    fixture_t f;
    setup(&f, "b", 2, MG_BALANCE_ROUND_ROBIN);
    const mg_server_conf_t *s = &f.servers[0];
    fail_n(s, 4, MG_ATTEMPT_FAILED);
    mg_server_report(s, MG_ATTEMPT_ABORTED, 0);      /* our own refusal: neither way */
    mg_server_report(s, MG_ATTEMPT_BAD_RESPONSE, 0); /* the server answered, badly: not an outage */
    fail_n(s, 4, MG_ATTEMPT_FAILED);
    cr_expect_eq(state(s), MG_SERVER_HEALTHY);
    for (int i = 0; i < 50; i++)
        mg_server_report(s, MG_ATTEMPT_OK, 503); /* consecutive_5xx is off */
    cr_expect_eq(state(s), MG_SERVER_HEALTHY);
}

Test(health, consecutive_5xx_when_set)
{
    fixture_t f;
    setup(&f, "c", 2, MG_BALANCE_ROUND_ROBIN);
    f.b.outlier.consecutive_5xx = 3;
    const mg_server_conf_t *s = &f.servers[1];
    mg_server_report(s, MG_ATTEMPT_OK, 500);
    mg_server_report(s, MG_ATTEMPT_OK, 502);
    mg_server_report(s, MG_ATTEMPT_OK, 404); /* not a 5xx: starts again */
    mg_server_report(s, MG_ATTEMPT_OK, 500);
    mg_server_report(s, MG_ATTEMPT_OK, 599);
    cr_expect_eq(state(s), MG_SERVER_HEALTHY);
    mg_server_report(s, MG_ATTEMPT_OK, 504);
    cr_expect_eq(state(s), MG_SERVER_EJECTED);
}

Test(health, repeated_ejections_double_up_to_max_and_a_success_ends_the_streak)
{
    fixture_t f;
    setup(&f, "d", 2, MG_BALANCE_ROUND_ROBIN);
    const mg_server_conf_t *s = &f.servers[0];
    const uint64_t expected[] = {30000, 60000, 120000, 240000, 300000, 300000};
    fail_n(s, 5, MG_ATTEMPT_NOT_CONNECTED);
    for (size_t i = 0; i < 6; i++) {
        uint64_t until = 0;
        cr_expect_eq(mg_server_state(s, fake_now, &until), MG_SERVER_EJECTED);
        cr_expect_eq(until - fake_now, expected[i], "ejection %zu", i);
        fake_now = until - 1;
        cr_expect_eq(state(s), MG_SERVER_EJECTED);
        fake_now = until;
        cr_expect_eq(state(s), MG_SERVER_HEALTHY, "back after ejection %zu", i);
        /* half-open: the first failure after the return ejects again */
        cr_expect_eq(mg_server_report(s, MG_ATTEMPT_CONNECT_TIMEOUT, 0), 1);
    }
    cr_expect_eq(mg_server_ejections(s), 7);
    uint64_t until = 0;
    mg_server_state(s, fake_now, &until);
    fake_now = until;
    mg_server_report(s, MG_ATTEMPT_OK, 200); /* the probe went well */
    fail_n(s, 4, MG_ATTEMPT_FAILED);
    cr_expect_eq(state(s), MG_SERVER_HEALTHY, "a new streak needs consecutive_failures again");
    mg_server_report(s, MG_ATTEMPT_FAILED, 0);
    mg_server_state(s, fake_now, &until);
    cr_expect_eq(until - fake_now, 30000, "and starts at eject_for");
}

Test(health, failures_of_attempts_started_before_the_ejection_change_nothing)
{
    fixture_t f;
    setup(&f, "e", 2, MG_BALANCE_ROUND_ROBIN);
    const mg_server_conf_t *s = &f.servers[0];
    fail_n(s, 5, MG_ATTEMPT_FAILED);
    fail_n(s, 20, MG_ATTEMPT_FAILED);
    cr_expect_eq(mg_server_ejections(s), 1);
    uint64_t until = 0;
    mg_server_state(s, fake_now, &until);
    cr_expect_eq(until - fake_now, 30000);
}

Test(health, max_ejected_bounds_the_share_at_least_one)
{
    fixture_t f;
    setup(&f, "f", 4, MG_BALANCE_ROUND_ROBIN);
    for (size_t i = 0; i < 4; i++)
        fail_n(&f.servers[i], 5, MG_ATTEMPT_NOT_CONNECTED);
    size_t ejected = 0;
    for (size_t i = 0; i < 4; i++)
        ejected += state(&f.servers[i]) == MG_SERVER_EJECTED;
    cr_expect_eq(ejected, 2, "50%% of 4");
    /* when one comes back, another may go */
    fake_now += 30000;
    fail_n(&f.servers[2], 1, MG_ATTEMPT_NOT_CONNECTED);
    cr_expect_eq(state(&f.servers[2]), MG_SERVER_EJECTED);

    fixture_t one;
    setup(&one, "g", 1, MG_BALANCE_ROUND_ROBIN);
    fail_n(&one.servers[0], 5, MG_ATTEMPT_NOT_CONNECTED);
    cr_expect_eq(state(&one.servers[0]), MG_SERVER_EJECTED, "a lone server may be ejected");

    fixture_t none;
    setup(&none, "h", 2, MG_BALANCE_ROUND_ROBIN);
    none.b.outlier.max_ejected_percent = 0;
    fail_n(&none.servers[0], 50, MG_ATTEMPT_NOT_CONNECTED);
    cr_expect_eq(state(&none.servers[0]), MG_SERVER_HEALTHY, "max_ejected: 0%% ejects nothing");
}

Test(health, every_balance_passes_over_a_server_out)
{
    const mg_balance_t balances[] = {MG_BALANCE_ROUND_ROBIN, MG_BALANCE_FIRST_AVAILABLE, MG_BALANCE_PRIMARY_FOR_WRITES};
    const char *names[] = {"i0", "i1", "i2"}; /* one name each: a bind keeps a name's state */
    for (size_t k = 0; k < 3; k++) {
        fixture_t f;
        setup(&f, names[k], 3, balances[k]);
        fail_n(&f.servers[0], 5, MG_ATTEMPT_NOT_CONNECTED);
        mg_server_set_admin(&f.servers[2], MG_SERVER_ADMIN_DISABLED);
        for (int i = 0; i < 30; i++)
            cr_expect_eq(mg_backend_first_server(&f.b, MG_STR("GET")), 1, "balance %zu", k);
        /* a retry walks past them too, and there is nothing after server 1 */
        cr_expect_null(mg_backend_server(&f.b, 1, 1));
        mg_server_set_admin(&f.servers[2], MG_SERVER_ADMIN_DRAINING);
        cr_expect_null(mg_backend_server(&f.b, 1, 1));
        mg_server_set_admin(&f.servers[2], MG_SERVER_ADMIN_ENABLED);
        cr_expect_eq(mg_backend_server(&f.b, 1, 1), &f.servers[2]);
        mg_server_set_unhealthy(&f.servers[1], 1);
        cr_expect_eq(mg_backend_first_server(&f.b, MG_STR("GET")), 2, "balance %zu", k);
    }
}

Test(health, nothing_usable_is_no_server_unless_panic)
{
    fixture_t f;
    setup(&f, "j", 2, MG_BALANCE_ROUND_ROBIN);
    f.b.outlier.max_ejected_percent = 100;
    fail_n(&f.servers[0], 5, MG_ATTEMPT_NOT_CONNECTED);
    fake_now += 10000;
    fail_n(&f.servers[1], 5, MG_ATTEMPT_NOT_CONNECTED);
    cr_expect_eq(mg_backend_first_server(&f.b, MG_STR("GET")), MG_NO_SERVER);
    cr_expect_eq(mg_backend_retry_after_ms(&f.b, fake_now), 20000, "the soonest return");
    f.b.panic = 1;
    size_t first = mg_backend_first_server(&f.b, MG_STR("GET"));
    cr_expect(first < 2);
    cr_expect_not_null(mg_backend_server(&f.b, first, 1), "panic: a retry may go to the other one");
    /* an operator's disable holds even in panic */
    mg_server_set_admin(&f.servers[0], MG_SERVER_ADMIN_DISABLED);
    mg_server_set_admin(&f.servers[1], MG_SERVER_ADMIN_DISABLED);
    cr_expect_eq(mg_backend_first_server(&f.b, MG_STR("GET")), MG_NO_SERVER);
    cr_expect_eq(mg_backend_retry_after_ms(&f.b, fake_now), 1000);
}

Test(health, a_reload_keeping_the_server_keeps_its_state)
{
    fixture_t f;
    setup(&f, "k", 3, MG_BALANCE_ROUND_ROBIN);
    fail_n(&f.servers[0], 5, MG_ATTEMPT_NOT_CONNECTED);
    mg_server_set_admin(&f.servers[1], MG_SERVER_ADMIN_DRAINING);
    mg_server_set_admin(&f.servers[2], MG_SERVER_ADMIN_DISABLED);

    /* the next configuration keeps servers 0 and 1 (in another order) and drops 2 */
    fixture_t g;
    memcpy(&g, &f, sizeof(g));
    g.servers[0] = (mg_server_conf_t){.url = f.servers[1].url, .weight = 1, .backend = &g.b};
    g.servers[1] = (mg_server_conf_t){.url = f.servers[0].url, .weight = 1, .backend = &g.b};
    g.b.servers = g.servers;
    g.b.num_servers = 2;
    g.conf.backends = &g.b;
    cr_assert_eq(mg_backend_bind_health(&g.conf), 0);
    cr_expect_eq(state(&g.servers[0]), MG_SERVER_DRAINING);
    cr_expect_eq(state(&g.servers[1]), MG_SERVER_EJECTED);

    /* and the one after brings 2 back: it starts afresh */
    cr_assert_eq(mg_backend_bind_health(&f.conf), 0);
    cr_expect_eq(state(&f.servers[2]), MG_SERVER_HEALTHY);
    cr_expect_eq(state(&f.servers[0]), MG_SERVER_EJECTED);
}

Test(health, another_backend_with_the_same_url_has_its_own_word)
{
    fixture_t f;
    setup(&f, "l", 2, MG_BALANCE_ROUND_ROBIN);
    fixture_t g;
    setup(&g, "m", 2, MG_BALANCE_ROUND_ROBIN);
    fail_n(&f.servers[0], 5, MG_ATTEMPT_NOT_CONNECTED);
    cr_expect_eq(state(&f.servers[0]), MG_SERVER_EJECTED);
    cr_expect_eq(state(&g.servers[0]), MG_SERVER_HEALTHY);
}

Test(health, active_checks_need_their_runs_in_a_row)
{
    fixture_t f;
    setup(&f, "n", 2, MG_BALANCE_ROUND_ROBIN);
    mg_server_health_t *h = f.servers[0].health;
    cr_assert(mg__health_check_due(h, fake_now, 5000));
    cr_expect(!mg__health_check_due(h, fake_now + 6000, 5000), "never two checks of a server at once");
    cr_expect_eq(mg__health_check_done(h, 0, 500, 2, 3, fake_now), 0);
    cr_expect(!mg__health_check_due(h, fake_now + 4999, 5000));
    cr_expect(mg__health_check_due(h, fake_now + 5000, 5000), "the interval runs from the last start");
    cr_expect_eq(mg__health_check_done(h, 1, 200, 2, 3, fake_now), 0); /* a pass breaks the run */
    const int runs[] = {0, 0, 0, 0, 0}, expected[] = {0, 0, -1, 0, 0};
    for (size_t i = 0; i < 5; i++) {
        mg__health_check_due(h, fake_now += 5000, 5000);
        cr_expect_eq(mg__health_check_done(h, runs[i], 0, 2, 3, fake_now), expected[i], "check %zu", i);
    }
    cr_expect_eq(state(&f.servers[0]), MG_SERVER_UNHEALTHY);
    cr_expect_eq(mg_backend_first_server(&f.b, MG_STR("GET")), 1);
    mg__health_check_due(h, fake_now += 5000, 5000);
    cr_expect_eq(mg__health_check_done(h, 1, 200, 2, 3, fake_now), 0);
    cr_expect_eq(state(&f.servers[0]), MG_SERVER_UNHEALTHY, "one pass is not `healthy: 2`");
    mg__health_check_due(h, fake_now += 5000, 5000);
    cr_expect_eq(mg__health_check_done(h, 1, 200, 2, 3, fake_now), 1);
    cr_expect_eq(state(&f.servers[0]), MG_SERVER_HEALTHY);

    /* a reload that drops the backend's health: keys clears the verdict */
    mg__health_check_due(h, fake_now += 5000, 5000);
    mg__health_check_done(h, 0, 0, 1, 1, fake_now);
    cr_expect_eq(state(&f.servers[0]), MG_SERVER_UNHEALTHY);
    cr_assert_eq(mg_backend_bind_health(&f.conf), 0);
    cr_expect_eq(state(&f.servers[0]), MG_SERVER_HEALTHY);
}
