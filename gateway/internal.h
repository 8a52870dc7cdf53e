/*
 * gateway internals shared by its source files (not a public door: other modules use
 * gateway.h). Everything here runs on a worker thread unless said otherwise.
 */
#ifndef MG_GATEWAY_INTERNAL_H
#define MG_GATEWAY_INTERNAL_H

#include <pthread.h>
#include <h2o.h>
#include "gateway/gateway.h"
#include "scheduler/scheduler.h"
#include "throttle/throttle.h"

/* ---------------------------------------------------------------------------------------
 * Header rules (headers.c): pure functions, unit-tested.
 */

/* The header names listed in Connection (RFC 9110 7.6.1), lower-cased, at most 16 kept. */
typedef struct mg_conn_tokens {
    char names[16][32];
    size_t size;
} mg_conn_tokens_t;

/* Adds the comma-separated tokens of one Connection header value. */
void mg_conn_tokens_add(mg_conn_tokens_t *tokens, const char *value, size_t len);
/* 1 when the header must not cross the proxy: hop-by-hop, or named in Connection. `name` is lower case. */
int mg_header_is_hop_by_hop(const char *name, size_t len, const mg_conn_tokens_t *tokens);
/* 1 when the value can be forwarded as is: no CR, LF or NUL. */
int mg_header_value_is_safe(const char *value, size_t len);
/* Removes, in place and keeping the order of the rest, the hop-by-hop fields of a request as the
 * client sent it, and every field its Connection headers name (Connection included). */
void mg_headers_strip_hop_by_hop(h2o_headers_t *headers);
/* The RFC 9112 framing rules h2o 2.2.5 does not apply to an HTTP/1 request head, on its fields as
 * picohttpparser read them: no folded line, at most one Host, Content-Length values that agree,
 * Transfer-Encoding only as a single `chunked`, never with Content-Length, never in HTTP/1.0.
 * NULL when the head keeps them, else what is wrong. */
struct phr_header;
const char *mg_http1_framing_error(const struct phr_header *headers, size_t n, int minor_version);
/* RFC 9110 5.1, 5.5 for one field of a client's request: a token for a name, no control character
 * but HTAB in the value; over HTTP/2 (`http2`) no white space at either end of the value either
 * (RFC 9113 8.2.1). NULL when valid, else what is wrong. */
const char *mg_request_field_error(const char *name, size_t nlen, const char *value, size_t vlen, int http2);
/* Why the request's method and header fields cannot be passed on, NULL when they can: the
 * method must be a token (RFC 9110 9.1; h2o checks neither HTTP/2's :method nor all of an
 * HTTP/1 method), every field pass mg_request_field_error (h2o's HTTP/1 parser applies the
 * field rules itself, its HPACK decoder not all of them). Checked once per request, before
 * routing, whatever the route does with it (forward, tunnel, bridge). */
const char *mg_request_head_error(const h2o_req_t *req);
/* Splits a header line of a backend's response ("Name: value", without CR LF) into its name
 * (lower-cased in place; white space before the colon dropped, RFC 9112 5.1) and its value
 * (surrounding white space trimmed). -1 when it is not a valid field: no colon, a name that is not
 * a token (a folded line starts with white space), a value with a control character (RFC 9110 5.5). */
int mg_header_line_split(h2o_iovec_t line, h2o_iovec_t *name, h2o_iovec_t *value);

/* 1 when s[0..len) is an authority as Host and :authority carry it (RFC 9110 7.2, RFC 3986 3.2.2,
 * 3.2.3): a non-empty host (a reg-name or IPv4 address: unreserved, sub-delims and pct-encoded
 * characters; or an IP-literal in brackets) and an optional ":" port (at most 65535). No userinfo,
 * no white space, '/', '?', '#', '@', '\\' or control character. */
int mg_authority_is_valid(const char *s, size_t len);

/* ---------------------------------------------------------------------------------------
 * Access log (accesslog.c): one JSON object per line, one write(2) per line.
 */
typedef struct mg_access_entry {
    struct timeval when;
    mg_str_t peer, method, path, route, tenant, server, request_id;
    int status;
    uint64_t bytes;
    double duration_ms;
} mg_access_entry_t;

/* Long enough for any entry: fields are capped (path at 1 KiB) and escaping grows them at most 6x. */
#define MG_ACCESS_LINE_MAX 12288
/* Formats `e` as one JSON line into buf (MG_ACCESS_LINE_MAX bytes); returns the length. */
size_t mg_access_format(const mg_access_entry_t *e, char *buf, size_t size);
void mg_access_write(int fd, const mg_access_entry_t *e);

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
 * Client watch (client_watch.c): notices an HTTP/1 client leaving while its request waits.
 */
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

/* ---------------------------------------------------------------------------------------
 * Process, workers and the request handler
 */
typedef struct mg_gateway mg_gateway_t;

/* Counters of one worker, written by that worker only (relaxed load + store, no locked
 * instruction) and read by the admin thread, which sums them over the workers (/metrics). */
typedef atomic_uint_fast64_t mg_stat_t;

typedef struct mg_worker_stats {
    mg_stat_t requests;     /* taken by the request handler */
    mg_stat_t in_flight;    /* ... and not yet disposed */
    mg_stat_t responses[6]; /* by status class: [2] 2xx ... [5] 5xx; [0] anything else */
    mg_stat_t throttle_admitted, throttle_rejected;
    mg_stat_t connections_rate_limited;
    mg_stat_t ws_sessions; /* open (registered) */
    mg_stat_t ws_bridged;  /* bridge messages answered, by the backend or the gateway */
} mg_worker_stats_t;

static inline void mg_stat_inc(mg_stat_t *p)
{
    atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + 1, memory_order_relaxed);
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

/* A listening socket (non-blocking, close-on-exec) on `addr`, or -1 with errno (server.c). */
int mg_listen_socket(const struct sockaddr_storage *addr, socklen_t len, int backlog, int reuseport);

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
    h2o_multithread_receiver_t sched_receiver; /* jobs the schedulers hand to this worker (dispatch.c) */
    struct mg_ws_worker *ws;                   /* its WebSocket sessions (gateway/websocket/) */
    mg_expiry_t **expiries;                    /* queue_timeout timers, by mg_backend_sched_t.index */
    size_t num_expiries;
    uint64_t jobs;              /* dispatch jobs alive on this worker, orphans included */
    mg_config_t *conf;          /* current: what requests starting now use */
    struct mg_conf_hold *holds; /* configurations this worker holds (conf_refs.c) */
    mg_worker_stats_t stats;
    mg_timers_t timers;
    mg_timer_t evict_timer;        /* worker 0: forgets idle throttle keys once a second */
    struct mg_worker_conns *conns; /* its client connections (conns.h) */
    int stopping;
    uint64_t rng[2]; /* request id generator state */
} mg_worker_t;

typedef struct mg_admin mg_admin_t;

/* Upper bounds of the waiting-time histogram's buckets, in microseconds (+Inf is the count). */
#define MG_WAIT_BUCKETS 12
#define MG_WAIT_BUCKET_BOUNDS_US                                                                                                   \
    {                                                                                                                              \
        1000, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000                               \
    }

/* A backend's scheduler, kept by name for the life of the process: a reload that keeps the
 * backend keeps its waiting requests (dispatch.c). Counters for /metrics beside it. */
typedef struct mg_backend_sched {
    char *name;
    struct mg_sched *sched;
    size_t index;                                       /* in mg_gateway.scheds */
    atomic_uint_fast64_t wait_buckets[MG_WAIT_BUCKETS]; /* started requests by time waited (not cumulative) */
    atomic_uint_fast64_t wait_count, wait_sum_us;
    atomic_uint_fast64_t running; /* requests sent (started) and not yet completed */
    atomic_uint share;            /* max_queued_per_key of the configuration in use (a bridge's read bound) */
} mg_backend_sched_t;

struct mg_gateway {
    /* The current configuration (one reference). Written only by a reload, under both locks;
     * other threads take it with mg_gateway_conf_acquire, workers through mg_worker_conf_hold. */
    mg_config_t *conf;
    pthread_mutex_t conf_lock;       /* `conf` and its reference count move together */
    pthread_mutex_t reload_lock;     /* one reload at a time */
    atomic_uint_fast64_t generation; /* conf->generation, readable without the lock */
    atomic_uint_fast64_t reloads_ok, reloads_failed;
    atomic_int stopping; /* SIGTERM/SIGINT received: /healthz answers 503 */
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
    struct mg_overload *overload;    /* client connections of the process, their caps (conns.h) */
    struct mg_ws_registry *sessions; /* every WebSocket session, by id (gateway/websocket/) */
};

/* One accepted request, from on_req until h2o disposes it (allocated in the request's pool). */
typedef struct mg_request {
    h2o_req_t *req; /* NULL once the client is gone or the final send is done */
    mg_worker_t *worker;
    struct mg_conn *conn; /* the client connection's record (conns.h); NULL for none */
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
} mg_request_t;

/* Sends a gateway-made response: status, X-Matchgate-Error: code, a short text/plain body naming
 * the reason and the route. Final: the request must not be touched afterwards (proxy.c). */
void mg_request_send_error(mg_request_t *r, int status, const char *code, const char *reason);
/* Same, with Retry-After: `retry_after_us` in whole seconds, rounded up, at least 1 (429, 503). */
void mg_request_send_retry(mg_request_t *r, int status, const char *code, const char *reason, uint64_t retry_after_us);
/* Same, and the connection ends: HTTP/1 after this response (Connection: close), HTTP/2 at once
 * (request_check.c). */
void mg_request_send_error_and_close(mg_request_t *r, int status, const char *code, const char *reason);
/* The checks every request passes before it is read (request_check.c): 0 to go on, with the
 * hop-by-hop fields and those the client's Connection names removed from req->headers; -1 after
 * a 400 (the connection closed when an HTTP/1 head breaks RFC 9112's framing rules). */
int mg_request_check(mg_request_t *r);
/* Writes the access log line for `r` once (later calls do nothing). */
void mg_request_log(mg_request_t *r);

/* ---------------------------------------------------------------------------------------
 * Limits at request time (limits.c). The checks return 0 to go on, or -1 after sending the
 * request its 429 (the request must not be touched afterwards).
 */

/* The tenant's quota (tenants.quotas / default_quota), when the request has a tenant. */
int mg_limits_check_tenant(mg_request_t *r, const mg_ctx_t *ctx);
/* The `quota:` of the chosen route and of its ancestors, root first. */
int mg_limits_check_routes(mg_request_t *r, const mg_ctx_t *ctx);
/* limits.max_requests_per_connection_per_second: beyond it the request gets a 429 and the
 * connection is closed (after this response for HTTP/1, at once for HTTP/2). */
int mg_limits_check_connection(mg_request_t *r);
/* Counts one request of `conn` in its one-second window (the count is kept on the connection's
 * record, conns.h). 0 while within `cap` (also for a connection without a record), 1 for the
 * connection's first request over it, 2 for the later ones. */
int mg_conn_rate_count(h2o_conn_t *conn, uint64_t now_ms, unsigned cap);
/* RateLimit-Limit/-Remaining/-Reset of the request's quota decision, replacing the backend's;
 * nothing when no quota applied. */
void mg_limits_add_headers(mg_request_t *r, h2o_req_t *req);

/* One admission against the tenant's quota for something that is not a request (a bridged
 * WebSocket message): 1 admitted (also without a quota), 0 rejected with *retry_after_us set. */
int mg_limits_admit_tenant(mg_worker_t *w, const mg_config_t *conf, mg_str_t tenant, uint64_t *retry_after_us);
/* Splits a throttle key made here: returns 't' (a tenant's: `name` is the tenant), 'r' (a
 * route's: `route` and the expanded key `name`), or 0 for a key of another kind. */
int mg_limits_parse_key(const char *key, size_t len, mg_str_t *route, mg_str_t *name);
/* After a reload: moves every key of the throttle to the quota `conf` gives it. */
void mg_limits_requota(mg_throttle_t *t, const mg_config_t *conf);

/* ---------------------------------------------------------------------------------------
 * Dispatch through the backends' schedulers (dispatch.c)
 */

/* Gives every backend of `conf` its scheduler: the one of the same name from an earlier
 * configuration (reconfigured: its waiting requests stay), else a new one. 0, or -1 when out of
 * memory: then no live scheduler has been reconfigured (new ones made meanwhile stay, unused
 * until a configuration names their backend). Main thread or under reload_lock, before `conf`
 * is published; workers then re-arm their queue timers (mg_dispatch_worker_rearm). */
int mg_dispatch_bind(mg_gateway_t *gw, mg_config_t *conf);
/* Sends `r` to the route's backend through its scheduler: at once, or when its turn comes
 * (ordering key, max_in_flight), or a 503 (queue-full, queue-timeout). Always ends with a
 * response. `ctx` is the routing context after the route's actions (for order.key). */
void mg_dispatch_forward(mg_request_t *r, const mg_ctx_t *ctx);
/* The backend transfer of `r` is over (answered in full, failed or cancelled): completes its
 * running job, so that its slot and its key's turn pass on while the client may still be
 * reading. Clears r->job; does nothing when there is no running job. */
void mg_dispatch_complete(mg_request_t *r);
/* The request is being disposed: completes its job if still running (the next one of its key
 * may start) or withdraws it while it waits. */
void mg_dispatch_release(mg_request_t *r);
/* After a reload (on the worker, from its "configuration swapped" message): re-arms this worker's
 * queue timers, since a lower queue_timeout brings the waiting requests' deadlines forward. */
void mg_dispatch_worker_rearm(mg_worker_t *w);
/*
 * A place in a backend's scheduler for any piece of work of a worker (a forwarded request, a
 * bridged WebSocket message). Its run callback comes on the worker through its receiver.
 * submit -> STARTED: call mg_turn_started and run it now; QUEUED: wait for the callback
 * (MG_SCHED_RUN: mg_turn_started, run); a refusal: the turn is over. A started turn ends with
 * mg_turn_complete (its slot and its key's turn pass on); a waiting one may be withdrawn with
 * mg_turn_cancel (0: its callback is on its way and must be waited for). Whatever the path,
 * mg_turn_finished when the memory holding the turn is given up (the worker counts turns alive).
 */
typedef struct mg_turn {
    mg_sched_task_t task;
    h2o_multithread_message_t msg; /* carries the task to its worker (the scheduler's executor) */
    mg_backend_sched_t *bs;
    uint64_t submitted_us;
    int running; /* started and counted in bs->running */
} mg_turn_t;

/* `key` orders the turn (empty: unordered); `client` is who it counts against in the backend's
 * fair share of waiting (mg_turn_client; empty: no one). */
mg_sched_result_t mg_turn_submit(mg_turn_t *t, mg_worker_t *w, mg_backend_sched_t *bs, mg_str_t key, mg_str_t client,
                                 mg_sched_priority_t priority, mg_sched_run_cb cb);
void mg_turn_started(mg_turn_t *t);
void mg_turn_complete(mg_turn_t *t);
int mg_turn_cancel(mg_turn_t *t);
void mg_turn_finished(mg_worker_t *w);
/* The client a turn counts against in its backend's queue (max_queued_per_key): "t:<tenant>" when
 * the tenant is known, else "c:<conn_id>" (the client connection; 0: none, an empty result).
 * Written into `buf`, MG_TURN_CLIENT_LEN bytes. */
#define MG_TURN_CLIENT_LEN (MG_TENANT_MAX_LEN + 24)
mg_str_t mg_turn_client(char *buf, mg_str_t tenant, uint64_t conn_id);
/* Why a turn was refused (FULL, KEY_FULL, GROUP_FULL, DRAINING, NOMEM), for a 503 queue-full: of a
 * request, or (`bridged`) of a bridged message, whose ordering key is its session. */
const char *mg_turn_refusal(mg_sched_result_t res, int bridged);

/* A worker's receiver for scheduler deliveries (after its queue exists), and its timers' end. */
void mg_dispatch_worker_init(mg_worker_t *w);
void mg_dispatch_worker_dispose(mg_worker_t *w);

/* Registers the proxy handler on `pathconf`, and on the host's fallback path a filter that
 * marks and logs the errors h2o answers by itself (proxy.c). */
void mg_proxy_register(mg_gateway_t *gw, h2o_hostconf_t *hostconf, h2o_pathconf_t *pathconf);
/* The worker owning an h2o context. */
mg_worker_t *mg_worker_of(h2o_context_t *ctx);

/* Installs signal handling: blocks SIGTERM/SIGINT/SIGHUP/SIGPIPE in the calling thread (and so in
 * threads created afterwards). mg_signals_wait returns the next of SIGTERM/SIGINT/SIGHUP (signals.c). */
void mg_signals_block(void);
int mg_signals_wait(void);

/* ---------------------------------------------------------------------------------------
 * Configuration references and reload (conf_refs.c, server.c)
 *
 * The gateway holds one reference on its current configuration. Each worker holds one per
 * configuration it still uses (a "hold" record: the current one, plus older ones while requests
 * that started on them run), and counts its requests per record without atomics. A reload swaps
 * the gateway's configuration; each worker moves to it at its next request or when the reload's
 * message reaches its loop, whichever comes first; an old configuration is freed when its last
 * reference goes.
 */

/* The current configuration with one reference for the caller (mg_config_release it). Any thread
 * but a worker's (workers use mg_worker_conf_hold). */
mg_config_t *mg_gateway_conf_acquire(mg_gateway_t *gw);
/*
 * Reloads the configuration file (mg_config_reload), opens its access log and swaps it in. On
 * failure the running configuration stays and -1 is returned; errors and warnings are recorded in
 * `errs` and printed on stderr either way, followed by one line with the outcome and generation.
 * Serialized; any thread but a worker's.
 */
int mg_gateway_reload(mg_gateway_t *gw, mg_errors_t *errs);
/* Makes `conf` (with the reference the caller gives up) the gateway's configuration and tells the
 * workers; returns the previous one, whose reference passes to the caller. Under reload_lock. */
mg_config_t *mg__gateway_conf_publish(mg_gateway_t *gw, mg_config_t *conf);

/* Worker side (worker thread only): the first hold on the gateway's configuration, at start; the
 * last ones dropped, when the worker has finished. */
void mg_worker_conf_init(mg_worker_t *w);
void mg_worker_conf_dispose(mg_worker_t *w);
/* The worker's current configuration (moving to a reloaded one first), held for one request or
 * session until mg_worker_conf_drop(w, conf). */
mg_config_t *mg_worker_conf_hold(mg_worker_t *w);
void mg_worker_conf_drop(mg_worker_t *w, mg_config_t *conf);

#endif
