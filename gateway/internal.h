/*
 * gateway internals: the worker, the request and the timer, which every room of the gateway
 * shares (not a public door: other modules use gateway.h). process.h has the process's own, and
 * each room a door (request/request.h, quota/quota.h, auth/auth.h, config/config.h,
 * backend/backend.h, websocket/websocket.h, admin/admin.h, connections/connections.h,
 * route_tool/route_tool.h). Everything here runs on a worker thread unless said otherwise.
 */
#ifndef MG_GATEWAY_INTERNAL_H
#define MG_GATEWAY_INTERNAL_H

#include <pthread.h>
#include <time.h>
#include <h2o.h>
#include "gateway/gateway.h"
#include "throttle/throttle.h"

/* ---------------------------------------------------------------------------------------
 * Deadline timers (timer.c): any delay, on a worker's loop, at millisecond precision.
 */
#define MG_TIMER_BUCKETS 14

typedef struct mg_timers {
    h2o_loop_t *loop;
    h2o_timeout_t buckets[MG_TIMER_BUCKETS];
} mg_timers_t;

typedef struct mg_timer {
    h2o_timeout_entry_t entry;
    mg_timers_t *timers;
    uint64_t deadline; /* h2o_now() milliseconds */
    void (*cb)(struct mg_timer *timer);
} mg_timer_t;

void mg_timers_init(mg_timers_t *timers, h2o_loop_t *loop);
/* All timers must have been cancelled or have fired. */
void mg_timers_dispose(mg_timers_t *timers);
void mg_timer_init(mg_timer_t *timer, mg_timers_t *timers, void (*cb)(mg_timer_t *timer));
/* (Re)arms the timer: `cb` runs once, on the loop, `delay_ms` from now (never earlier). */
void mg_timer_set(mg_timer_t *timer, uint64_t delay_ms);
void mg_timer_cancel(mg_timer_t *timer);
int mg_timer_is_set(const mg_timer_t *timer);

/* ---------------------------------------------------------------------------------------
 * Workers and the process that owns them
 */
typedef struct mg_gateway mg_gateway_t;

/* Counters of one worker, written by that worker only (relaxed load + store, no locked
 * instruction) and read by the admin thread, which sums them over the workers (/metrics). */
typedef atomic_uint_fast64_t mg_stat_t;

#define MG_STORE_LATENCY_BUCKETS 10 /* store.h: their bounds */
#define MG_LOOP_TURN_BUCKETS 12     /* loop.c: their bounds */

typedef struct mg_worker_stats {
    mg_stat_t requests;     /* taken by the request handler */
    mg_stat_t in_flight;    /* ... and not yet disposed */
    mg_stat_t responses[6]; /* by status class: [2] 2xx ... [5] 5xx; [0] anything else */
    mg_stat_t throttle_admitted, throttle_rejected;
    mg_stat_t connections_rate_limited;
    mg_stat_t ws_sessions; /* open (registered) */
    mg_stat_t ws_bridged;  /* bridge messages answered, by the backend or the gateway */
    /* CORS (request/edits.c): preflights answered, allowed or refused; actual requests whose
     * Origin the policy refused; response actions left out because their value could not be made */
    mg_stat_t cors_preflight_allowed, cors_preflight_refused, cors_refused;
    mg_stat_t response_action_failures;
    /* tenants.store (store.c): decisions Redis made, those on_failure made, the latter by why
     * (mg_store_failure_t: [1] down, [2] timeout, [3] refused), Redis's decision latency */
    mg_stat_t store_shared, store_fallback;
    mg_stat_t store_errors[4];
    mg_stat_t store_latency[MG_STORE_LATENCY_BUCKETS]; /* by bucket, not cumulative */
    mg_stat_t store_latency_sum_us;
    mg_stat_t store_mode;                   /* 0 no client, 1 shared (every Redis node answers), 2 some decisions fall back */
    mg_stat_t store_writes, store_commands; /* sent to Redis by the worker's clients (pipelining: writes per decision) */
    /* the event loop's turns (loop.c): how long each kept the worker busy, by bucket (not
     * cumulative), their sum, and the longest that ended in the last two seconds, with the
     * second it was last updated in */
    mg_stat_t loop_turns[MG_LOOP_TURN_BUCKETS + 1];
    mg_stat_t loop_busy_ns;
    mg_stat_t loop_longest_ns, loop_longest_second;
} mg_worker_stats_t;

/* What the worker itself keeps of its loop's turns (loop.c). */
typedef struct mg_loop_clock {
    uint64_t woke_ns;            /* when the last turn recorded began */
    uint64_t second, longest_ns; /* the second the last turn ended in, the longest that ended in it */
    uint64_t longest_before_ns;  /* the longest of the second before it (0: none ended then) */
} mg_loop_clock_t;

static inline void mg_stat_inc(mg_stat_t *p)
{
    atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + 1, memory_order_relaxed);
}

/* Counters have one writer (their worker): a plain read-add-store, no locked instruction. */
static inline void mg_stat_add(mg_stat_t *p, uint64_t v)
{
    atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + v, memory_order_relaxed);
}

static inline void mg_stat_dec(mg_stat_t *p)
{
    atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) - 1, memory_order_relaxed);
}

static inline uint64_t mg_stat_read(mg_stat_t *p)
{
    return atomic_load_explicit(p, memory_order_relaxed);
}

static inline void mg_stat_response(mg_worker_stats_t *stats, int status)
{
    int class = status / 100;
    mg_stat_inc(&stats->responses[class >= 1 && class <= 5 ? class : 0]);
}

/* Frees the messages an h2o multithread receiver got: calloc'ed h2o_multithread_message_t that
 * carry nothing but the wake-up (stop, configuration swapped). */
static inline void mg_messages_free(h2o_linklist_t *messages)
{
    while (!h2o_linklist_is_empty(messages)) {
        h2o_multithread_message_t *m = H2O_STRUCT_FROM_MEMBER(h2o_multithread_message_t, link, messages->next);
        h2o_linklist_unlink(&m->link);
        free(m);
    }
}

/* splitmix64 over a counter: a worker's unique numbers (request ids, WebSocket masks), not secrets. */
static inline uint64_t mg_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

typedef struct mg_expiry mg_expiry_t;

typedef struct mg_worker {
    unsigned id;
    pthread_t thread;
    mg_gateway_t *gw;
    h2o_context_t ctx;
    h2o_accept_ctx_t *accept_ctxs; /* one per listener */
    h2o_socket_t **listeners;      /* one per listener, NULL once closed */
    int *listen_fds;
    struct mg_backend_worker *backend; /* its clients to backends (gateway/backend/) */
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t stop_receiver;
    h2o_multithread_receiver_t conf_receiver;  /* "a reload swapped the configuration" */
    h2o_multithread_receiver_t sched_receiver; /* turns the schedulers hand to this worker (dispatch.c) */
    struct mg_ws_worker *ws;                   /* its WebSocket sessions (gateway/websocket/) */
    mg_expiry_t **expiries;                    /* queue_timeout timers, by mg_backend_sched_t.index */
    size_t num_expiries;
    uint64_t turns;           /* scheduler turns alive on this worker, orphans included (dispatch.c) */
    struct mg_job *free_jobs; /* jobs kept for the next forwards, at most MG_FREE_JOBS_MAX (dispatch.c) */
    size_t num_free_jobs;
    mg_config_t *conf;          /* current: what requests starting now use */
    struct mg_conf_hold *holds; /* configurations this worker holds (conf_refs.c) */
    mg_worker_stats_t stats;
    mg_loop_clock_t loop_clock;
    mg_timers_t timers;
    mg_timer_t evict_timer;        /* worker 0: forgets idle throttle keys once a second */
    struct mg_worker_conns *conns; /* its client connections (gateway/connections/) */
    struct mg_store_worker *store; /* its client of tenants.store (store.c) */
    mg_auth_cache_t *auth_cache;   /* its verified tokens (gateway/auth/cache.c) */
    int stopping;
    uint64_t rng[2]; /* request id generator state */
} mg_worker_t;

typedef struct mg_admin mg_admin_t;
typedef struct mg_backend_sched mg_backend_sched_t;

struct mg_gateway {
    /* The current configuration (one reference). Written only by a reload, under both locks;
     * other threads take it with mg_gateway_conf_acquire, workers through mg_worker_conf_hold. */
    mg_config_t *conf;
    pthread_mutex_t conf_lock;       /* `conf` and its reference count move together */
    pthread_mutex_t reload_lock;     /* one reload at a time */
    atomic_uint_fast64_t generation; /* conf->generation, readable without the lock */
    atomic_uint_fast64_t reloads_ok, reloads_failed;
    atomic_int stopping;        /* SIGTERM/SIGINT received: /healthz answers 503 */
    struct mg_prober *prober;   /* the active health checks' thread (backend/prober.c) */
    mg_auth_fetcher_t *fetcher; /* the JWKS urls' thread (auth/fetch.c) */
    /* settings fixed at start (a reload keeps them), readable from any thread */
    unsigned num_workers;
    size_t num_listeners;
    h2o_globalconf_t globalconf;
    h2o_pathconf_t *pathconf;
    SSL_CTX **ssl_ctxs; /* one per listener, NULL for plain */
    mg_worker_t *workers;
    mg_admin_t *admin;           /* NULL without admin.address */
    mg_throttle_t *throttle;     /* every quota's state; outlives configurations (reloads) */
    mg_backend_sched_t **scheds; /* every backend's scheduler, by name; grown by reloads (under reload_lock) */
    size_t num_scheds;
    struct mg_overload *overload;    /* client connections of the process, their caps (gateway/connections/) */
    struct mg_ws_registry *sessions; /* every WebSocket session, by id (gateway/websocket/) */
    /* the workers' progress, watched by the main thread (server.c): ready to take a stop
     * message, and finished */
    pthread_mutex_t workers_lock;
    pthread_cond_t workers_cond;
    unsigned workers_ready, workers_done;
    /* listed tenants' totals of the throttle keys evicted (tenant_totals.h) */
    struct mg_tenant_totals *tenant_totals;
};

/* The worker owning an h2o context. */
static inline mg_worker_t *mg_worker_of(h2o_context_t *ctx)
{
    return H2O_STRUCT_FROM_MEMBER(mg_worker_t, ctx, ctx);
}
/* The worker's current configuration (moving to a reloaded one first), held for one request or
 * session until mg_worker_conf_drop(w, conf). */
mg_config_t *mg_worker_conf_hold(mg_worker_t *w);
void mg_worker_conf_drop(mg_worker_t *w, mg_config_t *conf);

/* ---------------------------------------------------------------------------------------
 * The request: taken by the handler (request/handler.c), checked (request/request_check.c),
 * answered by the gateway (request/response.c) or through dispatch (request/dispatch.c) by the
 * backend side (gateway/backend/).
 */

/* One accepted request, from on_req until h2o disposes it (allocated in the request's pool). */
typedef struct mg_request {
    h2o_req_t *req; /* NULL once the client is gone or the final send is done */
    mg_worker_t *worker;
    struct mg_conn *conn; /* the client connection's record (gateway/connections/); NULL for none */
    mg_config_t *conf;    /* the worker's current one when the request started: held until disposed */
    const mg_route_t *route;
    mg_str_t tenant;                                      /* empty: unidentified */
    mg_str_t method, path, query, host, peer, request_id; /* as received (the access log shows these) */
    /* What forward sends, after the route's actions: method, normalized path, query, and the
     * Host from forward.host (empty: the client's). */
    mg_str_t send_method, send_path, send_query, send_host;
    uint64_t started_at; /* CLOCK_MONOTONIC, microseconds */
    int logged;
    int status;                 /* for the access log */
    uint64_t bytes_sent;        /* body bytes, for the access log */
    const char *server;         /* backend server url chosen last, or NULL */
    struct mg_forward *forward; /* non-NULL while forwarding */
    /* non-NULL from the scheduler's submit until the transfer ends or the request is disposed
     * (dispatch.c) */
    struct mg_job *job;
    struct mg_ws_tunnel *tunnel; /* non-NULL while a WebSocket upgrade waits for its backend */
    mg_decision_t limit;         /* the quota decision shown in RateLimit-* (has_limit) */
    int has_limit;
    struct mg_limits_wait *quota_wait; /* made at its first quota decision through the store (limits.c) */
    struct mg_keys_wait *keys_wait;    /* made when it waits for a fetch of its token's keys (keys_wait.c) */
    /* W3C trace context (trace.h): the trace id for the access log, and the traceparent the
     * backend gets (the client's trace with the gateway's span, or a new trace); kept_state: the
     * client's traceparent was valid, so its tracestate goes on too */
    mg_str_t trace_id, traceparent;
    int kept_state;
    /* what access_log.format: combined and access_log.fields log, copied when the request starts
     * (the client's buffers may be gone by the time the line is written); empty otherwise */
    mg_str_t protocol, referer, user_agent;
    mg_str_t *log_fields; /* conf->num_access_log_fields values, base NULL when absent */
    uint64_t balance_key; /* balance: hash: the hash of the backend's hash_key (has_balance_key) */
    int has_balance_key;
    mg_auth_result_t auth; /* the credential's verification; its identity is released when the request is disposed */
    /* what the answer's edits need (request/edits.c): the routing context while the request path
     * runs, then a copy in the pool when the route's response templates read it (else NULL); the
     * client's Origin on a route with CORS; preflight: the gateway answered a CORS preflight */
    mg_ctx_t *ctx;
    mg_str_t origin;
    int preflight;
    int routed; /* the route tree was asked (r->route is its answer) */
    /* forward and tunnel: the backend (the route's, or its split's leg: split_leg is that leg's
     * index + 1, 0 without a split) */
    struct mg_backend_conf *backend;
    int split_leg;
    struct mg_mirror_copy *mirror_copies; /* the copies sent to the route's mirrors (request/mirror.c) */
} mg_request_t;

/* CLOCK_REALTIME in milliseconds (token lifetimes are wall-clock times). */
static inline int64_t mg_realtime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CLOCK_MONOTONIC in microseconds (mg_request_t.started_at). */
static inline uint64_t mg_monotonic_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Sends a gateway-made response: status, X-Matchgate-Error: code, a short text/plain body naming
 * the reason and the route. Final, as every mg_request_send_*: the request must not be touched
 * afterwards (response.c). */
void mg_request_send_error(mg_request_t *r, int status, const char *code, const char *reason);
/* Same, with Retry-After: `retry_after_us` in whole seconds, rounded up, at least 1 (429, 503). */
void mg_request_send_retry(mg_request_t *r, int status, const char *code, const char *reason, uint64_t retry_after_us);
/* Same, and the connection ends: HTTP/1 after this response (Connection: close), HTTP/2 at once. */
void mg_request_send_error_and_close(mg_request_t *r, int status, const char *code, const char *reason);
/* The fields the gateway adds to every response of `r` (its own, `gateway_made`, or the
 * backend's): Server, X-Request-Id, and RateLimit-Limit/-Remaining/-Reset of the request's quota
 * decision, replacing the backend's (none when no quota applied); then the route's edits of its
 * answer (CORS, response actions: request/edits.h). */
void mg_request_add_own_headers(mg_request_t *r, h2o_req_t *req, int gateway_made);
/* The gateway's answer to a CORS preflight: 204 with the fields of `a`, or, when `a` refuses it,
 * 403 cors-refused naming why, with none of the Access-Control-* fields. */
void mg_request_send_preflight(mg_request_t *r, const mg_cors_answer_t *a);
/* The route's own answer: `respond` (its status, headers and body), `redirect` (its status and
 * Location), or the 426 of a bridge route asked without a WebSocket upgrade. */
void mg_request_send_respond(mg_request_t *r);
void mg_request_send_redirect(mg_request_t *r, mg_str_t location);
void mg_request_send_upgrade_required(mg_request_t *r);
/* The refusal of mg_auth_decide: 401/403 with WWW-Authenticate (RFC 6750), 503 auth-unavailable
 * with Retry-After, 400 for a requirement that could not be decided. */
void mg_request_send_auth(mg_request_t *r, const mg_auth_decision_t *d);
/* The checks every request passes before it is read (request_check.c): 0 to go on, with the
 * hop-by-hop fields and those the client's Connection names removed from req->headers; -1 after
 * a 400 (the connection closed when an HTTP/1 head breaks RFC 9112's framing rules). */
int mg_request_check(mg_request_t *r);
/* keys_wait.c. When r->auth has a keys_ticket (its token names a kid the keys lack, and a fetch
 * of them is on its way) and the request has not waited yet: 1, and `again` runs on the loop
 * once that fetch has ended (or after the fetch's timeout and a second), to authenticate it
 * anew. Otherwise 0, with the verification settled (counted): it is final. */
typedef struct mg_keys_wait mg_keys_wait_t;
int mg_request_wait_keys(mg_request_t *r, void (*again)(mg_request_t *r));
/* Stops the wait of a request that is disposed of (the client left). */
void mg_request_wait_keys_cancel(mg_request_t *r);
/* Writes the access log line for `r` once (later calls do nothing). */
void mg_request_log(mg_request_t *r);

#endif
