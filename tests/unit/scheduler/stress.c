/*
 * Stress: many keys, tasks submitted from several worker threads (the tasks of one key come
 * from different workers), started on their owner worker through an executor made of
 * per-worker inboxes, and completed inline, by the owner later, or by completer threads after
 * a random delay. Checked on every start and at the end:
 *   - order: within a key and a priority, tasks start in arrival order (arrival is made
 *     observable by a per-key test mutex held around mg_sched_submit, which numbers them);
 *   - no overlap: at most one task of a key runs at any time;
 *   - exactly once: every task has exactly one outcome (started then completed once, timed
 *     out, cancelled by a drain, withdrawn by its owner, or refused), and each drain that
 *     promised a notice delivers it once;
 *   - capacity: never more than max_in_flight counted tasks run;
 *   - shares: with groups, every invariant (the groups' counts too) holds whenever a checker
 *     thread looks, and no group is left at the end;
 *   - no stall: everything ends within `seconds` (a lost wake-up leaves a task waiting with
 *     free slots until the deadline), and the invariants hold at the end.
 * The harness polls its own inboxes; the scheduler never polls.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* the meson build defines it already */
#endif
#include "stress.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "scheduler/internal.h"

#define UNORDERED UINT32_MAX
#define NOTICES 4096

struct worker;

typedef struct stask {
    mg_sched_task_t t;
    uint32_t key, seq, group;
    uint8_t prio;
    _Atomic int outcomes, completions;
    uint64_t due;
    struct stask *next_done; /* in a completer's queue */
} stask_t;

typedef struct skey {
    pthread_mutex_t submit_mu;
    uint32_t next_seq[2];
    _Atomic uint32_t last_started[2]; /* seq + 1 of the last task started, per priority */
    _Atomic int running;
    char name[16];
} skey_t;

typedef struct worker {
    pthread_t th;
    uint32_t id;
    pthread_mutex_t mu;
    mg_sched_task_t *inbox, **inbox_tail;
    stask_t *later;      /* started tasks the owner completes itself, a little later */
    stask_t *recent[64]; /* queued lately: candidates for withdrawal */
    uint64_t rng, submitted;
    _Atomic uint64_t ended; /* of its tasks */
} worker_t;

typedef struct completer {
    pthread_t th;
    pthread_mutex_t mu;
    stask_t *head, *tail;
    uint64_t rng;
} completer_t;

static struct {
    const stress_params_t *p;
    mg_sched_t *s;
    stask_t *tasks;
    uint64_t ntasks;
    skey_t *keys;
    worker_t *workers;
    completer_t *completers;
    mg_sched_task_t notices[NOTICES];
    _Atomic uint32_t notices_used;
    _Atomic uint64_t ended, notices_in, notices_out;
    _Atomic uint64_t started, timeouts, cancelled, withdrawn, refused;
    _Atomic uint64_t out_of_order, overlaps, not_exactly_once, over_capacity;
    _Atomic uint32_t in_flight, most_in_flight;
    _Atomic int stop;
    _Atomic uint64_t checks;
    char check_failure[200]; /* the checker's first complaint (written once, read after the join) */
} S;

static uint64_t rnd(uint64_t *x) /* splitmix64 */
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static int chance(uint64_t *rng, uint32_t pct)
{
    return rnd(rng) % 100 < pct;
}

/* Built with -DMG__SCHED_HOOK_FN=mg__stress_hook (meson.build does), the scheduler calls
 * this at the points of its lock-free hand-over (sched.c): a random pause there widens the
 * windows that a race needs, from a few instructions to microseconds. */
void mg__stress_hook(int point);
void mg__stress_hook(int point)
{
    static _Thread_local uint64_t rng;
    if (!rng)
        rng = (uint64_t)(uintptr_t)&rng;
    uint64_t r = rnd(&rng);
    if (r % 8 == 0)
        for (volatile uint32_t i = (uint32_t)(r >> 32) % 512; i > 0; i--)
            ;
    else if (r % 256 == 1)
        sched_yield();
}

static void outcome(stask_t *t)
{
    if (atomic_fetch_add(&t->outcomes, 1) != 0)
        atomic_fetch_add(&S.not_exactly_once, 1);
    atomic_fetch_add(&((struct worker *)t->t.owner)->ended, 1);
    atomic_fetch_add(&S.ended, 1);
}

/* ---- running and completing ------------------------------------------------------------ */

static void on_start(stask_t *t)
{
    atomic_fetch_add(&S.started, 1);
    if (t->key != UNORDERED || S.p->max_in_flight) {
        uint32_t n = atomic_fetch_add(&S.in_flight, 1) + 1, most = atomic_load(&S.most_in_flight);
        if (S.p->max_in_flight && n > S.p->max_in_flight)
            atomic_fetch_add(&S.over_capacity, 1);
        while (n > most && !atomic_compare_exchange_weak(&S.most_in_flight, &most, n))
            ;
    }
    if (t->key == UNORDERED)
        return;
    skey_t *k = &S.keys[t->key];
    if (atomic_exchange(&k->running, 1) != 0)
        atomic_fetch_add(&S.overlaps, 1);
    if (atomic_exchange(&k->last_started[t->prio], t->seq + 1) > t->seq)
        atomic_fetch_add(&S.out_of_order, 1);
}

static void finish(stask_t *t)
{
    if (t->key != UNORDERED)
        atomic_store(&S.keys[t->key].running, 0);
    if (t->key != UNORDERED || S.p->max_in_flight)
        atomic_fetch_sub(&S.in_flight, 1); /* before the slot is given back */
    if (atomic_fetch_add(&t->completions, 1) != 0)
        atomic_fetch_add(&S.not_exactly_once, 1);
    if (mg_sched_complete(S.s, &t->t) != 0)
        atomic_fetch_add(&S.not_exactly_once, 1);
    outcome(t);
}

static void to_completer(stask_t *t, uint64_t *rng)
{
    completer_t *c = &S.completers[rnd(rng) % S.p->completers];
    t->due = mg_sched_now_us() + (S.p->max_delay_us ? rnd(rng) % (S.p->max_delay_us + 1) : 0);
    t->next_done = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->tail)
        c->tail->next_done = t;
    else
        c->head = t;
    c->tail = t;
    pthread_mutex_unlock(&c->mu);
}

/* A task that started on worker `w`: complete it now, later on this worker, or elsewhere. */
static void started(worker_t *w, stask_t *t)
{
    on_start(t);
    uint64_t r = rnd(&w->rng) % 10;
    if (r < 3) {
        finish(t);
    } else if (r < 4) {
        t->next_done = w->later;
        w->later = t;
    } else {
        to_completer(t, &w->rng);
    }
}

static void *completer_main(void *arg)
{
    completer_t *c = arg;
    while (!atomic_load(&S.stop)) {
        pthread_mutex_lock(&c->mu);
        stask_t *t = c->head;
        if (t && t->due <= mg_sched_now_us()) {
            c->head = t->next_done;
            if (!c->head)
                c->tail = NULL;
        } else {
            t = NULL;
        }
        pthread_mutex_unlock(&c->mu);
        if (t)
            finish(t);
        else
            sched_yield();
    }
    return NULL;
}

/* ---- the executor ----------------------------------------------------------------------- */

static void post(void *ctx, mg_sched_task_t *task)
{
    worker_t *w = task->owner;
    pthread_mutex_lock(&w->mu);
    task->exec_next = NULL;
    *w->inbox_tail = task;
    w->inbox_tail = &task->exec_next;
    pthread_mutex_unlock(&w->mu);
}

static _Thread_local worker_t *self;

static void on_run(mg_sched_task_t *task, mg_sched_status_t status)
{
    if (task >= S.notices && task < S.notices + NOTICES) {
        if (status != MG_SCHED_DRAINED)
            atomic_fetch_add(&S.not_exactly_once, 1);
        atomic_fetch_add(&S.notices_out, 1);
        return;
    }
    stask_t *t = (stask_t *)task;
    if (task->owner != self)
        atomic_fetch_add(&S.not_exactly_once, 1); /* delivered on another thread than its owner */
    switch (status) {
    case MG_SCHED_RUN:
        started(self, t);
        return;
    case MG_SCHED_TIMEOUT:
        atomic_fetch_add(&S.timeouts, 1);
        break;
    case MG_SCHED_CANCELLED:
        atomic_fetch_add(&S.cancelled, 1);
        break;
    default:
        atomic_fetch_add(&S.not_exactly_once, 1);
    }
    outcome(t);
}

/* Delivers this worker's inbox; returns how many. */
static int run_inbox(worker_t *w)
{
    pthread_mutex_lock(&w->mu);
    mg_sched_task_t *t = w->inbox;
    w->inbox = NULL;
    w->inbox_tail = &w->inbox;
    pthread_mutex_unlock(&w->mu);
    int n = 0;
    for (mg_sched_task_t *next; t; t = next, n++) {
        next = t->exec_next;
        mg_sched_deliver(t);
    }
    return n;
}

static int run_later(worker_t *w)
{
    int n = 0;
    for (stask_t *t = w->later, *next; t; t = next, n++) {
        next = t->next_done;
        finish(t);
    }
    w->later = NULL;
    return n;
}

/* ---- submitting ------------------------------------------------------------------------- */

static void withdraw_one(worker_t *w)
{
    stask_t **slot = &w->recent[rnd(&w->rng) % 64];
    if (*slot && mg_sched_cancel(S.s, &(*slot)->t) == 1) {
        atomic_fetch_add(&S.withdrawn, 1);
        outcome(*slot);
    }
    *slot = NULL;
}

/* Submits with the task's group, if the scenario has groups. */
static mg_sched_result_t submit_named(stask_t *t, const char *key)
{
    char group[16];
    mg_sched_names_t n = {key, key ? strlen(key) : 0, NULL, 0};
    if (S.p->groups) {
        n.group_len = (size_t)snprintf(group, sizeof(group), "grp-%u", t->group);
        n.group = group;
    }
    return mg_sched_submit_group(S.s, &t->t, &n, t->prio, mg_sched_now_us());
}

static void submit(worker_t *w, stask_t *t)
{
    mg_sched_task_init(&t->t, on_run, w);
    mg_sched_result_t r;
    if (t->key == UNORDERED) {
        r = submit_named(t, NULL);
    } else {
        skey_t *k = &S.keys[t->key];
        pthread_mutex_lock(&k->submit_mu); /* makes arrival order observable */
        t->seq = k->next_seq[t->prio]++;
        r = submit_named(t, k->name);
        pthread_mutex_unlock(&k->submit_mu);
    }
    if (r == MG_SCHED_STARTED) {
        started(w, t);
    } else if (r == MG_SCHED_QUEUED || r == MG_SCHED_QUEUED_FULL) {
        if (chance(&w->rng, S.p->cancel_pct))
            w->recent[rnd(&w->rng) % 64] = t;
    } else {
        atomic_fetch_add(&S.refused, 1);
        outcome(t);
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    self = w;
    uint32_t n = S.p->workers;
    for (uint64_t i = w->id; i < S.ntasks && !atomic_load(&S.stop); i += n) {
        while (S.p->window && w->submitted - atomic_load(&w->ended) >= S.p->window && !atomic_load(&S.stop))
            if (run_inbox(w) + run_later(w) == 0) /* a closed loop: clients wait for answers */
                sched_yield();
        w->submitted++;
        submit(w, &S.tasks[i]);
        if (i % 8 == w->id % 8) { /* keep the inbox moving while submitting */
            run_inbox(w);
            run_later(w);
        }
        if (S.p->cancel_pct && (i & 15) == 0)
            withdraw_one(w);
    }
    while (!atomic_load(&S.stop))
        if (run_inbox(w) + run_later(w) == 0)
            sched_yield();
    return NULL;
}

/* Expires waiting tasks at their deadlines (the test's timer). */
static void *expirer_main(void *arg)
{
    while (!atomic_load(&S.stop)) {
        uint64_t next = mg_sched_expire(S.s, mg_sched_now_us()), now = mg_sched_now_us();
        if (next > now)
            usleep(next - now < 1000 ? (useconds_t)(next - now) : 1000);
    }
    return NULL;
}

/* Drains random keys, half with cancel, each with a notice to a random worker. */
static void *drainer_main(void *arg)
{
    uint64_t rng = S.p->seed ^ 0xd7a1;
    while (!atomic_load(&S.stop)) {
        uint32_t i = atomic_fetch_add(&S.notices_used, 1);
        if (i >= NOTICES)
            break;
        mg_sched_task_t *n = &S.notices[i];
        mg_sched_task_init(n, on_run, &S.workers[rnd(&rng) % S.p->workers]);
        skey_t *k = &S.keys[rnd(&rng) % S.p->keys];
        int mode = chance(&rng, 50) ? MG_SCHED_DRAIN_CANCEL : MG_SCHED_DRAIN_RUN;
        if (mg_sched_drain(S.s, k->name, strlen(k->name), mode, n) == 1)
            atomic_fetch_add(&S.notices_in, 1);
        usleep(200);
    }
    return NULL;
}

/* Checks every invariant that holds while calls are in progress, again and again. */
static void *checker_main(void *arg)
{
    char why[200];
    while (!atomic_load(&S.stop)) {
        if (mg__sched_check(S.s, 0, why, sizeof(why)) != 0) {
            snprintf(S.check_failure, sizeof(S.check_failure), "%s", why);
            return NULL;
        }
        atomic_fetch_add(&S.checks, 1);
        usleep(500);
    }
    return NULL;
}

/* ---- one run ---------------------------------------------------------------------------- */

static int setup(const stress_params_t *p)
{
    memset(&S, 0, sizeof(S));
    S.p = p;
    S.ntasks = (uint64_t)p->keys * p->tasks_per_key;
    S.tasks = calloc(S.ntasks, sizeof(*S.tasks));
    S.keys = calloc(p->keys, sizeof(*S.keys));
    S.workers = calloc(p->workers, sizeof(*S.workers));
    S.completers = calloc(p->completers, sizeof(*S.completers));
    mg_sched_config_t cfg = {.max_in_flight = p->max_in_flight,
                             .queue_timeout_us = p->queue_timeout_us,
                             .key_queue_max = p->key_queue_max,
                             .group_queue_max = p->group_queue_max};
    mg_sched_executor_t ex = {post, NULL};
    S.s = mg_sched_new(&cfg, &ex);
    if (!S.tasks || !S.keys || !S.workers || !S.completers || !S.s)
        return -1;
    uint64_t rng = p->seed;
    for (uint32_t k = 0; k < p->keys; k++) {
        pthread_mutex_init(&S.keys[k].submit_mu, NULL);
        snprintf(S.keys[k].name, sizeof(S.keys[k].name), "acct-%u", k);
    }
    for (uint64_t i = 0; i < S.ntasks; i++) { /* round by round over the keys */
        stask_t *t = &S.tasks[i];
        t->key = chance(&rng, p->unordered_pct) ? UNORDERED : (uint32_t)(i % p->keys);
        t->prio = chance(&rng, p->high_pct) ? MG_SCHED_HIGH : MG_SCHED_NORMAL;
        t->group = p->groups ? (uint32_t)(rnd(&rng) % p->groups) : 0;
    }
    for (uint32_t i = 0; i < p->workers; i++) {
        worker_t *w = &S.workers[i];
        w->id = i;
        w->rng = p->seed + 1000 + i;
        w->inbox_tail = &w->inbox;
        pthread_mutex_init(&w->mu, NULL);
    }
    for (uint32_t i = 0; i < p->completers; i++) {
        pthread_mutex_init(&S.completers[i].mu, NULL);
        S.completers[i].rng = p->seed + 2000 + i;
    }
    return 0;
}

static void teardown(void)
{
    if (S.s)
        mg_sched_free(S.s);
    for (uint32_t k = 0; S.keys && k < S.p->keys; k++)
        pthread_mutex_destroy(&S.keys[k].submit_mu);
    for (uint32_t i = 0; S.workers && i < S.p->workers; i++)
        pthread_mutex_destroy(&S.workers[i].mu);
    for (uint32_t i = 0; S.completers && i < S.p->completers; i++)
        pthread_mutex_destroy(&S.completers[i].mu);
    free(S.tasks);
    free(S.keys);
    free(S.workers);
    free(S.completers);
}

/* Waits until every task ended, or the time is up. (A drain notice is posted by the call that
 * ends the key's last task, so by then every notice is posted too.) */
static int wait_for_the_end(const stress_params_t *p, uint64_t t0)
{
    while (atomic_load(&S.ended) < S.ntasks) {
        if (mg_sched_now_us() - t0 > (uint64_t)p->seconds * 1000000u)
            return -1;
        usleep(1000);
    }
    return 0;
}

static void collect(stress_result_t *r, uint64_t t0)
{
    r->tasks = S.ntasks;
    r->started = S.started;
    r->timeouts = S.timeouts;
    r->cancelled = S.cancelled;
    r->withdrawn = S.withdrawn;
    r->refused = S.refused;
    r->notices = S.notices_out;
    r->checks = S.checks;
    r->out_of_order = S.out_of_order;
    r->overlaps = S.overlaps;
    r->not_exactly_once = S.not_exactly_once;
    r->over_capacity = S.over_capacity;
    r->lost = S.ntasks - S.ended;
    r->most_in_flight = S.most_in_flight;
    r->seconds = (double)(mg_sched_now_us() - t0) / 1e6;
}

static void verdict(stress_result_t *r, int stalled)
{
    char why[200] = "";
    mg_sched_stats_t st;
    mg_sched_stats(S.s, &st);
    if (stalled)
        snprintf(r->failure, sizeof(r->failure), "stalled: %llu of %llu tasks never ended (%u waiting, %u in flight)",
                 (unsigned long long)r->lost, (unsigned long long)r->tasks, st.waiting, st.in_flight);
    else if (r->out_of_order || r->overlaps || r->not_exactly_once || r->over_capacity)
        snprintf(r->failure, sizeof(r->failure), "%llu out of order, %llu overlaps, %llu not exactly once, %llu over capacity",
                 (unsigned long long)r->out_of_order, (unsigned long long)r->overlaps, (unsigned long long)r->not_exactly_once,
                 (unsigned long long)r->over_capacity);
    else if (r->notices != atomic_load(&S.notices_in))
        snprintf(r->failure, sizeof(r->failure), "%llu drain notices for %llu drains", (unsigned long long)r->notices,
                 (unsigned long long)atomic_load(&S.notices_in));
    else if (S.check_failure[0])
        snprintf(r->failure, sizeof(r->failure), "invariant, while running: %s", S.check_failure);
    else if (mg__sched_check(S.s, 1, why, sizeof(why)) != 0)
        snprintf(r->failure, sizeof(r->failure), "invariant: %s", why);
    else if (st.keys || st.groups || st.waiting || st.in_flight)
        snprintf(r->failure, sizeof(r->failure), "left over: %u keys, %u groups, %u waiting, %u in flight", st.keys, st.groups,
                 st.waiting, st.in_flight);
    else if (S.p->groups && S.p->key_queue_max + S.p->group_queue_max && st.share_refused == 0)
        snprintf(r->failure, sizeof(r->failure), "no task was ever refused by a share: the scenario tests nothing");
}

int stress_run(const stress_params_t *p, stress_result_t *r)
{
    memset(r, 0, sizeof(*r));
    if (setup(p) != 0) {
        snprintf(r->failure, sizeof(r->failure), "out of memory");
        teardown();
        return -1;
    }
    uint64_t t0 = mg_sched_now_us();
    pthread_t expirer, drainer, checker;
    for (uint32_t i = 0; i < p->completers; i++)
        pthread_create(&S.completers[i].th, NULL, completer_main, &S.completers[i]);
    for (uint32_t i = 0; i < p->workers; i++)
        pthread_create(&S.workers[i].th, NULL, worker_main, &S.workers[i]);
    if (p->queue_timeout_us)
        pthread_create(&expirer, NULL, expirer_main, NULL);
    if (p->drains)
        pthread_create(&drainer, NULL, drainer_main, NULL);
    if (p->checks)
        pthread_create(&checker, NULL, checker_main, NULL);
    int stalled = wait_for_the_end(p, t0) != 0;
    atomic_store(&S.stop, 1);
    for (uint32_t i = 0; i < p->workers; i++)
        pthread_join(S.workers[i].th, NULL);
    for (uint32_t i = 0; i < p->completers; i++)
        pthread_join(S.completers[i].th, NULL);
    if (p->queue_timeout_us)
        pthread_join(expirer, NULL);
    if (p->drains)
        pthread_join(drainer, NULL);
    if (p->checks)
        pthread_join(checker, NULL);
    collect(r, t0);
    if (!stalled) { /* the workers stopped: deliver what the last completions posted, if any */
        for (uint32_t i = 0; i < p->workers; i++) {
            self = &S.workers[i];
            run_inbox(&S.workers[i]);
        }
    }
    verdict(r, stalled);
    teardown();
    return r->failure[0] ? -1 : 0;
}

size_t stress_scenarios(double scale, stress_params_t *out, size_t max)
{
    uint32_t tpk = (uint32_t)(1000 * scale) ? (uint32_t)(1000 * scale) : 1;
    /* clang-format off */
    stress_params_t all[] = {
        {.name = "1000 keys, 4 workers, 64 slots, 10% unordered, 10% high",
         .keys = 1000, .tasks_per_key = tpk, .workers = 4, .completers = 2, .max_in_flight = 64,
         .unordered_pct = 10, .high_pct = 10, .max_delay_us = 50, .seconds = 120, .seed = 1},
        {.name = "8 hot keys, 4 workers, unlimited",
         .keys = 8, .tasks_per_key = tpk * 20, .workers = 4, .completers = 2,
         .high_pct = 20, .max_delay_us = 20, .seconds = 120, .seed = 2},
        {.name = "200 keys, 16 slots, 4 x 64 outstanding, queue timeout, withdrawals, drains",
         .keys = 200, .tasks_per_key = tpk / 2 ? tpk / 2 : 1, .workers = 4, .completers = 2, .max_in_flight = 16,
         .unordered_pct = 10, .high_pct = 10, .max_delay_us = 100, .queue_timeout_us = 1000, .cancel_pct = 20,
         .drains = 1, .window = 64, .seconds = 120, .seed = 3},
        /* one slot, and at most one other task waiting for it: a lost wake-up leaves the slot
         * free with nobody left to release it, so it shows as a stall instead of healing at
         * the next release (this one catches a registration after the last look at the
         * slots in every run; test_wakeup catches it deterministically) */
        {.name = "1 slot, 2 workers with 1 task each in flight, 50% unordered",
         .keys = 50, .tasks_per_key = tpk * 2, .workers = 2, .completers = 2, .max_in_flight = 1,
         .unordered_pct = 50, .high_pct = 10, .max_delay_us = 2, .window = 1, .seconds = 30, .seed = 4},
        /* fair shares: few keys and groups, many tasks outstanding, so that both shares refuse
         * often, while tasks leave their wait every way there is (start, timeout, withdrawal,
         * drain) and a checker verifies the groups' counts meanwhile */
        {.name = "20 keys, 10 groups, shares 3 and 5, 8 slots, 4 x 8 outstanding, timeouts, withdrawals, drains, checks",
         .keys = 20, .tasks_per_key = tpk * 5, .workers = 4, .completers = 2, .max_in_flight = 8,
         .unordered_pct = 20, .high_pct = 10, .max_delay_us = 50, .queue_timeout_us = 5000, .cancel_pct = 20,
         .drains = 1, .window = 8, .groups = 10, .key_queue_max = 3, .group_queue_max = 5, .checks = 1,
         .seconds = 120, .seed = 5},
    };
    /* clang-format on */
    size_t n = sizeof(all) / sizeof(all[0]);
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = all[i];
    return n < max ? n : max;
}
