/*
 * What a route does to its answer: `response:` (header actions on the answer, read by actions.c),
 * `cors:` (cors.c) and `compress:` (compress.c), on a route or a branch for it and its children.
 * Response actions of every route up the tree apply, root first, as request actions do; of `cors`
 * and `compress` the nearest one wins.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "routes/internal.h"

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
    for (const mg_route_t *r = leaf->response_from; r != NULL; r = mg_response_next(r)) {
        for (size_t i = 0; i != r->response->num_actions; ++i) {
            if (mg_action_applies(&r->response->actions[i], gateway_made))
                return 1;
        }
    }
    return 0;
}

int mg_route_response_needs_ctx(const mg_route_t *leaf)
{
    for (const mg_route_t *r = leaf->response_from; r != NULL; r = mg_response_next(r)) {
        for (size_t i = 0; i != r->response->num_actions; ++i) {
            const mg_template_t *t = r->response->actions[i].value;
            if (t != NULL && (mg_template_varies(t) & (MG_TEMPLATE_TENANT | MG_TEMPLATE_REQUEST)) != 0)
                return 1;
        }
    }
    return 0;
}

/* The actions of route `r` and of those above it, root first. */
static int mg_response_apply_from(const mg_route_t *r, mg_ctx_t *ctx, int gateway_made, mg_ctx_response_t *res, unsigned *failed)
{
    if (r == NULL)
        return 0;
    int changed = mg_response_apply_from(mg_response_next(r), ctx, gateway_made, res, failed);
    for (size_t i = 0; i != r->response->num_actions; ++i) {
        const mg_action_t *a = &r->response->actions[i];
        mg_str_t value = MG_STR_NULL;
        if (!mg_action_applies(a, gateway_made))
            continue;
        if (a->value != NULL && mg_template_expand(a->value, ctx, &value) != 0) {
            ++*failed; /* the answer is on its way: it goes without this field rather than not at all */
            continue;
        }
        changed |= mg__headers_edit(a, value, &ctx->alloc, &res->headers, &res->num_headers);
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
static int mg_is_cors_field(mg_str_t name)
{
    return name.len > 22 && strncasecmp(name.base, "access-control-", 15) == 0;
}

/* The answer's fields without the backend's Access-Control-* ones: the route's policy says alone. */
static int mg_drop_cors_fields(mg_ctx_t *ctx, mg_ctx_response_t *res)
{
    size_t n = 0;
    for (size_t i = 0; i != res->num_headers; ++i)
        n += mg_is_cors_field(res->headers[i].name);
    if (n == 0)
        return 0;
    mg_header_t *out = mg_alloc(&ctx->alloc, (res->num_headers - n + 1) * sizeof(*out));
    n = 0;
    for (size_t i = 0; i != res->num_headers; ++i) {
        if (!mg_is_cors_field(res->headers[i].name))
            out[n++] = res->headers[i];
    }
    res->headers = out;
    res->num_headers = n;
    return 1;
}

/* 1 when comma-separated list `list` holds `token` (any case). */
static int mg_list_has(mg_str_t list, mg_str_t token)
{
    for (size_t i = 0; i < list.len;) {
        while (i < list.len && (list.base[i] == ' ' || list.base[i] == '\t' || list.base[i] == ','))
            ++i;
        size_t start = i;
        while (i < list.len && list.base[i] != ',' && list.base[i] != ' ' && list.base[i] != '\t')
            ++i;
        if (i - start == token.len && strncasecmp(list.base + start, token.base, token.len) == 0)
            return 1;
    }
    return 0;
}

int mg__fields_put(mg_ctx_t *ctx, mg_ctx_response_t *res, mg_str_t name, mg_str_t value)
{
    mg_header_t *out = mg_alloc(&ctx->alloc, (res->num_headers + 1) * sizeof(*out));
    if (res->num_headers != 0)
        memcpy(out, res->headers, res->num_headers * sizeof(*out));
    for (size_t i = 0; name.len == 4 && strncasecmp(name.base, "vary", 4) == 0 && i != res->num_headers; ++i) {
        if (strncasecmp(out[i].name.base, "vary", 4) != 0 || out[i].name.len != 4)
            continue;
        if (mg_list_has(out[i].value, value) || mg_list_has(out[i].value, MG_STR("*")))
            return 0;
        char *v = mg_alloc(&ctx->alloc, out[i].value.len + 2 + value.len + 1); /* merged: one Vary list */
        memcpy(v, out[i].value.base, out[i].value.len);
        memcpy(v + out[i].value.len, ", ", 2);
        memcpy(v + out[i].value.len + 2, value.base, value.len);
        v[out[i].value.len + 2 + value.len] = '\0';
        out[i].value = mg_str(v, out[i].value.len + 2 + value.len);
        res->headers = out;
        return 1;
    }
    out[res->num_headers] = (mg_header_t){name, value};
    res->headers = out;
    res->num_headers++;
    return 1;
}

/* The CORS fields of an actual request's answer; 1 when the fields changed. */
static int mg_answer_cors(const mg_cors_t *cors, mg_ctx_t *ctx, mg_str_t origin, mg_ctx_response_t *res, mg_answer_edit_t *edit)
{
    mg_cors_answer_t a;
    int changed = mg_drop_cors_fields(ctx, res);
    mg_cors_actual(cors, origin, &a);
    edit->cors_refused = a.refusal != NULL && origin.base != NULL;
    for (size_t i = 0; i != a.num_headers; ++i)
        changed |= mg__fields_put(ctx, res, a.headers[i].name, a.headers[i].value);
    return changed;
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
        changed |= mg_answer_cors(cors, ctx, origin, res, edit);
    changed |= mg_route_response_apply(leaf, ctx, gateway_made, res, &edit->failed);
    return changed;
}
