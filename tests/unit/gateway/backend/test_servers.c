/* gateway/backend/servers.c: the server of each attempt, and whether a failed attempt may go on. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/backend/internal.h"

/* A backend of `n` servers (at most 4) with a round-robin schedule as the config loader makes it. */
typedef struct fixture {
    mg_server_conf_t servers[4];
    size_t schedule[8];
    mg_backend_conf_t b;
} fixture_t;

static void setup_backend(fixture_t *f, size_t n, mg_balance_t balance, const size_t *schedule, size_t schedule_len)
{
    static char *urls[] = {"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4"};
    memset(f, 0, sizeof(*f));
    for (size_t i = 0; i < n; i++)
        f->servers[i] = (mg_server_conf_t){.url = urls[i], .weight = 1};
    memcpy(f->schedule, schedule, schedule_len * sizeof(schedule[0]));
    f->b.servers = f->servers;
    f->b.num_servers = n;
    f->b.schedule = f->schedule;
    f->b.schedule_len = schedule_len;
    f->b.balance = balance;
    f->b.retries = 1;
    atomic_init(&f->b.next, 0);
}

Test(servers, round_robin_follows_the_weighted_schedule)
{
    fixture_t f;
    const size_t schedule[] = {0, 1, 0, 2}; /* server 0 has weight 2 */
    setup_backend(&f, 3, MG_BALANCE_ROUND_ROBIN, schedule, 4);
    size_t seen[3] = {0};
    for (int i = 0; i < 400; i++) {
        size_t first = mg_backend_first_server(&f.b, MG_STR(i % 2 ? "GET" : "POST"));
        cr_assert_eq(first, schedule[i % 4], "request %d", i);
        seen[first]++;
    }
    cr_expect_eq(seen[0], 200);
    cr_expect_eq(seen[1], 100);
    cr_expect_eq(seen[2], 100);
}

Test(servers, primary_for_writes_pins_writes_and_balances_reads)
{
    fixture_t f;
    const size_t schedule[] = {0, 1, 2};
    setup_backend(&f, 3, MG_BALANCE_PRIMARY_FOR_WRITES, schedule, 3);
    f.b.primary_index = 2;
    const char *writes[] = {"POST", "PUT", "PATCH", "DELETE"};
    for (int i = 0; i < 8; i++)
        cr_expect_eq(mg_backend_first_server(&f.b, mg_str(writes[i % 4], strlen(writes[i % 4]))), 2);
    /* the writes did not move the reads' cursor */
    for (int i = 0; i < 6; i++)
        cr_expect_eq(mg_backend_first_server(&f.b, MG_STR("GET")), (size_t)(i % 3));
}

Test(servers, first_available_always_starts_on_the_first)
{
    fixture_t f;
    const size_t schedule[] = {0, 1};
    setup_backend(&f, 2, MG_BALANCE_FIRST_AVAILABLE, schedule, 2);
    for (int i = 0; i < 5; i++)
        cr_expect_eq(mg_backend_first_server(&f.b, MG_STR(i % 2 ? "GET" : "POST")), 0);
}

Test(servers, attempts_walk_on_from_the_first_choice_round_the_list)
{
    fixture_t f;
    const size_t schedule[] = {0, 1, 2};
    setup_backend(&f, 3, MG_BALANCE_ROUND_ROBIN, schedule, 3);
    for (size_t first = 0; first < 3; first++) {
        for (unsigned attempt = 0; attempt < 3; attempt++)
            cr_expect_eq(mg_backend_server(&f.b, first, attempt), &f.servers[(first + attempt) % 3], "first %zu attempt %u", first,
                         attempt);
        /* each server once: a walk never comes back to where it started */
        cr_expect_null(mg_backend_server(&f.b, first, 3));
    }
}

Test(servers, may_retry_is_bounded_by_retries_servers_and_method)
{
    fixture_t f;
    const size_t schedule[] = {0, 1, 2};
    setup_backend(&f, 3, MG_BALANCE_ROUND_ROBIN, schedule, 3);
    f.b.retries = 5;
    /* three servers: at most two retries, whatever `retries` says */
    cr_expect(mg_backend_may_retry(&f.b, 0, MG_STR("GET")));
    cr_expect(mg_backend_may_retry(&f.b, 1, MG_STR("GET")));
    cr_expect(!mg_backend_may_retry(&f.b, 2, MG_STR("GET")));
    /* `retries` bounds them too */
    f.b.retries = 1;
    cr_expect(mg_backend_may_retry(&f.b, 0, MG_STR("GET")));
    cr_expect(!mg_backend_may_retry(&f.b, 1, MG_STR("GET")));
    f.b.retries = 0;
    cr_expect(!mg_backend_may_retry(&f.b, 0, MG_STR("GET")));
    /* a request a second server must not see is never retried */
    f.b.retries = 2;
    cr_expect(!mg_backend_may_retry(&f.b, 0, MG_STR("POST")));
    cr_expect(!mg_backend_may_retry(&f.b, 0, MG_STR("PATCH")));
    cr_expect(mg_backend_may_retry(&f.b, 0, MG_STR("PUT")));
    /* one server: nowhere to go */
    setup_backend(&f, 1, MG_BALANCE_ROUND_ROBIN, schedule, 1);
    f.b.retries = 3;
    cr_expect(!mg_backend_may_retry(&f.b, 0, MG_STR("GET")));
}

Test(servers, a_write_pinned_to_the_primary_is_never_retried)
{
    fixture_t f;
    const size_t schedule[] = {0, 1, 2};
    setup_backend(&f, 3, MG_BALANCE_PRIMARY_FOR_WRITES, schedule, 3);
    f.b.retries = 2;
    cr_expect(!mg_backend_may_retry(&f.b, 0, MG_STR("PUT")));
    cr_expect(!mg_backend_may_retry(&f.b, 0, MG_STR("DELETE")));
    cr_expect(mg_backend_may_retry(&f.b, 0, MG_STR("GET")));
}

Test(servers, method_classes)
{
    const char *idem[] = {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"};
    for (size_t i = 0; i < 6; i++)
        cr_expect(mg_method_is_idempotent(mg_str(idem[i], strlen(idem[i]))), "%s", idem[i]);
    cr_expect(!mg_method_is_idempotent(MG_STR("POST")));
    cr_expect(!mg_method_is_idempotent(MG_STR("PATCH")));
    cr_expect(!mg_method_is_idempotent(MG_STR("get")));
    cr_expect(!mg_method_is_idempotent(MG_STR("GETX")));
    const char *writes[] = {"POST", "PUT", "PATCH", "DELETE"};
    for (size_t i = 0; i < 4; i++)
        cr_expect(mg_method_is_write(mg_str(writes[i], strlen(writes[i]))), "%s", writes[i]);
    cr_expect(!mg_method_is_write(MG_STR("GET")));
    cr_expect(!mg_method_is_write(MG_STR("HEAD")));
}

/* ---------------------------------------------------------------------------------------
 * balance: hash and least_request
 */

/* A hash backend of `n` servers (at most 8) named by port, its ring built as the loader does. */
typedef struct ring_fixture {
    mg_server_conf_t servers[8];
    char urls[8][32];
    size_t schedule[8];
    mg_backend_conf_t b;
} ring_fixture_t;

static void setup_ring(ring_fixture_t *f, const unsigned *ports, size_t n)
{
    memset(f, 0, sizeof(*f));
    for (size_t i = 0; i < n; i++) {
        snprintf(f->urls[i], sizeof(f->urls[i]), "http://10.0.0.%u:80", ports[i]);
        f->servers[i] = (mg_server_conf_t){.url = f->urls[i], .weight = 1, .backend = &f->b};
        f->schedule[i] = i;
    }
    f->b.servers = f->servers;
    f->b.num_servers = n;
    f->b.schedule = f->schedule;
    f->b.schedule_len = n;
    f->b.balance = MG_BALANCE_HASH;
    atomic_init(&f->b.next, 0);
    cr_assert_eq(mg_backend_build_ring(&f->b), 0);
}

/* The url of the server key `k` goes to. */
static const char *server_of_key(ring_fixture_t *f, unsigned k)
{
    char key[32];
    snprintf(key, sizeof(key), "tenant-%u", k);
    uint64_t h = mg_ring_hash(key, strlen(key), 0);
    size_t i = mg_backend_first_server_keyed(&f->b, MG_STR("GET"), &h);
    cr_assert_lt(i, f->b.num_servers);
    return f->servers[i].url;
}

#define KEYS 20000

Test(servers, hash_moves_about_one_key_in_n_when_a_server_comes_or_goes)
{
    static const unsigned ports[] = {11, 12, 13, 14, 15, 16};
    static const char *before[KEYS];
    for (size_t n = 3; n <= 5; n++) {
        ring_fixture_t small, big;
        setup_ring(&small, ports, n);
        setup_ring(&big, ports, n + 1); /* one server added (or, read the other way, removed) */
        size_t moved = 0, per_server[8] = {0};
        for (unsigned k = 0; k < KEYS; k++) {
            before[k] = server_of_key(&small, k);
            const char *after = server_of_key(&big, k);
            if (strcmp(before[k], after) != 0) {
                moved++;
                cr_expect_str_eq(after, big.urls[n], "a key only moves to the new server");
            }
            for (size_t i = 0; i <= n; i++)
                per_server[i] += strcmp(after, big.urls[i]) == 0;
        }
        double share = (double)moved / KEYS, ideal = 1.0 / (double)(n + 1);
        cr_expect(share <= 1.5 * ideal && share >= 0.5 * ideal, "%zu -> %zu servers: %.3f of the keys moved (1/N = %.3f)", n, n + 1,
                  share, ideal);
        for (size_t i = 0; i <= n; i++) /* and the keys are spread evenly */
            cr_expect(per_server[i] > KEYS * ideal * 0.7 && per_server[i] < KEYS * ideal * 1.3, "server %zu has %zu keys", i,
                      per_server[i]);
        free(small.b.ring);
        free(big.b.ring);
    }
}

Test(servers, hash_keys_of_a_server_out_go_to_the_next_and_come_back)
{
    static const unsigned ports[] = {21, 22, 23, 24};
    ring_fixture_t f;
    setup_ring(&f, ports, 4);
    static const char *before[KEYS];
    for (unsigned k = 0; k < KEYS; k++)
        before[k] = server_of_key(&f, k);
    f.b.panic = 0;
    mg_config_t conf = {.backends = &f.b, .num_backends = 1};
    f.b.name = "ring";
    cr_assert_eq(mg_backend_bind_health(&conf), 0);
    mg_server_set_admin(&f.servers[1], MG_SERVER_ADMIN_DISABLED);
    for (unsigned k = 0; k < KEYS; k++) {
        const char *now = server_of_key(&f, k);
        if (before[k] != f.urls[1])
            cr_assert_eq(now, before[k], "key %u moved though its server is in", k);
        else
            cr_assert_neq(now, f.urls[1], "key %u stays on a server out", k);
    }
    mg_server_set_admin(&f.servers[1], MG_SERVER_ADMIN_ENABLED);
    for (unsigned k = 0; k < KEYS; k++)
        cr_assert_eq(server_of_key(&f, k), before[k], "key %u did not come back", k);
    /* without a key: round robin */
    size_t seen[4] = {0};
    for (int i = 0; i < 40; i++)
        seen[mg_backend_first_server(&f.b, MG_STR("GET"))]++;
    cr_expect(seen[0] == 10 && seen[1] == 10 && seen[2] == 10 && seen[3] == 10);
    free(f.b.ring);
}

Test(servers, least_request_prefers_fewer_in_flight_per_weight)
{
    fixture_t f;
    const size_t schedule[] = {0, 1, 1, 2}; /* server 1 has weight 2 */
    setup_backend(&f, 3, MG_BALANCE_LEAST_REQUEST, schedule, 4);
    f.servers[1].weight = 2;
    for (size_t i = 0; i < 3; i++)
        f.servers[i].backend = &f.b;
    f.b.name = "lr";
    mg_config_t conf = {.backends = &f.b, .num_backends = 1};
    cr_assert_eq(mg_backend_bind_health(&conf), 0);

    /* all idle: the draws follow the weights (server 1 about half the time) */
    size_t seen[3] = {0};
    for (int i = 0; i < 4000; i++)
        seen[mg_backend_first_server(&f.b, MG_STR("GET"))]++;
    cr_expect(seen[1] > 1700 && seen[1] < 2300 && seen[0] > 700 && seen[2] > 700, "%zu %zu %zu", seen[0], seen[1], seen[2]);

    /* server 0 busy: it only wins a draw against itself */
    for (int i = 0; i < 10; i++)
        mg_server_attempt_started(&f.servers[0]);
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < 4000; i++)
        seen[mg_backend_first_server(&f.b, MG_STR("GET"))]++;
    cr_expect_eq(seen[0], 0, "the busy server got %zu of 4000: it is always drawn with an idle one", seen[0]);

    /* 2 in flight on server 1 (weight 2: 1 per unit) beat 2 on server 2 (weight 1); idle server 0
     * wins whenever drawn (7/12 of the pairs), server 2 never (it is always drawn with a better one) */
    for (int i = 0; i < 10; i++)
        mg_server_attempt_ended(&f.servers[0]);
    mg_server_attempt_started(&f.servers[1]);
    mg_server_attempt_started(&f.servers[1]);
    mg_server_attempt_started(&f.servers[2]);
    mg_server_attempt_started(&f.servers[2]);
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < 4000; i++)
        seen[mg_backend_first_server(&f.b, MG_STR("GET"))]++;
    cr_expect(seen[0] > 2100 && seen[0] < 2600, "%zu %zu %zu", seen[0], seen[1], seen[2]);
    cr_expect(seen[1] > 1400 && seen[1] < 1900, "%zu %zu %zu", seen[0], seen[1], seen[2]);
    cr_expect_eq(seen[2], 0, "%zu %zu %zu", seen[0], seen[1], seen[2]);
}

Test(servers, retry_on_budget_and_backoff)
{
    fixture_t f;
    const size_t schedule[] = {0, 1, 2};
    setup_backend(&f, 3, MG_BALANCE_ROUND_ROBIN, schedule, 3);
    f.b.retries = 2;
    f.b.retry_on = MG_RETRY_CONNECT_FAILURE;
    cr_expect(mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_NOT_CONNECTED, 0));
    cr_expect(mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_CONNECT_TIMEOUT, 0));
    cr_expect(!mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_FAILED, 0), "reset: not by default");
    cr_expect(!mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_OK, 503), "503: not by default");
    f.b.retry_on = MG_RETRY_RESET | MG_RETRY_503;
    cr_expect(!mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_NOT_CONNECTED, 0));
    cr_expect(mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_FAILED, 0));
    cr_expect(mg_backend_should_retry(&f.b, 1, MG_STR("GET"), MG_ATTEMPT_OK, 503));
    cr_expect(!mg_backend_should_retry(&f.b, 2, MG_STR("GET"), MG_ATTEMPT_OK, 503), "retries: 2");
    cr_expect(!mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_OK, 502));
    cr_expect(!mg_backend_should_retry(&f.b, 0, MG_STR("POST"), MG_ATTEMPT_OK, 503), "never a POST");
    cr_expect(!mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_TIMED_OUT, 0), "a timeout leaves no time");

    /* budget: 20% of the attempts in flight, but 3 retries may always run */
    f.b.retry_budget_percent = 20;
    atomic_store(&f.b.retries_running, 2);
    cr_expect(mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_FAILED, 0));
    atomic_store(&f.b.retries_running, 3);
    cr_expect(!mg_backend_should_retry(&f.b, 0, MG_STR("GET"), MG_ATTEMPT_FAILED, 0), "no attempts in flight: 3 at most");

    /* backoff: doubled per retry, jittered between half and one and a half */
    cr_expect_eq(mg_backend_retry_backoff_ms(&f.b, 1), 0, "none by default");
    f.b.retry_backoff_ms = 25;
    for (int i = 0; i < 200; i++) {
        uint64_t one = mg_backend_retry_backoff_ms(&f.b, 1), two = mg_backend_retry_backoff_ms(&f.b, 2);
        cr_expect(one >= 12 && one <= 37, "%llu", (unsigned long long)one);
        cr_expect(two >= 25 && two <= 75, "%llu", (unsigned long long)two);
    }
}
