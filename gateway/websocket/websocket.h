/*
 * gateway/websocket: WebSocket sessions. The tunnel (tunnel.c, tunnel_open.c) carries frames
 * between a client and a WebSocket backend, checking and adding to them; the bridge (bridge.c,
 * bridge_messages.c) ends the WebSocket at the gateway and makes each message a call to an HTTP
 * backend; both are sessions of the registry (sessions.c), through which the admin API lists
 * sessions and gives them orders. Framing (frame.h) is pure and used by tools and fuzzing too.
 * What the rest of the gateway may call is here.
 */
#ifndef MG_GATEWAY_WEBSOCKET_H
#define MG_GATEWAY_WEBSOCKET_H

#include <time.h>
#include "gateway/internal.h"

/* ---------------------------------------------------------------------------------------
 * Upgrades (the request handler)
 */

/* Tunnels an upgrade request matched by a `forward` route to a WebSocket backend. Always ends the
 * request: a 101 and the session, or an error response. */
void mg_ws_tunnel_start(mg_request_t *r);
/* The upgrade request is disposed before its tunnel got the client's socket: the client left. */
void mg_ws_tunnel_cancel(mg_request_t *r);
/* Terminates an upgrade request matched by a `bridge` route at the gateway: each text message
 * becomes one request to the route's backend. `ctx` is the request's context after the route's
 * actions (variables for bridge.path). Always ends the request: a 101 and the session, or an
 * error response. */
void mg_ws_bridge_start(mg_request_t *r, const mg_ctx_t *ctx);

/* ---------------------------------------------------------------------------------------
 * A worker's sessions (worker thread)
 */

/* Its session list and its receiver of admin orders (after its queue exists). 0, or -1 when out
 * of memory. */
int mg_ws_worker_init(mg_worker_t *w);
/* Shutdown: starts the close handshake (1001) of every session of the worker. */
void mg_ws_worker_shutdown(mg_worker_t *w);
/* Sessions open on the worker (a worker stops once none is left). */
size_t mg_ws_worker_sessions(const mg_worker_t *w);

/* ---------------------------------------------------------------------------------------
 * The session registry (mg_gateway_t.sessions): every session by id, for the admin API. Any
 * thread; one mutex, taken when a session starts or ends and by the calls below.
 */
typedef struct mg_ws_registry mg_ws_registry_t;

/* NULL when out of memory. It lives as long as the process. */
mg_ws_registry_t *mg_ws_registry_new(void);

/* What the admin API sees of a session: fixed for the session's life, but `queued`. */
typedef struct mg_ws_session_info {
    uint64_t id;
    const char *route, *tenant, *peer; /* tenant "": none */
    time_t since;
    uint64_t queued; /* messages waiting for the client (or, bridged, for their turn) */
} mg_ws_session_info_t;

/* Calls `cb` for every session, under the registry's lock: `cb` must not call into the registry. */
void mg_ws_sessions_foreach(mg_ws_registry_t *reg, void (*cb)(void *arg, const mg_ws_session_info_t *s), void *arg);

/* What the admin API may ask of a session; it is carried out on the session's worker. */
typedef enum mg_ws_order {
    MG_WS_ORDER_SEND,  /* a text message for the client */
    MG_WS_ORDER_CLOSE, /* the close handshake, 1000 */
    MG_WS_ORDER_ABORT, /* the connections dropped, no close frame */
    MG_WS_ORDER_DRAIN, /* what was received finished, then closed with 1000 */
} mg_ws_order_t;

/* Posts `order` for session `id` to its worker (`body`, copied, for MG_WS_ORDER_SEND; `high`:
 * ahead of the messages waiting). 0; -1 when there is no such session (it may end before the order
 * comes: then the order is dropped); -2 when out of memory. */
int mg_ws_session_order(mg_gateway_t *gw, uint64_t id, mg_ws_order_t order, const char *body, size_t len, int high);
/* Sends `body` (copied) to every session of `route`: one message to each worker, which sends it to
 * its sessions of the route. The number of sessions of the route when called, or -1 when out of
 * memory (then some workers may have it). */
long mg_ws_broadcast(mg_gateway_t *gw, const char *route, const char *body, size_t len);

#endif
