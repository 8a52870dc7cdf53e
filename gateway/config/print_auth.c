/*
 * `--check --print` of what identifies callers: the authenticators (secrets and keys are files,
 * shown by path; nothing secret is printed), tenants.trusted_proxies, and each route's `auth:` and
 * `require:`.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <string.h>
#include "gateway/config/internal.h"

static void put_cstr(FILE *out, const char *s)
{
    mg__config_print_str(out, s, strlen(s));
}

static void put_sources(const mg_authenticator_t *a, FILE *out)
{
    static const char *const kinds[] = {"header", "cookie", "query"};
    fputs("      from: [", out);
    for (size_t i = 0; i < a->num_sources; i++) {
        const mg_auth_source_t *src = &a->sources[i];
        fprintf(out, "%s{%s: ", i != 0 ? ", " : "", kinds[src->kind]);
        mg__config_print_str(out, src->name.base, src->name.len);
        if (src->kind == MG_AUTH_FROM_HEADER) {
            fputs(", prefix: ", out);
            mg__config_print_str(out, src->prefix.base != NULL ? src->prefix.base : "", src->prefix.len);
        }
        fputc('}', out);
    }
    fputs("]\n", out);
}

static void put_forwarding(const mg_authenticator_t *a, FILE *out)
{
    fputs("      forward_claims: {", out);
    for (size_t i = 0; i < a->num_forward_claims; i++) {
        fputs(i != 0 ? ", " : "", out);
        mg__config_print_str(out, a->forward_claims[i].claim.base, a->forward_claims[i].claim.len);
        fputs(": ", out);
        mg__config_print_str(out, a->forward_claims[i].header.base, a->forward_claims[i].header.len);
    }
    fprintf(out, "}\n      forward_token: %s\n      realm: ", a->forward_token ? "true" : "false");
    put_cstr(out, a->realm);
    fputc('\n', out);
}

static void put_jwks(const mg_authenticator_t *a, FILE *out)
{
    if (a->jwks_file != NULL) {
        fputs("      jwks: {file: ", out);
        put_cstr(out, a->jwks_file);
        fputs("}\n", out);
    } else if (a->jwks_url != NULL) {
        fputs("      jwks: {url: ", out);
        put_cstr(out, a->jwks_url);
        fprintf(out, ", refresh: %" PRIu64 "ms, min_refresh: %" PRIu64 "ms, timeout: %" PRIu64 "ms}\n", a->refresh_ms,
                a->min_refresh_ms, a->timeout_ms);
    }
}

static void put_jwt(const mg_authenticator_t *a, FILE *out)
{
    fputs("    jwt:\n", out);
    if (a->issuer != NULL) {
        fputs("      issuer: ", out);
        put_cstr(out, a->issuer);
        fputc('\n', out);
    }
    fputs("      audiences: [", out);
    for (size_t i = 0; i < a->num_audiences; i++) {
        fputs(i != 0 ? ", " : "", out);
        put_cstr(out, a->audiences[i]);
    }
    fputs("]\n      algorithms: [", out);
    for (int alg = 0, n = 0; alg < MG_JWT_NUM_ALGS; alg++)
        if (a->policy.algorithms & MG_JWT_ALG_BIT(alg))
            fprintf(out, "%s%s", n++ != 0 ? ", " : "", mg_jwt_alg_name((mg_jwt_alg_t)alg));
    fputs("]\n", out);
    put_jwks(a, out);
    if (a->secret_file != NULL) { /* the path; the secret itself is never printed */
        fputs("      secret_file: ", out);
        put_cstr(out, a->secret_file);
        fputc('\n', out);
    }
    fprintf(out,
            "      clock_skew: %" PRId64 "s\n      require_exp: %s\n      max_token_bytes: %zu\n      cache_ttl: %" PRIu64 "ms\n",
            a->policy.clock_skew, a->policy.require_exp ? "true" : "false", a->policy.max_token_bytes, a->cache_ttl_ms);
}

void mg__config_print_auth(const mg_auth_conf_t *ac, FILE *out)
{
    if (ac->num_authenticators == 0)
        return;
    fputs("auth:\n", out);
    for (size_t i = 0; i < ac->num_authenticators; i++) {
        const mg_authenticator_t *a = ac->authenticators[i];
        fprintf(out, "  %s:\n", a->name);
        if (a->kind == MG_AUTH_KIND_JWT) {
            put_jwt(a, out);
        } else {
            fputs("    api_key:\n      keys_file: ", out);
            put_cstr(out, a->keys_file);
            fprintf(out, "  # %zu keys\n", a->apikeys != NULL ? mg_apikeys_size(a->apikeys) : 0);
        }
        put_sources(a, out);
        put_forwarding(a, out);
    }
}

void mg__config_print_trusted_proxies(const mg_tenants_conf_t *tc, FILE *out)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (tc->num_trusted_proxies == 0)
        return;
    fputs("  trusted_proxies: [", out);
    for (size_t i = 0; i < tc->num_trusted_proxies; i++) {
        const mg_cidr_t *c = &tc->trusted_proxies[i];
        char text[INET6_ADDRSTRLEN];
        int v4 = memcmp(c->addr, mapped, 12) == 0 && c->prefix >= 96;
        inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? (const void *)&c->addr[12] : (const void *)c->addr, text, sizeof(text));
        fprintf(out, "%s\"%s/%u\"", i != 0 ? ", " : "", text, v4 ? c->prefix - 96 : c->prefix);
    }
    fputs("]\n", out);
}

void mg__config_print_route_auth(const mg_route_t *r, const char *indent, FILE *out)
{
    const mg_route_auth_t *auth = r->auth;
    if (auth == NULL)
        return;
    if (auth->mode == MG_ROUTE_AUTH_NONE || auth->mode == MG_ROUTE_AUTH_OPTIONAL)
        fprintf(out, "%sauth: %s\n", indent, auth->mode == MG_ROUTE_AUTH_NONE ? "none" : "optional");
    if (auth->mode == MG_ROUTE_AUTH_REQUIRED) {
        fprintf(out, "%sauth: [", indent);
        for (size_t i = 0; i < auth->num_names; i++)
            fprintf(out, "%s%s", i != 0 ? ", " : "", auth->names[i]);
        fputs("]\n", out);
    }
    if (auth->num_require != 0)
        fprintf(out, "%srequire:\n", indent);
    for (size_t i = 0; i < auth->num_require; i++) {
        fprintf(out, "%s  - ", indent);
        mg__config_print_condition(out, auth->require[i]);
        fputc('\n', out);
    }
}
