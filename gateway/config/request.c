/*
 * A request made ready for the route tree: what the request handler (gateway/request/handler.c) and the
 * route tester (`matchgate route`, gateway/route_tool/route_tool.c) both do between a request's head and
 * mg_routes_match, so that the tester shows what the gateway does, by the same code. Pure
 * functions of the configuration and the head; no h2o.
 */
#include <string.h>
#include "gateway/config/config.h"

mg_str_t mg_request_host(mg_str_t authority, const mg_alloc_t *alloc)
{
    size_t len = authority.len;
    for (size_t i = authority.len; i-- > 0;) {
        if (authority.base[i] == ':') {
            len = i;
            break;
        }
        if (authority.base[i] < '0' || authority.base[i] > '9')
            break;
    }
    char *buf = mg_alloc(alloc, len + 1);
    for (size_t i = 0; i < len; i++) {
        char c = authority.base[i];
        buf[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    buf[len] = '\0';
    return mg_str(buf, len);
}

static int refuse(mg_refusal_t *why, int status, const char *code, const char *reason)
{
    *why = (mg_refusal_t){status, code, reason, 0};
    return -1;
}

/* The credential, verified before the tenant is identified (a tenant may come from a claim): its
 * claims become the context's. The route decides later what a failure means (mg_auth_decide). */
static const mg_identity_t *authenticate(const mg_config_t *conf, const mg_request_head_t *head, mg_ctx_t *ctx)
{
    const mg_identity_t *who = head->claims_given;
    if (who == NULL && head->auth != NULL) {
        *head->auth = (mg_auth_result_t){.outcome = MG_AUTH_ANONYMOUS};
        if (conf->auth.num_authenticators != 0)
            mg_auth_authenticate(&conf->auth, head->auth_cache, conf->generation, ctx, head->now_ms, head->worker, head->auth);
        who = head->auth->identity;
    }
    ctx->claims = who != NULL ? &who->claims : NULL;
    return who;
}

/* The tenant rules: 0 to go on (the tenant in ctx->tenant, maybe empty), or -1 with *why. */
static int identify(const mg_config_t *conf, mg_ctx_t *ctx, const mg_identity_t *who, mg_refusal_t *why)
{
    int identified = mg_tenants_identify_as(&conf->tenants, ctx, who);
    if (identified < 0 && ctx->error.reason != NULL) {
        refuse(why, 400, "bad-request", "a regex of tenants.identify could not decide");
        why->undecided = 1;
        return -1;
    }
    if (identified < 0)
        return refuse(why, 400, "bad-request", "invalid tenant name");
    if (identified == 0 && conf->tenants.reject_unidentified)
        return refuse(why, 401, "unidentified", "the request names no tenant");
    return 0;
}

int mg_request_prepare(const mg_config_t *conf, const mg_request_head_t *head, const mg_alloc_t *alloc, mg_ctx_t *ctx,
                       mg_refusal_t *why)
{
    char *norm = mg_alloc(alloc, head->path.len + 1);
    int flags = conf->limits.keep_escaped_slashes ? 0 : MG_PATH_REJECT_ESCAPED_SLASHES;

    /* path and host stay empty until known: the caller logs what it has */
    *ctx = (mg_ctx_t){.method = head->method,
                      .scheme = head->scheme,
                      .query = head->query,
                      .peer = head->peer,
                      .headers = head->headers,
                      .num_headers = head->num_headers,
                      .websocket = head->websocket,
                      .alloc = *alloc,
                      .trace = head->trace};
    long nlen = mg_path_normalize_ex(head->path.base, head->path.len, norm, flags);
    if (nlen < 0)
        return refuse(why, 400, "bad-request",
                      nlen == MG_PATH_ESCAPED_SLASH ? "the request path has an escaped '/' or '\\' (limits.escaped_slashes)"
                                                    : "invalid request path");
    ctx->path = mg_str(norm, (size_t)nlen);
    ctx->host = mg_request_host(head->authority, alloc);
    if (ctx->host.len == 0 && head->host_required)
        return refuse(why, 400, "bad-request", "HTTP/1.1 request without Host");
    return identify(conf, ctx, authenticate(conf, head, ctx), why);
}
