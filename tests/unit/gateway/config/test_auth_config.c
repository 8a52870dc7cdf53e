/*
 * The top-level `auth:` (gateway/config/auth.c), the routes' authenticator names
 * (auth_routes.c), tenants from a verified credential and trusted_proxies (tenants.c,
 * identify.c): good files with their defaults, a table of bad files with the exact first error,
 * the warnings, and a reload that keeps a JWKS url's keys.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gateway/config/config.h"

static mg_errors_t errs;
static mg_config_t *conf;
static char dir[64];

static void write_file(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    strcpy(dir, "/tmp/mg-auth-conf.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    /* RFC 8037 A.2's Ed25519 public key */
    write_file("jwks.json", "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"a\","
                            "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}");
    write_file("secret", "0123456789abcdef0123456789abcdef\n");
    write_file("short", "0123456789\n");
    char *line = mg_apikey_line("k1", 2, "acme", NULL);
    write_file("keys.txt", line);
    free(line);
}

static void teardown(void)
{
    mg_config_free(conf);
    conf = NULL;
    mg_errors_clear(&errs);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(auth_config, .init = setup, .fini = teardown);

#define LISTEN "listen:\n  - address: \"127.0.0.1:8080\"\n"

/* `text` with every "@" replaced by the test's directory. */
static char *with_dir(const char *text)
{
    static char buf[8192];
    size_t n = 0;
    for (const char *p = text; *p != '\0' && n < sizeof(buf) - 64; p++) {
        if (*p == '@')
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s", dir);
        else
            buf[n++] = *p;
    }
    buf[n] = '\0';
    return buf;
}

static mg_config_t *load(const char *text)
{
    conf = mg_config_load_string("gw.yaml", with_dir(text), &errs);
    cr_assert_not_null(conf, "refused: %s", errs.size ? errs.entries[0].text : "(no error)");
    return conf;
}

static const char *first_error(const char *text)
{
    mg_errors_clear(&errs);
    mg_config_t *c = mg_config_load_string("gw.yaml", with_dir(text), &errs);
    mg_config_free(c);
    for (size_t i = 0; i < errs.size; i++)
        if (!errs.entries[i].warning)
            return errs.entries[i].text;
    return "(no error)";
}

static int has_warning(const char *part)
{
    for (size_t i = 0; i < errs.size; i++)
        if (errs.entries[i].warning && strstr(errs.entries[i].text, part) != NULL)
            return 1;
    return 0;
}

Test(auth_config, defaults_and_route_names)
{
    load(LISTEN "auth:\n"
                "  corp: {jwt: {issuer: i, audiences: gw, jwks: {file: @/jwks.json}, forward_claims: {sub: X-User-Id}}}\n"
                "  partners: {api_key: {keys_file: @/keys.txt, forward_claims: {sub: X-User-Id, org: X-Org}}}\n"
                "routes:\n"
                "  - {name: a, auth: partners, respond: {status: 200}}\n"
                "  - {name: b, auth: [corp, partners], respond: {status: 200}}\n");
    const mg_auth_conf_t *ac = &conf->auth;
    cr_assert_eq(ac->num_authenticators, 2);
    const mg_authenticator_t *corp = mg_auth_find(ac, "corp"), *p = mg_auth_find(ac, "partners");
    cr_assert_not_null(corp);
    cr_expect_eq(corp->policy.algorithms, MG_JWT_DEFAULT_ALGS);
    cr_expect_eq(corp->policy.clock_skew, 60);
    cr_expect_eq(corp->policy.require_exp, 1);
    cr_expect_eq(corp->policy.max_token_bytes, 8192);
    cr_expect_eq(corp->cache_ttl_ms, 300000);
    cr_expect_str_eq(corp->realm, "matchgate");
    cr_expect_str_eq(corp->policy.issuer, "i");
    cr_expect_eq(corp->policy.num_audiences, 1);
    cr_expect_eq(corp->num_sources, 1);
    cr_expect_str_eq(corp->sources[0].name.base, "authorization");
    cr_expect_str_eq(corp->sources[0].prefix.base, "Bearer ");
    cr_expect_eq(corp->forward_token, 1);
    mg_keyring_stats_t st;
    mg_keyring_stats(corp->keys, &st);
    cr_expect_eq(st.keys, 1);
    cr_expect_str_eq(p->sources[0].name.base, "x-api-key");
    cr_expect_eq(mg_apikeys_size(p->apikeys), 1);
    cr_expect_eq(ac->num_strip_headers, 2); /* x-user-id once, x-org */
    cr_expect_eq(mg_routes_find(conf->routes, "a")->auth->accept, 2);
    cr_expect_eq(mg_routes_find(conf->routes, "b")->auth->accept, 3);
}

Test(auth_config, hs_secret_sources_and_tenants)
{
    load(LISTEN
         "auth:\n"
         "  h: {jwt: {algorithms: [HS256], secret_file: @/secret, from: [{cookie: s}, {query: t}, {header: X-T, prefix: ''}],"
         " clock_skew: 5s, require_exp: false, cache_ttl: 0s, max_token_bytes: 1KiB, realm: api}}\n"
         "tenants:\n  identify: [{claim: org.tid}, {api_key: tenant}, {header: X-Tenant-Id}]\n"
         "  trusted_proxies: [10.0.0.0/8, '::1', 192.0.2.7]\n"
         "routes: [{name: r, respond: {status: 200}}]\n");
    const mg_authenticator_t *h = mg_auth_find(&conf->auth, "h");
    cr_expect_eq(h->secret_len, 32); /* the newline is not the secret's */
    cr_expect_eq(h->policy.algorithms, MG_JWT_ALG_BIT(MG_JWT_HS256));
    cr_expect_eq(h->num_sources, 3);
    cr_expect_eq(h->sources[0].kind, MG_AUTH_FROM_COOKIE);
    cr_expect_eq(h->sources[2].prefix.len, 0);
    cr_expect_eq(h->policy.clock_skew, 5);
    cr_expect_eq(h->cache_ttl_ms, 0);
    cr_expect_eq(h->policy.max_token_bytes, 1024);
    cr_expect_eq(conf->tenants.num_trusted_proxies, 3);
    cr_expect_eq(conf->tenants.identify[0].kind, MG_IDENTIFY_CLAIM);
    cr_expect_eq(conf->tenants.identify[1].kind, MG_IDENTIFY_API_KEY);
    cr_expect(!has_warning("any client can set header"));
}

Test(auth_config, identify_by_claim_api_key_and_trusted_header)
{
    load(LISTEN "tenants:\n  identify: [{claim: org.tid}, {api_key: tenant}, {header: X-Tenant-Id}]\n"
                "  trusted_proxies: [10.0.0.0/8]\n"
                "routes: [{name: r, respond: {status: 200}}]\n");
    static const mg_claim_t items[] = {{MG_STR("org"), MG_STR(""), MG_CLAIM_OBJECT},
                                       {MG_STR("org.tid"), MG_STR("acme"), MG_CLAIM_STRING}};
    static const mg_claims_t claims = {items, 2};
    mg_header_t h[] = {{MG_STR("x-tenant-id"), MG_STR("globex")}};
    mg_ctx_t ctx = {.headers = h, .num_headers = 1, .peer = MG_STR("127.0.0.1"), .claims = &claims};
    cr_expect_eq(mg_tenants_identify_as(&conf->tenants, &ctx, NULL), 1);
    cr_expect_eq(ctx.tenant.len, 4);
    ctx.claims = NULL; /* no claim, no key: the header is not believed from 127.0.0.1 */
    ctx.tenant = MG_STR_NULL;
    cr_expect_eq(mg_tenants_identify_as(&conf->tenants, &ctx, NULL), 0);
    ctx.peer = MG_STR("10.1.2.3");
    cr_expect_eq(mg_tenants_identify_as(&conf->tenants, &ctx, NULL), 1);
    cr_expect_eq(memcmp(ctx.tenant.base, "globex", 6), 0);
    mg_identity_t who = {.tenant = MG_STR("partner")};
    ctx.peer = MG_STR("::1");
    cr_expect_eq(mg_tenants_identify_as(&conf->tenants, &ctx, &who), 1);
    cr_expect_eq(memcmp(ctx.tenant.base, "partner", 7), 0);
}

Test(auth_config, warnings)
{
    load(LISTEN "tenants:\n  identify: [{header: X-Tenant-Id}]\n"
                "routes: [{name: r, match: {claim: {name: a, equals: b}}, respond: {status: 200}}]\n");
    cr_expect(has_warning("gw.yaml:4:14: warning: any client can set header 'x-tenant-id'"));
    cr_expect(has_warning("route 'r' tests a claim, but no authenticator is configured"));
}

static const struct {
    const char *text, *error;
} bad[] = {
    {"auth: {corp: {jwt: {}}}\n", "gw.yaml:3:20: the algorithms need public keys: give 'jwks: {file: PATH}' or 'jwks: {url: URL}'"},
    {"auth: {corp: {jwt: {algorithms: [HS256]}}}\n", "gw.yaml:3:20: HS256/384/512 verify with a shared secret: give 'secret_file'"},
    {"auth: {corp: {jwt: {algorithms: [HS256], secret_file: @/short}}}\n",
     "gw.yaml:3:55: the secret has 10 bytes: HS256/384/512 need at least 32"},
    {"auth: {corp: {jwt: {algorithms: [RS256, none], jwks: {file: @/jwks.json}}}}\n",
     "gw.yaml:3:41: unknown algorithm 'none' (expected RS256/384/512, PS256/384/512, ES256/384/512, EdDSA or HS256/384/512)"},
    {"auth: {corp: {jwt: {jwks: {file: a, url: 'http://x/'}}}}\n", "gw.yaml:3:27: jwks takes exactly one of 'file' or 'url'"},
    {"auth: {corp: {jwt: {jwks: {url: 'ftp://x/'}}}}\n",
     "gw.yaml:3:33: jwks.url must be an http:// or https:// url without spaces"},
    {"auth: {corp: {jwt: {jwks: {url: 'http://x/'}, forward_claims: {sub: Content-Length}}}}\n",
     "gw.yaml:3:69: forward_claims cannot set 'content-length': it is set by the gateway"},
    {"auth: {'no way': {jwt: {jwks: {url: 'http://x/'}}}}\n",
     "gw.yaml:3:8: invalid authenticator name 'no way' (letters, digits, '-', '_'; not none or optional)"},
    {"auth: {k: {api_key: {header: X-K}}}\n", "gw.yaml:3:21: missing key 'keys_file'"},
    {"auth: {k: {jwt: {jwks: {url: 'http://x/'}}, api_key: {}}}\n",
     "gw.yaml:3:11: an authenticator has exactly one of 'jwt' or 'api_key'"},
    {"auth: {k: {jwt: {jwks: {url: 'http://x/'}, realm: 'a\"b'}}}\n",
     "gw.yaml:3:51: realm cannot hold a control character, '\"' or '\\'"},
    {"tenants: {identify: [{api_key: owner}]}\n",
     "gw.yaml:3:32: api_key: tenant is the one form (the tenant a verified API key belongs to)"},
    {"tenants: {identify: [{claim: 'a..b'}]}\n",
     "gw.yaml:3:30: invalid claim name 'a..b' (such as tid, or a dotted path such as org.id)"},
    {"tenants: {identify: [{header: X}], trusted_proxies: [10.0.0.0/33]}\n",
     "gw.yaml:3:54: invalid address block '10.0.0.0/33' (such as 10.0.0.0/8, 192.0.2.7 or fd00::/8)"},
    {"websocket: {on_token_expiry: later}\n", "gw.yaml:3:30: on_token_expiry is close or keep, not 'later'"},
};

Test(auth_config, bad_files_report_their_first_error_exactly)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[1024];
        snprintf(text, sizeof(text), LISTEN "%sroutes: [{name: r, respond: {status: 200}}]\n", bad[i].text);
        cr_expect_str_eq(first_error(text), with_dir(bad[i].error), "#%zu", i);
    }
}

Test(auth_config, a_route_naming_an_unknown_authenticator)
{
    cr_expect_str_eq(first_error(LISTEN "routes:\n  - {name: r, auth: [corp], respond: {status: 200}}\n"),
                     "gw.yaml:4:21: route 'r': unknown authenticator 'corp' (the top-level 'auth:' declares none)");
}

Test(auth_config, a_reload_keeps_the_keys_of_a_jwks_url)
{
    static const char text[] = LISTEN "auth: {corp: {jwt: {jwks: {url: 'http://127.0.0.1:9/jwks'}}}}\n"
                                      "routes: [{name: r, respond: {status: 200}}]\n";
    load(text);
    mg_keyring_t *ring = conf->auth.authenticators[0]->keys;
    size_t skipped;
    char warn[64], err[64];
    static const char jwks[] = "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"a\","
                               "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}";
    mg_keyring_install(ring, mg_keyset_parse(jwks, strlen(jwks), &skipped, warn, sizeof(warn), err, sizeof(err)), 1);
    mg_config_t *next = mg_config_reload_string(conf, text, &errs);
    cr_assert_not_null(next);
    mg_keyring_stats_t st;
    mg_keyring_stats(next->auth.authenticators[0]->keys, &st);
    cr_expect_eq(st.keys, 1);
    mg_config_free(next);
}
