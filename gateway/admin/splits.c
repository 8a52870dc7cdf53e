/*
 * POST /routes/{name}/split: a split route's weights set at run time, without a reload. The body
 * names each leg's backend with its weight, {"weights": {"v1": 90, "v2": 10}}, or lists them in
 * the legs' order, {"weights": [90, 10]}; every leg gets one, they add up to more than 0. Every
 * worker reads them on its next request (atomics); a reload that keeps the route as it was
 * written keeps them (config/splits.c).
 */
#include <stdio.h>
#include <string.h>
#include "gateway/admin/internal.h"

/* The weights of `body` for the legs of `s`, in their order; NULL when it names them all, else why not. */
static const char *weights_of(const json_t *body, const mg_route_split_t *s, uint32_t *out)
{
    const json_t *w = json_object_get(body, "weights");
    size_t n = json_is_array(w) ? json_array_size(w) : json_object_size(w);
    if (!json_is_array(w) && !json_is_object(w))
        return "expected {\"weights\": {BACKEND: N, ...}} or {\"weights\": [N, ...]}";
    if (n != s->num_legs)
        return "give every leg of the split its weight, and nothing else";
    for (size_t i = 0; i < s->num_legs; i++) {
        const json_t *v = json_is_array(w) ? json_array_get(w, i) : json_object_get(w, s->legs[i].backend_name);
        if (v == NULL)
            return "give every leg of the split its weight, and nothing else";
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > MG_SPLIT_MAX_WEIGHT)
            return "a weight is an integer from 0 to 1000000";
        out[i] = (uint32_t)json_integer_value(v);
    }
    return NULL;
}

void mg_admin_split(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    const char *name = mg__admin_segment(req, 1), *why;
    const mg_route_t *route = mg_routes_find(conf->routes, name);
    uint32_t weights[MG_SPLIT_MAX_LEGS];
    if (route == NULL || route->kind != MG_ROUTE_FORWARD || route->forward.split == NULL) {
        mg_admin_send_error(req, 404, route == NULL ? "no such route" : "the route has no split");
        return;
    }
    const mg_canary_t *canary = route->forward.split->canary;
    if (canary != NULL && (canary->state == MG_CANARY_RUNNING || canary->state == MG_CANARY_PAUSED)) {
        mg_admin_send_error(req, 409, "the route's canary sets its weights: promote or abort it first");
        return;
    }
    json_t *body = json_loadb(req->entity.base != NULL ? req->entity.base : "", req->entity.len, 0, NULL);
    why = body == NULL ? "the body is not JSON" : weights_of(body, route->forward.split, weights);
    json_decref(body);
    if (why == NULL && mg_split_set_weights(route->forward.split, weights, route->forward.split->num_legs) != 0)
        why = "the weights add up to 0: at least one leg needs a weight above 0";
    if (why != NULL) {
        mg_admin_send_error(req, 400, why);
        return;
    }
    fprintf(stderr, "matchgate: admin: route %s: split weights set:", name);
    for (size_t i = 0; i < route->forward.split->num_legs; i++)
        fprintf(stderr, " %s=%u", route->forward.split->legs[i].backend_name, (unsigned)weights[i]);
    fputc('\n', stderr);
    mg_admin_send_json(req, 200, json_pack("{s:s,s:o}", "route", name, "split", mg__admin_split_json(route->forward.split)));
}
