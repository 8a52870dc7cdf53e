/*
 * Backend calls the gateway makes on its own behalf (the WebSocket bridge: one per message):
 * the request is complete in memory and the response is collected whole, up to a limit, then
 * handed over in one callback. Same rules as forward: the backend's servers in its balance
 * order, connect failures retried on the next server for idempotent methods, connect_timeout
 * and timeout, the worker's clients and their keep-alive connections.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/backend/internal.h"

struct mg_call {
    mg_worker_t *w;
    mg_call_spec_t spec;
    mg_call_done_t done;
    void *arg;
    h2o_mem_pool_t pool; /* the attempts' memory */
    mg_exchange_t *x;    /* the attempt running */
    mg_timer_t timeout;
    h2o_buffer_t *body; /* the response's */
    int status;
    size_t first_server;
    unsigned attempt;
    const mg_server_conf_t *server; /* of the attempt */
    uint64_t attempt_us;            /* when it started (mg_server_now_us), for its response time */
    unsigned no_server : 1;         /* none was usable: the timeout timer answers 503 at once */
};

static int on_head(void *arg, int status, h2o_iovec_t reason, const mg_backend_header_t *fields, size_t num_fields)
{
    mg_call_t *c = arg;
    c->status = status; /* the fields are not kept */
    mg_server_observe_head(c->server, mg_server_now_us() - c->attempt_us);
    return 0;
}

static mg_body_taken_t on_body(void *arg, const char *data, size_t len)
{
    mg_call_t *c = arg;
    if (c->spec.discard_body)
        return MG_BODY_TAKEN;
    if (c->body->size + len > c->spec.max_response)
        return MG_BODY_ABORT; /* the only reason a call aborts: MG_ATTEMPT_ABORTED says "too large" */
    memcpy(h2o_buffer_reserve(&c->body, len).base, data, len);
    c->body->size += len;
    return MG_BODY_TAKEN;
}

/* Stops the attempt and the timer; the call object stays. */
static void release(mg_call_t *c)
{
    mg_timer_cancel(&c->timeout);
    if (c->x != NULL) {
        mg_exchange_cancel(c->x);
        mg_server_attempt_ended(c->server);
    }
    c->x = NULL;
}

static void call_free(mg_call_t *c)
{
    release(c);
    h2o_mem_clear_pool(&c->pool);
    h2o_buffer_dispose(&c->body);
    free(c);
}

static void finish(mg_call_t *c, int status, const char *error)
{
    mg_call_result_t res = {.status = status, .error = error, .body = c->body->bytes, .len = c->body->size};
    release(c);
    c->done(c->arg, &res);
    call_free(c);
}

static const mg_exchange_callbacks_t exchange_callbacks;

static int start_attempt(mg_call_t *c)
{
    if ((c->server = mg_backend_server(c->spec.backend, c->first_server, c->attempt)) == NULL)
        return -1;
    mg_exchange_request_t xr = {.server = c->server,
                                .method = mg_str(c->spec.method, strlen(c->spec.method)),
                                .path = c->spec.path,
                                .query = c->spec.query,
                                .headers = c->spec.headers,
                                .num_headers = c->spec.num_headers,
                                .body = h2o_iovec_init(c->spec.body, c->spec.body_len),
                                .connect_timeout_ms = c->spec.backend->connect_timeout_ms,
                                .pool = &c->pool};
    h2o_buffer_consume(&c->body, c->body->size); /* a retry starts a new response */
    c->attempt_us = mg_server_now_us();
    c->x = mg_exchange_start(c->w, &xr, &exchange_callbacks, c);
    if (c->x != NULL)
        mg_server_attempt_started(c->server);
    return c->x != NULL ? 0 : -1;
}

static void on_done(void *arg, mg_attempt_result_t result, const char *detail)
{
    mg_call_t *c = arg;
    c->x = NULL;
    mg_server_attempt_ended(c->server);
    mg_server_report(c->server, result, c->status);
    switch (result) {
    case MG_ATTEMPT_OK:
        finish(c, c->status, NULL);
        break;
    case MG_ATTEMPT_NOT_CONNECTED:
    case MG_ATTEMPT_CONNECT_TIMEOUT:
    case MG_ATTEMPT_TLS_FAILED:
        if (c->spec.no_retry ||
            !mg_backend_should_retry(c->spec.backend, c->attempt, mg_str(c->spec.method, strlen(c->spec.method)), result, 0))
            finish(c, 502, result == MG_ATTEMPT_TLS_FAILED ? detail : "no backend server accepted the connection");
        else if (c->attempt++, start_attempt(c) != 0)
            finish(c, 502, "cannot start the backend transfer");
        break;
    case MG_ATTEMPT_ABORTED:
        finish(c, 502, "the backend response is too large");
        break;
    case MG_ATTEMPT_TIMED_OUT:
        finish(c, 504, "the backend did not respond within the timeout");
        break;
    case MG_ATTEMPT_TOO_MANY_HEADERS:
        finish(c, 502, "the backend response has too many headers");
        break;
    case MG_ATTEMPT_BAD_HEAD:
        finish(c, 502, "the backend response head has a malformed field or reason phrase");
        break;
    default:
        finish(c, 502, detail);
        break;
    }
}

static const mg_exchange_callbacks_t exchange_callbacks = {on_head, on_body, NULL, on_done};

static void on_timeout(mg_timer_t *timer)
{
    mg_call_t *c = H2O_STRUCT_FROM_MEMBER(mg_call_t, timeout, timer);
    if (c->no_server) {
        finish(c, 503, "no-healthy-server");
        return;
    }
    if (c->x != NULL)
        mg_server_report(c->server, MG_ATTEMPT_TIMED_OUT, 0);
    finish(c, 504, "the backend did not respond within the timeout");
}

mg_call_t *mg_call_start(mg_worker_t *w, const mg_call_spec_t *spec, mg_call_done_t done, void *arg)
{
    mg_call_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->w = w;
    c->spec = *spec;
    c->done = done;
    c->arg = arg;
    h2o_mem_init_pool(&c->pool);
    h2o_buffer_init(&c->body, &h2o_socket_buffer_prototype);
    c->first_server = mg_backend_first_server(spec->backend, mg_str(spec->method, strlen(spec->method)));
    mg_timer_init(&c->timeout, &w->timers, on_timeout);
    if (c->first_server == MG_NO_SERVER) {
        /* every server is out: the answer comes at once, but on the loop as the contract says */
        c->no_server = 1;
        mg_timer_set(&c->timeout, 0);
        return c;
    }
    if (start_attempt(c) != 0) {
        call_free(c);
        return NULL;
    }
    mg_timer_set(&c->timeout, spec->timeout_ms != 0 ? spec->timeout_ms : spec->backend->timeout_ms);
    return c;
}

void mg_call_cancel(mg_call_t *c)
{
    call_free(c);
}
