/*
 * Request mirrors (routes/mirror.c has the settings): once a request is on its way to its backend,
 * each mirror of its route that takes it gets a copy, sent as a backend call of the gateway's own
 * (backend/call.c, no retry, its own timeout, the answer's body dropped). A copy never delays,
 * changes or fails the client's answer: it starts after the request was dispatched, holds its own
 * copy of everything it sends (the request may end first), and whatever happens to it is only
 * counted. It is marked (`X-Matchgate-Mirror: 1`, `-shadow` after the Host, as Envoy does) and
 * spends no quota.
 *
 * A copy holds a reference on its configuration (the mirror's counters live in it) until its call
 * ends; for `compare: status` it also waits for the answer's status, which the request writes into
 * it when it is logged.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/internal.h"
#include "gateway/backend/backend.h"
#include "gateway/request/mirror.h"

struct mg_mirror_copy {
    mg_route_mirror_t *m;
    mg_config_t *conf;
    mg_call_t *call;                /* NULL once it ended */
    mg_request_t *r;                /* NULL once the request noted its status or went away */
    struct mg_mirror_copy *next;    /* the request's other copies */
    int answer_class, mirror_class; /* 0: not known yet */
    mg_backend_header_t *headers;
    size_t num_headers;
    char *method;
    mg_str_t path, query;
    char *body;
    size_t body_len;
};

static int class_of(int status)
{
    return status >= 100 && status < 600 ? status / 100 : 0;
}

/* Counted once both classes are known. */
static void compare(struct mg_mirror_copy *c)
{
    if (c->m->compare_status && c->answer_class > 0 && c->mirror_class > 0 && c->answer_class != c->mirror_class)
        atomic_fetch_add_explicit(&c->m->differed, 1, memory_order_relaxed);
}

static void copy_free(struct mg_mirror_copy *c)
{
    mg_config_release(c->conf);
    free(c);
}

static void on_answer(void *arg, const mg_call_result_t *res)
{
    struct mg_mirror_copy *c = arg;
    c->call = NULL;
    atomic_fetch_sub_explicit(&c->m->in_flight, 1, memory_order_relaxed);
    c->mirror_class = res->error != NULL ? 0 : class_of(res->status);
    atomic_fetch_add_explicit(&c->m->answers[c->mirror_class], 1, memory_order_relaxed);
    if (c->mirror_class == 0)
        c->mirror_class = -1; /* no answer: nothing to compare */
    compare(c);
    if (c->r == NULL)
        copy_free(c);
}

/* Bytes the copy needs besides itself: its headers and their strings, method, path, query, body. */
static size_t copy_size(const mg_request_t *r, const mg_backend_header_t *h, size_t n, size_t body_len)
{
    size_t size = n * sizeof(*h) + sizeof(*h) + r->send_method.len + 1 + r->send_path.len + r->send_query.len + body_len + 16;
    for (size_t i = 0; i < n; i++)
        size += h[i].name.len + h[i].value.len + 9; /* two NULs, and "-shadow" after the Host */
    return size;
}

static char *put(char **at, const char *s, size_t len)
{
    char *p = *at;
    if (len != 0)
        memcpy(p, s, len);
    p[len] = '\0';
    *at += len + 1;
    return p;
}

/* The headers forward would send, the Host marked "-shadow", and X-Matchgate-Mirror. */
static void copy_headers(struct mg_mirror_copy *c, const mg_backend_header_t *h, size_t n, char **at)
{
    for (size_t i = 0; i < n; i++) {
        mg_backend_header_t *out = &c->headers[c->num_headers++];
        out->name = h2o_iovec_init(put(at, h[i].name.base, h[i].name.len), h[i].name.len);
        int host = h2o_lcstris(h[i].name.base, h[i].name.len, H2O_STRLIT("host"));
        char *v = put(at, h[i].value.base, h[i].value.len);
        if (host) { /* the string ends where put left room for the suffix */
            memcpy(v + h[i].value.len, "-shadow", 8);
            *at += 7;
        }
        out->value = h2o_iovec_init(v, h[i].value.len + (host ? 7 : 0));
    }
    c->headers[c->num_headers++] =
        (mg_backend_header_t){h2o_iovec_init(H2O_STRLIT("x-matchgate-mirror")), h2o_iovec_init(H2O_STRLIT("1"))};
}

static struct mg_mirror_copy *copy_new(mg_request_t *r, mg_route_mirror_t *m)
{
    mg_backend_conf_t *b = m->backend;
    size_t n, body_len = r->req->entity.len;
    mg_backend_header_t *h = mg_forward_header_list(r, b->num_servers != 0 ? b->servers[0].url : "", &n);
    struct mg_mirror_copy *c = calloc(1, sizeof(*c) + copy_size(r, h, n, body_len));
    if (c == NULL)
        return NULL;
    char *at = (char *)(c + 1);
    c->headers = (mg_backend_header_t *)at;
    at += (n + 1) * sizeof(*h);
    copy_headers(c, h, n, &at);
    c->method = put(&at, r->send_method.base, r->send_method.len);
    c->path = mg_str(put(&at, r->send_path.base, r->send_path.len), r->send_path.len);
    c->query = mg_str(put(&at, r->send_query.base, r->send_query.len), r->send_query.len);
    c->body = body_len != 0 ? put(&at, r->req->entity.base, body_len) : NULL;
    c->body_len = body_len;
    c->m = m;
    return c;
}

/* One mirror's copy of the request, unless its in-flight bound or its body bound drops it. */
static void mirror_one(mg_request_t *r, mg_route_mirror_t *m)
{
    if (r->req->entity.len > m->max_body) {
        atomic_fetch_add_explicit(&m->dropped_body, 1, memory_order_relaxed);
        return;
    }
    if (atomic_fetch_add_explicit(&m->in_flight, 1, memory_order_relaxed) >= m->max_in_flight) {
        atomic_fetch_sub_explicit(&m->in_flight, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&m->dropped_full, 1, memory_order_relaxed);
        return;
    }
    struct mg_mirror_copy *c = copy_new(r, m);
    mg_call_spec_t spec = {.backend = m->backend, .timeout_ms = m->timeout_ms, .no_retry = 1, .discard_body = 1};
    if (c != NULL) {
        spec.method = c->method;
        spec.path = c->path;
        spec.query = c->query;
        spec.headers = c->headers;
        spec.num_headers = c->num_headers;
        spec.body = c->body;
        spec.body_len = c->body_len;
        c->conf = mg_config_retain(r->conf);
    }
    if (c == NULL || (c->call = mg_call_start(r->worker, &spec, on_answer, c)) == NULL) {
        atomic_fetch_sub_explicit(&m->in_flight, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&m->dropped_full, 1, memory_order_relaxed);
        if (c != NULL)
            copy_free(c);
        return;
    }
    atomic_fetch_add_explicit(&m->mirrored, 1, memory_order_relaxed);
    c->r = r;
    c->next = r->mirror_copies;
    r->mirror_copies = c;
}

void mg_mirror_start(mg_request_t *r, const mg_ctx_t *ctx)
{
    mg_route_mirrors_t *ms = r->route->mirrors;
    if (ms == NULL || r->req == NULL || ctx->websocket)
        return;
    for (size_t i = 0; i < ms->size; i++)
        if (mg_mirror_takes(&ms->items[i], ctx, mg_splitmix64(&r->worker->rng[1])))
            mirror_one(r, &ms->items[i]);
}

void mg_mirror_detach(mg_request_t *r, int status)
{
    struct mg_mirror_copy *c = r->mirror_copies, *next;
    r->mirror_copies = NULL;
    for (; c != NULL; c = next) {
        next = c->next;
        c->r = NULL;
        c->answer_class = class_of(status) != 0 ? class_of(status) : -1;
        compare(c);
        if (c->call == NULL) /* it ended already, waiting for the status */
            copy_free(c);
    }
}
