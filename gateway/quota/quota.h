/*
 * gateway/quota: the quotas at request time, between h2o and the throttle. limits.c makes the
 * tenant and route decisions and writes the RateLimit-* numbers, store.c is each worker's client
 * of tenants.store (Redis), tenant_totals.c keeps the listed tenants' totals across evictions.
 *
 * The room's door: what the other rooms use of it. Files of the room include the part they need.
 */
#ifndef MG_GATEWAY_QUOTA_H
#define MG_GATEWAY_QUOTA_H

#include "gateway/quota/limits.h"
#include "gateway/quota/store.h"
#include "gateway/quota/tenant_totals.h"

#endif
