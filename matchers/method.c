/*
 * `method`: GET or [POST, PUT]. Methods are case-sensitive (RFC 9110 9.1), so a lower-case
 * `get` would silently never match a real client: it is refused at load time instead.
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/matchers.h"

typedef struct mg_methods {
    size_t size;
    mg_str_t items[]; /* each base is an owned, NUL-terminated copy */
} mg_methods_t;

/* RFC 9110 5.6.2 tchar, upper-case letters only. */
static int mg_is_method_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int mg_method_has_lower(const char *s)
{
    for (; *s != '\0'; ++s) {
        if (*s >= 'a' && *s <= 'z')
            return 1;
    }
    return 0;
}

static void mg_method_lower_error(const mg_node_t *node, const char *s, mg_errors_t *errs)
{
    char upper[64];
    size_t i = 0;
    for (; s[i] != '\0' && i + 1 < sizeof(upper); ++i)
        upper[i] = s[i] >= 'a' && s[i] <= 'z' ? (char)(s[i] - 'a' + 'A') : s[i];
    upper[i] = '\0';
    mg_errors_add(errs, node, "method '%s' must be upper case, methods are case-sensitive (did you mean '%s'?)", s, upper);
}

/* Validates the method in `node` and appends a copy to m. */
static int mg_method_read(mg_methods_t *m, const mg_node_t *node, mg_errors_t *errs)
{
    const char *s;
    if (mg_node_to_str(node, &s, errs) != 0)
        return -1;
    if (mg_method_has_lower(s)) {
        mg_method_lower_error(node, s, errs);
        return -1;
    }
    size_t len = strlen(s), i = 0;
    while (i != len && mg_is_method_char(s[i]))
        ++i;
    if (len == 0 || i != len || len != node->u.scalar.len) {
        mg_errors_add(errs, node, "invalid method '%s' (a method is a token such as GET or PURGE)", s);
        return -1;
    }
    char *copy = strdup(s);
    if (copy == NULL)
        abort();
    m->items[m->size++] = mg_str(copy, len);
    return 0;
}

static mg_methods_t *mg_methods_new(size_t capacity)
{
    mg_methods_t *m = malloc(sizeof(*m) + capacity * sizeof(m->items[0]));
    if (m == NULL)
        abort();
    m->size = 0;
    return m;
}

static int mg_method_compile_list(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    if (arg->u.sequence.size == 0) {
        mg_errors_add(errs, arg, "'method' needs at least one method");
        return -1;
    }
    mg_methods_t *m = mg_methods_new(arg->u.sequence.size);
    self->data = m;
    int ret = 0;
    for (size_t i = 0; i != arg->u.sequence.size; ++i)
        ret |= mg_method_read(m, arg->u.sequence.items[i], errs);
    return ret;
}

static int mg_method_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    if (arg->kind == MG_NODE_SEQUENCE)
        return mg_method_compile_list(self, arg, errs);
    mg_methods_t *m = mg_methods_new(1);
    self->data = m;
    return mg_method_read(m, arg, errs);
}

static int mg_method_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_methods_t *m = self->data;
    for (size_t i = 0; i != m->size; ++i) {
        if (m->items[i].len == ctx->method.len && memcmp(m->items[i].base, ctx->method.base, ctx->method.len) == 0)
            return 1;
    }
    return 0;
}

static void mg_method_dispose(mg_matcher_t *self)
{
    mg_methods_t *m = self->data;
    if (m == NULL)
        return;
    for (size_t i = 0; i != m->size; ++i)
        free((char *)m->items[i].base);
    free(m);
}

static size_t mg_method_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    const mg_methods_t *m = self->data;
    size_t off = mg_matcher_describe_text(buf, size, 0, m->size == 1 ? "{\"method\":" : "{\"method\":[");
    for (size_t i = 0; i != m->size; ++i) {
        if (i != 0)
            off = mg_matcher_describe_text(buf, size, off, ",");
        off = mg_matcher_describe_str(buf, size, off, m->items[i]);
    }
    return mg_matcher_describe_text(buf, size, off, m->size == 1 ? "}" : "]}");
}

const mg_matcher_ops_t mg_matcher_method = {
    .name = "method",
    .compile = mg_method_compile,
    .match = mg_method_match,
    .dispose = mg_method_dispose,
    .describe = mg_method_describe,
};
