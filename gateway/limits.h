/*
 * Limits at request time (limits.c), between h2o and the throttle: tenant and route quotas, the
 * RateLimit-* headers, the per-connection request rate. The checks return 0 to go on, or -1 after
 * sending the request its 429 (the request must not be touched afterwards).
 */
#ifndef MG_GATEWAY_LIMITS_H
#define MG_GATEWAY_LIMITS_H

#include "gateway/internal.h"

/* The tenant's quota (tenants.quotas / default_quota), when the request has a tenant. */
int mg_limits_check_tenant(mg_request_t *r, const mg_ctx_t *ctx);
/* The `quota:` of the chosen route and of its ancestors, root first. */
int mg_limits_check_routes(mg_request_t *r, const mg_ctx_t *ctx);
/* limits.max_requests_per_connection_per_second: beyond it the request gets a 429 and the
 * connection is closed (after this response for HTTP/1, at once for HTTP/2). */
int mg_limits_check_connection(mg_request_t *r);

/* One admission against the tenant's quota for something that is not a request (a bridged
 * WebSocket message): 1 admitted (also without a quota), 0 rejected with *retry_after_us set. */
int mg_limits_admit_tenant(mg_worker_t *w, const mg_config_t *conf, mg_str_t tenant, uint64_t *retry_after_us);
/* Splits a throttle key made here: returns 't' (a tenant's: `name` is the tenant), 'r' (a
 * route's: `route` and the expanded key `name`), or 0 for a key of another kind. */
int mg_limits_parse_key(const char *key, size_t len, mg_str_t *route, mg_str_t *name);
/* After a reload: moves every key of the throttle to the quota `conf` gives it. */
void mg_limits_requota(mg_throttle_t *t, const mg_config_t *conf);

#endif
