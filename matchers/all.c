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

/* A child that cannot be decided does not decide alone: a later one that fails still makes
 * `all` fail, whatever the undecided one would have said. */
static int mg_all_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_matcher_list_t *list = self->data;
    int undecided = 0;
    /* A failing child leaves the bindings of the earlier ones: our caller undoes them all. */
    for (size_t i = 0; i != list->size; ++i) {
        int matched = mg_matcher_match(list->items[i], ctx);
        if (matched == 0)
            return 0;
        undecided |= matched == MG_MATCH_ERROR;
    }
    return undecided ? MG_MATCH_ERROR : 1;
}

/* Every child's requirement holds at once. Two different exact hosts (or paths) cannot both
 * hold; the first is kept, which is still a correct requirement: such a route never matches. */
static void mg_all_keys(const mg_matcher_t *self, mg_matcher_keys_t *keys)
{
    const mg_matcher_list_t *list = self->data;
    for (size_t i = 0; i != list->size; ++i) {
        mg_matcher_keys_t child = {.complete = 1};
        mg_matcher_get_keys(list->items[i], &child);
        keys->complete &= child.complete;
        if (child.host.len != 0 && keys->host.len == 0)
            keys->host = child.host;
        else if (child.host.len != 0)
            keys->complete = 0;
        if (child.has_path && !keys->has_path) {
            keys->path = child.path;
            keys->path_prefix = child.path_prefix;
            keys->has_path = 1;
        } else if (child.has_path) {
            keys->complete = 0;
        }
    }
}

const mg_matcher_ops_t mg_matcher_all = {
    .name = "all",
    .compile = mg_all_compile,
    .match = mg_all_match,
    .dispose = mg_matcher_list_dispose,
    .data_size = sizeof(mg_matcher_list_t),
    .describe = mg_matcher_list_describe,
    .keys = mg_all_keys,
    .binds = mg_matcher_list_binds,
    .needs = mg_matcher_list_needs,
};
