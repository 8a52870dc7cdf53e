/*
 * The WebSocket bridge's own state, shared by its two files: bridge.c (the session: frames in
 * and out, its life) and bridge_messages.c (each message made a call to the backend, in turn,
 * and its answer). Private to them.
 */
#ifndef MG_GATEWAY_WEBSOCKET_BRIDGE_H
#define MG_GATEWAY_WEBSOCKET_BRIDGE_H

#include <jansson.h>
#include "gateway/websocket/internal.h"
#include "gateway/request/request.h"
#include "gateway/quota/quota.h"
#include "gateway/backend/backend.h"

/* Life of a session (bridge.c has the story). */
enum { MG_BRIDGE_UPGRADING, MG_BRIDGE_OPEN, MG_BRIDGE_CLOSING };

typedef struct bridge bridge_t;

/* One message, from arrival until its answer is queued (or it is withdrawn). */
typedef struct message {
    mg_turn_t turn;
    bridge_t *b; /* NULL once the session is gone and only the scheduler's callback is awaited */
    h2o_linklist_t link;
    h2o_mem_pool_t pool; /* the expanded path, the body, the request id line */
    json_t *id;          /* the message's id, or NULL */
    int status;          /* != 0: the gateway answers (400, 429) with `error` */
    const char *error;
    uint64_t retry_after_us;
    char method[16];
    mg_str_t path, query;
    const char *body;
    size_t body_len;
    mg_backend_header_t *headers; /* X-Request-Id of this message, then the session's headers */
    mg_call_t *call;              /* while at the backend */
    mg_quota_ask_t ask;           /* the tenant quota's decision, while it waits for Redis */
    int quota_wait;               /* ... it does: this message and those after it are not submitted yet */
    int submitted;                /* its turn was asked for (mg_turn_submit) */
    mg_sched_priority_t priority;
} message_t;

struct bridge {
    mg_ws_session_t session;
    mg_worker_t *w;
    mg_config_t *conf; /* held for the session's life */
    const mg_route_t *route;
    mg_backend_conf_t *backend;
    h2o_socket_t *sock;
    int state, registered, drain, eof, peer_closed, busy, reading;
    int overflow; /* the client let max_queued_messages answers pile up: close it (1008) */
    /* the upgrade request, for every message: its routing context and backend headers */
    mg_ctx_t ctx;
    char *arena;
    mg_backend_header_t *headers; /* in `header_arena`: names, values and the array */
    size_t num_headers;
    char *header_arena;
    char request_id[72];
    char key[32]; /* the session's ordering key in the scheduler */
    uint64_t seq;
    /* reading */
    mg_ws_reader_t rd;
    uint64_t payload_left, payload_off;
    uint8_t mask[4];
    int fin, oversized;
    h2o_buffer_t *msg; /* the message being read, unmasked */
    /* messages waiting for their turn or at the backend */
    h2o_linklist_t messages;
    size_t num_messages;
    size_t quota_waits; /* messages whose quota decision waits for Redis (tenants.store) */
    /* writing */
    mg_ws_out_t out;
    mg_timer_t timer;
    uint64_t last_rx, ping_seq;
    mg_ws_expiry_t expiry; /* the upgrade's credential: its claims are ctx.claims */
};

/* bridge.c. After every event: reads what is buffered, writes what is queued, starts the close a
 * drain waits for, and ends the session when it is over. The session must not be touched
 * afterwards. */
void mg__bridge_after_event(bridge_t *b);
/* Starts the close handshake with `code` (once): the messages are withdrawn, the answers not
 * written yet dropped. */
void mg__bridge_start_close(bridge_t *b, unsigned code, const char *reason);

/* bridge_messages.c. A whole message from the client: parsed, checked, counted against the quota,
 * and given its turn. `raw` is the session's message buffer; `refused` says why a message is bad
 * before it is read (binary, too big), else NULL. */
void mg__bridge_on_message(bridge_t *b, const char *refused, mg_str_t raw);
/* Withdraws every message of the session: waiting ones leave the scheduler (or are orphaned until
 * their callback comes), calls at the backend are stopped. */
void mg__bridge_end_messages(bridge_t *b);
/* Queues a text message for the client; a client that lets too many pile up is closed (1008). */
void mg__bridge_send_text(bridge_t *b, const char *text, size_t len, int high);
/* The session's `queued` figure for the admin API: answers waiting and messages in progress. */
void mg__bridge_update_queued(bridge_t *b);

#endif
