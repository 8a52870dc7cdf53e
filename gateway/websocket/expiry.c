/*
 * A WebSocket session's credential: the upgrade request's verified identity, kept for the
 * session's life (a bridge's messages use its claims in their templates), and the time its token
 * expires. A session outlives the request that authenticated it, so the gateway ends it then:
 * close 1008 (policy violation), unless websocket.on_token_expiry: keep.
 */
#include "gateway/websocket/internal.h"

void mg_ws_expiry_keep(mg_ws_expiry_t *e, const mg_request_t *r)
{
    const mg_route_t *from;
    e->identity = mg_identity_retain(r->auth.identity);
    e->enforce = mg_route_auth(r->route, &from) != MG_ROUTE_AUTH_NONE;
}

void mg_ws_expiry_arm(mg_ws_expiry_t *e, mg_worker_t *w, const mg_config_t *conf, void (*cb)(mg_timer_t *))
{
    const mg_identity_t *id = e->identity;
    mg_timer_init(&e->timer, &w->timers, cb);
    if (id == NULL || id->exp == INT64_MAX || !e->enforce || conf->websocket.keep_expired_sessions)
        return;
    int64_t left_ms = id->exp < INT64_MAX / 1000 ? id->exp * 1000 - mg_realtime_ms() : INT64_MAX;
    mg_timer_set(&e->timer, left_ms > 0 ? (uint64_t)left_ms : 0);
}

void mg_ws_expiry_stop(mg_ws_expiry_t *e)
{
    if (e->timer.timers != NULL)
        mg_timer_cancel(&e->timer);
    mg_identity_release(e->identity);
    e->identity = NULL;
}
