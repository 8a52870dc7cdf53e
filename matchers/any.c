/*
 * `any: [cond, ...]`: the first condition that holds wins; its variables are kept, those of
 * the alternatives tried before it are undone.
 */
#include "matchers/matchers.h"

static int mg_any_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_matcher_list_t *list = self->data;
    for (size_t i = 0; i != list->size; ++i) {
        /* mg_matcher_match undoes a failed alternative before the next one runs. */
        if (mg_matcher_match(list->items[i], ctx))
            return 1;
    }
    return 0;
}

const mg_matcher_ops_t mg_matcher_any = {
    .name = "any",
    .compile = mg_matcher_list_compile,
    .match = mg_any_match,
    .dispose = mg_matcher_list_dispose,
    .describe = mg_matcher_list_describe,
    .binds = mg_matcher_list_binds,
};
