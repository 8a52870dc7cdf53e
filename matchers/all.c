/*
 * `all: [cond, ...]`: every condition holds. Also the kind behind a condition mapping with
 * several keys (`{path: /x, method: GET}`), which is why it accepts a mapping too.
 */
#include "matchers/matchers.h"

static int mg_all_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    if (arg->kind == MG_NODE_MAPPING && arg->u.mapping.size != 0)
        return mg_matcher_list_compile_pairs(self, arg, errs);
    return mg_matcher_list_compile(self, arg, errs);
}

static int mg_all_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_matcher_list_t *list = self->data;
    /* A failing child leaves the bindings of the earlier ones: our caller undoes them all. */
    for (size_t i = 0; i != list->size; ++i) {
        if (!list->items[i]->ops->match(list->items[i], ctx))
            return 0;
    }
    return 1;
}

const mg_matcher_ops_t mg_matcher_all = {
    .name = "all",
    .compile = mg_all_compile,
    .match = mg_all_match,
    .dispose = mg_matcher_list_dispose,
    .describe = mg_matcher_list_describe,
};
