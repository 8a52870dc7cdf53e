/* Single-thread test support for the scheduler: an executor that queues posted tasks until
 * the test delivers them (so a test sees exactly what became startable when), tasks that
 * log what they were told, and a check of every invariant after each step. */
#ifndef MG_TEST_SCHEDULER_SUPPORT_H
#define MG_TEST_SCHEDULER_SUPPORT_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include "scheduler/internal.h"

#define MAX_EVENTS 40000

typedef struct ttask {
    mg_sched_task_t t;
    int id;
    const char *key;   /* NULL: unordered */
    const char *group; /* NULL: none */
    int calls;         /* run callbacks received */
    int status;        /* the last one */
    int running;       /* started (STARTED or RUN), not completed */
} ttask_t;

typedef struct event {
    int id;
    int status;
} event_t;

static struct {
    mg_sched_task_t *inbox[MAX_EVENTS];
    size_t in_head, in_tail;
    event_t log[MAX_EVENTS];
    size_t nlog;
    mg_sched_t *s;
    int complete_on_run; /* the run callback completes at once (a request whose client left) */
    int no_check;        /* big tests check the invariants at the end only */
    ttask_t *byid[MAX_EVENTS];
    ttask_t *runq[MAX_EVENTS]; /* started tasks, in start order */
    size_t run_head, run_tail;
} T;

static void started(ttask_t *t, int how)
{
    t->running = 1;
    cr_assert_lt(T.nlog, MAX_EVENTS);
    cr_assert_lt(T.run_tail, MAX_EVENTS);
    T.log[T.nlog++] = (event_t){t->id, how};
    T.runq[T.run_tail++] = t;
}

static void post(void *ctx, mg_sched_task_t *task)
{
    cr_assert_lt(T.in_tail, MAX_EVENTS);
    T.inbox[T.in_tail++] = task;
}

static const mg_sched_executor_t executor = {post, NULL};

static void check(void)
{
    char why[256];
    if (T.no_check)
        return;
    cr_assert_eq(mg__sched_check(T.s, 1, why, sizeof(why)), 0, "invariant: %s", why);
}

static void on_run(mg_sched_task_t *task, mg_sched_status_t status)
{
    ttask_t *t = (ttask_t *)task;
    t->calls++;
    t->status = (int)status;
    if (status != MG_SCHED_RUN) {
        cr_assert_lt(T.nlog, MAX_EVENTS);
        T.log[T.nlog++] = (event_t){t->id, (int)status};
    } else {
        started(t, MG_SCHED_RUN);
        if (T.complete_on_run) {
            t->running = 0;
            cr_assert_eq(mg_sched_complete(T.s, task), 0);
        }
    }
}

/* Delivers what was posted, in order (and what those deliveries post in turn); returns how many. */
static size_t deliver(void)
{
    size_t n = 0;
    while (T.in_head < T.in_tail) {
        mg_sched_deliver(T.inbox[T.in_head++]);
        n++;
    }
    check();
    return n;
}

static mg_sched_t *setup_sched(mg_sched_config_t cfg)
{
    memset(&T, 0, sizeof(T));
    T.s = mg_sched_new(&cfg, &executor);
    cr_assert_not_null(T.s);
    return T.s;
}

static void teardown_sched(void)
{
    cr_assert_eq(T.in_head, T.in_tail, "posted tasks were not delivered");
    mg_sched_free(T.s);
    T.s = NULL;
}

static void tinit(ttask_t *t, int id, const char *key)
{
    memset(t, 0, sizeof(*t));
    mg_sched_task_init(&t->t, on_run, NULL);
    t->id = id;
    t->key = key;
    cr_assert(id >= 0 && id < MAX_EVENTS);
    T.byid[id] = t;
}

static mg_sched_result_t submit_at(ttask_t *t, mg_sched_priority_t prio, uint64_t now)
{
    mg_sched_names_t n = {t->key, t->key ? strlen(t->key) : 0, t->group, t->group ? strlen(t->group) : 0};
    mg_sched_result_t r = mg_sched_submit_group(T.s, &t->t, &n, prio, now);
    if (r == MG_SCHED_STARTED)
        started(t, -1); /* started by submit */
    check();
    return r;
}

static mg_sched_result_t submit(ttask_t *t, mg_sched_priority_t prio)
{
    return submit_at(t, prio, 0);
}

static void complete(ttask_t *t)
{
    cr_assert(t->running, "task %d completed while not running", t->id);
    t->running = 0;
    cr_assert_eq(mg_sched_complete(T.s, &t->t), 0);
    check();
}

static mg_sched_stats_t stats(void)
{
    mg_sched_stats_t st;
    mg_sched_stats(T.s, &st);
    return st;
}

/* The ids of the tasks that started (by submit or by a RUN callback), in order. */
static size_t started_ids(int *ids, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < T.nlog && n < max; i++)
        if (T.log[i].status == -1 || T.log[i].status == MG_SCHED_RUN)
            ids[n++] = T.log[i].id;
    return n;
}

/* Runs everything to the end: completes the oldest running task, delivers, again. Returns the
 * most tasks that ran at once. */
static int run_all(void)
{
    int most = 0;
    for (;;) {
        deliver();
        int now = 0;
        for (size_t i = T.run_head; i < T.run_tail; i++)
            now += T.runq[i]->running;
        most = now > most ? now : most;
        while (T.run_head < T.run_tail && !T.runq[T.run_head]->running)
            T.run_head++; /* completed by the test itself */
        if (T.run_head == T.run_tail)
            return most;
        complete(T.runq[T.run_head++]);
    }
}

#define assert_started(...)                                                                                                        \
    do {                                                                                                                           \
        int want_[] = {__VA_ARGS__}, got_[256];                                                                                    \
        size_t n_ = started_ids(got_, 256), w_ = sizeof(want_) / sizeof(want_[0]);                                                 \
        cr_assert_eq(n_, w_, "%zu tasks started, expected %zu", n_, w_);                                                           \
        for (size_t i_ = 0; i_ < w_; i_++)                                                                                         \
            cr_assert_eq(got_[i_], want_[i_], "start #%zu: task %d, expected %d", i_, got_[i_], want_[i_]);                        \
    } while (0)

#endif
