/*
 * throttle-bench: nanoseconds per throttle decision, by thread count and key spread.
 *
 *   limiter  mg_limiter_acquire on an array of limiters (the key is an index)
 *   table    mg_throttle_acquire with a key string ("tenant-00042"): hash, lookup, decision
 *   mutex    the baseline: the same ring and the same decision (clock clamp, window count for
 *            remaining/reset, exact Retry-After) behind one pthread mutex per key, on an array
 *            like "limiter"
 *   mutex + map  the same rings found by the key string, as "table" finds its limiters, in a
 *            read-only map built before timing (the mutex's best case: see mutex_map_t)
 *
 * Each runs with 1, 2, 4 and 8 threads on one hot key, and on 10,000 keys (each thread draws
 * its keys at random). Two workloads:
 *   admit   quota 100 per 1 us: a thread cannot make 100 decisions in a microsecond, so
 *           nearly every decision admits (two CASes on the same key from every thread)
 *   reject  quota 100 per hour: keys start full, every decision rejects (reads only)
 * Every decision fills an mg_decision_t (remaining, reset, Retry-After), as the gateway asks.
 * The clock (mg_throttle_now) is read once per 32 decisions: its cost is the same for every
 * variant, and a read per decision would be half of what is measured.
 *
 * A figure is CPU time per decision: each thread's CLOCK_THREAD_CPUTIME_ID over its loop,
 * divided by its decisions, averaged over the threads; so with more threads than cores the
 * time a thread waits for a core is not counted, the time it spends on contention is. The
 * median of ROUNDS runs, the variants run in turn within each. "M/s" is all threads'
 * decisions per second of wall time. Lock-free against the mutex, like for like: "limiter /
 * mutex" (the decision alone) and "table / mutex + map" (with the key's lookup), each run's
 * ratio of the two figures, its median and range over the runs (below 1, lock-free is the
 * faster).
 *
 * Before that, memory per key: a table gets KEYS_MEMORY keys named like the gateway's
 * ("t", NUL, "tenant-000042"), each with one admission under {8000 per hour} (a key a client
 * made up), then as many with N = 100 and 100 admissions (a full ring); each line is the heap
 * in use (glibc's mallinfo2: small chunks and mapped ones, the allocator's headers included)
 * and the process's VmRSS, before and after, divided by the keys. The table's buckets are in
 * it (liburcu grows them in its own thread: the figures are taken after it settles).
 *
 * A benchmark: prints a table, never fails on time. Loops are bounded (OPS decisions per
 * thread per run).
 *
 *   throttle-bench [OPS [ROUNDS [THREADS]]]   defaults 1000000, 3 and 8: the columns up to THREADS
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "tests/bench/lib/memory.h"
#include "throttle/throttle.h"

enum { MAX_THREADS = 8, MANY_KEYS = 10000, MAX_ROUNDS = 15, CLOCK_EVERY = 32 };

/* ---- the baseline: a ring of timestamps behind a mutex, the limiter's semantics ---- */

typedef struct mutex_ring {
    pthread_mutex_t lock;
    uint32_t n, head, count;
    uint64_t per_us, last;
    uint64_t *ts; /* oldest at head when full */
} mutex_ring_t;

static void mutex_ring_init(mutex_ring_t *r, mg_quota_t q)
{
    pthread_mutex_init(&r->lock, NULL);
    r->n = q.requests;
    r->per_us = q.per_us;
    r->head = r->count = 0;
    r->last = 0;
    r->ts = calloc(q.requests, sizeof(uint64_t));
}

static uint64_t ring_at(const mutex_ring_t *r, uint32_t i) /* i-th oldest */
{
    uint32_t first = r->count == r->n ? r->head : 0, pos = first + i;
    return r->ts[pos >= r->n ? pos - r->n : pos];
}

static uint32_t ring_window(const mutex_ring_t *r, uint64_t now, uint64_t *oldest)
{
    uint32_t lo = 0, hi = r->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ring_at(r, mid) + r->per_us > now)
            hi = mid;
        else
            lo = mid + 1;
    }
    *oldest = lo < r->count ? ring_at(r, lo) : 0;
    return r->count - lo;
}

static int mutex_ring_acquire(mutex_ring_t *r, uint64_t now, mg_decision_t *d)
{
    pthread_mutex_lock(&r->lock);
    uint64_t t = now > r->last ? now : r->last, oldest;
    int admitted = r->count < r->n || r->ts[r->head] + r->per_us <= t;
    d->admitted = admitted;
    d->limit = r->n;
    if (admitted) {
        r->ts[r->head] = r->last = t;
        r->head = r->head + 1 == r->n ? 0 : r->head + 1;
        r->count += r->count < r->n;
        uint32_t used = ring_window(r, t, &oldest);
        d->remaining = r->n - used;
        d->reset_us = oldest + r->per_us - now;
        d->retry_after_us = 0;
        d->at_us = t;
    } else {
        d->remaining = 0;
        d->retry_after_us = d->reset_us = r->ts[r->head] + r->per_us - now;
        d->at_us = 0;
    }
    pthread_mutex_unlock(&r->lock);
    return admitted;
}

/* ---- the baseline with keys: the mutex rings found by name ----
 *
 * What "table" does besides deciding is find the key's limiter by its name; this gives the
 * mutex rings the same step, as generously as it can be done: the keys are known before
 * timing, so a read-only open-addressing map (FNV-1a, cheaper than the table's keyed SipHash;
 * names held in the slots) needs no lock and is never resized. */

typedef struct map_slot {
    char name[24];
    size_t len;
    mutex_ring_t *ring;
} map_slot_t;

typedef struct mutex_map {
    map_slot_t *slots;
    size_t mask;
} mutex_map_t;

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3u;
    return h;
}

static void mutex_map_init(mutex_map_t *m, char (*names)[24], mutex_ring_t *rings, uint32_t keys)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)keys)
        cap *= 2;
    m->slots = calloc(cap, sizeof(*m->slots));
    m->mask = cap - 1;
    for (uint32_t k = 0; k < keys; k++) {
        size_t len = strlen(names[k]), i = fnv1a(names[k], len) & m->mask;
        while (m->slots[i].ring != NULL)
            i = (i + 1) & m->mask;
        memcpy(m->slots[i].name, names[k], len + 1);
        m->slots[i].len = len;
        m->slots[i].ring = &rings[k];
    }
}

static mutex_ring_t *mutex_map_find(const mutex_map_t *m, const char *name, size_t len)
{
    for (size_t i = fnv1a(name, len) & m->mask;; i = (i + 1) & m->mask) {
        const map_slot_t *s = &m->slots[i];
        if (s->ring == NULL || (s->len == len && memcmp(s->name, name, len) == 0))
            return s->ring;
    }
}

/* ---- the runs ---- */

typedef enum variant { LIMITER, TABLE, MUTEX, MUTEX_MAP } variant_t;
static const char *const variant_names[] = {"limiter", "table", "mutex", "mutex + map"};

typedef struct run {
    variant_t variant;
    mg_quota_t quota;
    uint32_t keys;
    mg_limiter_t **limiters;
    mutex_ring_t *rings;
    mutex_map_t map;
    mg_throttle_t *table;
    char (*names)[24];
    pthread_barrier_t start;
    size_t ops;
} run_t;

typedef struct worker {
    pthread_t thread;
    run_t *run;
    uint64_t rng;
    double cpu_ns, began, ended; /* CPU time; wall clock at the start and end of the loop */
    size_t admitted;
} worker_t;

static double clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint32_t next_key(worker_t *w)
{
    if (w->run->keys == 1)
        return 0;
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return (uint32_t)(w->rng % w->run->keys);
}

static int decide(run_t *r, uint32_t k, uint64_t now, mg_decision_t *d)
{
    switch (r->variant) {
    case LIMITER:
        return mg_limiter_acquire(r->limiters[k], now, d);
    case TABLE:
        return mg_throttle_acquire(r->table, r->names[k], 12, r->quota, 1, MG_THROTTLE_NO_CEILING, now, d);
    case MUTEX_MAP:
        return mutex_ring_acquire(mutex_map_find(&r->map, r->names[k], 12), now, d);
    default:
        return mutex_ring_acquire(&r->rings[k], now, d);
    }
}

static void *worker_run(void *arg)
{
    worker_t *w = arg;
    run_t *r = w->run;
    mg_decision_t d;
    uint64_t now = 0;
    pthread_barrier_wait(&r->start);
    w->began = clock_ns(CLOCK_MONOTONIC);
    double begin = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (size_t i = 0; i < r->ops; i++) {
        if (i % CLOCK_EVERY == 0)
            now = mg_throttle_now();
        w->admitted += decide(r, next_key(w), now, &d) == 1;
    }
    w->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - begin;
    w->ended = clock_ns(CLOCK_MONOTONIC);
    return NULL;
}

/* Keys exist and hold a full window before timing: "reject" then only rejects, and the
 * table's inserts (and its growth) are not in the figures. */
static void run_setup(run_t *r)
{
    if (r->variant != LIMITER) {
        r->names = malloc(r->keys * sizeof(*r->names));
        for (uint32_t k = 0; k < r->keys; k++)
            snprintf(r->names[k], sizeof(r->names[k]), "tenant-%05u", k);
    }
    if (r->variant == LIMITER) {
        r->limiters = malloc(r->keys * sizeof(*r->limiters));
        for (uint32_t k = 0; k < r->keys; k++)
            r->limiters[k] = mg_limiter_new(r->quota);
    } else if (r->variant == MUTEX || r->variant == MUTEX_MAP) {
        r->rings = malloc(r->keys * sizeof(*r->rings));
        for (uint32_t k = 0; k < r->keys; k++)
            mutex_ring_init(&r->rings[k], r->quota);
        if (r->variant == MUTEX_MAP)
            mutex_map_init(&r->map, r->names, r->rings, r->keys);
    } else {
        r->table = mg_throttle_new();
    }
    mg_decision_t d;
    uint64_t now = mg_throttle_now();
    for (uint32_t k = 0; k < r->keys; k++)
        for (uint32_t i = 0; i < r->quota.requests; i++)
            decide(r, k, now, &d);
}

static void run_teardown(run_t *r)
{
    for (uint32_t k = 0; r->limiters != NULL && k < r->keys; k++)
        mg_limiter_free(r->limiters[k]);
    for (uint32_t k = 0; r->rings != NULL && k < r->keys; k++) {
        pthread_mutex_destroy(&r->rings[k].lock);
        free(r->rings[k].ts);
    }
    mg_throttle_free(r->table);
    free(r->map.slots);
    free(r->limiters);
    free(r->rings);
    free(r->names);
}

/* One run: ns of CPU per decision (mean over threads); `*mps`: decisions per us of wall. */
static double run_once(variant_t v, mg_quota_t q, uint32_t keys, int threads, size_t ops, double *mps, double *admit_share)
{
    run_t r = {.variant = v, .quota = q, .keys = keys, .ops = ops};
    worker_t w[MAX_THREADS];
    run_setup(&r);
    pthread_barrier_init(&r.start, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        w[i] = (worker_t){.run = &r, .rng = 0x9e3779b97f4a7c15u * (uint64_t)(i + 1)};
        pthread_create(&w[i].thread, NULL, worker_run, &w[i]);
    }
    pthread_barrier_wait(&r.start);
    double cpu = 0, admitted = 0, began = 0, ended = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].thread, NULL);
        cpu += w[i].cpu_ns / (double)ops;
        admitted += (double)w[i].admitted;
        began = i == 0 || w[i].began < began ? w[i].began : began;
        ended = w[i].ended > ended ? w[i].ended : ended;
    }
    *mps = (double)ops * threads / ((ended - began) / 1e3);
    *admit_share = admitted / ((double)ops * threads);
    pthread_barrier_destroy(&r.start);
    run_teardown(&r);
    return cpu / threads;
}

/* ---- memory per key ---- */

enum { KEYS_MEMORY = 200000 };

/* Inserts KEYS_MEMORY keys into `t`, each admitted `admissions` times under `q`; prints a line. */
static void memory_line(mg_throttle_t *t, const char *what, mg_quota_t q, uint32_t admissions, char prefix)
{
    char key[24];
    size_t heap = mg_bench_heap_bytes(), rss = mg_bench_rss_bytes();
    uint64_t now = mg_throttle_now();
    for (uint32_t k = 0; k < KEYS_MEMORY; k++) {
        int len = snprintf(key, sizeof(key), "%c%ctenant-%06u", prefix, 0, k);
        for (uint32_t i = 0; i < admissions; i++)
            mg_throttle_acquire(t, key, (size_t)len, q, 1, MG_THROTTLE_NO_CEILING, now, NULL);
    }
    usleep(200000); /* liburcu resizes the buckets in its own thread */
    printf("| %s | %u | %u | %.0f | %.0f |\n", what, q.requests, admissions, (double)(mg_bench_heap_bytes() - heap) / KEYS_MEMORY,
           (double)(mg_bench_rss_bytes() - rss) / KEYS_MEMORY);
}

static void memory_per_key(void)
{
    mg_throttle_t *t = mg_throttle_new();
    printf("Memory per key, %d keys of 16 bytes each (table entry, limiter, buckets):\n\n", KEYS_MEMORY);
    printf("| key | N | admissions | heap bytes | RSS bytes |\n| --- | ---: | ---: | ---: | ---: |\n");
    memory_line(t, "made up, one request", (mg_quota_t){8000, UINT64_C(3600) * 1000000}, 1, 't');
    memory_line(t, "full ring", (mg_quota_t){100, UINT64_C(3600) * 1000000}, 100, 'u');
    mg_throttle_free(t);
    printf("\n");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

enum { VARIANTS = 4, THREAD_COUNTS = 4 };
static const int thread_counts[THREAD_COUNTS] = {1, 2, 4, 8};
static int columns = THREAD_COUNTS; /* the thread counts run: the first `columns` */

/* One workload on one key count: ns[variant][threads][round], the variants in turn within
 * each round (so the machine's neighbours weigh on all three alike), and the admitted share
 * per variant. */
typedef struct cell_runs {
    double ns[VARIANTS][THREAD_COUNTS][MAX_ROUNDS], mps[VARIANTS][THREAD_COUNTS][MAX_ROUNDS];
    double share[VARIANTS];
} cell_runs_t;

static void runs_measure(cell_runs_t *c, mg_quota_t q, uint32_t keys, size_t ops, int rounds)
{
    for (int t = 0; t < columns; t++)
        for (int i = 0; i < rounds; i++)
            for (variant_t v = LIMITER; v <= MUTEX_MAP; v++)
                c->ns[v][t][i] = run_once(v, q, keys, thread_counts[t], ops, &c->mps[v][t][i], &c->share[v]);
}

/* "a / b": the ratio of each round's pair of figures, its median and range over the rounds
 * (below 1: a is the faster). */
static void ratio_print(cell_runs_t *c, const char *load, uint32_t keys, int rounds, variant_t a, variant_t b)
{
    printf("| %s | %u | %s / %s |", load, keys, variant_names[a], variant_names[b]);
    for (int t = 0; t < columns; t++) {
        double ratio[MAX_ROUNDS];
        for (int i = 0; i < rounds; i++)
            ratio[i] = c->ns[a][t][i] / c->ns[b][t][i];
        double mid = median(ratio, rounds);
        printf(" **%.2f** (%.2f-%.2f) |", mid, ratio[0], ratio[rounds - 1]);
    }
    printf(" |\n");
}

/* The variants' rows, then lock-free against the mutex: the limiter against the mutex rings
 * (the decision alone), the table against the mutex rings found by name (with the lookup). */
static void runs_print(cell_runs_t *c, const char *load, uint32_t keys, int rounds)
{
    for (variant_t v = LIMITER; v <= MUTEX_MAP; v++) {
        printf("| %s | %u | %s |", load, keys, variant_names[v]);
        for (int t = 0; t < columns; t++) {
            double ns[MAX_ROUNDS], mps[MAX_ROUNDS];
            memcpy(ns, c->ns[v][t], sizeof(ns));
            memcpy(mps, c->mps[v][t], sizeof(mps));
            printf(" %.1f (%.1f) |", median(ns, rounds), median(mps, rounds));
        }
        printf(" %.0f%% |\n", c->share[v] * 100);
    }
    ratio_print(c, load, keys, rounds, LIMITER, MUTEX);
    ratio_print(c, load, keys, rounds, TABLE, MUTEX_MAP);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    size_t ops = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3, threads = argc > 3 ? atoi(argv[3]) : MAX_THREADS;
    if (ops == 0 || rounds < 1 || rounds > MAX_ROUNDS || threads < 1) {
        fprintf(stderr, "usage: throttle-bench [OPS [ROUNDS (1..%d) [THREADS]]]\n", MAX_ROUNDS);
        return 2;
    }
    for (columns = 0; columns < THREAD_COUNTS && thread_counts[columns] <= threads;)
        columns++;
    static const struct {
        const char *name;
        mg_quota_t quota;
    } loads[] = {{"admit", {100, 1}}, {"reject", {100, UINT64_C(3600) * 1000000}}};
    static const uint32_t key_counts[] = {1, MANY_KEYS};
    memory_per_key();
    printf("%zu decisions per thread per run, median of %d runs, the variants in turn in each run; each cell: ns of CPU "
           "per decision (all threads' decisions in millions per second of wall time); a / b: median (range) of the "
           "runs' ratios, below 1 when a is the faster\n\n",
           ops, rounds);
    printf("| workload | keys | variant |");
    for (int t = 0; t < columns; t++)
        printf(" %d thread%s |", thread_counts[t], t > 0 ? "s" : "");
    printf(" admitted |\n| --- | ---: | --- |");
    for (int t = 0; t <= columns; t++)
        printf(" ---: |");
    printf("\n");
    static cell_runs_t c;
    for (size_t l = 0; l < sizeof(loads) / sizeof(loads[0]); l++) {
        for (size_t k = 0; k < 2; k++) {
            runs_measure(&c, loads[l].quota, key_counts[k], ops, rounds);
            runs_print(&c, loads[l].name, key_counts[k], rounds);
        }
    }
    return 0;
}
