/*
 * `query: {name: N, equals|prefix|contains|regex: V}` or `{name: N, present: true|false}`.
 *
 * Names and values are compared after percent-decoding, '+' being a space (form encoding), so
 * the configuration holds them decoded: `{name: q, equals: "a b"}` matches ?q=a+b and ?q=a%20b.
 * "?a" and "?a=" both have `a` present with an empty value. Like headers, a parameter given
 * several times passes a value test when any occurrence does.
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/internal.h"

static int mg_query_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    mg_field_t *f = self->data;
    if (mg__field_compile(f, "query", arg, errs) != 0)
        return -1;
    if (f->name.len == 0) {
        mg_errors_add(errs, mg_node_get(arg, "name"), "a query parameter name cannot be empty");
        return -1;
    }
    return 0;
}

/* The decoded value: the slice itself when there is nothing to decode, else a request-lifetime
 * copy (a regex may bind a slice of it). */
static mg_str_t mg_query_decode(mg_ctx_t *ctx, mg_str_t value)
{
    if (value.len == 0 || (memchr(value.base, '%', value.len) == NULL && memchr(value.base, '+', value.len) == NULL))
        return value;
    char *buf = mg_alloc(&ctx->alloc, value.len);
    return mg_str(buf, mg_percent_decode(value.base, value.len, buf, 1));
}

/* Like headers: an occurrence that passes decides, one that cannot be decided only when none passes. */
static int mg_query_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_field_t *f = self->data;
    size_t pos = 0;
    mg_str_t value;
    int undecided = 0;
    while (mg_query_param_next(ctx->query, f->name, &pos, &value)) {
        if (f->op == MG_FIELD_PRESENT)
            return f->present;
        int passed = mg__field_test(f, mg_query_decode(ctx, value), ctx);
        if (passed == 1)
            return 1;
        undecided |= passed == MG_MATCH_ERROR;
    }
    if (undecided)
        return MG_MATCH_ERROR;
    return f->op == MG_FIELD_PRESENT && !f->present;
}

static size_t mg_query_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    return mg__field_describe(self->data, "query", buf, size);
}

const mg_matcher_ops_t mg_matcher_query = {
    .name = "query",
    .compile = mg_query_compile,
    .match = mg_query_match,
    .dispose = mg__field_dispose,
    .data_size = sizeof(mg_field_t),
    .describe = mg_query_describe,
    .binds = mg__field_binds,
};
