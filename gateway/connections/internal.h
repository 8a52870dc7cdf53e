/*
 * What gateway/connections' files share, and only they: the record of a connection and a
 * worker's list of them (conns.c), the process's counts and the accept loop (accept.c), the
 * connections per client address (clients.c).
 */
#ifndef MG_GATEWAY_CONNECTIONS_INTERNAL_H
#define MG_GATEWAY_CONNECTIONS_INTERNAL_H

#include "gateway/connections/connections.h"

/* ---------------------------------------------------------------------------------------
 * Connections per client address (clients.c): shared by the workers, one mutex per shard.
 */
typedef struct mg_clients mg_clients_t;
typedef struct mg_client mg_client_t;

mg_clients_t *mg_clients_new(void);
void mg_clients_free(mg_clients_t *t);
/* The key of a client address: 4 bytes for IPv4 (an IPv4-mapped IPv6 address included), 16 for
 * IPv6; returns the length, 0 for anything else. */
int mg_client_key(const struct sockaddr *sa, socklen_t len, uint8_t out[16]);
/* Counts one more connection of the client at `sa`: its entry (for mg_clients_release). NULL with
 * *refused = 1 when the address already has `cap` connections (0: no cap); NULL with *refused = 0
 * when it is not counted (an address of another family, no memory): the connection goes on. */
mg_client_t *mg_clients_acquire(mg_clients_t *t, const struct sockaddr *sa, socklen_t len, unsigned cap, int *refused);
/* One connection of the client fewer; its entry is freed with its last one. NULL is ignored. */
void mg_clients_release(mg_clients_t *t, mg_client_t *c);
/* The connections counted for the entry's address. */
unsigned mg_client_connections(mg_clients_t *t, mg_client_t *c);
/* How many addresses have a connection open. */
size_t mg_clients_size(mg_clients_t *t);

/* ---------------------------------------------------------------------------------------
 * The process's connections (accept.c). Counters are atomics shared by the workers.
 */
typedef struct mg_overload {
    atomic_uint_fast64_t open;       /* client connections open, all workers */
    atomic_uint_fast64_t reclaiming; /* idle ones shut down to make room, not closed yet */
    atomic_int overloaded;           /* 1 from 90% of max_connections until below 80% */
    atomic_uint paused;              /* workers whose listeners are out of the loop */
    atomic_uint_fast64_t buffered;   /* request body bytes held (max_buffered_request_bytes, bodies.c) */
    uint64_t nofile;                 /* RLIMIT_NOFILE (soft) in force */
    unsigned auto_max_connections;   /* max_connections: auto, for this limit */
    mg_clients_t *clients;
} mg_overload_t;

/* Raises the soft RLIMIT_NOFILE to the hard one (at most fs.nr_open); returns the soft limit in
 * force, with the limits found in *soft_before and *hard (UINT64_MAX: unlimited). */
uint64_t mg_nofile_raise(uint64_t *soft_before, uint64_t *hard);
/* max_connections in force for `conf`. */
unsigned mg_max_connections(const mg_overload_t *ov, const mg_config_t *conf);

/* ---------------------------------------------------------------------------------------
 * A worker's connections (conns.c, accept.c)
 */

/* Why a worker's listeners are out of its loop. */
typedef enum mg_pause {
    MG_PAUSE_NONE,
    MG_PAUSE_FULL,    /* max_connections reached and nothing idle to close: until below the low-water mark */
    MG_PAUSE_RECLAIM, /* idle connections were shut down to make room: until they have closed */
    MG_PAUSE_ERROR,   /* accept failed for want of descriptors or memory: 100 ms */
} mg_pause_t;

enum { MG_ACCEPT_EMFILE, MG_ACCEPT_ENFILE, MG_ACCEPT_ENOMEM, MG_ACCEPT_OTHER, MG_ACCEPT_ERRORS };

/* Counters of one worker (written by it only, summed by /metrics). */
typedef struct mg_conns_stats {
    mg_stat_t accepted;
    mg_stat_t refused_per_client; /* closed at once: max_connections_per_client */
    mg_stat_t refused_memory;     /* closed at once: no memory for the record */
    mg_stat_t reclaimed;          /* idle ones closed to make room */
    mg_stat_t header_timeouts;    /* closed by client_header_timeout */
    mg_stat_t pauses_full, pauses_error;
    mg_stat_t bodies_refused; /* 503 overloaded: max_buffered_request_bytes */
    mg_stat_t accept_errors[MG_ACCEPT_ERRORS];
} mg_conns_stats_t;

typedef struct mg_worker_conns {
    mg_worker_t *w;
    mg_overload_t *ov;
    /* mg_conn_t.link: connections with no request in progress and not upgraded, in the order
     * they became so (accepted, or their last request ended): the oldest idle first */
    h2o_linklist_t waiting;
    mg_timer_t sweep;  /* header deadlines and pressure, while `waiting` is not empty */
    mg_timer_t resume; /* a paused worker's next look */
    mg_pause_t paused;
    uint64_t last_error_log; /* h2o_now of the last accept-error line (one per 10 s) */
    mg_conns_stats_t stats;
} mg_worker_conns_t;

/*
 * The record: 72 bytes per connection. `link` is in owner->waiting while no request is in
 * progress (a connection between requests, or one that has sent none yet), unlinked while one is
 * and for good once upgraded to a WebSocket.
 */
struct mg_conn {
    h2o_linklist_t link;
    h2o_socket_t *sock;
    mg_worker_conns_t *owner;
    mg_client_t *client;              /* its address's count; NULL: not counted */
    uint64_t since;                   /* h2o_now ms: accepted, or its last request ended */
    uint64_t head_since;              /* a further HTTP/1 head: when its first bytes were seen (0: none yet) */
    uint32_t rate_second, rate_count; /* max_requests_per_connection_per_second (limits.c) */
    uint32_t scanned;                 /* input bytes searched for the end of a head */
    uint32_t requests;                /* requests it has started (limits.max_requests_per_connection, HTTP/1) */
    uint16_t active;                  /* requests in progress */
    uint8_t served : 1;               /* a request has reached the handler */
    uint8_t upgraded : 1;             /* a WebSocket now: never reclaimed */
    uint8_t reclaimed : 1;            /* shut down by the gateway, closing */
    uint8_t rate_closed : 1;          /* counted once in connections_rate_limited */
    uint8_t head_done : 1;            /* the input holds a whole head: a body is arriving */
};

/* Makes the record of a socket just accepted and hangs it on the socket's close hook, linked as
 * waiting. NULL when out of memory (the caller closes the socket). */
mg_conn_t *mg_conn_attach(mg_worker_conns_t *wc, h2o_socket_t *sock, mg_client_t *client);
/* How long a connection must have been idle to be reclaimed: at the cap, not accepted (or idle
 * since) this very loop turn, when h2o has not read what its client sent yet; above the
 * low-water mark, a second: a client between two requests is not cut for a margin. */
#define MG_RECLAIM_AT_CAP_MS 1
#define MG_RECLAIM_PRESSURE_MS 1000
/* Shuts down up to `max` of the worker's connections idle for `min_idle` ms at least, oldest
 * first (what counts as idle is said at the top of conns.c), so that h2o closes them through its
 * own path; returns how many. */
size_t mg_conns_reclaim(mg_worker_conns_t *wc, size_t max, uint64_t min_idle);
/* Looks at every waiting connection: closes those whose head is late (client_header_timeout,
 * shortened while overloaded), and reclaims idle ones while overloaded. Returns the delay to the
 * next look in ms (0: nothing waiting). */
uint64_t mg_conns_sweep(mg_worker_conns_t *wc, uint64_t now);
/* The head deadline in force: client_header_timeout, shortened to a quarter (not below 1 s)
 * while the process is overloaded. */
uint64_t mg_conns_header_timeout(const mg_limits_conf_t *l, int overloaded);

/* Between conns.c and accept.c. A connection closed (its record is being freed): the listeners
 * of a paused worker may take more. */
void mg__conns_closed(mg_worker_conns_t *wc, mg_conn_t *c);
/* Under pressure: reclaims idle connections until the process is back at its low-water mark. */
void mg__conns_relieve(mg_worker_conns_t *wc);
/* 1 when the worker has a connection idle for `min_idle` ms it could reclaim. */
int mg__conns_has_idle(mg_worker_conns_t *wc, uint64_t min_idle);
/* The listeners' part of a worker's init and stop. */
void mg__conns_accept_init(mg_worker_conns_t *wc);
void mg__conns_accept_stop(mg_worker_conns_t *wc);

#endif
