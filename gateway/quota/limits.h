/*
 * Limits at request time (limits.c), between h2o and the throttle: tenant and route quotas, the
 * RateLimit-* headers, the per-connection request rate. The checks return 0 to go on, or -1 after
 * sending the request its 429 (the request must not be touched afterwards). With tenants.store a
 * quota check may also return MG_LIMITS_WAIT: its decision waits for Redis, and `next(r, ctx)`
 * runs once it is admitted (a copy of `ctx` kept in the request's pool), or the 429 is sent;
 * mg_limits_cancel when the request is disposed meanwhile.
 */
#ifndef MG_GATEWAY_LIMITS_H
#define MG_GATEWAY_LIMITS_H

#include "gateway/internal.h"
#include "gateway/quota/store.h"

#define MG_LIMITS_WAIT 2 /* not 1: mg_limits_admit_tenant returns 1 for admitted */
typedef void (*mg_limits_next_t)(mg_request_t *r, mg_ctx_t *ctx);

/* The tenant's quota (tenants.quotas / default_quota), when the request has a tenant. */
int mg_limits_check_tenant(mg_request_t *r, mg_ctx_t *ctx, mg_limits_next_t next);
/* The `quota:` of the chosen route and of its ancestors, root first. */
int mg_limits_check_routes(mg_request_t *r, mg_ctx_t *ctx, mg_limits_next_t next);
/* The request is disposed: a decision it waits for will not call it. */
void mg_limits_cancel(mg_request_t *r);
/* limits.max_requests_per_connection_per_second: beyond it the request gets a 429 and the
 * connection is closed (after this response for HTTP/1, at once for HTTP/2). */
int mg_limits_check_connection(mg_request_t *r);

/* One admission against the tenant's quota for something that is not a request (a bridged
 * WebSocket message): 1 admitted (also without a quota), 0 rejected with *retry_after_us set, or
 * MG_LIMITS_WAIT: `done(arg, rc, d)` comes (rc 1 or -1 admits) unless mg_quota_cancel(ask) first.
 * The key is made in `pool`, which must last as long as the decision. */
int mg_limits_admit_tenant(mg_worker_t *w, const mg_config_t *conf, mg_str_t tenant, h2o_mem_pool_t *pool, mg_quota_ask_t *ask,
                           mg_quota_done_t done, void *arg, uint64_t *retry_after_us);
/* Splits a throttle key made here: returns 't' (a tenant's: `name` is the tenant), 'r' (a
 * route's: `route` and the expanded key `name`), or 0 for a key of another kind. */
int mg_limits_parse_key(const char *key, size_t len, mg_str_t *route, mg_str_t *name);
/* After a reload: moves every key of the throttle to the quota `conf` gives it. */
void mg_limits_requota(mg_throttle_t *t, const mg_config_t *conf);

#endif
