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
#include "gateway/internal.h"
#include "gateway/backend/backend.h"
#include <h2o/http1.h>

enum { UPGRADING, OPEN, CLOSING };

typedef struct bridge bridge_t;

/* One message, from arrival until its answer is queued (or it is withdrawn). */
typedef struct call {
    mg_turn_t turn;
    bridge_t *b; /* NULL once the session is gone and only the scheduler's callback is awaited */
    h2o_linklist_t link;
    h2o_mem_pool_t pool; /* the expanded path, the body, the request id line */
    json_t *id;          /* the message's id, or NULL */
    int status;          /* != 0: the gateway answers (400, 429) with `error` */
    const char *error;
    uint64_t retry_after_us;
    char method[16];
    mg_str_t path, query;
    const char *body;
    size_t body_len;
    mg_backend_header_t *headers; /* X-Request-Id of this message, then the session's headers */
    mg_call_t *call;              /* while at the backend */
} call_t;

struct bridge {
    mg_ws_session_t session;
    mg_worker_t *w;
    mg_config_t *conf; /* held for the session's life */
    const mg_route_t *route;
    mg_backend_conf_t *backend;
    h2o_socket_t *sock;
    int state, registered, drain, eof, peer_closed, busy, reading;
    int overflow; /* the client let max_queued_messages answers pile up: close it (1008) */
    /* the upgrade request, for every message: its routing context and backend headers */
    mg_ctx_t ctx;
    char *arena;
    mg_backend_header_t *headers; /* in `header_arena`: names, values and the array */
    size_t num_headers;
    char *header_arena;
    char request_id[72];
    char key[32]; /* the session's ordering key in the scheduler */
    uint64_t seq;
    /* reading */
    mg_ws_reader_t rd;
    uint64_t payload_left, payload_off;
    uint8_t mask[4];
    int fin, oversized;
    h2o_buffer_t *msg; /* the message being read, unmasked */
    /* messages waiting for their turn or at the backend */
    h2o_linklist_t calls;
    size_t num_calls;
    /* writing */
    mg_ws_out_t out;
    mg_timer_t timer;
    uint64_t last_rx, ping_seq;
};

static void progress(bridge_t *b);
static void start_close(bridge_t *b, unsigned code, const char *reason);
static int wants_input(const bridge_t *b);

/* ---------------------------------------------------------------------------------------
 * Answers
 */
static void update_queued(bridge_t *b)
{
    atomic_store_explicit(&b->session.queued, b->out.queued + b->num_calls, memory_order_relaxed);
}

/* Queues a text message for the client; a client that lets too many pile up is closed (1008). */
static void send_text(bridge_t *b, const char *text, size_t len, int high)
{
    if (b->state != OPEN)
        return;
    if (b->out.queued >= b->conf->websocket.max_queued_messages) {
        b->overflow = 1; /* closed by progress(): callers are in the middle of a call's end */
        return;
    }
    mg_ws_out_push(&b->out, mg_ws_frame_new(MG_WS_TEXT, text, len, NULL), 1, high);
    update_queued(b);
}

/* An answer to a client message (every message gets exactly one, unless the session ends first). */
static void send_json(bridge_t *b, json_t *frame)
{
    mg_stat_inc(&b->w->stats.ws_bridged);
    char *text = json_dumps(frame, JSON_COMPACT);
    json_decref(frame);
    if (text != NULL)
        send_text(b, text, strlen(text), 0);
    free(text);
}

static json_t *frame_of(const call_t *c, int status)
{
    json_t *frame = json_object();
    if (c->id != NULL)
        json_object_set(frame, "id", c->id);
    json_object_set_new(frame, "status", json_integer(status));
    return frame;
}

static void answer_error(bridge_t *b, const call_t *c, int status, const char *error)
{
    json_t *frame = frame_of(c, status);
    json_object_set_new(frame, "error", json_string(error));
    if (c->retry_after_us != 0) /* throttled (429), or over a share of the backend's queue (503) */
        json_object_set_new(frame, "retry_after", json_integer((json_int_t)((c->retry_after_us + 999999) / 1000000)));
    send_json(b, frame);
}

/* The backend's body: JSON when it parses, else a string (or null when not UTF-8). */
static json_t *body_value(const char *body, size_t len)
{
    json_t *v = json_loadb(body != NULL ? body : "", len, JSON_DECODE_ANY, NULL);
    if (v == NULL)
        v = json_stringn(body != NULL ? body : "", len);
    return v != NULL ? v : json_null();
}

/* ---------------------------------------------------------------------------------------
 * Calls
 */
static void call_free(call_t *c, mg_worker_t *w)
{
    if (c->id != NULL)
        json_decref(c->id);
    h2o_mem_clear_pool(&c->pool);
    mg_turn_finished(w);
    free(c);
}

/* The message's turn is over (answered, or withdrawn): the next one of the session may run. */
static void call_end(bridge_t *b, call_t *c)
{
    h2o_linklist_unlink(&c->link);
    b->num_calls--;
    update_queued(b);
    call_free(c, b->w);
}

static void on_call_done(void *arg, const mg_call_result_t *res)
{
    call_t *c = arg;
    bridge_t *b = c->b;
    c->call = NULL;
    mg_turn_complete(&c->turn);
    if (res->error != NULL) {
        answer_error(b, c, res->status, res->error);
    } else {
        json_t *frame = frame_of(c, res->status);
        json_object_set_new(frame, "body", body_value(res->body, res->len));
        send_json(b, frame);
    }
    call_end(b, c);
    progress(b);
}

static void run_call(bridge_t *b, call_t *c)
{
    mg_call_spec_t spec = {.backend = b->backend,
                           .method = c->method,
                           .path = c->path,
                           .query = c->query,
                           .headers = c->headers,
                           .num_headers = b->num_headers + 1,
                           .body = c->body,
                           .body_len = c->body_len,
                           .max_response =
                               b->conf->websocket.max_message_size != 0 ? b->conf->websocket.max_message_size : SIZE_MAX};
    mg_turn_started(&c->turn);
    if (c->status != 0 || (c->call = mg_call_start(b->w, &spec, on_call_done, c)) == NULL) {
        mg_turn_complete(&c->turn);
        if (c->status != 0)
            answer_error(b, c, c->status, c->error);
        else
            answer_error(b, c, 502, "cannot start the backend transfer");
        call_end(b, c);
    }
}

/* The scheduler's callback for a message that waited, on this worker. */
static void on_turn(mg_sched_task_t *task, mg_sched_status_t status)
{
    call_t *c = H2O_STRUCT_FROM_MEMBER(call_t, turn.task, task);
    bridge_t *b = c->b;
    if (b == NULL) { /* the session ended while the callback was on its way */
        if (status == MG_SCHED_RUN)
            mg_turn_complete(&c->turn); /* never started at the backend: not counted running */
        call_free(c, task->owner);
        return;
    }
    if (status == MG_SCHED_RUN)
        run_call(b, c);
    else {
        answer_error(b, c, 503,
                     status == MG_SCHED_TIMEOUT ? "the message waited queue_timeout for the backend" : "the session was drained");
        call_end(b, c);
    }
    progress(b);
}

/* Withdraws every message of the session: waiting ones leave the scheduler (or are orphaned
 * until their callback comes), calls at the backend are stopped. */
static void end_calls(bridge_t *b)
{
    while (!h2o_linklist_is_empty(&b->calls)) {
        call_t *c = H2O_STRUCT_FROM_MEMBER(call_t, link, b->calls.next);
        h2o_linklist_unlink(&c->link);
        b->num_calls--;
        if (c->call != NULL) {
            mg_call_cancel(c->call);
            mg_turn_complete(&c->turn);
            call_free(c, b->w);
        } else if (mg_turn_cancel(&c->turn) == 1) {
            call_free(c, b->w);
        } else {
            c->b = NULL;
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * Messages into calls
 */
static void *pool_alloc(void *pool, size_t size)
{
    return h2o_mem_alloc_pool(pool, size);
}

/* A field as text: a string as it is, null or absent as empty, anything else as JSON. */
static mg_str_t field_text(call_t *c, json_t *msg, const char *name)
{
    json_t *v = json_object_get(msg, name);
    if (v == NULL || json_is_null(v))
        return mg_str("", 0);
    if (json_is_string(v))
        return mg_str(json_string_value(v), json_string_length(v));
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    mg_str_t s = mg_str("", 0);
    if (text != NULL) {
        s = mg_str(h2o_strdup(&c->pool, text, strlen(text)).base, strlen(text));
        free(text);
    }
    return s;
}

/* The path: the route's template over the upgrade's context and the message's fields, then
 * normalized like a rewritten path. NULL, or why the message gets a 400: a value would hold
 * CR/LF/NUL or make a dot segment (a message field is one segment's content), or the path
 * leaves the root. */
static const char *expand_path(bridge_t *b, call_t *c, json_t *msg)
{
    const mg_route_t *route = b->route;
    mg_ctx_t ctx = b->ctx;
    ctx.alloc = (mg_alloc_t){pool_alloc, &c->pool};
    for (size_t i = 0; i < route->bridge.num_msg_vars; i++) {
        const char *var = route->bridge.msg_vars[i]; /* named at load: "msg.<field>" */
        if (mg_ctx_set_var(&ctx, mg_str(var, strlen(var)), field_text(c, msg, var + MG_BRIDGE_MSG_PREFIX_LEN)) != 0)
            return "the message binds too many variables";
    }
    mg_str_t raw;
    int err = mg_template_expand(route->bridge.path, &ctx, &raw);
    if (err == MG_TEMPLATE_DOT_SEGMENT)
        return "the path would have a '.' or '..' segment made by a variable";
    if (err != 0)
        return "the path would contain CR, LF or NUL";
    const char *q = memchr(raw.base, '?', raw.len);
    size_t plen = q != NULL ? (size_t)(q - raw.base) : raw.len;
    char *norm = h2o_mem_alloc_pool(&c->pool, plen + 2);
    long n = mg_path_normalize(raw.base, plen, norm);
    if (n < 0)
        return "the path leaves the root";
    c->path = mg_str(norm, (size_t)n);
    c->query = q != NULL ? mg_str(q + 1, raw.len - plen - 1) : mg_str("", 0);
    return NULL;
}

/* Fills the call from the message; on a bad message sets status 400 and error. */
static void prepare(bridge_t *b, call_t *c, json_t *msg, mg_str_t raw)
{
    const mg_route_t *route = b->route;
    const char *method = route->bridge.method_default, *why;
    if (route->bridge.method_from != NULL) {
        json_t *op = json_object_get(msg, route->bridge.method_from);
        method = json_is_string(op) ? mg_bridge_method(route, mg_str(json_string_value(op), json_string_length(op)))
                                    : route->bridge.method_default;
    }
    if (method == NULL) {
        c->status = 400;
        c->error = "the message's operation has no method";
        return;
    }
    snprintf(c->method, sizeof(c->method), "%s", method);
    if ((why = expand_path(b, c, msg)) != NULL) {
        c->status = 400;
        c->error = why;
        return;
    }
    if (strcmp(c->method, "GET") == 0 || strcmp(c->method, "HEAD") == 0)
        return;
    if (route->bridge.body_field == NULL) {
        c->body = raw.base;
        c->body_len = raw.len;
    } else {
        json_t *v = json_object_get(msg, route->bridge.body_field);
        char *text = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        if (text != NULL) {
            c->body_len = strlen(text);
            c->body = h2o_strdup(&c->pool, text, c->body_len).base;
            free(text);
        }
    }
}

static mg_sched_priority_t priority_of(const bridge_t *b, json_t *msg)
{
    const char *from = b->route->bridge.priority_from;
    json_t *v = from != NULL ? json_object_get(msg, from) : NULL;
    if (json_is_string(v) && mg_bridge_is_high(b->route, mg_str(json_string_value(v), json_string_length(v))))
        return MG_SCHED_HIGH;
    return MG_SCHED_NORMAL;
}

/* Gives the call its turn under the session's key; the session's tenant is the client whose share
 * of the backend's queue it counts against (without one, the session's own share bounds it). */
static void submit_call(bridge_t *b, call_t *c, mg_sched_priority_t priority)
{
    char client_buf[MG_TURN_CLIENT_LEN];
    mg_str_t client = mg_turn_client(client_buf, b->ctx.tenant, 0);
    mg_sched_result_t res =
        mg_turn_submit(&c->turn, b->w, b->backend->sched, mg_str(b->key, strlen(b->key)), client, priority, on_turn);
    switch (res) {
    case MG_SCHED_STARTED:
        run_call(b, c);
        break;
    case MG_SCHED_QUEUED:
    case MG_SCHED_QUEUED_FULL:
        break;
    default:
        c->retry_after_us = b->backend->queue_timeout_ms * 1000; /* everything now waiting has left by then */
        answer_error(b, c, 503, mg_turn_refusal(res, 1));
        call_end(b, c);
        break;
    }
}

static call_t *call_new(bridge_t *b)
{
    call_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->b = b;
    h2o_mem_init_pool(&c->pool);
    char *id = h2o_mem_alloc_pool(&c->pool, sizeof(b->request_id) + 24);
    int len = snprintf(id, sizeof(b->request_id) + 24, "%s-%llu", b->request_id, (unsigned long long)++b->seq);
    c->headers = h2o_mem_alloc_pool(&c->pool, sizeof(*c->headers) * (b->num_headers + 1));
    c->headers[0] = (mg_backend_header_t){h2o_iovec_init(H2O_STRLIT("X-Request-Id")), h2o_iovec_init(id, (size_t)len)};
    memcpy(c->headers + 1, b->headers, sizeof(*b->headers) * b->num_headers);
    return c;
}

/* A whole message from the client: parsed, checked, counted against the quota, and given its
 * turn. `raw` is the session's message buffer; `refused` says why a message is bad before it
 * is read (binary, too big), else NULL. */
static void on_message(bridge_t *b, const char *refused, mg_str_t raw)
{
    call_t *c = call_new(b);
    json_t *msg = NULL;
    mg_sched_priority_t priority = MG_SCHED_NORMAL;
    if (c == NULL) {
        start_close(b, MG_WS_CLOSE_UNAVAILABLE, "out of memory");
        return;
    }
    if (refused != NULL || (msg = json_loadb(raw.base, raw.len, 0, NULL)) == NULL || !json_is_object(msg)) {
        c->status = 400;
        c->error = refused != NULL ? refused : "the message is not a JSON object";
    } else {
        json_t *id = json_object_get(msg, "id");
        c->id = id != NULL ? json_incref(id) : NULL;
        priority = priority_of(b, msg);
        if (!mg_limits_admit_tenant(b->w, b->conf, b->ctx.tenant, &c->retry_after_us)) {
            c->status = 429;
            c->error = "tenant quota exceeded";
        } else {
            /* the whole message goes as the body unless a field is named: keep its bytes */
            mg_str_t copy = mg_str(h2o_strdup(&c->pool, raw.base, raw.len).base, raw.len);
            prepare(b, c, msg, copy);
        }
    }
    json_decref(msg);
    h2o_linklist_insert(&b->calls, &c->link);
    b->num_calls++;
    update_queued(b);
    submit_call(b, c, priority);
}

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
    if (f->opcode == MG_WS_PING && b->state == OPEN) {
        mg_ws_out_push(&b->out, mg_ws_frame_new(MG_WS_PONG, p, f->len, NULL), 0, 0);
    } else if (f->opcode == MG_WS_CLOSE) {
        b->peer_closed = 1;
        /* answer with the client's code (RFC 6455 5.5.1) when it may be sent, else 1000 */
        unsigned code = f->len >= 2 ? (unsigned)p[0] << 8 | p[1] : MG_WS_CLOSE_NORMAL;
        start_close(b, mg_ws_close_code_is_valid(code) ? code : MG_WS_CLOSE_NORMAL, "");
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
    if (b->state == OPEN)
        on_message(b, refused, mg_str(b->msg->bytes, b->msg->size));
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
            if (b->state == OPEN && !b->oversized)
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
            start_close(b, MG_WS_CLOSE_PROTOCOL, why);
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
 * The session's progress, writing and its end
 */
static void on_read(h2o_socket_t *sock, const char *err);
static void on_write(h2o_socket_t *sock, const char *err);

static void bridge_free(bridge_t *b)
{
    mg_timer_cancel(&b->timer);
    end_calls(b);
    if (b->sock != NULL)
        h2o_socket_close(b->sock);
    if (b->registered)
        mg_ws_session_unregister(&b->session);
    mg_ws_out_dispose(&b->out);
    free(b->header_arena);
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
    update_queued(b);
    b->busy = 1;
    h2o_socket_write(b->sock, bufs, n, on_write);
}

/* The session's messages that may wait or run before reading pauses: max_queued_messages, but no
 * more than the backend's share of its queue (read live: a reload may change it), so that the
 * scheduler never has to refuse one for the session's own share. (All of them may be waiting:
 * the session's key waits for a slot too.) */
static size_t calls_bound(const bridge_t *b)
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
    if (b->state == CLOSING)
        return !b->peer_closed;
    return b->state == OPEN && !b->drain && !b->overflow && b->num_calls < calls_bound(b);
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
static void progress(bridge_t *b)
{
    if (wants_input(b))
        read_frames(b);
    if (b->overflow)
        start_close(b, MG_WS_CLOSE_POLICY, "too many messages queued for the client");
    if (b->drain && b->state == OPEN && b->num_calls == 0 && b->out.queued == 0)
        start_close(b, MG_WS_CLOSE_NORMAL, "drained");
    write_out(b);
    set_reading(b);
    if (b->eof || (b->state == CLOSING && b->peer_closed && !b->busy && b->out.ctl == NULL && b->out.data == NULL))
        bridge_free(b);
}

static void on_write(h2o_socket_t *sock, const char *err)
{
    bridge_t *b = sock->data;
    b->busy = 0;
    mg_ws_out_written(&b->out);
    b->eof |= err != NULL;
    progress(b);
}

static void on_read(h2o_socket_t *sock, const char *err)
{
    bridge_t *b = sock->data;
    b->last_rx = h2o_now(b->w->ctx.loop);
    b->eof |= err != NULL;
    progress(b);
}

static void start_close(bridge_t *b, unsigned code, const char *reason)
{
    uint8_t payload[125];
    if (b->state != OPEN)
        return;
    b->state = CLOSING;
    end_calls(b);
    mg_ws_out_drop_messages(&b->out);
    update_queued(b);
    mg_ws_out_push(&b->out, mg_ws_frame_new(MG_WS_CLOSE, payload, mg_ws_close_payload(payload, code, reason), NULL), 0, 0);
    mg_timer_set(&b->timer, b->conf->websocket.close_timeout_ms);
}

static void on_timer(mg_timer_t *timer)
{
    bridge_t *b = H2O_STRUCT_FROM_MEMBER(bridge_t, timer, timer);
    const mg_websocket_conf_t *c = &b->conf->websocket;
    uint64_t now = h2o_now(b->w->ctx.loop);
    if (b->state == CLOSING) {
        bridge_free(b); /* close_timeout: the client did not answer the close */
        return;
    }
    uint64_t next;
    int what = mg_ws_keepalive(c, now, b->last_rx, b->last_rx, &next);
    if (what < 0) {
        start_close(b, MG_WS_CLOSE_GOING_AWAY, "idle timeout");
    } else {
        if (what > 0) {
            b->ping_seq++;
            mg_ws_out_push(&b->out, mg_ws_frame_new(MG_WS_PING, &b->ping_seq, 8, NULL), 0, 0);
        }
        mg_timer_set(&b->timer, next);
    }
    progress(b);
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
    send_text(b, msg, len, high);
    free(msg);
    progress(b);
}

static void op_close(mg_ws_session_t *s, unsigned code, const char *reason)
{
    bridge_t *b = bridge_of(s);
    start_close(b, code, reason);
    progress(b);
}

static void op_abort(mg_ws_session_t *s)
{
    bridge_free(bridge_of(s));
}

static void op_drain(mg_ws_session_t *s)
{
    bridge_t *b = bridge_of(s);
    b->drain = 1; /* what was received is finished; nothing new is read */
    progress(b);
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
    b->state = OPEN;
    b->last_rx = h2o_now(b->w->ctx.loop);
    mg_timer_set(&b->timer, mg_ws_first_tick(&b->conf->websocket));
    if (b->w->stopping)
        start_close(b, MG_WS_CLOSE_GOING_AWAY, "the gateway is shutting down");
    progress(b);
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
    b->backend = r->route->bridge.backend;
    b->rd.max_message = b->conf->websocket.max_message_size;
    h2o_linklist_init_anchor(&b->calls);
    h2o_buffer_init(&b->msg, &h2o_socket_buffer_prototype);
    mg_timer_init(&b->timer, &b->w->timers, on_timer);
    snprintf(b->request_id, sizeof(b->request_id), "%.*s", (int)r->request_id.len, r->request_id.base);
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
