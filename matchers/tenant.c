/*
 * `tenant: name` or `tenant: [a, b]`: the request was identified as one of these tenants.
 * Names are compared exactly (case-sensitive, like the keys of `tenants`); an unidentified
 * request (empty tenant) matches none, since a name cannot be empty.
 */
#include <string.h>

#include "matchers/internal.h"

static int mg_tenant_check(const mg_node_t *node, const char *s, size_t len, mg_errors_t *errs)
{
    if (len == 0 || strlen(s) != len) {
        mg_errors_add(errs, node, "a tenant name cannot be empty or contain NUL");
        return -1;
    }
    return 0;
}

static int mg_tenant_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    return mg__exact_compile(self, "tenant", arg, mg_tenant_check, errs);
}

static int mg_tenant_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    return mg__exact_has(self, ctx->tenant);
}

static size_t mg_tenant_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    return mg__exact_describe(self, "tenant", buf, size);
}

const mg_matcher_ops_t mg_matcher_tenant = {
    .name = "tenant",
    .compile = mg_tenant_compile,
    .match = mg_tenant_match,
    .dispose = mg__exact_dispose,
    .describe = mg_tenant_describe,
};
