/*
 * GET /tenants on the admin listener: every configured tenant (seen or not) and every key the
 * throttle holds, with its quota, what it used in the window ending now, and its totals.
 * Runs on the admin thread; the throttle is read concurrently with the workers' decisions.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/admin/internal.h"
#include "gateway/quota/quota.h"

/* One key copied out of the throttle (the key string is only valid during the callback). */
typedef struct listed {
    int kind; /* 't' or 'r' */
    char *route, *name;
    mg_throttle_stat_t stat;
} listed_t;

typedef struct listing {
    listed_t *items;
    size_t size, cap;
    int oom;
} listing_t;

static char *dup_str(mg_str_t s)
{
    char *p = malloc(s.len + 1);
    if (p != NULL) {
        memcpy(p, s.base, s.len);
        p[s.len] = '\0';
    }
    return p;
}

static void on_key(void *arg, const mg_throttle_stat_t *s)
{
    listing_t *l = arg;
    mg_str_t route, name;
    int kind = mg_limits_parse_key(s->key, s->len, &route, &name);

    if (kind == 0 || l->oom)
        return;
    if (l->size == l->cap) {
        size_t cap = l->cap != 0 ? l->cap * 2 : 64;
        listed_t *grown = realloc(l->items, cap * sizeof(*grown));
        if (grown == NULL) {
            l->oom = 1;
            return;
        }
        l->items = grown;
        l->cap = cap;
    }
    listed_t *it = &l->items[l->size];
    *it = (listed_t){.kind = kind, .route = dup_str(route), .name = dup_str(name), .stat = *s};
    it->stat.key = NULL;
    if (it->route == NULL || it->name == NULL) {
        free(it->route);
        free(it->name);
        l->oom = 1;
        return;
    }
    l->size++;
}

static int compare_listed(const void *a, const void *b)
{
    const listed_t *x = a, *y = b;
    int c = x->kind - y->kind;
    if (c == 0)
        c = strcmp(x->route, y->route);
    return c != 0 ? c : strcmp(x->name, y->name);
}

static json_t *quota_json(mg_quota_t q)
{
    return json_pack("{s:I,s:I}", "requests", (json_int_t)q.requests, "per_ms", (json_int_t)(q.per_us / 1000));
}

/* Tenants and route keys come from requests and need not be UTF-8: such a name is listed with
 * '?' for each byte outside ASCII rather than dropped. */
static json_t *name_json(const char *name)
{
    json_t *j = json_string(name);
    if (j != NULL)
        return j;
    char *ascii = strdup(name);
    if (ascii == NULL)
        return json_null();
    for (char *p = ascii; *p != '\0'; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    j = json_string(ascii);
    free(ascii);
    return j;
}

static json_t *stat_json(const char *label, const char *name, const mg_throttle_stat_t *s)
{
    uint32_t remaining = s->used < s->quota.requests ? s->quota.requests - s->used : 0;
    return json_pack("{s:o,s:o,s:I,s:I,s:I,s:I}", label, name_json(name), "quota", quota_json(s->quota), "used",
                     (json_int_t)s->used, "remaining", (json_int_t)remaining, "admitted", (json_int_t)s->admitted, "rejected",
                     (json_int_t)s->rejected);
}

/* The listing is sorted (compare_listed): a tenant's key is found by bsearch. */
static const listed_t *find_tenant(const listing_t *l, const char *tenant)
{
    listed_t key = {.kind = 't', .route = "", .name = (char *)tenant};
    return l->size != 0 ? bsearch(&key, l->items, l->size, sizeof(*l->items), compare_listed) : NULL;
}

/* Whether `tenant` has its own entry in tenants.quotas (not just the default). */
static int configured(const mg_tenants_conf_t *tc, const char *tenant)
{
    const mg_quota_t *q = mg_tenants_quota(tc, mg_str(tenant, strlen(tenant)));
    return q != NULL && q != &tc->default_quota;
}

/* Configured tenants first, by name (an unseen one shows its quota and zeros), then by name
 * the others the throttle holds: seen under the default quota, or under a quota a reload took
 * away. */
static json_t *tenants_json(mg_gateway_t *gw, const mg_config_t *conf, const listing_t *l)
{
    json_t *out = json_array();
    const mg_tenants_conf_t *tc = &conf->tenants;

    for (size_t i = 0; i < tc->num_quotas; i++) {
        const listed_t *seen = find_tenant(l, tc->quotas[i].tenant);
        mg_throttle_stat_t stat = seen != NULL ? seen->stat : (mg_throttle_stat_t){.quota = tc->quotas[i].quota};
        /* totals since start: the keys the throttle forgot count too */
        mg_tenant_totals_add(gw->tenant_totals, tc->quotas[i].tenant, &stat.admitted, &stat.rejected);
        json_array_append_new(out, stat_json("tenant", tc->quotas[i].tenant, &stat));
    }
    for (size_t i = 0; i < l->size; i++)
        if (l->items[i].kind == 't' && !configured(tc, l->items[i].name))
            json_array_append_new(out, stat_json("tenant", l->items[i].name, &l->items[i].stat));
    return out;
}

static json_t *routes_json(const listing_t *l)
{
    json_t *out = json_array();
    for (size_t i = 0; i < l->size; i++) {
        if (l->items[i].kind != 'r')
            continue;
        json_t *item = stat_json("key", l->items[i].name, &l->items[i].stat);
        json_object_set_new(item, "route", name_json(l->items[i].route));
        json_array_append_new(out, item);
    }
    return out;
}

static void listing_free(listing_t *l)
{
    for (size_t i = 0; i < l->size; i++) {
        free(l->items[i].route);
        free(l->items[i].name);
    }
    free(l->items);
}

/* Which mode decides the quotas: "local" (no tenants.store), "shared" (every worker's Redis
 * connections answer), or "fallback" (some decisions go to on_failure). */
static json_t *store_json(mg_gateway_t *gw, const mg_config_t *conf)
{
    static const char *const policies[] = {"local", "allow", "reject"};
    const mg_tenants_store_t *ts = &conf->tenants.store;
    if (ts->store == NULL)
        return json_pack("{s:s}", "mode", "local");
    unsigned shared = 0;
    for (unsigned i = 0; i < gw->num_workers; i++)
        shared += mg_stat_read(&gw->workers[i].stats.store_mode) == 1;
    return json_pack("{s:s,s:s,s:s,s:i,s:i,s:i}", "mode", shared == gw->num_workers ? "shared" : "fallback", "redis", ts->redis,
                     "on_failure", policies[ts->on_failure], "nodes", (json_int_t)ts->nodes, "workers", (json_int_t)gw->num_workers,
                     "workers_shared", (json_int_t)shared);
}

void mg_admin_tenants(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    listing_t l = {0};

    /* no eviction between the listing and the kept totals: each admission counts once */
    mg_tenant_totals_lock(gw->tenant_totals);
    mg_throttle_foreach(gw->throttle, mg_throttle_now(), on_key, &l);
    if (l.oom) {
        mg_tenant_totals_unlock(gw->tenant_totals);
        listing_free(&l);
        mg_admin_send_error(req, 503, "out of memory");
        return;
    }
    if (l.size > 1)
        qsort(l.items, l.size, sizeof(*l.items), compare_listed);
    json_t *tenants = tenants_json(gw, conf, &l);
    mg_tenant_totals_unlock(gw->tenant_totals);
    json_t *body = json_pack("{s:I,s:o,s:o,s:o}", "generation", (json_int_t)conf->generation, "tenants", tenants, "routes",
                             routes_json(&l), "store", store_json(gw, conf));
    listing_free(&l);
    mg_admin_send_json(req, 200, body);
}
