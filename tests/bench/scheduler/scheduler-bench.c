/*
 * scheduler-bench: the scheduler's overhead per task (submit + dispatch + complete), with
 * zero-time tasks, so that nothing but the scheduler (and the executor's hand-over) is timed.
 *
 * Each thread repeats: submit a burst of 8 tasks (all at once, as requests arriving together
 * do), complete the ones that submit started, then deliver what the executor brought and
 * complete each delivered task at once, until the 8 have ended. The executor is a lock-free
 * list per thread (h2o's multithread queue would add a mutex and, per wake-up, a pipe write).
 * Keys are "acct-<n>", drawn at random per task from the case's key set, the same set for
 * every thread (so with 2 threads the same key is often used by both, and a completion on one
 * thread hands the key's next task to the other).
 *
 * Figures per case, medians of the runs (calls are not timed one by one: a clock or TSC
 * reading costs about as much as a call here, and disturbs what it measures):
 *   - CPU ns/task: the threads' CPU time (CLOCK_THREAD_CPUTIME_ID, read when each thread starts
 *     and ends) / tasks of all threads: what a task costs, whichever thread pays. Time a thread
 *     is descheduled does not count, so a busy machine disturbs it less than the wall figure.
 *     With 2 threads on one key or on 4 slots, a thread also spins while the other completes
 *     the task that holds the key or the slot: that waiting counts too.
 *   - wall ns/task: elapsed time / tasks of all threads (throughput).
 *   - dispatched: the share of tasks started through the executor (queued behind their key or
 *     for a slot) rather than in their own submit.
 * The "harness" row runs the same loop with no scheduler (submit starts every task, complete
 * does nothing): subtract it to get the scheduler's share. The first line gives what moving
 * one cache line between the two threads costs on this machine (a ping-pong on one atomic):
 * with 2 threads, shared state costs about that per line a task touches after the other
 * thread did.
 *
 * A benchmark: prints a table, never fails on time; loops are bounded (tasks x runs).
 *   scheduler-bench [tasks_per_thread (default 1000000)] [runs (default 5)] [case name part [threads]]
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "scheduler/scheduler.h"

#define BURST 8
#define MAX_KEYS 10000
#define MAX_RUNS 15

typedef struct bench_case {
    const char *name;
    uint32_t keys; /* 0: unordered */
    uint32_t max_in_flight;
    int harness;
} bench_case_t;

typedef struct thread_ctx {
    pthread_t th;
    _Atomic(mg_sched_task_t *) inbox; /* a lock-free stack; taken whole and reversed */
    char pad[64];
    mg_sched_task_t tasks[BURST];
    int ended; /* of the current burst */
    uint64_t rng, dispatched, cpu_ns;
} thread_ctx_t;

static struct {
    mg_sched_t *s;
    const bench_case_t *c;
    uint64_t tasks_per_thread;
    char names[MAX_KEYS][16];
    size_t lens[MAX_KEYS];
    pthread_barrier_t start;
} B;

static uint64_t ns_of(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void post(void *ctx, mg_sched_task_t *t)
{
    thread_ctx_t *owner = t->owner;
    mg_sched_task_t *head = atomic_load_explicit(&owner->inbox, memory_order_relaxed);
    do
        t->exec_next = head;
    while (!atomic_compare_exchange_weak_explicit(&owner->inbox, &head, t, memory_order_release, memory_order_relaxed));
}

/* The harness case: no scheduler at all. */
static volatile int harness_sink;

static void complete(thread_ctx_t *self, mg_sched_task_t *t)
{
    if (B.s)
        mg_sched_complete(B.s, t);
    else
        harness_sink = 0;
}

static mg_sched_result_t submit(thread_ctx_t *self, mg_sched_task_t *t, const char *key, size_t len)
{
    if (B.s)
        return mg_sched_submit(B.s, t, key, len, MG_SCHED_NORMAL, 0);
    harness_sink = (int)len;
    return MG_SCHED_STARTED;
}

static void on_run(mg_sched_task_t *t, mg_sched_status_t status)
{
    thread_ctx_t *self = t->owner;
    self->dispatched++;
    if (status == MG_SCHED_RUN)
        complete(self, t); /* a zero-time task */
    self->ended++;
}

static int run_inbox(thread_ctx_t *self)
{
    if (!atomic_load_explicit(&self->inbox, memory_order_relaxed))
        return 0;
    mg_sched_task_t *t = atomic_exchange_explicit(&self->inbox, NULL, memory_order_acquire), *fifo = NULL;
    while (t) { /* back to posting order */
        mg_sched_task_t *next = t->exec_next;
        t->exec_next = fifo;
        fifo = t;
        t = next;
    }
    for (mg_sched_task_t *next; fifo; fifo = next) {
        next = fifo->exec_next;
        mg_sched_deliver(fifo);
    }
    return 1;
}

static uint32_t draw_key(thread_ctx_t *self)
{
    self->rng = self->rng * 6364136223846793005u + 1442695040888963407u;
    return (uint32_t)(self->rng >> 33) % B.c->keys;
}

static void burst(thread_ctx_t *self)
{
    mg_sched_task_t *started[BURST];
    int n = 0;
    self->ended = 0;
    for (int i = 0; i < BURST; i++) {
        mg_sched_task_t *t = &self->tasks[i];
        mg_sched_task_init(t, on_run, self);
        uint32_t k = B.c->keys ? draw_key(self) : 0;
        if (submit(self, t, B.c->keys ? B.names[k] : NULL, B.c->keys ? B.lens[k] : 0) == MG_SCHED_STARTED)
            started[n++] = t;
    }
    for (int i = 0; i < n; i++) {
        complete(self, started[i]);
        self->ended++;
    }
    for (unsigned spins = 0; self->ended < BURST; spins++) {
        if (!run_inbox(self) && spins % 256 == 255)
            sched_yield(); /* the other thread may have been descheduled (a shared or busy machine) */
    }
}

static void *thread_main(void *arg)
{
    thread_ctx_t *self = arg;
    pthread_barrier_wait(&B.start);
    uint64_t cpu0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
    for (uint64_t i = 0; i < B.tasks_per_thread; i += BURST)
        burst(self); /* a burst ends when its own tasks have: nothing of ours is left behind */
    self->cpu_ns = ns_of(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    pthread_barrier_wait(&B.start);
    return NULL;
}

typedef struct figures {
    double cpu_ns, wall_ns, dispatched;
} figures_t;

static figures_t run_once(const bench_case_t *c, int nthreads)
{
    static thread_ctx_t th[2];
    mg_sched_config_t cfg = {.max_in_flight = c->max_in_flight};
    mg_sched_executor_t ex = {post, NULL};
    B.s = c->harness ? NULL : mg_sched_new(&cfg, &ex);
    B.c = c;
    pthread_barrier_init(&B.start, NULL, (unsigned)nthreads + 1);
    for (int i = 0; i < nthreads; i++) {
        memset(&th[i], 0, sizeof(th[i]));
        th[i].rng = 12345 + (uint64_t)i * 7919;
        pthread_create(&th[i].th, NULL, thread_main, &th[i]);
    }
    pthread_barrier_wait(&B.start);
    uint64_t t0 = ns_of(CLOCK_MONOTONIC);
    pthread_barrier_wait(&B.start);
    uint64_t wall = ns_of(CLOCK_MONOTONIC) - t0;
    double tasks = (double)B.tasks_per_thread * nthreads, cpu = 0, dispatched = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i].th, NULL);
        cpu += (double)th[i].cpu_ns;
        dispatched += (double)th[i].dispatched;
    }
    if (B.s) {
        mg_sched_stats_t st;
        mg_sched_stats(B.s, &st);
        if (st.keys || st.waiting || st.in_flight)
            fprintf(stderr, "left over: %u keys, %u waiting, %u in flight\n", st.keys, st.waiting, st.in_flight);
        mg_sched_free(B.s);
    }
    pthread_barrier_destroy(&B.start);
    return (figures_t){.cpu_ns = cpu / tasks, .wall_ns = (double)wall / tasks, .dispatched = dispatched / tasks};
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), by_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Half the round trip of a flag bounced between two threads: one cache line transfer. */
static _Atomic int pingpong __attribute__((aligned(64)));
#define PINGPONGS 200000

static void *pong(void *arg)
{
    for (int i = 0; i < PINGPONGS; i++) {
        while (atomic_load_explicit(&pingpong, memory_order_acquire) != 1)
            ;
        atomic_store_explicit(&pingpong, 0, memory_order_release);
    }
    return NULL;
}

static double line_transfer_ns(void)
{
    pthread_t th;
    pthread_create(&th, NULL, pong, NULL);
    uint64_t t0 = ns_of(CLOCK_MONOTONIC);
    for (int i = 0; i < PINGPONGS; i++) {
        atomic_store_explicit(&pingpong, 1, memory_order_release);
        while (atomic_load_explicit(&pingpong, memory_order_acquire) != 0)
            ;
    }
    uint64_t ns = ns_of(CLOCK_MONOTONIC) - t0;
    pthread_join(th, NULL);
    return (double)ns / PINGPONGS / 2;
}

static void run_case(const bench_case_t *c, int nthreads, int runs)
{
    double cpu[MAX_RUNS], wall[MAX_RUNS], disp[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        figures_t f = run_once(c, nthreads);
        cpu[r] = f.cpu_ns;
        wall[r] = f.wall_ns;
        disp[r] = f.dispatched;
    }
    printf("| %s | %d | %.0f | %.0f | %.0f%% |\n", c->name, nthreads, median(cpu, runs), median(wall, runs),
           100 * median(disp, runs));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    B.tasks_per_thread = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    const char *only = argc > 3 ? argv[3] : "";
    int only_threads = argc > 4 ? atoi(argv[4]) : 0;
    if (B.tasks_per_thread < BURST || runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "usage: scheduler-bench [tasks_per_thread >= %d] [runs 1..%d] [case name part [threads]]\n", BURST,
                MAX_RUNS);
        return 2;
    }
    B.tasks_per_thread -= B.tasks_per_thread % BURST;
    for (int i = 0; i < MAX_KEYS; i++)
        B.lens[i] = (size_t)snprintf(B.names[i], sizeof(B.names[i]), "acct-%d", i);
    static const bench_case_t cases[] = {
        {"harness (no scheduler)", 0, 0, 1}, {"unordered, unlimited", 0, 0},    {"unordered, 64 slots", 0, 64},
        {"1 key, unlimited", 1, 0},          {"10k keys, unlimited", 10000, 0}, {"10k keys, 64 slots", 10000, 64},
        {"10k keys, 4 slots", 10000, 4},
    };
    printf("%llu tasks per thread, bursts of %d, median of %d runs; a cache line between the 2 threads: %.0f ns\n\n",
           (unsigned long long)B.tasks_per_thread, BURST, runs, line_transfer_ns());
    printf("| case | threads | CPU ns/task | wall ns/task | dispatched |\n| --- | ---: | ---: | ---: | ---: |\n");
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        for (int nthreads = 1; nthreads <= 2; nthreads++)
            if (strstr(cases[c].name, only) && (!only_threads || nthreads == only_threads))
                run_case(&cases[c], nthreads, runs);
    return 0;
}
