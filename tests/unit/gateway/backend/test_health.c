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

/* ---------------------------------------------------------------------------------------
 * Slow start, on the fake clock
 */

Test(health, slow_start_ramps_the_weight_from_each_return)
{
    fixture_t f;
    setup(&f, "s", 3, MG_BALANCE_ROUND_ROBIN);
    const mg_server_conf_t *s = &f.servers[2];
    uint64_t left = 1;
    cr_expect_eq(mg_server_weight_permille(s, fake_now, &left), 1000, "off without slow_start");
    f.b.slow_start_ms = 10000;
    cr_expect_eq(mg_server_weight_permille(s, fake_now, &left), 1000, "a server in service from the start is not ramped");
    cr_expect_eq(left, 0);

    /* enabled after a disable: 10% at once, linear to 100% at slow_start */
    mg_server_set_admin(s, MG_SERVER_ADMIN_DISABLED);
    fake_now += 60000;
    mg_server_set_admin(s, MG_SERVER_ADMIN_ENABLED);
    uint64_t back = fake_now;
    cr_expect_eq(mg_server_weight_permille(s, back, &left), 100);
    cr_expect_eq(left, 10000);
    cr_expect_eq(mg_server_weight_permille(s, back + 5000, &left), 550);
    cr_expect_eq(left, 5000);
    cr_expect_eq(mg_server_weight_permille(s, back + 9999, NULL), 999);
    cr_expect_eq(mg_server_weight_permille(s, back + 10000, &left), 1000);
    cr_expect_eq(left, 0);
    mg_server_set_admin(s, MG_SERVER_ADMIN_ENABLED); /* enabled again: it was not out, nothing restarts */
    cr_expect_eq(mg_server_weight_permille(s, back + 10000, NULL), 1000);
    mg_server_set_admin(s, MG_SERVER_ADMIN_DRAINING);
    fake_now = back + 20000;
    mg_server_set_admin(s, MG_SERVER_ADMIN_ENABLED);
    cr_expect_eq(mg_server_weight_permille(s, fake_now, NULL), 100, "a drain ends like a disable");

    /* an ejection: the ramp starts when it ends */
    fake_now += 20000;
    fail_n(s, 5, MG_ATTEMPT_NOT_CONNECTED);
    uint64_t until = 0;
    cr_assert_eq(mg_server_state(s, fake_now, &until), MG_SERVER_EJECTED);
    cr_expect_eq(mg_server_weight_permille(s, until, NULL), 100);
    cr_expect_eq(mg_server_weight_permille(s, until + 2500, NULL), 325);
    cr_expect_eq(mg_server_weight_permille(s, until + 10000, NULL), 1000);

    /* the active checks find it healthy again: from then */
    mg_server_health_t *h = s->health;
    fake_now = until + 20000;
    for (int i = 0; i < 3; i++) {
        mg__health_check_due(h, fake_now, 1000);
        mg__health_check_done(h, 0, 503, 2, 3, fake_now);
    }
    cr_assert_eq(state(s), MG_SERVER_UNHEALTHY);
    fake_now += 1000;
    mg__health_check_due(h, fake_now, 1000);
    cr_expect_eq(mg__health_check_done(h, 1, 200, 2, 3, fake_now), 0);
    fake_now += 1000;
    mg__health_check_due(h, fake_now, 1000);
    cr_expect_eq(mg__health_check_done(h, 1, 200, 2, 3, fake_now), 1);
    cr_expect_eq(mg_server_weight_permille(s, fake_now, NULL), 100);
    cr_expect_eq(mg_server_weight_permille(s, fake_now + 1000, NULL), 190);
    cr_expect_eq(mg_server_weight_permille(&f.servers[0], fake_now, NULL), 1000, "the others are not touched");
}

/* Shares of `n` first choices among the fixture's 3 servers. */
static void shares(fixture_t *f, size_t n, double out[3])
{
    size_t seen[3] = {0};
    for (size_t i = 0; i < n; i++) {
        size_t first = mg_backend_first_server(&f->b, MG_STR("GET"));
        cr_assert(first < 3);
        seen[first]++;
    }
    for (size_t i = 0; i < 3; i++)
        out[i] = (double)seen[i] / (double)n;
}

/* Under round_robin and least_request (idle: the draws decide), a server ramping with factor p
 * among two at full weight gets p / (2 + p) of the requests. */
static void expect_ramped_shares(mg_balance_t balance)
{
    fixture_t f;
    setup(&f, "r", 3, balance);
    f.b.slow_start_ms = 10000;
    mg_server_set_admin(&f.servers[2], MG_SERVER_ADMIN_DISABLED);
    fake_now += 1000;
    mg_server_set_admin(&f.servers[2], MG_SERVER_ADMIN_ENABLED);
    uint64_t back = fake_now;
    const uint64_t at[] = {0, 5000, 10000, 60000};
    const double factor[] = {0.1, 0.55, 1, 1};
    for (size_t k = 0; k < 4; k++) {
        fake_now = back + at[k];
        double got[3];
        shares(&f, 30000, got);
        double want = factor[k] / (2 + factor[k]);
        cr_expect(got[2] > want - 0.015 && got[2] < want + 0.015, "%s at +%llu ms: %.3f, expected %.3f", mg_balance_name(balance),
                  (unsigned long long)at[k], got[2], want);
        cr_expect(got[0] > got[1] - 0.02 && got[0] < got[1] + 0.02, "the others share the rest evenly: %.3f %.3f", got[0], got[1]);
    }
}

Test(health, slow_start_shares_under_round_robin)
{
    expect_ramped_shares(MG_BALANCE_ROUND_ROBIN);
}

Test(health, slow_start_shares_under_least_request)
{
    expect_ramped_shares(MG_BALANCE_LEAST_REQUEST);
}

Test(health, slow_start_a_ramping_server_alone_still_gets_its_requests)
{
    fixture_t f;
    setup(&f, "a", 3, MG_BALANCE_ROUND_ROBIN);
    f.b.slow_start_ms = 10000;
    mg_server_set_admin(&f.servers[0], MG_SERVER_ADMIN_DISABLED);
    mg_server_set_admin(&f.servers[1], MG_SERVER_ADMIN_DISABLED);
    mg_server_set_admin(&f.servers[2], MG_SERVER_ADMIN_DISABLED);
    fake_now += 1000;
    mg_server_set_admin(&f.servers[2], MG_SERVER_ADMIN_ENABLED);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(mg_backend_first_server(&f.b, MG_STR("GET")), 2, "the only server in service takes every request");
}

Test(health, slow_start_for_a_server_a_reload_adds_not_for_the_first_configuration)
{
    fixture_t f;
    setup(&f, "n2", 2, MG_BALANCE_ROUND_ROBIN);
    f.b.slow_start_ms = 10000;
    cr_expect_eq(mg_server_weight_permille(&f.servers[1], fake_now, NULL), 1000);
    /* the next configuration adds a third server */
    static char url[] = "http://127.0.0.1:9";
    f.servers[2] = (mg_server_conf_t){.url = url, .weight = 1, .backend = &f.b};
    f.schedule[2] = 2;
    f.b.num_servers = f.b.schedule_len = 3;
    fake_now += 5000;
    cr_assert_eq(mg_backend_bind_health(&f.conf), 0);
    cr_expect_eq(mg_server_weight_permille(&f.servers[2], fake_now, NULL), 100, "a server the reload added ramps up");
    cr_expect_eq(mg_server_weight_permille(&f.servers[0], fake_now, NULL), 1000, "the servers it kept do not");
}

/* ---------------------------------------------------------------------------------------
 * Active and passive checks together
 */

Test(health, a_passing_active_check_does_not_end_an_ejection)
{
    fixture_t f;
    setup(&f, "ap", 2, MG_BALANCE_ROUND_ROBIN);
    const mg_server_conf_t *s = &f.servers[0];
    mg_server_health_t *h = s->health;
    fail_n(s, 5, MG_ATTEMPT_NOT_CONNECTED);
    uint64_t until = 0;
    cr_assert_eq(mg_server_state(s, fake_now, &until), MG_SERVER_EJECTED);
    for (int i = 0; i < 5; i++) {
        mg__health_check_due(h, fake_now += 1000, 1000);
        cr_expect_eq(mg__health_check_done(h, 1, 200, 1, 1, fake_now), 0);
        cr_expect_eq(state(s), MG_SERVER_EJECTED, "check %d passed: the ejection still runs", i);
    }
    /* failing checks meanwhile: when the ejection ends, the active verdict keeps it out */
    mg__health_check_due(h, fake_now += 1000, 1000);
    cr_expect_eq(mg__health_check_done(h, 0, 500, 1, 1, fake_now), -1);
    fake_now = until;
    cr_expect_eq(state(s), MG_SERVER_UNHEALTHY);
    mg__health_check_due(h, fake_now, 1000);
    cr_expect_eq(mg__health_check_done(h, 1, 200, 1, 1, fake_now), 1);
    cr_expect_eq(state(s), MG_SERVER_HEALTHY);
}

/* ---------------------------------------------------------------------------------------
 * Response times
 */

Test(health, response_heads_fall_in_their_buckets)
{
    fixture_t f;
    setup(&f, "rt", 2, MG_BALANCE_ROUND_ROBIN);
    static const uint64_t bounds[MG_SERVER_HEAD_BUCKETS] = MG_SERVER_HEAD_BOUNDS_US;
    mg_server_observe_head(&f.servers[0], 0);
    mg_server_observe_head(&f.servers[0], 1000);     /* on a bound: in it (le) */
    mg_server_observe_head(&f.servers[0], 1001);     /* just past: the next one */
    mg_server_observe_head(&f.servers[0], 300000);   /* 0.3 s: the 0.5 s bucket */
    mg_server_observe_head(&f.servers[0], 60000000); /* past the last bound: only the count */
    mg_server_observe_head(NULL, 5);
    mg_server_stats_t st, other;
    mg_server_stats(&f.servers[0], &st);
    mg_server_stats(&f.servers[1], &other);
    cr_expect_eq(bounds[0], 1000);
    cr_expect_eq(st.head_buckets[0], 2);
    cr_expect_eq(st.head_buckets[1], 1);
    cr_expect_eq(bounds[8], 500000);
    cr_expect_eq(st.head_buckets[8], 1);
    uint64_t in_buckets = 0;
    for (size_t i = 0; i < MG_SERVER_HEAD_BUCKETS; i++)
        in_buckets += st.head_buckets[i];
    cr_expect_eq(in_buckets, 4);
    cr_expect_eq(st.head_count, 5);
    cr_expect_eq(st.head_sum_us, 0 + 1000 + 1001 + 300000 + 60000000);
    cr_expect_eq(other.head_count, 0, "per server");
}
