/*
 * `path`: "/exact", {exact: /x}, {prefix: /api} or {regex: '...'}. Paths in the configuration
 * are normalized like request paths (mg_path_normalize), so `/api/%7Euser` and `/api/~user`
 * mean the same.
 *
 * A prefix matches on segment boundaries ("/api" matches /api and /api/x, not /apix) and
 * binds `remainder` to what follows it, so "/v2${remainder}" rewrites /api/x to /v2/x.
 *
 * Exact paths and prefixes ignore ";params" in the request's segments (mg_path_skip_params):
 * a backend such as Tomcat serves "/admin;jsessionid=1" as "/admin", so a route that guards
 * /admin must see it as /admin too. The path forwarded keeps the params.
 *
 * A regex runs on the normalized path as it is (escapes other than those of unreserved
 * characters still there), so its named groups are bound as encoded slices (MG_VAR_ENCODED).
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/matchers.h"

typedef struct mg_path {
    int prefix;
    char *value; /* normalized; a prefix without its trailing '/' ("/" is "") */
    size_t len;
    mg_regex_t *re; /* instead of value, for {regex: ...} */
} mg_path_t;

static const char *const mg_path_fields[] = {"exact", "prefix", "regex", NULL};

static int mg_path_check(const mg_node_t *node, const char *s, mg_errors_t *errs)
{
    if (s[0] != '/') {
        mg_errors_add(errs, node, "a path must start with '/'");
        return -1;
    }
    if (strlen(s) != node->u.scalar.len || strpbrk(s, "?#") != NULL) {
        mg_errors_add(errs, node, "a path cannot contain '?', '#' or NUL (the query is matched with 'query')");
        return -1;
    }
    if (strchr(s, ';') != NULL) {
        mg_errors_add(errs, node,
                      "a path cannot contain ';': paths are compared without their ';' parameters (match "
                      "parameters with a regex)");
        return -1;
    }
    return 0;
}

/* Reads and normalizes the path in `node` into p. */
static int mg_path_read(mg_path_t *p, const mg_node_t *node, mg_errors_t *errs)
{
    const char *s;
    if (mg_node_to_str(node, &s, errs) != 0 || mg_path_check(node, s, errs) != 0)
        return -1;
    size_t len = strlen(s);
    if ((p->value = malloc(len + 1)) == NULL)
        abort();
    long n = mg_path_normalize(s, len, p->value);
    if (n < 0) {
        mg_errors_add(errs, node, "invalid path '%s' (a malformed %%-escape, or '..' above the root)", s);
        return -1;
    }
    p->len = (size_t)n;
    /* "/api/" and "/api" are the same prefix: the boundary check supplies the '/'. */
    while (p->prefix && p->len != 0 && p->value[p->len - 1] == '/')
        p->value[--p->len] = '\0';
    return 0;
}

static int mg_path_compile_mapping(mg_path_t *p, const mg_node_t *arg, mg_errors_t *errs)
{
    if (mg_node_check_keys(arg, mg_path_fields, errs) != 0)
        return -1;
    const mg_node_t *exact = mg_node_get(arg, "exact"), *prefix = mg_node_get(arg, "prefix"), *regex = mg_node_get(arg, "regex");
    if ((exact != NULL) + (prefix != NULL) + (regex != NULL) != 1) {
        mg_errors_add(errs, arg, "'path' takes exactly one of 'exact', 'prefix' or 'regex'");
        return -1;
    }
    if (regex != NULL)
        return (p->re = mg_regex_compile(regex, 0, errs)) != NULL ? 0 : -1;
    p->prefix = prefix != NULL;
    return mg_path_read(p, p->prefix ? prefix : exact, errs);
}

static int mg_path_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    mg_path_t *p = self->data;
    if (arg->kind == MG_NODE_SCALAR)
        return mg_path_read(p, arg, errs);
    if (arg->kind == MG_NODE_MAPPING)
        return mg_path_compile_mapping(p, arg, errs);
    mg_errors_add(errs, arg, "expected a path or a mapping with 'exact', 'prefix' or 'regex', got %s",
                  mg_node_kind_name(arg->kind));
    return -1;
}

size_t mg_path_skip_params(mg_str_t path, size_t i)
{
    while (i < path.len && path.base[i] == ';') {
        size_t start = i;
        while (i < path.len && path.base[i] != '/')
            ++i;
        /* Only a segment that was nothing but params also loses its '/': the one before it is
         * already part of the key. */
        if (i == path.len || start == 0 || path.base[start - 1] != '/')
            break;
        ++i;
    }
    return i;
}

/* Where the key of ctx->path stops matching `value`'s bytes: the index in the path after the
 * last byte of `value`, or SIZE_MAX when the key does not start with `value`. */
static size_t mg_path_key_prefix(mg_str_t path, mg_str_t value)
{
    size_t i = 0;
    for (size_t j = 0;; ++i, ++j) {
        i = mg_path_skip_params(path, i);
        if (j == value.len)
            return i;
        if (i == path.len || path.base[i] != value.base[j])
            return SIZE_MAX;
    }
}

/* mg_path_key_prefix for a path with no ';' (the common case): one memcmp. */
static size_t mg_path_plain_prefix(mg_str_t path, mg_str_t value)
{
    return path.len >= value.len && (value.len == 0 || memcmp(path.base, value.base, value.len) == 0) ? value.len : SIZE_MAX;
}

int mg_path_test(mg_str_t value, int prefix, mg_ctx_t *ctx)
{
    mg_str_t path = ctx->path;
    int params = path.len != 0 && memchr(path.base, ';', path.len) != NULL;
    size_t end = params ? mg_path_key_prefix(path, value) : mg_path_plain_prefix(path, value);
    if (end == SIZE_MAX)
        return 0;
    if (!prefix)
        return end == path.len;
    if (end != path.len && path.base[end] != '/')
        return 0;
    /* A full variable table fails the match rather than hand a template an unbound name. */
    mg_str_t remainder = value.len != 0 ? mg_str(path.base + end, path.len - end) : path;
    return mg_ctx_set_var_flags(ctx, MG_STR("remainder"), remainder, MG_VAR_ENCODED) == 0;
}

static int mg_path_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_path_t *p = self->data;
    if (p->re != NULL)
        return mg_regex_match(p->re, ctx->path, ctx, MG_VAR_ENCODED);
    return mg_path_test(mg_str(p->value, p->len), p->prefix, ctx);
}

static void mg_path_dispose(mg_matcher_t *self)
{
    mg_path_t *p = self->data;
    free(p->value);
    mg_regex_free(p->re);
}

static size_t mg_path_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    const mg_path_t *p = self->data;
    if (p->re != NULL) {
        size_t off = mg_matcher_describe_text(buf, size, 0, "{\"path\":{\"regex\":");
        off = mg_matcher_describe_str(buf, size, off, mg_regex_pattern(p->re));
        return mg_matcher_describe_text(buf, size, off, "}}");
    }
    if (!p->prefix) {
        size_t off = mg_matcher_describe_text(buf, size, 0, "{\"path\":");
        off = mg_matcher_describe_str(buf, size, off, mg_str(p->value, p->len));
        return mg_matcher_describe_text(buf, size, off, "}");
    }
    size_t off = mg_matcher_describe_text(buf, size, 0, "{\"path\":{\"prefix\":");
    off = mg_matcher_describe_str(buf, size, off, p->len != 0 ? mg_str(p->value, p->len) : MG_STR("/"));
    return mg_matcher_describe_text(buf, size, off, "}}");
}

static void mg_path_keys(const mg_matcher_t *self, mg_matcher_keys_t *keys)
{
    const mg_path_t *p = self->data;
    if (p->re != NULL) {
        keys->complete = 0; /* a pattern is no key the route index can look up */
        return;
    }
    keys->path = mg_str(p->value, p->len);
    keys->path_prefix = p->prefix;
    keys->has_path = 1;
}

static int mg_path_binds(const mg_matcher_t *self, mg_str_t name)
{
    const mg_path_t *p = self->data;
    if (p->re != NULL)
        return mg_regex_binds(p->re, name);
    return p->prefix && name.len == 9 && memcmp(name.base, "remainder", 9) == 0;
}

const mg_matcher_ops_t mg_matcher_path = {
    .name = "path",
    .compile = mg_path_compile,
    .match = mg_path_match,
    .dispose = mg_path_dispose,
    .describe = mg_path_describe,
    .keys = mg_path_keys,
    .binds = mg_path_binds,
    .data_size = sizeof(mg_path_t),
};
