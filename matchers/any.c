/*
 * `any: [cond, ...]`: the first condition that holds wins; its variables are kept, those of
 * the alternatives tried before it are undone.
 */
#include "matchers/matchers.h"

/* A child that cannot be decided does not decide alone: a later one that matches still makes
 * `any` match, whatever the undecided one would have said. */
static int mg_any_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_matcher_list_t *list = self->data;
    int undecided = 0;
    for (size_t i = 0; i != list->size; ++i) {
        /* mg_matcher_match undoes a failed alternative before the next one runs. */
        int matched = mg_matcher_match(list->items[i], ctx);
        if (matched == 1)
            return 1;
        undecided |= matched == MG_MATCH_ERROR;
    }
    return undecided ? MG_MATCH_ERROR : 0;
}

const mg_matcher_ops_t mg_matcher_any = {
    .name = "any",
    .compile = mg_matcher_list_compile,
    .match = mg_any_match,
    .dispose = mg_matcher_list_dispose,
    .data_size = sizeof(mg_matcher_list_t),
    .describe = mg_matcher_list_describe,
    .binds = mg_matcher_list_binds,
    .needs = mg_matcher_list_needs,
};
