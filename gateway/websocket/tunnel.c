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
 * Life. CONNECTING (name lookup, connect, handshake with the backend, in tunnel_open.c; the
 * client's request is still an h2o request) -> UPGRADING (the 101 is being written) -> OPEN -> CLOSING (a close
 * started by the gateway: idle timeout, shutdown, admin; both peers get a close frame, what
 * they send from then on is read and dropped, and the connections end when both have answered,
 * or at close_timeout) -> the end. A peer closing its connection ends the tunnel once what it
 * sent before has been written to the other side (close frames pass through untouched, so a
 * close handshake between the peers goes end to end).
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/websocket/tunnel.h"

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

/* Queues a frame of the gateway's own; the caller writes it (write_next), nothing here does. */
static void inject(mg_ws_tunnel_t *t, dir_t *d, mg_ws_frame_buf_t *f, int message, int front)
{
    mg_ws_out_push(&d->out, f, message, front);
    if (d == &t->down)
        atomic_store_explicit(&t->session.queued, d->out.queued, memory_order_relaxed);
}

/* ---------------------------------------------------------------------------------------
 * The end
 */
void mg__ws_tunnel_free(mg_ws_tunnel_t *t)
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
    mg_ws_expiry_stop(&t->expiry);
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

/*
 * Read buffers for a direction that carries big writes. An h2o socket reads into 8 KiB and
 * doubles the buffer while a read fills it, and the buffer goes back to its free list once it
 * is written out: every 64 KiB message was 5 reads per hop (8 + 8 + 16 + 32 KiB and the end) and
 * 56 KiB copied as the buffer grew (nginx reads such a message in 17 reads of its 4 KiB
 * buffer). A direction whose last write was bigger than 8 KiB reads into 96 KiB at once (a
 * 64 KiB message and its header in one read; below glibc's 128 KiB mmap threshold, so a buffer
 * that is not kept comes from the heap); one of small messages keeps h2o's 8 KiB, so a tunnel
 * of small messages holds no more than before, and an idle one holds none either way (an
 * empty buffer is given back). Per worker thread, as h2o's own free list.
 */
#define MG_TUNNEL_BIG_BUFFER (96 * 1024)
#if defined(__SANITIZE_ADDRESS__)
#define MG_TUNNEL_BIG_BUFFERS_KEPT 0 /* really freed, so that a use after release is caught */
#else
#define MG_TUNNEL_BIG_BUFFERS_KEPT 16
#endif
static __thread h2o_buffer_prototype_t big_buffers = {
    {MG_TUNNEL_BIG_BUFFERS_KEPT}, {MG_TUNNEL_BIG_BUFFER}, &h2o_socket_buffer_mmap_settings};

/* The buffer the source's next read starts from, after a write of `written` bytes from it. */
static void size_read_buffer(h2o_socket_t *src, size_t written)
{
    int big = written > H2O_SOCKET_INITIAL_INPUT_BUFFER_SIZE * 2;
    /* a buffer still holding bytes keeps them; it is freed (or kept) by its size when emptied */
    h2o_buffer_set_prototype(&src->input, big ? &big_buffers : &h2o_socket_buffer_prototype);
}

/* A control frame at the very front of the source's input, whole: 1 when the gateway keeps it
 * (the client's answer to the gateway's ping; anything while the gateway closes). */
static int keeps_control(mg_ws_tunnel_t *t, dir_t *d, const mg_ws_frame_t *f, const uint8_t *payload)
{
    if (t->state == MG_TUNNEL_CLOSING) {
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
 * before them waiting to be written); the walk stops at what it cannot tell yet.
 */
static size_t passable_bytes(mg_ws_tunnel_t *t, dir_t *d, h2o_socket_t *src)
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
                d->rd = before; /* looked at again, at the front, once what came before is written */
            }
            return off;
        }
        int keep = t->state == MG_TUNNEL_CLOSING;
        if (f.opcode >= MG_WS_CLOSE) {
            if (off != 0 || f.header_len + f.len > avail)
                return off; /* control frames are looked at whole, at the front: at most 131 bytes */
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
static void write_next(mg_ws_tunnel_t *t, dir_t *d)
{
    h2o_socket_t *src = src_of(t, d), *dst = dst_of(t, d);
    if (d->busy || d->eof)
        return;
    /* the gateway's frames go first, where the last write ended: at a frame boundary if that is
     * one, and its messages only between messages (passable_bytes moves the state past the bytes it passes) */
    int at_frame = d->payload_left == 0, between_messages = !d->rd.in_message;
    size_t pass = passable_bytes(t, d, src);
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
    return t->state == MG_TUNNEL_CLOSING && t->up.answered && t->down.answered && t->up.out.ctl == NULL && t->down.out.ctl == NULL;
}

/*
 * After every event: moves both directions on, starts the close a drain waits for, and ends the
 * tunnel when it is over and nothing is being written (so that what a peer sent before leaving,
 * a close frame say, reaches the other one). The tunnel must not be touched afterwards.
 */
static void after_event(mg_ws_tunnel_t *t)
{
    if (t->drain && t->state == MG_TUNNEL_OPEN && t->down.out.queued == 0)
        start_close(t, MG_WS_CLOSE_NORMAL, MG_WS_CLOSE_NORMAL, "drained");
    write_next(t, &t->up);
    write_next(t, &t->down);
    if (is_over(t) && !t->up.busy && !t->down.busy)
        mg__ws_tunnel_free(t);
}

static void on_write(h2o_socket_t *sock, const char *err)
{
    mg_ws_tunnel_t *t = sock->data;
    dir_t *d = sock == t->client ? &t->down : &t->up;
    h2o_socket_t *src = src_of(t, d);
    d->busy = 0;
    mg_ws_out_written(&d->out);
    if (err != NULL) {
        mg__ws_tunnel_free(t); /* the destination is gone */
        return;
    }
    h2o_buffer_consume(&src->input, d->writing);
    size_read_buffer(src, d->writing);
    d->writing = 0;
    if (!d->eof)
        h2o_socket_read_start(src, on_read);
    after_event(t);
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
    after_event(t);
}

/* ---------------------------------------------------------------------------------------
 * Closing, pings, idle timeout
 */
static void start_close(mg_ws_tunnel_t *t, unsigned client_code, unsigned server_code, const char *reason)
{
    if (t->state != MG_TUNNEL_OPEN)
        return;
    t->state = MG_TUNNEL_CLOSING;
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
    if (t->state == MG_TUNNEL_CLOSING) {
        mg__ws_tunnel_free(t); /* close_timeout: the peers did not finish the handshake */
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
    after_event(t);
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
    if (t->state == MG_TUNNEL_OPEN && t->down.out.queued >= t->conf->websocket.max_queued_messages)
        start_close(t, MG_WS_CLOSE_POLICY, MG_WS_CLOSE_GOING_AWAY, "too many messages queued for the client");
    else if (t->state == MG_TUNNEL_OPEN)
        inject(t, &t->down, frame_new(t, 0, MG_WS_TEXT, msg, len), 1, high);
    free(msg);
    after_event(t);
}

static void op_close(mg_ws_session_t *s, unsigned code, const char *reason)
{
    mg_ws_tunnel_t *t = tunnel_of(s);
    start_close(t, code, code, reason);
    after_event(t);
}

static void op_abort(mg_ws_session_t *s)
{
    mg__ws_tunnel_free(tunnel_of(s));
}

static void on_token_expired(mg_timer_t *timer)
{
    mg_ws_tunnel_t *t = H2O_STRUCT_FROM_MEMBER(mg_ws_tunnel_t, expiry.timer, timer);
    start_close(t, MG_WS_CLOSE_POLICY, MG_WS_CLOSE_POLICY, "token expired");
    after_event(t);
}

static void op_drain(mg_ws_session_t *s)
{
    mg_ws_tunnel_t *t = tunnel_of(s);
    t->drain = 1;
    after_event(t);
}

static const mg_ws_session_ops_t tunnel_ops = {op_send, op_close, op_abort, op_drain};

void mg__ws_tunnel_on_upgraded(void *arg, h2o_socket_t *sock, size_t reqsize)
{
    mg_ws_tunnel_t *t = arg;
    t->r = NULL; /* the request is gone with the HTTP/1 connection */
    if (sock == NULL) {
        mg__ws_tunnel_free(t);
        return;
    }
    h2o_buffer_consume(&sock->input, reqsize);
    t->client = sock;
    sock->data = t;
    /* a session from now on: admin orders and shutdown only ever meet open tunnels */
    if (mg_ws_session_register(&t->session, t->w, &tunnel_ops, mg_str(t->route, strlen(t->route)),
                               mg_str(t->tenant, strlen(t->tenant)), mg_str(t->peer, strlen(t->peer))) != 0) {
        mg__ws_tunnel_free(t);
        return;
    }
    t->registered = 1;
    t->state = MG_TUNNEL_OPEN;
    t->last_rx = t->last_client_rx = h2o_now(t->w->ctx.loop);
    t->timer.cb = on_timer;
    mg_timer_set(&t->timer, mg_ws_first_tick(&t->conf->websocket));
    mg_ws_expiry_arm(&t->expiry, t->w, t->conf, on_token_expired);
    h2o_socket_read_start(t->client, on_read);
    h2o_socket_read_start(t->server, on_read);
    if (t->w->stopping)
        start_close(t, MG_WS_CLOSE_GOING_AWAY, MG_WS_CLOSE_GOING_AWAY, "the gateway is shutting down");
    after_event(t);
}
