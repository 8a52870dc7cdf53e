/*
 * What the backend gets of a credential: verified claims as headers (forward_claims), the client's
 * own copies of those headers never (a backend that trusts X-User-Id must only ever see ours), and
 * the credential itself unless forward_token allows it.
 */
#include <string.h>
#include "gateway/auth/auth.h"

static int mg_stripped(const mg_auth_conf_t *ac, mg_str_t name)
{
    for (size_t i = 0; i < ac->num_strip_headers; i++)
        if (ac->strip_headers[i].len == name.len && memcmp(ac->strip_headers[i].base, name.base, name.len) == 0)
            return 1;
    return 0;
}

/* A Cookie header's value without cookie `name` (RFC 6265 pairs, "; " between them). */
static mg_str_t mg_cookie_without(mg_str_t line, mg_str_t name, const mg_alloc_t *alloc)
{
    char *out = mg_alloc(alloc, line.len + 1);
    size_t n = 0, i = 0;
    while (i < line.len) {
        while (i < line.len && (line.base[i] == ' ' || line.base[i] == ';'))
            i++;
        size_t start = i;
        while (i < line.len && line.base[i] != ';')
            i++;
        mg_str_t pair = mg_str(line.base + start, i - start);
        if (pair.len == 0 || (pair.len > name.len && pair.base[name.len] == '=' && memcmp(pair.base, name.base, name.len) == 0))
            continue;
        if (n != 0)
            memcpy(out + n, "; ", 2), n += 2;
        memcpy(out + n, pair.base, pair.len);
        n += pair.len;
    }
    return mg_str(out, n);
}

/* The query without parameter `name` (every occurrence). */
static mg_str_t mg_query_without(mg_str_t query, mg_str_t name, const mg_alloc_t *alloc)
{
    char *out = mg_alloc(alloc, query.len + 1);
    size_t n = 0, i = 0;
    while (i <= query.len) {
        size_t start = i;
        while (i < query.len && query.base[i] != '&')
            i++;
        mg_str_t part = mg_str(query.base + start, i - start);
        int found;
        mg_query_param(part, name, &found);
        if (!found && part.len != 0) {
            if (n != 0)
                out[n++] = '&';
            memcpy(out + n, part.base, part.len);
            n += part.len;
        }
        i++;
    }
    return mg_str(out, n);
}

/* Keeps header `h` (possibly edited) in `out`, unless it must go. */
static void mg_keep_header(const mg_auth_conf_t *ac, const mg_auth_source_t *drop, const mg_header_t *h, mg_ctx_t *ctx,
                           mg_header_t *out, size_t *n)
{
    if (mg_stripped(ac, h->name))
        return;
    if (drop != NULL && drop->kind == MG_AUTH_FROM_HEADER && h->name.len == drop->name.len &&
        memcmp(h->name.base, drop->name.base, h->name.len) == 0)
        return;
    out[*n] = *h;
    if (drop != NULL && drop->kind == MG_AUTH_FROM_COOKIE && h->name.len == 6 && memcmp(h->name.base, "cookie", 6) == 0) {
        out[*n].value = mg_cookie_without(h->value, drop->name, &ctx->alloc);
        if (out[*n].value.len == 0)
            return;
    }
    ++*n;
}

/* The forward_claims of the verifying authenticator, as headers. */
static void mg_add_claims(const mg_auth_result_t *res, mg_ctx_t *ctx, mg_header_t *out, size_t *n)
{
    for (size_t i = 0; i < res->by->num_forward_claims; i++) {
        const mg_forward_claim_t *fc = &res->by->forward_claims[i];
        const mg_str_t *v = mg_claims_value(&res->identity->claims, fc->claim);
        if (v != NULL && mg_is_field_value(v->base, v->len))
            out[(*n)++] = (mg_header_t){fc->header, *v};
    }
}

int mg_auth_edit_request(const mg_auth_conf_t *ac, const mg_auth_result_t *res, mg_ctx_t *ctx)
{
    int verified = res->outcome == MG_AUTH_VERIFIED && res->by != NULL;
    const mg_auth_source_t *drop = res->by != NULL && !res->by->forward_token ? &res->by->sources[res->source] : NULL;
    if (ac->num_strip_headers == 0 && drop == NULL && !(verified && res->by->num_forward_claims != 0))
        return 0;
    size_t extra = verified ? res->by->num_forward_claims : 0, n = 0;
    mg_header_t *out = mg_alloc(&ctx->alloc, (ctx->num_headers + extra + 1) * sizeof(*out));
    for (size_t i = 0; i < ctx->num_headers; i++)
        mg_keep_header(ac, drop, &ctx->headers[i], ctx, out, &n);
    if (verified)
        mg_add_claims(res, ctx, out, &n);
    ctx->headers = out;
    ctx->num_headers = n;
    if (drop != NULL && drop->kind == MG_AUTH_FROM_QUERY)
        ctx->query = mg_query_without(ctx->query, drop->name, &ctx->alloc);
    return 1;
}
