/*
 * The request-time half of gateway/auth: the keyring (sets replaced whole, generations, the fetch
 * a flood of unknown kids asks for), the verified-token cache (hits, expiry, stale generations,
 * eviction within a bucket), finding the credential (header with its prefix, cookie, query; a
 * header given twice), the route's verdict (mg_auth_decide, every mode against every outcome) and
 * what the backend gets (mg_auth_edit_request).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gateway/auth/internal.h"
#include "routes/routes.h"

static void *arena[1024];
static size_t num_arena;

static void *arena_alloc(void *arg, size_t size)
{
    (void)arg;
    cr_assert_lt(num_arena, 1024);
    return arena[num_arena++] = calloc(1, size);
}

static void fini(void)
{
    while (num_arena != 0)
        free(arena[--num_arena]);
}

TestSuite(keyring);
TestSuite(cache);
TestSuite(sources, .fini = fini);
TestSuite(decide, .fini = fini);
TestSuite(forward, .fini = fini);

static mg_identity_t *identity(const char *json)
{
    json_t *j = json_loads(json, JSON_REJECT_DUPLICATES, NULL);
    cr_assert_not_null(j, "%s", json);
    mg_identity_t *id = mg_identity_new(j, mg_str("", 0));
    json_decref(j);
    cr_assert_not_null(id);
    return id;
}

static mg_keyset_t *keyset(void)
{
    /* an Ed25519 key (RFC 8037 A.2): the smallest valid set */
    static const char json[] = "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"a\","
                               "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}";
    size_t skipped;
    char warn[128], err[128];
    mg_keyset_t *ks = mg_keyset_parse(json, strlen(json), &skipped, warn, sizeof(warn), err, sizeof(err));
    cr_assert_not_null(ks, "%s", err);
    return ks;
}

/* ---------------------------------------------------------------------------------------
 * Keyring
 */
Test(keyring, sets_are_replaced_whole_and_held_while_used)
{
    mg_keyring_t *ring = mg_keyring_new();
    cr_expect_null(mg_keyring_acquire(ring));
    uint64_t g0 = mg_keyring_generation(ring);
    mg_keyring_install(ring, keyset(), 1000);
    cr_expect_eq(mg_keyring_generation(ring), g0 + 1);
    mg_keys_t *held = mg_keyring_acquire(ring);
    cr_assert_not_null(held);
    mg_keyring_install(ring, keyset(), 2000); /* the held set stays valid until released */
    cr_expect_eq(mg_keyset_size(mg_keys_set(held)), 1);
    cr_expect_str_eq(mg_keyset_kid(mg_keys_set(held), 0), "a");
    mg_keys_release(held);
    mg_keyring_failed(ring);
    mg_keyring_stats_t st;
    mg_keyring_stats(ring, &st);
    cr_expect_eq(st.keys, 1);
    cr_expect_eq(st.fetches, 2);
    cr_expect_eq(st.failures, 1);
    cr_expect_eq(st.last_good_ms, 2000);
    mg_keyring_t *next = mg_keyring_new(); /* a reload that keeps the url */
    mg_keyring_adopt(next, ring);
    mg_keyring_stats(next, &st);
    cr_expect_eq(st.keys, 1);
    cr_expect_eq(st.failures, 1);
    mg_keyring_free(ring);
    mg_keyring_free(next);
}

Test(keyring, a_flood_of_wants_asks_once_per_interval)
{
    mg_keyring_t *ring = mg_keyring_new();
    int asked = 0;
    for (int i = 0; i < 1000; i++)
        asked += mg_keyring_want(ring, 30000, 100000 + i);
    cr_expect_eq(asked, 1);
    cr_expect_eq(mg_keyring_take_want(ring), 1);
    cr_expect_eq(mg_keyring_take_want(ring), 0);
    cr_expect_eq(mg_keyring_want(ring, 30000, 100000 + 29999), 0); /* min_refresh not over */
    cr_expect_eq(mg_keyring_want(ring, 30000, 100000 + 30000), 1);
    mg_keyring_free(ring);
}

Test(keyring, a_request_waits_for_the_fetch_that_answers_its_ask)
{
    mg_keyring_t *ring = mg_keyring_new();
    cr_expect_eq(mg_keyring_pending(ring), 0); /* nothing asked: nothing to wait for */
    cr_expect_eq(mg_keyring_want(ring, 1000, 100000), 1);
    uint64_t ticket = mg_keyring_pending(ring);
    cr_assert_neq(ticket, 0);
    cr_expect_eq(mg_keyring_want(ring, 1000, 100001), 0);
    cr_expect_eq(mg_keyring_pending(ring), ticket); /* a later request waits for the same fetch */
    uint64_t taken = mg_keyring_take_want(ring);
    cr_expect_eq(taken, ticket);
    cr_expect_eq(mg_keyring_pending(ring), ticket); /* taken, not ended: still on its way */
    cr_expect(!mg_keyring_answered(ring, ticket));
    mg_keyring_answer(ring, taken);
    cr_expect(mg_keyring_answered(ring, ticket));
    cr_expect_eq(mg_keyring_pending(ring), 0);
    mg_keyring_answer(ring, 0); /* a fetch nobody asked for answers nothing, and takes nothing back */
    cr_expect(mg_keyring_answered(ring, ticket));
    cr_expect_eq(mg_keyring_want(ring, 1000, 101000), 1);
    cr_expect_gt(mg_keyring_pending(ring), ticket);
    mg_keyring_free(ring);
}

/* ---------------------------------------------------------------------------------------
 * Cache
 */
static mg_auth_cache_key_t key_of(mg_auth_cache_t *c, const char *token, uint64_t conf_gen, uint64_t keys_gen)
{
    mg_auth_cache_key_t k = {.conf_generation = conf_gen, .by = (const mg_authenticator_t *)&k, .keys_generation = keys_gen};
    static char by;
    k.by = (const mg_authenticator_t *)&by;
    mg__auth_cache_hash(c, token, strlen(token), &k);
    return k;
}

Test(cache, hits_expiry_and_stale_generations)
{
    mg_auth_cache_t *c = mg_auth_cache_new(64);
    mg_identity_t *id = identity("{\"sub\":\"u1\"}");
    mg_auth_cache_key_t k = key_of(c, "token-1", 1, 7);
    cr_expect_null(mg__auth_cache_find(c, &k, 1000));
    mg__auth_cache_put(c, &k, id, 5000);
    mg_identity_t *got = mg__auth_cache_find(c, &k, 4999);
    cr_expect_eq(got, id);
    mg_identity_release(got);
    cr_expect_null(mg__auth_cache_find(c, &k, 5000)); /* expired: dropped */
    mg__auth_cache_put(c, &k, id, 9000);
    mg_auth_cache_key_t other_keys = key_of(c, "token-1", 1, 8), other_conf = key_of(c, "token-1", 2, 7);
    cr_expect_null(mg__auth_cache_find(c, &other_keys, 1000)); /* a new key set: verified again */
    mg__auth_cache_put(c, &k, id, 9000);
    cr_expect_null(mg__auth_cache_find(c, &other_conf, 1000)); /* a reload: verified again */
    mg_auth_cache_stats_t st;
    mg_auth_cache_stats(c, &st);
    cr_expect_eq(st.hits, 1);
    cr_expect_eq(st.misses, 4);
    cr_expect_eq(st.held, 0);
    mg_identity_release(id);
    mg_auth_cache_free(c);
}

Test(cache, bounded_least_recently_used_in_a_bucket)
{
    mg_auth_cache_t *c = mg_auth_cache_new(4); /* one bucket of four */
    mg_identity_t *id = identity("{}");
    char token[32];
    mg_auth_cache_key_t keys[5];
    for (int i = 0; i < 5; i++) {
        snprintf(token, sizeof(token), "token-%d", i);
        keys[i] = key_of(c, token, 1, 1);
        mg__auth_cache_put(c, &keys[i], id, 100000);
        if (i == 3) /* token-0 used last: token-1 goes first */
            mg_identity_release(mg__auth_cache_find(c, &keys[0], 0));
    }
    mg_auth_cache_stats_t st;
    mg_auth_cache_stats(c, &st);
    cr_expect_eq(st.held, 4);
    cr_expect_eq(st.evictions, 1);
    mg_identity_t *found = mg__auth_cache_find(c, &keys[1], 0);
    cr_expect_null(found);
    found = mg__auth_cache_find(c, &keys[0], 0);
    cr_expect_eq(found, id);
    mg_identity_release(found);
    mg_identity_release(id);
    mg_auth_cache_free(c); /* the entries' references go with it (LeakSanitizer would tell) */
    cr_expect_gt(mg_auth_cache_entry_bytes(), MG_AUTH_HASH_LEN);
}

/* ---------------------------------------------------------------------------------------
 * Finding the credential (an api_key authenticator over a keys file written here)
 */
static char keys_path[64];

static mg_authenticator_t *api_key_authenticator(mg_auth_source_t *sources, size_t n)
{
    strcpy(keys_path, "/tmp/mg-test-keys.XXXXXX");
    int fd = mkstemp(keys_path);
    cr_assert_geq(fd, 0);
    char *line = mg_apikey_line("s3cret", 6, "acme", "{\"sub\":\"batch\"}");
    cr_assert_eq(write(fd, line, strlen(line)), (ssize_t)strlen(line));
    free(line);
    close(fd);
    mg_errors_t errs = {0};
    mg_authenticator_t *a = calloc(1, sizeof(*a));
    a->name = "partners";
    a->kind = MG_AUTH_KIND_API_KEY;
    a->apikeys = mg_apikeys_load(keys_path, &errs);
    cr_assert_not_null(a->apikeys);
    a->policy.max_token_bytes = 1024;
    a->sources = sources;
    a->num_sources = n;
    a->realm = "matchgate";
    a->forward_token = 1;
    unlink(keys_path);
    return a;
}

static mg_ctx_t ctx_with(const mg_header_t *headers, size_t n, const char *query)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.headers = headers;
    ctx.num_headers = n;
    ctx.query = mg_str(query, strlen(query));
    ctx.alloc = (mg_alloc_t){arena_alloc, NULL};
    return ctx;
}

static mg_auth_result_t authenticate(mg_authenticator_t *a, const mg_ctx_t *ctx)
{
    mg_authenticator_t *list[] = {a};
    mg_auth_conf_t ac = {.authenticators = list, .num_authenticators = 1};
    mg_auth_result_t res;
    mg_auth_authenticate(&ac, NULL, 1, ctx, 0, 0, &res);
    return res;
}

Test(sources, header_prefix_cookie_and_query)
{
    mg_auth_source_t sources[] = {{MG_AUTH_FROM_HEADER, MG_STR("authorization"), MG_STR("ApiKey ")},
                                  {MG_AUTH_FROM_COOKIE, MG_STR("k"), MG_STR_NULL},
                                  {MG_AUTH_FROM_QUERY, MG_STR("api_key"), MG_STR_NULL}};
    mg_authenticator_t *a = api_key_authenticator(sources, 3);
    mg_header_t by_header[] = {{MG_STR("authorization"), MG_STR("apikey s3cret ")}};
    mg_header_t basic[] = {{MG_STR("authorization"), MG_STR("Basic dTpw")}};
    mg_header_t by_cookie[] = {{MG_STR("cookie"), MG_STR("a=1")}, {MG_STR("cookie"), MG_STR("b=2; k=\"s3cret\"")}};
    mg_header_t twice[] = {{MG_STR("authorization"), MG_STR("ApiKey s3cret")}, {MG_STR("authorization"), MG_STR("ApiKey x")}};

    mg_ctx_t ctx = ctx_with(by_header, 1, "");
    mg_auth_result_t res = authenticate(a, &ctx);
    cr_expect_eq(res.outcome, MG_AUTH_VERIFIED);
    cr_expect_eq(res.source, 0);
    cr_expect_eq(res.identity->tenant.len, 4);
    mg_identity_release(res.identity);

    ctx = ctx_with(basic, 1, ""); /* not this authenticator's: anonymous */
    cr_expect_eq(authenticate(a, &ctx).outcome, MG_AUTH_ANONYMOUS);

    ctx = ctx_with(by_cookie, 2, "");
    res = authenticate(a, &ctx);
    cr_expect_eq(res.outcome, MG_AUTH_VERIFIED);
    cr_expect_eq(res.source, 1);
    mg_identity_release(res.identity);

    ctx = ctx_with(NULL, 0, "x=1&api_key=s3c%72et");
    res = authenticate(a, &ctx);
    cr_expect_eq(res.outcome, MG_AUTH_VERIFIED);
    mg_identity_release(res.identity);

    ctx = ctx_with(twice, 2, "");
    res = authenticate(a, &ctx);
    cr_expect_eq(res.outcome, MG_AUTH_FAILED);
    cr_expect_eq(res.reason, MG_AUTH_MALFORMED);

    ctx = ctx_with(NULL, 0, "api_key=wrong");
    res = authenticate(a, &ctx);
    cr_expect_eq(res.reason, MG_AUTH_UNKNOWN_API_KEY);
    cr_expect_eq(mg_auth_outcomes(a, MG_AUTH_OK), 3);
    cr_expect_eq(mg_auth_outcomes(a, MG_AUTH_UNKNOWN_API_KEY), 1);
    mg_apikeys_free(a->apikeys);
    free(a);
}

/* ---------------------------------------------------------------------------------------
 * The route's verdict
 */
static mg_errors_t errs;

static mg_routes_t *routes_of(const char *yaml)
{
    static int backend;
    mg_doc_t *doc = mg_doc_load_string("r.yaml", yaml, strlen(yaml), &errs);
    cr_assert_not_null(doc);
    mg_routes_t *routes = mg_routes_compile(mg_node_get(mg_doc_root(doc), "routes"), NULL, &backend, &errs);
    mg_doc_free(doc);
    cr_assert_not_null(routes, "%s", errs.size != 0 ? errs.entries[0].text : "");
    return routes;
}

static int verdict(const mg_routes_t *routes, const char *route, const mg_auth_conf_t *ac, mg_auth_result_t *res,
                   mg_auth_decision_t *d)
{
    mg_ctx_t ctx = ctx_with(NULL, 0, "");
    ctx.claims = res->identity != NULL ? &res->identity->claims : NULL;
    mg_auth_decide(ac, res, mg_routes_find(routes, route), &ctx, d);
    return d->status;
}

Test(decide, every_mode_against_every_outcome)
{
    mg_routes_t *routes = routes_of("routes:\n"
                                    "  - {name: none, respond: {status: 200}}\n"
                                    "  - {name: opt, auth: optional, respond: {status: 200}}\n"
                                    "  - {name: corp, auth: corp, respond: {status: 200}}\n"
                                    "  - {name: scoped, auth: [corp, partners], require: [{claim: {name: scope, equals: w}}], "
                                    "respond: {status: 200}}\n");
    ((mg_route_t *)mg_routes_find(routes, "corp"))->auth->accept = 1;
    ((mg_route_t *)mg_routes_find(routes, "scoped"))->auth->accept = 3;
    mg_authenticator_t corp = {.name = "corp", .index = 0, .realm = "r"}, partners = {.name = "partners", .index = 1, .realm = "p"};
    mg_authenticator_t *list[] = {&corp, &partners};
    mg_auth_conf_t ac = {.authenticators = list, .num_authenticators = 2};
    mg_auth_decision_t d;
    mg_auth_result_t anon = {.outcome = MG_AUTH_ANONYMOUS},
                     failed = {.outcome = MG_AUTH_FAILED, .by = &corp, .reason = MG_AUTH_EXPIRED},
                     down = {.outcome = MG_AUTH_UNAVAILABLE, .by = &corp, .reason = MG_AUTH_NO_KEYS};
    mg_auth_result_t ok = {.outcome = MG_AUTH_VERIFIED, .by = &corp, .identity = identity("{\"scope\":[\"r\",\"w\"]}")};
    mg_auth_result_t partner = {.outcome = MG_AUTH_VERIFIED, .by = &partners, .identity = identity("{\"scope\":\"r\"}")};

    cr_expect_eq(verdict(routes, "none", &ac, &anon, &d), 0);
    cr_expect_eq(verdict(routes, "none", &ac, &failed, &d), 0);
    cr_expect(d.anonymous);
    cr_expect_eq(verdict(routes, "none", &ac, &down, &d), 0);
    cr_expect_eq(verdict(routes, "opt", &ac, &anon, &d), 0);
    cr_expect_eq(verdict(routes, "opt", &ac, &failed, &d), 401);
    cr_expect_eq(verdict(routes, "opt", &ac, &partner, &d), 0);
    cr_expect_eq(verdict(routes, "corp", &ac, &anon, &d), 401);
    cr_expect_null(d.error); /* RFC 6750 3.1: a bare challenge */
    cr_expect_eq(d.challenge, &corp);
    cr_expect_eq(verdict(routes, "corp", &ac, &failed, &d), 401);
    cr_expect_str_eq(d.error, "invalid_token");
    cr_expect_eq(verdict(routes, "corp", &ac, &down, &d), 503);
    cr_expect_str_eq(d.code, "auth-unavailable");
    cr_expect_eq(verdict(routes, "corp", &ac, &partner, &d), 401); /* partners is not accepted here */
    cr_expect_eq(verdict(routes, "corp", &ac, &ok, &d), 0);
    cr_expect_eq(verdict(routes, "scoped", &ac, &ok, &d), 0);
    cr_expect_eq(verdict(routes, "scoped", &ac, &partner, &d), 403);
    cr_expect_str_eq(d.error, "insufficient_scope");
    cr_expect_str_eq(d.code, "forbidden");

    char buf[256];
    mg_auth_challenge(&d, buf, sizeof(buf));
    cr_expect_str_eq(buf, "Bearer realm=\"p\", error=\"insufficient_scope\", error_description=\"the credential's claims do not "
                          "meet the route's requirements\"");
    verdict(routes, "corp", &ac, &anon, &d);
    mg_auth_challenge(&d, buf, sizeof(buf));
    cr_expect_str_eq(buf, "Bearer realm=\"r\"");
    mg_identity_release(ok.identity);
    mg_identity_release(partner.identity);
    mg_routes_free(routes);
    mg_errors_clear(&errs);
}

/* ---------------------------------------------------------------------------------------
 * What the backend gets
 */
static const char *header(const mg_ctx_t *ctx, const char *name, int *count)
{
    const char *v = NULL;
    *count = 0;
    for (size_t i = 0; i < ctx->num_headers; i++)
        if (ctx->headers[i].name.len == strlen(name) && memcmp(ctx->headers[i].name.base, name, strlen(name)) == 0)
            v = v != NULL ? v : strndup(ctx->headers[i].value.base, ctx->headers[i].value.len), ++*count;
    if (v != NULL)
        arena[num_arena++] = (void *)v;
    return v;
}

Test(forward, claims_set_copies_stripped_credential_removed)
{
    mg_auth_source_t cookie = {MG_AUTH_FROM_COOKIE, MG_STR("session"), MG_STR_NULL};
    mg_forward_claim_t fc[] = {
        {MG_STR("sub"), MG_STR("x-user-id")}, {MG_STR("org.id"), MG_STR("x-org")}, {MG_STR("bad"), MG_STR("x-bad")}};
    mg_authenticator_t a = {
        .name = "corp", .sources = &cookie, .num_sources = 1, .forward_claims = fc, .num_forward_claims = 3, .forward_token = 1};
    mg_str_t strip[] = {MG_STR("x-user-id"), MG_STR("x-org"), MG_STR("x-bad")};
    mg_authenticator_t *list[] = {&a};
    mg_auth_conf_t ac = {.authenticators = list, .num_authenticators = 1, .strip_headers = strip, .num_strip_headers = 3};
    mg_header_t in[] = {{MG_STR("x-user-id"), MG_STR("forged")},
                        {MG_STR("cookie"), MG_STR("a=1; session=tok; b=2")},
                        {MG_STR("accept"), MG_STR("*/*")}};
    mg_auth_result_t res = {
        .outcome = MG_AUTH_VERIFIED, .by = &a, .identity = identity("{\"sub\":\"alice\",\"org\":{\"id\":7},\"bad\":\"a\\nb\"}")};
    int n;
    mg_ctx_t ctx = ctx_with(in, 3, "");
    cr_expect_eq(mg_auth_edit_request(&ac, &res, &ctx), 1);
    cr_expect_str_eq(header(&ctx, "x-user-id", &n), "alice");
    cr_expect_eq(n, 1);
    cr_expect_str_eq(header(&ctx, "x-org", &n), "7");
    cr_expect_null(header(&ctx, "x-bad", &n));                             /* a value with LF sets nothing */
    cr_expect_str_eq(header(&ctx, "cookie", &n), "a=1; session=tok; b=2"); /* forward_token: true */
    a.forward_token = 0;
    ctx = ctx_with(in, 3, "");
    mg_auth_edit_request(&ac, &res, &ctx);
    cr_expect_str_eq(header(&ctx, "cookie", &n), "a=1; b=2");
    cr_expect_str_eq(header(&ctx, "accept", &n), "*/*");
    /* anonymous: the copies go all the same */
    mg_auth_result_t anon = {.outcome = MG_AUTH_ANONYMOUS};
    ctx = ctx_with(in, 3, "");
    cr_expect_eq(mg_auth_edit_request(&ac, &anon, &ctx), 1);
    cr_expect_null(header(&ctx, "x-user-id", &n));
    mg_identity_release(res.identity);
}

Test(forward, a_query_credential_is_removed)
{
    mg_auth_source_t q = {MG_AUTH_FROM_QUERY, MG_STR("access_token"), MG_STR_NULL};
    mg_authenticator_t a = {.name = "corp", .sources = &q, .num_sources = 1};
    mg_authenticator_t *list[] = {&a};
    mg_auth_conf_t ac = {.authenticators = list, .num_authenticators = 1};
    mg_auth_result_t res = {.outcome = MG_AUTH_FAILED, .by = &a};
    mg_ctx_t ctx = ctx_with(NULL, 0, "a=1&access_token=x&b=2&access_token=y");
    cr_expect_eq(mg_auth_edit_request(&ac, &res, &ctx), 1);
    cr_expect_eq(ctx.query.len, 7);
    cr_expect_eq(memcmp(ctx.query.base, "a=1&b=2", 7), 0);
    a.forward_token = 1;
    ctx = ctx_with(NULL, 0, "a=1&access_token=x");
    cr_expect_eq(mg_auth_edit_request(&ac, &res, &ctx), 0);
}
