/*
 * gateway/backend: everything that talks to backends. What the rest of the gateway may ask of it:
 * forward a request (streaming the response back), make a call of the gateway's own (the
 * WebSocket bridge's), open a connection to a server (the WebSocket tunnel's), choose the server
 * of an attempt and whether a failed one may go on to the next, and the header fields a backend
 * gets for a request. How bytes reach a server is the business of the clients behind it
 * (client.h): no library type crosses this header.
 */
#ifndef MG_GATEWAY_BACKEND_H
#define MG_GATEWAY_BACKEND_H

#include "gateway/internal.h"

/* ---------------------------------------------------------------------------------------
 * Servers and retries (servers.c)
 */

/* The server a request starts with (index in b->servers): the primary for a write under
 * primary_for_writes, the first under first_available, else the next in the weighted round robin;
 * servers that may not get new requests (health.c) are passed over. MG_NO_SERVER when none may
 * (then 503 no-healthy-server), unless the backend has `panic: true` and some are only unhealthy.
 * Connect failures go on to the following servers (mg_backend_server). */
size_t mg_backend_first_server(mg_backend_conf_t *b, mg_str_t method);
/* Same, for balance: hash, with the hash of the request's hash_key (mg_ring_hash of its value,
 * seed 0); NULL: none (then hash balances as round_robin). */
size_t mg_backend_first_server_keyed(mg_backend_conf_t *b, mg_str_t method, const uint64_t *key);
/* The server of attempt `attempt` (0 for the first) of a request that started on `first`:
 * retries walk on from the first choice, round the list, past the servers that may not get new
 * requests. NULL when there is no such server left. */
const mg_server_conf_t *mg_backend_server(const mg_backend_conf_t *b, size_t first, unsigned attempt);
/* Whether a connect failure of `attempt` (0 for the first) may go on to the next server:
 * idempotent methods only, at most `retries` times and num_servers - 1 times, never for a write
 * pinned to the primary. */
int mg_backend_may_retry(const mg_backend_conf_t *b, unsigned attempt, mg_str_t method);
/* 1 for methods that may be retried on another server: GET HEAD OPTIONS PUT DELETE TRACE. */
int mg_method_is_idempotent(mg_str_t method);
/* 1 for methods that primary_for_writes sends to the primary: POST PUT PATCH DELETE. */
int mg_method_is_write(mg_str_t method);

/* What one attempt at a server came to, whichever client made it. */
typedef enum mg_attempt_result {
    MG_ATTEMPT_OK,               /* the whole response came */
    MG_ATTEMPT_NOT_CONNECTED,    /* no connection to the server (refused, name not resolved): another may be tried */
    MG_ATTEMPT_CONNECT_TIMEOUT,  /* no connection within connect_timeout: likewise */
    MG_ATTEMPT_TLS_FAILED,       /* connected, but the TLS handshake failed (verification, client certificate): nothing
                                  * of the request was sent, so another server may be tried too */
    MG_ATTEMPT_TIMED_OUT,        /* connected, then given up on time by the client */
    MG_ATTEMPT_TOO_MANY_HEADERS, /* the response head has more than MG_BACKEND_MAX_FIELDS fields */
    MG_ATTEMPT_BAD_HEAD,         /* a field or the reason phrase breaks RFC 9110's syntax */
    MG_ATTEMPT_BAD_RESPONSE,     /* not a valid HTTP response */
    MG_ATTEMPT_ABORTED,          /* its owner refused what came (client.h: on_head, on_body) */
    MG_ATTEMPT_FAILED,           /* anything else: reset, closed early, out of memory */
} mg_attempt_result_t;

/* 1 when the attempt never got a connection: the next server may be tried (mg_backend_may_retry). */
static inline int mg_attempt_never_connected(mg_attempt_result_t result)
{
    return result == MG_ATTEMPT_NOT_CONNECTED || result == MG_ATTEMPT_CONNECT_TIMEOUT;
}

/* Whether attempt `attempt` (0 for the first), which came to `result` (`status`: the response's when
 * MG_ATTEMPT_OK), goes on to another server: its cause is in the backend's retry_on
 * (connect-failure, reset, 502, 503, 504), mg_backend_may_retry allows it, and the retry budget
 * has room. */
int mg_backend_should_retry(const mg_backend_conf_t *b, unsigned attempt, mg_str_t method, mg_attempt_result_t result, int status);
/* How long to wait before retry `attempt` (1 for the first retry): retry_backoff for the first,
 * doubled for each next one (up to 16 times), jittered between half and one and a half of it; 0 without backoff. */
uint64_t mg_backend_retry_backoff_ms(const mg_backend_conf_t *b, unsigned attempt);

/* ---------------------------------------------------------------------------------------
 * Server health (health.c): one word per server shared by all workers, kept across reloads that
 * keep the server
 */

/* What an operator set (POST /backends/.../drain|disable|enable). */
typedef enum mg_server_admin {
    MG_SERVER_ADMIN_ENABLED,
    MG_SERVER_ADMIN_DRAINING, /* no new requests; those in flight and WebSocket sessions finish */
    MG_SERVER_ADMIN_DISABLED, /* no new requests */
} mg_server_admin_t;

typedef enum mg_server_state {
    MG_SERVER_HEALTHY,
    MG_SERVER_EJECTED,   /* by the passive checks, until a time */
    MG_SERVER_UNHEALTHY, /* by the active checks */
    MG_SERVER_DRAINING,
    MG_SERVER_DISABLED,
} mg_server_state_t;

/* Index of "no server may be used" (mg_backend_first_server). */
#define MG_NO_SERVER ((size_t)-1)

/* The clock of the health words, in ms (monotonic, never 0); tests replace it. */
extern uint64_t (*mg_health_clock)(void);

/* Binds every server of `conf` to its health word: the one it had if the configuration bound last
 * had it, else a fresh one. Called before `conf` is published. 0, or -1 when out of memory (then
 * nothing changed). */
int mg_backend_bind_health(mg_config_t *conf);
/* The state of `s` at `now_ms`; *until_ms (when not NULL) gets the end of its last ejection. */
mg_server_state_t mg_server_state(const mg_server_conf_t *s, uint64_t now_ms, uint64_t *until_ms);
/* 1 when `s` may get a new request: healthy, or (`panic`) only unhealthy or ejected. */
int mg_server_usable(const mg_server_conf_t *s, uint64_t now_ms, int panic);
/* An attempt at `s` ended (`status`: the response's, when `result` is MG_ATTEMPT_OK): counts it for
 * the backend's outlier rules; 1 when this ejected the server. Any thread. */
int mg_server_report(const mg_server_conf_t *s, mg_attempt_result_t result, int status);
/* An attempt at `s` starts / ends (whatever its end: done, failed, cancelled): in-flight and
 * attempt counts. NULL: nothing. */
void mg_server_attempt_started(const mg_server_conf_t *s);
void mg_server_attempt_ended(const mg_server_conf_t *s);

/* The response-time histogram of a server (mg_server_observe_head): upper bounds in µs. */
#define MG_SERVER_HEAD_BUCKETS 13
#define MG_SERVER_HEAD_BOUNDS_US                                                                                                   \
    {                                                                                                                              \
        1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000                         \
    }

/* What GET /backends and /metrics show of a server. */
typedef struct mg_server_stats {
    uint64_t in_flight, attempts;
    uint64_t responses[5];               /* 1xx .. 5xx */
    uint64_t connect_failures, failures; /* failures: resets, timeouts, malformed responses */
    uint64_t ejections, check_transitions;
    uint64_t last_check_ms;                        /* mg_health_clock's; 0: never */
    int last_check_status;                         /* 0: no response */
    uint64_t head_buckets[MG_SERVER_HEAD_BUCKETS]; /* response heads by time taken (not cumulative) */
    uint64_t head_sum_us, head_count;              /* all of them, those past the last bound included */
} mg_server_stats_t;
void mg_server_stats(const mg_server_conf_t *s, mg_server_stats_t *out);

/* Sets what an operator decided; enabling a server that was drained or disabled starts its slow start. */
void mg_server_set_admin(const mg_server_conf_t *s, mg_server_admin_t admin);
void mg_server_set_unhealthy(const mg_server_conf_t *s, int unhealthy);
uint64_t mg_server_ejections(const mg_server_conf_t *s);
/* Attempts at `s` not finished yet (0 when not bound). */
uint64_t mg_server_in_flight(const mg_server_conf_t *s);
/* Slow start: the share of its weight `s` gets at `now_ms`, in thousandths: 1000 unless its backend
 * has slow_start and the server came back into service (its ejection ended, the active checks found
 * it healthy again, it was enabled, a reload added it) less than slow_start ago; then from 100 at
 * that moment, linearly, to 1000. *left_ms (when not NULL) gets the time left of the ramp (0: none). */
unsigned mg_server_weight_permille(const mg_server_conf_t *s, uint64_t now_ms, uint64_t *left_ms);
/* A monotonic clock in µs, for response times (not the health clock: tests replace that one). */
uint64_t mg_server_now_us(void);
/* The response head of an attempt at `s` came `elapsed_us` after the attempt started (the connection
 * included): counted in the server's histogram. Any thread; NULL or not bound: nothing. */
void mg_server_observe_head(const mg_server_conf_t *s, uint64_t elapsed_us);
/* When no server of `b` is usable: how long until one may be (the soonest end of an ejection; 1 s
 * when none is ejected), for Retry-After. */
uint64_t mg_backend_retry_after_ms(const mg_backend_conf_t *b, uint64_t now_ms);

/* Canaries (canary.c): every canary of `conf` that is due decides (the prober's thread calls it at
 * each tick); `decide` records and logs a decision of the caller's (the admin API's), which holds
 * the canary's lock; the canary leg's share now; its state's name; a decision as JSON. */
struct json_t;
void mg_canaries_tick(const mg_config_t *conf, uint64_t now_ms);
void mg_canary_decide(mg_route_t *r, const char *decision, uint64_t requests, uint64_t errors, uint64_t p99_us);
uint32_t mg_canary_percent(const mg_canary_t *c);
const char *mg_canary_state_name(const mg_canary_t *c);
struct json_t *mg_canary_decision_json(const mg_canary_decision_t *d);

/* The active health checks (prober.c): one thread for the process, started once the workers
 * run. `acquire` gives the current configuration with a reference for the prober (which releases
 * it). NULL when it cannot start (then no active checks run). */
typedef struct mg_prober mg_prober_t;
mg_prober_t *mg_prober_start(mg_config_t *(*acquire)(void *arg), void *arg);
/* Stops the checks running and joins the thread. NULL: nothing to do. */
void mg_prober_stop(mg_prober_t *p);

/* ---------------------------------------------------------------------------------------
 * What a backend gets (headers.c)
 */

/* Emits the headers a backend gets for `r`: the client's in its order, less hop-by-hop ones and
 * those the gateway writes, Cookie crumbs joined into one field, then Host (the route's
 * forward.host, else the client's, else that of `server_url` for an HTTP/1.0 client that sent
 * none), X-Forwarded-For/-Proto/-Host and X-Request-Id. Memory from r->req's pool. */
typedef void (*mg_header_emit_t)(void *arg, const char *name, size_t nlen, const char *value, size_t vlen);
void mg_forward_headers(mg_request_t *r, const char *server_url, mg_header_emit_t emit, void *arg);

/* One header field for a backend. */
typedef struct mg_backend_header {
    h2o_iovec_t name, value;
} mg_backend_header_t;

/* The same fields as an array of *num entries in r->req's pool, pointing into the request's
 * memory (valid while the request is). */
mg_backend_header_t *mg_forward_header_list(mg_request_t *r, const char *server_url, size_t *num);

/* ---------------------------------------------------------------------------------------
 * Forwarding a request (forward.c)
 */

/* Starts forwarding `r` to its route's backend now: the response streams back to the client, with
 * backpressure, the backend's `timeout` and connect retries. Always ends with a response. `over`
 * (NULL: none) runs once when nothing more comes from the backend (the whole response came, or
 * the transfer failed or was cancelled), which may be well before the client has read it all. */
void mg_forward_start(mg_request_t *r, void (*over)(mg_request_t *r));
/* Stops the backend side of a request whose client went away (or that is disposed): no response
 * is sent for it. Does nothing when `r` is not forwarding. */
void mg_forward_cancel(mg_request_t *r);

/* ---------------------------------------------------------------------------------------
 * A call of the gateway's own (call.c): a request complete in memory, the response collected
 * whole. Same rules as a forward: the backend's servers in balance order, connect failures
 * retried on the next server for idempotent methods, connect_timeout and timeout.
 */
typedef struct mg_call mg_call_t;

typedef struct mg_call_spec {
    mg_backend_conf_t *backend;
    const char *method; /* NUL-terminated */
    mg_str_t path, query;
    const mg_backend_header_t *headers; /* the caller's, valid until the call ends; Host included */
    size_t num_headers;
    const char *body; /* NULL: none; else valid until the call ends */
    size_t body_len;
    size_t max_response; /* body bytes; beyond it the call fails (502) */
    uint64_t timeout_ms; /* 0: the backend's `timeout` */
    /* a mirror's copy (request/mirror.c): no retry on another server, and the answer's body is
     * read and dropped (the result has the status only) */
    unsigned no_retry : 1, discard_body : 1;
} mg_call_spec_t;

typedef struct mg_call_result {
    int status;        /* the backend's, or 502/504 when `error` is set */
    const char *error; /* NULL: the backend answered */
    const char *body;  /* valid during the callback */
    size_t len;
} mg_call_result_t;

typedef void (*mg_call_done_t)(void *arg, const mg_call_result_t *res);

/* Starts a call; `done` runs once, later, on the worker's loop, unless the call is cancelled
 * first. NULL when it cannot start (out of memory, no client took it). */
mg_call_t *mg_call_start(mg_worker_t *w, const mg_call_spec_t *spec, mg_call_done_t done, void *arg);
/* Stops a call whose `done` has not run: no callback follows. */
void mg_call_cancel(mg_call_t *c);

/* ---------------------------------------------------------------------------------------
 * A connection to a server (client_h1.c), for what speaks its own protocol on it (the WebSocket
 * tunnel's upgrade).
 */
typedef struct mg_backend_connect mg_backend_connect_t;

/* The connection is open (MG_ATTEMPT_OK: `sock` is the caller's, its `data` unset) or failed
 * (MG_ATTEMPT_NOT_CONNECTED, MG_ATTEMPT_CONNECT_TIMEOUT: `sock` is NULL). */
typedef void (*mg_backend_connected_t)(void *arg, h2o_socket_t *sock, mg_attempt_result_t result);

/* Opens a TCP connection to `server` on the worker's loop, as the builtin client opens its own: an
 * address at once, a name from the worker's lookups (h2o's resolver threads, dns_refresh), every
 * address tried in turn; `timeout_ms` covers the lookup and the connect. `done` runs once, later,
 * unless cancelled first. NULL when out of memory (nothing is called back). */
mg_backend_connect_t *mg_backend_connect(mg_worker_t *w, const mg_server_conf_t *server, uint64_t timeout_ms,
                                         mg_backend_connected_t done, void *arg);
/* Stops a connect whose `done` has not run: no callback follows. */
void mg_backend_connect_cancel(mg_backend_connect_t *c);

/* ---------------------------------------------------------------------------------------
 * A worker's backend side (backend.c): its clients, on the worker thread
 */

/* Once per process, before any other thread starts: the clients' global state. */
void mg_backend_process_init(void);
/* Creates the worker's clients (after its loop and timers exist). 0, or -1 when out of memory. */
int mg_backend_worker_init(mg_worker_t *w);
/* Once nothing runs any more: closes their connections and frees them. */
void mg_backend_worker_dispose(mg_worker_t *w);

#endif
