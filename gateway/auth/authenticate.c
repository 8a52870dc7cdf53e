/*
 * At request time: find the request's credential, verify it once (the worker's cache remembers
 * verified tokens), and say who is calling. The first authenticator, in the order they are
 * declared, one of whose sources is present decides; a credential that fails is never passed to
 * the next one (a client must not be able to pick the authenticator that is easiest to fool).
 */
#include <strings.h>
#include "gateway/auth/internal.h"

/* The only instance of header `name`, or base NULL; `*several` when there are more. */
static mg_str_t mg_single_header(const mg_ctx_t *ctx, mg_str_t name, int *several)
{
    mg_str_t found = MG_STR_NULL;
    *several = 0;
    for (size_t i = 0; i < ctx->num_headers; i++) {
        const mg_header_t *h = &ctx->headers[i];
        if (h->name.len != name.len || memcmp(h->name.base, name.base, name.len) != 0)
            continue;
        if (found.base != NULL)
            *several = 1;
        else
            found = h->value.base != NULL ? h->value : mg_str("", 0);
    }
    return found;
}

/* Cookie `name` in one Cookie header's value ("a=1; b=2"): its value, without DQUOTEs around it
 * (RFC 6265 4.1.1); base NULL when absent. */
static mg_str_t mg_cookie_in(mg_str_t line, mg_str_t name)
{
    size_t i = 0;
    while (i < line.len) {
        while (i < line.len && (line.base[i] == ' ' || line.base[i] == ';'))
            i++;
        size_t start = i;
        while (i < line.len && line.base[i] != ';')
            i++;
        mg_str_t pair = mg_str(line.base + start, i - start);
        if (pair.len > name.len && pair.base[name.len] == '=' && memcmp(pair.base, name.base, name.len) == 0) {
            mg_str_t v = mg_str(pair.base + name.len + 1, pair.len - name.len - 1);
            while (v.len != 0 && v.base[v.len - 1] == ' ')
                v.len--;
            if (v.len >= 2 && v.base[0] == '"' && v.base[v.len - 1] == '"')
                v = mg_str(v.base + 1, v.len - 2);
            return v;
        }
    }
    return MG_STR_NULL;
}

static mg_str_t mg_cookie_value(const mg_ctx_t *ctx, mg_str_t name)
{
    for (size_t i = 0; i < ctx->num_headers; i++) {
        const mg_header_t *h = &ctx->headers[i];
        if (h->name.len != 6 || memcmp(h->name.base, "cookie", 6) != 0)
            continue;
        mg_str_t v = mg_cookie_in(h->value, name);
        if (v.base != NULL)
            return v;
    }
    return MG_STR_NULL;
}

static mg_str_t mg_query_value(const mg_ctx_t *ctx, mg_str_t name)
{
    int found;
    mg_str_t v = mg_query_param(ctx->query, name, &found);
    if (!found)
        return MG_STR_NULL;
    char *buf = mg_alloc(&ctx->alloc, v.len + 1);
    size_t n = mg_percent_decode(v.base, v.len, buf, 1);
    buf[n] = '\0';
    return mg_str(buf, n);
}

/* A header source is present only when its prefix is there too: "Basic ..." is not a bearer
 * token, and is left to whoever understands it. A header given twice is present (and refused).
 * `{header: N}` without `prefix:` has a prefix of base NULL, which strncasecmp must never get,
 * not even for 0 bytes (its arguments are declared nonnull). */
static mg_str_t mg_header_value(const mg_auth_source_t *src, const mg_ctx_t *ctx, int *several)
{
    mg_str_t v = mg_single_header(ctx, src->name, several);
    if (v.base == NULL)
        return v;
    if (v.len < src->prefix.len || (src->prefix.len != 0 && strncasecmp(v.base, src->prefix.base, src->prefix.len) != 0))
        return *several ? mg_str("", 0) : MG_STR_NULL;
    v = mg_str(v.base + src->prefix.len, v.len - src->prefix.len);
    while (v.len != 0 && (v.base[v.len - 1] == ' ' || v.base[v.len - 1] == '\t'))
        v.len--;
    return v;
}

static mg_str_t mg_source_value(const mg_auth_source_t *src, const mg_ctx_t *ctx, int *several)
{
    *several = 0;
    switch (src->kind) {
    case MG_AUTH_FROM_HEADER:
        return mg_header_value(src, ctx, several);
    case MG_AUTH_FROM_COOKIE:
        return mg_cookie_value(ctx, src->name);
    default:
        return mg_query_value(ctx, src->name);
    }
}

mg_str_t mg_auth_source_value(const mg_auth_source_t *src, const mg_ctx_t *ctx)
{
    int several;
    return mg_source_value(src, ctx, &several);
}

/* A result that may yet change (a fetch it can wait for is on its way) is counted when settled. */
static void mg_finish(mg_auth_result_t *res, mg_auth_reason_t reason, unsigned worker)
{
    res->reason = reason;
    res->outcome = reason == MG_AUTH_OK ? MG_AUTH_VERIFIED : reason == MG_AUTH_NO_KEYS ? MG_AUTH_UNAVAILABLE : MG_AUTH_FAILED;
    if (res->keys_ticket == 0)
        mg_auth_count(res->by, worker, reason);
}

void mg_auth_settle(mg_auth_result_t *res, unsigned worker)
{
    if (res->keys_ticket == 0)
        return;
    res->keys_ticket = 0;
    mg_auth_count(res->by, worker, res->reason);
}

/* A token the keys could not decide: an unknown kid, or no keys yet. The fetcher is asked to look
 * again (at most once per min_refresh), for JWKS that come from a url; the ticket of a fetch on
 * its way (this ask's or an earlier one's), or 0. */
static uint64_t mg_want_keys(const mg_authenticator_t *a, mg_auth_reason_t reason, int64_t now_ms)
{
    if (a->jwks_url == NULL || a->keys == NULL || (reason != MG_AUTH_UNKNOWN_KEY && reason != MG_AUTH_NO_KEYS))
        return 0;
    mg_keyring_want(a->keys, a->min_refresh_ms, now_ms);
    return mg_keyring_pending(a->keys);
}

/* The time a verified token stays cached: until its exp (with the skew it is granted), at most ttl. */
static int64_t mg_expiry(const mg_authenticator_t *a, const mg_identity_t *id, int64_t now_ms)
{
    int64_t until = now_ms + (int64_t)a->cache_ttl_ms;
    if (id->exp != INT64_MAX && id->exp < INT64_MAX / 1000 - a->policy.clock_skew) {
        int64_t exp_ms = (id->exp + a->policy.clock_skew) * 1000;
        until = exp_ms < until ? exp_ms : until;
    }
    return until;
}

static mg_auth_reason_t mg_verify_token(const mg_authenticator_t *a, mg_auth_cache_t *cache, uint64_t conf_generation,
                                        mg_str_t token, int64_t now_ms, mg_auth_result_t *res)
{
    mg_auth_cache_key_t key = {.conf_generation = conf_generation, .by = a};
    int cacheable = cache != NULL && a->cache_ttl_ms != 0;
    if (token.len > a->policy.max_token_bytes)
        return MG_AUTH_TOO_LARGE; /* not even hashed */
    if (cacheable) {
        key.keys_generation = a->keys != NULL ? mg_keyring_generation(a->keys) : 0;
        mg__auth_cache_hash(cache, token.base, token.len, &key);
        if ((res->identity = mg__auth_cache_find(cache, &key, now_ms)) != NULL) {
            res->cached = 1;
            return MG_AUTH_OK;
        }
    }
    mg_keys_t *keys = a->keys != NULL ? mg_keyring_acquire(a->keys) : NULL;
    mg_jwt_result_t jr;
    mg_jwt_verify(&a->policy, mg_keys_set(keys), token.base, token.len, now_ms / 1000, &jr);
    mg_keys_release(keys);
    res->identity = jr.identity;
    if (jr.reason == MG_AUTH_OK && cacheable)
        mg__auth_cache_put(cache, &key, jr.identity, mg_expiry(a, jr.identity, now_ms));
    res->keys_ticket = mg_want_keys(a, jr.reason, now_ms);
    return jr.reason;
}

static mg_auth_reason_t mg_verify_api_key(const mg_authenticator_t *a, mg_str_t key, mg_auth_result_t *res)
{
    mg_identity_t *id =
        key.len != 0 && key.len <= a->policy.max_token_bytes ? mg_apikeys_find(a->apikeys, key.base, key.len) : NULL;
    if (id == NULL)
        return MG_AUTH_UNKNOWN_API_KEY;
    res->identity = mg_identity_retain(id);
    return MG_AUTH_OK;
}

/* The first source of `a` present in the request, or -1. */
static long mg_find_source(const mg_authenticator_t *a, const mg_ctx_t *ctx, mg_str_t *value, int *several)
{
    for (size_t i = 0; i < a->num_sources; i++) {
        *value = mg_source_value(&a->sources[i], ctx, several);
        if (value->base != NULL)
            return (long)i;
    }
    return -1;
}

void mg_auth_authenticate(const mg_auth_conf_t *ac, mg_auth_cache_t *cache, uint64_t conf_generation, const mg_ctx_t *ctx,
                          int64_t now_ms, unsigned worker, mg_auth_result_t *res)
{
    *res = (mg_auth_result_t){.outcome = MG_AUTH_ANONYMOUS};
    for (size_t i = 0; i < ac->num_authenticators; i++) {
        const mg_authenticator_t *a = ac->authenticators[i];
        mg_str_t value;
        int several;
        long src = mg_find_source(a, ctx, &value, &several);
        if (src < 0)
            continue;
        res->by = a;
        res->source = (size_t)src;
        /* two credentials where one is read: which one the backend believes is anybody's guess */
        if (several)
            mg_finish(res, MG_AUTH_MALFORMED, worker);
        else if (a->kind == MG_AUTH_KIND_API_KEY)
            mg_finish(res, mg_verify_api_key(a, value, res), worker);
        else
            mg_finish(res, value.len == 0 ? MG_AUTH_MALFORMED : mg_verify_token(a, cache, conf_generation, value, now_ms, res),
                      worker);
        return;
    }
}
