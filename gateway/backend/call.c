/*
 * Backend calls the gateway makes on its own behalf (the WebSocket bridge: one per message):
 * the request is complete in memory and the response is collected whole, up to a limit, then
 * handed over in one callback. Same rules as forward: the backend's servers in its balance
 * order, connect failures retried on the next server for idempotent methods, connect_timeout
 * and timeout, the worker's libcurl multi handle and keep-alive connections.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/internal.h"

struct mg_call {
    mg_transfer_t transfer; /* first: the upstream's handle on it */
    mg_worker_t *w;
    mg_call_spec_t spec;
    mg_call_done_t done;
    void *arg;
    CURL *easy;
    mg_timer_t timeout;
    char *url;
    h2o_buffer_t *body; /* the response's */
    int too_big;
    size_t first_server;
    unsigned attempt;
};

static size_t on_header(char *data, size_t size, size_t nitems, void *arg)
{
    return size * nitems; /* the status comes from CURLINFO_RESPONSE_CODE; headers are not kept */
}

static size_t on_body(char *data, size_t size, size_t nitems, void *arg)
{
    mg_call_t *c = arg;
    size_t n = size * nitems;
    if (c->body->size + n > c->spec.max_response) {
        c->too_big = 1;
        return 0; /* curl fails the transfer with CURLE_WRITE_ERROR */
    }
    memcpy(h2o_buffer_reserve(&c->body, n).base, data, n);
    c->body->size += n;
    return n;
}

/* Gives the handle back and stops the timer; the call object stays. */
static void release(mg_call_t *c)
{
    mg_timer_cancel(&c->timeout);
    if (c->easy != NULL)
        mg_upstream_release(c->w->upstream, c->easy);
    c->easy = NULL;
}

static void call_free(mg_call_t *c)
{
    release(c);
    free(c->url);
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

static int configure_attempt(mg_call_t *c)
{
    mg_backend_conf_t *b = c->spec.backend;
    const mg_server_conf_t *server = &b->servers[(c->first_server + c->attempt) % b->num_servers];
    size_t size = strlen(server->url) + c->spec.path.len + c->spec.query.len + 2;
    free(c->url);
    if ((c->url = malloc(size)) == NULL || mg_url_build(c->url, size, server->url, c->spec.path, c->spec.query) < 0)
        return -1;
    h2o_buffer_consume(&c->body, c->body->size); /* a retry starts a new response */
    curl_easy_setopt(c->easy, CURLOPT_URL, c->url);
    return 0;
}

static void on_done(mg_transfer_t *transfer, CURL *easy, CURLcode result)
{
    mg_call_t *c = H2O_STRUCT_FROM_MEMBER(mg_call_t, transfer, transfer);
    long status = 0;
    if (result == CURLE_OK) {
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        finish(c, (int)status, NULL);
    } else if (mg_upstream_never_connected(easy, result) &&
               mg_backend_may_retry(c->spec.backend, c->attempt, mg_str(c->spec.method, strlen(c->spec.method)))) {
        c->attempt++;
        if (configure_attempt(c) != 0 || mg_upstream_start(c->w->upstream, c->easy, &c->transfer) != 0)
            finish(c, 502, "cannot start the backend transfer");
    } else if (mg_upstream_never_connected(easy, result)) {
        finish(c, 502, "no backend server accepted the connection");
    } else if (c->too_big) {
        finish(c, 502, "the backend response is too large");
    } else if (result == CURLE_OPERATION_TIMEDOUT) {
        finish(c, 504, "the backend did not respond within the timeout");
    } else {
        finish(c, 502, curl_easy_strerror(result));
    }
}

static void on_timeout(mg_timer_t *timer)
{
    mg_call_t *c = H2O_STRUCT_FROM_MEMBER(mg_call_t, timeout, timer);
    finish(c, 504, "the backend did not respond within the timeout");
}

static void configure(mg_call_t *c)
{
    CURL *e = c->easy;
    if (strcmp(c->spec.method, "HEAD") == 0)
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, c->spec.method);
    if (c->spec.body != NULL) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->spec.body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->spec.body_len);
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->spec.headers);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->spec.backend->connect_timeout_ms);
}

mg_call_t *mg_call_start(mg_worker_t *w, const mg_call_spec_t *spec, mg_call_done_t done, void *arg)
{
    mg_call_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->transfer.done = on_done;
    c->w = w;
    c->spec = *spec;
    c->done = done;
    c->arg = arg;
    h2o_buffer_init(&c->body, &h2o_socket_buffer_prototype);
    c->first_server = mg_backend_first_server(spec->backend, mg_str(spec->method, strlen(spec->method)));
    mg_timer_init(&c->timeout, &w->timers, on_timeout);
    if ((c->easy = mg_upstream_acquire(w->upstream)) == NULL) {
        call_free(c);
        return NULL;
    }
    configure(c);
    if (configure_attempt(c) != 0 || mg_upstream_start(w->upstream, c->easy, &c->transfer) != 0) {
        call_free(c);
        return NULL;
    }
    mg_timer_set(&c->timeout, spec->backend->timeout_ms);
    return c;
}

void mg_call_cancel(mg_call_t *c)
{
    call_free(c);
}
