/*
 * GET /routes on the admin listener: the loaded route tree as JSON, each route with its
 * condition (as the route tree describes it), its terminal and the requests it was chosen for
 * since its configuration was loaded (a branch: the sum of the routes below it). The tree is the
 * configuration's, immutable; the counters are read as the workers write them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/admin/internal.h"
#include "gateway/backend/backend.h"

static const char *kind_name(mg_route_kind_t kind)
{
    static const char *const names[] = {"branch", "forward", "respond", "redirect", "bridge"};
    return kind <= MG_ROUTE_BRIDGE ? names[kind] : "?";
}

/* The condition as JSON (its describe() text parsed), or null for a route that always matches. */
static json_t *condition_json(const mg_matcher_t *m)
{
    if (m == NULL)
        return json_null();
    char probe[1];
    size_t len = mg_matcher_describe(m, probe, sizeof(probe));
    char *buf = malloc(len + 1);
    if (buf == NULL)
        return json_null();
    mg_matcher_describe(m, buf, len + 1);
    json_t *j = json_loads(buf, JSON_DECODE_ANY, NULL);
    free(buf);
    return j != NULL ? j : json_null();
}

/* A split's legs: each backend with the weight in force and the file's. */
json_t *mg__admin_split_json(const mg_route_split_t *s)
{
    json_t *legs = json_array();
    for (size_t i = 0; i < s->num_legs; i++)
        json_array_append_new(legs, json_pack("{s:s,s:i,s:i}", "backend", s->legs[i].backend_name, "weight",
                                              (json_int_t)atomic_load_explicit(&s->legs[i].weight, memory_order_relaxed),
                                              "file_weight", (json_int_t)s->legs[i].file_weight));
    json_t *j = json_pack("{s:o}", "legs", legs);
    if (s->canary != NULL) /* two words read without the lock: a glance; GET .../canary has it all */
        json_object_set_new(
            j, "canary",
            json_pack("{s:s,s:i}", "state", mg_canary_state_name(s->canary), "percent", (int)mg_canary_percent(s->canary)));
    if (s->sticky != NULL) {
        mg_str_t src = mg_template_source(s->sticky);
        json_object_set_new(j, "sticky", json_stringn(src.base, src.len));
    }
    return j;
}

static void add_terminal(json_t *j, const mg_route_t *r)
{
    switch (r->kind) {
    case MG_ROUTE_FORWARD:
        if (r->forward.split != NULL)
            json_object_set_new(j, "split", mg__admin_split_json(r->forward.split));
        else
            json_object_set_new(j, "backend", json_string(r->forward.backend_name));
        break;
    case MG_ROUTE_BRIDGE:
        json_object_set_new(j, "backend", json_string(r->bridge->backend_name));
        break;
    case MG_ROUTE_RESPOND:
        json_object_set_new(j, "status", json_integer(r->respond->status));
        break;
    case MG_ROUTE_REDIRECT:
        json_object_set_new(j, "status", json_integer(r->redirect->status));
        json_object_set_new(
            j, "location",
            json_stringn(mg_template_source(r->redirect->location).base, mg_template_source(r->redirect->location).len));
        break;
    default:
        break;
    }
    if (r->quota != NULL)
        json_object_set_new(j, "quota",
                            json_pack("{s:I,s:I}", "requests", (json_int_t)r->quota->limit.requests, "per_ms",
                                      (json_int_t)(r->quota->limit.per_us / 1000)));
}

static json_t *list_json(const mg_config_t *conf, mg_route_t *const *list, size_t n, uint64_t *total);

static json_t *route_json(const mg_config_t *conf, const mg_route_t *r, uint64_t *hits)
{
    char at[512];
    snprintf(at, sizeof(at), "%s:%u:%u", r->file != NULL ? r->file : "?", r->line, r->column);
    /* names, patterns and paths come from YAML, which is UTF-8 */
    json_t *j =
        json_pack("{s:s,s:s,s:o,s:s}", "name", r->name, "kind", kind_name(r->kind), "match", condition_json(r->match), "at", at);
    add_terminal(j, r);
    *hits = mg_config_route_hits(conf, r);
    if (r->kind == MG_ROUTE_BRANCH) {
        uint64_t below = 0;
        json_object_set_new(j, "routes", list_json(conf, r->children, r->num_children, &below));
        *hits += below;
    }
    json_object_set_new(j, "hits", json_integer((json_int_t)*hits));
    return j;
}

static json_t *list_json(const mg_config_t *conf, mg_route_t *const *list, size_t n, uint64_t *total)
{
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++) {
        uint64_t hits = 0;
        json_array_append_new(out, route_json(conf, list[i], &hits));
        *total += hits;
    }
    return out;
}

void mg_admin_routes(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    uint64_t total = 0;
    const mg_routes_t *routes = conf->routes;
    json_t *list = routes != NULL ? list_json(conf, routes->routes, routes->size, &total) : json_array();
    mg_admin_send_json(req, 200,
                       json_pack("{s:I,s:I,s:I,s:o}", "generation", (json_int_t)conf->generation, "count",
                                 (json_int_t)(routes != NULL ? mg_routes_count(routes) : 0), "hits", (json_int_t)total, "routes",
                                 list));
}
