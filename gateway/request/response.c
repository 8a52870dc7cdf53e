/*
 * Responses the gateway makes itself: errors (a status, X-Matchgate-Error naming the cause, a
 * one-line body naming the reason and the route), with Retry-After or closing the connection when
 * asked, and the route's own answers (respond, redirect). Each is final: it writes the access
 * log line and the request is h2o's from then on.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include "gateway/internal.h"
#include "gateway/request/accesslog.h"
#include "gateway/request/edits.h"
#include "gateway/request/mirror.h"
#include "gateway/request/headers.h"
#include "gateway/format.h"

static const char *reason_phrase(int status)
{
    static const struct {
        int status;
        const char *reason;
    } table[] = {{200, "OK"},
                 {201, "Created"},
                 {202, "Accepted"},
                 {204, "No Content"},
                 {301, "Moved Permanently"},
                 {302, "Found"},
                 {304, "Not Modified"},
                 {307, "Temporary Redirect"},
                 {308, "Permanent Redirect"},
                 {400, "Bad Request"},
                 {401, "Unauthorized"},
                 {403, "Forbidden"},
                 {404, "Not Found"},
                 {405, "Method Not Allowed"},
                 {413, "Payload Too Large"},
                 {426, "Upgrade Required"},
                 {429, "Too Many Requests"},
                 {431, "Request Header Fields Too Large"},
                 {500, "Internal Server Error"},
                 {501, "Not Implemented"},
                 {502, "Bad Gateway"},
                 {503, "Service Unavailable"},
                 {504, "Gateway Timeout"}};
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (table[i].status == status)
            return table[i].reason;
    return "";
}

void mg_request_log(mg_request_t *r)
{
    if (r->logged)
        return;
    r->logged = 1;
    if (r->mirror_copies != NULL)
        mg_mirror_detach(r, r->status);
    mg_stat_response(&r->worker->stats, r->status);
    if (r->route != NULL) /* matchgate_route_* (GET /metrics) */
        mg_config_route_response(r->conf, r->route, r->worker->id, r->status, mg_monotonic_us() - r->started_at);
    if (r->conf->access_log_fd < 0)
        return;
    mg_access_entry_t e = {.peer = r->peer, .method = r->method, .path = r->path, .status = r->status, .bytes = r->bytes_sent};
    gettimeofday(&e.when, NULL);
    if (r->route != NULL)
        e.route = mg_str(r->route->name, strlen(r->route->name));
    if (r->server != NULL)
        e.server = mg_str(r->server, strlen(r->server));
    e.request_id = r->request_id;
    e.trace_id = r->trace_id;
    e.combined = r->conf->access_log_combined;
    e.query = r->query;
    e.protocol = r->protocol;
    e.referer = r->referer;
    e.user_agent = r->user_agent;
    e.field_names = r->conf->access_log_fields;
    e.field_values = r->log_fields;
    e.num_fields = r->log_fields != NULL ? r->conf->num_access_log_fields : 0;
    e.tenant = r->tenant;
    if (r->auth.identity != NULL)
        e.sub = r->auth.identity->sub;
    e.duration_ms = (double)(mg_monotonic_us() - r->started_at) / 1000.0;
    mg_access_write(r->conf->access_log_fd, &e);
}

static void add_header(h2o_req_t *req, const char *name, size_t nlen, const char *value, size_t vlen)
{
    h2o_add_header_by_str(&req->pool, &req->res.headers, name, nlen, 0, NULL, value, vlen);
}

static uint64_t whole_seconds(uint64_t us)
{
    return (us + 999999) / 1000000;
}

/* 1 for the RateLimit-* names the gateway writes (names in h2o's lists are lower case). */
static int is_ratelimit_name(h2o_iovec_t name)
{
    static const h2o_iovec_t ours[] = {
        {H2O_STRLIT("ratelimit-limit")}, {H2O_STRLIT("ratelimit-remaining")}, {H2O_STRLIT("ratelimit-reset")}, {NULL, 0}};
    return name.len >= 15 && name.base[0] == 'r' && mg_header_is_listed(name.base, name.len, ours);
}

static void add_ratelimit(mg_request_t *r, h2o_req_t *req)
{
    if (!r->has_limit)
        return;
    /* ours describe the gateway's quota: a backend's own would contradict them (one pass over the
     * response's fields, most of which differ from ours in their length or first letter) */
    h2o_headers_t *headers = &req->res.headers;
    for (size_t i = headers->size; i-- > 0;)
        if (is_ratelimit_name(*headers->entries[i].name))
            h2o_delete_header(headers, (ssize_t)i);
    /* the three values in one block of the pool: 20 digits each at most */
    char *buf = h2o_mem_alloc_pool(&req->pool, 3 * 20);
    add_header(req, H2O_STRLIT("ratelimit-limit"), buf, mg_format_u64(buf, r->limit.limit));
    add_header(req, H2O_STRLIT("ratelimit-remaining"), buf + 20, mg_format_u64(buf + 20, r->limit.remaining));
    add_header(req, H2O_STRLIT("ratelimit-reset"), buf + 40, mg_format_u64(buf + 40, whole_seconds(r->limit.reset_us)));
}

void mg_request_add_own_headers(mg_request_t *r, h2o_req_t *req, int gateway_made)
{
    /* a field, not h2o's server_name: the route's response actions may replace or remove it */
    add_header(req, H2O_STRLIT("server"), H2O_STRLIT("matchgate"));
    add_header(req, H2O_STRLIT("x-request-id"), r->request_id.base, r->request_id.len);
    add_ratelimit(r, req);
    mg_edits_apply(r, req, gateway_made);
}

/* Sends a complete response with a body held in the pool; `r` is done with its request after. */
static void send_inline(mg_request_t *r, int status, const char *reason, const char *body, size_t len)
{
    h2o_req_t *req = r->req;
    req->res.status = status;
    req->res.reason = reason;
    req->res.content_length = len;
    mg_request_add_own_headers(r, req, 1);
    r->status = status;
    r->bytes_sent = len;
    r->req = NULL;
    h2o_send_inline(req, body, len);
    mg_request_log(r);
}

static void send_error(mg_request_t *r, int status, const char *code, const char *reason);

void mg_request_send_error(mg_request_t *r, int status, const char *code, const char *reason)
{
    /* a backend head may have been copied in before the backend failed: none of it applies */
    r->req->res.headers = (h2o_headers_t){NULL, 0, 0};
    send_error(r, status, code, reason);
}

void mg_request_send_retry(mg_request_t *r, int status, const char *code, const char *reason, uint64_t retry_after_us)
{
    h2o_req_t *req = r->req;
    uint64_t seconds = (retry_after_us + 999999) / 1000000; /* whole seconds, rounded up, >= 1 */
    char *value = h2o_mem_alloc_pool(&req->pool, 24);
    int len = snprintf(value, 24, "%llu", (unsigned long long)(seconds != 0 ? seconds : 1));
    req->res.headers = (h2o_headers_t){NULL, 0, 0};
    add_header(req, H2O_STRLIT("retry-after"), value, (size_t)len);
    send_error(r, status, code, reason);
}

static void send_error(mg_request_t *r, int status, const char *code, const char *reason)
{
    h2o_req_t *req = r->req;
    const char *route = r->route != NULL ? r->route->name : "-";
    char *body = h2o_mem_alloc_pool(&req->pool, 256 + strlen(route));
    int len = snprintf(body, 256 + strlen(route), "%d %s: %s (route %s)\n", status, reason_phrase(status), reason, route);
    add_header(req, H2O_STRLIT("x-matchgate-error"), code, strlen(code));
    add_header(req, H2O_STRLIT("content-type"), H2O_STRLIT("text/plain; charset=utf-8"));
    send_inline(r, status, reason_phrase(status), body, (size_t)len);
}

/* A redirect: its status, Location and a one-line body. */
void mg_request_send_redirect(mg_request_t *r, mg_str_t location)
{
    h2o_req_t *req = r->req;
    size_t size = location.len + 32;
    char *body = h2o_mem_alloc_pool(&req->pool, size);
    int len = snprintf(body, size, "Redirecting to %.*s\n", (int)location.len, location.base);
    add_header(req, H2O_STRLIT("location"), location.base, location.len);
    add_header(req, H2O_STRLIT("content-type"), H2O_STRLIT("text/plain; charset=utf-8"));
    send_inline(r, r->route->redirect->status, reason_phrase(r->route->redirect->status), body, (size_t)len);
}

void mg_request_send_respond(mg_request_t *r)
{
    const mg_route_t *route = r->route;
    for (size_t i = 0; i < route->respond->num_headers; i++) {
        const mg_header_t *h = &route->respond->headers[i];
        add_header(r->req, h->name.base, h->name.len, h->value.base, h->value.len);
    }
    send_inline(r, route->respond->status, reason_phrase(route->respond->status), route->respond->body, route->respond->body_len);
}

void mg_request_send_error_and_close(mg_request_t *r, int status, const char *code, const char *reason)
{
    h2o_req_t *req = r->req;
    /* HTTP/1: this response is the connection's last. HTTP/2: the whole connection goes at once
     * (h2o 2.2.5 has no call to send GOAWAY), with every stream still open on it. */
    h2o_socket_t *sock = req->version >= 0x200 ? req->conn->callbacks->get_socket(req->conn) : NULL;
    req->http1_is_persistent = 0;
    mg_request_send_error(r, status, code, reason);
    if (sock != NULL)
        shutdown(h2o_socket_get_fd(sock), SHUT_RDWR);
}

void mg_request_send_auth(mg_request_t *r, const mg_auth_decision_t *d)
{
    h2o_req_t *req = r->req;
    req->res.headers = (h2o_headers_t){NULL, 0, 0};
    if (d->challenge != NULL) {
        char *value = h2o_mem_alloc_pool(&req->pool, 512);
        size_t len = mg_auth_challenge(d, value, 512);
        add_header(req, H2O_STRLIT("www-authenticate"), value, len < 512 ? len : 511);
    }
    if (d->status == 503) /* the keys are being fetched again: a few seconds */
        add_header(req, H2O_STRLIT("retry-after"), H2O_STRLIT("5"));
    send_error(r, d->status, d->code, d->reason);
}

void mg_request_send_preflight(mg_request_t *r, const mg_cors_answer_t *a)
{
    h2o_req_t *req = r->req;
    if (a->refusal == NULL) {
        mg_edits_put(r, req, a);
        send_inline(r, 204, reason_phrase(204), "", 0);
        return;
    }
    char *reason = h2o_mem_alloc_pool(&req->pool, 160);
    int len = a->refused.base != NULL ? snprintf(reason, 160, "CORS preflight refused: %s ('%.*s')", a->refusal,
                                                 (int)(a->refused.len < 64 ? a->refused.len : 64), a->refused.base)
                                      : snprintf(reason, 160, "CORS preflight refused: %s", a->refusal);
    (void)len;
    mg_edits_put(r, req, a); /* Vary only: a refusal has no Access-Control-* field */
    send_error(r, 403, "cors-refused", reason);
}

/* A plain request on a bridge route. RFC 9110 15.5.22: a 426 names the protocol to upgrade to,
 * in HTTP/1 (HTTP/2 forbids the Upgrade header; RFC 9113 8.2.2). */
void mg_request_send_upgrade_required(mg_request_t *r)
{
    r->req->res.headers = (h2o_headers_t){NULL, 0, 0};
    if (r->req->version < 0x200)
        add_header(r->req, H2O_STRLIT("upgrade"), H2O_STRLIT("websocket"));
    send_error(r, 426, "bad-request", "this route takes WebSocket upgrades");
}
