/*
 * Tenants at request time: which tenant a request belongs to (tenants.identify) and its
 * quota. Pure functions of the routing context, so they are unit-tested without h2o.
 */
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

static int rule_value(const mg_identify_rule_t *rule, mg_ctx_t *ctx, mg_str_t *value)
{
    if (rule->kind == MG_IDENTIFY_HEADER) {
        const mg_str_t *v = mg_ctx_get_header(ctx, mg_str(rule->header, strlen(rule->header)));
        *value = v != NULL ? *v : mg_str(NULL, 0);
        return 0;
    }
    return regex_value(rule, ctx, value);
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
    for (size_t i = 0; i < tc->num_identify; i++) {
        mg_str_t v;
        /* a rule that cannot decide might have named the tenant: later rules cannot stand in */
        if (rule_value(&tc->identify[i], ctx, &v) != 0)
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
