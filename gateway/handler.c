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
#include "gateway/accesslog.h"
#include "gateway/dispatch.h"
#include "gateway/headers.h"
#include "gateway/limits.h"
#include "gateway/process.h"
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
    if (r->forward != NULL)
        mg_forward_cancel(r);
    if (r->tunnel != NULL)
        mg_ws_tunnel_cancel(r);
    mg_dispatch_release(r); /* after the transfer stopped: the next request of its key may start */
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
    if (len != 0 && ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf, INET6_ADDRSTRLEN);
    else if (len != 0 && ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, buf, INET6_ADDRSTRLEN);
    return mg_str(buf, strlen(buf));
}

/* Host for matching: lower case, without port ("[::1]:80" keeps its brackets); empty when the
 * client sent none (h2o then fills in the name of its host configuration). */
static mg_str_t host_of(h2o_req_t *req)
{
    h2o_iovec_t a = req->authority;
    if (a.base == req->hostconf->authority.hostport.base)
        return mg_str("", 0);
    size_t len = a.len;
    for (size_t i = a.len; i-- > 0;) {
        if (a.base[i] == ':') {
            len = i;
            break;
        }
        if (a.base[i] < '0' || a.base[i] > '9')
            break;
    }
    char *buf = h2o_mem_alloc_pool(&req->pool, len + 1);
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)(a.base[i] >= 'A' && a.base[i] <= 'Z' ? a.base[i] + 32 : a.base[i]);
    buf[len] = '\0';
    return mg_str(buf, len);
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
    char *buf = h2o_mem_alloc_pool(&req->pool, 33);
    snprintf(buf, 33, "%016llx%016llx", (unsigned long long)mg_splitmix64(&w->rng[0]),
             (unsigned long long)mg_splitmix64(&w->rng[1]));
    return mg_str(buf, 32);
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

/* Fills the routing context from the request; -1 when the path cannot be normalized,
 * MG_PATH_ESCAPED_SLASH when it holds '\', %2F or %5C and limits.escaped_slashes rejects them. */
static int build_context(mg_request_t *r, mg_ctx_t *ctx)
{
    h2o_req_t *req = r->req;
    size_t path_len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    char *norm = h2o_mem_alloc_pool(&req->pool, path_len + 1);
    int flags = r->conf->limits.keep_escaped_slashes ? 0 : MG_PATH_REJECT_ESCAPED_SLASHES;
    long nlen = mg_path_normalize_ex(req->path.base, path_len, norm, flags);
    if (nlen < 0)
        return (int)nlen;
    r->path = mg_str(norm, (size_t)nlen);
    if (req->query_at != SIZE_MAX)
        r->query = mg_str(req->path.base + req->query_at + 1, req->path.len - req->query_at - 1);
    r->host = host_of(req);
    mg_header_t *headers = h2o_mem_alloc_pool(&req->pool, sizeof(*headers) * (req->headers.size + 1));
    for (size_t i = 0; i < req->headers.size; i++) {
        headers[i].name = mg_str(req->headers.entries[i].name->base, req->headers.entries[i].name->len);
        headers[i].value = mg_str(req->headers.entries[i].value.base, req->headers.entries[i].value.len);
    }
    *ctx = (mg_ctx_t){.method = r->method,
                      .scheme = mg_str(req->scheme->name.base, req->scheme->name.len),
                      .host = r->host,
                      .path = r->path,
                      .query = r->query,
                      .peer = r->peer,
                      .headers = headers,
                      .num_headers = req->headers.size,
                      .websocket = is_websocket_upgrade(req),
                      .alloc = {pool_alloc, &req->pool}};
    return 0;
}

static mg_request_t *request_new(mg_worker_t *w, h2o_req_t *req)
{
    mg_request_t *r = h2o_mem_alloc_shared(&req->pool, sizeof(*r), on_request_dispose);
    memset(r, 0, sizeof(*r));
    r->req = req;
    r->worker = w;
    r->conn = mg_conn_of(req->conn);
    mg_conn_request_start(r->conn);
    r->conf = mg_worker_conf_hold(w);
    r->started_at = mg_monotonic_us();
    r->method = mg_str(req->method.base, req->method.len);
    r->path = mg_str(req->path.base, req->query_at != SIZE_MAX ? req->query_at : req->path.len);
    r->peer = peer_of(req);
    r->request_id = request_id_of(w, req);
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

/* balance: hash: the request's hash_key, hashed. An empty value (or one a template refuses: it is
 * never sent) has no key, and the request is balanced round robin. */
static void balance_key(mg_request_t *r, const mg_ctx_t *ctx)
{
    const mg_backend_conf_t *b = r->route->forward.backend;
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
    if (r->route->kind == MG_ROUTE_BRIDGE) {
        if (ctx->websocket)
            mg_ws_bridge_start(r, ctx);
        else /* the bridge speaks messages over a WebSocket only: there is nothing to forward */
            mg_request_send_upgrade_required(r);
        return;
    }
    balance_key(r, ctx);
    if (ctx->websocket)
        mg_ws_tunnel_start(r); /* a session, not a request: no scheduler turn to hold for its life */
    else
        mg_dispatch_forward(r, ctx);
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

/* What every request must pass before routing: size limits, a path, a Host, the tenant rules. */
static int admit(mg_request_t *r, mg_ctx_t *ctx)
{
    h2o_req_t *req = r->req;
    const mg_config_t *conf = r->conf;
    int identified, err;

    if (req->entity.len > conf->limits.max_request_body) {
        mg_request_send_error(r, 413, "body-too-large", "request body exceeds limits.max_request_body");
    } else if (header_bytes(req) > conf->limits.max_header_size) {
        mg_request_send_error(r, 431, "headers-too-large", "request headers exceed limits.max_header_size");
    } else if ((err = build_context(r, ctx)) != 0) {
        mg_request_send_error(r, 400, "bad-request",
                              err == MG_PATH_ESCAPED_SLASH ? "the request path has an escaped '/' or '\\' (limits.escaped_slashes)"
                                                           : "invalid request path");
    } else if (r->host.len == 0 && req->version == 0x101) {
        mg_request_send_error(r, 400, "bad-request", "HTTP/1.1 request without Host");
    } else if ((identified = mg_tenants_identify(&conf->tenants, ctx)) < 0 && ctx->error.reason != NULL) {
        refuse_undecided(r, ctx);
    } else if (identified < 0) {
        mg_request_send_error(r, 400, "bad-request", "invalid tenant name");
    } else if (identified == 0 && conf->tenants.reject_unidentified) {
        mg_request_send_error(r, 401, "unidentified", "the request names no tenant");
    } else {
        r->tenant = ctx->tenant;
        return 0;
    }
    return -1;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    mg_request_t *r = request_new(mg_worker_of(req->conn->ctx), req);
    mg_ctx_t ctx;
    mg_route_result_t res;

    /* the throttle comes before the route tree and the backend: a rejected request costs
     * neither */
    if (mg_limits_check_connection(r) != 0 || mg_request_check(r) != 0 || admit(r, &ctx) != 0 ||
        mg_limits_check_tenant(r, &ctx) != 0)
        return 0;
    if ((r->route = mg_routes_match(r->conf->routes, &ctx)) == NULL && ctx.error.reason != NULL)
        refuse_undecided(r, &ctx);
    else if (r->route == NULL)
        mg_request_send_error(r, 404, "no-route", "no route matches the request");
    else if (mg_limits_check_routes(r, &ctx) != 0)
        return 0;
    else if (mg_route_apply(r->route, &ctx, &res) != 0)
        mg_request_send_error(r, 400, "bad-request", res.error);
    else
        run_terminal(r, &ctx, &res);
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
                               .status = req->res.status};
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
