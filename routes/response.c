/*
 * What a route does to its answer: `response:` (header actions on the answer, read by actions.c),
 * `cors:` (cors.c) and `compress:` (compress.c), on a route or a branch for it and its children.
 * Response actions of every route up the tree apply, root first, as request actions do; of `cors`
 * and `compress` the nearest one wins.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

/* What the answers of the routes below `resp`'s own need, its actions and those above it
 * together (`above`: the nearest route up the tree with response parts), for one load per answer. */
static void mg_response_summarize(mg_route_response_t *resp, const mg_route_t *above)
{
    if (above != NULL) {
        resp->needs_ctx = above->response->needs_ctx;
        resp->has_actions = above->response->has_actions;
        resp->has_always = above->response->has_always;
    }
    for (size_t i = 0; i != resp->num_actions; ++i) {
        const mg_template_t *t = resp->actions[i].value;
        resp->needs_ctx |= t != NULL && (mg_template_varies(t) & (MG_TEMPLATE_TENANT | MG_TEMPLATE_REQUEST)) != 0;
        resp->has_actions = 1;
        resp->has_always |= resp->actions[i].always;
    }
}

void mg__route_response_read(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *map)
{
    const mg_node_t *actions = mg_node_get(map, "response"), *cors = mg_node_get(map, "cors");
    const mg_node_t *compress = mg_node_get(map, "compress");
    if (actions != NULL || cors != NULL || compress != NULL) {
        r->response = mg__route_part(sizeof(*r->response));
        if (actions != NULL)
            mg__response_actions_compile(actions, env->known, env->known_arg, &r->response->actions, &r->response->num_actions,
                                         env->errs);
        if (cors != NULL)
            r->response->cors = mg__cors_read(cors, env->errs);
        if (compress != NULL)
            r->response->compress = mg__compress_read(compress, env->errs);
    }
    r->response_from = r->response != NULL ? r : r->parent != NULL ? r->parent->response_from : NULL;
    if (r->response != NULL)
        mg_response_summarize(r->response, r->parent != NULL ? r->parent->response_from : NULL);
}

void mg__route_response_free(mg_route_response_t *response)
{
    if (response == NULL)
        return;
    mg__actions_free(response->actions, response->num_actions);
    mg__cors_free(response->cors);
    mg__compress_free(response->compress);
    free(response);
}

/* The route above `r` whose response parts apply after it (the nearest one), or NULL. */
static const mg_route_t *mg_response_next(const mg_route_t *r)
{
    return r->parent != NULL ? r->parent->response_from : NULL;
}

const mg_cors_t *mg_route_cors(const mg_route_t *leaf)
{
    for (const mg_route_t *r = leaf->response_from; r != NULL; r = mg_response_next(r)) {
        if (r->response->cors != NULL)
            return r->response->cors;
    }
    return NULL;
}

const mg_compress_t *mg_route_compress(const mg_route_t *leaf)
{
    for (const mg_route_t *r = leaf->response_from; r != NULL; r = mg_response_next(r)) {
        if (r->response->compress != NULL)
            return r->response->compress;
    }
    return NULL;
}

static int mg_action_applies(const mg_action_t *a, int gateway_made)
{
    return !gateway_made || a->always;
}

int mg_route_has_response_actions(const mg_route_t *leaf, int gateway_made)
{
    const mg_route_t *r = leaf->response_from;
    return r != NULL && (gateway_made ? r->response->has_always : r->response->has_actions);
}

int mg_route_response_needs_ctx(const mg_route_t *leaf)
{
    return leaf->response_from != NULL && leaf->response_from->response->needs_ctx;
}

/* An action's value: its text when it has no variable (most have none: nothing to expand). */
static int mg_action_value(const mg_action_t *a, mg_ctx_t *ctx, mg_str_t *value)
{
    *value = MG_STR_NULL;
    if (a->value == NULL || mg_template_literal(a->value, value))
        return 0;
    return mg_template_expand(a->value, ctx, value);
}

/* The actions of route `r` and of those above it, root first. */
static int mg_response_apply_from(const mg_route_t *r, mg_ctx_t *ctx, int gateway_made, mg_ctx_response_t *res, unsigned *failed)
{
    if (r == NULL)
        return 0;
    int changed = mg_response_apply_from(mg_response_next(r), ctx, gateway_made, res, failed);
    for (size_t i = 0; i != r->response->num_actions; ++i) {
        const mg_action_t *a = &r->response->actions[i];
        mg_str_t value;
        if (!mg_action_applies(a, gateway_made))
            continue;
        if (mg_action_value(a, ctx, &value) != 0) {
            ++*failed; /* the answer is on its way: it goes without this field rather than not at all */
            continue;
        }
        changed |= res->ops->edit(res->fields, (int)a->kind, a->name, value);
    }
    return changed;
}

int mg_route_response_apply(const mg_route_t *leaf, mg_ctx_t *ctx, int gateway_made, mg_ctx_response_t *res, unsigned *failed)
{
    const mg_ctx_response_t *saved = ctx->response;
    ctx->response = res;
    int changed = mg_response_apply_from(leaf->response_from, ctx, gateway_made, res, failed);
    ctx->response = saved;
    return changed;
}

/* ---------------------------------------------------------------------------------------
 * The whole edit of an answer: CORS fields, then response actions
 */

/* The CORS fields of an actual request's answer; 1 when the fields changed. */
static int mg_answer_cors(const mg_cors_t *cors, mg_str_t origin, mg_ctx_response_t *res, mg_answer_edit_t *edit)
{
    mg_cors_answer_t a;
    res->ops->drop_cors(res->fields); /* the route's policy says alone */
    mg_cors_actual(cors, origin, &a);
    edit->cors_refused = a.refusal != NULL && origin.base != NULL;
    for (size_t i = 0; i != a.num_headers; ++i) {
        if (a.headers[i].name.len == 4 && memcmp(a.headers[i].name.base, "vary", 4) == 0)
            res->ops->vary(res->fields, a.headers[i].value);
        else
            res->ops->edit(res->fields, MG_ACTION_ADD_HEADER, a.headers[i].name, a.headers[i].value);
    }
    return 1;
}

int mg_route_answer_edit(const mg_route_t *leaf, mg_ctx_t *ctx, mg_str_t origin, int gateway_made, mg_ctx_response_t *res,
                         mg_answer_edit_t *edit)
{
    int changed = 0;
    *edit = (mg_answer_edit_t){0, 0};
    if (leaf->response_from == NULL)
        return 0;
    const mg_cors_t *cors = mg_route_cors(leaf);
    if (cors != NULL)
        changed |= mg_answer_cors(cors, origin, res, edit);
    if (mg_route_has_response_actions(leaf, gateway_made))
        changed |= mg_route_response_apply(leaf, ctx, gateway_made, res, &edit->failed);
    return changed;
}
