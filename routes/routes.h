/*
 * routes: YAML documents read into position-carrying nodes, and the route list compiled
 * from them into a tree of matchers with terminals. Knows nothing of h2o or libcurl.
 */
#ifndef MG_ROUTES_H
#define MG_ROUTES_H

#include "matchers/matchers.h"

/* ---------------------------------------------------------------------------------------
 * Documents
 */
typedef struct mg_doc mg_doc_t;

/*
 * Reads one YAML document. Returns NULL after recording an error (syntax errors and
 * unreadable files name FILE:LINE:COL). Aliases are resolved (the alias node shares the
 * anchored subtree); merge keys (<<) are not supported and reported. An empty file yields a
 * document whose root is an empty mapping.
 */
mg_doc_t *mg_doc_load_file(const char *path, mg_errors_t *errs);
/* Same, from memory; `name` is what error messages call the file. */
mg_doc_t *mg_doc_load_string(const char *name, const char *text, size_t len, mg_errors_t *errs);
const mg_node_t *mg_doc_root(const mg_doc_t *doc);
void mg_doc_free(mg_doc_t *doc);

/* ---------------------------------------------------------------------------------------
 * Routes
 */
typedef enum mg_route_kind {
    MG_ROUTE_BRANCH,  /* `routes:` children */
    MG_ROUTE_FORWARD, /* `forward: NAME` or `{backend: NAME, host: H}` */
    MG_ROUTE_RESPOND, /* `respond: {status, body, headers}` */
} mg_route_kind_t;

typedef struct mg_route mg_route_t;

struct mg_route {
    char *name;
    const char *file; /* the document's file name (owned by mg_routes_t) */
    unsigned line, column;
    mg_matcher_t *match; /* NULL: always matches */
    mg_route_kind_t kind;
    struct {
        char *backend_name;
        void *backend; /* what the resolver returned for backend_name */
        char *host;    /* NULL: keep the client's Host */
    } forward;
    struct {
        int status;
        char *body;
        size_t body_len;
        mg_header_t *headers; /* names lower case; strings owned by the route */
        size_t num_headers;
    } respond;
    mg_route_t **children;
    size_t num_children;
    const mg_route_t *parent;
};

typedef struct mg_routes {
    mg_route_t **routes; /* top level, in order */
    size_t size;
    char *file;
} mg_routes_t;

/* Maps a backend name used by `forward` to the caller's backend object; NULL = undefined. */
typedef void *(*mg_backend_resolver_t)(void *arg, const char *name);

/*
 * Compiles the `routes:` sequence. Route names must be unique across the whole tree; every
 * route has exactly one terminal (forward, respond) or `routes`. Backend names are resolved
 * through `resolve` (an unknown name is an error at its position). Returns NULL after
 * recording errors; warnings (routes that can never match) may be recorded on success.
 */
mg_routes_t *mg_routes_compile(const mg_node_t *seq, mg_backend_resolver_t resolve, void *arg, mg_errors_t *errs);

/*
 * First match, depth first: a branch is entered when its condition holds; if none of its
 * children matches, evaluation continues after it, with the variables it bound undone.
 * Returns the chosen leaf route (never a branch) or NULL. On NULL, ctx->num_vars is as on entry.
 */
const mg_route_t *mg_routes_match(const mg_routes_t *routes, mg_ctx_t *ctx);

/* Number of routes in the whole tree (branches included). */
size_t mg_routes_count(const mg_routes_t *routes);

void mg_routes_free(mg_routes_t *routes);

#endif
