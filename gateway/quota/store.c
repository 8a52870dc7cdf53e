/*
 * Quota decisions of a worker: the local throttle, or the shared store in Redis (tenants.store)
 * through one client per worker driven by the worker's h2o loop. The loop adapter wraps each
 * Redis connection's descriptor in an h2o socket that does not read (hiredis reads and writes the
 * descriptor itself; h2o only reports readiness) and the client's timer in an mg_timer_t.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/quota/store.h"
#include "gateway/quota/limits.h"

typedef struct mg_store_worker {
    mg_worker_t *w;
    mg_store_loop_t loop;
    mg_store_client_t *client;           /* NULL without tenants.store */
    mg_config_t *conf;                   /* one reference: the configuration whose store the client serves */
    uint64_t base_writes, base_commands; /* of the clients closed before this one */
} mg_store_worker_t;

/* ---------------------------------------------------------------------------------------
 * The loop adapter (throttle/store.h, mg_store_loop_t) on h2o.
 */
typedef struct watch {
    h2o_socket_t *sock;
    mg_store_io_t *io;
    int want_write;  /* the client asked for one report of writability */
    int write_armed; /* h2o_socket_notify_write is pending (it may be asked for once at a time) */
} watch_t;

static void on_readable(h2o_socket_t *sock, const char *err)
{
    watch_t *wt = sock->data;
    /* errors and hang-ups too: hiredis's read finds them on the descriptor */
    mg_store_io_ready(wt->io, 1, 0); /* may detach: wt is not touched afterwards */
}

static void on_writable(h2o_socket_t *sock, const char *err)
{
    watch_t *wt = sock->data;
    wt->write_armed = 0;
    if (!wt->want_write)
        return;
    wt->want_write = 0;
    mg_store_io_ready(wt->io, 0, 1);
}

static void *io_attach(void *data, int fd, mg_store_io_t *io)
{
    mg_store_worker_t *sw = data;
    watch_t *wt = calloc(1, sizeof(*wt));
    if (wt == NULL)
        return NULL;
    /* DONT_READ: h2o reports readability and leaves the bytes to hiredis */
    wt->sock = h2o_evloop_socket_create(sw->w->ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    wt->sock->data = wt;
    wt->io = io;
    return wt;
}

static void add_read(void *p)
{
    h2o_socket_read_start(((watch_t *)p)->sock, on_readable);
}

static void del_read(void *p)
{
    h2o_socket_read_stop(((watch_t *)p)->sock);
}

static void add_write(void *p)
{
    watch_t *wt = p;
    wt->want_write = 1;
    if (!wt->write_armed) {
        wt->write_armed = 1;
        h2o_socket_notify_write(wt->sock, on_writable);
    }
}

static void del_write(void *p)
{
    ((watch_t *)p)->want_write = 0; /* a notification already asked for is ignored when it comes */
}

static void io_detach(void *p)
{
    watch_t *wt = p;
    /* h2o closes the descriptor, cancels a pending write notification and frees the socket once
     * the current callback (which may be this socket's) has returned */
    h2o_socket_read_stop(wt->sock);
    h2o_socket_close(wt->sock);
    free(wt);
}

typedef struct store_timer {
    mg_timer_t timer;
    void (*cb)(void *arg);
    void *arg;
} store_timer_t;

static void on_store_timer(mg_timer_t *timer)
{
    store_timer_t *t = H2O_STRUCT_FROM_MEMBER(store_timer_t, timer, timer);
    t->cb(t->arg);
}

static void *timer_new(void *data, void (*cb)(void *arg), void *arg)
{
    mg_store_worker_t *sw = data;
    store_timer_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    mg_timer_init(&t->timer, &sw->w->timers, on_store_timer);
    t->cb = cb;
    t->arg = arg;
    return t;
}

static void timer_set(void *p, uint64_t delay_us)
{
    mg_timer_set(&((store_timer_t *)p)->timer, (delay_us + 999) / 1000);
}

static void timer_stop(void *p)
{
    mg_timer_cancel(&((store_timer_t *)p)->timer);
}

static void timer_free(void *p)
{
    if (p == NULL)
        return;
    mg_timer_cancel(&((store_timer_t *)p)->timer);
    free(p);
}

/* ---------------------------------------------------------------------------------------
 * Decisions.
 */
static size_t key_ceiling(const mg_config_t *conf, int bounded)
{
    return bounded ? MG_THROTTLE_NO_CEILING : (size_t)conf->tenants.max_keys;
}

static void count(mg_worker_t *w, int rc)
{
    if (rc == 1)
        mg_stat_inc(&w->stats.throttle_admitted);
    else if (rc == 0 || rc == MG_THROTTLE_FULL)
        mg_stat_inc(&w->stats.throttle_rejected);
}

/* The worker's figures from its client's: the mode, and what it sent (for /metrics). */
static void note_mode(mg_store_worker_t *sw)
{
    mg_store_stats_t s = {0};
    uint64_t mode = sw->client == NULL ? 0 : mg_store_client_shared(sw->client) ? 1 : 2;
    if (sw->client != NULL)
        mg_store_client_stats(sw->client, &s);
    atomic_store_explicit(&sw->w->stats.store_mode, mode, memory_order_relaxed);
    atomic_store_explicit(&sw->w->stats.store_writes, sw->base_writes + s.flushes, memory_order_relaxed);
    atomic_store_explicit(&sw->w->stats.store_commands, sw->base_commands + s.commands, memory_order_relaxed);
}

/* Closes the worker's client, keeping what it sent in the worker's totals. */
static void client_close(mg_store_worker_t *sw)
{
    mg_store_stats_t s;
    if (sw->client == NULL)
        return;
    mg_store_client_stats(sw->client, &s); /* closing sends nothing more */
    mg_store_client_free(sw->client);      /* may answer decisions (note_mode): sw->client is still set */
    sw->client = NULL;
    sw->base_writes += s.flushes;
    sw->base_commands += s.commands;
}

/*
 * on_failure, with the configuration's policy: `local` decides on the node's own limiter with
 * N / nodes, under a key of its own ("f" + the throttle key) so that the local table's listing and
 * requota (limits.c) leave these shares alone. Its rc goes to the ask (a full table rejects).
 */
static int on_failure(void *arg, void *call_arg, mg_quota_t quota, mg_store_failure_t why, mg_decision_t *d)
{
    mg_quota_ask_t *ask = call_arg;
    const mg_tenants_store_t *ts = &ask->conf->tenants.store;
    char key[1 + 2048];
    int rc;

    (void)arg;
    (void)why;
    switch (ts->on_failure) {
    case MG_STORE_POLICY_ALLOW:
        *d = (mg_decision_t){.admitted = 1, .limit = quota.requests, .remaining = quota.requests - 1};
        rc = 1;
        break;
    case MG_STORE_POLICY_REJECT:
        *d = (mg_decision_t){.limit = quota.requests, .retry_after_us = 1000000, .reset_us = 1000000};
        rc = 0;
        break;
    default:
        if (ask->key.len >= sizeof(key)) {
            rc = -1; /* no throttle key is this long (limits.c bounds them) */
            break;
        }
        key[0] = 'f';
        memcpy(key + 1, ask->key.base, ask->key.len);
        rc = mg_store_fallback_local(ask->worker->gw->throttle, key, ask->key.len + 1, quota, ts->nodes, ask->conf->generation,
                                     key_ceiling(ask->conf, ask->bounded), mg_throttle_now(), d);
        break;
    }
    ask->rc = rc;
    return rc == 1 || rc == -1;
}

/* The rc of a store result: Redis's decision, or the one on_failure left in the ask. */
static int result_rc(mg_quota_ask_t *ask, const mg_store_result_t *r)
{
    ask->call = NULL;
    return r->failure == MG_STORE_OK ? r->decision.admitted != 0 : ask->rc;
}

static void count_result(mg_worker_t *w, const mg_store_result_t *r)
{
    static const uint64_t bounds[MG_STORE_LATENCY_BUCKETS] = MG_STORE_LATENCY_BOUNDS_US;
    if (r->failure != MG_STORE_OK) {
        mg_stat_inc(&w->stats.store_fallback);
        mg_stat_inc(&w->stats.store_errors[r->failure & 3]);
        return;
    }
    mg_stat_inc(&w->stats.store_shared);
    size_t i = 0;
    while (i < MG_STORE_LATENCY_BUCKETS && r->latency_us > bounds[i])
        i++;
    if (i < MG_STORE_LATENCY_BUCKETS)
        mg_stat_inc(&w->stats.store_latency[i]);
    mg_stat_add(&w->stats.store_latency_sum_us, r->latency_us);
}

static void on_answer(void *call_arg, const mg_store_result_t *r)
{
    mg_quota_ask_t *ask = call_arg;
    int rc = result_rc(ask, r);
    count_result(ask->worker, r);
    count(ask->worker, rc);
    note_mode(ask->worker->store);
    ask->done(ask->arg, rc, &r->decision);
}

/* The store's (tag, rest) of a throttle key: a tenant's keys are tagged with the tenant, a
 * route's with its expanded key, so that a Cluster spreads them. */
static void split_key(h2o_iovec_t key, mg_str_t *tag, mg_str_t *rest)
{
    mg_str_t route, name;
    if (mg_limits_parse_key(key.base, key.len, &route, &name) == 't') {
        *tag = name;
        *rest = mg_str("t", 1);
    } else {
        *tag = name;
        *rest = mg_str(key.base, (size_t)(route.base + route.len - key.base)); /* "r<route>" */
    }
}

static int decide_local(mg_worker_t *w, const mg_config_t *conf, h2o_iovec_t key, mg_quota_t quota, int bounded, mg_decision_t *d)
{
    int rc = mg_throttle_acquire(w->gw->throttle, key.base, key.len, quota, conf->generation, key_ceiling(conf, bounded),
                                 mg_throttle_now(), d);
    count(w, rc);
    return rc;
}

int mg_quota_decide(mg_worker_t *w, const mg_config_t *conf, h2o_iovec_t key, mg_quota_t quota, int bounded, mg_quota_ask_t *ask,
                    mg_quota_done_t done, void *arg, mg_decision_t *d)
{
    mg_store_worker_t *sw = w->store;
    mg_store_result_t now;
    mg_str_t tag, rest;

    if (!mg_quota_may_wait(conf))
        return decide_local(w, conf, key, quota, bounded, d);
    *ask = (mg_quota_ask_t){.worker = w, .conf = conf, .key = key, .bounded = bounded, .done = done, .arg = arg};
    if (sw == NULL || sw->client == NULL) {
        /* the worker has no client yet (out of memory, or its reload message is still on the way) */
        int admitted = on_failure(sw, ask, quota, MG_STORE_DOWN, d);
        now = (mg_store_result_t){.decision = *d, .failure = MG_STORE_DOWN};
        now.decision.admitted = admitted;
        int rc = result_rc(ask, &now);
        count_result(w, &now);
        count(w, rc);
        return rc;
    }
    split_key(key, &tag, &rest);
    mg_store_call_t *call;
    int rc = mg_store_decide(sw->client, tag.base, tag.len, rest.base, rest.len, quota, on_answer, ask, &call, &now);
    if (rc == MG_STORE_PENDING) {
        ask->call = call;
        return MG_QUOTA_PENDING;
    }
    if (rc < 0) /* out of memory: admitted, as the local throttle does */
        return decide_local(w, conf, key, quota, bounded, d);
    rc = result_rc(ask, &now);
    count_result(w, &now);
    count(w, rc);
    note_mode(sw);
    *d = now.decision;
    return rc;
}

void mg_quota_cancel(mg_quota_ask_t *ask)
{
    if (ask->call == NULL)
        return;
    mg_store_cancel(ask->call);
    ask->call = NULL;
}

/* ---------------------------------------------------------------------------------------
 * The worker's client.
 */
static void on_event(void *arg, const char *node, const char *event)
{
    mg_store_worker_t *sw = arg;
    /* transitions only: a worker's connection comes up, goes down, turns slow */
    fprintf(stderr, "matchgate: worker %u: redis %s: %s\n", sw->w->id, node, event);
    note_mode(sw);
}

static mg_store_client_t *client_new(mg_store_worker_t *sw, mg_store_t *store)
{
    mg_store_client_conf_t cc = {.loop = &sw->loop, .on_failure = on_failure, .on_event = on_event, .arg = sw};
    mg_store_client_t *c = mg_store_client_new(store, &cc);
    if (c == NULL)
        fprintf(stderr, "matchgate: worker %u: out of memory for the store client: quotas follow on_failure\n", sw->w->id);
    return c;
}

void mg_store_worker_init(mg_worker_t *w)
{
    mg_store_worker_t *sw = h2o_mem_alloc(sizeof(*sw)); /* aborts when out of memory, as h2o does */
    *sw = (mg_store_worker_t){.w = w};
    sw->loop = (mg_store_loop_t){sw,        io_attach, add_read,  del_read,   add_write, del_write,
                                 io_detach, timer_new, timer_set, timer_stop, timer_free};
    w->store = sw;
    mg_store_worker_sync(w);
}

void mg_store_worker_sync(mg_worker_t *w)
{
    mg_store_worker_t *sw = w->store;
    mg_config_t *conf = w->conf;
    mg_store_t *from = sw->conf != NULL ? sw->conf->tenants.store.store : NULL,
               *to = conf != NULL ? conf->tenants.store.store : NULL;

    if (conf == sw->conf)
        return;
    if (sw->client != NULL && to != NULL && mg_store_same_servers(from, to)) {
        mg_store_client_retarget(sw->client, to); /* the connections and the mode stay */
    } else if (from != NULL || to != NULL) {
        /* pending decisions are answered by on_failure first; decisions their requests start
         * meanwhile are answered at once */
        client_close(sw);
        if (to != NULL)
            sw->client = client_new(sw, to);
    }
    if (sw->conf != NULL)
        mg_config_release(sw->conf);
    sw->conf = conf != NULL ? mg_config_retain(conf) : NULL;
    note_mode(sw);
}

void mg_store_worker_dispose(mg_worker_t *w)
{
    mg_store_worker_t *sw = w->store;
    if (sw == NULL)
        return;
    client_close(sw);
    note_mode(sw);
    if (sw->conf != NULL)
        mg_config_release(sw->conf);
    free(sw);
    w->store = NULL;
}
