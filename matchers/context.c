/*
 * The routing context's variable stack and header lookup. Variables form a stack so that
 * undoing a failed branch is a single assignment to num_vars (see mg_matcher_match).
 */
#include <string.h>

#include "matchers/matchers.h"

static int mg_str_eq(mg_str_t a, mg_str_t b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.base, b.base, a.len) == 0);
}

static int mg_str_eq_lower(mg_str_t lower, mg_str_t any)
{
    if (lower.len != any.len)
        return 0;
    for (size_t i = 0; i != lower.len; ++i) {
        unsigned char c = (unsigned char)any.base[i];
        if (c >= 'A' && c <= 'Z')
            c += 'a' - 'A';
        if (c != (unsigned char)lower.base[i])
            return 0;
    }
    return 1;
}

int mg_ctx_set_var_flags(mg_ctx_t *ctx, mg_str_t name, mg_str_t value, int flags)
{
    if (ctx->num_vars >= MG_CTX_MAX_VARS)
        return -1;
    ctx->vars[ctx->num_vars++] = (mg_var_t){name, value, flags};
    return 0;
}

int mg_ctx_set_var(mg_ctx_t *ctx, mg_str_t name, mg_str_t value)
{
    return mg_ctx_set_var_flags(ctx, name, value, 0);
}

const mg_var_t *mg_ctx_find_var(const mg_ctx_t *ctx, mg_str_t name)
{
    /* Newest first: a later binding shadows an earlier one. */
    for (size_t i = ctx->num_vars; i != 0; --i) {
        if (mg_str_eq(ctx->vars[i - 1].name, name))
            return &ctx->vars[i - 1];
    }
    return NULL;
}

const mg_str_t *mg_ctx_get_var(const mg_ctx_t *ctx, mg_str_t name)
{
    const mg_var_t *v = mg_ctx_find_var(ctx, name);
    return v != NULL ? &v->value : NULL;
}

const mg_str_t *mg_ctx_get_header(const mg_ctx_t *ctx, mg_str_t name)
{
    /* Header names in the context are lower case already; `name` is tolerated in any case
     * so that a template such as ${header.X-Account-Id} needs no copy to look up. */
    for (size_t i = 0; i != ctx->num_headers; ++i) {
        if (mg_str_eq_lower(ctx->headers[i].name, name))
            return &ctx->headers[i].value;
    }
    return NULL;
}
