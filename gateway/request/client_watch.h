/*
 * The client watch (client_watch.c): notices an HTTP/1 client leaving while its request waits,
 * which h2o 2.2.5 does not (it stops reading a connection while a request is in progress).
 */
#ifndef MG_GATEWAY_CLIENT_WATCH_H
#define MG_GATEWAY_CLIENT_WATCH_H

#include "gateway/internal.h"

typedef struct mg_client_watch {
    mg_timer_t arm;
    h2o_socket_t *sock; /* on a dup of the client's fd, once armed */
    h2o_req_t *req;
    void (*on_gone)(struct mg_client_watch *cw);
} mg_client_watch_t;

/* Starts watching (after a short delay, HTTP/1 only); `on_gone` runs at most once, on the loop. */
void mg_client_watch_start(mg_client_watch_t *cw, mg_timers_t *timers, h2o_req_t *req, void (*on_gone)(mg_client_watch_t *cw));
/* Ends the watch; safe to call more than once. */
void mg_client_watch_stop(mg_client_watch_t *cw);
/* Drops a client's connection under h2o (shutdown of its socket): whatever h2o is writing
 * fails and h2o frees the request (HTTP/2: every stream of the connection). -1 when the
 * connection has no socket. */
int mg_client_abort(h2o_req_t *req);

#endif
