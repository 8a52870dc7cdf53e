/*
 * `header: {name: N, equals|prefix|contains|regex: V}` or `{name: N, present: true|false}`.
 *
 * Names are case-insensitive (the context has them in lower case, so the configured one is
 * lowered at load); values are compared byte for byte. A request may carry a header several
 * times: a value test holds when any instance passes it (a regex binds from the first one that
 * does), and `present: false` holds when there is none. Each header line is one value: a
 * comma-separated list is not split.
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/internal.h"

/* Checks that the name is a token, and lowers it in place (it is our own copy). */
static int mg_header_check_name(mg_field_t *f, const mg_node_t *node, mg_errors_t *errs)
{
    char *name = (char *)f->name.base;
    for (size_t i = 0; i != f->name.len; ++i) {
        if (!mg_is_tchar(name[i])) {
            mg_errors_add(errs, node, "invalid header name '%s' (a name is a token such as X-Api-Key)", node->u.scalar.str);
            return -1;
        }
        if (name[i] >= 'A' && name[i] <= 'Z')
            name[i] += 'a' - 'A';
    }
    if (f->name.len == 0) {
        mg_errors_add(errs, node, "a header name cannot be empty");
        return -1;
    }
    return 0;
}

static int mg_header_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    mg_field_t *f = self->data;
    if (mg__field_compile(f, "header", arg, errs) != 0)
        return -1;
    return mg_header_check_name(f, mg_node_get(arg, "name"), errs);
}

/* Like `any` over the instances: one that passes decides, one that cannot be decided only
 * when none passes. */
static int mg_header_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_field_t *f = self->data;
    int undecided = 0;
    for (size_t i = 0; i != ctx->num_headers; ++i) {
        const mg_header_t *h = &ctx->headers[i];
        if (h->name.len != f->name.len || memcmp(h->name.base, f->name.base, f->name.len) != 0)
            continue;
        if (f->op == MG_FIELD_PRESENT)
            return f->present;
        int passed = mg__field_test(f, h->value, ctx);
        if (passed == 1)
            return 1;
        undecided |= passed == MG_MATCH_ERROR;
    }
    if (undecided)
        return MG_MATCH_ERROR;
    return f->op == MG_FIELD_PRESENT && !f->present;
}

static size_t mg_header_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    return mg__field_describe(self->data, "header", buf, size);
}

const mg_matcher_ops_t mg_matcher_header = {
    .name = "header",
    .compile = mg_header_compile,
    .match = mg_header_match,
    .dispose = mg__field_dispose,
    .data_size = sizeof(mg_field_t),
    .describe = mg_header_describe,
    .binds = mg__field_binds,
};
