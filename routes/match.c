/*
 * The route tree per request: first match, depth first, through each list's index when it has
 * one (index.c). Never allocates. Walking the tree by name and counting it are here too: they
 * read what routes.c compiled and nothing else.
 */
#include <string.h>

#include "routes/internal.h"

static const mg_route_t *mg_route_list_match(mg_route_t *const *list, size_t size, const mg_route_index_t *index, mg_ctx_t *ctx,
                                             int indexed)
{
    if (indexed && index != NULL)
        return mg__route_index_match(index, list, ctx);
    for (size_t i = 0; i != size; ++i) {
        const mg_route_t *found = mg__route_try(list[i], ctx, indexed);
        if (found != NULL || ctx->error.reason != NULL)
            return found;
    }
    return NULL;
}

/* A condition that cannot be decided ends the evaluation: whether this route (or a later one)
 * is the first match is unknown, and guessing "no match" would let a deny rule fail open. */
const mg_route_t *mg__route_try(const mg_route_t *r, mg_ctx_t *ctx, int indexed)
{
    size_t mark = ctx->num_vars;
    /* a claim condition is unknown without a verified credential: the route cannot match, whatever
     * `not` or `any` would make of a test that answered "no" */
    int matched = r->needs_claims && ctx->claims == NULL ? 0 : r->match != NULL ? mg_matcher_match(r->match, ctx) : 1;
    if (matched == MG_MATCH_ERROR && ctx->error.route == NULL)
        ctx->error.route = r->name;
    if (ctx->trace != NULL)
        ctx->trace->route(ctx->trace->arg, r, matched, ctx);
    if (matched != 1)
        return NULL;
    if (r->kind != MG_ROUTE_BRANCH)
        return r;
    const mg_route_t *found = mg_route_list_match(r->children, r->num_children, r->index, ctx, indexed);
    if (found == NULL && ctx->trace != NULL && ctx->error.reason == NULL)
        ctx->trace->route(ctx->trace->arg, r, MG_TRACE_BRANCH_EXHAUSTED, ctx);
    if (found == NULL) /* no child matched: the branch's own captures must not leak into later routes */
        ctx->num_vars = mark;
    return found;
}

const mg_route_t *mg_routes_match(const mg_routes_t *routes, mg_ctx_t *ctx)
{
    return mg_route_list_match(routes->routes, routes->size, routes->index, ctx, 1);
}

const mg_route_t *mg_routes_match_linear(const mg_routes_t *routes, mg_ctx_t *ctx)
{
    return mg_route_list_match(routes->routes, routes->size, NULL, ctx, 0);
}

static size_t mg_route_list_count(mg_route_t *const *list, size_t size)
{
    size_t n = size;
    for (size_t i = 0; i != size; ++i)
        n += mg_route_list_count(list[i]->children, list[i]->num_children);
    return n;
}

size_t mg_routes_count(const mg_routes_t *routes)
{
    return mg_route_list_count(routes->routes, routes->size);
}

static const mg_route_t *mg_route_list_find(mg_route_t *const *list, size_t n, const char *name)
{
    for (size_t i = 0; i != n; ++i) {
        const mg_route_t *found = list[i]->name != NULL && strcmp(list[i]->name, name) == 0
                                      ? list[i]
                                      : mg_route_list_find(list[i]->children, list[i]->num_children, name);
        if (found != NULL)
            return found;
    }
    return NULL;
}

const mg_route_t *mg_routes_find(const mg_routes_t *routes, const char *name)
{
    return mg_route_list_find(routes->routes, routes->size, name);
}
