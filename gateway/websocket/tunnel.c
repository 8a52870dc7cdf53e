/*
 * The WebSocket tunnel: an upgrade request matched by a `forward` route is sent to a server of
 * the backend as an upgrade; when the server answers 101, the client gets its 101 and frames
 * flow both ways unchanged.
 *
 * Relay. Each direction reads its source socket's input buffer and writes the bytes, in place,
 * to the other socket: one write in flight per direction, and the source is not read while it
 * is, so a slow reader holds back its writer (backpressure both ways) and memory stays at what
 * one read brings in. The bytes are walked frame by frame (headers only; payloads are not
 * copied), which is what lets the gateway:
 *   - check the framing (a broken peer is closed with 1002, the other side with 1011/1001) and
 *     the size of the client's messages (1009 beyond websocket.max_message_size);
 *   - put frames of its own into a stream at a frame boundary: pings, close frames, and text
 *     messages from the admin API (at a message boundary: never inside a fragmented message);
 *   - take out the client's answers to its own pings.
 *
 * Life. CONNECTING (name lookup, connect, handshake with the backend; the client's request is
 * still an h2o request) -> UPGRADING (the 101 is being written) -> OPEN -> CLOSING (a close
 * started by the gateway: idle timeout, shutdown, admin; both peers get a close frame, what
 * they send from then on is read and dropped, and the connections end when both have answered,
 * or at close_timeout) -> the end. A peer closing its connection ends the tunnel once what it
 * sent before has been written to the other side (close frames pass through untouched, so a
 * close handshake between the peers goes end to end).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/internal.h"
#include "gateway/backend/backend.h"
#include "gateway/phr.h"
#include <h2o/http1.h>

#define MAX_RESPONSE_HEADERS 64
#define MAX_RESPONSE_BYTES (64 * 1024)

enum { CONNECTING, UPGRADING, OPEN, CLOSING };

/* One direction: source -> destination. */
typedef struct dir {
    int from_client;
    mg_ws_reader_t rd;
    uint64_t payload_left; /* of the frame at the front of the source's input */
    int skip_payload;      /* ... which is dropped rather than passed */
    int busy;              /* a write is in flight on the destination */
    size_t writing;        /* bytes of the source's input it carries */
    mg_ws_out_t out;       /* frames of the gateway's own for this direction's stream */
    int eof;               /* the source has closed its connection */
    int answered;          /* CLOSING: the source sent its close frame */
    int broken;            /* the source broke the framing: its bytes are dropped unread */
} dir_t;

typedef struct mg_ws_tunnel {
    mg_ws_session_t session;
    mg_worker_t *w;
    mg_config_t *conf; /* held for the tunnel's life */
    mg_request_t *r;   /* until the 101 is written */
    mg_backend_conf_t *backend;
    h2o_socket_t *client, *server;
    mg_backend_connect_t *connecting; /* CONNECTING, until the connection to the server is open */
    char *head;                       /* the header block for the backend (after the request line) */
    char *target;                     /* path and query, as sent */
    char key[64];                     /* Sec-WebSocket-Key */
    size_t first_server;
    unsigned attempt;
    int state, registered, drain;
    dir_t up, down; /* up: client -> backend */
    mg_timer_t timer;
    uint64_t last_rx, last_client_rx; /* h2o_now() */
    uint64_t ping_seq;
    /* for the session registry, which the tunnel joins when it opens (the request is gone then) */
    char route[128], tenant[MG_TENANT_MAX_LEN + 1], peer[64];
} mg_ws_tunnel_t;

static void start_close(mg_ws_tunnel_t *t, unsigned client_code, unsigned server_code, const char *reason);

static h2o_socket_t *src_of(mg_ws_tunnel_t *t, dir_t *d)
{
    return d->from_client ? t->client : t->server;
}

static h2o_socket_t *dst_of(mg_ws_tunnel_t *t, dir_t *d)
{
    return d->from_client ? t->server : t->client;
}

/* ---------------------------------------------------------------------------------------
 * Frames of the gateway's own
 */

/* A whole frame: masked with a fresh key when it goes to the backend (clients must mask). */
static mg_ws_frame_buf_t *frame_new(mg_ws_tunnel_t *t, int to_server, unsigned opcode, const void *payload, size_t len)
{
    uint32_t mask = (uint32_t)mg_splitmix64(&t->w->rng[0]);
    return mg_ws_frame_new(opcode, payload, len, to_server ? (const uint8_t *)&mask : NULL);
}

/* Queues a frame of the gateway's own; the caller pumps (nothing here writes). */
static void inject(mg_ws_tunnel_t *t, dir_t *d, mg_ws_frame_buf_t *f, int message, int front)
{
    mg_ws_out_push(&d->out, f, message, front);
    if (d == &t->down)
        atomic_store_explicit(&t->session.queued, d->out.queued, memory_order_relaxed);
}

/* ---------------------------------------------------------------------------------------
 * The end
 */
static void tunnel_free(mg_ws_tunnel_t *t)
{
    mg_timer_cancel(&t->timer);
    if (t->connecting != NULL)
        mg_backend_connect_cancel(t->connecting);
    /* closing a socket drops its pending write: both go together, so no write outlives the
     * input buffer it points into */
    if (t->client != NULL)
        h2o_socket_close(t->client);
    if (t->server != NULL)
        h2o_socket_close(t->server);
    if (t->registered)
        mg_ws_session_unregister(&t->session);
    mg_ws_out_dispose(&t->up.out);
    mg_ws_out_dispose(&t->down.out);
    mg_worker_conf_drop(t->w, t->conf);
    free(t->head);
    free(t->target);
    free(t);
}

/* ---------------------------------------------------------------------------------------
 * Relay
 */
static void on_read(h2o_socket_t *sock, const char *err);
static void on_write(h2o_socket_t *sock, const char *err);

/* A control frame at the very front of the source's input, whole: 1 when the gateway keeps it
 * (the client's answer to the gateway's ping; anything while the gateway closes). */
static int keeps_control(mg_ws_tunnel_t *t, dir_t *d, const mg_ws_frame_t *f, const uint8_t *payload)
{
    if (t->state == CLOSING) {
        d->answered |= f->opcode == MG_WS_CLOSE;
        return 1;
    }
    if (!d->from_client || f->opcode != MG_WS_PONG || f->len != 8)
        return 0;
    uint8_t p[8];
    uint64_t seq;
    memcpy(p, payload, 8);
    mg_ws_mask(p, 8, f->mask, 0);
    memcpy(&seq, p, 8);
    return seq == t->ping_seq;
}

/* The source broke the framing (rc -1) or sent a message beyond max_message_size (rc -2). */
static void source_failed(mg_ws_tunnel_t *t, dir_t *d, int rc, const char *why)
{
    unsigned to_source = rc == -2 ? MG_WS_CLOSE_TOO_BIG : MG_WS_CLOSE_PROTOCOL;
    unsigned to_other = d->from_client ? MG_WS_CLOSE_GOING_AWAY : MG_WS_CLOSE_UNAVAILABLE;
    d->broken = 1;
    d->answered = 1;
    if (d->from_client)
        start_close(t, to_source, to_other, why);
    else
        start_close(t, to_other, to_source, why);
}

/* Drops n bytes at the front of the source's input. */
static void drop_front(h2o_socket_t *src, size_t n)
{
    h2o_buffer_consume(&src->input, n);
}

/*
 * Walks the frames at the front of the source's input and returns how many bytes pass unchanged
 * from the front. Bytes the gateway keeps are dropped, but only at the very front (nothing
 * before them waiting to be written); the walk stops at what it cannot judge yet.
 */
static size_t judge(mg_ws_tunnel_t *t, dir_t *d, h2o_socket_t *src)
{
    size_t off = 0;
    for (;;) {
        size_t avail = src->input->size - off;
        if (d->broken) {
            drop_front(src, off == 0 ? avail : 0);
            return off;
        }
        if (d->payload_left > 0) {
            size_t n = avail < d->payload_left ? avail : (size_t)d->payload_left;
            if (n == 0 || (d->skip_payload && off != 0))
                return off;
            if (d->skip_payload)
                drop_front(src, n);
            else
                off += n;
            d->payload_left -= n;
            continue;
        }
        const uint8_t *p = (const uint8_t *)src->input->bytes + off;
        mg_ws_frame_t f;
        const char *why = NULL;
        mg_ws_reader_t before = d->rd;
        int rc = mg_ws_frame_parse(p, avail, &f, &why);
        if (rc == 0)
            return off;
        if (rc < 0 || (rc = mg_ws_reader_next(&d->rd, &f, d->from_client, &why)) < 0) {
            if (off == 0) {
                source_failed(t, d, rc, why);
            } else {
                d->rd = before; /* judged again, at the front, once what came before is written */
            }
            return off;
        }
        int keep = t->state == CLOSING;
        if (f.opcode >= MG_WS_CLOSE) {
            if (off != 0 || f.header_len + f.len > avail)
                return off; /* control frames are judged whole, at the front: at most 131 bytes */
            keep = keeps_control(t, d, &f, p + f.header_len);
        } else if (keep && off != 0) {
            return off;
        }
        d->payload_left = f.len;
        d->skip_payload = keep;
        if (keep)
            drop_front(src, f.header_len);
        else
            off += f.header_len;
    }
}

/* Writes what may go from one direction now, unless a write is in flight. */
static void pump(mg_ws_tunnel_t *t, dir_t *d)
{
    h2o_socket_t *src = src_of(t, d), *dst = dst_of(t, d);
    if (d->busy || d->eof)
        return;
    /* the gateway's frames go first, where the last write ended: at a frame boundary if that is
     * one, and its messages only between messages (judging moves the state past the pass) */
    int at_frame = d->payload_left == 0, between_messages = !d->rd.in_message;
    size_t pass = judge(t, d, src);
    h2o_iovec_t bufs[65];
    size_t n = at_frame ? mg_ws_out_take(&d->out, bufs, 64, between_messages) : 0;
    if (d == &t->down)
        atomic_store_explicit(&t->session.queued, d->out.queued, memory_order_relaxed);
    if (pass != 0)
        bufs[n++] = h2o_iovec_init(src->input->bytes, pass);
    if (n == 0)
        return;
    d->busy = 1;
    d->writing = pass;
    h2o_socket_read_stop(src);
    h2o_socket_write(dst, bufs, n, on_write);
}

/* 1 when the tunnel has nothing left to do: a peer left, or both answered the gateway's close. */
static int is_over(mg_ws_tunnel_t *t)
{
    if (t->up.eof || t->down.eof)
        return 1;
    return t->state == CLOSING && t->up.answered && t->down.answered && t->up.out.ctl == NULL && t->down.out.ctl == NULL;
}

/*
 * After every event: moves both directions on, starts the close a drain waits for, and ends the
 * tunnel when it is over and nothing is being written (so that what a peer sent before leaving,
 * a close frame say, reaches the other one). The tunnel must not be touched afterwards.
 */
static void progress(mg_ws_tunnel_t *t)
{
    if (t->drain && t->state == OPEN && t->down.out.queued == 0)
        start_close(t, MG_WS_CLOSE_NORMAL, MG_WS_CLOSE_NORMAL, "drained");
    pump(t, &t->up);
    pump(t, &t->down);
    if (is_over(t) && !t->up.busy && !t->down.busy)
        tunnel_free(t);
}

static void on_write(h2o_socket_t *sock, const char *err)
{
    mg_ws_tunnel_t *t = sock->data;
    dir_t *d = sock == t->client ? &t->down : &t->up;
    h2o_socket_t *src = src_of(t, d);
    d->busy = 0;
    mg_ws_out_written(&d->out);
    if (err != NULL) {
        tunnel_free(t); /* the destination is gone */
        return;
    }
    h2o_buffer_consume(&src->input, d->writing);
    d->writing = 0;
    if (!d->eof)
        h2o_socket_read_start(src, on_read);
    progress(t);
}

static void on_read(h2o_socket_t *sock, const char *err)
{
    mg_ws_tunnel_t *t = sock->data;
    dir_t *d = sock == t->client ? &t->up : &t->down;
    t->last_rx = h2o_now(t->w->ctx.loop);
    if (d->from_client)
        t->last_client_rx = t->last_rx;
    if (err != NULL) {
        d->eof = 1;
        h2o_socket_read_stop(sock);
    }
    progress(t);
}

/* ---------------------------------------------------------------------------------------
 * Closing, pings, idle timeout
 */
static void start_close(mg_ws_tunnel_t *t, unsigned client_code, unsigned server_code, const char *reason)
{
    if (t->state != OPEN)
        return;
    t->state = CLOSING;
    mg_ws_out_drop_messages(&t->down.out);
    uint8_t payload[125];
    size_t n = mg_ws_close_payload(payload, client_code, reason);
    inject(t, &t->down, frame_new(t, 0, MG_WS_CLOSE, payload, n), 0, 0);
    n = mg_ws_close_payload(payload, server_code, reason);
    inject(t, &t->up, frame_new(t, 1, MG_WS_CLOSE, payload, n), 0, 0);
    mg_timer_set(&t->timer, t->conf->websocket.close_timeout_ms);
}

static void on_timer(mg_timer_t *timer)
{
    mg_ws_tunnel_t *t = H2O_STRUCT_FROM_MEMBER(mg_ws_tunnel_t, timer, timer);
    const mg_websocket_conf_t *c = &t->conf->websocket;
    uint64_t now = h2o_now(t->w->ctx.loop);
    if (t->state == CLOSING) {
        tunnel_free(t); /* close_timeout: the peers did not finish the handshake */
        return;
    }
    uint64_t next;
    int what = mg_ws_keepalive(c, now, t->last_rx, t->last_client_rx, &next);
    if (what < 0) {
        start_close(t, MG_WS_CLOSE_GOING_AWAY, MG_WS_CLOSE_GOING_AWAY, "idle timeout");
    } else {
        if (what > 0) {
            t->ping_seq++;
            inject(t, &t->down, frame_new(t, 0, MG_WS_PING, &t->ping_seq, 8), 0, 0);
        }
        mg_timer_set(&t->timer, next);
    }
    progress(t);
}

/* ---------------------------------------------------------------------------------------
 * Session operations (admin API, shutdown)
 */
static mg_ws_tunnel_t *tunnel_of(mg_ws_session_t *s)
{
    return H2O_STRUCT_FROM_MEMBER(mg_ws_tunnel_t, session, s);
}

static void op_send(mg_ws_session_t *s, char *msg, size_t len, int high)
{
    mg_ws_tunnel_t *t = tunnel_of(s);
    if (t->state == OPEN && t->down.out.queued >= t->conf->websocket.max_queued_messages)
        start_close(t, MG_WS_CLOSE_POLICY, MG_WS_CLOSE_GOING_AWAY, "too many messages queued for the client");
    else if (t->state == OPEN)
        inject(t, &t->down, frame_new(t, 0, MG_WS_TEXT, msg, len), 1, high);
    free(msg);
    progress(t);
}

static void op_close(mg_ws_session_t *s, unsigned code, const char *reason)
{
    mg_ws_tunnel_t *t = tunnel_of(s);
    start_close(t, code, code, reason);
    progress(t);
}

static void op_abort(mg_ws_session_t *s)
{
    tunnel_free(tunnel_of(s));
}

static void op_drain(mg_ws_session_t *s)
{
    mg_ws_tunnel_t *t = tunnel_of(s);
    t->drain = 1;
    progress(t);
}

static const mg_ws_session_ops_t tunnel_ops = {op_send, op_close, op_abort, op_drain};

/* ---------------------------------------------------------------------------------------
 * Opening: the backend's handshake, then the client's 101
 */
static void connect_next(mg_ws_tunnel_t *t);

/* Ends the upgrade request with a gateway error (the tunnel goes first). */
static void fail(mg_ws_tunnel_t *t, int status, const char *code, const char *reason)
{
    mg_request_t *r = t->r;
    r->tunnel = NULL;
    tunnel_free(t);
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
    if (mg_backend_may_retry(b, t->attempt, mg_str("GET", 3))) {
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

static void on_upgraded(void *arg, h2o_socket_t *sock, size_t reqsize)
{
    mg_ws_tunnel_t *t = arg;
    t->r = NULL; /* the request is gone with the HTTP/1 connection */
    if (sock == NULL) {
        tunnel_free(t);
        return;
    }
    h2o_buffer_consume(&sock->input, reqsize);
    t->client = sock;
    sock->data = t;
    /* a session from now on: admin orders and shutdown only ever meet open tunnels */
    if (mg_ws_session_register(&t->session, t->w, &tunnel_ops, mg_str(t->route, strlen(t->route)),
                               mg_str(t->tenant, strlen(t->tenant)), mg_str(t->peer, strlen(t->peer))) != 0) {
        tunnel_free(t);
        return;
    }
    t->registered = 1;
    t->state = OPEN;
    t->last_rx = t->last_client_rx = h2o_now(t->w->ctx.loop);
    t->timer.cb = on_timer;
    mg_timer_set(&t->timer, mg_ws_first_tick(&t->conf->websocket));
    h2o_socket_read_start(t->client, on_read);
    h2o_socket_read_start(t->server, on_read);
    if (t->w->stopping)
        start_close(t, MG_WS_CLOSE_GOING_AWAY, MG_WS_CLOSE_GOING_AWAY, "the gateway is shutting down");
    progress(t);
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
    tunnel_free(t);
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
    t->state = UPGRADING;
    h2o_http1_upgrade(req, NULL, 0, on_upgraded, t);
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

/* Connects to the server of this attempt (backend/connect.c). */
static void connect_next(mg_ws_tunnel_t *t)
{
    const mg_server_conf_t *server = mg_backend_server(t->backend, t->first_server, t->attempt);
    if ((t->connecting = mg_backend_connect(t->w, server, t->backend->connect_timeout_ms, on_connected, t)) == NULL)
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

const char *mg_ws_check_handshake(h2o_req_t *req, h2o_iovec_t *key)
{
    if (req->version != 0x101)
        return "a WebSocket upgrade needs HTTP/1.1";
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")))
        return "a WebSocket upgrade must be a GET";
    ssize_t k = h2o_find_header_by_str(&req->headers, H2O_STRLIT("sec-websocket-key"), -1);
    ssize_t v = h2o_find_header_by_str(&req->headers, H2O_STRLIT("sec-websocket-version"), -1);
    if (k < 0 || req->headers.entries[k].value.len != 24)
        return "missing or invalid Sec-WebSocket-Key";
    if (v < 0 || !h2o_memis(req->headers.entries[v].value.base, req->headers.entries[v].value.len, H2O_STRLIT("13")))
        return "unsupported Sec-WebSocket-Version (13 expected)";
    *key = req->headers.entries[k].value;
    return NULL;
}

void mg_ws_tunnel_start(mg_request_t *r)
{
    h2o_iovec_t key;
    const char *why = mg_ws_check_handshake(r->req, &key);
    if (why != NULL) {
        mg_request_send_error(r, 400, "bad-request", why);
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
    t->backend = r->route->forward.backend;
    t->up.from_client = 1;
    t->up.rd.max_message = t->conf->websocket.max_message_size;
    t->first_server = mg_backend_first_server(t->backend, r->send_method);
    memcpy(t->key, key.base, key.len);
    snprintf(t->route, sizeof(t->route), "%s", r->route->name != NULL ? r->route->name : "");
    mg_timer_init(&t->timer, &t->w->timers, on_handshake_timeout);
    t->head = build_head(r, mg_backend_server(t->backend, t->first_server, 0)->url);
    t->target = build_target(r);
    snprintf(t->tenant, sizeof(t->tenant), "%.*s", (int)r->tenant.len, r->tenant.base);
    snprintf(t->peer, sizeof(t->peer), "%.*s", (int)r->peer.len, r->peer.base);
    if (t->head == NULL || t->target == NULL) {
        tunnel_free(t);
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
    if (t->state == CONNECTING)
        tunnel_free(t); /* the client left while the backend was being reached */
    else
        t->r = NULL; /* the 101 is on its way: on_upgraded takes over */
}
