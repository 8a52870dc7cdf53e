/*
 * Dispatch: every forward goes through its backend's scheduler (scheduler/scheduler.h), which
 * decides when it may be sent: per ordering key one at a time, at most max_in_flight at once,
 * fair turns between keys, a queue_timeout for what waits.
 *
 * A request's place in the scheduler is a job, kept apart from the request's pool: a job
 * withdrawn too late (its callback is already posted) must outlive the request until that
 * callback comes. Jobs are taken from and given back to a free list of the worker (every step of
 * a job runs on its owner), so a forward mallocs none once the worker has served its first
 * MG_FREE_JOBS_MAX at once. Life of a job, on the worker that owns the client connection:
 *   submit -> STARTED: the backend request is sent at once;
 *          -> QUEUED: the job waits; a callback comes through the worker's receiver:
 *             RUN -> send it; TIMEOUT -> 503 queue-timeout + Retry-After; CANCELLED -> 503;
 *          -> refused (FULL, KEY_FULL, GROUP_FULL, DRAINING, NOMEM): 503 queue-full + Retry-After.
 * The job is completed (its slot and its key's turn passed on) as soon as the backend transfer
 * is over: the backend has answered in full (the client may still be reading it), or the
 * transfer failed or was cancelled (the forward's `over` callback is complete_job). A client that reads
 * slowly so holds neither a slot nor its key's turn. complete_job clears r->job, so it
 * happens once; the dispose of the request completes a job still running (mg_dispatch_release).
 * A request disposed while its job waits withdraws it (mg_sched_cancel); if the callback was
 * already posted, the job stays, orphaned, until it comes.
 *
 * Backpressure: h2o 2.2.5 reads nothing more from an HTTP/1 connection while a request is in
 * progress, so a waiting request holds its connection's reading by itself; HTTP/2 connections
 * are bounded by limits.max_http2_streams. Waiting is bounded per backend by QUEUE_MAX: beyond
 * it requests are refused with 503 queue-full (QUEUED_FULL is not used).
 *
 * Fair shares (max_queued_per_key): so that one client cannot take the whole QUEUE_MAX, the
 * scheduler refuses a turn that must wait while max_queued_per_key turns of its ordering key
 * wait (KEY_FULL: an order key, a bridge session), or of its client (GROUP_FULL: the tenant,
 * else the client connection: mg_turn_client). The scheduler counts both exactly while the
 * turn waits, so no count here can drift: a turn leaves the counts whatever ends its wait.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/request/dispatch.h"
#include "gateway/format.h"
#include "gateway/request/client_watch.h"
#include "gateway/backend/backend.h"

/* Waiting requests per backend beyond which new ones get 503 queue-full. */
#define QUEUE_MAX 10000

/* Jobs a worker keeps for reuse: enough for the requests of 1,000 busy connections (about
 * 200 KiB), beyond which a burst's jobs go back to malloc. None under AddressSanitizer, so
 * that a job used after its end is still caught there. */
#if defined(__SANITIZE_ADDRESS__)
#define MG_FREE_JOBS_MAX 0
#else
#define MG_FREE_JOBS_MAX 1024
#endif

typedef struct mg_job {
    mg_turn_t turn;
    mg_request_t *r;         /* NULL once the request is disposed (an orphan) */
    mg_client_watch_t watch; /* while waiting (HTTP/1) */
    struct mg_job *next;     /* in the worker's free list */
} mg_job_t;

/* ---------------------------------------------------------------------------------------
 * Schedulers, one per backend name for the life of the process (a reload carries them over)
 */
static void post(void *ctx, mg_sched_task_t *task)
{
    mg_turn_t *turn = H2O_STRUCT_FROM_MEMBER(mg_turn_t, task, task);
    mg_worker_t *w = task->owner;
    (void)ctx;
    h2o_multithread_send_message(&w->sched_receiver, &turn->msg);
}

static mg_sched_config_t sched_config_of(const mg_backend_conf_t *b)
{
    return (mg_sched_config_t){.max_in_flight = b->max_in_flight,
                               .queue_timeout_us = b->queue_timeout_ms * 1000,
                               .queue_max = QUEUE_MAX,
                               .key_queue_max = b->max_queued_per_key,
                               .group_queue_max = b->max_queued_per_key};
}

static mg_backend_sched_t *find_sched(mg_gateway_t *gw, const char *name)
{
    for (size_t i = 0; i < gw->num_scheds; i++)
        if (strcmp(gw->scheds[i]->name, name) == 0)
            return gw->scheds[i];
    return NULL;
}

static mg_backend_sched_t *new_sched(mg_gateway_t *gw, const mg_backend_conf_t *b)
{
    static const mg_sched_executor_t executor = {post, NULL};
    mg_sched_config_t cfg = sched_config_of(b);
    mg_backend_sched_t *bs = calloc(1, sizeof(*bs)), **grown = realloc(gw->scheds, (gw->num_scheds + 1) * sizeof(*grown));
    if (grown != NULL)
        gw->scheds = grown;
    if (bs == NULL || grown == NULL || (bs->name = strdup(b->name)) == NULL ||
        (bs->sched = mg_sched_new(&cfg, &executor)) == NULL) {
        if (bs != NULL)
            free(bs->name);
        free(bs);
        return NULL;
    }
    bs->index = gw->num_scheds;
    gw->scheds[gw->num_scheds++] = bs;
    return bs;
}

int mg_dispatch_bind(mg_gateway_t *gw, mg_config_t *conf)
{
    /* every missing scheduler first: a reload that fails here must leave the live ones as they
     * are (a new one unused by the failed configuration just waits for a later reload) */
    for (size_t i = 0; i < conf->num_backends; i++)
        if (find_sched(gw, conf->backends[i].name) == NULL && new_sched(gw, &conf->backends[i]) == NULL)
            return -1;
    for (size_t i = 0; i < conf->num_backends; i++) {
        mg_backend_conf_t *b = &conf->backends[i];
        mg_sched_config_t cfg = sched_config_of(b);
        b->sched = find_sched(gw, b->name);
        mg_sched_configure(b->sched->sched, &cfg); /* waiting requests stay, in order */
        atomic_store_explicit(&b->sched->share, b->max_queued_per_key, memory_order_relaxed);
    }
    return mg_backend_bind_health(conf); /* the servers' health words, kept across reloads */
}

/* ---------------------------------------------------------------------------------------
 * Queue timeouts: one timer per worker and scheduler, armed while this worker has queued work
 */
typedef struct mg_expiry {
    mg_timer_t timer;
    mg_sched_t *sched;
} mg_expiry_t;

static void on_expiry(mg_timer_t *timer)
{
    mg_expiry_t *e = H2O_STRUCT_FROM_MEMBER(mg_expiry_t, timer, timer);
    uint64_t now = mg_sched_now_us(), next = mg_sched_expire(e->sched, now);
    if (next != MG_SCHED_NO_DEADLINE)
        mg_timer_set(&e->timer, next > now ? (next - now + 999) / 1000 : 0);
}

/* Arms the timer at the scheduler's next deadline unless it is armed at that time or earlier
 * (a reload may have brought the deadline forward: a lower queue_timeout). */
static void arm_at_next_deadline(mg_expiry_t *e)
{
    uint64_t now = mg_sched_now_us(), next = mg_sched_next_deadline(e->sched);
    if (next == MG_SCHED_NO_DEADLINE)
        return;
    uint64_t delay_ms = next > now ? (next - now + 999) / 1000 : 0;
    if (mg_timer_is_set(&e->timer) && e->timer.deadline <= h2o_now(e->timer.timers->loop) + delay_ms)
        return;
    mg_timer_set(&e->timer, delay_ms);
}

static void arm_expiry(mg_worker_t *w, mg_backend_sched_t *bs)
{
    if (bs->index >= w->num_expiries) {
        size_t n = bs->index + 1;
        mg_expiry_t **grown = realloc(w->expiries, n * sizeof(*grown));
        if (grown == NULL)
            return; /* another worker's timer, or a later request's, expires it */
        memset(grown + w->num_expiries, 0, (n - w->num_expiries) * sizeof(*grown));
        w->expiries = grown;
        w->num_expiries = n;
    }
    mg_expiry_t *e = w->expiries[bs->index];
    if (e == NULL) {
        if ((e = w->expiries[bs->index] = calloc(1, sizeof(*e))) == NULL)
            return;
        mg_timer_init(&e->timer, &w->timers, on_expiry);
        e->sched = bs->sched;
    }
    /* armed: at the earliest deadline already, since later submissions have later deadlines (a
     * reload that brings them forward re-arms through mg_dispatch_worker_rearm) */
    if (!mg_timer_is_set(&e->timer))
        arm_at_next_deadline(e);
}

void mg_dispatch_worker_rearm(mg_worker_t *w)
{
    for (size_t i = 0; i < w->num_expiries; i++)
        if (w->expiries[i] != NULL)
            arm_at_next_deadline(w->expiries[i]);
}

void mg_dispatch_worker_dispose(mg_worker_t *w)
{
    while (w->free_jobs != NULL) {
        mg_job_t *job = w->free_jobs;
        w->free_jobs = job->next;
        free(job);
    }
    w->num_free_jobs = 0;
    for (size_t i = 0; i < w->num_expiries; i++) {
        if (w->expiries[i] != NULL)
            mg_timer_cancel(&w->expiries[i]->timer);
        free(w->expiries[i]);
    }
    free(w->expiries);
    w->expiries = NULL;
    w->num_expiries = 0;
}

/* ---------------------------------------------------------------------------------------
 * Jobs
 */
/* Counts a started request's time in the queue in its histogram bucket (any worker). */
static void count_wait(mg_backend_sched_t *bs, uint64_t waited_us)
{
    static const uint64_t bounds[MG_WAIT_BUCKETS] = MG_WAIT_BUCKET_BOUNDS_US;
    size_t i = 0;
    while (i < MG_WAIT_BUCKETS && waited_us > bounds[i])
        i++;
    if (i < MG_WAIT_BUCKETS)
        atomic_fetch_add_explicit(&bs->wait_buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&bs->wait_sum_us, waited_us, memory_order_relaxed);
    atomic_fetch_add_explicit(&bs->wait_count, 1, memory_order_relaxed);
}

mg_sched_result_t mg_turn_submit(mg_turn_t *t, mg_worker_t *w, mg_backend_sched_t *bs, mg_str_t key, mg_str_t client,
                                 mg_sched_priority_t priority, mg_sched_run_cb cb)
{
    mg_sched_names_t names = {key.base, key.len, client.base, client.len};
    w->turns++;
    t->bs = bs;
    t->running = 0;
    t->submitted_us = mg_sched_now_us();
    mg_sched_task_init(&t->task, cb, w);
    mg_sched_result_t res = mg_sched_submit_group(bs->sched, &t->task, &names, priority, t->submitted_us);
    if (res == MG_SCHED_QUEUED || res == MG_SCHED_QUEUED_FULL)
        arm_expiry(w, bs);
    return res;
}

void mg_turn_started(mg_turn_t *t)
{
    count_wait(t->bs, mg_sched_now_us() - t->submitted_us);
    t->running = 1;
    atomic_fetch_add_explicit(&t->bs->running, 1, memory_order_relaxed);
}

void mg_turn_complete(mg_turn_t *t)
{
    if (t->running)
        atomic_fetch_sub_explicit(&t->bs->running, 1, memory_order_relaxed);
    t->running = 0;
    mg_sched_complete(t->bs->sched, &t->task);
}

int mg_turn_cancel(mg_turn_t *t)
{
    return mg_sched_cancel(t->bs->sched, &t->task);
}

void mg_turn_finished(mg_worker_t *w)
{
    w->turns--;
}

/* The tenant when there is one: it is whom the fair share is for. Otherwise the connection, not
 * the address: behind a NAT or a load balancer many clients share an address, never a connection
 * (docs/configuration.md, "Fair shares of the queue"). */
mg_str_t mg_turn_client(char *buf, mg_str_t tenant, uint64_t conn_id)
{
    size_t n = 0;
    if (tenant.len != 0) {
        n = tenant.len < MG_TURN_CLIENT_LEN - 2 ? tenant.len : MG_TURN_CLIENT_LEN - 2;
        memcpy(buf, "t:", 2);
        memcpy(buf + 2, tenant.base, n);
        n += 2;
    } else if (conn_id != 0) {
        memcpy(buf, "c:", 2);
        n = 2 + mg_format_u64(buf + 2, conn_id);
    }
    return mg_str(buf, n);
}

const char *mg_turn_refusal(mg_sched_result_t res, int bridged)
{
    switch (res) {
    case MG_SCHED_KEY_FULL:
        return bridged ? "the session has max_queued_per_key messages waiting for the backend"
                       : "the request's ordering key has max_queued_per_key requests waiting for the backend";
    case MG_SCHED_GROUP_FULL:
        return bridged ? "the tenant has max_queued_per_key requests waiting for the backend"
                       : "the request's tenant (or connection) has max_queued_per_key requests waiting for the backend";
    case MG_SCHED_FULL:
        return "too many requests wait for the backend";
    case MG_SCHED_DRAINING:
        return "the ordering key is being drained";
    default:
        return "no memory to queue the request";
    }
}

static mg_job_t *job_new(mg_worker_t *w)
{
    mg_job_t *job = w->free_jobs;
    if (job == NULL)
        return calloc(1, sizeof(*job));
    w->free_jobs = job->next;
    w->num_free_jobs--;
    memset(job, 0, sizeof(*job));
    return job;
}

static void job_free(mg_job_t *job, mg_worker_t *w)
{
    mg_turn_finished(w);
    if (w->num_free_jobs == MG_FREE_JOBS_MAX) {
        free(job);
        return;
    }
    job->next = w->free_jobs;
    w->free_jobs = job;
    w->num_free_jobs++;
}

/* The backend transfer of `r` is over (answered in full, failed or cancelled): completes its
 * running job, so that its slot and its key's turn pass on while the client may still be
 * reading. Clears r->job; does nothing when there is no running job. */
static void complete_job(mg_request_t *r)
{
    mg_job_t *job = r->job;
    if (job == NULL || !job->turn.running)
        return;
    r->job = NULL;
    mg_turn_complete(&job->turn);
    job_free(job, r->worker);
}

static void job_start(mg_job_t *job)
{
    mg_turn_started(&job->turn);
    mg_forward_start(job->r, complete_job);
}

static void on_watch_gone(mg_client_watch_t *cw)
{
    mg_job_t *job = H2O_STRUCT_FROM_MEMBER(mg_job_t, watch, cw);
    mg_request_t *r = job->r;
    r->status = 499; /* nginx's code for "the client closed the request" */
    mg_request_log(r);
    /* the connection is shut down: this answer reaches nobody, but sending it makes h2o close
     * the connection and dispose the request, which withdraws the job */
    mg_request_send_error(r, 503, "queue-full", "the client closed the connection while waiting");
}

static const mg_backend_conf_t *job_backend(const mg_request_t *r)
{
    return r->backend;
}

/* The scheduler's callback for a job that waited, on its owner worker. */
static void on_run(mg_sched_task_t *task, mg_sched_status_t status)
{
    mg_job_t *job = H2O_STRUCT_FROM_MEMBER(mg_job_t, turn.task, task);
    mg_request_t *r = job->r;
    mg_worker_t *w = task->owner;
    if (r == NULL) { /* an orphan: its request is gone */
        if (status == MG_SCHED_RUN)
            mg_turn_complete(&job->turn); /* never started at the backend: not counted running */
        job_free(job, w);
        return;
    }
    mg_client_watch_stop(&job->watch);
    if (status == MG_SCHED_RUN && r->req == NULL) {
        /* the client left (its answer is sent) and h2o has not disposed the request yet:
         * nothing to send, so the turn passes on at once, never counted running */
        r->job = NULL;
        mg_turn_complete(&job->turn);
        job_free(job, w);
        return;
    }
    if (status == MG_SCHED_RUN) {
        job_start(job);
        return;
    }
    /* the job is over: the request no longer refers to it */
    r->job = NULL;
    job_free(job, w);
    if (r->req == NULL)
        return;
    if (status == MG_SCHED_TIMEOUT)
        mg_request_send_retry(r, 503, "queue-timeout", "the request waited queue_timeout for the backend",
                              job_backend(r)->queue_timeout_ms * 1000);
    else
        mg_request_send_error(r, 503, "queue-full", "the request's ordering key was drained");
}

static void on_sched_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    while (!h2o_linklist_is_empty(messages)) {
        mg_turn_t *turn = H2O_STRUCT_FROM_MEMBER(mg_turn_t, msg.link, messages->next);
        h2o_linklist_unlink(&turn->msg.link);
        mg_sched_deliver(&turn->task);
    }
}

void mg_dispatch_worker_init(mg_worker_t *w)
{
    h2o_multithread_register_receiver(w->queue, &w->sched_receiver, on_sched_messages);
}

/* The ordering key and priority of the request, from the route's `order` (nearest up the
 * tree). 0, or the MG_TEMPLATE_* error of the key's expansion. */
static int order_of(mg_request_t *r, const mg_ctx_t *ctx, mg_str_t *key, mg_sched_priority_t *priority)
{
    const mg_route_t *o = mg_route_order(r->route);
    *key = mg_str("", 0);
    *priority = MG_SCHED_NORMAL;
    if (o == NULL)
        return 0;
    int err = mg_template_expand(o->order->key, ctx, key);
    if (err != 0)
        return err;
    if (o->order->priority_header != NULL) {
        ssize_t i = h2o_find_header_by_str(&r->req->headers, o->order->priority_header, o->order->priority_header_len, -1);
        if (i >= 0 && mg_order_is_high(mg_str(r->req->headers.entries[i].value.base, r->req->headers.entries[i].value.len)))
            *priority = MG_SCHED_HIGH;
    }
    return 0;
}

void mg_dispatch_forward(mg_request_t *r, const mg_ctx_t *ctx)
{
    mg_backend_conf_t *b = r->backend;
    mg_str_t key, client;
    mg_sched_priority_t priority;
    mg_sched_result_t res;
    mg_job_t *job;
    char client_buf[MG_TURN_CLIENT_LEN];

    if (b->sched == NULL) { /* not bound (unit tests of the handler): no scheduling */
        mg_forward_start(r, NULL);
        return;
    }
    int err = order_of(r, ctx, &key, &priority);
    if (err != 0) {
        mg_request_send_error(r, 400, "bad-request", mg_template_strerror(err));
        return;
    }
    if ((job = job_new(r->worker)) == NULL) {
        mg_request_send_error(r, 503, "queue-full", "no memory to queue the request");
        return;
    }
    job->r = r;
    client = mg_turn_client(client_buf, r->tenant, r->req->conn->id);
    switch (res = mg_turn_submit(&job->turn, r->worker, b->sched, key, client, priority, on_run)) {
    case MG_SCHED_STARTED:
        r->job = job;
        job_start(job);
        break;
    case MG_SCHED_QUEUED:
    case MG_SCHED_QUEUED_FULL:
        r->job = job;
        mg_client_watch_start(&job->watch, &r->worker->timers, r->req, on_watch_gone);
        break;
    default:
        job_free(job, r->worker);
        /* by queue_timeout everything now waiting has left the queue (started or timed out) */
        mg_request_send_retry(r, 503, "queue-full", mg_turn_refusal(res, 0), b->queue_timeout_ms * 1000);
        break;
    }
}

void mg_dispatch_release(mg_request_t *r)
{
    mg_job_t *job = r->job;
    if (job == NULL)
        return;
    if (job->turn.running) {
        complete_job(r);
        return;
    }
    r->job = NULL;
    mg_client_watch_stop(&job->watch);
    if (mg_turn_cancel(&job->turn) == 1) {
        job_free(job, r->worker);
    } else {
        job->r = NULL; /* its callback is on its way: on_run frees it */
    }
}
