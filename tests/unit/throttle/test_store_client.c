/*
 * The store client on a real redis-server, driven by the test's poll() loop (as the gateway's
 * h2o loop will drive it): decisions and their fields, one write per loop turn, NOSCRIPT, AUTH
 * and SELECT, a Redis that stops answering (SIGSTOP) or dies (SIGKILL) and comes back, the
 * failure policies, cancel and free with decisions pending, and four clients on four threads
 * sharing quotas: never more than N admissions in any window, on Redis's clock.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include "store_harness.h"

static rs_server_t server;

static void start_with(const char *const *extra)
{
    const char *why;
    if (!rs_available(&why))
        cr_skip_test("%s", why);
    cr_assert_eq(rs_start(&server, extra), 0, "redis-server did not start");
}

static void start_or_skip(void)
{
    start_with(NULL);
}

static void stop(void)
{
    rs_stop(&server);
}

static h_options_t options(void)
{
    static mg_store_addr_t addr;
    snprintf(addr.host, sizeof(addr.host), "127.0.0.1");
    addr.port = server.port;
    return (h_options_t){.servers = &addr, .num_servers = 1, .timeout_us = 50000, .policy = POLICY_REJECT};
}

/* For tests of what Redis decides rather than of timeouts: a loaded machine (the ASan build beside
 * other jobs) can take longer than 50 ms to answer a pipeline of 256. */
static h_options_t patient_options(void)
{
    h_options_t o = options();
    o.timeout_us = 1000000;
    return o;
}

static const mg_quota_t TEN_SECONDS_FIVE = {5, 10000000};

Test(store_client, decisions_before_the_connection_is_up_wait_for_it, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    ask_t a;
    h_options_t o = patient_options();
    h_init(&h, &o);
    h_ask(&h, &a, "acme", "t", TEN_SECONDS_FIVE);
    cr_expect_eq(a.answered, 0, "queued behind the handshake, not answered by the policy");
    h_wait_answers(&h, 1, 2000);
    cr_expect_eq(a.r.failure, MG_STORE_OK);
    cr_expect(a.r.decision.admitted);
    cr_expect_eq(a.r.decision.remaining, 4);
    cr_expect_eq(tl_watching(h.loop), 1, "one connection per client");
    cr_expect_eq(rs_integer(&server, "EXISTS mg:{acme}t"), 1, "the key is prefix {tag} rest");
    h_fini(&h);
}

Test(store_client, decisions_of_one_turn_leave_in_one_write, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    ask_t a[256];
    h_options_t o = patient_options();
    h_init(&h, &o);
    h_wait_connected(&h);
    mg_store_stats_t before = h_stats(&h);
    for (int i = 0; i < 10; i++)
        h_ask(&h, &a[i], "acme", "t", TEN_SECONDS_FIVE);
    h_wait_answers(&h, 10, 2000);
    mg_store_stats_t after = h_stats(&h);
    cr_expect_eq(after.flushes - before.flushes, 1, "10 decisions of one turn: one write");
    cr_expect_eq(after.commands - before.commands, 10);
    cr_expect_eq(after.shared - before.shared, 10);
    for (int i = 0; i < 10; i++) {
        cr_expect_eq(a[i].r.failure, MG_STORE_OK);
        cr_expect_eq(a[i].r.decision.admitted, i < 5, "decision %d, in the order sent", i);
        cr_expect_eq(a[i].r.decision.remaining, i < 5 ? (uint32_t)(4 - i) : 0);
        cr_expect_eq(a[i].r.decision.limit, 5);
        if (i >= 5)
            cr_expect(a[i].r.decision.retry_after_us > 9000000 && a[i].r.decision.retry_after_us <= 10000000);
        if (i > 0 && i < 5)
            cr_expect(a[i].r.decision.at_us >= a[i - 1].r.decision.at_us, "Redis's clock, in order");
    }
    before = after;
    for (int i = 0; i < 256; i++) {
        char tag[16];
        snprintf(tag, sizeof(tag), "t%d", i % 50);
        h_ask(&h, &a[i], tag, "t", TEN_SECONDS_FIVE);
    }
    h_wait_answers(&h, 266, 2000);
    after = h_stats(&h);
    cr_expect(after.flushes - before.flushes <= 2, "256 decisions of one turn: %llu writes",
              (unsigned long long)(after.flushes - before.flushes));
    cr_expect_eq(after.shared - before.shared, 256);
    h_fini(&h);
}

Test(store_client, noscript_is_answered_by_sending_the_script, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    ask_t a;
    h_options_t o = options();
    h_init(&h, &o);
    h_wait_connected(&h);
    redisReply *r = rs_command(&server, "SCRIPT FLUSH");
    cr_assert_not_null(r);
    freeReplyObject(r);
    h_ask(&h, &a, "acme", "t", TEN_SECONDS_FIVE);
    h_wait_answers(&h, 1, 2000);
    cr_expect_eq(a.r.failure, MG_STORE_OK, "decided after NOSCRIPT");
    cr_expect_eq(h_stats(&h).noscript, 1);
    h_ask(&h, &a, "acme", "t", TEN_SECONDS_FIVE);
    h_wait_answers(&h, 2, 2000);
    cr_expect_eq(a.r.failure, MG_STORE_OK);
    cr_expect_eq(a.r.decision.remaining, 3, "the same key, counted once per decision");
    cr_expect_eq(h_stats(&h).noscript, 1, "EVAL loaded it again: EVALSHA works from then on");
    h_fini(&h);
}

Test(store_client, retarget_keeps_the_connection_for_the_same_servers, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    ask_t a;
    const char *err;
    h_options_t o = options();
    h_init(&h, &o);
    h_wait_connected(&h);
    mg_store_conf_t same = {.servers = o.servers, .num_servers = 1, .timeout_us = 80000, .key_prefix = "v2:"};
    mg_store_t *next = mg_store_new(&same, &err);
    cr_assert_eq(mg_store_client_retarget(h.client, next), 0);
    mg_store_free(h.store);
    h.store = next;
    h_ask(&h, &a, "acme", "t", TEN_SECONDS_FIVE);
    h_wait_answers(&h, 1, 2000);
    cr_expect_eq(a.r.failure, MG_STORE_OK);
    cr_expect_eq(h_stats(&h).connects, 1, "the same connection");
    cr_expect_eq(rs_integer(&server, "EXISTS v2:{acme}t"), 1, "the new prefix");
    mg_store_addr_t elsewhere = {"127.0.0.1", (uint16_t)(server.port + 1)};
    mg_store_conf_t other = {.servers = &elsewhere, .num_servers = 1, .timeout_us = 80000, .key_prefix = "v2:"};
    mg_store_t *third = mg_store_new(&other, &err);
    cr_expect_eq(mg_store_client_retarget(h.client, third), -1, "another server needs another client");
    mg_store_free(third);
    h_fini(&h);
}

static void start_with_password(void)
{
    static const char *const extra[] = {"--requirepass", "s3cret", NULL};
    start_with(extra);
}

Test(store_client, password_and_database, .init = start_with_password, .fini = stop)
{
    harness_t h;
    ask_t a;
    h_options_t o = options();
    o.password = "s3cret";
    o.db = 3;
    h_init(&h, &o);
    h_ask(&h, &a, "acme", "t", TEN_SECONDS_FIVE);
    h_wait_answers(&h, 1, 2000);
    cr_expect_eq(a.r.failure, MG_STORE_OK, "%s", h.last_event);
    redisReply *r = rs_command(&server, "AUTH s3cret");
    freeReplyObject(r);
    cr_expect_eq(rs_integer(&server, "EXISTS mg:{acme}t"), 0, "not in db 0");
    r = rs_command(&server, "SELECT 3");
    freeReplyObject(r);
    cr_expect_eq(rs_integer(&server, "EXISTS mg:{acme}t"), 1, "in db 3");
    h_fini(&h);

    o.password = "wrong";
    h_init(&h, &o);
    h_ask(&h, &a, "acme", "t", TEN_SECONDS_FIVE);
    h_wait_answers(&h, 1, 2000);
    cr_expect_neq(a.r.failure, MG_STORE_OK);
    cr_expect(a.r.latency_us < 50000, "answered by the policy without waiting out the timeout");
    cr_expect(strstr(h.last_event, "AUTH refused") != NULL, "the log says why: %s", h.last_event);
    int events = h.events;
    for (int i = 0; i < 50; i++)
        tl_run_once(h.loop, 20);
    cr_expect_eq(h.events, events, "retrying the same failure logs nothing more");
    cr_expect(!mg_store_client_shared(h.client));
    h_fini(&h);
}

/* ---- a Redis that stops answering, or dies ---- */

typedef struct run {
    harness_t *h;
    ask_t asks[10000];
    int issued;
    uint64_t max_latency;
    int shared, fallback, admitted_in_fallback[5];
} run_t;

/* Asks for 5 tenants once a millisecond for `ms` (turning the loop in between), recording
 * every answer's latency. */
static void hammer(run_t *r, int ms)
{
    static const mg_quota_t q = {30, 1000000};
    uint64_t tick = tl_now_us(), until = tick + (uint64_t)ms * 1000;
    for (; tick < until && r->issued + 5 <= 10000; tick += 1000) {
        for (int t = 0; t < 5; t++) {
            char tag[8];
            snprintf(tag, sizeof(tag), "k%d", t);
            h_ask(r->h, &r->asks[r->issued++], tag, "t", q);
        }
        while (tl_now_us() < tick + 1000)
            tl_run_once(r->h->loop, 1);
    }
}

static void settle(run_t *r)
{
    h_wait_answers(r->h, r->issued, 2000);
    for (int i = 0; i < r->issued; i++) {
        ask_t *a = &r->asks[i];
        if (a->r.latency_us > r->max_latency)
            r->max_latency = a->r.latency_us;
        if (a->r.failure == MG_STORE_OK)
            r->shared++;
        else if (a->r.decision.admitted)
            r->admitted_in_fallback[i % 5]++;
        r->fallback += a->r.failure != MG_STORE_OK;
    }
}

Test(store_client, a_redis_that_stops_answering_costs_one_timeout, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    static run_t r;
    h_options_t o = options();
    h_init(&h, &o);
    memset(&r, 0, sizeof(r));
    r.h = &h;
    h_wait_connected(&h);
    kill(server.pid, SIGSTOP);
    hammer(&r, 200);
    settle(&r);
    cr_expect_eq(r.shared, 0);
    cr_expect_eq(r.fallback, r.issued, "every decision answered by the policy");
    cr_expect(r.max_latency <= 50000 + 200000,
              "no decision waited much past the 50 ms timeout (a loaded machine runs the loop late, never a second late): %llu us",
              (unsigned long long)r.max_latency);
    mg_store_stats_t s = h_stats(&h);
    cr_expect(s.fallback[MG_STORE_TIMEOUT] >= 1 && s.fallback[MG_STORE_TIMEOUT] < (uint64_t)r.issued,
              "the first ones timed out (%llu), the rest did not wait", (unsigned long long)s.fallback[MG_STORE_TIMEOUT]);
    cr_expect(!mg_store_client_shared(h.client));
    cr_expect(strstr(h.last_event, "slow") != NULL, "%s", h.last_event);

    uint64_t resumed = tl_now_us();
    kill(server.pid, SIGCONT);
    cr_assert(tl_run_until(h.loop, h_connected, &h, 1000), "shared again within a second");
    cr_expect(tl_now_us() - resumed < 1000000);
    ask_t a;
    h_ask(&h, &a, "after", "t", TEN_SECONDS_FIVE);
    h_wait_answers(&h, r.issued + 1, 2000);
    cr_expect_eq(a.r.failure, MG_STORE_OK);
    h_fini(&h);
}

Test(store_client, a_connection_that_answers_nothing_for_long_is_made_again, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    static run_t r;
    h_options_t o = options();
    h_init(&h, &o);
    memset(&r, 0, sizeof(r));
    r.h = &h;
    h_wait_connected(&h);
    /* stopped for longer than max(1 s, 4 timeouts): the probe gets no answer, the connection is
     * closed and made again (the kernel still accepts it), its handshake waits */
    kill(server.pid, SIGSTOP);
    hammer(&r, 1600);
    settle(&r);
    cr_expect_eq(r.fallback, r.issued);
    cr_expect(r.max_latency <= 50000 + 200000, "%llu us", (unsigned long long)r.max_latency);
    cr_expect(h_stats(&h).disconnects >= 1, "the silent connection was dropped");
    cr_expect(strstr(h.last_event, "no answer") != NULL, "%s", h.last_event);
    uint64_t resumed = tl_now_us(), connects = h_stats(&h).connects;
    kill(server.pid, SIGCONT);
    cr_assert(tl_run_until(h.loop, h_connected, &h, 1000), "shared again within a second");
    cr_log_info("shared again %llu ms after SIGCONT", (unsigned long long)(tl_now_us() - resumed) / 1000);
    cr_expect(h_stats(&h).connects > connects, "on a new connection");
    h_fini(&h);
}

Test(store_client, a_redis_killed_mid_run_then_restarted, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    static run_t r;
    h_options_t o = options();
    o.policy = POLICY_LOCAL;
    o.nodes = 3;
    h_init(&h, &o);
    memset(&r, 0, sizeof(r));
    r.h = &h;
    h_wait_connected(&h);
    hammer(&r, 150);
    rs_kill(&server);
    int before_kill = r.issued;
    hammer(&r, 300);
    settle(&r);
    int shared_after = 0;
    for (int i = before_kill + 5; i < r.issued; i++)
        shared_after += r.asks[i].r.failure == MG_STORE_OK;
    cr_expect_eq(shared_after, 0, "nothing is Redis's once it is dead");
    cr_expect(r.max_latency <= 50000 + 200000, "every decision within the timeout and a little: %llu us",
              (unsigned long long)r.max_latency);
    for (int t = 0; t < 5; t++)
        cr_expect(r.admitted_in_fallback[t] == 10, "tenant %d: N / nodes = 10 admitted alone, got %d", t,
                  r.admitted_in_fallback[t]);
    cr_expect(strstr(h.last_event, "connect") != NULL, "%s", h.last_event);

    cr_expect(!mg_store_client_shared(h.client));
    uint64_t connects = h_stats(&h).connects;
    cr_assert_eq(rs_restart(&server, NULL), 0);
    uint64_t restarted = tl_now_us();
    cr_assert(tl_run_until(h.loop, h_connected, &h, 1000), "shared mode again within a second of the restart");
    cr_expect_eq(h_stats(&h).connects, connects + 1, "connected again");
    cr_log_info("shared again %llu ms after the restart", (unsigned long long)(tl_now_us() - restarted) / 1000);
    ask_t a;
    h_ask(&h, &a, "after", "t", TEN_SECONDS_FIVE);
    h_wait_answers(&h, r.issued + 1, 2000);
    cr_expect_eq(a.r.failure, MG_STORE_OK);
    cr_expect(h_stats(&h).disconnects >= 1);
    h_fini(&h);
}

Test(store_client, policies_when_nothing_listens)
{
    static const policy_t policies[] = {POLICY_ALLOW, POLICY_REJECT, POLICY_LOCAL};
    mg_store_addr_t nobody = {"127.0.0.1", 1}; /* port 1: refused */
    for (size_t p = 0; p < 3; p++) {
        harness_t h;
        ask_t a[3];
        h_options_t o = {.servers = &nobody, .num_servers = 1, .timeout_us = 200000, .policy = policies[p], .nodes = 2};
        h_init(&h, &o);
        for (int i = 0; i < 3; i++)
            h_ask(&h, &a[i], "acme", "t", (mg_quota_t){4, 1000000});
        h_wait_answers(&h, 3, 1000);
        for (int i = 0; i < 3; i++) {
            cr_expect_eq(a[i].r.failure, MG_STORE_DOWN);
            cr_expect(a[i].r.latency_us < 200000, "refused: no need to wait for the timeout");
            int want = policies[p] == POLICY_ALLOW ? 1 : policies[p] == POLICY_REJECT ? 0 : i < 2;
            cr_expect_eq(a[i].r.decision.admitted, want, "policy %zu, decision %d", p, i);
        }
        h_fini(&h);
    }
}

Test(store_client, cancel_and_free_with_decisions_pending, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    static ask_t a[60];
    h_options_t o = options();
    h_init(&h, &o);
    h_wait_connected(&h);
    for (int i = 0; i < 5; i++)
        h_ask(&h, &a[i], "acme", "t", TEN_SECONDS_FIVE);
    mg_store_cancel(a[1].call);
    mg_store_cancel(a[3].call);
    h_wait_answers(&h, 3, 2000);
    for (int i = 0; i < 20; i++)
        tl_run_once(h.loop, 5);
    cr_expect_eq(h.answered, 3);
    cr_expect(!a[1].answered && !a[3].answered, "a cancelled decision is never answered");
    cr_expect_eq(a[4].r.decision.remaining, 0, "cancelled decisions were still counted by Redis (5 in all)");

    for (int i = 5; i < 60; i++)
        h_ask(&h, &a[i], "other", "t", TEN_SECONDS_FIVE);
    a[5].again = 1; /* its callback asks again while the client is being freed */
    int answered = h.answered;
    mg_store_client_free(h.client);
    h.client = NULL;
    cr_expect_eq(h.answered, answered + 55 + 1, "each pending decision answered once by the policy, and the one asked meanwhile");
    for (int i = 6; i < 60; i++)
        cr_expect_eq(a[i].r.failure, MG_STORE_DOWN);
    mg_store_free(h.store);
    tl_loop_free(h.loop);
    mg_throttle_free(h.local);
}

/* ---- four clients on four threads, the same quotas ---- */

enum { THREADS = 4, KEYS = 3 };
static const mg_quota_t SHARED_Q = {25, 100000};

typedef struct worker {
    pthread_t thread;
    uint16_t port;
    uint64_t until;
    recorder_t rec;
} worker_t;

static void three_tenants(int k, char *tag, char *rest)
{
    snprintf(tag, 32, "k%d", k);
    snprintf(rest, 32, "t");
}

static int before_the_end(void *arg)
{
    return tl_now_us() < ((worker_t *)arg)->until;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    harness_t h;
    mg_store_addr_t addr = {"127.0.0.1", w->port};
    h_options_t o = {.servers = &addr, .num_servers = 1, .timeout_us = 2000000, .policy = POLICY_REJECT};
    h_init(&h, &o);
    h_record_run(&h, &w->rec);
    h_fini(&h);
    return NULL;
}

Test(store_client, clients_on_four_threads_never_exceed_n_in_any_window, .init = start_or_skip, .fini = stop)
{
    static worker_t w[THREADS];
    recorder_t *recs[THREADS];
    int decided = 0, fallback = 0;
    for (int i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].port = server.port;
        w[i].until = tl_now_us() + 1500000;
        w[i].rec = (recorder_t){.keys = KEYS, .key_of = three_tenants, .quota = SHARED_Q, .go_on = before_the_end, .arg = &w[i]};
        recs[i] = &w[i].rec;
        cr_assert_eq(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(w[i].thread, NULL);
        decided += w[i].rec.decided;
        fallback += w[i].rec.fallback;
    }
    cr_log_info("%d decisions, %d by the policy", decided, fallback);
    cr_expect(decided > 2000, "the clients hammered: %d decisions", decided);
    for (int k = 0; k < KEYS; k++)
        cr_expect(h_check_windows(recs, THREADS, k, SHARED_Q) >= 12 * (int)SHARED_Q.requests, "key %d admitted throughout", k);
}
