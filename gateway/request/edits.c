/*
 * What the route does to its answer before the head goes out: the CORS fields of an actual
 * request's answer (cors: the policy is routes/cors.c's) and the route's response actions
 * (response:), on the backend's answers and, for the `always` ones, on the gateway's own. A
 * preflight is answered here too, before the tenant's quota and the route's credential
 * (browsers send neither with one): the route is found as if the request were the one the
 * preflight asks about (its Access-Control-Request-Method).
 */
#include <string.h>
#include "gateway/internal.h"
#include "gateway/format.h"
#include "gateway/request/edits.h"

/* The request's Origin, when it sent one (the first field; base NULL otherwise). */
static mg_str_t origin_of(h2o_req_t *req)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("origin"), -1);
    return i >= 0 ? mg_str(req->headers.entries[i].value.base, req->headers.entries[i].value.len) : mg_str(NULL, 0);
}

static mg_str_t header_value(h2o_req_t *req, const char *name, size_t len)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, name, len, -1);
    return i >= 0 ? mg_str(req->headers.entries[i].value.base, req->headers.entries[i].value.len) : mg_str(NULL, 0);
}

void mg_edits_prepare(mg_request_t *r, mg_ctx_t *ctx)
{
    const mg_route_t *route = r->route;
    if (route->response_from == NULL)
        return;
    /* the Origin as the client sent it: request actions may remove it before the backend sees it */
    if (mg_route_cors(route) != NULL)
        r->origin = origin_of(r->req);
    if (!mg_route_response_needs_ctx(route)) {
        r->ctx = NULL;
        return;
    }
    /* on_req's context is on its stack, and the answer comes after it returned (a quota decision
     * that waited for the store has a copy in the pool: it is copied again, which is rare) */
    mg_ctx_t *kept = h2o_mem_alloc_pool(&r->req->pool, sizeof(*kept));
    *kept = *ctx;
    r->ctx = kept;
}

void mg_edits_put(mg_request_t *r, h2o_req_t *req, const mg_cors_answer_t *a)
{
    for (size_t i = 0; i < a->num_headers; i++) {
        const mg_header_t *h = &a->headers[i];
        if (h->name.len == 4 && memcmp(h->name.base, "vary", 4) == 0) /* merged with a Vary already there */
            h2o_set_header_token(&req->pool, &req->res.headers, H2O_TOKEN_VARY, h->value.base, h->value.len);
        else
            h2o_add_header_by_str(&req->pool, &req->res.headers, h->name.base, h->name.len, 1, NULL, h->value.base, h->value.len);
    }
}

/* ---------------------------------------------------------------------------------------
 * The answer's edits (routes/response.c makes them on the answer's fields as the route tool does)
 */
static void *pool_alloc(void *pool, size_t size)
{
    return h2o_mem_alloc_pool(pool, size);
}

/* The answer's fields as the route sees them (names are lower case in h2o's lists). */
static mg_header_t *fields_of(h2o_req_t *req)
{
    mg_header_t *fields = h2o_mem_alloc_pool(&req->pool, sizeof(*fields) * (req->res.headers.size + 1));
    for (size_t i = 0; i < req->res.headers.size; i++) {
        const h2o_header_t *h = &req->res.headers.entries[i];
        fields[i] = (mg_header_t){mg_str(h->name->base, h->name->len), mg_str(h->value.base, h->value.len)};
    }
    return fields;
}

static void replace_fields(h2o_req_t *req, const mg_ctx_response_t *res)
{
    req->res.headers = (h2o_headers_t){NULL, 0, 0};
    for (size_t i = 0; i < res->num_headers; i++) {
        const mg_header_t *h = &res->headers[i];
        h2o_add_header_by_str(&req->pool, &req->res.headers, h->name.base, h->name.len, 1, NULL, h->value.base, h->value.len);
    }
}

/* The context the templates read: the one kept with the request, or (when the route's templates
 * read none of it) one made of what the request keeps, which only lends its allocator. */
static mg_ctx_t *context_of(mg_request_t *r, mg_ctx_t *scratch)
{
    if (r->ctx != NULL)
        return r->ctx;
    memset(scratch, 0, offsetof(mg_ctx_t, vars));
    scratch->method = r->method;
    scratch->host = r->host;
    scratch->path = r->path;
    scratch->query = r->query;
    scratch->peer = r->peer;
    scratch->tenant = r->tenant;
    scratch->num_vars = 0;
    scratch->error = (mg_match_error_t){.reason = NULL};
    scratch->trace = NULL;
    scratch->response = NULL;
    return scratch;
}

/* The route whose edits apply: the request's, or for the tenant's 429 (decided before the route
 * is chosen) the route the request would have taken, so that a page can read the refusal (CORS)
 * and it carries the `always` fields. */
static const mg_route_t *route_of(mg_request_t *r, int gateway_made)
{
    if (r->routed || r->route != NULL || !gateway_made || r->ctx == NULL || !r->conf->routes->edits_answers)
        return r->route;
    const mg_route_t *route = mg_routes_match(r->conf->routes, r->ctx);
    r->ctx->error = (mg_match_error_t){.reason = NULL};
    return route;
}

void mg_edits_apply(mg_request_t *r, h2o_req_t *req, int gateway_made)
{
    mg_ctx_t scratch, *ctx;
    mg_answer_edit_t edit;
    if (r->preflight)
        return;
    const mg_route_t *route = route_of(r, gateway_made);
    if (route == NULL || route->response_from == NULL)
        return;
    mg_ctx_response_t res = {.status = req->res.status, .headers = fields_of(req), .num_headers = req->res.headers.size};
    res.status_text[mg_format_u64(res.status_text, (uint64_t)(req->res.status % 1000))] = '\0';
    ctx = context_of(r, &scratch);
    mg_alloc_t saved = ctx->alloc;
    ctx->alloc = (mg_alloc_t){pool_alloc, &req->pool};
    if (mg_route_answer_edit(route, ctx, r->origin.base != NULL ? r->origin : origin_of(req), gateway_made, &res, &edit))
        replace_fields(req, &res);
    ctx->alloc = saved;
    if (edit.failed != 0)
        mg_stat_add(&r->worker->stats.response_action_failures, edit.failed);
    if (edit.cors_refused)
        mg_stat_inc(&r->worker->stats.cors_refused);
}

/* ---------------------------------------------------------------------------------------
 * Preflights
 */
int mg_edits_is_preflight(h2o_req_t *req)
{
    return h2o_memis(req->method.base, req->method.len, H2O_STRLIT("OPTIONS")) &&
           h2o_find_header_by_str(&req->headers, H2O_STRLIT("origin"), -1) >= 0 &&
           h2o_find_header_by_str(&req->headers, H2O_STRLIT("access-control-request-method"), -1) >= 0;
}

int mg_edits_preflight(mg_request_t *r, mg_ctx_t *ctx)
{
    h2o_req_t *req = r->req;
    mg_str_t method = header_value(req, H2O_STRLIT("access-control-request-method")), saved = ctx->method;
    size_t vars = ctx->num_vars;
    /* the route of the request the browser asks about; a route that matches only OPTIONS has no
     * policy to give: the preflight then goes its way as any OPTIONS request */
    ctx->method = method;
    const mg_route_t *route = mg_routes_match(r->conf->routes, ctx);
    const mg_cors_t *cors = route != NULL ? mg_route_cors(route) : NULL;
    ctx->method = saved;
    ctx->num_vars = vars;
    ctx->error = (mg_match_error_t){.reason = NULL};
    if (cors == NULL)
        return 0;
    mg_cors_answer_t a;
    mg_cors_preflight(cors, origin_of(req), method, header_value(req, H2O_STRLIT("access-control-request-headers")), &a);
    r->route = route;
    r->preflight = 1;
    mg_stat_inc(a.refusal == NULL ? &r->worker->stats.cors_preflight_allowed : &r->worker->stats.cors_preflight_refused);
    mg_request_send_preflight(r, &a);
    return 1;
}
