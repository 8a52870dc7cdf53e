/*
 * gateway/connections: the process and its client connections. One small record per connection
 * (conns.c), the listeners and their accept loop with the connection caps and the overload state
 * (accept.c), the count of connections per client address (clients.c), and the budget of request
 * bodies held at once (bodies.c). What the rest of the gateway calls is here; the rest is internal.h's.
 *
 * The record hangs on the client socket's close hook (h2o_conn_t has no room for a caller's data;
 * h2o uses h2o_socket_t.on_close only for its client-side socket pools), made at accept and freed
 * when h2o closes the socket, whatever happened to the connection in between (a TLS handshake, an
 * h2c or WebSocket upgrade, an error): it lives exactly as long as the descriptor it counts.
 */
#ifndef MG_GATEWAY_CONNECTIONS_H
#define MG_GATEWAY_CONNECTIONS_H

#include <stdio.h>
#include "gateway/internal.h"

/* ---------------------------------------------------------------------------------------
 * The process's listeners and connections (accept.c, main thread)
 */

/* A listening socket (non-blocking, close-on-exec) on `addr`, or -1 with errno. */
int mg_listen_socket(const struct sockaddr_storage *addr, socklen_t len, int backlog, int reuseport);
/* At start (main thread, before anything opens many descriptors): raises the soft RLIMIT_NOFILE
 * to the hard limit, logs both, resolves `max_connections: auto` and makes the address table.
 * 0, or -1 after printing why. */
int mg_overload_init(mg_gateway_t *gw);

/* ---------------------------------------------------------------------------------------
 * A worker's connections (conns.c, accept.c)
 */
/* The worker's connection state and timers (on the worker thread, before its listeners start). */
void mg_conns_worker_init(mg_worker_t *w);
/* Stopping: timers cancelled, and every idle connection closed (HTTP/1 between requests, HTTP/2
 * with no stream open); those with a request in progress close after it (h2o's shutdown). */
void mg_conns_worker_stop(mg_worker_t *w);
/* The listeners' read callback: accepts while there is room (accept.c). */
void mg_conns_on_accept(h2o_socket_t *listener, const char *err);

typedef struct mg_conn mg_conn_t;

/* The record of a connection accepted by a worker; NULL for any other socket. */
mg_conn_t *mg_conn_of(h2o_conn_t *conn);
/* A request of the connection reached the handler / was disposed (`upgraded`: it handed the
 * connection over to a WebSocket). NULL is ignored. */
void mg_conn_request_start(mg_conn_t *c);
void mg_conn_request_end(mg_conn_t *c, int upgraded);
/* The requests the connection has started, this one included (0 for NULL). */
uint32_t mg_conn_requests(const mg_conn_t *c);
/* Counts one request of `conn` in its one-second window (limits.max_requests_per_connection_per_second,
 * kept on the connection's record). 0 while within `cap` (also for a connection without a
 * record), 1 for the connection's first request over it, 2 for the later ones. */
int mg_conn_rate_count(h2o_conn_t *conn, uint64_t now_ms, unsigned cap);

/* ---------------------------------------------------------------------------------------
 * Request bodies (bodies.c) and figures (accept.c)
 */
/* h2o's on_request_body_start (deps/h2o patch 0005): takes the body's bytes from
 * limits.max_buffered_request_bytes until the request is disposed, or refuses the request (-1: h2o
 * answers 503) when they do not fit (bodies.c). */
int mg_bodies_on_start(h2o_req_t *req, size_t content_length);

/* GET /metrics: the connection figures (accept.c). */
void mg_conns_put_metrics(FILE *out, mg_gateway_t *gw, const mg_config_t *conf);

#endif
