/*
 * A bridged session's messages: each text message of the client, a JSON object, is read into a
 * call to the route's backend (method through the map, path from the template, body) and takes
 * a turn in the backend's scheduler under the session's key; its answer (the backend's, or the
 * gateway's own: 400, 429, 502, 503, 504) is queued for the client as one JSON text frame when
 * its turn ends. bridge.c has the whole story.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/websocket/bridge.h"

/* ---------------------------------------------------------------------------------------
 * Answers
 */
void mg__bridge_update_queued(bridge_t *b)
{
    atomic_store_explicit(&b->session.queued, b->out.queued + b->num_messages, memory_order_relaxed);
}

/* Queues a text message for the client; a client that lets too many pile up is closed (1008). */
void mg__bridge_send_text(bridge_t *b, const char *text, size_t len, int high)
{
    if (b->state != MG_BRIDGE_OPEN)
        return;
    if (b->out.queued >= b->conf->websocket.max_queued_messages) {
        b->overflow = 1; /* closed by mg__bridge_after_event(): callers are in the middle of a call's end */
        return;
    }
    mg_ws_out_push(&b->out, mg_ws_frame_new(MG_WS_TEXT, text, len, NULL), 1, high);
    mg__bridge_update_queued(b);
}

/* An answer to a client message (every message gets exactly one, unless the session ends first). */
static void send_json(bridge_t *b, json_t *frame)
{
    mg_stat_inc(&b->w->stats.ws_bridged);
    char *text = json_dumps(frame, JSON_COMPACT);
    json_decref(frame);
    if (text != NULL)
        mg__bridge_send_text(b, text, strlen(text), 0);
    free(text);
}

static json_t *frame_of(const message_t *m, int status)
{
    json_t *frame = json_object();
    if (m->id != NULL)
        json_object_set(frame, "id", m->id);
    json_object_set_new(frame, "status", json_integer(status));
    return frame;
}

static void answer_error(bridge_t *b, const message_t *m, int status, const char *error)
{
    json_t *frame = frame_of(m, status);
    json_object_set_new(frame, "error", json_string(error));
    if (m->retry_after_us != 0) /* throttled (429), or over a share of the backend's queue (503) */
        json_object_set_new(frame, "retry_after", json_integer((json_int_t)((m->retry_after_us + 999999) / 1000000)));
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
static void message_free(message_t *m, mg_worker_t *w)
{
    if (m->id != NULL)
        json_decref(m->id);
    h2o_mem_clear_pool(&m->pool);
    if (m->submitted)
        mg_turn_finished(w);
    free(m);
}

/* The message's turn is over (answered, or withdrawn): the next one of the session may run. */
static void message_end(bridge_t *b, message_t *m)
{
    h2o_linklist_unlink(&m->link);
    b->num_messages--;
    mg__bridge_update_queued(b);
    message_free(m, b->w);
}

static void on_answer(void *arg, const mg_call_result_t *res)
{
    message_t *m = arg;
    bridge_t *b = m->b;
    m->call = NULL;
    mg_turn_complete(&m->turn);
    if (res->error != NULL) {
        answer_error(b, m, res->status, res->error);
    } else {
        json_t *frame = frame_of(m, res->status);
        json_object_set_new(frame, "body", body_value(res->body, res->len));
        send_json(b, frame);
    }
    message_end(b, m);
    mg__bridge_after_event(b);
}

static void run_message(bridge_t *b, message_t *m)
{
    mg_call_spec_t spec = {.backend = b->backend,
                           .method = m->method,
                           .path = m->path,
                           .query = m->query,
                           .headers = m->headers,
                           .num_headers = b->num_headers + 1,
                           .body = m->body,
                           .body_len = m->body_len,
                           .max_response =
                               b->conf->websocket.max_message_size != 0 ? b->conf->websocket.max_message_size : SIZE_MAX};
    mg_turn_started(&m->turn);
    if (m->status != 0 || (m->call = mg_call_start(b->w, &spec, on_answer, m)) == NULL) {
        mg_turn_complete(&m->turn);
        if (m->status != 0)
            answer_error(b, m, m->status, m->error);
        else
            answer_error(b, m, 502, "cannot start the backend transfer");
        message_end(b, m);
    }
}

/* The scheduler's callback for a message that waited, on this worker. */
static void on_turn(mg_sched_task_t *task, mg_sched_status_t status)
{
    message_t *m = H2O_STRUCT_FROM_MEMBER(message_t, turn.task, task);
    bridge_t *b = m->b;
    if (b == NULL) { /* the session ended while the callback was on its way */
        if (status == MG_SCHED_RUN)
            mg_turn_complete(&m->turn); /* never started at the backend: not counted running */
        message_free(m, task->owner);
        return;
    }
    if (status == MG_SCHED_RUN)
        run_message(b, m);
    else {
        answer_error(b, m, 503,
                     status == MG_SCHED_TIMEOUT ? "the message waited queue_timeout for the backend" : "the session was drained");
        message_end(b, m);
    }
    mg__bridge_after_event(b);
}

/* Withdraws every message of the session: waiting ones leave the scheduler (or are orphaned
 * until their callback comes), calls at the backend are stopped. */
void mg__bridge_end_messages(bridge_t *b)
{
    while (!h2o_linklist_is_empty(&b->messages)) {
        message_t *m = H2O_STRUCT_FROM_MEMBER(message_t, link, b->messages.next);
        h2o_linklist_unlink(&m->link);
        b->num_messages--;
        if (!m->submitted) { /* its quota decision, or one before it, waits for Redis */
            mg_quota_cancel(&m->ask);
            message_free(m, b->w);
        } else if (m->call != NULL) {
            mg_call_cancel(m->call);
            mg_turn_complete(&m->turn);
            message_free(m, b->w);
        } else if (mg_turn_cancel(&m->turn) == 1) {
            message_free(m, b->w);
        } else {
            m->b = NULL;
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
static mg_str_t field_text(message_t *m, json_t *msg, const char *name)
{
    json_t *v = json_object_get(msg, name);
    if (v == NULL || json_is_null(v))
        return mg_str("", 0);
    if (json_is_string(v))
        return mg_str(json_string_value(v), json_string_length(v));
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    mg_str_t s = mg_str("", 0);
    if (text != NULL) {
        s = mg_str(h2o_strdup(&m->pool, text, strlen(text)).base, strlen(text));
        free(text);
    }
    return s;
}

/* The path: the route's template over the upgrade's context and the message's fields, then
 * normalized like a rewritten path. NULL, or why the message gets a 400: a value would hold
 * CR/LF/NUL or make a dot segment (a message field is one segment's content), or the path
 * leaves the root. */
static const char *expand_path(bridge_t *b, message_t *m, json_t *msg)
{
    const mg_route_t *route = b->route;
    mg_ctx_t ctx = b->ctx;
    ctx.alloc = (mg_alloc_t){pool_alloc, &m->pool};
    for (size_t i = 0; i < route->bridge->num_msg_vars; i++) {
        const char *var = route->bridge->msg_vars[i]; /* named at load: "msg.<field>" */
        if (mg_ctx_set_var(&ctx, mg_str(var, strlen(var)), field_text(m, msg, var + MG_BRIDGE_MSG_PREFIX_LEN)) != 0)
            return "the message binds too many variables";
    }
    mg_str_t raw;
    int err = mg_template_expand(route->bridge->path, &ctx, &raw);
    if (err == MG_TEMPLATE_DOT_SEGMENT)
        return "the path would have a '.' or '..' segment made by a variable";
    if (err != 0)
        return "the path would contain CR, LF or NUL";
    const char *q = memchr(raw.base, '?', raw.len);
    size_t plen = q != NULL ? (size_t)(q - raw.base) : raw.len;
    char *norm = h2o_mem_alloc_pool(&m->pool, plen + 2);
    long n = mg_path_normalize(raw.base, plen, norm);
    if (n < 0)
        return "the path leaves the root";
    m->path = mg_str(norm, (size_t)n);
    m->query = q != NULL ? mg_str(q + 1, raw.len - plen - 1) : mg_str("", 0);
    return NULL;
}

/* Fills the call from the message; on a bad message sets status 400 and error. */
static void prepare(bridge_t *b, message_t *m, json_t *msg, mg_str_t raw)
{
    const mg_route_t *route = b->route;
    const char *method = route->bridge->method_default, *why;
    if (route->bridge->method_from != NULL) {
        json_t *op = json_object_get(msg, route->bridge->method_from);
        method = json_is_string(op) ? mg_bridge_method(route, mg_str(json_string_value(op), json_string_length(op)))
                                    : route->bridge->method_default;
    }
    if (method == NULL) {
        m->status = 400;
        m->error = "the message's operation has no method";
        return;
    }
    snprintf(m->method, sizeof(m->method), "%s", method);
    if ((why = expand_path(b, m, msg)) != NULL) {
        m->status = 400;
        m->error = why;
        return;
    }
    if (strcmp(m->method, "GET") == 0 || strcmp(m->method, "HEAD") == 0)
        return;
    if (route->bridge->body_field == NULL) {
        m->body = raw.base;
        m->body_len = raw.len;
    } else {
        json_t *v = json_object_get(msg, route->bridge->body_field);
        char *text = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        if (text != NULL) {
            m->body_len = strlen(text);
            m->body = h2o_strdup(&m->pool, text, m->body_len).base;
            free(text);
        }
    }
}

static mg_sched_priority_t priority_of(const bridge_t *b, json_t *msg)
{
    const char *from = b->route->bridge->priority_from;
    json_t *v = from != NULL ? json_object_get(msg, from) : NULL;
    if (json_is_string(v) && mg_bridge_is_high(b->route, mg_str(json_string_value(v), json_string_length(v))))
        return MG_SCHED_HIGH;
    return MG_SCHED_NORMAL;
}

/* Gives the call its turn under the session's key; the session's tenant is the client whose share
 * of the backend's queue it counts against (without one, the session's own share bounds it). */
static void submit_message(bridge_t *b, message_t *m, mg_sched_priority_t priority)
{
    char client_buf[MG_TURN_CLIENT_LEN];
    m->submitted = 1;
    mg_str_t client = mg_turn_client(client_buf, b->ctx.tenant, 0);
    mg_sched_result_t res =
        mg_turn_submit(&m->turn, b->w, b->backend->sched, mg_str(b->key, strlen(b->key)), client, priority, on_turn);
    switch (res) {
    case MG_SCHED_STARTED:
        run_message(b, m);
        break;
    case MG_SCHED_QUEUED:
    case MG_SCHED_QUEUED_FULL:
        break;
    default:
        m->retry_after_us = b->backend->queue_timeout_ms * 1000; /* everything now waiting has left by then */
        answer_error(b, m, 503, mg_turn_refusal(res, 1));
        message_end(b, m);
        break;
    }
}

static message_t *message_new(bridge_t *b)
{
    message_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->b = b;
    m->priority = MG_SCHED_NORMAL;
    h2o_mem_init_pool(&m->pool);
    char *id = h2o_mem_alloc_pool(&m->pool, sizeof(b->request_id) + 24);
    int len = snprintf(id, sizeof(b->request_id) + 24, "%s-%llu", b->request_id, (unsigned long long)++b->seq);
    m->headers = h2o_mem_alloc_pool(&m->pool, sizeof(*m->headers) * (b->num_headers + 1));
    m->headers[0] = (mg_backend_header_t){h2o_iovec_init(H2O_STRLIT("X-Request-Id")), h2o_iovec_init(id, (size_t)len)};
    memcpy(m->headers + 1, b->headers, sizeof(*b->headers) * b->num_headers);
    return m;
}

/* A whole message from the client: parsed, checked, counted against the quota, and given its
 * turn. `raw` is the session's message buffer; `refused` says why a message is bad before it
 * is read (binary, too big), else NULL. */
/* Submits, in arrival order, the messages not submitted yet, up to the first whose quota
 * decision still waits for Redis: a session's messages take their turns in the order they came. */
static void submit_ready(bridge_t *b)
{
    for (h2o_linklist_t *l = b->messages.next; l != &b->messages;) {
        message_t *m = H2O_STRUCT_FROM_MEMBER(message_t, link, l);
        l = l->next; /* a submission may end m at once, never another message */
        if (m->quota_wait)
            break;
        if (!m->submitted)
            submit_message(b, m, m->priority);
    }
}

/* Redis answered a message's quota decision. */
static void on_quota(void *arg, int rc, const mg_decision_t *d)
{
    message_t *m = arg;
    bridge_t *b = m->b;
    m->quota_wait = 0;
    b->quota_waits--;
    if (rc != 1 && rc != -1) {
        m->status = 429;
        m->error = "tenant quota exceeded";
        m->retry_after_us = d->retry_after_us;
    }
    submit_ready(b);
    mg__bridge_after_event(b);
}

void mg__bridge_on_message(bridge_t *b, const char *refused, mg_str_t raw)
{
    message_t *m = message_new(b);
    json_t *msg = NULL;
    int admitted;
    if (m == NULL) {
        mg__bridge_start_close(b, MG_WS_CLOSE_UNAVAILABLE, "out of memory");
        return;
    }
    if (refused != NULL || (msg = json_loadb(raw.base, raw.len, 0, NULL)) == NULL || !json_is_object(msg)) {
        m->status = 400;
        m->error = refused != NULL ? refused : "the message is not a JSON object";
    } else {
        json_t *id = json_object_get(msg, "id");
        m->id = id != NULL ? json_incref(id) : NULL;
        m->priority = priority_of(b, msg);
        admitted = mg_limits_admit_tenant(b->w, b->conf, b->ctx.tenant, &m->pool, &m->ask, on_quota, m, &m->retry_after_us);
        if (admitted == 0) {
            m->status = 429;
            m->error = "tenant quota exceeded";
        } else {
            /* the whole message goes as the body unless a field is named: keep its bytes (also
             * while the quota's decision waits: the session's buffer takes the next message) */
            mg_str_t copy = mg_str(h2o_strdup(&m->pool, raw.base, raw.len).base, raw.len);
            prepare(b, m, msg, copy);
            if (admitted == MG_LIMITS_WAIT) {
                m->quota_wait = 1;
                b->quota_waits++;
            }
        }
    }
    json_decref(msg);
    h2o_linklist_insert(&b->messages, &m->link);
    b->num_messages++;
    mg__bridge_update_queued(b);
    if (b->quota_waits == 0)
        submit_message(b, m, m->priority);
}
