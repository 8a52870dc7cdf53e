/*
 * A split's canary on the admin API: GET /routes/{name}/canary (where it stands and its
 * decisions), POST /routes/{name}/canary/pause|resume|promote|abort. The calls take the canary's
 * lock, as the thread that decides does (backend/canary.c): an operator's call and a decision
 * never cross.
 */
#include <string.h>
#include "gateway/admin/internal.h"
#include "gateway/backend/backend.h"

/* The canary of route {name}, or NULL after a 404. */
static mg_route_t *canary_route(mg_config_t *conf, h2o_req_t *req)
{
    mg_route_t *r = (mg_route_t *)mg_routes_find(conf->routes, mg__admin_segment(req, 1));
    if (r == NULL || r->kind != MG_ROUTE_FORWARD || r->forward.split == NULL || r->forward.split->canary == NULL) {
        mg_admin_send_error(req, 404, r == NULL ? "no such route" : "the route's split has no canary");
        return NULL;
    }
    return r;
}

/* The canary as GET shows it (the caller holds the lock). */
static json_t *canary_json(const mg_route_t *r, uint64_t now_ms)
{
    const mg_canary_t *c = r->forward.split->canary;
    json_t *steps = json_array(), *history = json_array();
    for (size_t i = 0; i < c->num_steps; i++)
        json_array_append_new(steps, json_integer(c->steps[i]));
    size_t n = c->num_history < MG_CANARY_HISTORY ? c->num_history : MG_CANARY_HISTORY;
    for (size_t i = c->num_history - n; i < c->num_history; i++)
        json_array_append_new(history, mg_canary_decision_json(&c->history[i % MG_CANARY_HISTORY]));
    json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:o,s:i,s:o}", "route", r->name, "to", r->forward.split->legs[c->to].backend_name,
                          "state", mg_canary_state_name(c), "percent", (int)mg_canary_percent(c), "steps", steps, "step",
                          (int)c->step, "history", history);
    if (c->state == MG_CANARY_RUNNING && c->next_at_ms != 0)
        json_object_set_new(j, "next_decision_in_ms",
                            json_integer(c->next_at_ms > now_ms ? (json_int_t)(c->next_at_ms - now_ms) : 0));
    return j;
}

void mg_admin_canary(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    mg_route_t *r = canary_route(conf, req);
    if (r == NULL)
        return;
    mg_canary_t *c = r->forward.split->canary;
    pthread_mutex_lock(&c->lock);
    json_t *j = canary_json(r, mg_health_clock());
    pthread_mutex_unlock(&c->lock);
    mg_admin_send_json(req, 200, j);
}

/* An operator's order; NULL when done, else why not (409). */
static const char *order(mg_route_t *r, const char *action)
{
    mg_canary_t *c = r->forward.split->canary;
    int over = c->state != MG_CANARY_RUNNING && c->state != MG_CANARY_PAUSED;
    if (over)
        return "the canary is over (promoted, rolled back or aborted)";
    if (strcmp(action, "pause") == 0) {
        c->state = MG_CANARY_PAUSED;
    } else if (strcmp(action, "resume") == 0) {
        if (c->state != MG_CANARY_PAUSED)
            return "the canary is running";
        c->state = MG_CANARY_RUNNING;
        c->next_at_ms = 0; /* the step's figures start again from now */
    } else if (strcmp(action, "promote") == 0) {
        c->state = MG_CANARY_PROMOTED;
        mg_canary_set_share(r->forward.split, 100);
    } else {
        c->state = MG_CANARY_ABORTED;
        mg_canary_set_share(r->forward.split, 0);
    }
    mg_canary_decide(r, action, 0, 0, 0);
    return NULL;
}

void mg_admin_canary_action(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    static const char *const actions[] = {"pause", "resume", "promote", "abort", NULL};
    const char *action = mg__admin_segment(req, 3);
    size_t a = 0;
    while (actions[a] != NULL && strcmp(actions[a], action) != 0)
        a++;
    if (actions[a] == NULL) {
        mg_admin_send_error(req, 404, "unknown action (pause, resume, promote, abort)");
        return;
    }
    mg_route_t *r = canary_route(conf, req);
    if (r == NULL)
        return;
    mg_canary_t *c = r->forward.split->canary;
    pthread_mutex_lock(&c->lock);
    const char *why = order(r, actions[a]); /* a static name: the history keeps the pointer */
    json_t *j = why == NULL ? canary_json(r, mg_health_clock()) : NULL;
    pthread_mutex_unlock(&c->lock);
    if (why != NULL)
        mg_admin_send_error(req, 409, why);
    else
        mg_admin_send_json(req, 200, j);
}
