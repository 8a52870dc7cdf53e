/*
 * What gateway/websocket's files share, and only they: a session as the registry knows it,
 * the frames the gateway writes itself into a stream (out.c), the client's handshake and the
 * keep-alive rule both session kinds follow.
 */
#ifndef MG_GATEWAY_WEBSOCKET_INTERNAL_H
#define MG_GATEWAY_WEBSOCKET_INTERNAL_H

#include "gateway/websocket/websocket.h"
#include "gateway/websocket/frame.h"

/* ---------------------------------------------------------------------------------------
 * Sessions (sessions.c). A session belongs to the worker of its client connection and only that
 * worker touches it; the registry lets the admin thread list sessions and ask their worker to act.
 */
typedef struct mg_ws_session mg_ws_session_t;

/* What a session kind does when asked (on its worker). */
typedef struct mg_ws_session_ops {
    /* a text message for the client (malloc'ed, taken over); high: ahead of those waiting */
    void (*send)(mg_ws_session_t *s, char *msg, size_t len, int high);
    /* the close handshake with `code`, both ways */
    void (*close)(mg_ws_session_t *s, unsigned code, const char *reason);
    /* drops the connections now, no close frame */
    void (*abort)(mg_ws_session_t *s);
    /* finishes the work already received and the messages queued, then closes with 1000 */
    void (*drain)(mg_ws_session_t *s);
} mg_ws_session_ops_t;

struct mg_ws_session {
    uint64_t id;
    mg_worker_t *worker;
    const mg_ws_session_ops_t *ops;
    const char *route, *tenant, *peer; /* one allocation, fixed for the session's life */
    time_t since;
    atomic_uint_fast64_t queued; /* messages waiting (written by the worker, read by the admin thread) */
    mg_ws_session_t *hash_next;  /* the registry's (under its lock) */
    h2o_linklist_t worker_link;  /* in its worker's list */
};

/* Registers a session and gives it its id; 0, or -1 when out of memory. Its worker's thread. */
int mg_ws_session_register(mg_ws_session_t *s, mg_worker_t *w, const mg_ws_session_ops_t *ops, mg_str_t route, mg_str_t tenant,
                           mg_str_t peer);
void mg_ws_session_unregister(mg_ws_session_t *s);

/* ---------------------------------------------------------------------------------------
 * The session's credential (expiry.c)
 */
typedef struct mg_ws_expiry {
    mg_identity_t *identity; /* the upgrade's verified identity (one reference), or NULL */
    int enforce;             /* the route needs a credential: its expiry ends the session */
    mg_timer_t timer;        /* set for the token's exp, unless websocket.on_token_expiry: keep */
} mg_ws_expiry_t;

/* Keeps the identity of `r`'s credential (one more reference; none without one) for the session.
 * The struct starts zeroed. */
void mg_ws_expiry_keep(mg_ws_expiry_t *e, const mg_request_t *r);
/* Once the session is open: `cb` runs when its token expires (at once when it already has), unless
 * on_token_expiry: keep, the token has no exp, or the route needs no credential (auth: none). */
void mg_ws_expiry_arm(mg_ws_expiry_t *e, mg_worker_t *w, const mg_config_t *conf, void (*cb)(mg_timer_t *));
/* The session ends: the timer stops and the identity is released (any time, armed or not). */
void mg_ws_expiry_stop(mg_ws_expiry_t *e);

/* ---------------------------------------------------------------------------------------
 * Frames the gateway writes itself into a stream (out.c): control frames at any frame boundary,
 * messages between messages, high-priority messages ahead of waiting ones.
 */
typedef struct mg_ws_frame_buf mg_ws_frame_buf_t;

typedef struct mg_ws_out {
    mg_ws_frame_buf_t *ctl, *data; /* waiting */
    mg_ws_frame_buf_t *inflight;   /* taken for the write in progress */
    size_t queued;                 /* messages waiting */
} mg_ws_out_t;

/* A whole frame (FIN set); masked with `mask` unless NULL. NULL when out of memory. */
mg_ws_frame_buf_t *mg_ws_frame_new(unsigned opcode, const void *payload, size_t len, const uint8_t *mask);
/* Queues a frame (NULL is ignored): a message (`message`) or a control frame; `front`: ahead of
 * the waiting ones of its kind. */
void mg_ws_out_push(mg_ws_out_t *o, mg_ws_frame_buf_t *f, int message, int front);
/* Moves frames that may go now into bufs (control frames, then messages when `messages_ok`,
 * about 64 KiB of them); they stay alive until mg_ws_out_written. Returns how many. */
size_t mg_ws_out_take(mg_ws_out_t *o, h2o_iovec_t *bufs, size_t max, int messages_ok);
void mg_ws_out_written(mg_ws_out_t *o);
void mg_ws_out_drop_messages(mg_ws_out_t *o);
void mg_ws_out_dispose(mg_ws_out_t *o);

/* ---------------------------------------------------------------------------------------
 * Both kinds of session (handshake.c, out.c)
 */

/* The client's handshake: GET, HTTP/1.1, a 24-character key and version 13 (RFC 6455 4.2.1).
 * NULL when valid, with the key; else why not (the request gets a 400). */
const char *mg_ws_check_handshake(h2o_req_t *req, h2o_iovec_t *key);

/* The keep-alive timer of a session: its first delay, then at each tick -1 when nothing came
 * from either side for idle_timeout (close 1001), 1 when the client is owed a ping (nothing from
 * it for ping_interval), else 0; `next_ms` is the delay to the next tick. */
uint64_t mg_ws_first_tick(const mg_websocket_conf_t *c);
int mg_ws_keepalive(const mg_websocket_conf_t *c, uint64_t now, uint64_t last_rx, uint64_t last_client_rx, uint64_t *next_ms);

#endif
