/* The store's settings: redis:// URLs, the checks of mg_store_new, when a client may keep its
 * connections over a reload, and the "local" failure policy (N / nodes on the node's own
 * exact limiter). No Redis needed. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "throttle/store.h"

typedef struct parsed {
    int rc;
    mg_store_addr_t addr;
    char *alloc;
    const char *password, *username, *err;
    unsigned db;
} parsed_t;

static parsed_t parse(const char *url)
{
    parsed_t p;
    memset(&p, 0, sizeof(p));
    p.rc = mg_store_parse_url(url, &p.addr, &p.alloc, &p.password, &p.username, &p.db, &p.err);
    return p;
}

Test(store_conf, urls_that_parse)
{
    parsed_t p = parse("redis://127.0.0.1:6379/0");
    cr_assert_eq(p.rc, 0, "%s", p.err);
    cr_expect_str_eq(p.addr.host, "127.0.0.1");
    cr_expect_eq(p.addr.port, 6379);
    cr_expect_eq(p.db, 0);
    cr_expect_null(p.password);
    free(p.alloc);

    p = parse("redis://cache.internal");
    cr_assert_eq(p.rc, 0);
    cr_expect_str_eq(p.addr.host, "cache.internal");
    cr_expect_eq(p.addr.port, 6379, "the default port");
    free(p.alloc);

    p = parse("redis://:s3cret@10.0.0.7:7000/5");
    cr_assert_eq(p.rc, 0);
    cr_expect_str_eq(p.password, "s3cret");
    cr_expect_null(p.username);
    cr_expect_eq(p.addr.port, 7000);
    cr_expect_eq(p.db, 5);
    free(p.alloc);

    p = parse("redis://gateway:pa:ss@w@[::1]:6380/");
    cr_assert_eq(p.rc, 0, "%s", p.err);
    cr_expect_str_eq(p.username, "gateway");
    cr_expect_str_eq(p.password, "pa:ss@w", "the password runs to the last '@'");
    cr_expect_str_eq(p.addr.host, "::1");
    cr_expect_eq(p.addr.port, 6380);
    free(p.alloc);
}

Test(store_conf, urls_that_are_refused)
{
    static const char *bad[] = {"127.0.0.1:6379", "http://127.0.0.1:6379", "rediss://127.0.0.1:6379", "redis://",   "redis://:pw@",
                                "redis://h:0",    "redis://h:65536",       "redis://h:12x",           "redis://h:", "redis://h/x",
                                "redis://[::1",   "redis://[::1]x:5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        parsed_t p = parse(bad[i]);
        cr_expect_eq(p.rc, -1, "%s was accepted", bad[i]);
        cr_expect_not_null(p.err, "%s: no message", bad[i]);
        cr_expect_null(p.alloc, "%s: nothing to free on failure", bad[i]);
    }
    parsed_t p = parse("rediss://h");
    cr_expect(strstr(p.err, "TLS") != NULL, "rediss:// says why: %s", p.err);
}

static mg_store_conf_t conf_of(const mg_store_addr_t *servers, size_t n)
{
    return (mg_store_conf_t){.servers = servers, .num_servers = n, .timeout_us = 50000, .key_prefix = "mg:"};
}

Test(store_conf, settings_checked)
{
    mg_store_addr_t one[] = {{"127.0.0.1", 6379}}, three[] = {{"10.0.0.1", 7000}, {"10.0.0.2", 7000}, {"10.0.0.3", 7000}};
    const char *err = NULL;
    mg_store_conf_t c = conf_of(one, 1);
    mg_store_t *s = mg_store_new(&c, &err);
    cr_assert_not_null(s, "%s", err);
    mg_store_free(s);

    c.key_prefix = "mg{x}:";
    cr_expect_null(mg_store_new(&c, &err), "a brace in the prefix would steal the hash tag");
    cr_expect(strstr(err, "key_prefix") != NULL);
    c = conf_of(one, 1);
    c.timeout_us = 0;
    cr_expect_null(mg_store_new(&c, &err));
    c = conf_of(one, 0);
    cr_expect_null(mg_store_new(&c, &err));
    c = conf_of(three, 3);
    c.db = 2;
    cr_expect_null(mg_store_new(&c, &err), "a Cluster has db 0 only");
    c = conf_of((mg_store_addr_t[]){{"h", 0}}, 1);
    cr_expect_null(mg_store_new(&c, &err));
}

Test(store_conf, same_servers_decides_whether_connections_survive_a_reload)
{
    mg_store_addr_t one[] = {{"127.0.0.1", 6379}}, other[] = {{"127.0.0.1", 6380}};
    const char *err;
    mg_store_conf_t ca = conf_of(one, 1), cb = conf_of(one, 1);
    cb.timeout_us = 10000;
    cb.key_prefix = "other:";
    mg_store_t *a = mg_store_new(&ca, &err), *b = mg_store_new(&cb, &err);
    cr_expect(mg_store_same_servers(a, b), "timeout and prefix may change without reconnecting");
    mg_store_free(b);
    cb = conf_of(one, 1);
    cb.password = "x";
    b = mg_store_new(&cb, &err);
    cr_expect(!mg_store_same_servers(a, b), "another password");
    mg_store_free(b);
    cb = conf_of(other, 1);
    b = mg_store_new(&cb, &err);
    cr_expect(!mg_store_same_servers(a, b), "another server");
    mg_store_free(b);
    cb = conf_of(one, 1);
    cb.db = 1;
    b = mg_store_new(&cb, &err);
    cr_expect(!mg_store_same_servers(a, b), "another db");
    mg_store_free(b);
    mg_store_free(a);
}

Test(store_conf, node_quota_is_the_floor_of_n_over_nodes)
{
    mg_quota_t q = {100, 1000000};
    cr_expect_eq(mg_store_node_quota(q, 3).requests, 33);
    cr_expect_eq(mg_store_node_quota(q, 3).per_us, 1000000, "same window");
    cr_expect_eq(mg_store_node_quota(q, 1).requests, 100);
    cr_expect_eq(mg_store_node_quota(q, 0).requests, 100, "0 nodes: the whole quota (no split)");
    cr_expect_eq(mg_store_node_quota((mg_quota_t){2, 1000}, 3).requests, 0);
}

Test(store_conf, local_fallback_admits_the_node_share_exactly)
{
    mg_throttle_t *t = mg_throttle_new();
    mg_decision_t d;
    mg_quota_t q = {10, 1000000};
    uint64_t now = 5000000;
    int admitted = 0;
    for (int i = 0; i < 10; i++)
        admitted += mg_store_fallback_local(t, "t\0acme", 6, q, 3, 1, MG_THROTTLE_NO_CEILING, now, &d) == 1;
    cr_expect_eq(admitted, 3, "10 / 3 nodes: 3 each, 9 for the fleet");
    cr_expect_eq(d.admitted, 0);
    cr_expect_eq(d.limit, 3, "the limit in force on this node");
    cr_expect_eq(d.retry_after_us, 1000000, "the oldest of the window leaves after P");
    cr_expect_eq(mg_store_fallback_local(t, "t\0acme", 6, q, 3, 1, MG_THROTTLE_NO_CEILING, now + 1000000, &d), 1,
                 "after the window, the share again");
    /* N < nodes: nothing is safe to admit alone */
    cr_expect_eq(mg_store_fallback_local(t, "t\0tiny", 6, (mg_quota_t){2, 1000000}, 3, 1, MG_THROTTLE_NO_CEILING, now, &d), 0);
    cr_expect_eq(d.retry_after_us, 1000000);
    cr_expect_eq(d.remaining, 0);
    cr_expect_eq(mg_throttle_count(t), 1, "a share of 0 leaves nothing in the table");
    mg_throttle_free(t);
}
