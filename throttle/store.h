/*
 * throttle's shared mode: the same promise as the local limiter ("at most N admissions in any
 * window of length P"), kept for a whole fleet of gateway nodes in Redis. One Lua script decides
 * each request on the key's exact sliding log, atomically, on Redis's own clock (store_script.c).
 * Knows nothing of HTTP or h2o: the caller's event loop drives the connections through a small
 * adapter (mg_store_loop_t), as hiredis's own adapters do for libev or libuv.
 *
 * This is the second door of throttle/ (throttle.h is the first): it links hiredis, which the
 * limiter and the table do not need, so it is a library of its own (mg_throttle_store).
 *
 * Threads: an mg_store_t (the settings and the script) is immutable and shared by every worker.
 * An mg_store_client_t belongs to one event loop: every call on it, and every callback it makes,
 * is on that loop's thread. Only mg_store_client_stats may be called from any thread.
 */
#ifndef MG_THROTTLE_STORE_H
#define MG_THROTTLE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "throttle/throttle.h"

/* ---------------------------------------------------------------------------------------
 * Settings, shared by every worker.
 */
typedef struct mg_store_addr {
    char host[256]; /* an IP address or a name (a name is resolved, blocking, at each connect) */
    uint16_t port;
} mg_store_addr_t;

typedef struct mg_store_conf {
    const mg_store_addr_t *servers; /* one: a single Redis; several: seeds of a Redis Cluster */
    size_t num_servers;
    int cluster;            /* 1: Redis Cluster (slot map from CLUSTER SLOTS); forced by num_servers > 1 */
    const char *password;   /* NULL or "": no AUTH */
    const char *username;   /* NULL or "": AUTH password alone (Redis < 6, or the default user) */
    unsigned db;            /* SELECT db when not 0 (a single Redis only: Cluster has db 0 only) */
    uint64_t timeout_us;    /* per decision: past it, the decision is the caller's on_failure's */
    const char *key_prefix; /* before every key; no '{' or '}' (the hash tag is the store's) */
} mg_store_conf_t;

typedef struct mg_store mg_store_t;

/* Parses "redis://[[user]:password@]host[:port][/db]" (host may be "[v6 address]"; port 6379,
 * db 0 by default) into `addr` and, when the URL carries them, `*password`/`*username`/`*db`
 * (pointers into a copy the caller frees with free(*alloc); NULL when absent). 0, or -1 with a
 * message for the user in `*err` (static text). */
int mg_store_parse_url(const char *url, mg_store_addr_t *addr, char **alloc, const char **password, const char **username,
                       unsigned *db, const char **err);

/* A store for `conf` (copied: the caller may free it). NULL with `*err` (static text) when a
 * setting is out of range: no server, a port of 0, a key prefix with '{' or '}', a timeout of 0,
 * a db other than 0 in Cluster mode; or out of memory. */
mg_store_t *mg_store_new(const mg_store_conf_t *conf, const char **err);
/* Every client made from it must have been freed. */
void mg_store_free(mg_store_t *store);
/* 1 when a client of `a` may serve `b` without reconnecting: the same servers, mode, password,
 * username and db (the timeout and the key prefix may differ: see mg_store_client_retarget). */
int mg_store_same_servers(const mg_store_t *a, const mg_store_t *b);

/* ---------------------------------------------------------------------------------------
 * The loop adapter: what the caller's event loop does for a client. hiredis's async context
 * calls add/del read/write (idempotent) as it needs readiness; the store adds one timer per
 * client (hiredis 0.14 has none). All calls are made on the loop's thread.
 */
typedef struct mg_store_io mg_store_io_t;

/* The loop reports readiness of a watched descriptor: readable and/or writable, as asked. May
 * detach (io_detach) the very descriptor it reports on before it returns. */
void mg_store_io_ready(mg_store_io_t *io, int readable, int writable);

typedef struct mg_store_loop {
    void *data; /* the caller's loop, passed to io_attach and timer_new */
    /* Watch `fd` (a connected or connecting TCP socket, non-blocking) and report to `io`. Returns
     * the watch, NULL when out of memory. Nothing is watched until add_read/add_write. */
    void *(*io_attach)(void *data, int fd, mg_store_io_t *io);
    void (*add_read)(void *watch);
    void (*del_read)(void *watch);
    void (*add_write)(void *watch); /* may report writable once per call, like h2o_socket_notify_write */
    void (*del_write)(void *watch);
    /* Stop watching, release the watch and close the descriptor (it was handed over at attach). */
    void (*io_detach)(void *watch);
    /* One timer: timer_set arms it to call `cb(arg)` once after `delay_us` (replacing any pending
     * setting; rounding up to the loop's resolution is fine), timer_stop disarms it. */
    void *(*timer_new)(void *data, void (*cb)(void *arg), void *arg);
    void (*timer_set)(void *timer, uint64_t delay_us);
    void (*timer_stop)(void *timer);
    void (*timer_free)(void *timer);
} mg_store_loop_t;

/* ---------------------------------------------------------------------------------------
 * A client: one worker's connections (one per Redis node) on one loop.
 */
typedef struct mg_store_client mg_store_client_t;
typedef struct mg_store_call mg_store_call_t;

/* Why a decision was not Redis's. */
typedef enum mg_store_failure {
    MG_STORE_OK = 0,
    MG_STORE_DOWN,    /* no usable connection to the key's node (connecting, refused, reset, free) */
    MG_STORE_TIMEOUT, /* no answer within the timeout */
    MG_STORE_REFUSED, /* Redis answered with an error (OOM, LOADING, CLUSTERDOWN, too many redirects, ...) */
} mg_store_failure_t;

typedef struct mg_store_result {
    mg_decision_t decision;     /* at_us: Redis's TIME (microseconds since 1970) when shared */
    mg_store_failure_t failure; /* MG_STORE_OK: Redis decided; else on_failure did, and why */
    uint64_t latency_us;        /* from mg_store_decide to this answer */
} mg_store_result_t;

/* The caller's policy when Redis cannot decide: fill `*d` (limit, remaining, reset, retry_after
 * as the local limiter does) and return 1 to admit, 0 to reject. `arg` is the client's, `call_arg`
 * the decision's. Called on the loop's thread, also from inside mg_store_decide. It must not
 * free the client. mg_store_fallback_local is the "local" policy. */
typedef int (*mg_store_on_failure_t)(void *arg, void *call_arg, mg_quota_t quota, mg_store_failure_t why, mg_decision_t *d);

/* A decision's answer (exactly once per pending decision, unless cancelled). It may start new
 * decisions; it must not free the client. */
typedef void (*mg_store_done_t)(void *call_arg, const mg_store_result_t *r);

typedef struct mg_store_client_conf {
    const mg_store_loop_t *loop; /* kept by pointer: must outlive the client */
    mg_store_on_failure_t on_failure;
    /* optional: a connection changed state ("connected", "down: <reason>", "slow", ...), for the
     * log; `node` is "host:port". Called on transitions only, never per decision. */
    void (*on_event)(void *arg, const char *node, const char *event);
    void *arg;
} mg_store_client_conf_t;

/* A client of `store` on `conf->loop`; it connects at once (asynchronously). NULL when out of
 * memory. `store` must outlive the client (or be replaced by mg_store_client_retarget). */
mg_store_client_t *mg_store_client_new(mg_store_t *store, const mg_store_client_conf_t *conf);

/* Closes every connection. Decisions still pending are answered first (on_failure,
 * MG_STORE_DOWN), so nothing waits forever; a decision a done callback starts meanwhile is
 * answered at once the same way (MG_STORE_ANSWERED). Not from inside one of the client's
 * callbacks. */
void mg_store_client_free(mg_store_client_t *c);

/* Serve `store` from now on, keeping the connections: only if mg_store_same_servers(current,
 * store) (then 0), else -1 and nothing changes. Pending decisions keep their timeout and key. */
int mg_store_client_retarget(mg_store_client_t *c, mg_store_t *store);

#define MG_STORE_PENDING 1  /* mg_store_decide: `done` will be called (or mg_store_cancel) */
#define MG_STORE_ANSWERED 0 /* mg_store_decide: `*now` holds the answer; no callback */

/*
 * Decides one request of the key key_prefix + "{" + tag + "}" + rest under `quota` (the tag,
 * escaped so that it holds no '}', is the Redis Cluster hash tag: keys of one tag live on one
 * node; `rest` is any bytes). The decision is sent on the key's node's connection with every
 * other decision of this loop turn (one write); its answer comes to `done(call_arg, r)`.
 * Returns MG_STORE_PENDING with `*call` set (valid until `done` runs or mg_store_cancel), or
 * MG_STORE_ANSWERED with `*now` filled when no connection can take it now (on_failure decided;
 * failure says why), or -1 when out of memory or the quota is out of range (nothing decided).
 */
int mg_store_decide(mg_store_client_t *c, const char *tag, size_t tag_len, const char *rest, size_t rest_len, mg_quota_t quota,
                    mg_store_done_t done, void *call_arg, mg_store_call_t **call, mg_store_result_t *now);

/* The decision's `done` will not be called (its request went away). Redis may still count it. */
void mg_store_cancel(mg_store_call_t *call);

/* Counters since the client was made; any thread (relaxed reads). */
typedef struct mg_store_stats {
    uint64_t decisions;      /* answered, by Redis or by on_failure */
    uint64_t shared;         /* answered by Redis */
    uint64_t fallback[4];    /* answered by on_failure, by mg_store_failure_t */
    uint64_t admitted;       /* of `shared` */
    uint64_t commands;       /* commands sent (decisions, redirects, handshakes, probes) */
    uint64_t flushes;        /* writes that sent commands: decisions per flush is the pipelining */
    uint64_t moved, ask;     /* Cluster redirections followed */
    uint64_t slot_maps;      /* Cluster slot maps (CLUSTER SLOTS) received and applied */
    uint64_t noscript;       /* decisions re-sent as EVAL after NOSCRIPT */
    uint64_t connects;       /* connections that completed their handshake */
    uint64_t disconnects;    /* connections lost or dropped */
    uint64_t latency_sum_us; /* of `shared` decisions */
    uint32_t nodes;          /* Redis nodes known */
    uint32_t nodes_up;       /* of which answering: shared mode while nodes_up == nodes */
} mg_store_stats_t;

void mg_store_client_stats(const mg_store_client_t *c, mg_store_stats_t *out);

/* 1 while every node this client knows answers (decisions go to Redis), 0 while some decisions
 * go to on_failure without asking. Any thread. */
int mg_store_client_shared(const mg_store_client_t *c);

/* ---------------------------------------------------------------------------------------
 * The "local" failure policy: the node's own exact limiter (the table `local`) with the quota
 * scaled to this node's share, N / nodes (rounded down) in the same window, so that `nodes`
 * gateways alone never admit more than N together. A share of 0 (N < nodes) admits nothing:
 * the request is rejected with Retry-After 1 s (the store is retried well within that).
 * Returns as mg_throttle_acquire does (1, 0, MG_THROTTLE_FULL, -1).
 */
mg_quota_t mg_store_node_quota(mg_quota_t quota, unsigned nodes);
int mg_store_fallback_local(mg_throttle_t *local, const char *key, size_t len, mg_quota_t quota, unsigned nodes, uint64_t gen,
                            size_t max_keys, uint64_t now_us, mg_decision_t *d);

#endif
