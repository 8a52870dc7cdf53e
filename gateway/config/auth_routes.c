/*
 * Where the routes meet the authenticators: each name a route's `auth:` gives must be one of the
 * top-level `auth:` (its index becomes a bit of the route's `accept`), and a reload keeps the keys
 * of the JWKS urls it keeps.
 */
#include <string.h>
#include "gateway/config/internal.h"

/* One route's names: an unknown one is an error at the route's `auth:`. */
static void resolve_names(mg_config_loader_t *cl, mg_route_t *r)
{
    const mg_auth_conf_t *ac = &cl->conf->auth;
    mg_route_auth_t *auth = r->auth;
    for (size_t i = 0; auth != NULL && i < auth->num_names; i++) {
        const mg_authenticator_t *a = mg_auth_find(ac, auth->names[i]);
        if (a != NULL) {
            auth->accept |= UINT64_C(1) << a->index;
            continue;
        }
        mg_errors_add_at(cl->errs, r->file, auth->line, auth->column, "route '%s': unknown authenticator '%s'%s", r->name,
                         auth->names[i], ac->num_authenticators == 0 ? " (the top-level 'auth:' declares none)" : "");
    }
}

static void walk(mg_config_loader_t *cl, mg_route_t **list, size_t n, int *warned)
{
    for (size_t i = 0; i < n; i++) {
        mg_route_t *r = list[i];
        resolve_names(cl, r);
        if (!*warned && cl->conf->auth.num_authenticators == 0 &&
            (r->needs_claims || mg_route_auth_mode(r) == MG_ROUTE_AUTH_OPTIONAL)) {
            mg_node_t at = {.file = r->file, .line = r->line, .column = r->column};
            mg_errors_warn(cl->errs, &at,
                           "route '%s' %s, but no authenticator is configured (top-level 'auth:'): no request has claims", r->name,
                           r->needs_claims ? "tests a claim" : "accepts an optional credential");
            *warned = 1;
        }
        walk(cl, r->children, r->num_children, warned);
    }
}

void mg__config_resolve_route_auth(mg_config_loader_t *cl, const mg_node_t *seq)
{
    int warned = 0;
    (void)seq;
    walk(cl, cl->conf->routes->routes, cl->conf->routes->size, &warned);
}

void mg__config_auth_inherit(mg_config_t *conf, const mg_config_t *running)
{
    for (size_t i = 0; i < conf->auth.num_authenticators; i++) {
        mg_authenticator_t *a = conf->auth.authenticators[i];
        for (size_t j = 0; a->jwks_url != NULL && j < running->auth.num_authenticators; j++) {
            const mg_authenticator_t *old = running->auth.authenticators[j];
            if (old->jwks_url != NULL && strcmp(old->jwks_url, a->jwks_url) == 0) {
                mg_keyring_adopt(a->keys, old->keys);
                break;
            }
        }
    }
}
