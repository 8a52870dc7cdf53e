/*
 * Opening a WebSocket tunnel: the client's upgrade request goes to a server of the backend (its
 * first choice, then the next ones while connect failures may be retried) as an HTTP/1.1
 * upgrade with the headers forward would send; the backend's answer is read with
 * picohttpparser. A 101 with the right Sec-WebSocket-Accept becomes the client's 101 and the
 * tunnel opens (tunnel.c); another status goes to the client as it came; anything else is a
 * 502, a backend that does not answer within its timeout a 504.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/websocket/tunnel.h"
#include "gateway/phr.h"
#include <h2o/http1.h>

#define MAX_RESPONSE_HEADERS 64
#define MAX_RESPONSE_BYTES (64 * 1024)

static void connect_next(mg_ws_tunnel_t *t);

/* Ends the upgrade request with a gateway error (the tunnel goes first). */
static void fail(mg_ws_tunnel_t *t, int status, const char *code, const char *reason)
{
    mg_request_t *r = t->r;
    r->tunnel = NULL;
    mg__ws_tunnel_free(t);
    mg_request_send_error(r, status, code, reason);
}

/* A connect that failed or timed out goes on to the next server when retries allow (an upgrade
 * is a GET: idempotent). */
static void connect_failed(mg_ws_tunnel_t *t, int timed_out)
{
    mg_backend_conf_t *b = t->backend;
    if (t->server != NULL) {
        h2o_socket_close(t->server);
        t->server = NULL;
    }
    if (mg_backend_should_retry(b, t->attempt, mg_str("GET", 3), timed_out ? MG_ATTEMPT_CONNECT_TIMEOUT : MG_ATTEMPT_NOT_CONNECTED,
                                0)) {
        t->attempt++;
        connect_next(t);
    } else if (timed_out) {
        fail(t, 504, "backend-timeout", "the backend did not accept the connection within connect_timeout");
    } else {
        fail(t, 502, "backend-unavailable", "no backend server accepted the connection");
    }
}

static void on_handshake_timeout(mg_timer_t *timer)
{
    mg_ws_tunnel_t *t = H2O_STRUCT_FROM_MEMBER(mg_ws_tunnel_t, timer, timer);
    fail(t, 504, "backend-timeout", "the backend did not answer the upgrade within the timeout");
}

static h2o_iovec_t find_response_header(const struct phr_header *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (h2o_lcstris(h[i].name, h[i].name_len, name, strlen(name)))
            return h2o_iovec_init(h[i].value, h[i].value_len);
    return h2o_iovec_init(NULL, 0);
}

static void add_response_header(h2o_req_t *req, const char *name, h2o_iovec_t value)
{
    if (value.base != NULL)
        h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 0, NULL,
                              h2o_strdup(&req->pool, value.base, value.len).base, value.len);
}

/* The backend refused the upgrade: its status goes to the client, with its body when it came
 * whole with a Content-Length. */
static void relay_refusal(mg_ws_tunnel_t *t, int status, const struct phr_header *h, size_t n, size_t head_len)
{
    mg_request_t *r = t->r;
    h2o_req_t *req = r->req;
    h2o_buffer_t *in = t->server->input;
    h2o_iovec_t cl = find_response_header(h, n, "content-length"), type = find_response_header(h, n, "content-type");
    size_t body_len = cl.base != NULL ? strtoul(h2o_strdup(&req->pool, cl.base, cl.len).base, NULL, 10) : 0;
    h2o_iovec_t body = h2o_iovec_init("", 0);
    if (body_len != 0 && in->size - head_len >= body_len)
        body = h2o_strdup(&req->pool, in->bytes + head_len, body_len);
    add_response_header(req, "content-type", type);
    r->tunnel = NULL;
    r->status = status;
    mg__ws_tunnel_free(t);
    req->res.status = status;
    req->res.reason = "Refused";
    h2o_send_inline(req, body.base, body.len);
}

static void on_handshake_read(h2o_socket_t *sock, const char *err)
{
    mg_ws_tunnel_t *t = sock->data;
    struct phr_header h[MAX_RESPONSE_HEADERS];
    size_t n = MAX_RESPONSE_HEADERS, msg_len;
    int minor, status;
    const char *msg;
    if (err != NULL) {
        fail(t, 502, "backend-unavailable", "the backend closed the connection during the upgrade");
        return;
    }
    int head_len = phr_parse_response(sock->input->bytes, sock->input->size, &minor, &status, &msg, &msg_len, h, &n, 0);
    if (head_len == -2 && sock->input->size < MAX_RESPONSE_BYTES)
        return;
    if (head_len < 0) {
        fail(t, 502, "backend-unavailable", "the backend's answer to the upgrade is not valid HTTP");
        return;
    }
    /* picohttpparser has checked names and values (RFC 9110 5.1, 5.5) but passes a folded line
     * on as a field without a name: refused as forward refuses any malformed field */
    for (size_t i = 0; i < n; i++) {
        if (h[i].name == NULL) {
            fail(t, 502, "bad-gateway-response", "the backend's answer to the upgrade has a folded header line");
            return;
        }
    }
    if (status < 200 && status != 101) {
        fail(t, 502, "backend-unavailable", "the backend answered the upgrade with an interim status");
        return;
    }
    if (status != 101) {
        relay_refusal(t, status, h, n, (size_t)head_len);
        return;
    }
    char expected[MG_WS_ACCEPT_LEN + 1];
    mg_ws_accept_key(expected, t->key, strlen(t->key));
    h2o_iovec_t accept = find_response_header(h, n, "sec-websocket-accept");
    if (!h2o_memis(accept.base, accept.len, expected, MG_WS_ACCEPT_LEN)) {
        fail(t, 502, "backend-unavailable", "the backend's Sec-WebSocket-Accept does not match the key");
        return;
    }
    h2o_req_t *req = t->r->req;
    h2o_iovec_t extensions = find_response_header(h, n, "sec-websocket-extensions");
    if (extensions.base != NULL) /* an extension (permessage-deflate: RSV1) may use the RSV bits */
        t->up.rd.allowed_rsv = t->down.rd.allowed_rsv = 7;
    req->res.status = 101;
    req->res.reason = "Switching Protocols";
    add_response_header(req, "upgrade", h2o_iovec_init(H2O_STRLIT("websocket")));
    add_response_header(req, "sec-websocket-accept", accept);
    add_response_header(req, "sec-websocket-protocol", find_response_header(h, n, "sec-websocket-protocol"));
    add_response_header(req, "sec-websocket-extensions", extensions);
    /* what follows the 101 is already the backend's first frames: they stay in the input */
    h2o_buffer_consume(&sock->input, (size_t)head_len);
    h2o_socket_read_stop(sock);
    mg_timer_cancel(&t->timer);
    t->r->status = 101;
    t->state = MG_TUNNEL_UPGRADING;
    h2o_http1_upgrade(req, NULL, 0, mg__ws_tunnel_on_upgraded, t);
}

static void on_handshake_sent(h2o_socket_t *sock, const char *err)
{
    mg_ws_tunnel_t *t = sock->data;
    if (err != NULL) {
        connect_failed(t, 0);
        return;
    }
    mg_timer_set(&t->timer, t->backend->timeout_ms);
    h2o_socket_read_start(sock, on_handshake_read);
}

static void on_connected(void *arg, h2o_socket_t *sock, mg_attempt_result_t result)
{
    mg_ws_tunnel_t *t = arg;
    t->connecting = NULL;
    if (result != MG_ATTEMPT_OK) {
        connect_failed(t, result == MG_ATTEMPT_CONNECT_TIMEOUT);
        return;
    }
    t->server = sock;
    sock->data = t;
    const char *url = mg_backend_server(t->backend, t->first_server, t->attempt)->url;
    const char *slash = strchr(url + strlen("http://"), '/');
    h2o_iovec_t line[3] = {h2o_iovec_init(H2O_STRLIT("GET ")), h2o_iovec_init(NULL, 0), h2o_iovec_init(NULL, 0)};
    /* the server's path prefix, the request's path and query, then the header block */
    char *start = NULL;
    int len = asprintf(&start, "%s%s HTTP/1.1\r\n", slash != NULL ? slash : "", t->target);
    if (len < 0) {
        fail(t, 502, "backend-unavailable", "out of memory");
        return;
    }
    free(t->target);
    t->target = start; /* kept until the write completes (freed with the tunnel) */
    line[1] = h2o_iovec_init(start, (size_t)len);
    line[2] = h2o_iovec_init(t->head, strlen(t->head));
    h2o_socket_write(sock, line, 3, on_handshake_sent);
}

/* Connects to the server of this attempt (mg_backend_connect, the builtin client's). */
static void connect_next(mg_ws_tunnel_t *t)
{
    const mg_server_conf_t *server = mg_backend_server(t->backend, t->first_server, t->attempt);
    if (server != NULL && strncmp(server->url, "https://", 8) == 0) {
        /* the tunnel speaks plain TCP; sending the upgrade in clear to a TLS server would only fail
         * later and less clearly (docs/websocket.md) */
        fail(t, 502, "backend-tls", "WebSocket tunnels to https:// servers are not supported");
        return;
    }
    if (server == NULL ||
        (t->connecting = mg_backend_connect(t->w, server, t->backend->connect_timeout_ms, on_connected, t)) == NULL)
        connect_failed(t, 0);
}

/* ---------------------------------------------------------------------------------------
 * Start
 */
typedef struct head_builder {
    char *buf;
    size_t len, cap;
    int oom;
} head_builder_t;

static void head_append(head_builder_t *b, const char *p, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *grown = realloc(b->buf, cap);
        if (grown == NULL) {
            b->oom = 1;
            return;
        }
        b->buf = grown;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

static void emit_header(void *arg, const char *name, size_t nlen, const char *value, size_t vlen)
{
    head_append(arg, name, nlen);
    head_append(arg, ": ", 2);
    head_append(arg, value, vlen);
    head_append(arg, "\r\n", 2);
}

/* The header block for the backend: the client's headers as forward sends them (Sec-WebSocket-*
 * included), then the upgrade. */
static char *build_head(mg_request_t *r, const char *server_url)
{
    head_builder_t b = {NULL, 0, 0, 0};
    mg_forward_headers(r, server_url, emit_header, &b);
    head_append(&b, H2O_STRLIT("Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"));
    if (b.oom) {
        free(b.buf);
        return NULL;
    }
    return b.buf;
}

static char *build_target(mg_request_t *r)
{
    char *target = NULL;
    if (asprintf(&target, "%.*s%s%.*s", (int)r->send_path.len, r->send_path.base, r->send_query.len != 0 ? "?" : "",
                 (int)r->send_query.len, r->send_query.base) < 0)
        return NULL;
    return target;
}

void mg_ws_tunnel_start(mg_request_t *r)
{
    h2o_iovec_t key;
    const char *why = mg_ws_check_handshake(r->req, &key);
    if (why != NULL) {
        mg_request_send_error(r, 400, "bad-request", why);
        return;
    }
    size_t first =
        mg_backend_first_server_keyed(r->backend, r->send_method, r->has_balance_key ? &r->balance_key : NULL);
    if (first == MG_NO_SERVER) {
        mg_request_send_retry(r, 503, "no-healthy-server", "no server of the backend is healthy",
                              mg_backend_retry_after_ms(r->backend, mg_health_clock()) * 1000);
        return;
    }
    mg_ws_tunnel_t *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        mg_request_send_error(r, 503, "backend-unavailable", "out of memory");
        return;
    }
    t->w = r->worker;
    t->conf = mg_worker_conf_hold(t->w);
    t->r = r;
    t->backend = r->backend;
    t->up.from_client = 1;
    t->up.rd.max_message = t->conf->websocket.max_message_size;
    t->first_server = first;
    memcpy(t->key, key.base, key.len);
    snprintf(t->route, sizeof(t->route), "%s", r->route->name != NULL ? r->route->name : "");
    mg_timer_init(&t->timer, &t->w->timers, on_handshake_timeout);
    t->head = build_head(r, mg_backend_server(t->backend, t->first_server, 0)->url);
    t->target = build_target(r);
    snprintf(t->tenant, sizeof(t->tenant), "%.*s", (int)r->tenant.len, r->tenant.base);
    snprintf(t->peer, sizeof(t->peer), "%.*s", (int)r->peer.len, r->peer.base);
    mg_ws_expiry_keep(&t->expiry, r);
    if (t->head == NULL || t->target == NULL) {
        mg__ws_tunnel_free(t);
        mg_request_send_error(r, 503, "backend-unavailable", "out of memory");
        return;
    }
    r->tunnel = t;
    connect_next(t);
}

void mg_ws_tunnel_cancel(mg_request_t *r)
{
    mg_ws_tunnel_t *t = r->tunnel;
    r->tunnel = NULL;
    if (t->state == MG_TUNNEL_CONNECTING)
        mg__ws_tunnel_free(t); /* the client left while the backend was being reached */
    else
        t->r = NULL; /* the 101 is on its way: on_upgraded takes over */
}
