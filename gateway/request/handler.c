/*
 * The request handler: every request h2o accepts comes here, is checked, becomes a routing
 * context, is matched against the route tree and ends with exactly one response: the route's own
 * (`respond`, `redirect`), the backend's (`forward`, through dispatch), a WebSocket session's
 * (tunnel, bridge), or a gateway-made error (response.c).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include "gateway/internal.h"
#include "gateway/request/accesslog.h"
#include "gateway/request/dispatch.h"
#include "gateway/request/edits.h"
#include "gateway/request/mirror.h"
#include "gateway/format.h"
#include "gateway/request/headers.h"
#include "gateway/quota/quota.h"
#include "gateway/process.h"
#include "gateway/request/trace.h"
#include "gateway/backend/backend.h"
#include "gateway/connections/connections.h"
#include "gateway/websocket/websocket.h"

typedef struct mg_handler {
    h2o_handler_t super;
    mg_gateway_t *gw;
} mg_handler_t;

static void add_header(h2o_req_t *req, const char *name, size_t nlen, const char *value, size_t vlen)
{
    h2o_add_header_by_str(&req->pool, &req->res.headers, name, nlen, 0, NULL, value, vlen);
}

/* Called when h2o frees the request: the client got its response or went away. */
static void on_request_dispose(void *p)
{
    mg_request_t *r = p;
    mg_limits_cancel(r); /* a quota decision still waiting for Redis */
    mg_request_wait_keys_cancel(r);
    if (r->forward != NULL)
        mg_forward_cancel(r);
    if (r->tunnel != NULL)
        mg_ws_tunnel_cancel(r);
    mg_dispatch_release(r); /* after the transfer stopped: the next request of its key may start */
    mg_identity_release(r->auth.identity);
    /* a 101 handed the connection over to a WebSocket session (gateway/websocket/) */
    mg_conn_request_end(r->conn, r->status == 101);
    if (!r->logged && r->status == 0)
        r->status = 499; /* the client closed before a response could be sent (nginx's code) */
    mg_request_log(r);
    mg_stat_dec(&r->worker->stats.in_flight);
    mg_worker_conf_drop(r->worker, r->conf);
}

static mg_str_t peer_of(h2o_req_t *req)
{
    struct sockaddr_storage ss;
    socklen_t len = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
    char *buf = h2o_mem_alloc_pool(&req->pool, INET6_ADDRSTRLEN);
    buf[0] = '\0';
    if (len != 0 && ss.ss_family == AF_INET) /* the common case, without inet_ntop's sprintf */
        return mg_str(buf, mg_format_ipv4(buf, (const uint8_t *)&((struct sockaddr_in *)&ss)->sin_addr));
    if (len != 0 && ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, buf, INET6_ADDRSTRLEN);
    return mg_str(buf, strlen(buf));
}

/* The authority the client sent; empty when it sent none (h2o then fills in the name of its host
 * configuration). */
static mg_str_t authority_of(h2o_req_t *req)
{
    h2o_iovec_t a = req->authority;
    return a.base == req->hostconf->authority.hostport.base ? mg_str("", 0) : mg_str(a.base, a.len);
}

static mg_str_t request_id_of(mg_worker_t *w, h2o_req_t *req)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
    if (i >= 0) {
        h2o_iovec_t v = req->headers.entries[i].value;
        if (v.len != 0 && v.len <= 128 && mg_header_value_is_safe(v.base, v.len))
            return mg_str(v.base, v.len);
    }
    /* splitmix64 over a per-worker counter seeded from getrandom: ids must be unique, not secret */
    char *buf = h2o_mem_alloc_pool(&req->pool, 32);
    mg_format_hex64(buf, mg_splitmix64(&w->rng[0]));
    mg_format_hex64(buf + 16, mg_splitmix64(&w->rng[1]));
    return mg_str(buf, 32);
}

/* The request's trace context (trace.h): the client's trace continued with a span of the
 * gateway's, or a new one. Two traceparent fields are invalid (W3C Trace Context 3.2). */
static void trace_of(mg_worker_t *w, mg_request_t *r)
{
    h2o_req_t *req = r->req;
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("traceparent"), -1);
    char *trace_id = h2o_mem_alloc_pool(&req->pool, MG_TRACE_ID_LEN), flags[2] = {'0', '0'};
    r->kept_state =
        i >= 0 && h2o_find_header_by_str(&req->headers, H2O_STRLIT("traceparent"), i) < 0 &&
        mg_traceparent_parse(mg_str(req->headers.entries[i].value.base, req->headers.entries[i].value.len), trace_id, flags);
    if (!r->kept_state)
        mg_trace_id_new(trace_id, mg_splitmix64(&w->rng[0]), mg_splitmix64(&w->rng[1]));
    char *parent = h2o_mem_alloc_pool(&req->pool, MG_TRACEPARENT_LEN + 1);
    mg_traceparent_format(parent, trace_id, mg_splitmix64(&w->rng[0]), flags);
    r->trace_id = mg_str(trace_id, MG_TRACE_ID_LEN);
    r->traceparent = mg_str(parent, MG_TRACEPARENT_LEN);
}

/* What the backend gets of the trace context: the gateway's traceparent in place of the client's,
 * and the client's tracestate only when its traceparent was valid. */
static void set_trace_headers(mg_request_t *r)
{
    h2o_headers_t *headers = &r->req->headers;
    size_t kept = 0;
    for (size_t i = 0; i < headers->size; i++) {
        h2o_iovec_t *name = headers->entries[i].name;
        if (!h2o_memis(name->base, name->len, H2O_STRLIT("traceparent")) &&
            (r->kept_state || !h2o_memis(name->base, name->len, H2O_STRLIT("tracestate"))))
            headers->entries[kept++] = headers->entries[i];
    }
    headers->size = kept;
    h2o_add_header_by_str(&r->req->pool, headers, H2O_STRLIT("traceparent"), 0, NULL, r->traceparent.base, r->traceparent.len);
}

/* A copy of the first header `name` in the request's pool; base NULL when absent. */
static mg_str_t header_copy(h2o_req_t *req, const char *name, size_t len)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, name, len, -1);
    if (i < 0)
        return mg_str(NULL, 0);
    h2o_iovec_t v = h2o_strdup(&req->pool, req->headers.entries[i].value.base, req->headers.entries[i].value.len);
    return mg_str(v.base, v.len);
}

/* What the access log's combined format and fields need of the request, when configured. */
static void log_capture(mg_request_t *r)
{
    const mg_config_t *conf = r->conf;
    h2o_req_t *req = r->req;
    if (conf->access_log_combined) {
        r->protocol = req->version >= 0x200   ? mg_str("HTTP/2", 6)
                      : req->version == 0x100 ? mg_str("HTTP/1.0", 8)
                                              : mg_str("HTTP/1.1", 8);
        r->referer = header_copy(req, H2O_STRLIT("referer"));
        r->user_agent = header_copy(req, H2O_STRLIT("user-agent"));
    }
    if (conf->num_access_log_fields == 0)
        return;
    r->log_fields = h2o_mem_alloc_pool(&req->pool, sizeof(*r->log_fields) * conf->num_access_log_fields);
    for (size_t i = 0; i < conf->num_access_log_fields; i++)
        r->log_fields[i] = header_copy(req, conf->access_log_fields[i], strlen(conf->access_log_fields[i]));
}

static size_t header_bytes(h2o_req_t *req)
{
    size_t total = 0;
    for (size_t i = 0; i < req->headers.size; i++)
        total += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
    return total;
}

/* h2o moves the Upgrade header of an HTTP/1 request into req->upgrade (when Connection names
 * it); HTTP/2 has no upgrade. */
static int is_websocket_upgrade(h2o_req_t *req)
{
    return req->upgrade.base != NULL && h2o_lcstris(req->upgrade.base, req->upgrade.len, H2O_STRLIT("websocket"));
}

static void *pool_alloc(void *pool, size_t size)
{
    return h2o_mem_alloc_pool(pool, size);
}

/* Fills the routing context from the request (mg_request_prepare, as the route tester does);
 * -1 with *why when the gateway answers the request itself. */
static int build_context(mg_request_t *r, mg_ctx_t *ctx, mg_refusal_t *why)
{
    h2o_req_t *req = r->req;
    mg_alloc_t alloc = {pool_alloc, &req->pool};
    mg_header_t *headers = h2o_mem_alloc_pool(&req->pool, sizeof(*headers) * (req->headers.size + 1));
    for (size_t i = 0; i < req->headers.size; i++) {
        headers[i].name = mg_str(req->headers.entries[i].name->base, req->headers.entries[i].name->len);
        headers[i].value = mg_str(req->headers.entries[i].value.base, req->headers.entries[i].value.len);
    }
    if (req->query_at != SIZE_MAX)
        r->query = mg_str(req->path.base + req->query_at + 1, req->path.len - req->query_at - 1);
    mg_request_head_t head = {.method = r->method,
                              .scheme = mg_str(req->scheme->name.base, req->scheme->name.len),
                              .authority = authority_of(req),
                              .path = mg_str(req->path.base, req->query_at != SIZE_MAX ? req->query_at : req->path.len),
                              .query = r->query,
                              .peer = r->peer,
                              .headers = headers,
                              .num_headers = req->headers.size,
                              .websocket = is_websocket_upgrade(req),
                              .host_required = req->version == 0x101,
                              .auth_cache = r->worker->auth_cache,
                              .now_ms = r->conf->auth.num_authenticators != 0 ? mg_realtime_ms() : 0,
                              .worker = r->worker->id,
                              .auth = &r->auth};
    int rc = mg_request_prepare(r->conf, &head, &alloc, ctx, why);
    r->host = ctx->host; /* set once the path is normalized */
    if (ctx->path.base != NULL)
        r->path = ctx->path;
    return rc;
}

#ifdef H2O_HAS_SHARED_RECYCLER /* a request's state is recycled by its worker (server.c) */
_Static_assert(sizeof(mg_request_t) <= H2O_MEM_SHARED_RECYCLE_SIZE, "mg_request_t outgrew h2o's recycled shared entries");
#endif

static mg_request_t *request_new(mg_worker_t *w, h2o_req_t *req)
{
    mg_request_t *r = h2o_mem_alloc_shared(&req->pool, sizeof(*r), on_request_dispose);
    memset(r, 0, sizeof(*r));
    r->req = req;
    r->worker = w;
    r->conn = mg_conn_of(req->conn);
    mg_conn_request_start(r->conn);
    r->conf = mg_worker_conf_hold(w);
    /* limits.max_requests_per_connection: an HTTP/1 connection ends with its last request's response
     * (Connection: close); HTTP/2 sends its GOAWAY itself (deps/h2o patch 0011) */
    if (req->version < 0x200 && r->conf->limits.max_requests_per_connection != 0 &&
        mg_conn_requests(r->conn) >= r->conf->limits.max_requests_per_connection)
        req->http1_is_persistent = 0;
    r->started_at = mg_monotonic_us();
    r->method = mg_str(req->method.base, req->method.len);
    r->path = mg_str(req->path.base, req->query_at != SIZE_MAX ? req->query_at : req->path.len);
    r->peer = peer_of(req);
    r->request_id = request_id_of(w, req);
    trace_of(w, r);
    log_capture(r);
    mg_stat_inc(&w->stats.requests);
    mg_stat_inc(&w->stats.in_flight);
    return r;
}

/* The request's headers become the context's, after the route's header actions: names go through
 * h2o's token table again so that forward.c can compare them with H2O_TOKEN_*. */
static void replace_request_headers(h2o_req_t *req, const mg_ctx_t *ctx)
{
    req->headers = (h2o_headers_t){NULL, 0, 0};
    for (size_t i = 0; i < ctx->num_headers; i++) {
        const mg_header_t *h = &ctx->headers[i];
        h2o_add_header_by_str(&req->pool, &req->headers, h->name.base, h->name.len, 1, NULL, h->value.base, h->value.len);
    }
}

/* The backend the request goes to: the route's, or the leg of its split (sticky, or drawn). */
static void choose_backend(mg_request_t *r, const mg_ctx_t *ctx)
{
    const mg_route_split_t *s = r->route->forward.split;
    mg_str_t key;
    if (s == NULL) {
        r->backend = r->route->forward.backend;
        return;
    }
    size_t leg = mg_split_choose(s, ctx, mg_splitmix64(&r->worker->rng[1]), &key);
    r->backend = s->legs[leg].backend;
    r->split_leg = (int)leg + 1;
}

/* balance: hash: the request's hash_key, hashed. An empty value (or one a template refuses: it is
 * never sent) has no key, and the request is balanced round robin. */
static void balance_key(mg_request_t *r, const mg_ctx_t *ctx)
{
    const mg_backend_conf_t *b = r->backend;
    mg_str_t key;
    if (b == NULL || b->balance != MG_BALANCE_HASH || b->hash_key == NULL || mg_template_expand(b->hash_key, ctx, &key) != 0 ||
        key.len == 0)
        return;
    r->balance_key = mg_ring_hash(key.base, key.len, 0);
    r->has_balance_key = 1;
}

/* The route is chosen and its actions applied: its terminal answers, or takes what the actions
 * made to the backend (forward, through the backend's scheduler), a WebSocket tunnel or bridge. */
static void run_terminal(mg_request_t *r, const mg_ctx_t *ctx, const mg_route_result_t *res)
{
    if (r->route->kind == MG_ROUTE_RESPOND) {
        mg_request_send_respond(r);
        return;
    }
    if (r->route->kind == MG_ROUTE_REDIRECT) {
        mg_request_send_redirect(r, res->location);
        return;
    }
    r->send_method = ctx->method;
    r->send_path = ctx->path;
    r->send_query = ctx->query;
    r->send_host = res->host;
    if (res->headers_changed)
        replace_request_headers(r->req, ctx);
    set_trace_headers(r);
    if (r->route->kind == MG_ROUTE_BRIDGE) {
        if (ctx->websocket)
            mg_ws_bridge_start(r, ctx);
        else /* the bridge speaks messages over a WebSocket only: there is nothing to forward */
            mg_request_send_upgrade_required(r);
        return;
    }
    choose_backend(r, ctx);
    balance_key(r, ctx);
    if (ctx->websocket)
        mg_ws_tunnel_start(r); /* a session, not a request: no scheduler turn to hold for its life */
    else
        mg_dispatch_forward(r, ctx);
    mg_mirror_start(r, ctx); /* after the request's own dispatch: a copy never goes first */
}

/*
 * A condition or tenant rule that could not be decided (a regex past its PCRE2 limit) refuses
 * the request, never routes it as a non-match (a deny rule would fail open): 400 and one line
 * on stderr naming the route (or tenants.identify) and the regex.
 */
static void refuse_undecided(mg_request_t *r, const mg_ctx_t *ctx)
{
    const mg_match_error_t *e = &ctx->error;
    int len = e->pattern.len > 200 ? 200 : (int)e->pattern.len;
    char *reason = h2o_mem_alloc_pool(&r->req->pool, 64);

    fprintf(stderr, "matchgate: %s%s%s: regex '%.*s' %s: request refused (400)\n", e->route ? "route '" : "tenants.identify",
            e->route ? e->route : "", e->route ? "'" : "", len, e->pattern.base, e->reason);
    snprintf(reason, 64, "a regex %s", e->reason);
    mg_request_send_error(r, 400, "bad-request", reason);
}

/* The tenants.unidentified refusal of a request whose credential failed: the credential's own 401
 * (or 503) says more than "names no tenant", and carries the challenge. */
static int refuse_failed_credential(mg_request_t *r, const mg_refusal_t *why)
{
    mg_auth_decision_t d;
    if (why->status != 401 || !mg_auth_refusal(&r->auth, &d))
        return 0;
    mg_request_send_auth(r, &d);
    return 1;
}

static void serve(mg_request_t *r);

/* The context is made (0), or the request refused (-1); or -1 too while it waits for the keys its
 * token needs: serve() takes it up again once they are fetched. */
static int make_context(mg_request_t *r, mg_ctx_t *ctx)
{
    mg_refusal_t why;
    int rc = build_context(r, ctx, &why);
    if (mg_request_wait_keys(r, serve))
        return -1;
    if (rc == 0)
        r->tenant = ctx->tenant;
    else if (why.undecided)
        refuse_undecided(r, ctx);
    else if (!refuse_failed_credential(r, &why))
        mg_request_send_error(r, why.status, why.code, why.reason);
    return rc;
}

/* What every request must pass before routing: size limits, a path, a Host, the credential and the
 * tenant rules. */
static int admit(mg_request_t *r, mg_ctx_t *ctx)
{
    h2o_req_t *req = r->req;
    const mg_config_t *conf = r->conf;

    if (req->entity.len > conf->limits.max_request_body)
        mg_request_send_error(r, 413, "body-too-large", "request body exceeds limits.max_request_body");
    else if (header_bytes(req) > conf->limits.max_header_size)
        mg_request_send_error(r, 431, "headers-too-large", "request headers exceed limits.max_header_size");
    else
        return make_context(r, ctx);
    return -1;
}

/* The route's quotas admitted the request: what the credential gives the backend, the route's
 * actions, then its terminal. */
static void on_routes_admitted(mg_request_t *r, mg_ctx_t *ctx)
{
    mg_route_result_t res;
    int edited = mg_auth_edit_request(&r->conf->auth, &r->auth, ctx);
    if (mg_route_apply(r->route, ctx, &res) != 0) {
        mg_request_send_error(r, 400, "bad-request", res.error);
        return;
    }
    res.headers_changed |= edited;
    r->ctx = ctx;
    mg_edits_prepare(r, ctx);
    run_terminal(r, ctx, &res);
}

/* The route's verdict on the credential (mg_auth_decide): 0 to go on, -1 after the refusal. A
 * credential that failed on a route that needs none goes on without it. */
static int check_auth(mg_request_t *r, mg_ctx_t *ctx)
{
    mg_auth_decision_t d;
    if (r->conf->auth.num_authenticators == 0 && r->route->auth_from == NULL)
        return 0;
    mg_auth_decide(&r->conf->auth, &r->auth, r->route, ctx, &d);
    if (d.status != 0) {
        mg_request_send_auth(r, &d);
        return -1;
    }
    return 0;
}

/* The route tree, then the route's verdict on the credential; 0 to go on with r->route, -1 after
 * the answer (no route, an undecided condition, a refusal). */
static int choose_route(mg_request_t *r, mg_ctx_t *ctx)
{
    r->route = mg_routes_match(r->conf->routes, ctx);
    r->routed = 1;
    if (r->route == NULL && ctx->error.reason != NULL)
        refuse_undecided(r, ctx);
    else if (r->route == NULL)
        mg_request_send_error(r, 404, "no-route", "no route matches the request");
    else
        return check_auth(r, ctx);
    return -1;
}

/* The tenant's quota admitted the request: the route (unless chosen already), and its quotas. */
static void on_tenant_admitted(mg_request_t *r, mg_ctx_t *ctx)
{
    r->ctx = ctx;
    if (r->route == NULL && choose_route(r, ctx) != 0)
        return;
    mg_config_route_hit(r->conf, r->route, r->worker->id); /* GET /routes */
    if (mg_limits_check_routes(r, ctx, on_routes_admitted) == 0)
        on_routes_admitted(r, ctx);
}

/*
 * The throttle comes before the route tree and the backend: a rejected request costs neither,
 * and every request of a tenant counts, whatever its route makes of it. A request whose
 * credential failed is the exception: its route is chosen first, so that it spends no quota when
 * the route refuses it (only a route with `auth: none` takes it, as anonymous). A decision
 * waiting for the shared store (tenants.store) goes on from its answer; a token waiting for the
 * fetch of its keys comes back here (keys_wait.c).
 */
static void serve(mg_request_t *r)
{
    mg_ctx_t ctx;

    if (admit(r, &ctx) != 0)
        return;
    r->ctx = &ctx;
    /* a preflight carries no credential and spends no quota: it is answered before both */
    if (mg_edits_is_preflight(r->req) && mg_edits_preflight(r, &ctx))
        goto Exit;
    if ((r->auth.outcome == MG_AUTH_FAILED || r->auth.outcome == MG_AUTH_UNAVAILABLE) && choose_route(r, &ctx) != 0)
        goto Exit;
    if (mg_limits_check_tenant(r, &ctx, on_tenant_admitted) == 0)
        on_tenant_admitted(r, &ctx);
Exit:
    /* what outlives this call was copied (edits.c, limits.c): nothing may point at the stack */
    if (r->ctx == &ctx)
        r->ctx = NULL;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    mg_request_t *r = request_new(mg_worker_of(req->conn->ctx), req);

    if (mg_limits_check_connection(r) == 0 && mg_request_check(r) == 0)
        serve(r);
    return 0;
}

/*
 * Responses h2o makes itself before any handler runs (413 when the body exceeds
 * max_request_entity_size, 400 for a malformed HTTP/2 request, ...) are bound to the host's
 * fallback path. This filter, registered there only, gives them what every gateway-made error
 * has: X-Matchgate-Error and an access log line.
 */
typedef struct mg_early_filter {
    h2o_filter_t super;
    mg_gateway_t *gw;
} mg_early_filter_t;

static void on_early_response(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
    mg_worker_t *w = mg_worker_of(req->conn->ctx);
    int fd = w->conf->access_log_fd;
    const char *code = req->res.status == 413 ? "body-too-large" : req->res.status == 503 ? "overloaded" : "bad-request";
    add_header(req, H2O_STRLIT("server"), H2O_STRLIT("matchgate")); /* h2o's server_name is empty (response.c) */
    add_header(req, H2O_STRLIT("x-matchgate-error"), code, strlen(code));
    /* a body refused by limits.max_buffered_request_bytes (bodies.c): the budget frees as uploads end */
    if (req->res.status == 503)
        add_header(req, H2O_STRLIT("retry-after"), H2O_STRLIT("1"));
    mg_stat_inc(&w->stats.requests);
    mg_stat_response(&w->stats, req->res.status);
    if (fd >= 0) {
        mg_access_entry_t e = {.peer = peer_of(req),
                               .method = mg_str(req->method.base, req->method.len),
                               .path = mg_str(req->path.base, req->query_at != SIZE_MAX ? req->query_at : req->path.len),
                               .status = req->res.status,
                               .combined = w->conf->access_log_combined,
                               .protocol = mg_str("HTTP/1.1", 8)};
        gettimeofday(&e.when, NULL);
        mg_access_write(fd, &e);
    }
    h2o_setup_next_ostream(req, slot);
}

void mg_handler_register(mg_gateway_t *gw, h2o_hostconf_t *hostconf, h2o_pathconf_t *pathconf)
{
    mg_handler_t *h = (mg_handler_t *)h2o_create_handler(pathconf, sizeof(*h));
    h->super.on_req = on_req;
    h->gw = gw;
    mg_early_filter_t *f = (mg_early_filter_t *)h2o_create_filter(&hostconf->fallback_path, sizeof(*f));
    f->super.on_setup_ostream = on_early_response;
    f->gw = gw;
}
