/*
 * Tenants at request time: which tenant a request belongs to (tenants.identify) and its
 * quota. Pure functions of the routing context, so they are unit-tested without h2o.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/config/config.h"

static int compare_name(const void *key, const void *item)
{
    return mg_str_compare(*(const mg_str_t *)key, ((const mg_tenant_quota_t *)item)->tenant);
}

const mg_quota_t *mg_tenants_quota(const mg_tenants_conf_t *tc, mg_str_t tenant)
{
    const mg_tenant_quota_t *q = NULL;

    if (tc->num_quotas != 0 && tenant.len != 0)
        q = bsearch(&tenant, tc->quotas, tc->num_quotas, sizeof(*tc->quotas), compare_name);
    if (q != NULL)
        return &q->quota;
    return tc->default_quota.requests != 0 ? &tc->default_quota : NULL;
}

/* The group `tenant` of a regex rule into *value (empty without a match); the variables the
 * match bound are undone. MG_MATCH_ERROR when the regex could not decide, else 0. */
static int regex_value(const mg_identify_rule_t *rule, mg_ctx_t *ctx, mg_str_t *value)
{
    size_t saved = ctx->num_vars;
    int encoded = rule->kind == MG_IDENTIFY_PATH ? MG_VAR_ENCODED : 0;
    int matched = mg_regex_match(rule->regex, rule->kind == MG_IDENTIFY_PATH ? ctx->path : ctx->host, ctx, encoded);

    *value = mg_str(NULL, 0);
    if (matched == 1) {
        const mg_str_t *v = mg_ctx_get_var(ctx, mg_str("tenant", 6));
        if (v != NULL && v->len != 0 && encoded) {
            /* a path slice is still %-encoded: the tenant is the decoded name */
            char *buf = mg_alloc(&ctx->alloc, v->len);
            *value = mg_str(buf, mg_percent_decode(v->base, v->len, buf, 0));
        } else if (v != NULL) {
            *value = *v;
        }
    }
    ctx->num_vars = saved;
    return matched == MG_MATCH_ERROR ? MG_MATCH_ERROR : 0;
}

/* 1 when the peer (ctx->peer, as the gateway writes it) is inside one of the blocks. */
static int peer_trusted(const mg_tenants_conf_t *tc, const mg_ctx_t *ctx)
{
    uint8_t addr[16] = {0};
    char text[64];
    struct in_addr v4;
    if (ctx->peer.len == 0 || ctx->peer.len >= sizeof(text))
        return 0;
    memcpy(text, ctx->peer.base, ctx->peer.len);
    text[ctx->peer.len] = '\0';
    if (inet_pton(AF_INET, text, &v4) == 1) {
        addr[10] = addr[11] = 0xff;
        memcpy(&addr[12], &v4, 4);
    } else if (inet_pton(AF_INET6, text, addr) != 1) {
        return 0;
    }
    for (size_t i = 0; i < tc->num_trusted_proxies; i++) {
        const mg_cidr_t *c = &tc->trusted_proxies[i];
        unsigned whole = c->prefix / 8, rest = c->prefix % 8;
        if (memcmp(addr, c->addr, whole) == 0 && (rest == 0 || ((addr[whole] ^ c->addr[whole]) & (0xff00u >> rest) & 0xff) == 0))
            return 1;
    }
    return 0;
}

static int rule_value(const mg_tenants_conf_t *tc, const mg_identify_rule_t *rule, mg_ctx_t *ctx, const mg_identity_t *who,
                      mg_str_t *value)
{
    const mg_str_t *v = NULL;
    switch (rule->kind) {
    case MG_IDENTIFY_HEADER:
        /* with trusted_proxies, only a listed peer's header is believed */
        if (tc->num_trusted_proxies == 0 || peer_trusted(tc, ctx))
            v = mg_ctx_get_header(ctx, mg_str(rule->header, strlen(rule->header)));
        break;
    case MG_IDENTIFY_CLAIM:
        v = mg_claims_value(ctx->claims, mg_str(rule->header, strlen(rule->header)));
        break;
    case MG_IDENTIFY_API_KEY:
        v = who != NULL && who->tenant.len != 0 ? &who->tenant : NULL;
        break;
    default:
        return regex_value(rule, ctx, value);
    }
    *value = v != NULL ? *v : mg_str(NULL, 0);
    return 0;
}

/*
 * Names end up in logs, headers and the admin API: no control characters. They are also the
 * key of a quota and often a path segment ("/${tenant}/..."): a name with '/' or '\', or one
 * that is "." or "..", could name another tenant's path and get a fresh quota, so it is
 * refused rather than encoded (encoding would still make a new quota key).
 */
static int valid_name(mg_str_t v)
{
    if (v.len > MG_TENANT_MAX_LEN)
        return 0;
    if ((v.len == 1 && v.base[0] == '.') || (v.len == 2 && v.base[0] == '.' && v.base[1] == '.'))
        return 0;
    for (size_t i = 0; i < v.len; i++)
        if ((unsigned char)v.base[i] < 0x20 || v.base[i] == 0x7f || v.base[i] == '/' || v.base[i] == '\\')
            return 0;
    return 1;
}

int mg_tenants_identify(const mg_tenants_conf_t *tc, mg_ctx_t *ctx)
{
    return mg_tenants_identify_as(tc, ctx, NULL);
}

int mg_tenants_identify_as(const mg_tenants_conf_t *tc, mg_ctx_t *ctx, const mg_identity_t *who)
{
    for (size_t i = 0; i < tc->num_identify; i++) {
        mg_str_t v;
        /* a rule that cannot decide might have named the tenant: later rules cannot stand in */
        if (rule_value(tc, &tc->identify[i], ctx, who, &v) != 0)
            return -1;
        if (v.len == 0)
            continue;
        if (!valid_name(v))
            return -1;
        ctx->tenant = v;
        return 1;
    }
    return 0;
}
