/*
 * Quota decisions of a worker (store.c): through the shared store in Redis when the configuration
 * has `tenants.store` (throttle/store.h: one client per worker, on the worker's h2o loop), else
 * through the process's local throttle. A decision through the store is asynchronous: the caller
 * waits for its callback without blocking the loop, and may cancel it when what waits goes away.
 */
#ifndef MG_GATEWAY_STORE_H
#define MG_GATEWAY_STORE_H

#include "gateway/internal.h"
#include "throttle/store.h"

/* Upper bounds of the store latency histogram's buckets (MG_STORE_LATENCY_BUCKETS, internal.h),
 * in microseconds (+Inf is the count). */
#define MG_STORE_LATENCY_BOUNDS_US                                                                                                 \
    {                                                                                                                              \
        100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000                                                               \
    }

/* The answer of a decision: rc as mg_throttle_acquire's (1 admitted, 0 rejected, MG_THROTTLE_FULL,
 * -1 out of memory, which the caller admits), `d` as the local throttle fills it. */
typedef void (*mg_quota_done_t)(void *arg, int rc, const mg_decision_t *d);

/* One decision waiting for Redis; the caller's memory, valid until `done` runs or it is cancelled. */
typedef struct mg_quota_ask {
    mg_worker_t *worker;
    const mg_config_t *conf; /* held by the caller for as long as the decision */
    h2o_iovec_t key;         /* the throttle key: the caller's memory, as long as the decision */
    int bounded;             /* the key may always enter the local table (limits.c, key_ceiling) */
    mg_store_call_t *call;   /* NULL once answered or cancelled */
    int rc;                  /* what on_failure decided, when it did */
    mg_quota_done_t done;
    void *arg;
} mg_quota_ask_t;

#define MG_QUOTA_PENDING 2

/* 1 when a decision under `conf` may wait for the store (tenants.store is set): only then does
 * mg_quota_decide keep `ask`, so a caller with a local throttle needs no memory for one. */
static inline int mg_quota_may_wait(const mg_config_t *conf)
{
    return conf->tenants.store.store != NULL;
}

/*
 * Decides one admission of the throttle key `key` ("t\0<tenant>" or "r<route>\0<name>", limits.c)
 * under `quota`: the store's when `conf` has one, else the local throttle's. Returns the rc at
 * once with `*d` filled, or MG_QUOTA_PENDING: `done(arg, rc, d)` comes later on the loop, unless
 * mg_quota_cancel(ask) first. `ask` is filled here; `key` must stay valid while it waits.
 */
int mg_quota_decide(mg_worker_t *w, const mg_config_t *conf, h2o_iovec_t key, mg_quota_t quota, int bounded, mg_quota_ask_t *ask,
                    mg_quota_done_t done, void *arg, mg_decision_t *d);
/* The decision's `done` will not run (its request or message went away). Safe when answered. */
void mg_quota_cancel(mg_quota_ask_t *ask);

/* The worker's store client for its configuration (none without tenants.store). Worker thread. */
void mg_store_worker_init(mg_worker_t *w);
/* After the worker moved to another configuration: its client serves the new store (keeping its
 * connections when the servers are the same), is made, or is closed. Only from a loop callback
 * of its own (not from inside a decision's callback). */
void mg_store_worker_sync(mg_worker_t *w);
void mg_store_worker_dispose(mg_worker_t *w);

#endif
