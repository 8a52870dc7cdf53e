/*
 * routes: YAML documents read into position-carrying nodes, and the route list compiled
 * from them into a tree of matchers with terminals. Knows nothing of h2o or libcurl.
 */
#ifndef MG_ROUTES_H
#define MG_ROUTES_H

#include <pthread.h>
#include <stdatomic.h>

#include "matchers/matchers.h"
#include "throttle/throttle.h"

/* ---------------------------------------------------------------------------------------
 * Documents
 */
typedef struct mg_doc mg_doc_t;

/*
 * The bounds of a document, so that no file, however small, makes its readers use more than a
 * known amount of memory and time: its size in bytes, and, counting every alias as a copy of
 * what it stands for, its nodes (each key, value and item), the bytes of its scalars and its
 * depth. 4,000,000 nodes is twice the 100,000-route configuration of the route-match
 * benchmark (about 18 nodes a route).
 */
#define MG_DOC_MAX_FILE_BYTES (64u << 20)
#define MG_DOC_MAX_NODES 4000000u
#define MG_DOC_MAX_BYTES (64u << 20)
#define MG_DOC_MAX_DEPTH 200

/*
 * Reads one YAML document. Returns NULL after recording an error (syntax errors and
 * unreadable files name FILE:LINE:COL). Aliases are resolved (the alias node shares the
 * anchored subtree); merge keys (<<) are not supported and reported. A file past one of the
 * bounds above is refused, at the node that passes it. An empty file yields a document whose
 * root is an empty mapping.
 */
mg_doc_t *mg_doc_load_file(const char *path, mg_errors_t *errs);
/* Same, from memory; `name` is what error messages call the file. */
mg_doc_t *mg_doc_load_string(const char *name, const char *text, size_t len, mg_errors_t *errs);
/*
 * Reads the whole of `fd` (from where it is) into a new NUL-terminated buffer that the caller
 * frees; *len is its length. NULL after recording "NAME: cannot read: ..." or "NAME: larger
 * than 64 MiB" (MG_DOC_MAX_FILE_BYTES). Reloads read a file once with it, then validate and
 * load those very bytes.
 */
char *mg_doc_read_fd(int fd, const char *name, size_t *len, mg_errors_t *errs);
/* Same from the file at `path` ("PATH: cannot open: ..." when it cannot be opened). */
char *mg_doc_read_file(const char *path, size_t *len, mg_errors_t *errs);
const mg_node_t *mg_doc_root(const mg_doc_t *doc);
void mg_doc_free(mg_doc_t *doc);

/* ---------------------------------------------------------------------------------------
 * Templates (template.c): "/${tenant}/crmapp${remainder}", compiled once into literal and
 * variable pieces; expanding one never parses it again.
 *
 * Variables: ${tenant} ${host} ${path} ${query} ${method} ${remainder}, ${header.<Name>},
 * ${query.<name>} and named regex captures; in a bridge's path also ${msg.<field>}, a field of
 * the message (the `known` callback admits it; the gateway binds it as the variable
 * "msg.<field>", a plain value). Where a value lands decides its encoding: a
 * path or query target gets other values percent-encoded, a header gets decoded values.
 *
 * In a path (and a URL before its '?'), a value that is not a slice of the request path is one
 * segment's content ('/' and '\' encoded), and no segment a variable touches may be a dot
 * segment ("..", ".;x", "%2E%2E"...): so the text before a template's first variable is always
 * the start of the path it makes (see docs/configuration.md, "Templates").
 */
typedef enum mg_template_target {
    MG_TARGET_HEADER, /* a header value (also forward.host) */
    MG_TARGET_PATH,   /* rewrite_path: the result is normalized again */
    MG_TARGET_QUERY,  /* set_query */
    MG_TARGET_URL,    /* redirect location */
} mg_template_target_t;

typedef struct mg_template mg_template_t;

/* Whether variable `name` (a capture or `remainder`) can be bound where the template is used. */
typedef int (*mg_template_known_t)(void *arg, mg_str_t name);

/* Compiles the string in scalar `node`. An unknown variable, "${" without "}" or an empty
 * name is an error at the node naming the variable. */
mg_template_t *mg_template_compile(const mg_node_t *node, mg_template_target_t target, mg_template_known_t known, void *arg,
                                   mg_errors_t *errs);
/* Why mg_template_expand refused a value; the request gets a 400 and nothing is sent. */
enum {
    MG_TEMPLATE_CRLF = -1,        /* a value would put CR, LF or NUL anywhere */
    MG_TEMPLATE_CONTROL = -2,     /* a header value would hold another control character than tab (0x01-0x1F, 0x7F) */
    MG_TEMPLATE_DOT_SEGMENT = -3, /* in a path, a segment a variable touches would be "." or ".." (mg_path_dot_segment) */
};

/* Expands into ctx->alloc memory (NUL-terminated). 0, or one of the MG_TEMPLATE_* errors. */
int mg_template_expand(const mg_template_t *t, const mg_ctx_t *ctx, mg_str_t *out);
/* What an MG_TEMPLATE_* error means, for the client's 400 ("the value would contain ..."). */
const char *mg_template_strerror(int err);
/* The template as written. */
mg_str_t mg_template_source(const mg_template_t *t);
/* 1 with its text in *out ("$$" unescaped, NUL-terminated) when the template has no variable:
 * its value needs no expansion; 0 otherwise. */
int mg_template_literal(const mg_template_t *t, mg_str_t *out);
/* What the template's value can vary with: 0 when it is literal text only; the bit
 * MG_TEMPLATE_TENANT when it uses ${tenant} (no capture of that name can shadow it); the bit
 * MG_TEMPLATE_RESPONSE when it uses ${status} or ${response.header.<Name>} (response actions);
 * the bit MG_TEMPLATE_REQUEST when it uses anything else (headers, path, query, captures, ...). */
#define MG_TEMPLATE_TENANT 1u
#define MG_TEMPLATE_REQUEST 2u
#define MG_TEMPLATE_RESPONSE 4u
unsigned mg_template_varies(const mg_template_t *t);
void mg_template_free(mg_template_t *t);

/* ---------------------------------------------------------------------------------------
 * Routes
 */
typedef enum mg_route_kind {
    MG_ROUTE_BRANCH,   /* `routes:` children */
    MG_ROUTE_FORWARD,  /* `forward: NAME` or `{backend: NAME, host: H}` */
    MG_ROUTE_RESPOND,  /* `respond: {status, body, headers}` */
    MG_ROUTE_REDIRECT, /* `redirect: {location: T, status: 301|302|307|308}` */
    MG_ROUTE_BRIDGE,   /* `bridge: {...}`: a WebSocket terminated at the gateway, each message one backend request */
} mg_route_kind_t;

/* One entry of a bridge's `method: {map: ...}`: the operation value a message names, and the
 * HTTP method its request uses. */
/* The prefix of the variables a bridge binds to a message's fields: ${msg.<field>}. */
#define MG_BRIDGE_MSG_PREFIX "msg."
#define MG_BRIDGE_MSG_PREFIX_LEN (sizeof(MG_BRIDGE_MSG_PREFIX) - 1)

typedef struct mg_bridge_method {
    char *value;
    char *method;
} mg_bridge_method_t;

typedef enum mg_action_kind {
    MG_ACTION_SET_HEADER,    /* replaces every header of that name */
    MG_ACTION_ADD_HEADER,    /* appends one more */
    MG_ACTION_REMOVE_HEADER, /* value is NULL */
    MG_ACTION_REWRITE_PATH,  /* keeps the query */
    MG_ACTION_SET_METHOD,
    MG_ACTION_SET_QUERY,
} mg_action_kind_t;

typedef struct mg_action {
    mg_action_kind_t kind;
    unsigned always;      /* a response action written with `always: true`: also on the answers the gateway makes */
    mg_str_t name;        /* header actions: the header, lower case; set_method: the method; owned */
    mg_template_t *value; /* NULL for remove_header and set_method; a response action's may use ${status} and
                           * ${response.header.<Name>} */
} mg_action_t;

typedef struct mg_route mg_route_t;

/* `forward: {split: [...], sticky: T}` (split.c): the legs of a weighted traffic split. */
#define MG_SPLIT_MAX_LEGS 16
#define MG_SPLIT_MAX_WEIGHT 1000000u
typedef struct mg_split_leg {
    char *backend_name; /* owned by the route list (mg_routes_t.backend_names) */
    void *backend;      /* what the resolver returned */
    uint32_t file_weight;
    _Atomic uint32_t weight; /* in force: the file's, or what the admin API set */
    uint64_t salt;           /* the leg's part of a sticky key's hash */
} mg_split_leg_t;

/* `canary: {to, steps, interval, min_requests, max_error_ratio, max_p99}` on a split (split.c): the
 * split's weight moved to one leg step by step, or back to 0, by the figures of its backend. */
#define MG_CANARY_MAX_STEPS 16
#define MG_CANARY_HISTORY 32
#define MG_CANARY_BASELINE 16 /* what the gateway keeps of the leg's figures at a step's start */

typedef enum mg_canary_state {
    MG_CANARY_RUNNING,
    MG_CANARY_PAUSED,
    MG_CANARY_PROMOTED,    /* at 100: over */
    MG_CANARY_ROLLED_BACK, /* its figures went out of bounds: the leg at 0, over */
    MG_CANARY_ABORTED,     /* an operator set it to 0: over */
} mg_canary_state_t;

typedef enum mg_canary_verdict {
    MG_CANARY_HOLD, /* fewer than min_requests since the step began: wait */
    MG_CANARY_NEXT, /* within bounds: the next step */
    MG_CANARY_BACK, /* out of bounds: back to 0 */
} mg_canary_verdict_t;

typedef struct mg_canary_decision {
    int64_t at_ms;    /* CLOCK_REALTIME */
    uint32_t percent; /* the canary leg's share when it was taken */
    uint64_t requests, errors;
    uint64_t p99_us;      /* UINT64_MAX: past the histogram's last bound; 0: no answer timed */
    const char *decision; /* "hold", "next", "promoted", "rolled_back", "paused", "resumed", "promote", "abort" */
} mg_canary_decision_t;

typedef struct mg_canary {
    size_t to; /* the leg it moves weight to */
    uint32_t steps[MG_CANARY_MAX_STEPS];
    size_t num_steps;
    uint64_t interval_ms, min_requests, max_p99_us;
    double max_error_ratio;
    /* where it stands: written by the thread that decides (the prober's) and by the admin API,
     * under `lock` */
    pthread_mutex_t lock;
    mg_canary_state_t state;
    size_t step;
    uint64_t next_at_ms; /* mg_health_clock's: the next decision */
    uint64_t baseline[MG_CANARY_BASELINE];
    mg_canary_decision_t history[MG_CANARY_HISTORY]; /* a ring: the latest MG_CANARY_HISTORY decisions */
    size_t num_history;
} mg_canary_t;

typedef struct mg_route_split {
    mg_split_leg_t *legs;
    size_t num_legs;
    mg_template_t *sticky; /* NULL: each request draws */
    mg_canary_t *canary;   /* NULL: none */
} mg_route_split_t;

/* The verdict on a step's figures (no lock: the caller holds it or owns the canary). */
mg_canary_verdict_t mg_canary_judge(const mg_canary_t *c, uint64_t requests, uint64_t errors, uint64_t p99_us);
/* Sets the split's weights for a canary leg share of `percent` (0..100): the canary leg gets it,
 * the others the rest in proportion to their file weights. */
void mg_canary_set_share(mg_route_split_t *s, uint32_t percent);
/* Records a decision in the history ring (the caller holds the lock). */
void mg_canary_record(mg_canary_t *c, const mg_canary_decision_t *d);

/* `mirror: [...]` on a forward route (mirror.c): copies of a share of its requests sent to other
 * backends, whose answers are read and dropped. */
#define MG_MIRROR_MAX 4
#define MG_MIRROR_DEFAULT_IN_FLIGHT 100
#define MG_MIRROR_DEFAULT_TIMEOUT_MS 5000
#define MG_MIRROR_DEFAULT_MAX_BODY (1u << 20)
typedef struct mg_route_mirror {
    char *backend_name; /* owned by the route list (mg_routes_t.backend_names) */
    void *backend;
    uint32_t percent;       /* 0..100 of the route's requests */
    mg_template_t *sticky;  /* NULL: a request is drawn; else its key decides, always the same way */
    uint32_t max_in_flight; /* copies at the mirror at once, all workers; beyond it a copy is dropped */
    uint64_t timeout_ms;
    uint64_t max_body;  /* a request with a larger body is not mirrored */
    int compare_status; /* `compare: status`: count the copies whose status class differs from the answer's */
    /* counters (all workers, relaxed): copies sent and in flight, those dropped (in flight full,
     * body too large), the mirror's answers by class ([0]: none came, [1..5]: 1xx..5xx), and those
     * whose class differed from the answer's */
    _Atomic uint64_t mirrored, dropped_full, dropped_body, answers[6], differed;
    _Atomic uint32_t in_flight;
} mg_route_mirror_t;

typedef struct mg_route_mirrors {
    mg_route_mirror_t *items;
    size_t size;
} mg_route_mirrors_t;

/* 1 when mirror `m` copies this request: all of them at 100 percent, else a draw from `random`,
 * or its sticky key's (one key always the same way). */
int mg_mirror_takes(const mg_route_mirror_t *m, const mg_ctx_t *ctx, uint64_t random);

/* The leg of a request: drawn by weight from `random` (any 64 bits), or the one its sticky key
 * (expanded into *key, in ctx->alloc memory; base NULL when it draws) sticks to. A key that cannot
 * be made or is empty draws. */
size_t mg_split_choose(const mg_route_split_t *s, const mg_ctx_t *ctx, uint64_t random, mg_str_t *key);
size_t mg_split_draw(const mg_route_split_t *s, uint64_t random);
size_t mg_split_sticky(const mg_route_split_t *s, mg_str_t key);
/* Sets the weights in force, one per leg in order: -1 (nothing set) when there are not as many as
 * legs, one is over MG_SPLIT_MAX_WEIGHT or they add up to 0. */
int mg_split_set_weights(mg_route_split_t *s, const uint32_t *weights, size_t n);
/* 1 when two splits are written the same (legs, file weights, sticky): a reload that keeps one
 * keeps the weights set at run time (mg_split_keep_weights). */
int mg_split_same(const mg_route_split_t *a, const mg_route_split_t *b);
void mg_split_keep_weights(mg_route_split_t *to, const mg_route_split_t *from);

/* `respond: {status, body, headers}` (MG_ROUTE_RESPOND). */
typedef struct mg_route_respond {
    int status;
    char *body;
    size_t body_len;
    mg_header_t *headers; /* names lower case; strings owned by the route */
    size_t num_headers;
} mg_route_respond_t;

/* `redirect: {location: T, status: 301|302|307|308}` (MG_ROUTE_REDIRECT). */
typedef struct mg_route_redirect {
    mg_template_t *location;
    int status;
} mg_route_redirect_t;

/* `bridge:` (MG_ROUTE_BRIDGE): each text message of the WebSocket, a JSON object, becomes one
 * request to the backend. */
typedef struct mg_route_bridge {
    char *backend_name;          /* owned by the route list (mg_routes_t.backend_names) */
    void *backend;               /* what the resolver returned */
    mg_template_t *path;         /* MG_TARGET_PATH; may use ${msg.<field>} besides the route's variables */
    char *method_from;           /* the message field naming the operation; NULL: always method_default */
    mg_bridge_method_t *methods; /* `map`: operation value -> HTTP method, sorted by value */
    size_t num_methods;
    char *method_default; /* NULL: an operation the map lacks makes the message bad (400) */
    char *body_field;     /* NULL: the whole message is the body */
    char *priority_from;  /* NULL: every message has normal priority */
    char **priority_high; /* the values of priority_from that mean high */
    size_t num_priority_high;
    /* the variables ${msg.<field>} the path uses, each once, by their whole name ("msg.id"):
     * the message's field is the name past MG_BRIDGE_MSG_PREFIX */
    char **msg_vars;
    size_t num_msg_vars;
} mg_route_bridge_t;

/* `quota: {requests, per, key}`. */
typedef struct mg_route_quota {
    mg_quota_t limit;   /* limit.requests != 0 */
    mg_template_t *key; /* NULL: the request's tenant */
} mg_route_quota_t;

/* `order: {key: T, priority_header: H}`: requests whose key expands to the same non-empty value
 * run one at a time at the backend, in arrival order. Applies to the route and its children; the
 * nearest one up the tree wins (mg_route_order). */
typedef struct mg_route_order {
    mg_template_t *key;    /* NULL only after an error */
    char *priority_header; /* lower case; NULL: every request has normal priority */
    size_t priority_header_len;
} mg_route_order_t;

/* `auth:` on a route (auth.c). */
typedef enum mg_route_auth_mode {
    MG_ROUTE_AUTH_INHERIT,  /* not written: the parent's applies (none at the top) */
    MG_ROUTE_AUTH_NONE,     /* `none`: no credential needed; one that fails is ignored */
    MG_ROUTE_AUTH_OPTIONAL, /* `optional`: none is fine, a verified one of any authenticator too; a failed one is 401 */
    MG_ROUTE_AUTH_REQUIRED, /* `NAME` or `[NAMES]`: a credential verified by one of them, else 401 */
} mg_route_auth_mode_t;

/* `auth:` (which verified credentials the route accepts: it and its children, the nearest one up
 * the tree wins) and `require:` (conditions a verified credential must meet, else 403; those of
 * the ancestors apply too: mg_route_requires). */
typedef struct mg_route_auth {
    mg_route_auth_mode_t mode; /* INHERIT when only `require:` is written */
    char **names;              /* MG_ROUTE_AUTH_REQUIRED: the authenticators accepted, as written */
    size_t num_names;
    uint64_t accept;       /* ... as bits of their index under the top-level `auth:` (the configuration sets them) */
    unsigned line, column; /* where `auth:` was written */
    mg_matcher_t **require;
    size_t num_require;
} mg_route_auth_t;

/* ---------------------------------------------------------------------------------------
 * What a route does to its answer: `response:` actions (response.c), `cors:` (cors.c) and
 * `compress:` (compress.c), written on a route or a branch for it and its children.
 */

typedef struct mg_cors mg_cors_t; /* cors.c */

/* `compress:` (compress.c), at the top level, on a route or a branch. Each key is inherited on its
 * own (mg_compress_resolve): `set` says which ones this mapping writes. */
#define MG_COMPRESS_DEFAULT_MIN_SIZE 1024u
#define MG_COMPRESS_DEFAULT_GZIP_LEVEL 5
#define MG_COMPRESS_DEFAULT_BROTLI_QUALITY 4
#define MG_COMPRESS_DEFAULT_MAX_MEMORY (64u << 20)
#define MG_COMPRESS_SET_TYPES 1u
#define MG_COMPRESS_SET_MIN_SIZE 2u
#define MG_COMPRESS_SET_GZIP 4u
#define MG_COMPRESS_SET_BROTLI 8u
#define MG_COMPRESS_SET_ALL 15u
typedef struct mg_compress {
    unsigned off; /* `compress: off`: writes no key, and stops compression where it is the nearest */
    unsigned set; /* MG_COMPRESS_SET_*: the keys written here */
    char **types; /* media types, lower case; "text/..." ending in a star for a whole type, or star-slash-star for any */
    size_t num_types;
    uint64_t min_size;   /* an answer whose length is known and smaller goes as it is */
    int gzip_level;      /* 1..9; -1: gzip is not offered */
    int brotli_quality;  /* 0..11; -1: brotli is not offered */
    uint64_t max_memory; /* top level only: the encoders' memory, all answers of the process together */
    unsigned line, column;
} mg_compress_t;

/* The settings that apply to one answer, each key resolved (mg_compress_resolve); borrowed from the
 * configuration. */
typedef struct mg_compress_settings {
    const char *const *types;
    size_t num_types;
    uint64_t min_size;
    int gzip_level;
    int brotli_quality;
} mg_compress_settings_t;

typedef enum mg_coding {
    MG_CODING_IDENTITY,
    MG_CODING_GZIP,
    MG_CODING_BROTLI,
} mg_coding_t;

/* Reads the top-level `compress:` (also `max_memory`); NULL after recording errors. */
mg_compress_t *mg_compress_read_top(const mg_node_t *node, mg_errors_t *errs);
void mg_compress_free(mg_compress_t *c);
/* 1 when a Content-Type value (parameters ignored) is one of s->types. */
int mg_compress_wants_type(const mg_compress_settings_t *s, mg_str_t content_type);
/* The coding the client's Accept-Encoding prefers among those `s` offers (q-values, "*" for the
 * codings not named, q=0 refusing one; brotli at equal q), or MG_CODING_IDENTITY. */
mg_coding_t mg_compress_choose(const mg_compress_settings_t *s, mg_str_t accept_encoding);
/* "gzip", "br", "identity": the Content-Encoding token. */
const char *mg_coding_name(mg_coding_t coding);
/* 1 when a Cache-Control value holds the no-transform directive (any case; quoted arguments of
 * other directives skipped). */
int mg_cache_control_no_transform(mg_str_t value);

/* What the decision to compress an answer looks at, gathered by the gateway from the answer's head
 * and the request. */
typedef struct mg_compress_facts {
    int status;
    unsigned head : 1;         /* the client's method or the one sent is HEAD: no body goes */
    unsigned encoded : 1;      /* the answer has a Content-Encoding already */
    unsigned no_transform : 1; /* its Cache-Control says no-transform */
    unsigned http10 : 1;       /* the client speaks HTTP/1.0 */
    mg_str_t content_type;     /* base NULL: none */
    uint64_t length;           /* of the body; UINT64_MAX when not known (streamed) */
    mg_str_t accept_encoding;  /* the client's; base NULL when it sent none */
} mg_compress_facts_t;

/* The decision, and else why not (the label of matchgate_compress_skipped_total). */
typedef enum mg_compress_skip {
    MG_COMPRESS_YES,
    MG_COMPRESS_SKIP_STATUS,       /* 1xx, 204, 205, 206, 3xx */
    MG_COMPRESS_SKIP_ENCODED,      /* Content-Encoding present */
    MG_COMPRESS_SKIP_NO_TRANSFORM, /* Cache-Control: no-transform */
    MG_COMPRESS_SKIP_TYPE,         /* no Content-Type, or one not in `types` */
    MG_COMPRESS_SKIP_SIZE,         /* known length below min_size, or 0 */
    MG_COMPRESS_SKIP_METHOD,       /* HEAD */
    MG_COMPRESS_SKIP_HTTP_VERSION, /* an HTTP/1.0 client */
    MG_COMPRESS_SKIP_NOT_ACCEPTED, /* Accept-Encoding accepts no coding offered */
    MG_COMPRESS_SKIP_MEMORY,       /* compress.max_memory is held by other answers (decided by the gateway) */
    MG_COMPRESS_NUM_SKIPS
} mg_compress_skip_t;

/* Decides for one answer under settings `s`: MG_COMPRESS_YES with *coding the coding to use, or
 * why not. *vary is 1 when the answer depends on Accept-Encoding (`Vary: Accept-Encoding` is due,
 * whether this one is compressed or not), 0 when no request could get it compressed. */
mg_compress_skip_t mg_compress_decide(const mg_compress_settings_t *s, const mg_compress_facts_t *f, mg_coding_t *coding,
                                      int *vary);
/* "status", "encoded", ...: the reason's label (empty for MG_COMPRESS_YES). */
const char *mg_compress_skip_label(mg_compress_skip_t why);

/* What one route writes of the above (mg_route_t.response): each part NULL when not written. */
typedef struct mg_route_response {
    mg_action_t *actions; /* set_header, add_header and remove_header on the answer */
    size_t num_actions;
    mg_cors_t *cors;
    mg_compress_t *compress;
    /* of its actions and of those up the tree (set at load): some read the request's context;
     * there are some; some are `always` */
    unsigned needs_ctx : 1, has_actions : 1, has_always : 1;
} mg_route_response_t;

/*
 * A route. What most routes have is in the struct; each part only some routes write is a
 * pointer, NULL when the route has none (a 100,000-route file pays for what it uses:
 * docs/performance.md, "What a route costs"). The fields a match reads come first.
 */
struct mg_route {
    mg_matcher_t *match; /* NULL: always matches */
    mg_route_kind_t kind;
    int needs_claims; /* its condition tests a claim: it never matches a request without a verified credential */
    mg_route_t **children;
    size_t num_children;
    struct mg_route_index *index; /* for the children; NULL when linear evaluation is as fast */
    const mg_route_t *parent;
    char *name;       /* in the route's own allocation */
    size_t id;        /* 0 .. mg_routes_count() - 1: depth first, in file order (counters are indexed by it) */
    const char *file; /* the document's file name (owned by mg_routes_t) */
    unsigned line, column;
    mg_action_t *actions; /* applied in order when this route or one of its children is chosen */
    size_t num_actions;
    struct {
        char *backend_name;      /* owned by the route list (mg_routes_t.backend_names) */
        void *backend;           /* what the resolver returned for backend_name */
        mg_template_t *host;     /* NULL: keep the client's Host (see mg_route_result_t.host) */
        mg_route_split_t *split; /* NULL: one backend; else backend_name and backend are NULL */
    } forward;
    mg_route_respond_t *respond;   /* MG_ROUTE_RESPOND (else NULL) */
    mg_route_redirect_t *redirect; /* MG_ROUTE_REDIRECT */
    mg_route_bridge_t *bridge;     /* MG_ROUTE_BRIDGE */
    mg_route_quota_t *quota;       /* NULL: the route has no quota */
    mg_route_order_t *order;       /* NULL: the route sets no ordering */
    const mg_route_t *order_from;  /* the route whose `order` applies here (set at load), or NULL */
    mg_route_auth_t *auth;         /* NULL: neither `auth:` nor `require:` */
    const mg_route_t *auth_from;   /* the route whose `auth` applies here (set at load), or NULL: none */
    mg_route_mirrors_t *mirrors;   /* NULL: no `mirror:` (a forward route's only) */
    mg_route_response_t *response; /* NULL: neither `response:`, `cors:` nor `compress:` */
    /* the nearest route up the tree, itself included, with `response` (set at load), or NULL: a
     * request on a route that edits no answer pays one test */
    const mg_route_t *response_from;
};

/* The `auth:` mode `r` itself writes: INHERIT when it writes none. */
static inline mg_route_auth_mode_t mg_route_auth_mode(const mg_route_t *r)
{
    return r->auth != NULL ? r->auth->mode : MG_ROUTE_AUTH_INHERIT;
}

typedef struct mg_route_index mg_route_index_t;

typedef struct mg_routes {
    mg_route_t **routes; /* top level, in order */
    size_t size;
    char *file;
    mg_route_index_t *index; /* for the top level; NULL when linear evaluation is as fast */
    /* one copy of each backend name the routes use (forward.backend_name and bridge->backend_name
     * point at it): 100,000 routes to one backend need not hold 100,000 copies */
    struct mg_keytab *backend_names;
    int edits_answers;     /* some route has response:, cors: or compress: */
    mg_route_t **canaries; /* the routes whose split has a canary, in file order */
    size_t num_canaries;
} mg_routes_t;

/* Maps a backend name used by `forward` or `bridge` to the caller's backend object; NULL = undefined. */
typedef void *(*mg_backend_resolver_t)(void *arg, const char *name);

/*
 * Compiles the `routes:` sequence. Route names must be unique across the whole tree; every
 * route has exactly one terminal (forward, bridge, respond, redirect) or `routes`; templates may only
 * use variables the conditions of their route or its ancestors can bind. Backend names are resolved
 * through `resolve` (an unknown name is an error at its position). Returns NULL after
 * recording errors; warnings (routes that can never match) may be recorded on success.
 */
mg_routes_t *mg_routes_compile(const mg_node_t *seq, mg_backend_resolver_t resolve, void *arg, mg_errors_t *errs);

/*
 * First match, depth first: a branch is entered when its condition holds; if none of its
 * children matches, evaluation continues after it, with the variables it bound undone.
 * Returns the chosen leaf route (never a branch) or NULL. On NULL, ctx->num_vars is as on entry.
 * A condition that cannot be decided (MG_MATCH_ERROR: a regex hit its limit) stops the
 * evaluation: NULL with ctx->error.reason set and ctx->error.route naming the route; the caller
 * must refuse the request, not answer "no route".
 */
const mg_route_t *mg_routes_match(const mg_routes_t *routes, mg_ctx_t *ctx);

/* The same result by plain linear evaluation, without the index (tests, fuzzing). */
const mg_route_t *mg_routes_match_linear(const mg_routes_t *routes, mg_ctx_t *ctx);

/* What applying a chosen route produced besides the edits to the context. */
typedef struct mg_route_result {
    int headers_changed; /* ctx->headers is a new array (in ctx->alloc memory) */
    mg_str_t host;       /* forward: the Host to send, or empty to keep the client's */
    mg_str_t location;   /* redirect: the expanded location */
    const char *error;   /* on -1: why, for the 400 body ("header 'x-a' would contain CR or LF") */
} mg_route_result_t;

/*
 * Applies the actions of `leaf` and of its ancestors, root first, each in order, to the
 * context: later actions see the effect of earlier ones (${path} after rewrite_path is the
 * new path). Then expands the terminal's templates. 0, or -1 when a value would contain CR,
 * LF or NUL or a rewritten path leaves the root: the request must get a 400. A bridge's path
 * is not expanded here: it needs a message (the gateway expands it per message).
 */
int mg_route_apply(const mg_route_t *leaf, mg_ctx_t *ctx, mg_route_result_t *res);

/*
 * Reads a quota, `{requests: N, per: D}` (N in 1..MG_QUOTA_MAX_REQUESTS, D from 1ms to 24h),
 * into *out. `keys` lists the keys allowed in the mapping (NULL: requests and per). 0, or -1
 * after recording errors at their positions.
 */
int mg_quota_read(const mg_node_t *node, const char *const *keys, mg_quota_t *out, mg_errors_t *errs);

/* The key `route`'s quota counts the request under: its quota.key expanded, else the tenant. An
 * empty key is not counted (nginx's rule for limit_req keys). 0, or an MG_TEMPLATE_* error (the
 * request gets a 400: a key that cannot be made must not escape the quota). */
int mg_route_quota_key(const mg_route_t *route, const mg_ctx_t *ctx, mg_str_t *key);

/* The `order:` that applies to `leaf`: its own, else its nearest ancestor's; NULL when none. */
const mg_route_t *mg_route_order(const mg_route_t *leaf);

/* The `auth:` mode that applies to `leaf` (its own, else its nearest ancestor's; NONE when none
 * does), and the route that wrote it in *from (NULL for none). */
mg_route_auth_mode_t mg_route_auth(const mg_route_t *leaf, const mg_route_t **from);

/*
 * The `require:` conditions of `leaf` and of its ancestors, root first, each tested on `ctx` (which
 * must hold claims): 1 when all hold (also when there are none), 0 when one does not, with *failed
 * pointing at it, MG_MATCH_ERROR when one could not be decided. Binds nothing.
 */
int mg_route_requires(const mg_route_t *leaf, mg_ctx_t *ctx, const mg_matcher_t **failed);
/* 1 when `leaf` or an ancestor has `require:`. */
int mg_route_has_requires(const mg_route_t *leaf);

/*
 * The response actions of `leaf` and of its ancestors, root first, each list in order, applied to
 * the answer `res`'s fields (through res->ops; later actions see
 * the effect of earlier ones in ${response.header.<Name>}); only the `always` ones when
 * `gateway_made`. An action whose value cannot be made (a variable would put CR, LF or a control
 * character into it) is left out, counted in *failed. Returns 1 when the headers changed.
 */
int mg_route_response_apply(const mg_route_t *leaf, mg_ctx_t *ctx, int gateway_made, mg_ctx_response_t *res, unsigned *failed);
/* 1 when `leaf` or an ancestor has response actions (that `gateway_made` answers get: only those
 * with `always`). */
int mg_route_has_response_actions(const mg_route_t *leaf, int gateway_made);
/* 1 when a response action of `leaf` or of an ancestor reads the request's context (a variable
 * other than ${status} and ${response.header.<Name>}): the context must outlive the request path. */
int mg_route_response_needs_ctx(const mg_route_t *leaf);

/* An answer's fields in an array (fields.c), edited through mg_fields_array_ops (mg_ctx_response_t
 * .fields points at it): the route tool's and the tests' answers. Names lower case; the array
 * grows in `alloc` memory. */
typedef struct mg_fields {
    mg_header_t *items;
    size_t size, capacity;
    mg_alloc_t alloc;
} mg_fields_t;
extern const mg_fields_ops_t mg_fields_array_ops;

/* What editing an answer came to besides its fields. */
typedef struct mg_answer_edit {
    unsigned failed;  /* response actions left out: a variable would have split the value */
    int cors_refused; /* the request's Origin is one the route's CORS policy refuses */
} mg_answer_edit_t;

/*
 * The whole edit of `leaf`'s answer `res`, in the order the gateway makes it: the CORS fields of an
 * actual request with Origin `origin` (base NULL: none) when a `cors:` applies (the answer's own
 * Access-Control-* fields dropped, Vary merged into one list), then the response actions
 * (mg_route_response_apply). Returns 1 when res->headers changed (a new array in ctx->alloc).
 */
int mg_route_answer_edit(const mg_route_t *leaf, mg_ctx_t *ctx, mg_str_t origin, int gateway_made, mg_ctx_response_t *res,
                         mg_answer_edit_t *edit);

/* The `cors:` that applies to `leaf` (its own, else its nearest ancestor's), or NULL. */
const mg_cors_t *mg_route_cors(const mg_route_t *leaf);
/* The `compress:` that applies to `leaf` (its own, else its nearest ancestor's; it may say `off`),
 * or NULL: the top-level one applies. */
const mg_compress_t *mg_route_compress(const mg_route_t *leaf);
/* The compression settings of an answer on `leaf` (NULL: no route), `top` being the top-level
 * `compress:` (NULL when not written): 0 when nothing is compressed there (no `compress:` applies,
 * or the nearest says `off`); else 1 and *out holds each key from the nearest `compress:` that
 * writes it (the route's, its ancestors', then `top`), or its default. */
int mg_compress_resolve(const mg_route_t *leaf, const mg_compress_t *top, mg_compress_settings_t *out);

/*
 * CORS decisions (cors.c), as the Fetch standard's CORS protocol has them. An answer is the
 * fields to add (values borrowed from the policy and the request) and, when the request is not
 * allowed, why: it then gets no Access-Control-* field at all (the browser blocks it), only Vary
 * when the answer depends on the origin.
 */
#define MG_CORS_MAX_HEADERS 6
typedef struct mg_cors_answer {
    mg_header_t headers[MG_CORS_MAX_HEADERS]; /* names lower case */
    size_t num_headers;
    const char *refusal; /* NULL: allowed; else "the origin is not allowed", ... */
    mg_str_t refused;    /* the request header that was refused, when that was the reason */
} mg_cors_answer_t;

/* 1 when `origin` (the request's Origin; base NULL when it sent none) may read the answers. */
int mg_cors_allows_origin(const mg_cors_t *c, mg_str_t origin);
/* 1 when the policy's answers depend on the request's Origin (Vary: Origin): always but for "*"
 * without credentials. */
int mg_cors_varies(const mg_cors_t *c);
/* The answer to a preflight with Origin `origin`, Access-Control-Request-Method `method` and
 * Access-Control-Request-Headers `request_headers` (base NULL when absent). */
void mg_cors_preflight(const mg_cors_t *c, mg_str_t origin, mg_str_t method, mg_str_t request_headers, mg_cors_answer_t *a);
/* The fields of the answer to an actual request with Origin `origin` (base NULL: none). */
void mg_cors_actual(const mg_cors_t *c, mg_str_t origin, mg_cors_answer_t *a);

/* The policy as a YAML flow mapping `cors:` reads again (--check --print), snprintf-style:
 * returns the length needed. */
size_t mg_cors_describe(const mg_cors_t *c, char *buf, size_t size);

/* Why the gateway refuses to let a response action set or remove header `name` (framing,
 * hop-by-hop, Date, the body's coding, the request id), or NULL when it does not. */
const char *mg_response_header_refusal(const char *name);

/* Why the gateway refuses to let a route (or forward_claims) set request header `name` (framing,
 * hop-by-hop, the ones it writes itself), or NULL when it does not. */
const char *mg_header_refusal(const char *name);

/* 1 when the request's priority header value asks for high priority ("high", any case). */
int mg_order_is_high(mg_str_t value);

/*
 * The HTTP method of a bridge message whose method.from field holds `value` (pass an empty
 * value when the message lacks the field): the mapped method, else method_default. NULL: the
 * message is bad (400). Owned by the route.
 */
const char *mg_bridge_method(const mg_route_t *r, mg_str_t value);

/* 1 when a bridge message whose priority.from field holds `value` has high priority. */
int mg_bridge_is_high(const mg_route_t *r, mg_str_t value);

/* The route of that name anywhere in the tree (branches included), or NULL. Walks the tree:
 * for admin calls, not per request. */
const mg_route_t *mg_routes_find(const mg_routes_t *routes, const char *name);

/* Number of routes in the whole tree (branches included). */
size_t mg_routes_count(const mg_routes_t *routes);

void mg_routes_free(mg_routes_t *routes);

#endif
