/*
 * gateway/config/tenants.c and gateway/config/identify.c: the tenants section as read (good and bad
 * files, exact first errors), identification rules in order, and quota lookup.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/config/config.h"

static mg_errors_t errs;
static mg_config_t *conf;

static void teardown(void)
{
    mg_config_free(conf);
    conf = NULL;
    mg_errors_clear(&errs);
}

TestSuite(tenants, .fini = teardown);

#define BASE "listen:\n  - address: \"127.0.0.1:8080\"\nroutes:\n  - name: r\n    respond: {status: 200}\n"
#define TENANTS(body) "tenants:\n" body BASE

static void load(const char *text)
{
    conf = mg_config_load_string("gw.yaml", text, &errs);
    cr_assert_not_null(conf, "refused: %s", errs.size ? errs.entries[0].text : "(no error)");
}

/* ---------------------------------------------------------------------------------------
 * Reading
 */
Test(tenants, the_contract_section_is_read_whole)
{
    load(TENANTS("  identify:\n"
                 "    - header: X-Tenant-Id\n"
                 "    - host: '^(?<tenant>[a-z0-9-]+)\\.example\\.com$'\n"
                 "    - path: '^/t/(?<tenant>[^/]+)/'\n"
                 "  unidentified: reject\n"
                 "  default_quota: {requests: 100, per: 10s}\n"
                 "  quotas:\n"
                 "    acme: {requests: 1000, per: 1s}\n"
                 "    free-tier: {requests: 10, per: 1m}\n"));
    const mg_tenants_conf_t *tc = &conf->tenants;
    cr_assert_eq(tc->num_identify, 3);
    cr_expect_eq(tc->identify[0].kind, MG_IDENTIFY_HEADER);
    cr_expect_str_eq(tc->identify[0].header, "x-tenant-id");
    cr_expect_eq(tc->identify[1].kind, MG_IDENTIFY_HOST);
    cr_expect_eq(tc->identify[2].kind, MG_IDENTIFY_PATH);
    cr_expect(tc->reject_unidentified);
    cr_expect_eq(tc->default_quota.requests, 100);
    cr_expect_eq(tc->default_quota.per_us, UINT64_C(10000000));
    cr_assert_eq(tc->num_quotas, 2);
    const mg_quota_t *q = mg_tenants_quota(tc, mg_str("free-tier", 9));
    cr_assert_not_null(q);
    cr_expect_eq(q->requests, 10);
    cr_expect_eq(q->per_us, UINT64_C(60000000));
    cr_expect_eq(mg_tenants_quota(tc, mg_str("acme", 4))->requests, 1000);
    /* a prefix of a name is another tenant: it gets the default */
    cr_expect_eq(mg_tenants_quota(tc, mg_str("acm", 3)), &tc->default_quota);
    cr_expect_eq(mg_tenants_quota(tc, mg_str("acmee", 5)), &tc->default_quota);
}

Test(tenants, defaults_allow_and_no_quota)
{
    load(TENANTS("  identify: [{header: X-Tenant}]\n  quotas: {acme: {requests: 5, per: 1s}}\n"));
    cr_expect_not(conf->tenants.reject_unidentified);
    cr_expect_eq(conf->tenants.default_quota.requests, 0);
    cr_expect_null(mg_tenants_quota(&conf->tenants, mg_str("other", 5)));
    cr_expect_eq(mg_tenants_quota(&conf->tenants, mg_str("acme", 4))->requests, 5);
    cr_expect_eq(conf->limits.max_requests_per_connection_per_second, 10000);
    cr_expect_eq(conf->tenants.max_keys, 1000000, "tenants.max_keys defaults to 1,000,000");
}

Test(tenants, max_keys_is_read_and_defaults_without_a_tenants_section)
{
    load(TENANTS("  identify: [{header: X-Tenant}]\n  max_keys: 5\n"));
    cr_expect_eq(conf->tenants.max_keys, 5);
    mg_config_free(conf);
    load(TENANTS("  identify: [{header: X-Tenant}]\n  max_keys: 1000000000\n"));
    cr_expect_eq(conf->tenants.max_keys, 1000000000);
    mg_config_free(conf);
    /* route quota keys are bounded too: the ceiling holds without a tenants section */
    load(BASE);
    cr_expect_eq(conf->tenants.max_keys, 1000000);
}

Test(tenants, many_quotas_are_all_found)
{
    char *text = malloc(200000), *p = text;
    p += sprintf(p, "tenants:\n  identify: [{header: X-Tenant}]\n  quotas:\n");
    for (int i = 999; i >= 0; i--)
        p += sprintf(p, "    t%d: {requests: %d, per: 1s}\n", i, i + 1);
    strcpy(p, BASE);
    load(text);
    free(text);
    for (int i = 0; i < 1000; i++) {
        char name[16];
        int len = snprintf(name, sizeof(name), "t%d", i);
        const mg_quota_t *q = mg_tenants_quota(&conf->tenants, mg_str(name, (size_t)len));
        cr_assert_not_null(q, "%s", name);
        cr_expect_eq(q->requests, (uint32_t)i + 1, "%s", name);
    }
}

typedef struct bad_tenants {
    const char *yaml;
    const char *error;
} bad_tenants_t;

static const bad_tenants_t bad[] = {
    {TENANTS("  identfy: []\n"), "gw.yaml:2:3: unknown key 'identfy' (did you mean 'identify'?)"},
    {TENANTS("  unidentified: allow\n"), "gw.yaml:2:3: missing key 'identify'"},
    {TENANTS("  identify: []\n"), "gw.yaml:2:13: identify needs at least one rule (header, host, path, claim or api_key)"},
    {TENANTS("  identify: [{cookie: t}]\n"), "gw.yaml:2:15: unknown key 'cookie'"},
    {TENANTS("  identify: [{header: a, host: b}]\n"),
     "gw.yaml:2:14: an identify rule has exactly one of header, host, path, claim, api_key"},
    {TENANTS("  identify: [{header: 'X Tenant'}]\n"), "gw.yaml:2:23: invalid header name 'X Tenant'"},
    {TENANTS("  identify: [{host: '^([a-z]+)\\.example$'}]\n"),
     "gw.yaml:2:21: the pattern needs a group named 'tenant', e.g. (?<tenant>[a-z0-9-]+)"},
    {TENANTS("  identify: [{path: '^/t/(?<tenant>[^/]+'}]\n"),
     "gw.yaml:2:21: invalid regex at offset 19: missing closing parenthesis"},
    {TENANTS("  identify: [{header: T}]\n  unidentified: deny\n"),
     "gw.yaml:3:17: unidentified must be allow or reject, not 'deny'"},
    {TENANTS("  identify: [{header: T}]\n  default_quota: {requests: 0, per: 1s}\n"),
     "gw.yaml:3:29: expected an integer between 1 and 1000000, got '0'"},
    {TENANTS("  identify: [{header: T}]\n  default_quota: {requests: 5}\n"), "gw.yaml:3:18: missing key 'per'"},
    {TENANTS("  identify: [{header: T}]\n  default_quota: {requests: 5, per: 0s}\n"),
     "gw.yaml:3:37: per must be between 1ms and 24h"},
    {TENANTS("  identify: [{header: T}]\n  default_quota: {requests: 5, per: 2d}\n"),
     "gw.yaml:3:37: invalid duration '2d' (expected e.g. 250ms, 5s, 2m, 1h)"},
    {TENANTS("  identify: [{header: T}]\n  default_quota: {requests: 5, per: 25h}\n"),
     "gw.yaml:3:37: per must be between 1ms and 24h"},
    {TENANTS("  identify: [{header: T}]\n  default_quota: {requests: 5, per: 1s, burst: 2}\n"),
     "gw.yaml:3:41: unknown key 'burst'"},
    {TENANTS("  identify: [{header: T}]\n  quotas: {a: {requests: 1, per: 1s}, a: {requests: 2, per: 1s}}\n"),
     "gw.yaml:3:39: duplicate key 'a'"},
    {TENANTS("  identify: [{header: T}]\n  quotas: {'': {requests: 1, per: 1s}}\n"),
     "gw.yaml:3:12: a tenant name has 1 to 128 bytes"},
    {TENANTS("  identify: [{header: T}]\n  quotas: [a]\n"), "gw.yaml:3:11: expected a mapping, got a sequence"},
    {TENANTS("  identify: [{header: T}]\n  max_keys: 0\n"), "gw.yaml:3:13: expected an integer between 1 and 1000000000, got '0'"},
    {TENANTS("  identify: [{header: T}]\n  max_keys: -5\n"),
     "gw.yaml:3:13: expected an integer between 1 and 1000000000, got '-5'"},
    {TENANTS("  identify: [{header: T}]\n  max_keys: 1000000001\n"),
     "gw.yaml:3:13: expected an integer between 1 and 1000000000, got '1000000001'"},
    {TENANTS("  identify: [{header: T}]\n  max_keys: 1e6\n"),
     "gw.yaml:3:13: expected an integer between 1 and 1000000000, got '1e6'"},
    {TENANTS("  identify: [{header: T}]\n  max_keys: many\n"),
     "gw.yaml:3:13: expected an integer between 1 and 1000000000, got 'many'"},
    {TENANTS("  identify: [{header: T}]\n  max_keys: [5]\n"),
     "gw.yaml:3:13: expected an integer between 1 and 1000000000, got a sequence"},
    {TENANTS("  identify: [{header: T}]\n  max_key: 5\n"), "gw.yaml:3:3: unknown key 'max_key' (did you mean 'max_keys'?)"},
    /* tenants.store */
    {TENANTS("  identify: [{header: T}]\n  store: redis://x\n"), "gw.yaml:3:10: expected a mapping, got a scalar"},
    {TENANTS("  identify: [{header: T}]\n  store: {password: p}\n"), "gw.yaml:3:10: missing key 'redis'"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: 'http://h'}\n"), "gw.yaml:3:18: a store URL starts with redis://"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: 'redis://h:99999'}\n"),
     "gw.yaml:3:18: a store URL is redis://[[user]:password@]host[:port][/db] with a port from 1 to 65535"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: 'redis://h/x'}\n"),
     "gw.yaml:3:18: the database of a store URL is a number"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: []}\n"),
     "gw.yaml:3:18: redis needs a URL or a list of Redis Cluster nodes"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: ['redis://a:7000', 'redis://b:7000/1']}\n"),
     "gw.yaml:3:37: a Redis Cluster has database 0 only"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: 'redis://h', timeout: 11s}\n"),
     "gw.yaml:3:40: timeout must be at most 10s"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: 'redis://h', timeout: 0s}\n"),
     "gw.yaml:3:40: timeout must be greater than 0"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: 'redis://h', on_failure: open}\n"),
     "gw.yaml:3:43: on_failure must be local, allow or reject, not 'open'"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: 'redis://h', nodes: 1001}\n"),
     "gw.yaml:3:38: expected an integer between 1 and 1000, got '1001'"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: 'redis://h', key_prefix: 'a}'}\n"),
     "gw.yaml:3:43: the store's key_prefix may not hold '{' or '}' (the store puts the hash tag there)"},
    {TENANTS("  identify: [{header: T}]\n  store: {redis: 'redis://h', node: 3}\n"),
     "gw.yaml:3:31: unknown key 'node' (did you mean 'nodes'?)"},
    {"limits: {max_requests_per_connection_per_second: -1}\n" BASE,
     "gw.yaml:1:50: expected an integer between 0 and 10000000, got '-1'"},
};

Test(tenants, bad_sections_report_their_first_error_exactly)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mg_config_t *c = mg_config_load_string("gw.yaml", bad[i].yaml, &errs);
        cr_expect_null(c, "#%zu accepted:\n%s", i, bad[i].yaml);
        mg_config_free(c);
        if (errs.size == 0) {
            cr_expect_fail("#%zu: no error for:\n%s", i, bad[i].yaml);
            continue;
        }
        cr_expect_str_eq(errs.entries[0].text, bad[i].error, "#%zu: got %s", i, errs.entries[0].text);
        mg_errors_clear(&errs);
    }
}

Test(tenants, store_is_read_with_its_defaults)
{
    load(TENANTS("  identify: [{header: T}]\n  store: {redis: 'redis://10.0.0.5'}\n"));
    const mg_tenants_store_t *ts = &conf->tenants.store;
    cr_assert_not_null(ts->store);
    cr_expect_eq(ts->on_failure, MG_STORE_POLICY_LOCAL);
    cr_expect_eq(ts->nodes, 1);
    cr_expect_eq(ts->timeout_ms, 50);
    cr_expect_str_eq(ts->redis, "redis://10.0.0.5:6379");
    mg_config_free(conf);

    load(TENANTS("  identify: [{header: T}]\n"
                 "  store:\n"
                 "    redis: ['redis://:secret@10.0.0.5:7000', 'redis://[::1]:7001']\n"
                 "    password: other\n"
                 "    timeout: 2s\n"
                 "    on_failure: reject\n"
                 "    nodes: 3\n"
                 "    key_prefix: 'fleet:'\n"));
    ts = &conf->tenants.store;
    cr_assert_not_null(ts->store);
    cr_expect_eq(ts->on_failure, MG_STORE_POLICY_REJECT);
    cr_expect_eq(ts->nodes, 3);
    cr_expect_eq(ts->timeout_ms, 2000);
    /* the servers as shown by /tenants: never the password */
    cr_expect_str_eq(ts->redis, "redis://10.0.0.5:7000, redis://[::1]:7001");
    mg_config_free(conf);

    load(BASE);
    cr_expect_null(conf->tenants.store.store, "without store: the local throttle");
}

/* ---------------------------------------------------------------------------------------
 * Identification
 */
static void *heap_alloc(void *arg, size_t size)
{
    /* the test's few allocations are kept in a list freed at the end of the test */
    void **list = arg, **b = malloc(sizeof(void *) + size);
    b[0] = *list;
    *list = b;
    return b + 1;
}

static void *allocations;

static void free_allocations(void)
{
    while (allocations != NULL) {
        void **b = allocations;
        allocations = b[0];
        free(b);
    }
    teardown();
}

TestSuite(identify, .fini = free_allocations);

#define RULES                                                                                                                      \
    TENANTS("  identify:\n"                                                                                                        \
            "    - header: X-Tenant-Id\n"                                                                                          \
            "    - host: '^(?<tenant>[a-z0-9-]+)\\.example\\.com$'\n"                                                              \
            "    - path: '^/t/(?<tenant>[^/]+)/'\n")

static mg_ctx_t ctx_of(const char *host, const char *path, const char *tenant_header)
{
    static mg_header_t h;
    mg_ctx_t ctx = {.method = mg_str("GET", 3),
                    .host = mg_str(host, strlen(host)),
                    .path = mg_str(path, strlen(path)),
                    .alloc = {heap_alloc, &allocations}};
    if (tenant_header != NULL) {
        h = (mg_header_t){mg_str("x-tenant-id", 11), mg_str(tenant_header, strlen(tenant_header))};
        ctx.headers = &h;
        ctx.num_headers = 1;
    }
    return ctx;
}

static void expect_tenant(const char *host, const char *path, const char *header, int rc, const char *tenant)
{
    mg_ctx_t ctx = ctx_of(host, path, header);
    cr_expect_eq(mg_tenants_identify(&conf->tenants, &ctx), rc, "%s %s %s", host, path, header ? header : "-");
    if (rc == 1)
        cr_expect(ctx.tenant.len == strlen(tenant) && memcmp(ctx.tenant.base, tenant, ctx.tenant.len) == 0, "got '%.*s' for %s",
                  (int)ctx.tenant.len, ctx.tenant.base, tenant);
    else
        cr_expect_eq(ctx.tenant.len, 0);
    cr_expect_eq(ctx.num_vars, 0, "identification leaves no variables");
}

Test(identify, rules_in_order_first_non_empty_wins)
{
    load(RULES);
    expect_tenant("acme.example.com", "/t/globex/x", "initech", 1, "initech");
    expect_tenant("acme.example.com", "/t/globex/x", NULL, 1, "acme");
    expect_tenant("acme.example.com", "/t/globex/x", "", 1, "acme"); /* an empty header is no value */
    expect_tenant("example.com", "/t/globex/x", NULL, 1, "globex");
    expect_tenant("example.com", "/t/glo%62ex/x", NULL, 1, "globex"); /* the path group is decoded */
    expect_tenant("example.com", "/x", NULL, 0, NULL);
    expect_tenant("a.b.example.com", "/t/", NULL, 0, NULL);
}

Test(identify, bad_names_are_refused)
{
    char longname[MG_TENANT_MAX_LEN + 2];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    load(RULES);
    expect_tenant("x", "/", longname, -1, NULL);
    longname[MG_TENANT_MAX_LEN] = '\0';
    expect_tenant("x", "/", longname, 1, longname);
    expect_tenant("example.com", "/t/a%0db/x", NULL, -1, NULL);
    expect_tenant("example.com", "/t/a%00b/x", NULL, -1, NULL);
}

/* A tenant name is a quota key and often a path segment: one that could name another tenant's
 * path ('/', '\', ".", "..") is refused, from any rule, never encoded. */
Test(identify, names_that_could_climb_are_refused)
{
    load(RULES);
    static const char *const headers[] = {"a/b", "../globex", "/", "a\\b", "..\\globex", ".", ".."};
    for (size_t i = 0; i != sizeof(headers) / sizeof(headers[0]); ++i)
        expect_tenant("x", "/", headers[i], -1, NULL);
    /* the path rule's group is decoded first */
    expect_tenant("example.com", "/t/a%2F..%2Fglobex/x", NULL, -1, NULL);
    expect_tenant("example.com", "/t/a%2f..%2fglobex/x", NULL, -1, NULL);
    expect_tenant("example.com", "/t/..%5Cglobex/x", NULL, -1, NULL);
    expect_tenant("example.com", "/t/%2E%2E/x", NULL, -1, NULL);
    expect_tenant("example.com", "/t/%2e/x", NULL, -1, NULL);
    /* dots inside a name are fine */
    expect_tenant("x", "/", "a.b", 1, "a.b");
    expect_tenant("x", "/", "...", 1, "...");
    expect_tenant("example.com", "/t/..a/x", NULL, 1, "..a");
    expect_tenant("example.com", "/t/a%2Eb/x", NULL, 1, "a.b");
}

Test(identify, a_host_rule_that_captures_anything_is_checked_too)
{
    load(TENANTS("  identify:\n"
                 "    - host: '^(?<tenant>.+)\\.example\\.com$'\n"));
    expect_tenant("a.example.com", "/", NULL, 1, "a");
    expect_tenant("...example.com", "/", NULL, -1, NULL);
    expect_tenant("a/b.example.com", "/", NULL, -1, NULL);
    expect_tenant("a\\b.example.com", "/", NULL, -1, NULL);
}

Test(identify, no_section_no_tenant)
{
    load(BASE);
    expect_tenant("acme.example.com", "/t/a/", "acme", 0, NULL);
    cr_expect_null(mg_tenants_quota(&conf->tenants, mg_str("acme", 4)));
}

/* A host rule whose regex cannot decide (its match limit): the request cannot be said to have no
 * tenant (it might be this one), and a later rule must not name another: -1, ctx.error set. */
Test(identify, a_rule_that_cannot_decide_refuses_the_request)
{
    load(TENANTS("  identify:\n"
                 "    - host: '^(?<tenant>(a+)+)$'\n"
                 "    - path: '^/t/(?<tenant>[^/]+)/'\n"));
    const char *runaway = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab";
    mg_ctx_t ctx = ctx_of(runaway, "/t/globex/x", NULL);
    cr_expect_eq(mg_tenants_identify(&conf->tenants, &ctx), -1);
    cr_expect_eq(ctx.tenant.len, 0, "no tenant, not even the path's");
    cr_assert_not_null(ctx.error.reason);
    cr_expect_str_eq(ctx.error.reason, "hit the match limit");
    cr_expect_eq(ctx.num_vars, 0);
    expect_tenant("aaaa", "/t/globex/x", NULL, 1, "aaaa");
    expect_tenant("b", "/t/globex/x", NULL, 1, "globex");
}
