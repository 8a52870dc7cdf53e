/*
 * routes internals shared by its source files (not a public door: other modules use
 * routes.h): the per-list route index (index.c), the can-never-match checks run while a
 * list is compiled (check.c), and the string hash both use with the string-keyed table of
 * the checks (keytab.c), and reading actions (actions.c) and the respond and bridge terminals
 * (respond.c, bridge.c).
 */
#ifndef MG_ROUTES_INTERNAL_H
#define MG_ROUTES_INTERNAL_H

#include "routes/routes.h"

/*
 * Reads an `actions:` sequence (actions.c) and appends what it holds to *actions / *num (one
 * entry per header of set_header, add_header and remove_header, in the order written). Templates
 * are checked against `known`. Errors are recorded and reading goes on; -1 when there were any.
 * What was appended belongs to the caller even then (free it with mg__actions_free).
 */
int mg__actions_compile(const mg_node_t *seq, mg_template_known_t known, void *arg, mg_action_t **actions, size_t *num,
                        mg_errors_t *errs);
void mg__actions_free(mg_action_t *actions, size_t num);
/* Reads a `response:` sequence (actions.c) the same way: set_header, add_header and remove_header
 * items, each with an optional `always: BOOL` beside its action; templates may also use ${status}
 * and ${response.header.<Name>}. */
int mg__response_actions_compile(const mg_node_t *seq, mg_template_known_t known, void *arg, mg_action_t **actions, size_t *num,
                                 mg_errors_t *errs);
/* Applies header action `a` (value: its expanded value, unused by remove_header) to the fields
 * *headers / *num: a copy in `alloc` memory with every field of a->name removed and, for set and
 * add, the new one where the first was (set) or at the end (add, or set of an absent field); the
 * input is never written. Returns 1 when *headers changed, 0 when there was nothing to remove. */
int mg__headers_edit(const mg_action_t *a, mg_str_t value, mg_alloc_t *alloc, const mg_header_t **headers, size_t *num);
/* Comma-separated lists (fields.c): the next item of `list` from *pos on (spaces and tabs around
 * it skipped), 0 when there is none left; and 1 when `list` holds `token` (any case). */
int mg__list_next(mg_str_t list, size_t *pos, mg_str_t *item);
int mg__list_has(mg_str_t list, mg_str_t token);

/* Checks that scalar `node` is a method as set_method takes it (an upper-case token such as GET
 * or PURGE); -1 after recording an error at the node. */
int mg__method_check(const mg_node_t *node, mg_errors_t *errs);

/* Calls `fn` with the name of each variable of `t` that is neither a builtin nor a header or
 * query parameter (captures, remainder, msg.<field>), in order, repeats included. */
void mg__template_each_var(const mg_template_t *t, void (*fn)(void *arg, mg_str_t name), void *arg);

/* ---------------------------------------------------------------------------------------
 * A compiled template (template.c compiles it, expand.c expands it)
 */
typedef enum mg_piece_kind {
    MG_PIECE_LITERAL,
    MG_PIECE_TENANT,
    MG_PIECE_HOST,
    MG_PIECE_PATH,
    MG_PIECE_QUERY,
    MG_PIECE_METHOD,
    MG_PIECE_VAR,             /* remainder, a named capture or a bridge's msg.<field> (bound by the gateway) */
    MG_PIECE_HEADER,          /* ${header.<Name>}: text is the lower-case name */
    MG_PIECE_QUERY_PARAM,     /* ${query.<name>}: text is the parameter name */
    MG_PIECE_CLAIM,           /* ${claim.<name>}: text is the claim's (dotted) name */
    MG_PIECE_STATUS,          /* ${status}: the answer's status (response actions only) */
    MG_PIECE_RESPONSE_HEADER, /* ${response.header.<Name>}: text is the lower-case name (response actions only) */
} mg_piece_kind_t;

typedef struct mg_piece {
    mg_piece_kind_t kind;
    mg_template_target_t target; /* how values are written: a URL's are a path's, a query's after its '?' */
    int may_be_bound;            /* a builtin that a capture of the same name shadows */
    mg_str_t text;               /* literal text or name, in the template's `strings` */
} mg_piece_t;

struct mg_template {
    mg_template_target_t target;
    size_t num_vars; /* pieces that are not literals */
    char *source;    /* as written, NUL-terminated */
    size_t source_len;
    char *strings; /* literal texts ("$$" unescaped) and names */
    mg_piece_t *pieces;
    size_t num_pieces;
};

typedef enum mg_value_form {
    MG_FORM_PLAIN,
    MG_FORM_ENCODED,
    MG_FORM_QUERY_VALUE,
    MG_FORM_OPAQUE,
} mg_value_form_t;

/* ---------------------------------------------------------------------------------------
 * Reading terminals
 */

/* What reading a terminal needs from the route compiler: backends, and the variables the
 * route's conditions (and its ancestors') can bind. */
typedef struct mg_route_env {
    mg_backend_resolver_t resolve;
    void *resolve_arg;
    mg_template_known_t known;
    void *known_arg;
    mg_errors_t *errs;
    mg_routes_t *routes; /* the list being compiled (its backend names) */
} mg_route_env_t;

/* Reads a backend name (routes.c): *name gets the list's one copy of it (routes->backend_names),
 * *backend what the resolver returned. An undefined backend is an error at the node. */
void mg__route_read_backend(const mg_route_env_t *env, const mg_node_t *node, char **name, void **backend);

/* A zeroed part of a route (r->respond, r->bridge, ...) of `size` bytes; aborts when out of
 * memory, as compiling does (routes.c). */
void *mg__route_part(size_t size);

/* Reads a string scalar into *out (routes.c); -1 (error recorded) when it is not one. */
int mg__read_str(const mg_node_t *node, mg_str_t *out, mg_errors_t *errs);

/* Reads `respond: {...}` (respond.c) into a new r->respond and makes `r` a respond route.
 * Errors are recorded and reading goes on; what was read belongs to `r` even then. */
void mg__respond_read(mg_errors_t *errs, mg_route_t *r, const mg_node_t *v);
void mg__respond_free(mg_route_respond_t *respond);

/* Reads `bridge: {...}` (bridge.c) into a new r->bridge and makes `r` a bridge. Errors are
 * recorded and reading goes on; what was read belongs to `r` even then (mg__bridge_free). */
void mg__bridge_read(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *v);
void mg__bridge_free(mg_route_bridge_t *bridge);

/* Reads a route's `compress:` (compress.c): `off` or {...} without max_memory; NULL after errors. */
mg_compress_t *mg__compress_read(const mg_node_t *node, mg_errors_t *errs);
void mg__compress_free(mg_compress_t *c);

/* Reads forward's `split:` sequence, its `sticky:` and `canary:` (split.c; NULL when not written);
 * NULL after recording errors at their positions. */
mg_route_split_t *mg__split_read(const mg_route_env_t *env, const mg_node_t *seq, const mg_node_t *sticky,
                                 const mg_node_t *canary);
void mg__split_free(mg_route_split_t *split);

/* A 64-bit hash of the bytes as they are (a sticky key's case counts: unlike mg__hash), `salt`
 * mixed in: FNV-1a, then splitmix64's finalizer (split.c; the mirrors' sticky keys too). */
uint64_t mg__bytes_hash(mg_str_t s, uint64_t salt);

/* Reads a route's `mirror:` sequence (mirror.c); NULL after recording errors at their positions. */
mg_route_mirrors_t *mg__mirrors_read(const mg_route_env_t *env, const mg_node_t *seq);
void mg__mirrors_free(mg_route_mirrors_t *mirrors);

/* Reads `cors: {...}` (cors.c); NULL after recording errors at their positions. */
mg_cors_t *mg__cors_read(const mg_node_t *map, mg_errors_t *errs);
void mg__cors_free(mg_cors_t *cors);

/* Reads `response:`, `cors:` and `compress:` (response.c) into r->response (left NULL when the
 * route has none of them), and sets r->response_from (the parent's must be set). Errors are
 * recorded and reading goes on; what was read belongs to `r` even then. */
void mg__route_response_read(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *map);
void mg__route_response_free(mg_route_response_t *response);

/* Reads `auth:` and `require:` (auth.c) into r->auth (left NULL when the route has neither), and
 * sets r->auth_from (the parent's must be set). Errors are recorded and reading goes on; what was
 * read belongs to `r` even then (mg__route_auth_free). */
void mg__route_auth_read(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *map);
void mg__route_auth_free(mg_route_auth_t *auth);

/* ---------------------------------------------------------------------------------------
 * Evaluation of one route (routes.c)
 */

/*
 * Tries route `r` exactly as the linear loop does: its condition, then (for a branch) its
 * children, each list through its index when it has one (`indexed`) or linearly. Returns
 * the chosen leaf or NULL; on NULL, ctx->num_vars is as on entry.
 */
const mg_route_t *mg__route_try(const mg_route_t *r, mg_ctx_t *ctx, int indexed);

/* ---------------------------------------------------------------------------------------
 * Route index (index.c)
 */

/* A route list this long gets an index (the top level and a branch's children alike). */
#define MG_ROUTE_INDEX_MIN_ROUTES 8
/* A path prefix with more segments than this is not indexed by path (its route is a
 * candidate for every request of its host bucket); it bounds the lists met per request. */
#define MG_ROUTE_INDEX_MAX_DEPTH 16

/*
 * Builds the index of `list`. The routes must outlive it (a one-route list points at its
 * route); the list array need not. Each route is filed under what its own condition requires
 * (mg_matcher_get_keys): an exact host and/or an exact path or a path prefix. Never fails
 * (aborts when memory runs out).
 */
mg_route_index_t *mg__route_index_build(mg_route_t *const *list, size_t size);

/*
 * First match in `list` (the list the index was built from), with the semantics of the
 * linear loop: candidates are tried in list order with mg__route_try; a route that is not
 * a candidate cannot match the request. Never allocates.
 */
const mg_route_t *mg__route_index_match(const mg_route_index_t *index, mg_route_t *const *list, mg_ctx_t *ctx);

void mg__route_index_free(mg_route_index_t *index);

/* ---------------------------------------------------------------------------------------
 * Can-never-match warnings (check.c), one checker per route list, fed in order.
 */
typedef struct mg_route_check mg_route_check_t;

mg_route_check_t *mg__route_check_new(void);
/*
 * Adds route `r`, the next of its list. When an earlier route of the list catches every
 * request `r` could match, records a warning naming both; otherwise, when `r` itself
 * catches what its condition matches, remembers it for the routes after it.
 */
void mg__route_check_add(mg_route_check_t *check, const mg_route_t *r, mg_errors_t *errs);
void mg__route_check_free(mg_route_check_t *check);

/* ---------------------------------------------------------------------------------------
 * A hash table from (space, string) to an item with two uint32 values (keytab.c). `space`
 * separates kinds of keys in one table (a host bucket and a path kind, say). Strings are
 * borrowed. Hosts are looked up with `fold` (ASCII case-insensitive); the hash always folds,
 * so the same string hashes the same either way.
 */
typedef struct mg_keytab_item {
    mg_str_t key;
    uint32_t space;
    uint32_t a, b; /* the caller's values */
} mg_keytab_item_t;

typedef struct mg_keytab {
    struct mg_keytab_slot {
        uint32_t item; /* index + 1; 0: empty */
        uint32_t tag;  /* high bits of the hash, to skip most items without reading them */
    } * slots;
    mg_keytab_item_t *items;
    size_t size, capacity; /* items */
    size_t mask;           /* slots - 1; slots: 0 or a power of two */
} mg_keytab_t;

#define MG_HASH_INIT 14695981039346656037u /* FNV-1a offset basis */

/* One more byte of the string, case-folded (so a hash can be carried along a walk). */
static inline uint64_t mg__hash_step(uint64_t h, char c)
{
    unsigned char u = (unsigned char)c;
    u = (u >= 'A' && u <= 'Z') ? (unsigned char)(u + 32) : u;
    return (h ^ u) * 1099511628211u;
}

/* The hash of (space, string) once every byte has been stepped in. */
static inline uint64_t mg__hash_finish(uint64_t h, uint32_t space)
{
    h ^= (uint64_t)space * 0x9e3779b97f4a7c15u;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9u; /* splitmix64's finalizer: every bit counts */
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebu;
    return h ^ (h >> 31);
}

uint64_t mg__hash(uint32_t space, mg_str_t s);

/* The item of (space, key) whose hash is `hash` (from mg__hash), or NULL. */
const mg_keytab_item_t *mg__keytab_find(const mg_keytab_t *t, uint64_t hash, uint32_t space, mg_str_t key, int fold);
/* Finds or adds (values 0) the item of (space, key); *added says which. Case-sensitive. */
mg_keytab_item_t *mg__keytab_add(mg_keytab_t *t, uint32_t space, mg_str_t key, int *added);
void mg__keytab_free(mg_keytab_t *t);

#endif
