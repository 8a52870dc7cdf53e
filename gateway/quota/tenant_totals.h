/*
 * The totals of listed tenants (tenants.quotas) since the process started (tenant_totals.c). The
 * throttle forgets a key once its window has passed with nothing in it, and its counts with it;
 * GET /tenants promises totals for listed tenants, so the counts of their forgotten keys are kept
 * here (a bounded set: the tenants the configurations list) and added to what the throttle holds.
 */
#ifndef MG_GATEWAY_TENANT_TOTALS_H
#define MG_GATEWAY_TENANT_TOTALS_H

#include "gateway/internal.h"

typedef struct mg_tenant_totals mg_tenant_totals_t;

/* NULL when out of memory. */
mg_tenant_totals_t *mg_tenant_totals_new(void);
void mg_tenant_totals_free(mg_tenant_totals_t *tt);
/* Evicts the throttle's idle keys (mg_throttle_evict_each), keeping the totals of those that are
 * a tenant listed in `conf`. Any thread; serialized with the readers below. */
void mg_tenant_totals_evict(mg_tenant_totals_t *tt, mg_throttle_t *t, const mg_config_t *conf, uint64_t now_us);
/* Between lock and unlock no eviction runs: a listing of the throttle and the totals kept here
 * then count every admission once. */
void mg_tenant_totals_lock(mg_tenant_totals_t *tt);
void mg_tenant_totals_unlock(mg_tenant_totals_t *tt);
/* Adds the kept totals of `tenant` to *admitted and *rejected (nothing when none are kept). Locked. */
void mg_tenant_totals_add(const mg_tenant_totals_t *tt, const char *tenant, uint64_t *admitted, uint64_t *rejected);

#endif
