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

/* The answer's fields as the route's edits see them: h2o's list, edited in place (names are lower
 * case there, and in the edits). */
typedef struct answer_fields {
    h2o_req_t *req;
    mg_str_t got;     /* what `get` returned last */
    uint64_t lengths; /* bit min(len, 63) of each field name's length (a removal leaves its bit) */
} answer_fields_t;

static uint64_t length_bit(size_t len)
{
    return UINT64_C(1) << (len < 63 ? len : 63);
}

static void fields_init(answer_fields_t *f, h2o_req_t *req)
{
    f->req = req;
    f->got = MG_STR_NULL;
    f->lengths = 0;
    for (size_t i = 0; i < req->res.headers.size; i++)
        f->lengths |= length_bit(req->res.headers.entries[i].name->len);
}

/* No field can be named `name`: none has its length. Most edits name a field the answer lacks,
 * and then need no search. */
static int fields_lack(const answer_fields_t *f, mg_str_t name)
{
    return (f->lengths & length_bit(name.len)) == 0;
}

static const mg_str_t *fields_get(void *arg, mg_str_t name)
{
    answer_fields_t *f = arg;
    ssize_t i = fields_lack(f, name) ? -1 : h2o_find_header_by_str(&f->req->res.headers, name.base, name.len, -1);
    if (i < 0)
        return NULL;
    f->got = mg_str(f->req->res.headers.entries[i].value.base, f->req->res.headers.entries[i].value.len);
    return &f->got;
}

/* Removes the fields named `name` from index `from` on; 1 when there was one. */
static int fields_delete(h2o_headers_t *headers, mg_str_t name, ssize_t from)
{
    int found = 0;
    for (ssize_t i = from; (i = h2o_find_header_by_str(headers, name.base, name.len, i - 1)) >= 0; found = 1)
        h2o_delete_header(headers, i);
    return found;
}

static int fields_edit(void *arg, int kind, mg_str_t name, mg_str_t value)
{
    answer_fields_t *f = arg;
    h2o_req_t *req = f->req;
    h2o_headers_t *headers = &req->res.headers;
    if (kind == MG_ACTION_REMOVE_HEADER)
        return !fields_lack(f, name) && fields_delete(headers, name, 0);
    ssize_t first =
        kind == MG_ACTION_SET_HEADER && !fields_lack(f, name) ? h2o_find_header_by_str(headers, name.base, name.len, -1) : -1;
    if (first < 0) {
        h2o_add_header_by_str(&req->pool, headers, name.base, name.len, 1, NULL, value.base, value.len);
        f->lengths |= length_bit(name.len);
        return 1;
    }
    headers->entries[first].value = h2o_iovec_init(value.base, value.len);
    fields_delete(headers, name, first + 1);
    return 1;
}

static void fields_drop_cors(void *arg)
{
    answer_fields_t *f = arg;
    h2o_headers_t *headers = &f->req->res.headers;
    if ((f->lengths & ~(length_bit(23) - 1)) == 0) /* "access-control-" and 8 more bytes at least */
        return;
    for (size_t i = headers->size; i-- > 0;) {
        h2o_iovec_t *name = headers->entries[i].name;
        if (name->len > 22 && memcmp(name->base, "access-control-", 15) == 0)
            h2o_delete_header(headers, (ssize_t)i);
    }
}

static void fields_vary(void *arg, mg_str_t token)
{
    answer_fields_t *f = arg;
    h2o_set_header_token(&f->req->pool, &f->req->res.headers, H2O_TOKEN_VARY, token.base, token.len);
    f->lengths |= length_bit(4);
}

static const mg_fields_ops_t answer_fields_ops = {fields_get, fields_edit, fields_drop_cors, fields_vary};

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
    answer_fields_t fields;
    fields_init(&fields, req);
    mg_ctx_response_t res = {.status = req->res.status, .ops = &answer_fields_ops, .fields = &fields};
    res.status_text[mg_format_u64(res.status_text, (uint64_t)(req->res.status % 1000))] = '\0';
    ctx = context_of(r, &scratch);
    mg_alloc_t saved = ctx->alloc;
    ctx->alloc = (mg_alloc_t){pool_alloc, &req->pool};
    mg_route_answer_edit(route, ctx, r->origin.base != NULL ? r->origin : origin_of(req), gateway_made, &res, &edit);
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
