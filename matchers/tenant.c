/*
 * `tenant: name` or `tenant: [a, b]`: the request was identified as one of these tenants.
 * Names are compared exactly (case-sensitive, like the keys of `tenants`); an unidentified
 * request (empty tenant) matches none, since a name cannot be empty.
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/matchers.h"

typedef struct mg_tenants {
    size_t size;
    mg_str_t items[]; /* each base is an owned, NUL-terminated copy */
} mg_tenants_t;

static mg_tenants_t *mg_tenants_new(size_t capacity)
{
    mg_tenants_t *t = malloc(sizeof(*t) + capacity * sizeof(t->items[0]));
    if (t == NULL)
        abort();
    t->size = 0;
    return t;
}

/* Appends a copy of the tenant name in `node` to t. */
static int mg_tenant_read(mg_tenants_t *t, const mg_node_t *node, mg_errors_t *errs)
{
    const char *s;
    if (mg_node_to_str(node, &s, errs) != 0)
        return -1;
    if (node->u.scalar.len == 0 || strlen(s) != node->u.scalar.len) {
        mg_errors_add(errs, node, "a tenant name cannot be empty or contain NUL");
        return -1;
    }
    char *copy = strdup(s);
    if (copy == NULL)
        abort();
    t->items[t->size++] = mg_str(copy, node->u.scalar.len);
    return 0;
}

static int mg_tenant_compile_list(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    if (arg->u.sequence.size == 0) {
        mg_errors_add(errs, arg, "'tenant' needs at least one tenant");
        return -1;
    }
    mg_tenants_t *t = mg_tenants_new(arg->u.sequence.size);
    self->data = t;
    int ret = 0;
    for (size_t i = 0; i != arg->u.sequence.size; ++i)
        ret |= mg_tenant_read(t, arg->u.sequence.items[i], errs);
    return ret;
}

static int mg_tenant_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    if (arg->kind == MG_NODE_SEQUENCE)
        return mg_tenant_compile_list(self, arg, errs);
    mg_tenants_t *t = mg_tenants_new(1);
    self->data = t;
    return mg_tenant_read(t, arg, errs);
}

static int mg_tenant_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_tenants_t *t = self->data;
    for (size_t i = 0; i != t->size; ++i) {
        if (t->items[i].len == ctx->tenant.len && memcmp(t->items[i].base, ctx->tenant.base, ctx->tenant.len) == 0)
            return 1;
    }
    return 0;
}

static void mg_tenant_dispose(mg_matcher_t *self)
{
    mg_tenants_t *t = self->data;
    if (t == NULL)
        return;
    for (size_t i = 0; i != t->size; ++i)
        free((char *)t->items[i].base);
    free(t);
}

static size_t mg_tenant_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    const mg_tenants_t *t = self->data;
    size_t off = mg_matcher_describe_text(buf, size, 0, t->size == 1 ? "{\"tenant\":" : "{\"tenant\":[");
    for (size_t i = 0; i != t->size; ++i) {
        if (i != 0)
            off = mg_matcher_describe_text(buf, size, off, ",");
        off = mg_matcher_describe_str(buf, size, off, t->items[i]);
    }
    return mg_matcher_describe_text(buf, size, off, t->size == 1 ? "}" : "]}");
}

const mg_matcher_ops_t mg_matcher_tenant = {
    .name = "tenant",
    .compile = mg_tenant_compile,
    .match = mg_tenant_match,
    .dispose = mg_tenant_dispose,
    .describe = mg_tenant_describe,
};
