/*
 * The WebSocket tunnel's own state, shared by its two files: tunnel.c (the relay, once open) and
 * tunnel_open.c (reaching the backend and the 101). Private to them.
 */
#ifndef MG_GATEWAY_WEBSOCKET_TUNNEL_H
#define MG_GATEWAY_WEBSOCKET_TUNNEL_H

#include "gateway/websocket/internal.h"
#include "gateway/backend/backend.h"

/* Life of a tunnel (tunnel.c has the story). */
enum { MG_TUNNEL_CONNECTING, MG_TUNNEL_UPGRADING, MG_TUNNEL_OPEN, MG_TUNNEL_CLOSING };

/* One direction: source -> destination. */
typedef struct dir {
    int from_client;
    mg_ws_reader_t rd;
    uint64_t payload_left; /* of the frame at the front of the source's input */
    int skip_payload;      /* ... which is dropped rather than passed */
    int busy;              /* a write is in flight on the destination */
    size_t writing;        /* bytes of the source's input it carries */
    mg_ws_out_t out;       /* frames of the gateway's own for this direction's stream */
    int eof;               /* the source has closed its connection */
    int answered;          /* MG_TUNNEL_CLOSING: the source sent its close frame */
    int broken;            /* the source broke the framing: its bytes are dropped unread */
} dir_t;

typedef struct mg_ws_tunnel {
    mg_ws_session_t session;
    mg_worker_t *w;
    mg_config_t *conf; /* held for the tunnel's life */
    mg_request_t *r;   /* until the 101 is written */
    mg_backend_conf_t *backend;
    h2o_socket_t *client, *server;
    mg_backend_connect_t *connecting; /* MG_TUNNEL_CONNECTING, until the connection to the server is open */
    char *head;                       /* the header block for the backend (after the request line) */
    char *target;                     /* path and query, as sent */
    char key[64];                     /* Sec-WebSocket-Key */
    size_t first_server;
    unsigned attempt;
    int state, registered, drain;
    dir_t up, down; /* up: client -> backend */
    mg_timer_t timer;
    uint64_t last_rx, last_client_rx; /* h2o_now() */
    uint64_t ping_seq;
    mg_ws_expiry_t expiry; /* the upgrade's credential, kept until its token expires */
    /* for the session registry, which the tunnel joins when it opens (the request is gone then) */
    char route[128], tenant[MG_TENANT_MAX_LEN + 1], peer[64];
} mg_ws_tunnel_t;

/* Ends the tunnel at once: closes both connections, leaves the registry, frees it (tunnel.c). */
void mg__ws_tunnel_free(mg_ws_tunnel_t *t);
/* h2o_http1_upgrade's callback (its 101 is written): the tunnel takes the client's socket, joins
 * the registry and starts relaying (tunnel.c). */
void mg__ws_tunnel_on_upgraded(void *arg, h2o_socket_t *sock, size_t reqsize);

#endif
