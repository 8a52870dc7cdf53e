/*
 * The route tree: compiled once per configuration from the `routes:` sequence, then shared
 * read-only by every worker (match.c walks it per request).
 *
 * Everything kept is copied out of the nodes, which die with their document after compile.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "routes/internal.h"

/* Route names seen so far (unique across the tree), by open addressing: trees of 100k routes
 * must not pay a quadratic scan. */
typedef struct mg_route_names {
    struct mg_route_name {
        const char *name;
        const mg_node_t *at; /* where it was first defined */
    } * slots;
    size_t used, capacity; /* capacity: 0 or a power of two */
} mg_route_names_t;

typedef struct mg_routes_builder {
    mg_routes_t *routes;
    mg_backend_resolver_t resolve;
    void *arg;
    mg_errors_t *errs;
    mg_route_names_t names;
    unsigned unsure; /* > 0 while reading below a condition that did not compile */
} mg_routes_builder_t;

static const char *const mg_route_keys[] = {"name",     "match",  "actions",  "forward", "bridge", "respond",
                                            "redirect", "routes", "quota",    "order",   "auth",   "require",
                                            "response", "cors",   "compress", "mirror",  NULL};
static const char *const mg_route_terminals[] = {"forward", "bridge", "respond", "redirect", "routes", NULL};
static const char *const mg_forward_keys[] = {"backend", "host", "split", "sticky", "canary", NULL};
static const char *const mg_redirect_keys[] = {"location", "status", NULL};
static const char *const mg_route_quota_keys[] = {"requests", "per", "key", NULL};
static const char *const mg_route_order_keys[] = {"key", "priority_header", NULL};

static mg_route_t **mg_route_list_compile(mg_routes_builder_t *b, const mg_node_t *seq, const mg_route_t *parent, size_t *size);

static const char *mg_route_display_name(const mg_route_t *r)
{
    return r->name != NULL ? r->name : "(unnamed)";
}

/* ---------------------------------------------------------------------------------------
 * The name table
 */
static size_t mg_route_name_hash(const char *s)
{
    size_t h = 14695981039346656037u; /* FNV-1a */
    for (; *s != '\0'; ++s)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static struct mg_route_name *mg_route_names_slot(const mg_route_names_t *t, const char *name)
{
    size_t i = mg_route_name_hash(name) & (t->capacity - 1);
    while (t->slots[i].name != NULL && strcmp(t->slots[i].name, name) != 0)
        i = (i + 1) & (t->capacity - 1);
    return &t->slots[i];
}

static void mg_route_names_grow(mg_route_names_t *t)
{
    mg_route_names_t bigger = {.capacity = t->capacity != 0 ? t->capacity * 2 : 64};
    if ((bigger.slots = calloc(bigger.capacity, sizeof(*bigger.slots))) == NULL)
        abort();
    for (size_t i = 0; i != t->capacity; ++i) {
        if (t->slots[i].name != NULL)
            *mg_route_names_slot(&bigger, t->slots[i].name) = t->slots[i];
    }
    bigger.used = t->used;
    free(t->slots);
    *t = bigger;
}

/* Records `name` defined at `at`; returns where it was defined first, or NULL when new. */
static const mg_node_t *mg_route_names_claim(mg_route_names_t *t, const char *name, const mg_node_t *at)
{
    if (2 * (t->used + 1) > t->capacity)
        mg_route_names_grow(t);
    struct mg_route_name *slot = mg_route_names_slot(t, name);
    if (slot->name != NULL)
        return slot->at;
    *slot = (struct mg_route_name){name, at};
    ++t->used;
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * Validation helpers
 */

/* No control characters (CR, LF, NUL...) and none of `extra`. */
static int mg_is_clean(const char *s, size_t len, const char *extra)
{
    for (size_t i = 0; i != len; ++i) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || (c != '\0' && strchr(extra, c) != NULL))
            return 0;
    }
    return 1;
}

int mg__read_str(const mg_node_t *node, mg_str_t *out, mg_errors_t *errs)
{
    const char *s;
    if (mg_node_to_str(node, &s, errs) != 0)
        return -1;
    *out = mg_str(s, node->u.scalar.len);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Templates: a variable is known where a condition of the route, or of one of its ancestors,
 * may bind it (the builtins are always known).
 */
typedef struct mg_route_scope {
    const mg_routes_builder_t *b;
    const mg_route_t *route;
} mg_route_scope_t;

static int mg_route_knows(void *arg, mg_str_t name)
{
    const mg_route_scope_t *scope = arg;
    /* Below a condition that did not compile, "unknown variable" would only be noise. */
    if (scope->b->unsure != 0)
        return 1;
    for (const mg_route_t *r = scope->route; r != NULL; r = r->parent) {
        if (mg_matcher_binds(r->match, name))
            return 1;
    }
    return 0;
}

static mg_template_t *mg_route_template(mg_routes_builder_t *b, const mg_route_t *r, const mg_node_t *node,
                                        mg_template_target_t target)
{
    mg_route_scope_t scope = {b, r};
    return mg_template_compile(node, target, mg_route_knows, &scope, b->errs);
}

static void mg_route_read_actions(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *map)
{
    const mg_node_t *seq = mg_node_get(map, "actions");
    mg_route_scope_t scope = {b, r};
    if (seq != NULL)
        mg__actions_compile(seq, mg_route_knows, &scope, &r->actions, &r->num_actions, b->errs);
}

/* `quota: {requests, per, key}`: the key is a header-like value (decoded), default the tenant. */
static void mg_route_read_quota(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *map)
{
    const mg_node_t *node = mg_node_get(map, "quota"), *key;
    mg_quota_t limit = {0, 0};

    if (node == NULL)
        return;
    /* one run shows every error: the key is checked even after one (the route is dropped then) */
    r->quota = mg__route_part(sizeof(*r->quota));
    if (mg_quota_read(node, mg_route_quota_keys, &limit, b->errs) == 0)
        r->quota->limit = limit;
    if ((key = mg_node_get(node, "key")) != NULL)
        r->quota->key = mg_route_template(b, r, key, MG_TARGET_HEADER);
}

/* A header name for order.priority_header, lower-cased; NULL after recording an error. */
static char *mg_route_header_name(mg_routes_builder_t *b, const mg_node_t *node)
{
    mg_str_t s;
    if (mg__read_str(node, &s, b->errs) != 0)
        return NULL;
    if (s.len == 0) {
        mg_errors_add(b->errs, node, "the header name must not be empty");
        return NULL;
    }
    if (!mg_is_token(s.base, s.len)) {
        mg_errors_add(b->errs, node, "invalid header name '%.*s'", (int)s.len, s.base);
        return NULL;
    }
    char *name = mg_copy_or_abort(s.base, s.len);
    for (size_t i = 0; i != s.len; ++i)
        name[i] = (char)tolower((unsigned char)name[i]);
    return name;
}

/* `order: {key: T, priority_header: H}`: the key is a header-like value (decoded); required. */
static void mg_route_read_order(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *map)
{
    const mg_node_t *node = mg_node_get(map, "order"), *key, *header;

    if (node == NULL || mg_node_expect(node, MG_NODE_MAPPING, b->errs) != 0)
        return;
    mg_node_check_keys(node, mg_route_order_keys, b->errs);
    r->order = mg__route_part(sizeof(*r->order));
    if ((key = mg_node_require(node, "key", b->errs)) != NULL)
        r->order->key = mg_route_template(b, r, key, MG_TARGET_HEADER);
    if ((header = mg_node_get(node, "priority_header")) != NULL &&
        (r->order->priority_header = mg_route_header_name(b, header)) != NULL)
        r->order->priority_header_len = strlen(r->order->priority_header);
}

int mg_route_quota_key(const mg_route_t *route, const mg_ctx_t *ctx, mg_str_t *key)
{
    if (route->quota == NULL || route->quota->key == NULL) {
        *key = ctx->tenant;
        return 0;
    }
    return mg_template_expand(route->quota->key, ctx, key);
}

const mg_route_t *mg_route_order(const mg_route_t *leaf)
{
    return leaf->order_from;
}

int mg_order_is_high(mg_str_t value)
{
    return value.len == 4 && strncasecmp(value.base, "high", 4) == 0;
}

/* ---------------------------------------------------------------------------------------
 * name, forward, bridge and redirect
 */
/* The route's name as written, checked; MG_STR_NULL after recording an error. */
static mg_str_t mg_route_read_name(mg_routes_builder_t *b, const mg_node_t *node)
{
    mg_str_t s;
    if (node == NULL || mg__read_str(node, &s, b->errs) != 0)
        return MG_STR_NULL;
    /* Names show up in logs, metrics and admin URLs (/routes/{name}/broadcast). */
    if (s.len == 0 || !mg_is_clean(s.base, s.len, "/")) {
        mg_errors_add(b->errs, node, "invalid route name (it must be non-empty, without '/' or control characters)");
        return MG_STR_NULL;
    }
    return s;
}

/* A zeroed route with its name (when `map` has a valid one) in the same allocation: a name is
 * a few bytes, and a malloc of its own would cost 32 (docs/performance.md). */
static mg_route_t *mg_route_new(mg_routes_builder_t *b, const mg_node_t *map)
{
    const mg_node_t *node = mg_node_require(map, "name", b->errs);
    mg_str_t name = mg_route_read_name(b, node);
    mg_route_t *r = calloc(1, sizeof(*r) + name.len + 1);
    if (r == NULL)
        abort();
    if (name.base == NULL)
        return r;
    r->name = memcpy((char *)(r + 1), name.base, name.len);
    const mg_node_t *first = mg_route_names_claim(&b->names, r->name, node);
    if (first != NULL)
        mg_errors_add(b->errs, node, "duplicate route name '%s' (first defined at %s:%u:%u)", r->name, first->file, first->line,
                      first->column);
    return r;
}

/* The list's one copy of backend name `s`. */
static char *mg_routes_backend_name(mg_routes_t *routes, mg_str_t s)
{
    int added;
    if (routes->backend_names == NULL && (routes->backend_names = calloc(1, sizeof(*routes->backend_names))) == NULL)
        abort();
    mg_keytab_item_t *item = mg__keytab_add(routes->backend_names, 0, s, &added);
    if (added) /* the table kept `s`, which dies with the document: the copy takes its place */
        item->key.base = mg_copy_or_abort(s.base, s.len);
    return (char *)item->key.base;
}

void mg__route_read_backend(const mg_route_env_t *env, const mg_node_t *node, char **name, void **backend)
{
    mg_str_t s;
    if (mg__read_str(node, &s, env->errs) != 0)
        return;
    *name = mg_routes_backend_name(env->routes, s);
    *backend = env->resolve != NULL ? env->resolve(env->resolve_arg, *name) : NULL;
    if (*backend == NULL)
        mg_errors_add(env->errs, node, "undefined backend '%s'", *name);
}

void *mg__route_part(size_t size)
{
    void *part = calloc(1, size);
    if (part == NULL)
        abort();
    return part;
}

static void mg_route_read_backend(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *node)
{
    mg_route_env_t env = {b->resolve, b->arg, NULL, NULL, b->errs, b->routes};
    mg__route_read_backend(&env, node, &r->forward.backend_name, &r->forward.backend);
}

static void mg_route_read_host(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *node)
{
    mg_str_t s;
    if (mg__read_str(node, &s, b->errs) != 0)
        return;
    /* Variables are checked per request; the text around them must fit a host already. */
    if (s.len == 0 || !mg_is_clean(s.base, s.len, " /?#@\\")) {
        mg_errors_add(b->errs, node, "invalid host (expected a host name, optionally with a port)");
        return;
    }
    r->forward.host = mg_route_template(b, r, node, MG_TARGET_HEADER);
}

static void mg_route_read_split(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *split, const mg_node_t *sticky,
                                const mg_node_t *canary)
{
    mg_route_scope_t scope = {b, r};
    mg_route_env_t env = {b->resolve, b->arg, mg_route_knows, &scope, b->errs, b->routes};
    r->forward.split = mg__split_read(&env, split, sticky, canary);
    if (r->forward.split == NULL || r->forward.split->canary == NULL)
        return;
    mg_routes_t *rs = b->routes; /* the prober walks these, not the whole tree */
    if ((rs->canaries = realloc(rs->canaries, (rs->num_canaries + 1) * sizeof(*rs->canaries))) == NULL)
        abort();
    rs->canaries[rs->num_canaries++] = r;
}

static void mg_route_read_forward(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *v)
{
    r->kind = MG_ROUTE_FORWARD;
    if (v->kind != MG_NODE_MAPPING) {
        mg_route_read_backend(b, r, v);
        return;
    }
    if (mg_node_check_keys(v, mg_forward_keys, b->errs) != 0)
        return;
    const mg_node_t *split = mg_node_get(v, "split"), *sticky = mg_node_get(v, "sticky"), *host = mg_node_get(v, "host");
    const mg_node_t *canary = mg_node_get(v, "canary");
    const mg_node_t *backend = split == NULL ? mg_node_require(v, "backend", b->errs) : mg_node_get(v, "backend");
    if (split != NULL && backend != NULL)
        mg_errors_add(b->errs, backend, "forward has both backend and split: a split names its backends in its legs");
    else if (split != NULL)
        mg_route_read_split(b, r, split, sticky, canary);
    else if (sticky != NULL || canary != NULL)
        mg_errors_add(b->errs, sticky != NULL ? sticky : canary, "%s belongs to a split (forward: {split: [...], %s: ...})",
                      sticky != NULL ? "sticky" : "canary", sticky != NULL ? "sticky" : "canary");
    else if (backend != NULL)
        mg_route_read_backend(b, r, backend);
    if (host != NULL)
        mg_route_read_host(b, r, host);
}

static void mg_route_read_redirect_status(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *status)
{
    uint64_t code;
    if (mg_node_to_uint(status, 100, 599, &code, b->errs) != 0)
        return;
    if (code != 301 && code != 302 && code != 307 && code != 308) {
        mg_errors_add(b->errs, status, "redirect status must be 301, 302, 307 or 308");
        return;
    }
    r->redirect->status = (int)code;
}

static void mg_route_read_redirect(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *v)
{
    r->kind = MG_ROUTE_REDIRECT;
    r->redirect = mg__route_part(sizeof(*r->redirect));
    r->redirect->status = 302;
    if (mg_node_expect(v, MG_NODE_MAPPING, b->errs) != 0 || mg_node_check_keys(v, mg_redirect_keys, b->errs) != 0)
        return;
    const mg_node_t *location = mg_node_require(v, "location", b->errs), *status = mg_node_get(v, "status");
    if (status != NULL)
        mg_route_read_redirect_status(b, r, status);
    if (location == NULL)
        return;
    if (location->kind == MG_NODE_SCALAR && location->u.scalar.len == 0)
        mg_errors_add(b->errs, location, "empty redirect location");
    else
        r->redirect->location = mg_route_template(b, r, location, MG_TARGET_URL);
}

static void mg_route_read_bridge(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *v)
{
    mg_route_scope_t scope = {b, r};
    mg_route_env_t env = {b->resolve, b->arg, mg_route_knows, &scope, b->errs, b->routes};
    mg__bridge_read(&env, r, v);
}

/* ---------------------------------------------------------------------------------------
 * Routes and lists of routes
 */
static void mg_route_read_branch(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *v)
{
    r->kind = MG_ROUTE_BRANCH;
    if (mg_node_expect(v, MG_NODE_SEQUENCE, b->errs) != 0)
        return;
    if (v->u.sequence.size == 0) {
        mg_errors_add(b->errs, v, "route '%s' has an empty 'routes' list", mg_route_display_name(r));
        return;
    }
    r->children = mg_route_list_compile(b, v, r, &r->num_children);
}

static void mg_route_read_terminal(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *map)
{
    const char *found[2];
    size_t n = 0;
    for (size_t i = 0; mg_route_terminals[i] != NULL; ++i) {
        if (mg_node_get(map, mg_route_terminals[i]) != NULL && n++ < 2)
            found[n - 1] = mg_route_terminals[i];
    }
    if (n == 0) {
        mg_errors_add(b->errs, map, "route '%s' has no terminal (forward, bridge, respond, redirect or routes)",
                      mg_route_display_name(r));
    } else if (n > 1) {
        mg_errors_add(b->errs, map, "route '%s' has both %s and %s", mg_route_display_name(r), found[0], found[1]);
    } else if (strcmp(found[0], "forward") == 0) {
        mg_route_read_forward(b, r, mg_node_get(map, "forward"));
    } else if (strcmp(found[0], "bridge") == 0) {
        mg_route_read_bridge(b, r, mg_node_get(map, "bridge"));
    } else if (strcmp(found[0], "respond") == 0) {
        mg__respond_read(b->errs, r, mg_node_get(map, "respond"));
    } else if (strcmp(found[0], "redirect") == 0) {
        mg_route_read_redirect(b, r, mg_node_get(map, "redirect"));
    } else {
        mg_route_read_branch(b, r, mg_node_get(map, "routes"));
    }
}

/* `mirror:` copies a forward's requests: a route that answers otherwise has nothing to copy. */
static void mg_route_read_mirrors(mg_routes_builder_t *b, mg_route_t *r, const mg_node_t *map)
{
    const mg_node_t *seq = mg_node_get(map, "mirror");
    if (seq == NULL)
        return;
    if (r->kind != MG_ROUTE_FORWARD) {
        mg_errors_add(b->errs, seq, "mirror belongs to a route that forwards (route '%s' does not)", mg_route_display_name(r));
        return;
    }
    mg_route_scope_t scope = {b, r};
    mg_route_env_t env = {b->resolve, b->arg, mg_route_knows, &scope, b->errs, b->routes};
    r->mirrors = mg__mirrors_read(&env, seq);
}

/* Returns the route, possibly incomplete after errors (the caller frees it with the rest). */
static mg_route_t *mg_route_compile(mg_routes_builder_t *b, const mg_node_t *map, const mg_route_t *parent)
{
    if (mg_node_expect(map, MG_NODE_MAPPING, b->errs) != 0)
        return NULL;
    mg_node_check_keys(map, mg_route_keys, b->errs);
    mg_route_t *r = mg_route_new(b, map);
    r->file = b->routes->file;
    r->line = map->line;
    r->column = map->column;
    r->parent = parent;
    const mg_node_t *match = mg_node_get(map, "match");
    size_t errors_before = b->errs->num_errors;
    if (match != NULL)
        r->match = mg_matcher_compile_in(match, b->routes->file, b->errs);
    unsigned unsure = b->errs->num_errors != errors_before;
    b->unsure += unsure;
    mg_route_read_actions(b, r, map);
    mg_route_read_quota(b, r, map);
    mg_route_read_order(b, r, map);
    /* resolved once here (children are compiled in read_terminal, after their parent's order):
     * each ordered request then finds its order in one load */
    r->order_from = r->order != NULL ? r : parent != NULL ? parent->order_from : NULL;
    mg_route_env_t env = {b->resolve, b->arg, NULL, NULL, b->errs, b->routes};
    mg__route_auth_read(&env, r, map);
    mg_route_scope_t scope = {b, r};
    mg_route_env_t response_env = {b->resolve, b->arg, mg_route_knows, &scope, b->errs, b->routes};
    mg__route_response_read(&response_env, r, map);
    b->routes->edits_answers |= r->response != NULL;
    r->needs_claims = (mg_matcher_needs(r->match) & MG_NEEDS_CLAIMS) != 0;
    mg_route_read_terminal(b, r, map);
    mg_route_read_mirrors(b, r, map);
    b->unsure -= unsure;
    return r;
}

static mg_route_t **mg_route_list_compile(mg_routes_builder_t *b, const mg_node_t *seq, const mg_route_t *parent, size_t *size)
{
    mg_route_t **list = calloc(seq->u.sequence.size + 1, sizeof(*list));
    if (list == NULL)
        abort();
    mg_route_check_t *check = mg__route_check_new();
    for (size_t i = 0; i != seq->u.sequence.size; ++i) {
        size_t errors_before = b->errs->num_errors;
        mg_route_t *r = mg_route_compile(b, seq->u.sequence.items[i], parent);
        if (r == NULL)
            continue;
        list[(*size)++] = r;
        /* A route with errors is not what the user meant (a condition that failed to compile
         * reads as none): warnings about it would only add noise to the errors. */
        if (b->errs->num_errors == errors_before)
            mg__route_check_add(check, r, b->errs);
    }
    mg__route_check_free(check);
    return list;
}

/* Numbers the routes depth first, in file order (mg_route_t.id); returns the next id. */
static size_t mg_route_list_number(mg_route_t *const *list, size_t size, size_t next)
{
    for (size_t i = 0; i != size; ++i) {
        list[i]->id = next++;
        next = mg_route_list_number(list[i]->children, list[i]->num_children, next);
    }
    return next;
}

/* Indexes `list` when long enough, and the children lists below it; returns the list's index. */
static mg_route_index_t *mg_route_list_index(mg_route_t *const *list, size_t size)
{
    for (size_t i = 0; i != size; ++i)
        list[i]->index = mg_route_list_index(list[i]->children, list[i]->num_children);
    return size >= MG_ROUTE_INDEX_MIN_ROUTES ? mg__route_index_build(list, size) : NULL;
}

mg_routes_t *mg_routes_compile(const mg_node_t *seq, mg_backend_resolver_t resolve, void *arg, mg_errors_t *errs)
{
    size_t errors_before = errs->num_errors;
    mg_routes_t *routes = calloc(1, sizeof(*routes));
    if (routes == NULL)
        abort();
    /* No `routes:` at all is an empty list: every request gets the no-route 404. */
    if (seq != NULL && seq->file != NULL)
        routes->file = mg_copy_or_abort(seq->file, strlen(seq->file));
    mg_routes_builder_t b = {.routes = routes, .resolve = resolve, .arg = arg, .errs = errs};
    if (seq != NULL && mg_node_expect(seq, MG_NODE_SEQUENCE, errs) == 0)
        routes->routes = mg_route_list_compile(&b, seq, NULL, &routes->size);
    free(b.names.slots);
    if (errs->num_errors != errors_before) {
        mg_routes_free(routes);
        return NULL;
    }
    routes->index = mg_route_list_index(routes->routes, routes->size);
    mg_route_list_number(routes->routes, routes->size, 0);
    return routes;
}

static void mg_route_free(mg_route_t *r)
{
    for (size_t i = 0; i != r->num_children; ++i)
        mg_route_free(r->children[i]);
    free(r->children);
    mg__route_index_free(r->index);
    mg__respond_free(r->respond);
    mg_template_free(r->forward.host);
    mg__split_free(r->forward.split);
    mg__mirrors_free(r->mirrors);
    mg__bridge_free(r->bridge);
    mg__route_auth_free(r->auth);
    mg__route_response_free(r->response);
    if (r->redirect != NULL)
        mg_template_free(r->redirect->location);
    free(r->redirect);
    if (r->quota != NULL)
        mg_template_free(r->quota->key);
    free(r->quota);
    if (r->order != NULL) {
        mg_template_free(r->order->key);
        free(r->order->priority_header);
    }
    free(r->order);
    mg__actions_free(r->actions, r->num_actions);
    mg_matcher_free(r->match);
    free(r); /* and its name */
}

void mg_routes_free(mg_routes_t *routes)
{
    if (routes == NULL)
        return;
    for (size_t i = 0; i != routes->size; ++i)
        mg_route_free(routes->routes[i]);
    mg__route_index_free(routes->index);
    for (size_t i = 0; routes->backend_names != NULL && i != routes->backend_names->size; ++i)
        free((char *)routes->backend_names->items[i].key.base);
    if (routes->backend_names != NULL)
        mg__keytab_free(routes->backend_names);
    free(routes->backend_names);
    free(routes->canaries);
    free(routes->routes);
    free(routes->file);
    free(routes);
}
