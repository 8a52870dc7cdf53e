/*
 * What the builtin client's files share, and only they: client_h1.c (exchanges, connections,
 * the response, the bare connection of the tunnel) and client_h1_pool.c (the pools of idle
 * connections and the servers' addresses). See client_h1.c for how it works.
 */
#ifndef MG_GATEWAY_BACKEND_CLIENT_H1_H
#define MG_GATEWAY_BACKEND_CLIENT_H1_H

#include "gateway/backend/h1.h"
#include "gateway/backend/internal.h"

#define NUM_BUCKETS 64

typedef struct h1_client h1_client_t;
typedef struct h1_pool h1_pool_t;
typedef struct h1_exchange h1_exchange_t;

typedef struct h1_conn {
    h1_pool_t *pool;
    h2o_socket_t *sock;
    h2o_linklist_t idle_link; /* in pool->idle while idle */
    uint64_t idle_since;
    h1_exchange_t *x; /* the exchange on it, NULL while idle or connecting for nobody */
} h1_conn_t;

struct h1_pool {
    h1_client_t *hc;
    h1_pool_t *next; /* in its bucket */
    char *url;
    h2o_iovec_t prefix; /* the url's path, "" for none */
    char host[256], port[8];
    int is_name;
    struct sockaddr_storage *addrs;
    size_t num_addrs, next_addr;
    uint64_t resolved_at;
    h2o_hostinfo_getaddr_req_t *getaddr;
    h2o_linklist_t waiting; /* exchanges waiting for the addresses */
    h2o_linklist_t idle;    /* most recently used first */
    size_t num_idle;
    mg_timer_t expiry;
    /* the backend's settings, as of the latest exchange */
    uint64_t keepalive_ms, dns_refresh_ms;
    size_t max_idle;
};

struct h1_client {
    mg_worker_t *w;
    h1_pool_t *buckets[NUM_BUCKETS];
};

struct h1_exchange {
    mg_exchange_t super;
    h1_pool_t *pool;
    h1_conn_t *conn;
    const mg_exchange_callbacks_t *cbs;
    void *arg;
    h2o_mem_pool_t *mem;
    mg_str_t method;
    h2o_iovec_t bufs[2];
    size_t num_bufs;
    uint64_t connect_timeout_ms;
    mg_timer_t timer;         /* connect_timeout; at 0 to report a failure from outside start */
    h2o_linklist_t wait_link; /* in pool->waiting */
    mg_h1_body_t body;
    size_t pending; /* decoded body bytes at the start of the connection's input, not taken yet */
    size_t tries;   /* addresses tried for this connect */
    mg_attempt_result_t late_result;
    const char *late_detail;
    unsigned head_request : 1, head_done : 1, body_end : 1, write_done : 1, paused : 1, eof : 1, reused : 1, retried : 1,
        got_bytes : 1, keep_alive : 1, raw : 1;
};

/* client_h1.c */
/* Ends the exchange with a failure; its connection is closed. */
void mg__h1_fail(h1_exchange_t *x, mg_attempt_result_t result, const char *detail);
/* Connects to the pool's next address (its addresses are known). */
void mg__h1_connect_next(h1_exchange_t *x);

/* client_h1_pool.c */
/* Closes a connection (idle or not) and frees it. */
void mg__h1_conn_close(h1_conn_t *conn);
/* A connection whose exchange ended cleanly goes back to its pool (or is closed). */
void mg__h1_pool_checkin(h1_pool_t *pool, h1_conn_t *conn);
/* The most recently used idle connection still within keepalive_timeout, or NULL. */
h1_conn_t *mg__h1_pool_checkout(h1_pool_t *pool);
/* The worker's pool for `server`, made on first use; NULL when out of memory. */
h1_pool_t *mg__h1_pool_get(h1_client_t *hc, const mg_server_conf_t *server);
void mg__h1_pool_free(h1_pool_t *pool);
/* Looks the pool's name up (once at a time); the waiting exchanges go on from the answer. */
void mg__h1_pool_resolve(h1_pool_t *pool);

#endif
