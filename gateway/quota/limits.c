/*
 * Limits at request time, between h2o and the throttle: tenant and route quotas (429 with
 * Retry-After and RateLimit-*; the decision shown in RateLimit-* is kept on the request, for
 * response.c), and the per-connection request-rate cap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/quota/limits.h"
#include "gateway/quota/store.h"
#include "gateway/connections/connections.h"

/* Keeps the decision a client most needs to see: the one leaving it the fewest requests. */
static void keep_decision(mg_request_t *r, const mg_decision_t *d)
{
    if (!r->has_limit || !d->admitted || d->remaining < r->limit.remaining) {
        r->limit = *d;
        r->has_limit = 1;
    }
}

/*
 * The key ceiling (tenants.max_keys) applies to keys a client can invent: an unlisted tenant's,
 * a route key made from request data. Keys whose number the configuration bounds may always
 * enter the table, so that a flood of invented names never locks out a listed tenant: a
 * listed tenant's own key, and a route key made of literal text and a listed tenant's name.
 */
static int quota_listed(const mg_tenants_conf_t *tc, const mg_quota_t *quota)
{
    /* mg_tenants_quota gives a listed tenant its own entry's quota, never the default's */
    return quota != NULL && quota != &tc->default_quota;
}

/* What a request waiting for the store keeps (in its pool, made at its first wait): the routing
 * context (on_req's is on its stack), what comes next, and where the route quotas stand. */
typedef struct mg_limits_wait {
    mg_quota_ask_t ask;
    mg_request_t *r;
    mg_ctx_t ctx;
    mg_limits_next_t next;
    const char *what; /* the 429's reason */
    int routes;       /* 0: the tenant's decision waits; 1: a route's */
    size_t depth;     /* routes: the index in the route's path (root last) of the decision waiting */
} mg_limits_wait_t;

/* A decision's outcome for a request: 0 go on (also -1, out of memory, which admits: the throttle
 * must not turn a gateway short of memory into one refusing everything); -1 after the 429. */
static int settle(mg_request_t *r, int rc, const mg_decision_t *d, const char *what)
{
    if (rc == -1)
        return 0;
    keep_decision(r, d);
    if (rc == 1)
        return 0;
    /* the RateLimit-* headers come with every response (response.c) */
    mg_request_send_retry(r, 429, "throttled", rc == MG_THROTTLE_FULL ? "too many throttle keys (tenants.max_keys)" : what,
                          d->retry_after_us);
    return -1;
}

static void on_decided(void *arg, int rc, const mg_decision_t *d);

/* One decision for a request: 0 admitted, -1 (429 sent) rejected, MG_LIMITS_WAIT when it waits
 * for the store (the request's wait then holds a copy of `ctx`, and on_decided goes on). */
static int decide(mg_request_t *r, mg_ctx_t *ctx, h2o_iovec_t key, mg_quota_t quota, int bounded, const char *what,
                  mg_limits_next_t next, int routes, size_t depth)
{
    mg_decision_t d;
    /* the local throttle answers at once: no wait (a routing context's copy, past the pool's
     * small-allocation bound, so a malloc per request) is made for it */
    if (!mg_quota_may_wait(r->conf))
        return settle(r, mg_quota_decide(r->worker, r->conf, key, quota, bounded, NULL, NULL, NULL, &d), &d, what);
    mg_limits_wait_t *wait = r->quota_wait;
    if (wait == NULL) {
        wait = r->quota_wait = h2o_mem_alloc_pool(&r->req->pool, sizeof(*wait));
        memset(wait, 0, sizeof(*wait));
        wait->r = r;
    }
    int rc = mg_quota_decide(r->worker, r->conf, key, quota, bounded, &wait->ask, on_decided, wait, &d);
    if (rc != MG_QUOTA_PENDING)
        return settle(r, rc, &d, what);
    if (ctx != &wait->ctx)
        wait->ctx = *ctx;
    if (r->ctx == ctx) /* on_req's, on its stack: the answer's edits read the copy from now on */
        r->ctx = &wait->ctx;
    wait->next = next;
    wait->what = what;
    wait->routes = routes;
    wait->depth = depth;
    return MG_LIMITS_WAIT;
}

/* A throttle key: prefix, a, NUL, b (a route name cannot hold NUL: (route, key) pairs stay
 * distinct), written into `out`, which holds strlen(prefix) + a.len + 1 + b.len bytes. */
static h2o_iovec_t put_key(char *out, const char *prefix, mg_str_t a, mg_str_t b)
{
    size_t plen = strlen(prefix);
    memcpy(out, prefix, plen);
    if (a.len != 0)
        memcpy(out + plen, a.base, a.len);
    out[plen + a.len] = '\0';
    if (b.len != 0)
        memcpy(out + plen + a.len + 1, b.base, b.len);
    return h2o_iovec_init(out, plen + a.len + 1 + b.len);
}

static h2o_iovec_t make_key(h2o_mem_pool_t *pool, const char *prefix, mg_str_t a, mg_str_t b)
{
    return put_key(h2o_mem_alloc_pool(pool, strlen(prefix) + a.len + 1 + b.len), prefix, a, b);
}

int mg_limits_check_tenant(mg_request_t *r, mg_ctx_t *ctx, mg_limits_next_t next)
{
    const mg_quota_t *quota = mg_tenants_quota(&r->conf->tenants, ctx->tenant);
    if (quota == NULL || ctx->tenant.len == 0)
        return 0;
    return decide(r, ctx, make_key(&r->req->pool, "t", mg_str("", 0), ctx->tenant), *quota, quota_listed(&r->conf->tenants, quota),
                  "tenant quota exceeded", next, 0, 0);
}

int mg_limits_admit_tenant(mg_worker_t *w, const mg_config_t *conf, mg_str_t tenant, h2o_mem_pool_t *pool, mg_quota_ask_t *ask,
                           mg_quota_done_t done, void *arg, uint64_t *retry_after_us)
{
    const mg_quota_t *quota = mg_tenants_quota(&conf->tenants, tenant);
    mg_decision_t d;
    if (quota == NULL || tenant.len == 0 || tenant.len > MG_TENANT_MAX_LEN)
        return 1;
    /* the key of mg_limits_check_tenant: one quota for a tenant's requests and messages */
    int rc = mg_quota_decide(w, conf, make_key(pool, "t", mg_str("", 0), tenant), *quota, quota_listed(&conf->tenants, quota), ask,
                             done, arg, &d);
    if (rc == MG_QUOTA_PENDING)
        return MG_LIMITS_WAIT;
    if (rc == 1 || rc == -1)
        return 1;
    *retry_after_us = d.retry_after_us;
    return 0;
}

/* 1 if the configuration bounds the route's keys for this request (see quota_listed). */
static int route_key_bounded(const mg_route_t *route, const mg_ctx_t *ctx, const mg_tenants_conf_t *tc)
{
    unsigned varies = route->quota->key == NULL ? MG_TEMPLATE_TENANT : mg_template_varies(route->quota->key);
    return !(varies & MG_TEMPLATE_REQUEST) &&
           (!(varies & MG_TEMPLATE_TENANT) || quota_listed(tc, mg_tenants_quota(tc, ctx->tenant)));
}

/* The route quotas from the route at `depth` of the request's path (root last) towards the root,
 * root first: 0 all admitted, -1 after a response, MG_LIMITS_WAIT. */
static int check_routes_from(mg_request_t *r, mg_ctx_t *ctx, mg_limits_next_t next, size_t depth)
{
    const mg_route_t *path[64];
    size_t n = 0;
    for (const mg_route_t *p = r->route; p != NULL && n < 64; p = p->parent)
        path[n++] = p;
    if (depth > n)
        depth = n;
    /* root first, like actions: a branch's quota covers every route below it */
    while (depth-- > 0) {
        const mg_route_t *route = path[depth];
        mg_str_t key;
        int err, rc;
        if (route->quota == NULL)
            continue;
        /* a key that cannot be made is refused, not left uncounted: that would be a way around
         * the quota */
        if ((err = mg_route_quota_key(route, ctx, &key)) != 0) {
            mg_request_send_error(r, 400, "bad-request", mg_template_strerror(err));
            return -1;
        }
        if (key.len == 0)
            continue;
        h2o_iovec_t k = make_key(&r->req->pool, "r", mg_str(route->name, strlen(route->name)), key);
        rc = decide(r, ctx, k, route->quota->limit, route_key_bounded(route, ctx, &r->conf->tenants), "route quota exceeded", next,
                    1, depth);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int mg_limits_check_routes(mg_request_t *r, mg_ctx_t *ctx, mg_limits_next_t next)
{
    return check_routes_from(r, ctx, next, SIZE_MAX);
}

/* The store answered a request's decision: a 429, the next route quota, or what comes next. */
static void on_decided(void *arg, int rc, const mg_decision_t *d)
{
    mg_limits_wait_t *wait = arg;
    mg_request_t *r = wait->r;
    if (settle(r, rc, d, wait->what) != 0)
        return;
    if (wait->routes && check_routes_from(r, &wait->ctx, wait->next, wait->depth) != 0)
        return;
    wait->next(r, &wait->ctx);
}

void mg_limits_cancel(mg_request_t *r)
{
    if (r->quota_wait != NULL)
        mg_quota_cancel(&r->quota_wait->ask);
}

int mg_limits_check_connection(mg_request_t *r)
{
    h2o_req_t *req = r->req;
    unsigned cap = r->conf->limits.max_requests_per_connection_per_second;
    if (cap == 0)
        return 0;
    int over = mg_conn_rate_count(req->conn, h2o_now(req->conn->ctx->loop), cap);
    if (over == 0)
        return 0;
    if (over == 1)
        mg_stat_inc(&r->worker->stats.connections_rate_limited);
    /* the answer to a rapid-reset flood over HTTP/2 (h2o 2.2.5 has no mitigation of its own) */
    mg_request_send_error_and_close(r, 429, "connection-rate-limited", "limits.max_requests_per_connection_per_second exceeded");
    return -1;
}

/* ---------------------------------------------------------------------------------------
 * Throttle keys: "t\0<tenant>" for tenant quotas, "r<route>\0<key>" for route quotas.
 */
int mg_limits_parse_key(const char *key, size_t len, mg_str_t *route, mg_str_t *name)
{
    const char *nul = len > 1 ? memchr(key + 1, '\0', len - 1) : NULL;
    if (nul == NULL || (key[0] != 't' && key[0] != 'r'))
        return 0;
    *route = mg_str(key + 1, (size_t)(nul - key - 1));
    *name = mg_str(nul + 1, len - (size_t)(nul + 1 - key));
    return key[0];
}

/* Routes with a quota, sorted by name, so that requota finds a key's route by bsearch. */
typedef struct quota_routes {
    const mg_route_t **routes;
    size_t size, cap;
} quota_routes_t;

static void collect_routes(quota_routes_t *qr, mg_route_t *const *routes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const mg_route_t *route = routes[i];
        if (route->quota != NULL) {
            if (qr->size == qr->cap) {
                size_t cap = qr->cap != 0 ? qr->cap * 2 : 16;
                const mg_route_t **grown = realloc(qr->routes, cap * sizeof(*grown));
                if (grown == NULL)
                    continue; /* that route's keys keep their quota until first used */
                qr->routes = grown;
                qr->cap = cap;
            }
            qr->routes[qr->size++] = route;
        }
        collect_routes(qr, route->children, route->num_children);
    }
}

static int compare_routes(const void *a, const void *b)
{
    return strcmp((*(const mg_route_t *const *)a)->name, (*(const mg_route_t *const *)b)->name);
}

static int compare_route_name(const void *key, const void *item)
{
    return mg_str_compare(*(const mg_str_t *)key, (*(const mg_route_t *const *)item)->name);
}

typedef struct requota_arg {
    const mg_config_t *conf;
    quota_routes_t routes;
} requota_arg_t;

static int quota_of(void *arg, const char *key, size_t len, mg_quota_t *quota)
{
    requota_arg_t *a = arg;
    mg_str_t route, name;
    const mg_quota_t *q = NULL;
    const mg_route_t **found;

    switch (mg_limits_parse_key(key, len, &route, &name)) {
    case 't':
        q = mg_tenants_quota(&a->conf->tenants, name);
        break;
    case 'r':
        found = a->routes.size != 0 ? bsearch(&route, a->routes.routes, a->routes.size, sizeof(*found), compare_route_name) : NULL;
        q = found != NULL ? &(*found)->quota->limit : NULL;
        break;
    }
    if (q == NULL)
        return 0; /* no quota any more: the key keeps its own until it is evicted */
    *quota = *q;
    return 1;
}

void mg_limits_requota(mg_throttle_t *t, const mg_config_t *conf)
{
    requota_arg_t arg = {.conf = conf};
    collect_routes(&arg.routes, conf->routes->routes, conf->routes->size);
    if (arg.routes.size > 1)
        qsort(arg.routes.routes, arg.routes.size, sizeof(*arg.routes.routes), compare_routes);
    mg_throttle_requota(t, quota_of, &arg, conf->generation, mg_throttle_now());
    free(arg.routes.routes);
}
