/*
 * Stress: threads hammer one limiter, one key of a table (whose ring starts with 2 slots and
 * grows to N under them), then a table of keys, on the real clock (CLOCK_MONOTONIC), for
 * a bounded time and a bounded number of attempts. Every admission's timestamp is recorded
 * and afterwards EVERY window of length P is checked to hold at most N; every rejection must
 * be justified by N recorded admissions in the window it names (so the limiter does not
 * under-admit either); after an idle P the full N must be available at once.
 *
 * Built twice: with Criterion (test_stress, run with the other unit tests) and with
 * minitest.h (stress_runner, which scripts/test runs in a ThreadSanitizer build).
 */
#include "minitest.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "throttle/throttle.h"

enum { THREADS = 4, KEYS = 16, MAX_ATTEMPTS = 2000000, MAX_REJECTIONS = 100000 };
static const uint64_t run_us = 200000; /* how long threads hammer */

static void sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void wait_until(uint64_t t)
{
    while (mg_throttle_now() < t)
        sleep_us(100);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Asserts that no window of length `per` holds more than `n` of the sorted times. */
static void check_windows(const uint64_t *at, size_t count, uint32_t n, uint64_t per, const char *what)
{
    for (size_t i = 0; i + n < count; i++)
        cr_assert(at[i + n] - at[i] >= per, "%s: %u admissions within %llu us (%llu .. %llu)", what, n + 1,
                  (unsigned long long)(at[i + n] - at[i]), (unsigned long long)at[i], (unsigned long long)at[i + n]);
}

/* How many of the sorted times are in [from, to). */
static size_t count_between(const uint64_t *at, size_t count, uint64_t from, uint64_t to)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (at[mid] < from)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t first = lo;
    for (hi = count; lo < hi;) {
        size_t mid = lo + (hi - lo) / 2;
        if (at[mid] < to)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - first;
}

/* ---- one limiter ---- */

typedef struct hammer {
    pthread_t thread;
    pthread_barrier_t *start;
    mg_limiter_t *l;  /* the limiter hammered, or */
    mg_throttle_t *t; /* the table whose key "hot" is */
    mg_quota_t quota;
    uint64_t per;
    uint64_t run_for; /* us from the start, counted once every thread is up; UINT64_MAX: unbounded */
    size_t attempts, max_attempts;
    uint64_t *at; /* admissions */
    size_t n, cap;
    uint64_t *oldest; /* the window's oldest admission, as each rejection names it */
    size_t rejected;
    int early, no_wait, overflow, errors;
} hammer_t;

static void *hammer_run(void *arg)
{
    hammer_t *h = arg;
    mg_decision_t d;
    pthread_barrier_wait(h->start);
    /* counted from here, not from before the threads were made: a loaded machine may take longer
     * than the whole run to start them */
    uint64_t until = h->run_for == UINT64_MAX ? UINT64_MAX : mg_throttle_now() + h->run_for;
    for (; h->attempts < h->max_attempts; h->attempts++) {
        uint64_t now = mg_throttle_now();
        if (now >= until)
            break;
        int r = h->l != NULL ? mg_limiter_acquire(h->l, now, &d)
                             : mg_throttle_acquire(h->t, "hot", 3, h->quota, 1, MG_THROTTLE_NO_CEILING, now, &d);
        h->errors += r != 0 && r != 1;
        if (r == 1) {
            h->early += d.at_us < now;
            if (h->n < h->cap)
                h->at[h->n++] = d.at_us;
            else
                h->overflow++;
        } else {
            h->no_wait += d.retry_after_us == 0;
            if (h->rejected < MAX_REJECTIONS)
                h->oldest[h->rejected++] = now + d.retry_after_us - h->per;
        }
    }
    return NULL;
}

/* Runs THREADS hammers on `l` (or key "hot" of `t` under `q`) for `run_for` us once all are up,
 * or `attempts` each; returns all admissions. */
static uint64_t *hammer_all(mg_limiter_t *l, mg_throttle_t *t, mg_quota_t q, hammer_t *h, uint64_t run_for, size_t attempts,
                            size_t *total)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    size_t cap = (size_t)q.requests * (run_us / q.per_us + 2);
    for (int i = 0; i < THREADS; i++) {
        h[i] = (hammer_t){
            .start = &start, .l = l, .t = t, .quota = q, .per = q.per_us, .run_for = run_for, .max_attempts = attempts, .cap = cap};
        h[i].at = malloc(cap * sizeof(uint64_t));
        h[i].oldest = malloc(MAX_REJECTIONS * sizeof(uint64_t));
        cr_assert(h[i].at != NULL && h[i].oldest != NULL);
        pthread_create(&h[i].thread, NULL, hammer_run, &h[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(h[i].thread, NULL);
    pthread_barrier_destroy(&start);
    uint64_t *all = malloc(THREADS * cap * sizeof(uint64_t));
    cr_assert(all != NULL);
    *total = 0;
    for (int i = 0; i < THREADS; i++) {
        memcpy(all + *total, h[i].at, h[i].n * sizeof(uint64_t));
        *total += h[i].n;
        cr_assert_eq(h[i].overflow, 0, "more admissions than %zu windows allow", cap);
        cr_assert_eq(h[i].errors, 0, "a decision failed");
        cr_assert_eq(h[i].early, 0, "an admission recorded before its caller's now");
        cr_assert_eq(h[i].no_wait, 0, "a rejection with no Retry-After");
    }
    qsort(all, *total, sizeof(uint64_t), cmp_u64);
    return all;
}

static void hammer_free(hammer_t *h)
{
    for (int i = 0; i < THREADS; i++) {
        free(h[i].at);
        free(h[i].oldest);
    }
}

/* Hammers `l` (or key "hot" of `t`), checks every window and every rejection; then, after an
 * idle window (and, for the table, the key's eviction: a fresh ring of 2 slots), the threads
 * together must get exactly N at once. */
static void hammer_and_check(mg_limiter_t *l, mg_throttle_t *t, mg_quota_t q, const char *what)
{
    hammer_t h[THREADS];
    size_t total, attempts = 0, rejections = 0;
    uint64_t *all = hammer_all(l, t, q, h, run_us, MAX_ATTEMPTS, &total);
    check_windows(all, total, q.requests, q.per_us, what);
    for (int i = 0; i < THREADS; i++) {
        attempts += h[i].attempts;
        for (size_t j = 0; j < h[i].rejected; j++, rejections++) {
            size_t in = count_between(all, total, h[i].oldest[j], h[i].oldest[j] + q.per_us);
            cr_assert(in >= q.requests, "%s: a rejection named a window from %llu holding %zu admissions, not %u", what,
                      (unsigned long long)h[i].oldest[j], in, q.requests);
        }
    }
    cr_assert(total >= q.requests, "%s: only %zu admitted", what, total);
    cr_log_info("%s: %zu attempts, %zu admitted, %zu rejections checked", what, attempts, total, rejections);
    uint64_t last = all[total - 1];
    free(all);
    hammer_free(h);

    /* idle for one window: all threads together get exactly the full N at once */
    wait_until(last + q.per_us);
    if (t != NULL)
        cr_assert_eq(mg_throttle_evict(t, mg_throttle_now()), 1, "%s: the idle key was not evicted", what);
    uint64_t burst = mg_throttle_now();
    all = hammer_all(l, t, q, h, UINT64_MAX, q.requests / THREADS, &total);
    cr_assert_eq(total, q.requests, "%s: after an idle window %zu of %u were admitted", what, total, q.requests);
    mg_decision_t d;
    int r = l != NULL ? mg_limiter_acquire(l, mg_throttle_now(), &d)
                      : mg_throttle_acquire(t, "hot", 3, q, 1, MG_THROTTLE_NO_CEILING, mg_throttle_now(), &d);
    if (r == 1)
        cr_assert(d.at_us >= burst + q.per_us, "%s: N + 1 admitted within one window", what);
    free(all);
    hammer_free(h);
}

Test(stress, one_limiter_under_threads_is_exact_in_every_window, .timeout = 60)
{
    const mg_quota_t q = {64, 2000};
    mg_limiter_t *l = mg_limiter_new(q);
    cr_assert(l != NULL);
    hammer_and_check(l, NULL, q, "limiter");
    mg_limiter_free(l);
}

/* The key's ring starts with 2 slots and grows (4, 8, ... 64) while every thread decides on
 * it: each growth freezes the ring, and threads copy it, race to install their copy and
 * decide again on the winner's. */
Test(stress, one_key_growing_under_threads_is_exact_in_every_window, .timeout = 60)
{
    const mg_quota_t q = {64, 2000};
    mg_throttle_t *t = mg_throttle_new();
    cr_assert(t != NULL);
    hammer_and_check(NULL, t, q, "growing key");
    mg_throttle_free(t);
}

/* ---- a table: keys decided, evicted and moved between quotas at once ---- */

typedef struct admission {
    uint32_t key;
    uint64_t at;
} admission_t;

typedef struct shared {
    mg_throttle_t *t;
    pthread_barrier_t start;
    _Atomic uint64_t gen;
    size_t evicted, requotas;
} shared_t;

/* Generations alternate P between 1000 and 1500 us: every requota migrates every key, and
 * "at most N in any 1000 us" holds throughout (a longer window only admits less). */
static mg_quota_t quota_of_gen(uint64_t gen)
{
    return (mg_quota_t){8, gen % 2 ? 1000 : 1500};
}

static int quota_of(void *arg, const char *key, size_t len, mg_quota_t *quota)
{
    *quota = quota_of_gen(atomic_load(&((shared_t *)arg)->gen));
    return 1;
}

typedef struct tenant_worker {
    pthread_t thread;
    shared_t *s;
    uint64_t rng;
    admission_t *adm;
    size_t n, cap, attempts;
    int errors, early, overflow;
} tenant_worker_t;

static void key_name(char *buf, uint32_t k)
{
    memcpy(buf, "tenant-", 7);
    buf[7] = (char)('a' + k % 26);
    buf[8] = (char)('a' + k / 26);
}

static void *tenant_worker_run(void *arg)
{
    tenant_worker_t *w = arg;
    char key[9];
    pthread_barrier_wait(&w->s->start);
    uint64_t until = mg_throttle_now() + run_us; /* from the start, as in hammer_run */
    for (; w->attempts < MAX_ATTEMPTS; w->attempts++) {
        uint64_t now = mg_throttle_now(), gen = atomic_load(&w->s->gen);
        if (now >= until)
            break;
        w->rng = w->rng * 6364136223846793005u + 1442695040888963407u;
        uint32_t k = (uint32_t)(w->rng >> 33) % KEYS;
        key_name(key, k);
        mg_decision_t d;
        int r = mg_throttle_acquire(w->s->t, key, sizeof(key), quota_of_gen(gen), gen, MG_THROTTLE_NO_CEILING, now, &d);
        w->errors += r < 0;
        if (r == 1) {
            w->early += d.at_us < now;
            if (w->n < w->cap)
                w->adm[w->n++] = (admission_t){k, d.at_us};
            else
                w->overflow++;
        }
        /* pauses, so that keys go idle long enough to be evicted */
        if ((w->rng >> 20) % 64 == 0)
            sleep_us((w->rng >> 40) % 1600);
    }
    return NULL;
}

static void *evictor_run(void *arg)
{
    shared_t *s = arg;
    pthread_barrier_wait(&s->start);
    for (uint64_t until = mg_throttle_now() + run_us; mg_throttle_now() < until;) {
        s->evicted += mg_throttle_evict(s->t, mg_throttle_now());
        sleep_us(200);
    }
    return NULL;
}

static void *requota_run(void *arg)
{
    shared_t *s = arg;
    pthread_barrier_wait(&s->start);
    for (uint64_t until = mg_throttle_now() + run_us; mg_throttle_now() < until;) {
        uint64_t gen = atomic_fetch_add(&s->gen, 1) + 1;
        mg_throttle_requota(s->t, quota_of, s, gen, mg_throttle_now());
        s->requotas++;
        sleep_us(3000);
    }
    return NULL;
}

Test(stress, a_table_under_threads_with_evictions_and_quota_changes_is_exact, .timeout = 60)
{
    enum { WORKERS = THREADS - 1 };
    shared_t s = {.t = mg_throttle_new(), .gen = 1};
    cr_assert(s.t != NULL);
    pthread_barrier_init(&s.start, NULL, WORKERS + 2);
    tenant_worker_t w[WORKERS];
    size_t cap = KEYS * 8 * (run_us / 1000 + 2);
    for (int i = 0; i < WORKERS; i++) {
        w[i] = (tenant_worker_t){.s = &s, .rng = (uint64_t)i * 7919 + 1, .cap = cap};
        w[i].adm = malloc(cap * sizeof(admission_t));
        cr_assert(w[i].adm != NULL);
        pthread_create(&w[i].thread, NULL, tenant_worker_run, &w[i]);
    }
    pthread_t evictor, requota;
    pthread_create(&evictor, NULL, evictor_run, &s);
    pthread_create(&requota, NULL, requota_run, &s);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i].thread, NULL);
    pthread_join(evictor, NULL);
    pthread_join(requota, NULL);
    pthread_barrier_destroy(&s.start);

    uint64_t *at = malloc(WORKERS * cap * sizeof(uint64_t)), last = 0;
    size_t total = 0, attempts = 0;
    cr_assert(at != NULL);
    for (uint32_t k = 0; k < KEYS; k++) {
        size_t n = 0;
        for (int i = 0; i < WORKERS; i++)
            for (size_t j = 0; j < w[i].n; j++)
                if (w[i].adm[j].key == k)
                    at[n++] = w[i].adm[j].at;
        qsort(at, n, sizeof(uint64_t), cmp_u64);
        check_windows(at, n, 8, 1000, "table key");
        total += n;
        last = n > 0 && at[n - 1] > last ? at[n - 1] : last;
    }
    for (int i = 0; i < WORKERS; i++) {
        cr_assert_eq(w[i].errors, 0, "a decision failed");
        cr_assert_eq(w[i].early, 0, "an admission recorded before its caller's now");
        cr_assert_eq(w[i].overflow, 0, "more admissions than the windows allow");
        attempts += w[i].attempts;
        free(w[i].adm);
    }
    free(at);
    cr_log_info("table: %zu attempts, %zu admitted, %zu evictions, %zu quota changes", attempts, total, s.evicted, s.requotas);

    /* idle for the longest window: every key is evicted, and each gets its full N again */
    wait_until(last + 1500);
    mg_throttle_evict(s.t, mg_throttle_now());
    cr_assert_eq(mg_throttle_count(s.t), 0, "keys idle for a whole window were not evicted");
    uint64_t gen = atomic_load(&s.gen), now = mg_throttle_now();
    char key[9];
    for (uint32_t k = 0; k < KEYS; k++) {
        key_name(key, k);
        for (int i = 0; i < 8; i++)
            cr_assert_eq(mg_throttle_acquire(s.t, key, sizeof(key), quota_of_gen(gen), gen, MG_THROTTLE_NO_CEILING, now, NULL), 1);
        cr_assert_eq(mg_throttle_acquire(s.t, key, sizeof(key), quota_of_gen(gen), gen, MG_THROTTLE_NO_CEILING, now, NULL), 0);
    }
    mg_throttle_free(s.t);
}
