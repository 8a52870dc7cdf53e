/*
 * The WebSocket session registry: every tunnelled or bridged session by id, for the admin API.
 *
 * A session lives on the worker that owns its client connection and only that worker touches
 * it. The registry (mg_gateway_t.sessions) is a hash by id under one mutex, taken when a session
 * starts or ends and by admin calls, never per message: the admin thread reads the fields that do
 * not change (and the atomic `queued`) under it, and asks for actions by id through the owning
 * worker's queue. The worker looks the id up again on its own thread, so a session that ended
 * meanwhile is simply not found; since only its worker unregisters a session, a session found
 * there stays valid for the rest of that callback.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/websocket/internal.h"

struct mg_ws_registry {
    pthread_mutex_t lock;
    mg_ws_session_t **buckets;
    size_t num_buckets, count;
    uint64_t next_id;
};

/* A worker's sessions (mg_worker_t.ws). */
typedef struct mg_ws_worker {
    mg_worker_t *w;
    h2o_multithread_receiver_t receiver; /* orders from the admin thread for this worker's sessions */
    h2o_linklist_t sessions;             /* mg_ws_session_t.worker_link */
    size_t num_sessions;
} mg_ws_worker_t;

mg_ws_registry_t *mg_ws_registry_new(void)
{
    mg_ws_registry_t *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return NULL;
    pthread_mutex_init(&reg->lock, NULL);
    reg->next_id = 1;
    return reg;
}

static size_t bucket_of(uint64_t id, size_t n)
{
    return (size_t)(id * UINT64_C(0x9E3779B97F4A7C15) >> 32) & (n - 1);
}

/* Doubles the table when it is full on average; a failed allocation keeps the old one. Under the
 * lock. */
static void grow(mg_ws_registry_t *reg)
{
    size_t n = reg->num_buckets != 0 ? reg->num_buckets * 2 : 256;
    mg_ws_session_t **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < reg->num_buckets; i++) {
        for (mg_ws_session_t *s = reg->buckets[i], *next; s != NULL; s = next) {
            next = s->hash_next;
            size_t at = bucket_of(s->id, n);
            s->hash_next = b[at];
            b[at] = s;
        }
    }
    free(reg->buckets);
    reg->buckets = b;
    reg->num_buckets = n;
}

/* Under the lock. */
static mg_ws_session_t *find(mg_ws_registry_t *reg, uint64_t id)
{
    if (reg->num_buckets == 0)
        return NULL;
    mg_ws_session_t *s = reg->buckets[bucket_of(id, reg->num_buckets)];
    while (s != NULL && s->id != id)
        s = s->hash_next;
    return s;
}

/* Copies `s` to `at` with a NUL after it; returns `at`. */
static const char *put_str(char *at, mg_str_t s)
{
    if (s.len != 0)
        memcpy(at, s.base, s.len);
    at[s.len] = '\0';
    return at;
}

int mg_ws_session_register(mg_ws_session_t *s, mg_worker_t *w, const mg_ws_session_ops_t *ops, mg_str_t route, mg_str_t tenant,
                           mg_str_t peer)
{
    mg_ws_registry_t *reg = w->gw->sessions;
    char *strings = malloc(route.len + tenant.len + peer.len + 3);
    if (strings == NULL)
        return -1;
    s->route = put_str(strings, route);
    s->tenant = put_str(strings + route.len + 1, tenant);
    s->peer = put_str(strings + route.len + tenant.len + 2, peer);
    s->worker = w;
    s->ops = ops;
    s->since = time(NULL);
    atomic_init(&s->queued, 0);
    pthread_mutex_lock(&reg->lock);
    if (reg->count >= reg->num_buckets)
        grow(reg);
    if (reg->num_buckets == 0) {
        pthread_mutex_unlock(&reg->lock);
        free(strings);
        return -1;
    }
    s->id = reg->next_id++;
    size_t at = bucket_of(s->id, reg->num_buckets);
    s->hash_next = reg->buckets[at];
    reg->buckets[at] = s;
    reg->count++;
    pthread_mutex_unlock(&reg->lock);
    h2o_linklist_insert(&w->ws->sessions, &s->worker_link);
    w->ws->num_sessions++;
    mg_stat_inc(&w->stats.ws_sessions);
    return 0;
}

void mg_ws_session_unregister(mg_ws_session_t *s)
{
    mg_ws_registry_t *reg = s->worker->gw->sessions;
    pthread_mutex_lock(&reg->lock);
    mg_ws_session_t **p = &reg->buckets[bucket_of(s->id, reg->num_buckets)];
    while (*p != s)
        p = &(*p)->hash_next;
    *p = s->hash_next;
    reg->count--;
    pthread_mutex_unlock(&reg->lock);
    h2o_linklist_unlink(&s->worker_link);
    s->worker->ws->num_sessions--;
    mg_stat_dec(&s->worker->stats.ws_sessions);
    free((char *)s->route);
}

void mg_ws_sessions_foreach(mg_ws_registry_t *reg, void (*cb)(void *arg, const mg_ws_session_info_t *s), void *arg)
{
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->num_buckets; i++) {
        for (mg_ws_session_t *s = reg->buckets[i]; s != NULL; s = s->hash_next) {
            mg_ws_session_info_t info = {s->id,   s->route, s->tenant,
                                         s->peer, s->since, atomic_load_explicit(&s->queued, memory_order_relaxed)};
            cb(arg, &info);
        }
    }
    pthread_mutex_unlock(&reg->lock);
}

/* ---------------------------------------------------------------------------------------
 * Orders from the admin thread, carried out on the owning worker
 */
typedef struct order {
    h2o_multithread_message_t super;
    mg_ws_order_t kind;
    uint64_t id; /* 0: a broadcast to `route` */
    int high;
    char *route; /* a broadcast */
    char *body;  /* MG_WS_ORDER_SEND, a broadcast */
    size_t len;
} order_t;

static void order_free(order_t *o)
{
    free(o->route);
    free(o->body);
    free(o);
}

/* An order whose body (for a message) is a copy of body[0..len); NULL when out of memory. */
static order_t *order_new(mg_ws_order_t kind, const char *body, size_t len)
{
    order_t *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->kind = kind;
    if (kind == MG_WS_ORDER_SEND && (o->body = mg_copy(body != NULL ? body : "", len)) == NULL) {
        free(o);
        return NULL;
    }
    o->len = len;
    return o;
}

static void run_on_session(mg_worker_t *w, order_t *o)
{
    mg_ws_registry_t *reg = w->gw->sessions;
    pthread_mutex_lock(&reg->lock);
    mg_ws_session_t *s = find(reg, o->id);
    pthread_mutex_unlock(&reg->lock);
    if (s == NULL || s->worker != w)
        return; /* ended since the admin call */
    switch (o->kind) {
    case MG_WS_ORDER_SEND:
        s->ops->send(s, o->body, o->len, o->high);
        o->body = NULL;
        break;
    case MG_WS_ORDER_CLOSE:
        s->ops->close(s, MG_WS_CLOSE_NORMAL, "closed by the gateway");
        break;
    case MG_WS_ORDER_ABORT:
        s->ops->abort(s);
        break;
    case MG_WS_ORDER_DRAIN:
        s->ops->drain(s);
        break;
    }
}

static void broadcast(mg_worker_t *w, order_t *o)
{
    for (h2o_linklist_t *l = w->ws->sessions.next; l != &w->ws->sessions; l = l->next) {
        mg_ws_session_t *s = H2O_STRUCT_FROM_MEMBER(mg_ws_session_t, worker_link, l);
        char *copy;
        if (strcmp(s->route, o->route) == 0 && (copy = mg_copy(o->body, o->len)) != NULL)
            s->ops->send(s, copy, o->len, 0);
    }
}

static void on_orders(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    mg_worker_t *w = H2O_STRUCT_FROM_MEMBER(mg_ws_worker_t, receiver, receiver)->w;
    while (!h2o_linklist_is_empty(messages)) {
        order_t *o = H2O_STRUCT_FROM_MEMBER(order_t, super.link, messages->next);
        h2o_linklist_unlink(&o->super.link);
        if (o->route != NULL)
            broadcast(w, o);
        else
            run_on_session(w, o);
        order_free(o);
    }
}

int mg_ws_session_order(mg_gateway_t *gw, uint64_t id, mg_ws_order_t kind, const char *body, size_t len, int high)
{
    mg_ws_registry_t *reg = gw->sessions;
    order_t *o = order_new(kind, body, len);
    if (o == NULL)
        return -2;
    o->id = id;
    o->high = high;
    pthread_mutex_lock(&reg->lock);
    mg_ws_session_t *s = find(reg, id);
    if (s != NULL)
        h2o_multithread_send_message(&s->worker->ws->receiver, &o->super);
    pthread_mutex_unlock(&reg->lock);
    if (s == NULL) {
        order_free(o);
        return -1;
    }
    return 0;
}

long mg_ws_broadcast(mg_gateway_t *gw, const char *route, const char *body, size_t len)
{
    mg_ws_registry_t *reg = gw->sessions;
    long sessions = 0;
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->num_buckets; i++)
        for (mg_ws_session_t *s = reg->buckets[i]; s != NULL; s = s->hash_next)
            sessions += strcmp(s->route, route) == 0;
    pthread_mutex_unlock(&reg->lock);
    for (unsigned i = 0; i < gw->num_workers; i++) {
        order_t *o = order_new(MG_WS_ORDER_SEND, body, len);
        if (o == NULL || (o->route = mg_copy(route, strlen(route))) == NULL) {
            if (o != NULL)
                order_free(o);
            return -1;
        }
        h2o_multithread_send_message(&gw->workers[i].ws->receiver, &o->super);
    }
    return sessions;
}

/* ---------------------------------------------------------------------------------------
 * A worker's sessions
 */
int mg_ws_worker_init(mg_worker_t *w)
{
    if ((w->ws = calloc(1, sizeof(*w->ws))) == NULL)
        return -1;
    w->ws->w = w;
    h2o_linklist_init_anchor(&w->ws->sessions);
    h2o_multithread_register_receiver(w->queue, &w->ws->receiver, on_orders);
    return 0;
}

void mg_ws_worker_shutdown(mg_worker_t *w)
{
    /* close may end a session at once (unregistering it): step before calling */
    for (h2o_linklist_t *l = w->ws->sessions.next, *next; l != &w->ws->sessions; l = next) {
        next = l->next;
        mg_ws_session_t *s = H2O_STRUCT_FROM_MEMBER(mg_ws_session_t, worker_link, l);
        s->ops->close(s, MG_WS_CLOSE_GOING_AWAY, "the gateway is shutting down");
    }
}

size_t mg_ws_worker_sessions(const mg_worker_t *w)
{
    return w->ws->num_sessions;
}
