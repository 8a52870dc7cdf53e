/*
 * matchers: the routing context, the matcher node kinds behind one small vtable, and the
 * position-carrying configuration node they are compiled from.
 *
 * This module knows nothing of h2o, libcurl or YAML. The configuration node (mg_node_t)
 * lives here, below routes/, because every matcher kind compiles itself from one; routes/
 * owns the YAML reader that produces the nodes.
 */
#ifndef MG_MATCHERS_H
#define MG_MATCHERS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Strings: a pointer and a length, not NUL-terminated unless stated.
 */
typedef struct mg_str {
    const char *base;
    size_t len;
} mg_str_t;

#define MG_STR(lit) ((mg_str_t){(lit), sizeof(lit) - 1})
#define MG_STR_NULL ((mg_str_t){NULL, 0})

static inline mg_str_t mg_str(const char *base, size_t len)
{
    return (mg_str_t){base, len};
}

/* strcmp's order between `a` and the C string `b` (for bsearch over sorted names). `a` may hold
 * NUL bytes (a JSON string, a decoded value): it is compared by length, never read past. */
static inline int mg_str_compare(mg_str_t a, const char *b)
{
    size_t len = strlen(b), n = a.len < len ? a.len : len;
    int c = n != 0 ? memcmp(a.base, b, n) : 0;
    return c != 0 ? c : a.len < len ? -1 : a.len > len;
}

/* A NUL-terminated copy of s[0..len) (which may hold NUL bytes), malloc'ed; NULL when out of
 * memory. */
char *mg_copy(const char *s, size_t len);
/* The same where running out of memory is fatal (compiling a configuration, as PCRE2's compiler
 * does): aborts rather than return NULL. */
char *mg_copy_or_abort(const char *s, size_t len);

/* RFC 9110 5.6.2 tchar by byte (strings.c): a table, because every header name of every request
 * is checked with it and a strchr per '-' showed in profiles. */
extern const unsigned char mg_tchar_table[256];

/* RFC 9110 5.6.2 tchar: 1 when `c` may appear in a token (header names, methods). */
static inline int mg_is_tchar(char c)
{
    return mg_tchar_table[(unsigned char)c];
}

/* 1 when s[0..len) is a non-empty token (RFC 9110 5.6.2): a header name, a method. */
static inline int mg_is_token(const char *s, size_t len)
{
    for (size_t i = 0; i != len; ++i)
        if (!mg_is_tchar(s[i]))
            return 0;
    return len != 0;
}

/* 1 when s[0..len) is a field value of RFC 9110 5.5: visible characters, obs-text (bytes above
 * 127), SP and HTAB; no other control character (so no CR, LF, NUL or DEL). */
static inline int mg_is_field_value(const char *s, size_t len)
{
    for (size_t i = 0; i != len; ++i) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------
 * Errors and warnings collected while loading a configuration. Every message is
 * "FILE:LINE:COL: text"; nothing is printed until the caller decides.
 */
typedef struct mg_errors {
    struct mg_error_entry {
        char *text;
        int warning;
    } * entries;
    size_t size, capacity;
    size_t num_errors, num_warnings;
} mg_errors_t;

typedef struct mg_node mg_node_t;

/* Records an error at the position of `at` (which may be NULL: no position is printed). */
void mg_errors_add(mg_errors_t *errs, const mg_node_t *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Records an error at an explicit position (for syntax errors found before a node exists). */
void mg_errors_add_at(mg_errors_t *errs, const char *file, unsigned line, unsigned column, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Records a warning; warnings never make a configuration invalid. */
void mg_errors_warn(mg_errors_t *errs, const mg_node_t *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prints every entry, one per line, warnings prefixed with "warning: " after the position. */
void mg_errors_print(const mg_errors_t *errs, FILE *out);
/* Frees the messages; the struct itself can be reused (it is zero afterwards). */
void mg_errors_clear(mg_errors_t *errs);

/* ---------------------------------------------------------------------------------------
 * Configuration nodes: a YAML-shaped tree that remembers where every value was written.
 * Nodes are owned by the document that produced them (see routes.h, mg_doc_t); compile
 * functions must copy what they keep.
 */
typedef enum mg_node_kind {
    MG_NODE_SCALAR,
    MG_NODE_SEQUENCE,
    MG_NODE_MAPPING,
} mg_node_kind_t;

typedef struct mg_node_pair {
    mg_node_t *key; /* always a scalar */
    mg_node_t *value;
} mg_node_pair_t;

struct mg_node {
    mg_node_kind_t kind;
    const char *file;      /* shared by all nodes of a document */
    unsigned line, column; /* 1-based */
    union {
        struct {
            char *str; /* NUL-terminated */
            size_t len;
            int plain; /* written without quotes: `null`, `true`, `~` keep their special meaning */
        } scalar;
        struct {
            mg_node_t **items;
            size_t size;
        } sequence;
        struct {
            mg_node_pair_t *pairs;
            size_t size;
        } mapping;
    } u;
};

/* The name of a kind for messages: "a scalar", "a sequence", "a mapping". */
const char *mg_node_kind_name(mg_node_kind_t kind);

/*
 * Reports every key of mapping `map` that is not in the NULL-terminated list `allowed`
 * ("unknown key 'tiemout' (did you mean 'timeout'?)"), and every key given twice.
 * `allowed` may be NULL when the keys are names chosen by the user: only duplicates are
 * reported then. Returns the number of problems found (0 = all keys known).
 */
int mg_node_check_keys(const mg_node_t *map, const char *const *allowed, mg_errors_t *errs);
/* The value under `key` in mapping `map`, or NULL when `map` is NULL, not a mapping or lacks the key. */
const mg_node_t *mg_node_get(const mg_node_t *map, const char *key);
/* 0 when `node` is of `kind`; otherwise records "expected K, got K'" and returns -1. */
int mg_node_expect(const mg_node_t *node, mg_node_kind_t kind, mg_errors_t *errs);
/* Like mg_node_get, but records "missing key 'K'" at `map` when absent. */
const mg_node_t *mg_node_require(const mg_node_t *map, const char *key, mg_errors_t *errs);

/* Typed readers: 0 on success; -1 after recording an error at the node's position. */
int mg_node_to_str(const mg_node_t *node, const char **out, mg_errors_t *errs);
int mg_node_to_uint(const mg_node_t *node, uint64_t min, uint64_t max, uint64_t *out, mg_errors_t *errs);
int mg_node_to_bool(const mg_node_t *node, int *out, mg_errors_t *errs);
int mg_node_to_duration(const mg_node_t *node, uint64_t *ms, mg_errors_t *errs);
int mg_node_to_size(const mg_node_t *node, uint64_t *bytes, mg_errors_t *errs);

/*
 * Raw parsers used by the readers above. Durations: "250ms", "5s", "2m", "1h" (an integer
 * and a unit; a bare integer is refused so "30" cannot silently mean ms or s). Sizes: "512",
 * "64KiB", "10MiB", "1GiB" (also KB/MB/GB as powers of 1000). 0 on success, -1 when malformed
 * or out of range (uint64).
 */
int mg_parse_duration(const char *s, size_t len, uint64_t *ms);
int mg_parse_size(const char *s, size_t len, uint64_t *bytes);

/* The candidate closest to `word`, or NULL: at most 2 edits away and at most a third of the
 * word's length (rounded up), an adjacent swap counting as one edit; ties go to the first. */
const char *mg_closest_word(const char *word, const char *const *candidates);

/* ---------------------------------------------------------------------------------------
 * The routing context: the request as the route tree sees it, plus the variables captured
 * so far. Built per request by the gateway; all strings are borrowed from the request.
 */
typedef struct mg_header {
    mg_str_t name; /* lower case */
    mg_str_t value;
} mg_header_t;

/* A variable's value is borrowed from the request. MG_VAR_ENCODED: it is percent-encoded (a
 * slice of the normalized path or of the query): templates decode it before inserting it
 * anywhere but a path, and always check its decoded form for CR, LF and NUL. */
#define MG_VAR_ENCODED 1

typedef struct mg_var {
    mg_str_t name;
    mg_str_t value;
    int flags;
} mg_var_t;

/* Request-lifetime memory (an h2o pool in the gateway, an arena in tests and benchmarks).
 * Never returns NULL. Matching uses it only to decode a %-escaped query value. */
typedef struct mg_alloc {
    void *(*fn)(void *arg, size_t size);
    void *arg;
} mg_alloc_t;

static inline void *mg_alloc(const mg_alloc_t *a, size_t size)
{
    return a->fn(a->arg, size);
}

#define MG_CTX_MAX_VARS 32

/*
 * A condition that could not be decided: a regex that hit a PCRE2 limit matched neither way.
 * Matchers return MG_MATCH_ERROR for it (1 is a match, 0 no match), and the first failure is
 * described in mg_ctx_t.error for the log line. The request must then be refused: choosing a
 * route as if it were "no match" would let a deny rule fail open.
 */
#define MG_MATCH_ERROR (-1)

typedef struct mg_match_error {
    const char *reason; /* NULL: no failure; else "hit the match limit", "hit the depth limit", ... */
    mg_str_t pattern;   /* the regex */
    const char *route;  /* the route whose condition it was (set by routes/), or NULL */
} mg_match_error_t;

typedef struct mg_matcher mg_matcher_t;
typedef struct mg_ctx mg_ctx_t;

/*
 * The claims of a verified credential (gateway/auth/ makes them from a token's payload or an API
 * key's line): every value of the JSON object, flattened. A member of a nested object is named by
 * its dotted path ("realm_access.roles"); each element of an array is one more entry under the
 * array's name, after an MG_CLAIM_ARRAY entry for the array itself (so an empty array is present).
 * Sorted by name; the entries of one name keep their order in the document.
 */
typedef enum mg_claim_type {
    MG_CLAIM_STRING, /* value: the decoded string (may hold any byte but NUL) */
    MG_CLAIM_NUMBER, /* value: its JSON text ("42", "1.5") */
    MG_CLAIM_BOOL,   /* "true" or "false" */
    MG_CLAIM_NULL,   /* "null" */
    MG_CLAIM_OBJECT, /* value empty: its members follow under "name.<member>" */
    MG_CLAIM_ARRAY,  /* value empty: its elements follow under the same name */
} mg_claim_type_t;

typedef struct mg_claim {
    mg_str_t name;
    mg_str_t value;
    mg_claim_type_t type;
} mg_claim_t;

typedef struct mg_claims {
    const mg_claim_t *items;
    size_t size;
} mg_claims_t;

/* 1 for the types a condition or a template compares as text (string, number, bool, null). */
static inline int mg_claim_is_scalar(const mg_claim_t *c)
{
    return c->type <= MG_CLAIM_NULL;
}

/* The entries named `name`: the index of the first one (*count of them in a row), or claims->size
 * with *count 0 when there is none. */
size_t mg_claims_find(const mg_claims_t *claims, mg_str_t name, size_t *count);
/* The first scalar value named `name` (what ${claim.NAME} and tenants.identify's {claim: NAME}
 * take), or NULL when there is none (or `claims` is NULL). */
const mg_str_t *mg_claims_value(const mg_claims_t *claims, mg_str_t name);

/*
 * An explain hook (the route tester, `matchgate route`): when mg_ctx_t.trace is set, evaluation
 * reports what it tries, as it tries it, through the very code that routes requests. NULL (what
 * the gateway sets) costs one test per condition.
 *   condition: after each condition was evaluated (children of all/any/not first), with its
 *              result (1, 0 or MG_MATCH_ERROR) and the context it was tested on;
 *   route:     routes/ reports each route tried (an mg_route_t, opaque here) with the result of its
 *              condition, and MG_TRACE_BRANCH_EXHAUSTED when a branch whose condition held had no
 *              child that matched (evaluation moves on after it).
 */
#define MG_TRACE_BRANCH_EXHAUSTED 2

typedef struct mg_trace {
    void (*condition)(void *arg, const mg_matcher_t *m, int result, const mg_ctx_t *ctx);
    void (*route)(void *arg, const void *route, int result, const mg_ctx_t *ctx);
    void *arg;
} mg_trace_t;

/*
 * The answer's fields as response actions edit them, through whoever holds them (the gateway:
 * h2o's list; the route tool and the tests: an array, routes/fields.c). Names are lower case.
 *   get:       the value of the first field named `name`, or NULL;
 *   edit:      MG_ACTION_SET_HEADER (the first field of the name gets `value`, the others go; added
 *              when there is none), MG_ACTION_ADD_HEADER, MG_ACTION_REMOVE_HEADER (every field of
 *              the name); `kind` is an mg_action_kind_t (routes.h); 1 when the fields changed;
 *   drop_cors: removes every Access-Control-* field;
 *   vary:      adds `token` to the answer's Vary list (one field), unless it is there or "*" is.
 */
typedef struct mg_fields_ops {
    const mg_str_t *(*get)(void *fields, mg_str_t name);
    int (*edit)(void *fields, int kind, mg_str_t name, mg_str_t value);
    void (*drop_cors)(void *fields);
    void (*vary)(void *fields, mg_str_t token);
} mg_fields_ops_t;

/* The answer, for the templates of response actions (${status}, ${response.header.<Name>}); NULL
 * in the context of a request. */
typedef struct mg_ctx_response {
    int status;
    char status_text[4]; /* the status as ${status} writes it */
    const mg_fields_ops_t *ops;
    void *fields;
} mg_ctx_response_t;

struct mg_ctx {
    mg_str_t method;
    mg_str_t scheme; /* "http" or "https" */
    mg_str_t host;   /* lower case, port removed */
    mg_str_t path;   /* normalized (see mg_path_normalize), no query */
    mg_str_t query;  /* after '?', without it; empty when absent */
    mg_str_t peer;   /* client address as text */
    const mg_header_t *headers;
    size_t num_headers;
    int websocket;   /* the request is a WebSocket upgrade */
    mg_str_t tenant; /* empty when unidentified */
    /* the verified credential's claims; NULL when the request has none (no credential, or one that
     * failed): every claim condition is then unknown (see mg_matcher_needs) */
    const mg_claims_t *claims;
    mg_alloc_t alloc;
    mg_var_t vars[MG_CTX_MAX_VARS];
    size_t num_vars;
    mg_match_error_t error;            /* zero until a condition could not be decided */
    const mg_trace_t *trace;           /* NULL but in the route tester */
    const mg_ctx_response_t *response; /* NULL but while response actions are applied */
};

/* Binds `name` to `value` (a later binding shadows an earlier one). -1 when the table is full. */
int mg_ctx_set_var(mg_ctx_t *ctx, mg_str_t name, mg_str_t value);
/* Same with flags (MG_VAR_ENCODED). */
int mg_ctx_set_var_flags(mg_ctx_t *ctx, mg_str_t name, mg_str_t value, int flags);
/* The latest binding of `name`, or NULL. */
const mg_str_t *mg_ctx_get_var(const mg_ctx_t *ctx, mg_str_t name);
/* The latest binding of `name` with its flags, or NULL. */
const mg_var_t *mg_ctx_find_var(const mg_ctx_t *ctx, mg_str_t name);
/* The first header named `name` (lower case), or NULL. */
const mg_str_t *mg_ctx_get_header(const mg_ctx_t *ctx, mg_str_t name);

/*
 * Normalizes a request path (without query) into `out`, which must hold `len + 1` bytes:
 * percent-encoded unreserved characters are decoded (other escapes kept, hex upper-cased, so
 * "%2F" stays an escape and never becomes a segment boundary), "//" collapses, dot segments
 * (see mg_path_dot_segment: ".", "..", ".;x", "..;x" once decoded) are resolved. Returns the
 * length written, or -1 when the path does not start with '/', has a malformed escape, or
 * when ".." would climb above the root.
 */
long mg_path_normalize(const char *in, size_t len, char *out);

/* mg_path_normalize_ex flags. The client's path is refused when it holds '\', %2F or %5C
 * (limits.escaped_slashes: reject); paths the gateway makes itself keep them. */
#define MG_PATH_REJECT_ESCAPED_SLASHES 1
/* mg_path_normalize_ex's result when MG_PATH_REJECT_ESCAPED_SLASHES refused the path. */
#define MG_PATH_ESCAPED_SLASH (-2)

/* mg_path_normalize with `flags`; -1 as mg_path_normalize, or MG_PATH_ESCAPED_SLASH. */
long mg_path_normalize_ex(const char *in, size_t len, char *out, int flags);

/*
 * 1 or 2 when segment s[0..len) (no '/' inside) is a dot segment, "." or "..": its name, the
 * part before its first ';', is one or two dots, each written '.' or "%2E" (either case).
 * ".;x" and "..;jsessionid=1" are dot segments (Tomcat and Spring drop ";params" before
 * resolving dots); "...", ".x", "%252E" and "" are not (0).
 */
int mg_path_dot_segment(const char *s, size_t len);

/* The value of hexadecimal digit `c` (either case), or -1. */
int mg_hex_value(char c);

/*
 * Percent-decodes `in` into `out` (which must hold `len` bytes); with `plus`, '+' means a
 * space (query strings). Malformed escapes are kept as written. Returns the length written.
 */
size_t mg_percent_decode(const char *in, size_t len, char *out, int plus);

/*
 * The first value of query parameter `name` (compared after decoding) in `query` (without
 * '?'), still encoded; `*found` says whether it was there ("?a" and "?a=" give an empty
 * value). Parameters are split on '&'.
 */
mg_str_t mg_query_param(mg_str_t query, mg_str_t name, int *found);
/*
 * Every occurrence of parameter `name`, in order: finds the next one at or after byte `*pos`
 * of `query` (start with 0), stores its value (still encoded) in *value, moves *pos past it and
 * returns 1; returns 0 when there is none left.
 */
int mg_query_param_next(mg_str_t query, mg_str_t name, size_t *pos, mg_str_t *value);

/* ---------------------------------------------------------------------------------------
 * Matchers: one kind per file behind this vtable. Adding a kind is adding a file and a line
 * in the table in matcher.c.
 */

/*
 * What a condition requires of every request it matches, for the route index and the
 * can-never-match warnings. Empty strings mean "no requirement of that kind".
 */
typedef struct mg_matcher_keys {
    mg_str_t host;   /* an exact host (lower case) the request must have */
    mg_str_t path;   /* a normalized path the request must have (exact) or start with (prefix) */
    int path_prefix; /* path is a prefix on segment boundaries ("" = "/") */
    int has_path;
    int complete; /* the condition tests nothing but these keys */
} mg_matcher_keys_t;

typedef struct mg_matcher_ops {
    const char *name; /* the condition's key in YAML: "path", "all", ... */
    /* Compiles `arg` (the value under the key) into self->data. 0 or -1 (errors recorded). */
    int (*compile)(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs);
    /* 1 when the request matches, 0 when it does not, MG_MATCH_ERROR when that cannot be decided
     * (ctx->error says why). May bind variables; the caller undoes them on anything but 1. */
    int (*match)(const mg_matcher_t *self, mg_ctx_t *ctx);
    /* Frees self->data (self itself is freed by mg_matcher_free). */
    void (*dispose)(mg_matcher_t *self);
    /* Writes a JSON value describing the matcher, snprintf-style; returns the length needed. */
    size_t (*describe)(const mg_matcher_t *self, char *buf, size_t size);
    /* Optional: adds what every match requires to *keys (which starts zeroed with complete=1).
     * A kind without it makes the keys incomplete. */
    void (*keys)(const mg_matcher_t *self, mg_matcher_keys_t *keys);
    /* Optional: 1 when a successful match may bind variable `name` (templates are checked
     * against this at load: an unknown variable is a configuration error). */
    int (*binds)(const mg_matcher_t *self, mg_str_t name);
    /* Optional: what the condition needs of a request besides its head (MG_NEEDS_* bits; a kind
     * without it needs nothing). */
    unsigned (*needs)(const mg_matcher_t *self);
    /* Optional: when not 0, self->data is this many zeroed bytes in the matcher's own allocation,
     * there before compile; dispose frees what they point to, never them. 0: compile allocates
     * self->data and dispose frees it. (One allocation less per condition: 16 bytes or more of
     * every route, docs/performance.md, "What a route costs".) */
    size_t data_size;
} mg_matcher_ops_t;

/* The condition tests a claim: a request without a verified credential is unknown to it, and the
 * route holding it never matches such a request, whatever `not` or `any` stand around the test
 * (routes.c checks this before evaluating: `not: {claim: ...}` must not let anonymous requests
 * in). */
#define MG_NEEDS_CLAIMS 1u

struct mg_matcher {
    const mg_matcher_ops_t *ops;
    void *data;
    const char *file;
    unsigned line, column;
};

/*
 * Compiles a condition: a mapping with one key naming the kind (`{path: {prefix: /api}}`);
 * a mapping with several keys means all of them. Returns NULL after recording errors.
 */
mg_matcher_t *mg_matcher_compile(const mg_node_t *cond, mg_errors_t *errs);
/*
 * 1 on match, 0 otherwise, MG_MATCH_ERROR when undecidable; on anything but 1 every variable
 * bound during the attempt is undone. Combinators follow three-valued logic, so that an
 * undecidable part only decides when nothing else does: `all` is 0 when a part is 0, else
 * MG_MATCH_ERROR when a part is; `any` is 1 when a part is 1, else MG_MATCH_ERROR when a part
 * is; `not` of MG_MATCH_ERROR is MG_MATCH_ERROR (never a match).
 */
int mg_matcher_match(const mg_matcher_t *m, mg_ctx_t *ctx);
size_t mg_matcher_describe(const mg_matcher_t *m, char *buf, size_t size);
/* What every request matched by `m` has (see mg_matcher_keys_t); `m` may be NULL (always). */
void mg_matcher_get_keys(const mg_matcher_t *m, mg_matcher_keys_t *keys);
/* 1 when a match of `m` may bind `name`. */
int mg_matcher_binds(const mg_matcher_t *m, mg_str_t name);
/* What `m` and every condition inside it need (MG_NEEDS_* bits); 0 for NULL. */
unsigned mg_matcher_needs(const mg_matcher_t *m);
void mg_matcher_free(mg_matcher_t *m);
/* The kinds known, NULL-terminated (for "did you mean" and docs). */
extern const char *const mg_matcher_kind_names[];

/*
 * mg_matcher_compile records cond->file in every matcher it makes, so those matchers must not
 * outlive the document. This variant records `file` instead (a copy the caller keeps as long
 * as the matchers, e.g. mg_routes_t.file).
 */
mg_matcher_t *mg_matcher_compile_in(const mg_node_t *cond, const char *file, mg_errors_t *errs);

/* ---------------------------------------------------------------------------------------
 * For kind implementations (matchers/<kind>.c), not for callers of the module.
 */

/* self->data of the list kinds (all, any): the compiled child conditions, in order. */
typedef struct mg_matcher_list {
    mg_matcher_t **items;
    size_t size;
} mg_matcher_list_t;

/* compile/dispose/describe for list kinds (their data_size is sizeof(mg_matcher_list_t)): a
 * non-empty sequence of conditions, compiled with self->file; describe writes
 * {"<kind>":[child, ...]}. */
int mg_matcher_list_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs);
/* Same from a mapping whose every key/value pair is one condition (the implicit `all`). */
int mg_matcher_list_compile_pairs(mg_matcher_t *self, const mg_node_t *map, mg_errors_t *errs);
void mg_matcher_list_dispose(mg_matcher_t *self);
/* binds for list kinds: any child may bind it. */
int mg_matcher_list_binds(const mg_matcher_t *self, mg_str_t name);
/* needs for list kinds: what any child needs. */
unsigned mg_matcher_list_needs(const mg_matcher_t *self);
size_t mg_matcher_list_describe(const mg_matcher_t *self, char *buf, size_t size);

/*
 * describe() helpers: append at offset `off` of buf[0..size), snprintf-style. They write what
 * fits, keep the buffer NUL-terminated when size > 0, and return the offset the whole text
 * would end at, so calls chain and the last one returns the length needed.
 */
size_t mg_matcher_describe_text(char *buf, size_t size, size_t off, const char *text);
/* `s` as a JSON string, quoted and escaped. */
size_t mg_matcher_describe_str(char *buf, size_t size, size_t off, mg_str_t s);
/* A child matcher's description. */
size_t mg_matcher_describe_child(char *buf, size_t size, size_t off, const mg_matcher_t *child);

/*
 * The test of `path: value` (exact) or `path: {prefix: value}` on ctx->path, `value` normalized
 * and, for a prefix, without its trailing '/' ("/" is ""). A prefix holds on segment
 * boundaries and binds `remainder` (still %-encoded, MG_VAR_ENCODED); a full variable table
 * makes it fail. path.c's matcher and the route index's fast path both answer through it.
 *
 * `value` holds no ';'. The path is compared as its "key" (see mg_path_skip_params): with the
 * ";params" of its segments ignored, so "/admin;x" and "/admin;x/y" are under {prefix: /admin},
 * as Tomcat and Spring resolve them. `remainder` is a slice of the path itself, params kept
 * ("/y" for "/admin;x/y").
 */
int mg_path_test(mg_str_t value, int prefix, mg_ctx_t *ctx);

/*
 * Walking a normalized path as its key, the text path conditions and the route index compare:
 * every segment's ";params" dropped, and a segment left empty by that ("/;x/") collapsed like
 * "//" (a last one leaves its '/': "/a/;x" is "/a/"). Returns the first index at or after `i`
 * whose byte belongs to the key (i itself when path[i] is not ';'), or path.len. Call it
 * before reading each byte: the key is the bytes read that way.
 */
size_t mg_path_skip_params(mg_str_t path, size_t i);

/*
 * Regular expressions (regex.c): PCRE2, compiled and JIT-compiled at load. Matching uses match
 * data owned by the calling thread (created on its first match, freed when it exits), so a
 * match never allocates.
 */
typedef struct mg_regex mg_regex_t;

/* The bounds of one match (see regex.c): backtracking steps, the interpreter's backtracking depth
 * and heap, and each thread's JIT stack. */
#define MG_REGEX_MATCH_LIMIT 1000000u
#define MG_REGEX_DEPTH_LIMIT 250000u
#define MG_REGEX_HEAP_LIMIT (32u << 20)
#define MG_REGEX_JIT_STACK (8u << 20)

/* Compiles the string in scalar `node`; a bad pattern is an error at the node naming the offset
 * ("invalid regex at offset 5: missing closing parenthesis"). Flags: MG_REGEX_CASELESS (host
 * names), MG_REGEX_WHOLE (the pattern must match the whole subject, not a part of it: CORS
 * origins, where a pattern that matched a part would let "https://example.com.evil.net" in). */
#define MG_REGEX_CASELESS 1
#define MG_REGEX_WHOLE 2
mg_regex_t *mg_regex_compile(const mg_node_t *node, int flags, mg_errors_t *errs);
/* 1 on match; named groups that took part are bound as variables with `var_flags`. On 0 (or
 * when the variable table is full, which counts as no match) nothing is bound. MG_MATCH_ERROR
 * when the match hit one of the limits above (or found no memory for its match data): nothing
 * is bound, and ctx->error names the pattern and the limit unless an earlier failure did. */
int mg_regex_match(const mg_regex_t *re, mg_str_t subject, mg_ctx_t *ctx, int var_flags);
/* 1 when the pattern has a named group `name`. */
int mg_regex_binds(const mg_regex_t *re, mg_str_t name);
/* The pattern as written. */
mg_str_t mg_regex_pattern(const mg_regex_t *re);
void mg_regex_free(mg_regex_t *re);
/* Frees the calling thread's match data now (the next match makes a new one). Threads that
 * exit need not call it; the main thread's is never freed otherwise, because exit() runs no
 * thread-specific destructors: call it before exit when a leak checker must see nothing. */
void mg_regex_thread_release(void);

#endif
