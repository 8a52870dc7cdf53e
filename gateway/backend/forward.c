/*
 * Forwarding a request to its backend, and streaming the response back, through whichever client
 * speaks to the server (client.h).
 *
 * Backpressure: the exchange's body bytes are appended to `recv`; at most one h2o_send is in
 * flight (from `sending`). When `recv` holds HIGH_WATER bytes, the exchange is paused
 * (MG_BODY_PAUSE) and resumed from the generator's proceed. So a slow client holds at most about
 * 2 x HIGH_WATER per request, whatever the response size.
 *
 * Timeouts: connect_timeout is the client's. `timeout` is ours: the backend must deliver the whole
 * response within it, not counting the time the exchange is paused because the client reads
 * slowly (a slow client is not a slow backend). It spans retries. The other way round, a client
 * that accepts none of a pending send for client_idle_timeout is dropped (`stall`): h2o 2.2.5 has
 * no write timeout, and a stalled reader (an HTTP/2 stream whose flow-control window stays
 * closed, a socket nobody reads) would otherwise hold its connection, the paused exchange and its
 * max_in_flight slot forever. HTTP/2 too loses the whole connection, as with nginx's
 * send_timeout: h2o 2.2.5 gives a handler no way to reset its own stream.
 */
#include <string.h>
#include "gateway/backend/internal.h"
#include "gateway/request/request.h"

#define HIGH_WATER (256 * 1024)

/* Where a forward stands; it only moves down the list. */
typedef enum mg_forward_state {
    MG_FORWARD_WAITING,   /* an attempt runs: the backend's final head has not come */
    MG_FORWARD_HEAD,      /* the head is in req->res: body bytes collect in recv, nothing sent yet */
    MG_FORWARD_STREAMING, /* the response has started: recv goes out one h2o_send at a time */
    MG_FORWARD_ENDING,    /* the backend is done (`result`): what recv holds goes out with the end */
    MG_FORWARD_OVER,      /* the final send is made, or the request failed or was cancelled */
} mg_forward_state_t;

typedef struct mg_forward {
    mg_request_t *r;
    mg_backend_conf_t *backend;
    mg_exchange_t *x;              /* the attempt running, NULL between attempts and after the last */
    void (*over)(mg_request_t *r); /* the backend side is over: called once, then NULL */
    mg_forward_state_t state;
    mg_attempt_result_t result; /* MG_FORWARD_ENDING: how the response ends */
    /* two conditions that come and go whatever the state */
    unsigned send_pending : 1; /* an h2o_send waits for proceed */
    unsigned paused : 1;       /* the exchange waits for the client to read (backpressure) */
    h2o_generator_t generator;
    h2o_buffer_t *recv, *sending;
    mg_compress_stream_t *compress; /* the answer goes compressed through it (set by start_response), or NULL */
    h2o_linklist_t flush_link;
    mg_timer_t timeout;
    mg_timer_t stall;
    h2o_req_t *client_req; /* kept after the final send, for the stall guard */
    mg_client_watch_t client_watch;
    uint64_t timeout_left_ms;     /* while paused */
    mg_backend_header_t *headers; /* for the backend, in the request's pool */
    size_t num_headers;
    size_t first_server;
    unsigned attempt;
    const mg_server_conf_t *server; /* of the attempt running, or of the last one */
    unsigned retrying : 1;          /* the attempt running is a retry: counted in the backend's retries_running */
    int retry_status;               /* on_head refused this status to retry it (retry_on: 502, 503, 504) */
    uint64_t attempt_us;            /* when the attempt running started (mg_server_now_us), for its response time */
    mg_timer_t backoff;             /* retry_backoff: the next attempt waits for it */
    /* the response head */
    int status;
    h2o_iovec_t reason;
    size_t content_length;
} mg_forward_t;

static int is_head(mg_str_t method)
{
    return h2o_memis(method.base, method.len, H2O_STRLIT("HEAD"));
}

static void try_send(mg_forward_t *f);
static void release_exchange(mg_forward_t *f);

/* ---------------------------------------------------------------------------------------
 * The response, as the client hands it over
 */

/* The backend's final head: its end-to-end fields go into the client's response. */
static int on_head(void *arg, int status, h2o_iovec_t reason, const mg_backend_header_t *fields, size_t num_fields)
{
    mg_forward_t *f = arg;
    h2o_req_t *req = f->r->req;
    mg_conn_tokens_t tokens = {.size = 0};
    mg_server_observe_head(f->server, mg_server_now_us() - f->attempt_us);
    if (req == NULL)
        return -1;
    if (status >= 502 && status <= 504 &&
        mg_backend_should_retry(f->backend, f->attempt, f->r->send_method, MG_ATTEMPT_OK, status)) {
        f->retry_status = status; /* nothing of it reaches the client: the next server is tried */
        return -1;
    }
    for (size_t i = 0; i < num_fields; i++)
        if (h2o_memis(fields[i].name.base, fields[i].name.len, H2O_STRLIT("connection")))
            mg_conn_tokens_add(&tokens, fields[i].value.base, fields[i].value.len);
    f->content_length = SIZE_MAX;
    for (size_t i = 0; i < num_fields; i++) {
        const mg_backend_header_t *h = &fields[i];
        if (h2o_memis(h->name.base, h->name.len, H2O_STRLIT("content-length")))
            f->content_length = h2o_strtosize(h->value.base, h->value.len);
        if (mg_header_is_hop_by_hop(h->name.base, h->name.len, &tokens) ||
            mg_header_is_replaced_in_response(h->name.base, h->name.len))
            continue;
        h2o_add_header_by_str(&req->pool, &req->res.headers, h->name.base, h->name.len, 1, NULL, h->value.base, h->value.len);
    }
    f->status = status;
    f->reason = reason;
    f->state = MG_FORWARD_HEAD;
    return 0;
}

static void start_response(mg_forward_t *f)
{
    h2o_req_t *req = f->r->req;
    req->res.status = f->status;
    req->res.reason = f->reason.base != NULL ? f->reason.base : "";
    req->res.content_length = f->content_length;
    /* set_method turned the client's request into a HEAD: the backend's length is that of a body
     * nobody sends, and the client, which did not ask for a HEAD, must not wait for it */
    if (is_head(f->r->send_method) && !is_head(f->r->method))
        req->res.content_length = 0;
    mg_request_add_own_headers(f->r, req, 0);
    f->compress = mg_compress_response(f->r, req);
    f->r->status = f->status;
    f->state = MG_FORWARD_STREAMING;
    /* from here on h2o writes to the client and reports a departure itself */
    mg_client_watch_stop(&f->client_watch);
    h2o_start_response(req, &f->generator);
}

static void link_flush(mg_forward_t *f)
{
    if (!h2o_linklist_is_linked(&f->flush_link))
        h2o_linklist_insert(&f->r->worker->backend->flush_list, &f->flush_link);
}

/* Whether body bytes are to be dropped: set_method turned the client's HEAD into another
 * method, so no body goes back. */
static int drops_body(const mg_forward_t *f)
{
    return is_head(f->r->method) && !is_head(f->r->send_method);
}

static mg_body_taken_t on_body(void *arg, const char *data, size_t len)
{
    mg_forward_t *f = arg;
    if (f->r->req == NULL)
        return MG_BODY_ABORT;
    if (drops_body(f))
        return MG_BODY_TAKEN;
    if (f->recv->size >= HIGH_WATER) {
        /* the client is slower than the backend: stop reading until proceed, and stop the
         * backend's clock meanwhile */
        f->paused = 1;
        uint64_t now = h2o_now(f->r->worker->ctx.loop);
        f->timeout_left_ms = f->timeout.deadline > now ? f->timeout.deadline - now : 0;
        mg_timer_cancel(&f->timeout);
        return MG_BODY_PAUSE;
    }
    h2o_iovec_t room = h2o_buffer_reserve(&f->recv, len);
    memcpy(room.base, data, len);
    f->recv->size += len;
    link_flush(f);
    return MG_BODY_TAKEN;
}

/* The client's input buffer holds body bytes only: when nothing waits in `recv`, the buffer
 * becomes `recv` (and `recv`'s empty one the client's input), so the bytes reach the client
 * without being copied. Otherwise on_body appends them. */
static int take_body_buffer(void *arg, h2o_buffer_t **buf)
{
    mg_forward_t *f = arg;
    if (f->r->req == NULL || drops_body(f) || f->recv->size != 0)
        return 0;
    h2o_buffer_t *t = f->recv;
    f->recv = *buf;
    *buf = t;
    link_flush(f);
    return 1;
}

/* Emptied, not freed: the next swap would otherwise grow a new buffer by doubling and copying. */
static void empty_buffer(h2o_buffer_t *b)
{
    if (b->bytes != NULL) {
        b->size = 0;
        b->bytes = b->_buf;
    }
}

/* The client has room again: the exchange, paused for it, reads on (it may call back into the
 * forward, and even end it). */
static void resume_exchange(mg_forward_t *f)
{
    if (f->paused && f->state == MG_FORWARD_STREAMING) {
        f->paused = 0;
        mg_timer_set(&f->timeout, f->timeout_left_ms);
        mg_exchange_resume(f->x);
    }
}

static void on_proceed(h2o_generator_t *generator, h2o_req_t *req)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, generator, generator);
    f->send_pending = 0;
    mg_timer_cancel(&f->stall);
    empty_buffer(f->sending);
    resume_exchange(f);
    try_send(f);
}

static void on_stop(h2o_generator_t *generator, h2o_req_t *req)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, generator, generator);
    mg_forward_cancel(f->r);
}

/* Moves what `recv` holds into `sending` (which is empty): the bytes themselves (the buffers
 * swap), or what the answer's encoder makes of them (`end`: the last piece). 0, or -1 when the
 * encoder failed. */
static int fill_sending(mg_forward_t *f, int end)
{
    if (f->compress == NULL) {
        h2o_buffer_t *t = f->sending;
        f->sending = f->recv;
        f->recv = t;
        return 0;
    }
    int ret = mg_compress_stream_run(f->compress, h2o_iovec_init(f->recv->bytes, f->recv->size), &f->sending, end);
    empty_buffer(f->recv);
    return ret;
}

/* Sends what `recv` holds, and the end of the response once the backend is done. */
static void try_send(mg_forward_t *f)
{
    if (f->state < MG_FORWARD_HEAD || f->state == MG_FORWARD_OVER || f->send_pending || f->r->req == NULL)
        return;
    if (f->state != MG_FORWARD_ENDING && f->recv->size == 0)
        return;
    if (f->state == MG_FORWARD_HEAD)
        start_response(f);
    h2o_send_state_t state = H2O_SEND_STATE_IN_PROGRESS;
    if (f->state == MG_FORWARD_ENDING)
        state = f->result == MG_ATTEMPT_OK ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_ERROR;
    if (fill_sending(f, state == H2O_SEND_STATE_FINAL) != 0)
        state = H2O_SEND_STATE_ERROR; /* the encoder failed: the answer is cut short */
    h2o_iovec_t buf = h2o_iovec_init(f->sending->bytes, f->sending->size);
    if (state == H2O_SEND_STATE_IN_PROGRESS && buf.len == 0) {
        /* the encoder keeps the bytes for now: nothing to send, so no proceed will come to
         * resume a paused exchange */
        resume_exchange(f);
        return;
    }
    h2o_req_t *req = f->r->req;
    f->r->bytes_sent += buf.len;
    if (state != H2O_SEND_STATE_IN_PROGRESS) {
        if (f->compress != NULL)
            mg_compress_stream_close(f->compress); /* its output stays in `sending` until disposed */
        f->state = MG_FORWARD_OVER;
        f->r->req = NULL;    /* h2o owns the request from the final send on */
        release_exchange(f); /* the buffers stay until the request is disposed */
        mg_request_log(f->r);
    } else {
        f->send_pending = 1;
    }
    mg_timer_set(&f->stall, f->r->conf->limits.client_idle_timeout_ms);
    h2o_send(req, &buf, buf.len != 0, state);
}

void mg__forward_flush(mg_worker_t *w)
{
    h2o_linklist_t *list = &w->backend->flush_list;
    while (!h2o_linklist_is_empty(list)) {
        mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, flush_link, list->next);
        h2o_linklist_unlink(&f->flush_link);
        /* bytes only go out once the head is complete: clients deliver the head first */
        if (f->state >= MG_FORWARD_HEAD)
            try_send(f);
    }
}

/* ---------------------------------------------------------------------------------------
 * Attempts
 */
static const mg_exchange_callbacks_t exchange_callbacks;

/* Starts the attempt at the server of its turn: retries walk on from the first choice. */
static int start_attempt(mg_forward_t *f)
{
    mg_request_t *r = f->r;
    const mg_server_conf_t *server = mg_backend_server(f->backend, f->first_server, f->attempt);
    if (server == NULL)
        return -1;
    f->server = server;
    r->server = server->url;
    /* made once, unless the Host of an HTTP/1.0 client that sent none is the server's */
    if (f->headers == NULL || r->host.len == 0)
        f->headers = mg_forward_header_list(r, server->url, &f->num_headers);
    mg_exchange_request_t xr = {.server = server,
                                .method = r->send_method,
                                .path = r->send_path,
                                .query = r->send_query,
                                .headers = f->headers,
                                .num_headers = f->num_headers,
                                .body = r->req->entity, /* stays in the request's memory: a retry sends it again in full */
                                .connect_timeout_ms = f->backend->connect_timeout_ms,
                                .pool = &r->req->pool};
    f->retry_status = 0;
    f->attempt_us = mg_server_now_us();
    f->x = mg_exchange_start(r->worker, &xr, &exchange_callbacks, f);
    if (f->x == NULL)
        return -1;
    mg_server_attempt_started(server);
    if (f->attempt > 0) {
        f->retrying = 1;
        atomic_fetch_add_explicit(&f->backend->retries_running, 1, memory_order_relaxed);
    }
    return 0;
}

/* The attempt running has ended, whichever way. */
static void attempt_over(mg_forward_t *f)
{
    mg_server_attempt_ended(f->server);
    if (f->retrying)
        atomic_fetch_sub_explicit(&f->backend->retries_running, 1, memory_order_relaxed);
    f->retrying = 0;
}

/* The next attempt, on the next server, after retry_backoff if any. 0, or -1 when it cannot start. */
static int retry(mg_forward_t *f)
{
    uint64_t delay = mg_backend_retry_backoff_ms(f->backend, ++f->attempt);
    if (delay == 0)
        return start_attempt(f);
    mg_timer_set(&f->backoff, delay); /* the backend's `timeout` runs on meanwhile */
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Life cycle
 */
static void fail(mg_forward_t *f, int status, const char *code, const char *reason)
{
    mg_request_t *r = f->r;
    mg_forward_cancel(r);
    mg_request_send_error(r, status, code, reason);
}

static void on_client_gone(mg_client_watch_t *cw)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, client_watch, cw);
    f->r->status = 499; /* nginx's code for "the client closed the request" */
    mg_request_log(f->r);
    /* the connection is shut down: this answer reaches nobody, writing it makes h2o close the
     * connection and free the request */
    fail(f, 502, "backend-unavailable", "the client closed the connection");
}

/* An attempt ended before any byte of the response reached the client. */
static void on_failed_before_response(mg_forward_t *f, mg_attempt_result_t result, const char *detail)
{
    switch (result) {
    case MG_ATTEMPT_TOO_MANY_HEADERS:
        fail(f, 502, "backend-unavailable", "the backend response has too many headers");
        break;
    case MG_ATTEMPT_BAD_HEAD:
        fail(f, 502, "bad-gateway-response", "the backend response head has a malformed field or reason phrase");
        break;
    case MG_ATTEMPT_BAD_RESPONSE:
        fail(f, 502, "bad-gateway-response", detail);
        break;
    case MG_ATTEMPT_NOT_CONNECTED:
    case MG_ATTEMPT_CONNECT_TIMEOUT:
        if (mg_backend_should_retry(f->backend, f->attempt, f->r->send_method, result, 0) && retry(f) == 0)
            return;
        fail(f, 502, "backend-unavailable", "no backend server accepted the connection");
        break;
    case MG_ATTEMPT_TLS_FAILED:
        /* nothing of the request was sent: the next server may be tried, as after a refused connect */
        if (mg_backend_should_retry(f->backend, f->attempt, f->r->send_method, result, 0) && retry(f) == 0)
            return;
        fail(f, 502, "backend-tls", detail);
        break;
    case MG_ATTEMPT_ABORTED:
        if (f->retry_status != 0 && retry(f) == 0)
            return;
        fail(f, 502, "backend-unavailable", f->retry_status != 0 ? "cannot start the backend transfer" : detail);
        break;
    case MG_ATTEMPT_FAILED:
        if (mg_backend_should_retry(f->backend, f->attempt, f->r->send_method, result, 0) && retry(f) == 0)
            return;
        fail(f, 502, "backend-unavailable", detail);
        break;
    default:
        fail(f, 502, "backend-unavailable", detail);
        break;
    }
}

/* Nothing more comes from the backend: its slot and the request's key turn pass on now (the
 * starter's `over`), not when the client has read the response (a slow reader would hold them as
 * long as it likes). */
static void transfer_over(mg_forward_t *f)
{
    void (*over)(mg_request_t * r) = f->over;
    f->over = NULL;
    if (over != NULL)
        over(f->r);
}

/* The backend is done: what `recv` holds goes out with the end of the response (an error
 * ends it abnormally). */
static void finish(mg_forward_t *f, mg_attempt_result_t result)
{
    transfer_over(f);
    f->result = result;
    if (f->state == MG_FORWARD_HEAD)
        start_response(f);
    f->state = MG_FORWARD_ENDING;
    try_send(f);
}

static void on_done(void *arg, mg_attempt_result_t result, const char *detail)
{
    mg_forward_t *f = arg;
    f->x = NULL;
    attempt_over(f);
    /* a status refused for a retry is the server's answer all the same */
    mg_server_report(f->server, f->retry_status != 0 ? MG_ATTEMPT_OK : result, f->retry_status != 0 ? f->retry_status : f->status);
    if (f->r->req == NULL) {
        /* the client is gone: nobody gets the response, the dispose frees it */
        mg_timer_cancel(&f->timeout);
        transfer_over(f);
        f->state = MG_FORWARD_OVER;
        return;
    }
    /* once the client has part of the response, an error can only cut it short */
    if (f->state >= MG_FORWARD_STREAMING || (result == MG_ATTEMPT_OK && f->state == MG_FORWARD_HEAD)) {
        mg_timer_cancel(&f->timeout);
        finish(f, result);
    } else {
        /* a retry keeps the clock: `timeout` spans every attempt (each way out of here that is not
         * a retry cancels it with the exchange) */
        on_failed_before_response(f, result, detail);
    }
}

static const mg_exchange_callbacks_t exchange_callbacks = {on_head, on_body, take_body_buffer, on_done};

static void on_timeout(mg_timer_t *timer)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, timeout, timer);
    if (f->x != NULL)
        mg_server_report(f->server, MG_ATTEMPT_TIMED_OUT, 0);
    release_exchange(f);
    if (f->state < MG_FORWARD_STREAMING)
        fail(f, 504, "backend-timeout", "the backend did not respond within the timeout");
    else
        finish(f, MG_ATTEMPT_TIMED_OUT);
}

static void on_stall(mg_timer_t *timer)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, stall, timer);
    release_exchange(f);
    transfer_over(f); /* nothing more is read from the backend */
    if (f->state != MG_FORWARD_OVER) {
        f->state = MG_FORWARD_ENDING;
        f->result = MG_ATTEMPT_FAILED;
    }
    mg_client_abort(f->client_req);
}

static void on_backoff(mg_timer_t *timer)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, backoff, timer);
    if (start_attempt(f) != 0)
        fail(f, 502, "backend-unavailable", "cannot start the backend transfer");
}

static mg_forward_t *forward_new(mg_request_t *r)
{
    h2o_req_t *req = r->req;
    mg_forward_t *f = h2o_mem_alloc_pool(&req->pool, sizeof(*f));
    memset(f, 0, sizeof(*f));
    f->r = r;
    f->backend = r->backend;
    f->state = MG_FORWARD_WAITING;
    f->generator.proceed = on_proceed;
    f->generator.stop = on_stop;
    mg_timer_init(&f->timeout, &r->worker->timers, on_timeout);
    mg_timer_init(&f->stall, &r->worker->timers, on_stall);
    mg_timer_init(&f->backoff, &r->worker->timers, on_backoff);
    f->client_req = req;
    h2o_buffer_init(&f->recv, &h2o_socket_buffer_prototype);
    h2o_buffer_init(&f->sending, &h2o_socket_buffer_prototype);
    r->forward = f;
    return f;
}

/* 1 when every header value can be forwarded (no CR, LF or NUL). */
static int headers_are_safe(h2o_req_t *req)
{
    for (size_t i = 0; i < req->headers.size; i++)
        if (!mg_header_value_is_safe(req->headers.entries[i].value.base, req->headers.entries[i].value.len))
            return 0;
    return 1;
}

void mg_forward_start(mg_request_t *r, void (*over)(mg_request_t *r))
{
    mg_forward_t *f = forward_new(r);
    f->over = over;
    if (!headers_are_safe(r->req)) {
        fail(f, 400, "bad-request", "a request header value contains CR, LF or NUL");
        return;
    }
    if ((f->first_server = mg_backend_first_server_keyed(f->backend, r->send_method,
                                                         r->has_balance_key ? &r->balance_key : NULL)) == MG_NO_SERVER) {
        /* every server is out (ejected, unhealthy, drained, disabled): say so at once rather than
         * make the client wait for a connect timeout */
        mg_forward_cancel(r);
        mg_request_send_retry(r, 503, "no-healthy-server", "no server of the backend is healthy",
                              mg_backend_retry_after_ms(f->backend, mg_health_clock()) * 1000);
        return;
    }
    mg_timer_set(&f->timeout, f->backend->timeout_ms);
    mg_client_watch_start(&f->client_watch, &r->worker->timers, r->req, on_client_gone);
    if (start_attempt(f) != 0)
        fail(f, 502, "backend-unavailable", "cannot start the backend transfer");
}

/* Stops the attempt running; the connection stays in the client's keep-alive pool when it can. */
static void release_exchange(mg_forward_t *f)
{
    mg_timer_cancel(&f->timeout);
    mg_client_watch_stop(&f->client_watch);
    if (h2o_linklist_is_linked(&f->flush_link))
        h2o_linklist_unlink(&f->flush_link);
    mg_timer_cancel(&f->backoff);
    if (f->x != NULL) {
        mg_exchange_cancel(f->x);
        attempt_over(f);
    }
    f->x = NULL;
}

void mg_forward_cancel(mg_request_t *r)
{
    mg_forward_t *f = r->forward;
    if (f == NULL)
        return;
    r->forward = NULL;
    release_exchange(f);
    transfer_over(f);
    f->state = MG_FORWARD_OVER;
    mg_timer_cancel(&f->stall);
    if (f->compress != NULL)
        mg_compress_stream_close(f->compress);
    h2o_buffer_dispose(&f->recv);
    h2o_buffer_dispose(&f->sending);
}
