/*
 * The WebSocket bridge: a route with `bridge:` ends the WebSocket at the gateway. Each text
 * message, a JSON object, becomes one HTTP request to the route's backend (method from a field
 * through the map, path from the template with ${msg.<field>}, body from a field or the whole
 * message, the upgrade request's headers after the route's actions); the response goes back
 * as one JSON text frame: {"id", "status", "body"} or {"id", "status", "error"}.
 *
 * Order. Every message takes a turn in the backend's scheduler under the session's own key, so
 * a session's messages run one at a time, in arrival order, a high-priority one ahead of those
 * waiting (never interrupting the running one), and the backend's max_in_flight and fairness
 * apply across sessions and plain requests alike. Answers are queued for the client when their
 * message runs, so they come in execution order. A message the gateway answers itself (not
 * JSON, no method for its operation, over the tenant's quota) takes its turn too: its answer
 * is sent in sequence, it only skips the backend.
 *
 * Bounds. Messages are at most websocket.max_message_size. When max_queued_messages messages
 * of a session wait for their turn or run (or the backend's max_queued_per_key, when that is
 * fewer) the gateway stops reading the client until one finishes (backpressure):
 * a session that pipelines is slowed down, never refused for its own share. Its tenant's share
 * is shared with the tenant's other sessions and requests: a message over it gets a 503 frame
 * with retry_after, and the session stays open. When max_queued_messages answers and admin
 * messages wait for a client that does not read, the client is closed with 1008.
 *
 * Life. UPGRADING (the 101 is being written) -> OPEN -> CLOSING (the gateway sent a close
 * frame: admin close or drain, shutdown, idle timeout, a protocol error; or it answered the
 * client's) -> the end, when the client has answered (or close_timeout passes) and nothing is
 * being written; or at once when the client's connection ends. Messages still waiting then are
 * withdrawn and calls in progress stopped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/websocket/bridge.h"
#include <h2o/http1.h>

static int wants_input(const bridge_t *b);

/* ---------------------------------------------------------------------------------------
 * Reading frames
 */
static void append_payload(bridge_t *b, const char *p, size_t n)
{
    char *dst = h2o_buffer_reserve(&b->msg, n).base;
    memcpy(dst, p, n);
    mg_ws_mask((uint8_t *)dst, n, b->mask, b->payload_off);
    b->msg->size += n;
    b->payload_off += n;
}

/* A whole control frame from the client. */
static void on_control(bridge_t *b, const mg_ws_frame_t *f, const uint8_t *payload)
{
    uint8_t p[125];
    memcpy(p, payload, f->len);
    mg_ws_mask(p, f->len, f->mask, 0);
    if (f->opcode == MG_WS_PING && b->state == MG_BRIDGE_OPEN) {
        mg_ws_out_push(&b->out, mg_ws_frame_new(MG_WS_PONG, p, f->len, NULL), 0, 0);
    } else if (f->opcode == MG_WS_CLOSE) {
        b->peer_closed = 1;
        /* answer with the client's code (RFC 6455 5.5.1) when it may be sent, else 1000 */
        unsigned code = f->len >= 2 ? (unsigned)p[0] << 8 | p[1] : MG_WS_CLOSE_NORMAL;
        mg__bridge_start_close(b, mg_ws_close_code_is_valid(code) ? code : MG_WS_CLOSE_NORMAL, "");
    }
}

/* Consumes what the client sent, frame by frame, until more bytes are needed, the session
 * closes, or too many of its messages wait (then reading pauses). */
/* The last frame of a message has been read: a message, or a 400 for one too big to keep. */
static void message_done(bridge_t *b)
{
    const char *refused = b->oversized                           ? "the message exceeds websocket.max_message_size"
                          : b->rd.message_opcode == MG_WS_BINARY ? "binary messages are not bridged"
                                                                 : NULL;
    if (b->state == MG_BRIDGE_OPEN)
        mg__bridge_on_message(b, refused, mg_str(b->msg->bytes, b->msg->size));
    h2o_buffer_consume(&b->msg, b->msg->size);
    b->oversized = 0;
}

static void read_frames(bridge_t *b)
{
    h2o_socket_t *sock = b->sock;
    while (wants_input(b)) {
        size_t avail = sock->input->size;
        if (b->payload_left > 0) {
            size_t n = avail < b->payload_left ? avail : (size_t)b->payload_left;
            if (n == 0)
                return;
            if (b->state == MG_BRIDGE_OPEN && !b->oversized)
                append_payload(b, sock->input->bytes, n);
            h2o_buffer_consume(&sock->input, n);
            if ((b->payload_left -= n) == 0 && b->fin)
                message_done(b);
            continue;
        }
        mg_ws_frame_t f;
        const char *why = NULL;
        int rc = mg_ws_frame_parse((const uint8_t *)sock->input->bytes, avail, &f, &why);
        if (rc == 0)
            return;
        if (rc < 0 || (rc = mg_ws_reader_next(&b->rd, &f, 1, &why)) == -1) {
            /* nothing after a broken frame can be read: no close frame will be found either */
            mg__bridge_start_close(b, MG_WS_CLOSE_PROTOCOL, why);
            b->peer_closed = 1;
            h2o_buffer_consume(&sock->input, sock->input->size);
            return;
        }
        if (rc == -2) /* too big: the rest is read and dropped, and the message gets a 400 */
            b->oversized = 1;
        if (f.opcode >= MG_WS_CLOSE) {
            if (f.header_len + f.len > avail)
                return;
            on_control(b, &f, (const uint8_t *)sock->input->bytes + f.header_len);
            h2o_buffer_consume(&sock->input, f.header_len + f.len);
            continue;
        }
        h2o_buffer_consume(&sock->input, f.header_len);
        memcpy(b->mask, f.mask, 4);
        b->payload_left = f.len;
        b->payload_off = 0;
        b->fin = f.fin;
        if (f.len == 0 && f.fin)
            message_done(b);
    }
}

/* ---------------------------------------------------------------------------------------
 * The session's mg__bridge_after_event, writing and its end
 */
static void on_read(h2o_socket_t *sock, const char *err);
static void on_write(h2o_socket_t *sock, const char *err);

static void bridge_free(bridge_t *b)
{
    mg_timer_cancel(&b->timer);
    mg__bridge_end_messages(b);
    if (b->sock != NULL)
        h2o_socket_close(b->sock);
    if (b->registered)
        mg_ws_session_unregister(&b->session);
    mg_ws_out_dispose(&b->out);
    free(b->header_arena);
    mg_ws_expiry_stop(&b->expiry);
    mg_worker_conf_drop(b->w, b->conf);
    free(b->arena);
    h2o_buffer_dispose(&b->msg);
    free(b);
}

static void write_out(bridge_t *b)
{
    h2o_iovec_t bufs[64];
    size_t n;
    if (b->busy || b->eof || (n = mg_ws_out_take(&b->out, bufs, 64, 1)) == 0)
        return;
    mg__bridge_update_queued(b);
    b->busy = 1;
    h2o_socket_write(b->sock, bufs, n, on_write);
}

/* The session's messages that may wait or run before reading pauses: max_queued_messages, but no
 * more than the backend's share of its queue (read live: a reload may change it), so that the
 * scheduler never has to refuse one for the session's own share. (All of them may be waiting:
 * the session's key waits for a slot too.) */
static size_t messages_bound(const bridge_t *b)
{
    size_t bound = b->conf->websocket.max_queued_messages;
    unsigned share = atomic_load_explicit(&b->backend->sched->share, memory_order_relaxed);
    return share != 0 && share < bound ? share : bound;
}

/* Reads while the session is open (not draining) and its waiting messages are under the bound,
 * and while closing until the client's close frame comes. */
static int wants_input(const bridge_t *b)
{
    if (b->eof)
        return 0;
    if (b->state == MG_BRIDGE_CLOSING)
        return !b->peer_closed;
    return b->state == MG_BRIDGE_OPEN && !b->drain && !b->overflow && b->num_messages < messages_bound(b);
}

static void set_reading(bridge_t *b)
{
    int want = wants_input(b);
    if (want && !b->reading)
        h2o_socket_read_start(b->sock, on_read);
    else if (!want && b->reading)
        h2o_socket_read_stop(b->sock);
    b->reading = want;
}

/* After every event: reads what is buffered, writes what is queued, starts the close a drain
 * waits for, and ends the session when it is over. The session must not be touched afterwards. */
void mg__bridge_after_event(bridge_t *b)
{
    if (wants_input(b))
        read_frames(b);
    if (b->overflow)
        mg__bridge_start_close(b, MG_WS_CLOSE_POLICY, "too many messages queued for the client");
    if (b->drain && b->state == MG_BRIDGE_OPEN && b->num_messages == 0 && b->out.queued == 0)
        mg__bridge_start_close(b, MG_WS_CLOSE_NORMAL, "drained");
    write_out(b);
    set_reading(b);
    if (b->eof || (b->state == MG_BRIDGE_CLOSING && b->peer_closed && !b->busy && b->out.ctl == NULL && b->out.data == NULL))
        bridge_free(b);
}

static void on_write(h2o_socket_t *sock, const char *err)
{
    bridge_t *b = sock->data;
    b->busy = 0;
    mg_ws_out_written(&b->out);
    b->eof |= err != NULL;
    mg__bridge_after_event(b);
}

static void on_read(h2o_socket_t *sock, const char *err)
{
    bridge_t *b = sock->data;
    b->last_rx = h2o_now(b->w->ctx.loop);
    b->eof |= err != NULL;
    mg__bridge_after_event(b);
}

void mg__bridge_start_close(bridge_t *b, unsigned code, const char *reason)
{
    uint8_t payload[125];
    if (b->state != MG_BRIDGE_OPEN)
        return;
    b->state = MG_BRIDGE_CLOSING;
    mg__bridge_end_messages(b);
    mg_ws_out_drop_messages(&b->out);
    mg__bridge_update_queued(b);
    mg_ws_out_push(&b->out, mg_ws_frame_new(MG_WS_CLOSE, payload, mg_ws_close_payload(payload, code, reason), NULL), 0, 0);
    mg_timer_set(&b->timer, b->conf->websocket.close_timeout_ms);
}

static void on_timer(mg_timer_t *timer)
{
    bridge_t *b = H2O_STRUCT_FROM_MEMBER(bridge_t, timer, timer);
    const mg_websocket_conf_t *c = &b->conf->websocket;
    uint64_t now = h2o_now(b->w->ctx.loop);
    if (b->state == MG_BRIDGE_CLOSING) {
        bridge_free(b); /* close_timeout: the client did not answer the close */
        return;
    }
    uint64_t next;
    int what = mg_ws_keepalive(c, now, b->last_rx, b->last_rx, &next);
    if (what < 0) {
        mg__bridge_start_close(b, MG_WS_CLOSE_GOING_AWAY, "idle timeout");
    } else {
        if (what > 0) {
            b->ping_seq++;
            mg_ws_out_push(&b->out, mg_ws_frame_new(MG_WS_PING, &b->ping_seq, 8, NULL), 0, 0);
        }
        mg_timer_set(&b->timer, next);
    }
    mg__bridge_after_event(b);
}

static void on_token_expired(mg_timer_t *timer)
{
    bridge_t *b = H2O_STRUCT_FROM_MEMBER(bridge_t, expiry.timer, timer);
    mg__bridge_start_close(b, MG_WS_CLOSE_POLICY, "token expired");
    mg__bridge_after_event(b);
}

/* ---------------------------------------------------------------------------------------
 * Session operations (admin API, shutdown)
 */
static bridge_t *bridge_of(mg_ws_session_t *s)
{
    return H2O_STRUCT_FROM_MEMBER(bridge_t, session, s);
}

static void op_send(mg_ws_session_t *s, char *msg, size_t len, int high)
{
    bridge_t *b = bridge_of(s);
    mg__bridge_send_text(b, msg, len, high);
    free(msg);
    mg__bridge_after_event(b);
}

static void op_close(mg_ws_session_t *s, unsigned code, const char *reason)
{
    bridge_t *b = bridge_of(s);
    mg__bridge_start_close(b, code, reason);
    mg__bridge_after_event(b);
}

static void op_abort(mg_ws_session_t *s)
{
    bridge_free(bridge_of(s));
}

static void op_drain(mg_ws_session_t *s)
{
    bridge_t *b = bridge_of(s);
    b->drain = 1; /* what was received is finished; nothing new is read */
    mg__bridge_after_event(b);
}

static const mg_ws_session_ops_t bridge_ops = {op_send, op_close, op_abort, op_drain};

/* ---------------------------------------------------------------------------------------
 * Start: the upgrade request's context and headers are copied (the request ends with the 101)
 */
static size_t str_size(mg_str_t s)
{
    return s.len + 1;
}

static mg_str_t put(char **at, mg_str_t s)
{
    char *p = *at;
    if (s.len != 0)
        memcpy(p, s.base, s.len);
    p[s.len] = '\0';
    *at += s.len + 1;
    return mg_str(p, s.len);
}

/* Copies the strings of the routing context into one allocation owned by the session. */
static int copy_ctx(bridge_t *b, const mg_ctx_t *src)
{
    size_t size = str_size(src->method) + str_size(src->scheme) + str_size(src->host) + str_size(src->path) + str_size(src->query) +
                  str_size(src->peer) + str_size(src->tenant) + src->num_headers * sizeof(mg_header_t);
    for (size_t i = 0; i < src->num_headers; i++)
        size += str_size(src->headers[i].name) + str_size(src->headers[i].value);
    for (size_t i = 0; i < src->num_vars; i++)
        size += str_size(src->vars[i].name) + str_size(src->vars[i].value);
    if ((b->arena = malloc(size)) == NULL)
        return -1;
    mg_header_t *headers = (mg_header_t *)b->arena;
    char *at = b->arena + src->num_headers * sizeof(mg_header_t);
    b->ctx = *src;
    b->ctx.method = put(&at, src->method);
    b->ctx.scheme = put(&at, src->scheme);
    b->ctx.host = put(&at, src->host);
    b->ctx.path = put(&at, src->path);
    b->ctx.query = put(&at, src->query);
    b->ctx.peer = put(&at, src->peer);
    b->ctx.tenant = put(&at, src->tenant);
    b->ctx.claims = b->expiry.identity != NULL ? &b->expiry.identity->claims : NULL; /* the request's reference ends with it */
    for (size_t i = 0; i < src->num_headers; i++)
        headers[i] = (mg_header_t){put(&at, src->headers[i].name), put(&at, src->headers[i].value)};
    b->ctx.headers = headers;
    for (size_t i = 0; i < src->num_vars; i++) {
        b->ctx.vars[i].name = put(&at, src->vars[i].name);
        b->ctx.vars[i].value = put(&at, src->vars[i].value);
    }
    return 0;
}

/* 1 for a field of the upgrade that no message carries: the WebSocket handshake's, and the
 * request id (each message has its own). */
static int is_upgrade_only(h2o_iovec_t name)
{
    return (name.len > 14 && strncasecmp(name.base, "sec-websocket-", 14) == 0) ||
           (name.len == 12 && strncasecmp(name.base, "x-request-id", 12) == 0);
}

/* Copies `v` to `*at` (and moves past it). */
static h2o_iovec_t put_iovec(char **at, h2o_iovec_t v)
{
    char *p = *at;
    if (v.len != 0)
        memcpy(p, v.base, v.len);
    *at += v.len;
    return h2o_iovec_init(p, v.len);
}

/* The upgrade's headers as forward sends them, less those upgrade-only, plus the body's type:
 * copied into one allocation of the session's (the request ends with the 101). */
static int build_headers(bridge_t *b, mg_request_t *r)
{
    static const mg_backend_header_t fixed[] = {{{H2O_STRLIT("Content-Type")}, {H2O_STRLIT("application/json")}},
                                                {{H2O_STRLIT("Accept")}, {H2O_STRLIT("application/json")}}};
    size_t n, num = sizeof(fixed) / sizeof(fixed[0]), bytes = 0;
    mg_backend_header_t *all = mg_forward_header_list(r, b->backend->servers[0].url, &n);
    for (size_t i = 0; i < n; i++) {
        if (!is_upgrade_only(all[i].name)) {
            num++;
            bytes += all[i].name.len + all[i].value.len;
        }
    }
    if ((b->header_arena = malloc(num * sizeof(*b->headers) + bytes)) == NULL)
        return -1;
    mg_backend_header_t *h = b->headers = (mg_backend_header_t *)b->header_arena;
    char *at = b->header_arena + num * sizeof(*h);
    for (size_t i = 0; i < n; i++) {
        if (!is_upgrade_only(all[i].name)) {
            h->name = put_iovec(&at, all[i].name);
            h->value = put_iovec(&at, all[i].value);
            h++;
        }
    }
    memcpy(h, fixed, sizeof(fixed));
    b->num_headers = num;
    return 0;
}

static void on_upgraded(void *arg, h2o_socket_t *sock, size_t reqsize)
{
    bridge_t *b = arg;
    if (sock == NULL) {
        bridge_free(b);
        return;
    }
    h2o_buffer_consume(&sock->input, reqsize);
    b->sock = sock;
    sock->data = b;
    /* a session from now on: admin orders and shutdown only ever meet open sessions */
    const char *route = b->route->name != NULL ? b->route->name : "";
    if (mg_ws_session_register(&b->session, b->w, &bridge_ops, mg_str(route, strlen(route)), b->ctx.tenant, b->ctx.peer) != 0) {
        bridge_free(b);
        return;
    }
    b->registered = 1;
    snprintf(b->key, sizeof(b->key), "ws:%llu", (unsigned long long)b->session.id);
    b->state = MG_BRIDGE_OPEN;
    b->last_rx = h2o_now(b->w->ctx.loop);
    mg_timer_set(&b->timer, mg_ws_first_tick(&b->conf->websocket));
    mg_ws_expiry_arm(&b->expiry, b->w, b->conf, on_token_expired);
    if (b->w->stopping)
        mg__bridge_start_close(b, MG_WS_CLOSE_GOING_AWAY, "the gateway is shutting down");
    mg__bridge_after_event(b);
}

void mg_ws_bridge_start(mg_request_t *r, const mg_ctx_t *ctx)
{
    h2o_iovec_t key;
    const char *why = mg_ws_check_handshake(r->req, &key);
    if (why != NULL) {
        mg_request_send_error(r, 400, "bad-request", why);
        return;
    }
    bridge_t *b = calloc(1, sizeof(*b));
    if (b == NULL) {
        mg_request_send_error(r, 503, "backend-unavailable", "out of memory");
        return;
    }
    b->w = r->worker;
    b->conf = mg_worker_conf_hold(b->w);
    b->route = r->route;
    b->backend = r->route->bridge->backend;
    b->rd.max_message = b->conf->websocket.max_message_size;
    h2o_linklist_init_anchor(&b->messages);
    h2o_buffer_init(&b->msg, &h2o_socket_buffer_prototype);
    mg_timer_init(&b->timer, &b->w->timers, on_timer);
    snprintf(b->request_id, sizeof(b->request_id), "%.*s", (int)r->request_id.len, r->request_id.base);
    mg_ws_expiry_keep(&b->expiry, r);
    if (copy_ctx(b, ctx) != 0 || build_headers(b, r) != 0) {
        bridge_free(b);
        mg_request_send_error(r, 503, "backend-unavailable", "out of memory");
        return;
    }
    /* the route and the configuration stay valid: the session holds the configuration */
    h2o_req_t *req = r->req;
    char accept[MG_WS_ACCEPT_LEN + 1];
    mg_ws_accept_key(accept, key.base, key.len);
    req->res.status = 101;
    req->res.reason = "Switching Protocols";
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("upgrade"), 0, NULL, H2O_STRLIT("websocket"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("sec-websocket-accept"), 0, NULL,
                          h2o_strdup(&req->pool, accept, MG_WS_ACCEPT_LEN).base, MG_WS_ACCEPT_LEN);
    r->status = 101;
    h2o_http1_upgrade(req, NULL, 0, on_upgraded, b);
}
