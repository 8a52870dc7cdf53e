/*
 * The `bridge:` terminal: a WebSocket terminated at the gateway, each text message (a JSON
 * object) turned into one request to the backend. Read at load into mg_route_t.bridge; per
 * message the gateway asks mg_bridge_method and mg_bridge_is_high, and expands bridge.path
 * with the message's fields bound as "msg.<field>" variables.
 *
 *   bridge:
 *     backend: api                  # required
 *     path: "/${tenant}/api/${msg.kind}"   # default: "${path}", the upgrade request's path
 *     method: {from: type, map: {add: POST, delete: DELETE}, default: POST}   # or just POST
 *     body: payload                 # default: the whole message
 *     priority: {from: priority, high: [urgent]}
 */
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

static const char *const mg_bridge_keys[] = {"backend", "path", "method", "body", "priority", NULL};
static const char *const mg_bridge_method_keys[] = {"from", "map", "default", NULL};
static const char *const mg_bridge_priority_keys[] = {"from", "high", NULL};

static void *mg_bridge_grow(void *array, size_t num, size_t size)
{
    void *p = realloc(array, (num + 1) * size);
    if (p == NULL)
        abort();
    return p;
}

static int mg_bridge_compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int mg_bridge_compare_methods(const void *a, const void *b)
{
    return strcmp(((const mg_bridge_method_t *)a)->value, ((const mg_bridge_method_t *)b)->value);
}

/* Whether `value` is one of the `n` sorted strings at `keys`, `stride` bytes apart (each the
 * first member of its element: the map's entries and the high values alike). */
static const void *mg_bridge_search(mg_str_t value, const void *keys, size_t n, size_t stride)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *at = (const char *)keys + mid * stride;
        int c = mg_str_compare(value, *(char *const *)at);
        if (c == 0)
            return at;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* A message field name (method.from, body, priority.from); NULL after recording an error. */
static char *mg_bridge_read_field(const mg_route_env_t *env, const mg_node_t *node)
{
    const char *s;
    if (mg_node_to_str(node, &s, env->errs) != 0)
        return NULL;
    if (node->u.scalar.len == 0) {
        mg_errors_add(env->errs, node, "empty message field name");
        return NULL;
    }
    return mg_copy_or_abort(s, node->u.scalar.len);
}

/* An HTTP method, checked as set_method checks it; NULL after recording an error. */
static char *mg_bridge_read_method_name(const mg_route_env_t *env, const mg_node_t *node)
{
    if (mg__method_check(node, env->errs) != 0)
        return NULL;
    return mg_copy_or_abort(node->u.scalar.str, node->u.scalar.len);
}

/* ---------------------------------------------------------------------------------------
 * path
 */

/* ${msg.<field>} is known in the path whatever the conditions; the rest is the route's. */
static int mg_bridge_path_knows(void *arg, mg_str_t name)
{
    const mg_route_env_t *env = arg;
    if (name.len > MG_BRIDGE_MSG_PREFIX_LEN && memcmp(name.base, MG_BRIDGE_MSG_PREFIX, MG_BRIDGE_MSG_PREFIX_LEN) == 0)
        return 1;
    return env->known != NULL && env->known(env->known_arg, name);
}

/* The gateway parses each message for these fields only: each is listed once. */
static void mg_bridge_add_msg_field(void *arg, mg_str_t name)
{
    mg_route_t *r = arg;
    if (name.len <= MG_BRIDGE_MSG_PREFIX_LEN || memcmp(name.base, MG_BRIDGE_MSG_PREFIX, MG_BRIDGE_MSG_PREFIX_LEN) != 0)
        return;
    for (size_t i = 0; i != r->bridge->num_msg_vars; ++i) {
        if (mg_str_compare(name, r->bridge->msg_vars[i]) == 0)
            return;
    }
    r->bridge->msg_vars = mg_bridge_grow(r->bridge->msg_vars, r->bridge->num_msg_vars, sizeof(*r->bridge->msg_vars));
    r->bridge->msg_vars[r->bridge->num_msg_vars++] = mg_copy_or_abort(name.base, name.len);
}

static void mg_bridge_read_path(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *node)
{
    mg_template_t *t = mg_template_compile(node, MG_TARGET_PATH, mg_bridge_path_knows, (void *)env, env->errs);
    if (t == NULL)
        return;
    /* As for rewrite_path: text first must be a '/', a variable first gets one when it lacks it. */
    mg_str_t src = mg_template_source(t);
    if (src.len == 0 || (src.base[0] != '/' && src.base[0] != '$')) {
        mg_errors_add(env->errs, node, src.len == 0 ? "empty path (bridge.path needs at least '/')" : "a path must start with '/'");
        mg_template_free(t);
        return;
    }
    r->bridge->path = t;
    mg__template_each_var(t, mg_bridge_add_msg_field, r);
}

/* No `path:`: the upgrade request's path, as the actions left it. */
static void mg_bridge_default_path(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *bridge)
{
    static char source[] = "${path}";
    mg_node_t node = {.kind = MG_NODE_SCALAR, .file = bridge->file, .line = bridge->line, .column = bridge->column};
    node.u.scalar.str = source;
    node.u.scalar.len = sizeof(source) - 1;
    mg_bridge_read_path(env, r, &node);
}

/* ---------------------------------------------------------------------------------------
 * method
 */
static void mg_bridge_read_map(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *map)
{
    if (mg_node_expect(map, MG_NODE_MAPPING, env->errs) != 0 || mg_node_check_keys(map, NULL, env->errs) != 0)
        return;
    if (map->u.mapping.size == 0) {
        mg_errors_add(env->errs, map, "empty method map (expected operation values and their methods, such as {add: POST})");
        return;
    }
    if ((r->bridge->methods = calloc(map->u.mapping.size, sizeof(*r->bridge->methods))) == NULL)
        abort();
    for (size_t i = 0; i != map->u.mapping.size; ++i) {
        const mg_node_pair_t *pair = &map->u.mapping.pairs[i];
        char *method = mg_bridge_read_method_name(env, pair->value);
        if (method == NULL)
            continue;
        mg_bridge_method_t *m = &r->bridge->methods[r->bridge->num_methods++];
        *m = (mg_bridge_method_t){mg_copy_or_abort(pair->key->u.scalar.str, pair->key->u.scalar.len), method};
    }
    /* Sorted so that each message's lookup is a binary search. */
    qsort(r->bridge->methods, r->bridge->num_methods, sizeof(*r->bridge->methods), mg_bridge_compare_methods);
}

static void mg_bridge_read_method_map(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *v)
{
    if (mg_node_check_keys(v, mg_bridge_method_keys, env->errs) != 0)
        return;
    const mg_node_t *from = mg_node_require(v, "from", env->errs), *map = mg_node_get(v, "map");
    const mg_node_t *fallback = mg_node_get(v, "default");
    if (from != NULL)
        r->bridge->method_from = mg_bridge_read_field(env, from);
    /* With neither, no message could have a method. */
    if (map == NULL && fallback == NULL)
        mg_errors_add(env->errs, v, "method needs 'map', 'default' or both");
    if (map != NULL)
        mg_bridge_read_map(env, r, map);
    if (fallback != NULL)
        r->bridge->method_default = mg_bridge_read_method_name(env, fallback);
}

/* `method: POST` (every message) or `method: {from: FIELD, map: {VALUE: METHOD}, default: METHOD}`. */
static void mg_bridge_read_method(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *v)
{
    if (v->kind == MG_NODE_SCALAR)
        r->bridge->method_default = mg_bridge_read_method_name(env, v);
    else if (v->kind == MG_NODE_MAPPING)
        mg_bridge_read_method_map(env, r, v);
    else
        mg_errors_add(env->errs, v, "expected a method such as POST or a mapping {from, map, default}, got %s",
                      mg_node_kind_name(v->kind));
}

const char *mg_bridge_method(const mg_route_t *r, mg_str_t value)
{
    if (r->bridge->method_from == NULL)
        return r->bridge->method_default;
    const mg_bridge_method_t *m = mg_bridge_search(value, r->bridge->methods, r->bridge->num_methods, sizeof(*m));
    return m != NULL ? m->method : r->bridge->method_default;
}

/* ---------------------------------------------------------------------------------------
 * priority
 */
static void mg_bridge_add_high(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *node)
{
    const char *s;
    if (mg_node_to_str(node, &s, env->errs) != 0)
        return;
    r->bridge->priority_high = mg_bridge_grow(r->bridge->priority_high, r->bridge->num_priority_high, sizeof(char *));
    r->bridge->priority_high[r->bridge->num_priority_high++] = mg_copy_or_abort(s, node->u.scalar.len);
}

/* `high: VALUE` or `high: [VALUE, ...]`. */
static void mg_bridge_read_high(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *v)
{
    if (v->kind != MG_NODE_SEQUENCE) {
        mg_bridge_add_high(env, r, v);
    } else if (v->u.sequence.size == 0) {
        mg_errors_add(env->errs, v, "empty 'high' list (expected the values that mean high priority)");
    } else {
        for (size_t i = 0; i != v->u.sequence.size; ++i)
            mg_bridge_add_high(env, r, v->u.sequence.items[i]);
    }
    if (r->bridge->num_priority_high > 1) /* qsort's array may not be NULL, even for 0 items */
        qsort(r->bridge->priority_high, r->bridge->num_priority_high, sizeof(char *), mg_bridge_compare_strings);
}

static void mg_bridge_read_priority(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *v)
{
    if (mg_node_expect(v, MG_NODE_MAPPING, env->errs) != 0 || mg_node_check_keys(v, mg_bridge_priority_keys, env->errs) != 0)
        return;
    const mg_node_t *from = mg_node_require(v, "from", env->errs), *high = mg_node_require(v, "high", env->errs);
    if (from != NULL)
        r->bridge->priority_from = mg_bridge_read_field(env, from);
    if (high != NULL)
        mg_bridge_read_high(env, r, high);
}

int mg_bridge_is_high(const mg_route_t *r, mg_str_t value)
{
    if (r->bridge->priority_from == NULL)
        return 0;
    return mg_bridge_search(value, r->bridge->priority_high, r->bridge->num_priority_high, sizeof(char *)) != NULL;
}

/* ---------------------------------------------------------------------------------------
 * The terminal
 */
void mg__bridge_read(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *v)
{
    r->kind = MG_ROUTE_BRIDGE;
    r->bridge = mg__route_part(sizeof(*r->bridge));
    if (v->kind != MG_NODE_MAPPING) {
        mg_errors_add(env->errs, v, "expected a mapping such as {backend: api, method: POST}, got %s", mg_node_kind_name(v->kind));
        return;
    }
    /* Unknown keys do not stop reading: one run shows every error. */
    mg_node_check_keys(v, mg_bridge_keys, env->errs);
    const mg_node_t *backend = mg_node_require(v, "backend", env->errs), *path = mg_node_get(v, "path");
    const mg_node_t *method = mg_node_require(v, "method", env->errs), *body = mg_node_get(v, "body");
    const mg_node_t *priority = mg_node_get(v, "priority");
    if (backend != NULL)
        mg__route_read_backend(env, backend, &r->bridge->backend_name, &r->bridge->backend);
    if (path != NULL)
        mg_bridge_read_path(env, r, path);
    else
        mg_bridge_default_path(env, r, v);
    if (method != NULL)
        mg_bridge_read_method(env, r, method);
    if (body != NULL)
        r->bridge->body_field = mg_bridge_read_field(env, body);
    if (priority != NULL)
        mg_bridge_read_priority(env, r, priority);
}

static void mg_bridge_free_strings(char **list, size_t num)
{
    for (size_t i = 0; i != num; ++i)
        free(list[i]);
    free(list);
}

void mg__bridge_free(mg_route_bridge_t *bridge)
{
    if (bridge == NULL)
        return;
    mg_template_free(bridge->path);
    free(bridge->method_from);
    for (size_t i = 0; i != bridge->num_methods; ++i) {
        free(bridge->methods[i].value);
        free(bridge->methods[i].method);
    }
    free(bridge->methods);
    free(bridge->method_default);
    free(bridge->body_field);
    free(bridge->priority_from);
    mg_bridge_free_strings(bridge->priority_high, bridge->num_priority_high);
    mg_bridge_free_strings(bridge->msg_vars, bridge->num_msg_vars);
    free(bridge);
}
