/*
 * Dispatch through the backends' schedulers (dispatch.c): one scheduler per backend name for the
 * life of the process; a turn in it for every forwarded request and bridged message; the timers
 * of queue_timeout on each worker.
 */
#ifndef MG_GATEWAY_DISPATCH_H
#define MG_GATEWAY_DISPATCH_H

#include "gateway/internal.h"
#include "scheduler/scheduler.h"

/* Upper bounds of the waiting-time histogram's buckets, in microseconds (+Inf is the count). */
#define MG_WAIT_BUCKETS 12
#define MG_WAIT_BUCKET_BOUNDS_US                                                                                                   \
    {                                                                                                                              \
        1000, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000                               \
    }

/* A backend's scheduler, kept by name for the life of the process: a reload that keeps the
 * backend keeps its waiting requests (dispatch.c). Counters for /metrics beside it. */
typedef struct mg_backend_sched {
    char *name;
    struct mg_sched *sched;
    size_t index;                                       /* in mg_gateway.scheds */
    atomic_uint_fast64_t wait_buckets[MG_WAIT_BUCKETS]; /* started requests by time waited (not cumulative) */
    atomic_uint_fast64_t wait_count, wait_sum_us;
    atomic_uint_fast64_t running; /* requests sent (started) and not yet completed */
    atomic_uint share;            /* max_queued_per_key of the configuration in use (a bridge's read bound) */
} mg_backend_sched_t;

/* Gives every backend of `conf` its scheduler: the one of the same name from an earlier
 * configuration (reconfigured: its waiting requests stay), else a new one. 0, or -1 when out of
 * memory: then no live scheduler has been reconfigured (new ones made meanwhile stay, unused
 * until a configuration names their backend). Main thread or under reload_lock, before `conf`
 * is published; workers then re-arm their queue timers (mg_dispatch_worker_rearm). */
int mg_dispatch_bind(mg_gateway_t *gw, mg_config_t *conf);
/* Sends `r` to the route's backend through its scheduler: at once, or when its turn comes
 * (ordering key, max_in_flight), or a 503 (queue-full, queue-timeout). Always ends with a
 * response. `ctx` is the routing context after the route's actions (for order.key). */
void mg_dispatch_forward(mg_request_t *r, const mg_ctx_t *ctx);
/* The request is being disposed: completes its job if still running (the next one of its key
 * may start) or withdraws it while it waits. */
void mg_dispatch_release(mg_request_t *r);
/* After a reload (on the worker, from its "configuration swapped" message): re-arms this worker's
 * queue timers, since a lower queue_timeout brings the waiting requests' deadlines forward. */
void mg_dispatch_worker_rearm(mg_worker_t *w);
/*
 * A place in a backend's scheduler for any piece of work of a worker (a forwarded request, a
 * bridged WebSocket message). Its run callback comes on the worker through its receiver.
 * submit -> STARTED: call mg_turn_started and run it now; QUEUED: wait for the callback
 * (MG_SCHED_RUN: mg_turn_started, run); a refusal: the turn is over. A started turn ends with
 * mg_turn_complete (its slot and its key's turn pass on); a waiting one may be withdrawn with
 * mg_turn_cancel (0: its callback is on its way and must be waited for). Whatever the path,
 * mg_turn_finished when the memory holding the turn is given up (the worker counts turns alive).
 */
typedef struct mg_turn {
    mg_sched_task_t task;
    h2o_multithread_message_t msg; /* carries the task to its worker (the scheduler's executor) */
    mg_backend_sched_t *bs;
    uint64_t submitted_us;
    int running; /* started and counted in bs->running */
} mg_turn_t;

/* `key` orders the turn (empty: unordered); `client` is who it counts against in the backend's
 * fair share of waiting (mg_turn_client; empty: no one). */
mg_sched_result_t mg_turn_submit(mg_turn_t *t, mg_worker_t *w, mg_backend_sched_t *bs, mg_str_t key, mg_str_t client,
                                 mg_sched_priority_t priority, mg_sched_run_cb cb);
void mg_turn_started(mg_turn_t *t);
void mg_turn_complete(mg_turn_t *t);
int mg_turn_cancel(mg_turn_t *t);
void mg_turn_finished(mg_worker_t *w);
/* The client a turn counts against in its backend's queue (max_queued_per_key): "t:<tenant>" when
 * the tenant is known, else "c:<conn_id>" (the client connection; 0: none, an empty result).
 * Written into `buf`, MG_TURN_CLIENT_LEN bytes. */
#define MG_TURN_CLIENT_LEN (MG_TENANT_MAX_LEN + 24)
mg_str_t mg_turn_client(char *buf, mg_str_t tenant, uint64_t conn_id);
/* Why a turn was refused (FULL, KEY_FULL, GROUP_FULL, DRAINING, NOMEM), for a 503 queue-full: of a
 * request, or (`bridged`) of a bridged message, whose ordering key is its session. */
const char *mg_turn_refusal(mg_sched_result_t res, int bridged);

/* A worker's receiver for scheduler deliveries (after its queue exists), and its timers' end. */
void mg_dispatch_worker_init(mg_worker_t *w);
void mg_dispatch_worker_dispose(mg_worker_t *w);

#endif
