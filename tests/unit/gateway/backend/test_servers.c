/* gateway/backend/servers.c: the server of each attempt, and whether a failed attempt may go on. */
#include <criterion/criterion.h>
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
