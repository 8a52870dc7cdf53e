/*
 * Totals of listed tenants whose throttle keys were evicted (tenant_totals.h): a sorted array of
 * names under a mutex. Written once a second at most (worker 0's eviction), read by GET /tenants;
 * never on a request's path.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/quota/tenant_totals.h"
#include "gateway/quota/limits.h"

typedef struct kept {
    char *tenant;
    uint64_t admitted, rejected;
} kept_t;

struct mg_tenant_totals {
    pthread_mutex_t lock;
    kept_t *items; /* sorted by tenant */
    size_t size, cap;
};

mg_tenant_totals_t *mg_tenant_totals_new(void)
{
    mg_tenant_totals_t *tt = calloc(1, sizeof(*tt));
    if (tt != NULL)
        pthread_mutex_init(&tt->lock, NULL);
    return tt;
}

void mg_tenant_totals_free(mg_tenant_totals_t *tt)
{
    if (tt == NULL)
        return;
    for (size_t i = 0; i < tt->size; i++)
        free(tt->items[i].tenant);
    free(tt->items);
    pthread_mutex_destroy(&tt->lock);
    free(tt);
}

/* Where `tenant` is or would go in the sorted array. */
static size_t position(const mg_tenant_totals_t *tt, mg_str_t tenant, int *found)
{
    size_t lo = 0, hi = tt->size;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = mg_str_compare(tenant, tt->items[mid].tenant);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *found = 0;
    return lo;
}

/* The entry of `tenant`, made when new; NULL when out of memory (those counts are lost). */
static kept_t *entry_of(mg_tenant_totals_t *tt, mg_str_t tenant)
{
    int found;
    size_t at = position(tt, tenant, &found);
    if (found)
        return &tt->items[at];
    if (tt->size == tt->cap) {
        size_t cap = tt->cap != 0 ? tt->cap * 2 : 16;
        kept_t *grown = realloc(tt->items, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        tt->items = grown;
        tt->cap = cap;
    }
    char *name = mg_copy(tenant.base, tenant.len);
    if (name == NULL)
        return NULL;
    memmove(&tt->items[at + 1], &tt->items[at], (tt->size - at) * sizeof(*tt->items));
    tt->items[at] = (kept_t){name, 0, 0};
    tt->size++;
    return &tt->items[at];
}

typedef struct evicting {
    mg_tenant_totals_t *tt;
    const mg_config_t *conf;
} evicting_t;

static void on_gone(void *arg, const mg_throttle_stat_t *s)
{
    evicting_t *ev = arg;
    mg_str_t route, tenant;
    const mg_quota_t *q;
    kept_t *k;
    /* only listed tenants: their number is the configuration's; anyone can invent others */
    if (mg_limits_parse_key(s->key, s->len, &route, &tenant) != 't' || (q = mg_tenants_quota(&ev->conf->tenants, tenant)) == NULL ||
        q == &ev->conf->tenants.default_quota || (k = entry_of(ev->tt, tenant)) == NULL)
        return;
    k->admitted += s->admitted;
    k->rejected += s->rejected;
}

void mg_tenant_totals_evict(mg_tenant_totals_t *tt, mg_throttle_t *t, const mg_config_t *conf, uint64_t now_us)
{
    evicting_t ev = {tt, conf};
    if (tt == NULL) {
        mg_throttle_evict(t, now_us);
        return;
    }
    pthread_mutex_lock(&tt->lock);
    mg_throttle_evict_each(t, now_us, on_gone, &ev);
    pthread_mutex_unlock(&tt->lock);
}

void mg_tenant_totals_lock(mg_tenant_totals_t *tt)
{
    if (tt != NULL)
        pthread_mutex_lock(&tt->lock);
}

void mg_tenant_totals_unlock(mg_tenant_totals_t *tt)
{
    if (tt != NULL)
        pthread_mutex_unlock(&tt->lock);
}

void mg_tenant_totals_add(const mg_tenant_totals_t *tt, const char *tenant, uint64_t *admitted, uint64_t *rejected)
{
    int found;
    size_t at = tt != NULL ? position(tt, mg_str(tenant, strlen(tenant)), &found) : 0;
    if (tt == NULL || !found)
        return;
    *admitted += tt->items[at].admitted;
    *rejected += tt->items[at].rejected;
}
