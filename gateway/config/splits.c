/*
 * A reload and the split weights set at run time (POST /routes/{name}/split): a route written as
 * it was keeps them; a route whose split changed takes the file's weights, and the reload's answer
 * says so (a warning) when that drops weights set at run time.
 */
#include <string.h>
#include "gateway/config/internal.h"

/* 1 when weights other than the file's were set at run time. */
static int set_at_run_time(const mg_route_split_t *s)
{
    for (size_t i = 0; i < s->num_legs; i++)
        if (atomic_load_explicit(&s->legs[i].weight, memory_order_relaxed) != s->legs[i].file_weight)
            return 1;
    return 0;
}

static void inherit(mg_route_t *const *list, size_t n, const mg_config_t *running, mg_errors_t *errs)
{
    for (size_t i = 0; i < n; i++) {
        mg_route_t *r = list[i];
        inherit(r->children, r->num_children, running, errs);
        if (r->kind != MG_ROUTE_FORWARD || r->forward.split == NULL || r->name == NULL)
            continue;
        const mg_route_t *old = mg_routes_find(running->routes, r->name);
        if (old == NULL || old->kind != MG_ROUTE_FORWARD || old->forward.split == NULL)
            continue;
        if (mg_split_same(r->forward.split, old->forward.split))
            mg_split_keep_weights(r->forward.split, old->forward.split);
        else if (set_at_run_time(old->forward.split))
            mg_errors_warn(errs, NULL, "route '%s': its split changed: the file's weights replace those set at run time", r->name);
    }
}

void mg__config_split_inherit(mg_config_t *conf, const mg_config_t *running, mg_errors_t *errs)
{
    if (conf->routes != NULL && running->routes != NULL)
        inherit(conf->routes->routes, conf->routes->size, running, errs);
}
