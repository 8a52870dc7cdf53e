/*
 * The WebSocket session registry: every tunnelled or bridged session by id, for the admin API.
 *
 * A session lives on the worker that owns its client connection and only that worker touches
 * it. The registry is a hash by id under one mutex, taken when a session starts or ends and by
 * admin calls, never per message: the admin thread reads the fields that do not change (and the
 * atomic `queued`) under it, and asks for actions by id through the owning worker's queue. The
 * worker looks the id up again on its own thread, so a session that ended meanwhile is simply
 * not found; since only its worker unregisters a session, a session found there stays valid for
 * the rest of that callback.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/internal.h"

static struct {
    pthread_mutex_t lock;
    mg_ws_session_t **buckets;
    size_t num_buckets, count;
    uint64_t next_id;
} registry = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 1};

static size_t bucket_of(uint64_t id, size_t n)
{
    return (size_t)(id * UINT64_C(0x9E3779B97F4A7C15) >> 32) & (n - 1);
}

/* Doubles the table when it is full on average; a failed allocation keeps the old one. */
static void grow(void)
{
    size_t n = registry.num_buckets != 0 ? registry.num_buckets * 2 : 256;
    mg_ws_session_t **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < registry.num_buckets; i++) {
        for (mg_ws_session_t *s = registry.buckets[i], *next; s != NULL; s = next) {
            next = s->hash_next;
            size_t at = bucket_of(s->id, n);
            s->hash_next = b[at];
            b[at] = s;
        }
    }
    free(registry.buckets);
    registry.buckets = b;
    registry.num_buckets = n;
}

/* Under the lock. */
static mg_ws_session_t *find(uint64_t id)
{
    if (registry.num_buckets == 0)
        return NULL;
    mg_ws_session_t *s = registry.buckets[bucket_of(id, registry.num_buckets)];
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
    pthread_mutex_lock(&registry.lock);
    if (registry.count >= registry.num_buckets)
        grow();
    if (registry.num_buckets == 0) {
        pthread_mutex_unlock(&registry.lock);
        free(strings);
        return -1;
    }
    s->id = registry.next_id++;
    size_t at = bucket_of(s->id, registry.num_buckets);
    s->hash_next = registry.buckets[at];
    registry.buckets[at] = s;
    registry.count++;
    pthread_mutex_unlock(&registry.lock);
    h2o_linklist_insert(&w->ws_sessions, &s->worker_link);
    w->num_sessions++;
    mg_stat_inc(&w->stats.ws_sessions);
    return 0;
}

void mg_ws_session_unregister(mg_ws_session_t *s)
{
    pthread_mutex_lock(&registry.lock);
    mg_ws_session_t **p = &registry.buckets[bucket_of(s->id, registry.num_buckets)];
    while (*p != s)
        p = &(*p)->hash_next;
    *p = s->hash_next;
    registry.count--;
    pthread_mutex_unlock(&registry.lock);
    h2o_linklist_unlink(&s->worker_link);
    s->worker->num_sessions--;
    mg_stat_dec(&s->worker->stats.ws_sessions);
    free((char *)s->route);
}

/* ---------------------------------------------------------------------------------------
 * Commands from the admin thread, run on the owning worker
 */
typedef enum { CMD_SEND, CMD_CLOSE, CMD_ABORT, CMD_DRAIN, CMD_BROADCAST } cmd_kind_t;

typedef struct cmd {
    h2o_multithread_message_t super;
    cmd_kind_t kind;
    uint64_t id;
    int high;
    char *route; /* CMD_BROADCAST */
    char *body;  /* CMD_SEND, CMD_BROADCAST */
    size_t len;
} cmd_t;

static char *dup_bytes(const char *p, size_t n)
{
    char *copy = malloc(n + 1);
    if (copy != NULL) {
        memcpy(copy, p, n);
        copy[n] = '\0';
    }
    return copy;
}

static void run_on_session(mg_worker_t *w, cmd_t *c)
{
    pthread_mutex_lock(&registry.lock);
    mg_ws_session_t *s = find(c->id);
    pthread_mutex_unlock(&registry.lock);
    if (s == NULL || s->worker != w)
        return; /* ended since the admin call */
    switch (c->kind) {
    case CMD_SEND:
        s->ops->send(s, c->body, c->len, c->high);
        c->body = NULL;
        break;
    case CMD_CLOSE:
        s->ops->close(s, MG_WS_CLOSE_NORMAL, "closed by the gateway");
        break;
    case CMD_ABORT:
        s->ops->abort(s);
        break;
    case CMD_DRAIN:
        s->ops->drain(s);
        break;
    case CMD_BROADCAST:
        break;
    }
}

static void broadcast(mg_worker_t *w, cmd_t *c)
{
    for (h2o_linklist_t *l = w->ws_sessions.next; l != &w->ws_sessions; l = l->next) {
        mg_ws_session_t *s = H2O_STRUCT_FROM_MEMBER(mg_ws_session_t, worker_link, l);
        char *copy;
        if (strcmp(s->route, c->route) == 0 && (copy = dup_bytes(c->body, c->len)) != NULL)
            s->ops->send(s, copy, c->len, 0);
    }
}

static void on_commands(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    mg_worker_t *w = H2O_STRUCT_FROM_MEMBER(mg_worker_t, ws_receiver, receiver);
    while (!h2o_linklist_is_empty(messages)) {
        cmd_t *c = H2O_STRUCT_FROM_MEMBER(cmd_t, super.link, messages->next);
        h2o_linklist_unlink(&c->super.link);
        if (c->kind == CMD_BROADCAST)
            broadcast(w, c);
        else
            run_on_session(w, c);
        free(c->route);
        free(c->body);
        free(c);
    }
}

void mg_ws_worker_init(mg_worker_t *w)
{
    h2o_linklist_init_anchor(&w->ws_sessions);
    w->num_sessions = 0;
    h2o_multithread_register_receiver(w->queue, &w->ws_receiver, on_commands);
}

void mg_ws_worker_shutdown(mg_worker_t *w)
{
    /* close may end a session at once (unregistering it): step before calling */
    for (h2o_linklist_t *l = w->ws_sessions.next, *next; l != &w->ws_sessions; l = next) {
        next = l->next;
        mg_ws_session_t *s = H2O_STRUCT_FROM_MEMBER(mg_ws_session_t, worker_link, l);
        s->ops->close(s, MG_WS_CLOSE_GOING_AWAY, "the gateway is shutting down");
    }
}

/* ---------------------------------------------------------------------------------------
 * Admin endpoints (admin thread)
 */

/* The value of `name` in the query string of `req`, decoded into the pool; NULL when absent. */
static const char *query_param(h2o_req_t *req, const char *name)
{
    int found;
    if (req->query_at == SIZE_MAX)
        return NULL;
    mg_str_t query = mg_str(req->path.base + req->query_at + 1, req->path.len - req->query_at - 1);
    mg_str_t v = mg_query_param(query, mg_str(name, strlen(name)), &found);
    if (!found)
        return NULL;
    char *decoded = h2o_mem_alloc_pool(&req->pool, v.len + 1);
    decoded[mg_percent_decode(v.base, v.len, decoded, 1)] = '\0';
    return decoded;
}

static json_t *session_json(const mg_ws_session_t *s)
{
    char since[32];
    struct tm tm;
    gmtime_r(&s->since, &tm);
    strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return json_pack("{s:I, s:s, s:s?, s:s, s:s, s:I}", "id", (json_int_t)s->id, "route", s->route, "tenant",
                     s->tenant[0] != '\0' ? s->tenant : NULL, "peer", s->peer, "since", since, "queued",
                     (json_int_t)atomic_load_explicit(&s->queued, memory_order_relaxed));
}

void mg_admin_sessions(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    const char *route = query_param(req, "route"), *tenant = query_param(req, "tenant");
    json_t *list = json_array();
    pthread_mutex_lock(&registry.lock);
    for (size_t i = 0; i < registry.num_buckets; i++)
        for (mg_ws_session_t *s = registry.buckets[i]; s != NULL; s = s->hash_next)
            if ((route == NULL || strcmp(route, s->route) == 0) && (tenant == NULL || strcmp(tenant, s->tenant) == 0))
                json_array_append_new(list, session_json(s));
    pthread_mutex_unlock(&registry.lock);
    mg_admin_send_json(req, 200, json_pack("{s:o}", "sessions", list));
}

/* The n-th segment (0-based) of the normalized path, as a string in the pool. */
static const char *segment(h2o_req_t *req, int n)
{
    const char *p = req->path_normalized.base, *end = p + req->path_normalized.len;
    for (int i = 0; i <= n; i++) {
        if (p >= end)
            return NULL;
        const char *start = p + 1, *slash = memchr(start, '/', (size_t)(end - start));
        const char *stop = slash != NULL ? slash : end;
        if (i == n)
            return h2o_strdup(&req->pool, start, (size_t)(stop - start)).base;
        p = stop;
    }
    return NULL;
}

static int parse_id(const char *s, uint64_t *id)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    *id = strtoull(s, &end, 10);
    return *end == '\0' ? 0 : -1;
}

static void send_error(h2o_req_t *req, int status, const char *message)
{
    mg_admin_send_json(req, status, json_pack("{s:s}", "error", message));
}

/* A message for clients goes out as one text frame: its size and its UTF-8 are checked here, so
 * that no client closes its session on it (RFC 6455 8.1: 1007). 0, or -1 after answering. */
static int check_message(h2o_req_t *req, const mg_config_t *conf)
{
    if (conf->websocket.max_message_size != 0 && req->entity.len > conf->websocket.max_message_size) {
        send_error(req, 413, "the message exceeds websocket.max_message_size");
        return -1;
    }
    json_t *utf8 = json_stringn(req->entity.base != NULL ? req->entity.base : "", req->entity.len);
    if (utf8 == NULL) {
        send_error(req, 400, "the message is not valid UTF-8 (it goes out as a text frame)");
        return -1;
    }
    json_decref(utf8);
    return 0;
}

static cmd_t *cmd_new(cmd_kind_t kind, h2o_req_t *req)
{
    cmd_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->kind = kind;
    if (kind == CMD_SEND || kind == CMD_BROADCAST) {
        c->len = req->entity.len;
        if ((c->body = dup_bytes(req->entity.base != NULL ? req->entity.base : "", c->len)) == NULL) {
            free(c);
            return NULL;
        }
    }
    return c;
}

/* POST /sessions/{id}/{send,close,abort,drain} */
void mg_admin_session_action(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    static const struct {
        const char *name;
        cmd_kind_t kind;
    } actions[] = {{"send", CMD_SEND}, {"close", CMD_CLOSE}, {"abort", CMD_ABORT}, {"drain", CMD_DRAIN}};
    const char *action = segment(req, 2);
    uint64_t id;
    size_t i = 0;
    while (i < 4 && strcmp(actions[i].name, action) != 0)
        i++;
    if (i == 4) {
        send_error(req, 404, "unknown action (send, close, abort, drain)");
        return;
    }
    if (parse_id(segment(req, 1), &id) != 0) {
        send_error(req, 404, "no such session");
        return;
    }
    if (actions[i].kind == CMD_SEND && check_message(req, conf) != 0)
        return;
    const char *priority = query_param(req, "priority");
    cmd_t *c = cmd_new(actions[i].kind, req);
    if (c == NULL) {
        send_error(req, 500, "out of memory");
        return;
    }
    c->id = id;
    c->high = priority != NULL && strcmp(priority, "high") == 0;
    pthread_mutex_lock(&registry.lock);
    mg_ws_session_t *s = find(id);
    if (s != NULL)
        h2o_multithread_send_message(&s->worker->ws_receiver, &c->super);
    pthread_mutex_unlock(&registry.lock);
    if (s == NULL) {
        free(c->body);
        free(c);
        send_error(req, 404, "no such session");
        return;
    }
    mg_admin_send_json(req, 202, json_pack("{s:I, s:s}", "id", (json_int_t)id, "action", action));
}

/* POST /routes/{name}/broadcast: one command per worker, which sends to its sessions of the route. */
void mg_admin_broadcast(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    const char *route = segment(req, 1);
    if (mg_routes_find(conf->routes, route) == NULL) {
        send_error(req, 404, "no such route");
        return;
    }
    if (check_message(req, conf) != 0)
        return;
    size_t sessions = 0;
    pthread_mutex_lock(&registry.lock);
    for (size_t i = 0; i < registry.num_buckets; i++)
        for (mg_ws_session_t *s = registry.buckets[i]; s != NULL; s = s->hash_next)
            sessions += strcmp(s->route, route) == 0;
    pthread_mutex_unlock(&registry.lock);
    for (unsigned i = 0; i < gw->num_workers; i++) {
        cmd_t *c = cmd_new(CMD_BROADCAST, req);
        if (c == NULL || (c->route = dup_bytes(route, strlen(route))) == NULL) {
            if (c != NULL)
                free(c->body);
            free(c);
            send_error(req, 500, "out of memory");
            return;
        }
        h2o_multithread_send_message(&gw->workers[i].ws_receiver, &c->super);
    }
    mg_admin_send_json(req, 202, json_pack("{s:s, s:I}", "route", route, "sessions", (json_int_t)sessions));
}
