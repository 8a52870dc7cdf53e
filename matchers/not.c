/*
 * `not: cond`: holds when the condition does not. Binds nothing either way: when the inner
 * condition matches (so `not` fails) its variables are undone, and when it fails it has
 * nothing to give. A condition that cannot be decided stays undecided: the negation of a
 * regex that gave up is not a match (a `not` around a deny pattern must not fail open).
 */
#include "matchers/matchers.h"

static int mg_not_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    self->data = mg_matcher_compile_in(arg, self->file, errs);
    return self->data != NULL ? 0 : -1;
}

static int mg_not_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    size_t mark = ctx->num_vars;
    int matched = mg_matcher_match(self->data, ctx);
    ctx->num_vars = mark;
    return matched == MG_MATCH_ERROR ? MG_MATCH_ERROR : !matched;
}

static void mg_not_dispose(mg_matcher_t *self)
{
    mg_matcher_free(self->data);
}

static unsigned mg_not_needs(const mg_matcher_t *self)
{
    return mg_matcher_needs(self->data);
}

static size_t mg_not_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    size_t off = mg_matcher_describe_text(buf, size, 0, "{\"not\":");
    off = mg_matcher_describe_child(buf, size, off, self->data);
    return mg_matcher_describe_text(buf, size, off, "}");
}

const mg_matcher_ops_t mg_matcher_not = {
    .name = "not",
    .compile = mg_not_compile,
    .match = mg_not_match,
    .dispose = mg_not_dispose,
    .describe = mg_not_describe,
    .needs = mg_not_needs,
};
