/*
 * The admin API's WebSocket endpoints (admin thread): GET /sessions lists the sessions of the
 * registry (gateway/websocket/), POST /sessions/{id}/{send,close,abort,drain} gives one of them
 * an order, POST /routes/{name}/broadcast sends a message to every session of a route. The
 * orders are carried out on the sessions' workers; these answer 202 once they are posted.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/admin/internal.h"
#include "gateway/websocket/websocket.h"

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

typedef struct listing {
    const char *route, *tenant; /* NULL: any */
    json_t *list;
} listing_t;

static void list_session(void *arg, const mg_ws_session_info_t *s)
{
    listing_t *l = arg;
    char since[32];
    struct tm tm;
    if ((l->route != NULL && strcmp(l->route, s->route) != 0) || (l->tenant != NULL && strcmp(l->tenant, s->tenant) != 0))
        return;
    gmtime_r(&s->since, &tm);
    strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_array_append_new(l->list, json_pack("{s:I, s:s, s:s?, s:s, s:s, s:I}", "id", (json_int_t)s->id, "route", s->route,
                                             "tenant", s->tenant[0] != '\0' ? s->tenant : NULL, "peer", s->peer, "since", since,
                                             "queued", (json_int_t)s->queued));
}

void mg_admin_sessions(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    listing_t l = {query_param(req, "route"), query_param(req, "tenant"), json_array()};
    mg_ws_sessions_foreach(gw->sessions, list_session, &l);
    mg_admin_send_json(req, 200, json_pack("{s:o}", "sessions", l.list));
}

/* The n-th segment (0-based) of the normalized path, as a string in the pool. */
const char *mg__admin_segment(h2o_req_t *req, int n)
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

/* A message for clients goes out as one text frame: its size and its UTF-8 are checked here, so
 * that no client closes its session on it (RFC 6455 8.1: 1007). 0, or -1 after answering. */
static int check_message(h2o_req_t *req, const mg_config_t *conf)
{
    if (conf->websocket.max_message_size != 0 && req->entity.len > conf->websocket.max_message_size) {
        mg_admin_send_error(req, 413, "the message exceeds websocket.max_message_size");
        return -1;
    }
    json_t *utf8 = json_stringn(req->entity.base != NULL ? req->entity.base : "", req->entity.len);
    if (utf8 == NULL) {
        mg_admin_send_error(req, 400, "the message is not valid UTF-8 (it goes out as a text frame)");
        return -1;
    }
    json_decref(utf8);
    return 0;
}

/* POST /sessions/{id}/{send,close,abort,drain} */
void mg_admin_session_action(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    static const struct {
        const char *name;
        mg_ws_order_t order;
    } actions[] = {
        {"send", MG_WS_ORDER_SEND}, {"close", MG_WS_ORDER_CLOSE}, {"abort", MG_WS_ORDER_ABORT}, {"drain", MG_WS_ORDER_DRAIN}};
    const char *action = mg__admin_segment(req, 2), *priority;
    uint64_t id;
    size_t i = 0;
    while (i < 4 && strcmp(actions[i].name, action) != 0)
        i++;
    if (i == 4) {
        mg_admin_send_error(req, 404, "unknown action (send, close, abort, drain)");
        return;
    }
    if (parse_id(mg__admin_segment(req, 1), &id) != 0) {
        mg_admin_send_error(req, 404, "no such session");
        return;
    }
    if (actions[i].order == MG_WS_ORDER_SEND && check_message(req, conf) != 0)
        return;
    priority = query_param(req, "priority");
    switch (mg_ws_session_order(gw, id, actions[i].order, req->entity.base, req->entity.len,
                                priority != NULL && strcmp(priority, "high") == 0)) {
    case 0:
        mg_admin_send_json(req, 202, json_pack("{s:I, s:s}", "id", (json_int_t)id, "action", action));
        break;
    case -1:
        mg_admin_send_error(req, 404, "no such session");
        break;
    default:
        mg_admin_send_error(req, 500, "out of memory");
        break;
    }
}

/* POST /routes/{name}/broadcast: one order per worker, which sends to its sessions of the route. */
void mg_admin_broadcast(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    const char *route = mg__admin_segment(req, 1);
    if (mg_routes_find(conf->routes, route) == NULL) {
        mg_admin_send_error(req, 404, "no such route");
        return;
    }
    if (check_message(req, conf) != 0)
        return;
    long sessions = mg_ws_broadcast(gw, route, req->entity.base, req->entity.len);
    if (sessions < 0)
        mg_admin_send_error(req, 500, "out of memory");
    else
        mg_admin_send_json(req, 202, json_pack("{s:s, s:I}", "route", route, "sessions", (json_int_t)sessions));
}
