/*
 * gateway/config: the configuration, from a YAML file to an immutable, reference-counted
 * mg_config_t, and its reload; and the tenant rules read from it (which tenant a request
 * belongs to, its quota). A library of its own that knows no h2o or libcurl: the fuzz targets
 * and the unit tests link it alone. Everything the rest of the gateway reads of a
 * configuration is declared here.
 */
#ifndef MG_GATEWAY_CONFIG_H
#define MG_GATEWAY_CONFIG_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include "routes/routes.h"
#include "gateway/auth/auth.h"

/* ---------------------------------------------------------------------------------------
 * Configuration (config.c, and a file per section: listen.c, backends.c, tenants.c, admin.c,
 * limits.c; reload.c, check.c for reloads). Everything is copied out of the YAML document, which
 * is freed before mg_config_load returns.
 */
typedef struct mg_listen_conf {
    char *address; /* as written: "127.0.0.1:8080", "[::1]:8080", ":8080" */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *tls_certificate; /* NULL: plain HTTP (HTTP/1.1 and h2c prior knowledge) */
    char *tls_key;
} mg_listen_conf_t;

struct mg_backend_conf;

typedef struct mg_server_conf {
    char *url; /* "http://host:port" or "https://host:port", with an optional path prefix, no trailing '/' */
    unsigned weight;
    struct mg_backend_conf *backend; /* the backend it belongs to (its client settings) */
    int via_libcurl;                 /* https://, or the backend's protocol is h2 or h2c: libcurl speaks to it (set at load) */
    /* its health, shared by all workers and kept across reloads that keep the server
     * (gateway/backend/health.c binds it); NULL: not bound (unit tests), always usable */
    struct mg_server_health *health;
} mg_server_conf_t;

/* What a backend's servers are spoken to with (backends.c: `protocol`). */
typedef enum mg_backend_protocol {
    MG_PROTOCOL_HTTP1, /* HTTP/1.1 (over TLS for https://) */
    MG_PROTOCOL_H2,    /* HTTP/2 over TLS, chosen by ALPN (https:// only) */
    MG_PROTOCOL_H2C,   /* HTTP/2 over plain TCP with prior knowledge (http:// only) */
} mg_backend_protocol_t;

/* How a backend's https:// servers are spoken to (backend_tls.c: `tls`). Paths are absolute. */
typedef struct mg_backend_tls_conf {
    char *ca;          /* PEM CA certificates to verify servers with; NULL: the system's store */
    int verify;        /* 0: any certificate and name is accepted (verify: false) */
    char *server_name; /* the name sent (SNI) and verified; NULL: the url's host */
    char *certificate; /* PEM client certificate (mTLS) and its key, both or neither */
    char *key;
} mg_backend_tls_conf_t;

/* Which client speaks to a backend's http:// servers (gateway/backend/client.h). */
typedef enum mg_http_client {
    MG_HTTP_CLIENT_BUILTIN, /* matchgate's own HTTP/1.1 client (client_h1.c) */
    MG_HTTP_CLIENT_LIBCURL, /* libcurl's (client_curl.c) */
} mg_http_client_t;

/* outlier: passive health checks (gateway/backend/health.c). */
typedef struct mg_outlier_conf {
    unsigned consecutive_failures; /* connect failures, resets, timeouts in a row that eject; 0: off */
    unsigned consecutive_5xx;      /* 5xx responses in a row that eject; 0: off */
    uint64_t eject_for_ms;         /* the first ejection; doubled on each repeat ... */
    uint64_t max_eject_for_ms;     /* ... up to this */
    unsigned max_ejected_percent;  /* at most this share of the servers ejected at once (at least one) */
} mg_outlier_conf_t;

typedef enum mg_balance {
    MG_BALANCE_ROUND_ROBIN,
    MG_BALANCE_PRIMARY_FOR_WRITES,
    MG_BALANCE_FIRST_AVAILABLE,
    MG_BALANCE_LEAST_REQUEST, /* power of two choices over in-flight attempts, weights honoured */
    MG_BALANCE_HASH,          /* consistent hashing of hash_key on a ring with virtual nodes */
} mg_balance_t;

/* The balance as written in the file ("round_robin", ...). */
const char *mg_balance_name(mg_balance_t balance);
/* balance: hash: one point of the ring (mg_backend_conf_t.ring, sorted by point). */
typedef struct mg_ring_point {
    uint64_t point;
    size_t server;
} mg_ring_point_t;

/* retry_on: what a retry (on another server) covers. */
#define MG_RETRY_CONNECT_FAILURE 1u /* no connection: refused, not resolved, connect_timeout */
#define MG_RETRY_RESET 2u           /* the connection broke before the response started */
#define MG_RETRY_502 4u
#define MG_RETRY_503 8u
#define MG_RETRY_504 16u

/* Virtual nodes per unit of weight on the ring. */
#define MG_RING_VNODES 160

/* health: active checks (gateway/backend/prober.c). */
typedef struct mg_health_conf {
    char *path; /* NULL: no active checks */
    uint64_t interval_ms, timeout_ms;
    unsigned healthy, unhealthy;     /* checks in a row that turn a server healthy / unhealthy */
    unsigned expect_min, expect_max; /* statuses that pass */
    char *host;                      /* NULL: the server's */
    char **headers;                  /* "Name: value" lines */
    size_t num_headers;
} mg_health_conf_t;

typedef struct mg_backend_conf {
    char *name;
    mg_server_conf_t *servers;
    size_t num_servers;
    /* Round-robin order with weights expanded and interleaved (weight 2 appears twice). */
    size_t *schedule;
    size_t schedule_len;
    mg_balance_t balance;
    char *primary;        /* primary_for_writes only: one of the servers' urls */
    size_t primary_index; /* ... and its index in `servers` */
    uint64_t connect_timeout_ms;
    uint64_t timeout_ms;
    unsigned retries;
    unsigned max_in_flight;         /* requests at the backend at once, all workers together; 0: unlimited */
    uint64_t queue_timeout_ms;      /* longest wait in the scheduler before a 503 queue-timeout */
    unsigned max_queued_per_key;    /* waiting requests of one ordering key, session or client; 0: no share */
    mg_backend_protocol_t protocol; /* HTTP/1.1 (default), h2 or h2c */
    mg_backend_tls_conf_t tls;      /* for its https:// servers */
    mg_http_client_t http_client;   /* who speaks to its http:// servers */
    uint64_t keepalive_timeout_ms;  /* builtin client: an idle pooled connection is closed after it */
    unsigned max_idle_connections;  /* builtin client: idle connections kept per worker and server */
    uint64_t dns_refresh_ms;        /* builtin client: a server name is looked up again after it */
    struct mg_backend_sched *sched; /* the backend's scheduler, owned by the gateway (dispatch.c); NULL in tests */
    atomic_size_t next;             /* round-robin cursor shared by all workers */
    mg_outlier_conf_t outlier;      /* all zero (off) unless `outlier:` is given */
    mg_health_conf_t health;
    unsigned retry_on;             /* MG_RETRY_* bits: what a retry covers */
    unsigned retry_budget_percent; /* retries running at most this share of the attempts in flight; 0: no budget */
    uint64_t retry_backoff_ms;     /* before a retry, jittered and doubled per retry; 0: none */
    uint64_t slow_start_ms;        /* a server back in service ramps from 10% to its full weight over this; 0: off */
    atomic_long retries_running;   /* retry attempts in flight, all workers */
    struct mg_template *hash_key;  /* balance: hash */
    mg_ring_point_t *ring;         /* balance: hash: MG_RING_VNODES x weight points per server */
    size_t ring_len;
    int panic; /* no usable server: use the unhealthy ones anyway (else 503 no-healthy-server) */
} mg_backend_conf_t;

typedef struct mg_limits_conf {
    uint64_t max_request_body; /* bytes; 413 beyond */
    uint64_t max_header_size;  /* bytes; 431 beyond */
    uint64_t client_idle_timeout_ms;
    uint64_t tls_handshake_timeout_ms;               /* 0: not set, the smaller of 10 s and client_idle_timeout */
    unsigned max_http2_streams;                      /* concurrent streams per HTTP/2 connection */
    unsigned max_requests_per_connection_per_second; /* 0: no cap */
    int keep_escaped_slashes;                        /* escaped_slashes: keep (default reject: '\', %2F, %5C get 400) */
    unsigned max_connections;                        /* client connections of the process; 0: auto */
    unsigned max_connections_per_client;             /* per client address; 0: no cap */
    uint64_t client_header_timeout_ms;               /* a whole request head must arrive within this */
    uint64_t max_buffered_request_bytes;             /* request bodies held at once, whole process; 0: no bound */
    unsigned auth_cache_entries;                     /* verified tokens kept per worker (gateway/auth/cache.c) */
    unsigned max_requests_per_connection;            /* then HTTP/1 ends with Connection: close, HTTP/2 with GOAWAY; 0: no cap */
} mg_limits_conf_t;

/* websocket: the sessions' timers and bounds (tunnel and bridge alike). */
typedef struct mg_websocket_conf {
    uint64_t idle_timeout_ms;     /* nothing received from either side for this long: close 1001 */
    uint64_t ping_interval_ms;    /* nothing received from the client for this long: ping it; 0: never */
    uint64_t close_timeout_ms;    /* a close handshake the peers do not finish: the connections are dropped */
    uint64_t max_message_size;    /* bytes of one client message (all its fragments); beyond: close 1009 */
    unsigned max_queued_messages; /* downstream messages waiting for a slow client; beyond: close 1008 */
    int keep_expired_sessions;    /* on_token_expiry: keep (else close: 1008 when the session's token expires) */
} mg_websocket_conf_t;

/* tenants.identify: where a request's tenant comes from (tenants.c, identify.c). */
typedef enum mg_identify_kind {
    MG_IDENTIFY_HEADER,
    MG_IDENTIFY_HOST,    /* regex on the host (lower case, no port) */
    MG_IDENTIFY_PATH,    /* regex on the normalized path */
    MG_IDENTIFY_CLAIM,   /* a claim of the verified credential (a dotted name) */
    MG_IDENTIFY_API_KEY, /* the tenant of the verified API key */
} mg_identify_kind_t;

typedef struct mg_identify_rule {
    mg_identify_kind_t kind;
    char *header;      /* MG_IDENTIFY_HEADER: the name, lower case; MG_IDENTIFY_CLAIM: the claim's name */
    mg_regex_t *regex; /* host, path: has a group named `tenant` */
} mg_identify_rule_t;

/* tenants.trusted_proxies: one CIDR block (IPv4 addresses are kept as IPv4-mapped IPv6). */
typedef struct mg_cidr {
    uint8_t addr[16];
    unsigned prefix; /* bits, of the 128 */
} mg_cidr_t;

typedef struct mg_tenant_quota {
    char *tenant;
    mg_quota_t quota;
} mg_tenant_quota_t;

#define MG_TENANT_MAX_LEN 128

/* tenants.store: quotas kept in Redis for a fleet of gateways (store.c; throttle/store.h). */
typedef enum mg_store_policy {
    MG_STORE_POLICY_LOCAL, /* the node's own limiter with N / nodes */
    MG_STORE_POLICY_ALLOW,
    MG_STORE_POLICY_REJECT,
} mg_store_policy_t;

typedef struct mg_tenants_store {
    struct mg_store *store; /* NULL: no store, the local throttle decides (the default) */
    mg_store_policy_t on_failure;
    unsigned nodes;      /* on_failure local: this node's share is N / nodes */
    char *redis;         /* the servers as written, without passwords (for /tenants and the log) */
    uint64_t timeout_ms; /* as read (the store has it in microseconds) */
} mg_tenants_store_t;

#define MG_STORE_TIMEOUT_DEFAULT_MS 50
#define MG_STORE_TIMEOUT_MAX_MS 10000
#define MG_STORE_NODES_MAX 1000
#define MG_TENANTS_MAX_KEYS_DEFAULT 1000000
#define MG_TENANTS_MAX_KEYS_MAX UINT64_C(1000000000)

typedef struct mg_tenants_conf {
    mg_identify_rule_t *identify; /* tried in order; the first non-empty value wins */
    size_t num_identify;
    int reject_unidentified;   /* unidentified: reject (401) */
    mg_quota_t default_quota;  /* requests == 0: tenants without their own quota are not limited */
    mg_tenant_quota_t *quotas; /* sorted by name (bsearch) */
    size_t num_quotas;
    uint64_t max_keys; /* keys the throttle may hold; beyond, new keys not bounded by the config are refused */
    mg_tenants_store_t store;
    mg_cidr_t *trusted_proxies; /* NULL: a header rule is believed from any client */
    size_t num_trusted_proxies;
} mg_tenants_conf_t;

/* admin: the admin API listener (gateway/admin/). */
typedef struct mg_admin_conf {
    char *address; /* as written; NULL: no admin API */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *token; /* NULL: no authentication; else every call needs Authorization: Bearer <token> */
} mg_admin_conf_t;

/* reload: the check of a new file in a child process before a reload loads it (check.c). */
typedef struct mg_reload_conf {
    uint64_t memory_limit; /* bytes of address space the checking process may use */
    uint64_t timeout_ms;   /* how long it may take; then it is killed and the reload refused */
} mg_reload_conf_t;

#define MG_RELOAD_MIN_MEMORY (UINT64_C(64) << 20)

/* Requests each route was chosen for since its configuration was loaded (GET /routes): per
 * route, one counter per shard; worker W counts in shard W % shards, each shard's counters on
 * cache lines of their own, so workers do not contend for one line per popular route. */
#define MG_ROUTE_HIT_SHARDS 8

/* Per-route metrics (GET /metrics) are kept for the first MG_ROUTE_METRICS_MAX routes of the
 * tree (depth first, in file order): the bound on the route label's cardinality. Per route and
 * shard: responses by status class (1xx..5xx, other), then the duration histogram's buckets, then
 * the durations' sum in microseconds. */
#define MG_ROUTE_METRICS_MAX 1000
#define MG_ROUTE_DURATION_BUCKETS 11
#define MG_ROUTE_DURATION_BOUNDS_MS                                                                                                \
    {                                                                                                                              \
        5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000                                                                      \
    }
#define MG_ROUTE_STAT_CLASSES 6
#define MG_ROUTE_STAT_SUM (MG_ROUTE_STAT_CLASSES + MG_ROUTE_DURATION_BUCKETS)
#define MG_ROUTE_STAT_FIELDS (MG_ROUTE_STAT_SUM + 1)

typedef struct mg_route_hits {
    atomic_uint_fast64_t *counts; /* shards x stride; NULL when out of memory (nothing counted) */
    size_t stride;                /* routes, rounded up to a cache line of counters */
    unsigned shards;
    atomic_uint_fast64_t *stats; /* shards x stats_routes x MG_ROUTE_STAT_FIELDS; NULL: none kept */
    size_t stats_routes;         /* min(routes, MG_ROUTE_METRICS_MAX) */
} mg_route_hits_t;

/*
 * A loaded configuration. Immutable once the gateway runs, except `refs` and the counters of
 * `route_hits`: it is shared by the
 * workers, the admin thread and the requests in flight, and freed when the last reference is
 * released (mg_config_release), so that a reload never pulls it from under a request.
 */
/* access_log.fields: at most this many request headers are logged. */
#define MG_ACCESS_LOG_MAX_FIELDS 16

typedef struct mg_config {
    char *file;
    mg_listen_conf_t *listeners;
    size_t num_listeners;
    unsigned workers; /* default: number of CPUs */
    uint64_t shutdown_timeout_ms;
    char *access_log;         /* NULL: none; "-": stdout; else a path opened for append */
    int access_log_fd;        /* -1 until mg_config_open_access_log (loading opens nothing) */
    int access_log_combined;  /* access_log.format: combined (Apache's); else json */
    char **access_log_fields; /* access_log.fields: request headers logged too, lower case */
    size_t num_access_log_fields;
    mg_limits_conf_t limits;
    mg_websocket_conf_t websocket;
    mg_backend_conf_t *backends;
    size_t num_backends;
    mg_tenants_conf_t tenants;
    mg_routes_t *routes;
    mg_admin_conf_t admin;
    mg_reload_conf_t reload;
    mg_auth_conf_t auth;
    mg_compress_t *compress; /* the top-level `compress:`; NULL: answers are compressed only where a route says so */
    mg_route_hits_t route_hits;
    uint64_t generation; /* 1 for the configuration loaded at start, +1 per successful reload */
    atomic_uint refs;    /* 1 when loaded */
} mg_config_t;

/*
 * Loads and validates FILE. Returns NULL after recording every error found (FILE:LINE:COL);
 * warnings may be recorded on success. Defaults: workers = CPUs, shutdown_timeout 10s,
 * max_request_body 10MiB, max_header_size 64KiB, client_idle_timeout 60s, max_http2_streams
 * 100, client_header_timeout 10s, max_connections auto, max_connections_per_client 0,
 * max_buffered_request_bytes 256MiB (max_request_body when larger), connect_timeout 2s, timeout 30s, retries 1, max_in_flight 0
 * (unlimited), queue_timeout 5s, balance round_robin, weight 1; websocket: idle_timeout 120s,
 * ping_interval 30s, close_timeout 5s, max_message_size 16MiB, max_queued_messages 1024;
 * reload: memory_limit 1GiB, timeout 30s.
 */
mg_config_t *mg_config_load(const char *file, mg_errors_t *errs);
/* Same from memory (tests); `name` is the file name used in messages. */
mg_config_t *mg_config_load_string(const char *name, const char *text, mg_errors_t *errs);
/* Same from `len` bytes (which may hold a NUL: the YAML reader then refuses them). */
mg_config_t *mg_config_load_text(const char *name, const char *text, size_t len, mg_errors_t *errs);
/*
 * Loads `running->file` again for a reload. NULL after recording every error (`running` is not
 * touched). On success the result has generation running->generation + 1, and the settings that
 * only take effect at start (listen addresses and TLS, workers, admin.address,
 * limits.max_request_body, limits.client_idle_timeout, limits.max_http2_streams) have
 * `running`'s values: each one the file changes is recorded as a warning at its position.
 * Opens nothing (see mg_config_open_access_log).
 */
mg_config_t *mg_config_reload(const mg_config_t *running, mg_errors_t *errs);
/* Same from memory (tests): `text` stands for the file's new content. */
mg_config_t *mg_config_reload_string(const mg_config_t *running, const char *text, mg_errors_t *errs);
/*
 * What the gateway's reloads call: mg_config_reload, but the file is read once and its bytes are
 * first checked by this binary in a child process (`--check --stdin`), under the running
 * configuration's reload.memory_limit and reload.timeout; they are loaded here only when that
 * process exits 0. Whatever the file holds, a failure (its errors, the child running out of
 * memory, crashing or running late) is recorded in `errs` and NULL returned; `running` is not
 * touched. Needs /proc/self/exe.
 */
mg_config_t *mg_config_reload_checked(const mg_config_t *running, mg_errors_t *errs);
/* The checking process's side: limits its own address space to `bytes` (0: no limit; builds
 * with AddressSanitizer never limit it) and offers it to the kernel's OOM killer first. 0, or -1
 * when the limit could not be set. */
int mg_config_limit_memory(uint64_t bytes);
/* Opens the access log named by conf->access_log (stdout for "-") into conf->access_log_fd, which
 * mg_config_free closes. 0, or -1 after recording "cannot open access log ..." in `errs`. */
int mg_config_open_access_log(mg_config_t *conf, mg_errors_t *errs);
/* Parses a listen address ("127.0.0.1:8080", "[::1]:80", ":8080" = all IPv4). 0 or -1. */
int mg_config_parse_address(const char *s, struct sockaddr_storage *ss, socklen_t *len);
/* A one-line summary for `--check`: "FILE: ok (N listeners, N backends, N routes, N workers,
 * N tenants)" (singular for 1: "1 listener"; tenants: those listed under tenants.quotas). */
void mg_config_summary(const mg_config_t *conf, char *buf, size_t size);
/* `--check --print` (print.c): the configuration as understood, every default filled in, as YAML
 * (durations in ms, sizes in bytes; the admin token left out, a bridge summed up in a comment). */
void mg_config_print(const mg_config_t *conf, FILE *out);
/* The open files limit the gateway runs with: the hard RLIMIT_NOFILE (at most fs.nr_open), which
 * it raises its soft limit to at start; the current limits in *soft and *hard (UINT64_MAX:
 * unlimited). */
uint64_t mg_config_nofile_target(uint64_t *soft, uint64_t *hard);
/* limits.max_connections: auto for an open files limit of `nofile`: three quarters of what a
 * reserve of 64 + workers x (6 + listeners) descriptors leaves (the last quarter is for backend
 * connections), at least 16. */
unsigned mg_config_auto_max_connections(uint64_t nofile, unsigned workers, size_t listeners);
/* The descriptors `conf` may need with `max_connections` client connections: the reserve, the
 * client connections, and backend connections: when every backend has a max_in_flight their sum
 * (at most one per client connection), else one per three client connections (what auto leaves). */
uint64_t mg_config_descriptors_needed(const mg_config_t *conf, unsigned max_connections);
/* Counts one request chosen for `route` by worker `worker` (any thread; relaxed). */
static inline void mg_config_route_hit(mg_config_t *conf, const mg_route_t *route, unsigned worker)
{
    mg_route_hits_t *h = &conf->route_hits;
    if (h->counts != NULL)
        atomic_fetch_add_explicit(&h->counts[(worker % h->shards) * h->stride + route->id], 1, memory_order_relaxed);
}
/* The requests `route` itself was chosen for (a branch is never chosen: it has 0). */
uint64_t mg_config_route_hits(const mg_config_t *conf, const mg_route_t *route);
/* Counts the response of a request routed to `route` by worker `worker`: its status and how long
 * it took. Routes past MG_ROUTE_METRICS_MAX are not counted. Any thread. */
void mg_config_route_response(mg_config_t *conf, const mg_route_t *route, unsigned worker, int status, uint64_t duration_us);
/* One figure of `route` summed over the shards (field: 0..MG_ROUTE_STAT_FIELDS-1); 0 for a route
 * without metrics. */
uint64_t mg_config_route_stat(const mg_config_t *conf, const mg_route_t *route, unsigned field);

/* Frees the configuration whatever its references (--check, tests, a load that is dropped). */
void mg_config_free(mg_config_t *conf);
/* The 64-bit hash of the ring (balance: hash): of a key, or of a server's virtual node. */
uint64_t mg_ring_hash(const char *data, size_t len, uint64_t seed);
/* (Re)builds b->ring from its servers and weights. 0, or -1 when out of memory. */
int mg_backend_build_ring(mg_backend_conf_t *b);
/* Takes one more reference; returns `conf`. Any thread. */
mg_config_t *mg_config_retain(mg_config_t *conf);
/* Drops one reference; the last one frees the configuration. Any thread; NULL is ignored. */
void mg_config_release(mg_config_t *conf);

/* ---------------------------------------------------------------------------------------
 * Tenants at request time (identify.c): pure functions on the routing context, unit-tested
 * without h2o.
 */

/* The quota of `tenant`: its own, else the default; NULL when it has none. */
const mg_quota_t *mg_tenants_quota(const mg_tenants_conf_t *tc, mg_str_t tenant);
/*
 * Identifies the request's tenant by the rules in order; the first non-empty value wins and is
 * stored in ctx->tenant (ctx->alloc memory when decoded). Returns 1 identified, 0 not, -1 when
 * the value found is longer than MG_TENANT_MAX_LEN or holds a control character, or when a
 * regex rule could not decide (ctx->error.reason set; a later rule does not stand in for it):
 * the request gets a 400. Leaves no variables bound.
 */
int mg_tenants_identify(const mg_tenants_conf_t *tc, mg_ctx_t *ctx);
/* The same for a request whose verified credential is `who` (NULL: none; its claims are in
 * ctx->claims): {claim: NAME} takes a claim, {api_key: tenant} an API key's tenant, and a header
 * rule is believed only from tenants.trusted_proxies when there are any. */
int mg_tenants_identify_as(const mg_tenants_conf_t *tc, mg_ctx_t *ctx, const mg_identity_t *who);

/* ---------------------------------------------------------------------------------------
 * A request made ready for the route tree (request.c): the steps between a request's head and
 * mg_routes_match that the request handler and the route tester (`matchgate route`) share.
 */

/* A request's head as the gateway received it. Strings are borrowed. */
typedef struct mg_request_head {
    mg_str_t method, scheme;    /* scheme: "http" or "https" */
    mg_str_t authority;         /* Host (HTTP/1) or :authority (HTTP/2) as sent; empty when none */
    mg_str_t path;              /* the target's path as received, before normalization, no query */
    mg_str_t query;             /* after '?', without it; empty when none */
    mg_str_t peer;              /* client address as text */
    const mg_header_t *headers; /* names lower case, hop-by-hop fields already removed */
    size_t num_headers;
    int websocket;           /* a WebSocket upgrade */
    int host_required;       /* HTTP/1.1: a request without Host is refused */
    const mg_trace_t *trace; /* copied to ctx->trace (NULL but in the route tester) */
    /* The credential (auth:): verified through this worker's cache (NULL: verified anew) at now_ms
     * (CLOCK_REALTIME), counted on shard `worker`; the result goes to *auth, which must not be NULL
     * when the configuration has authenticators. A verified one's claims become ctx->claims
     * (borrowed from auth->identity). */
    mg_auth_cache_t *auth_cache;
    int64_t now_ms;
    unsigned worker;
    mg_auth_result_t *auth;
    /* The route tester's claims given directly (--expect `claims:`), as if a credential verified
     * them; NULL otherwise. */
    const mg_identity_t *claims_given;
} mg_request_head_t;

/* Why a request is answered by the gateway before routing: status, X-Matchgate-Error code, reason.
 * `undecided`: a regex of tenants.identify hit its limit (ctx->error says which). */
typedef struct mg_refusal {
    int status;
    const char *code, *reason;
    int undecided;
} mg_refusal_t;

/* The host a route matches: the authority in lower case, without its port ("[::1]:80" keeps its
 * brackets); in `alloc` memory, NUL-terminated. */
mg_str_t mg_request_host(mg_str_t authority, const mg_alloc_t *alloc);
/*
 * Fills the routing context from the head: the path normalized (limits.escaped_slashes), the host,
 * the credential verified (head->auth), the tenant (tenants.identify, tenants.unidentified). 0 when the request may be routed; -1
 * with *why when the gateway answers it itself (400 bad path, missing Host or invalid tenant name, 401 unidentified). Allocates
 * from `alloc` only.
 */
int mg_request_prepare(const mg_config_t *conf, const mg_request_head_t *head, const mg_alloc_t *alloc, mg_ctx_t *ctx,
                       mg_refusal_t *why);

#endif
