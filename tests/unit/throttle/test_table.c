/* The table of keys on a clock the test drives: first sight, independence of keys, quota
 * generations (lazy and eager migration, grow and shrink), eviction only after the whole
 * window, listings, concurrent inserts and evictions, and random traces of several keys
 * against per-key models. Includes table.c to reach entries and limiters. */
#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
static void evict_race_point(void);
#define MG__EVICT_RACE_POINT() evict_race_point()
#include "throttle/table.c"
#include "model.h"

static mg_throttle_t *table;

static void setup(void)
{
    table = mg_throttle_new();
    cr_assert_not_null(table);
}

static void teardown(void)
{
    mg_throttle_free(table);
}

TestSuite(table, .init = setup, .fini = teardown);

static const mg_quota_t q3 = {3, 100};

static int acquire(const char *key, mg_quota_t quota, uint64_t gen, uint64_t now, mg_decision_t *d)
{
    mg_decision_t local;
    return mg_throttle_acquire(table, key, strlen(key), quota, gen, MG_THROTTLE_NO_CEILING, now, d != NULL ? d : &local);
}

/* Admits `n` and then expects a rejection, all at `now`. */
static void fill(const char *key, mg_quota_t quota, uint64_t gen, uint64_t now, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(acquire(key, quota, gen, now, NULL), 1, "%s: admission %d of %d at %llu", key, i + 1, n,
                     (unsigned long long)now);
    cr_assert_eq(acquire(key, quota, gen, now, NULL), 0, "%s: more than %d admitted at %llu", key, n, (unsigned long long)now);
}

typedef struct listing {
    size_t n;
    mg_throttle_stat_t stat[16];
    char keys[16][32];
} listing_t;

static void collect(void *arg, const mg_throttle_stat_t *s)
{
    listing_t *l = arg;
    cr_assert_lt(l->n, 16);
    cr_assert_lt(s->len, 32);
    memcpy(l->keys[l->n], s->key, s->len);
    l->keys[l->n][s->len] = '\0';
    l->stat[l->n] = *s;
    l->stat[l->n].key = l->keys[l->n];
    l->n++;
}

static const mg_throttle_stat_t *listed(listing_t *l, const char *key)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->stat[i].len == strlen(key) && memcmp(l->keys[i], key, l->stat[i].len) == 0)
            return &l->stat[i];
    return NULL;
}

Test(table, a_key_first_seen_gets_the_quota_passed)
{
    mg_decision_t d;
    cr_expect_eq(mg_throttle_count(table), 0);
    cr_assert_eq(acquire("acme", q3, 1, 1000, &d), 1);
    cr_expect_eq(d.limit, 3);
    cr_expect_eq(d.remaining, 2);
    cr_expect_eq(d.at_us, 1000);
    cr_expect_eq(mg_throttle_count(table), 1);
    fill("acme", q3, 1, 1000, 2);
    cr_assert_eq(acquire("acme", q3, 1, 1050, &d), 0);
    cr_expect_eq(d.retry_after_us, 50);
    cr_expect_eq(mg_throttle_count(table), 1);
}

Test(table, keys_are_independent)
{
    fill("a", q3, 1, 1000, 3);
    fill("b", (mg_quota_t){1, 100}, 1, 1000, 1);
    fill("ab", q3, 1, 1000, 3);
    /* binary keys and a prefix of another key are keys of their own */
    cr_expect_eq(mg_throttle_acquire(table, "a\0b", 3, q3, 1, MG_THROTTLE_NO_CEILING, 1000, NULL), 1);
    cr_expect_eq(mg_throttle_acquire(table, "", 0, q3, 1, MG_THROTTLE_NO_CEILING, 1000, NULL), 1);
    cr_expect_eq(mg_throttle_count(table), 5);
    listing_t l = {0};
    mg_throttle_foreach(table, 1000, collect, &l);
    cr_expect_eq(l.n, 5);
    cr_expect_eq(listed(&l, "a")->used, 3);
    cr_expect_eq(listed(&l, "a")->rejected, 1);
    cr_expect_eq(listed(&l, "b")->quota.requests, 1);
    cr_expect_eq(listed(&l, "")->admitted, 1);
}

Test(table, quota_out_of_range_is_an_error_not_an_admission)
{
    cr_expect_eq(acquire("k", (mg_quota_t){0, 100}, 1, 1000, NULL), -1);
    cr_expect_eq(acquire("k", (mg_quota_t){1, 0}, 1, 1000, NULL), -1);
    cr_expect_eq(mg_throttle_count(table), 0);
    char big[4096];
    memset(big, 'k', sizeof(big));
    cr_expect_eq(mg_throttle_acquire(table, big, sizeof(big), q3, 1, MG_THROTTLE_NO_CEILING, 1000, NULL), 1, "a long key is a key");
}

Test(table, a_newer_quota_that_grows_keeps_the_history)
{
    fill("t", q3, 1, 1000, 3);
    mg_decision_t d;
    /* generation 2 says 5: the 3 admissions stay, 2 more fit */
    cr_assert_eq(acquire("t", (mg_quota_t){5, 100}, 2, 1010, &d), 1);
    cr_expect_eq(d.limit, 5);
    cr_expect_eq(d.remaining, 1);
    cr_assert_eq(acquire("t", (mg_quota_t){5, 100}, 2, 1010, NULL), 1);
    cr_assert_eq(acquire("t", (mg_quota_t){5, 100}, 2, 1010, &d), 0);
    cr_expect_eq(d.retry_after_us, 90);
    /* a request still on generation 1 does not flip the key back to 3 */
    cr_assert_eq(acquire("t", q3, 1, 1100, &d), 1);
    cr_expect_eq(d.limit, 5);
    cr_expect_eq(d.remaining, 2, "1010, 1010 and 1100 in the window, of 5");
}

Test(table, a_newer_quota_that_shrinks_keeps_the_newest)
{
    const mg_quota_t q4 = {4, 100}, q2 = {2, 100};
    cr_assert_eq(acquire("t", q4, 1, 10, NULL), 1);
    cr_assert_eq(acquire("t", q4, 1, 20, NULL), 1);
    cr_assert_eq(acquire("t", q4, 1, 30, NULL), 1);
    cr_assert_eq(acquire("t", q4, 1, 40, NULL), 1);
    mg_decision_t d;
    cr_assert_eq(acquire("t", q2, 2, 45, &d), 0);
    cr_expect_eq(d.limit, 2);
    cr_expect_eq(d.retry_after_us, 85, "30 and 40 are kept, 30 leaves first: %llu", (unsigned long long)d.retry_after_us);
    cr_assert_eq(acquire("t", q2, 2, 130, &d), 1);
    cr_assert_eq(acquire("t", q2, 2, 130, &d), 0);
    cr_expect_eq(d.retry_after_us, 10);
    /* an older generation uses the key's quota (2), not its own (4) */
    cr_assert_eq(acquire("t", q4, 1, 135, &d), 0);
    cr_expect_eq(d.limit, 2);
}

Test(table, the_same_quota_in_a_newer_generation_only_moves_the_generation)
{
    fill("t", q3, 1, 1000, 3);
    fill("t", q3, 2, 1000, 0);
    /* generation 2 kept 3; generation 1's other quota can no longer change it */
    mg_decision_t d;
    cr_assert_eq(acquire("t", (mg_quota_t){10, 100}, 1, 1000, &d), 0);
    cr_expect_eq(d.limit, 3);
    cr_assert_eq(acquire("t", (mg_quota_t){4, 100}, 3, 1000, &d), 1);
    cr_expect_eq(d.limit, 4);
}

static int requota_of(void *arg, const char *key, size_t len, mg_quota_t *quota)
{
    (void)arg;
    if (len == 4 && memcmp(key, "keep", 4) == 0)
        return 0;
    *quota = len == 4 && memcmp(key, "grow", 4) == 0 ? (mg_quota_t){5, 100} : (mg_quota_t){1, 100};
    return 1;
}

Test(table, requota_moves_every_key_at_once)
{
    fill("grow", q3, 1, 1000, 3);
    fill("shrink", q3, 1, 1000, 3);
    fill("keep", q3, 1, 1000, 3);
    mg_throttle_requota(table, requota_of, NULL, 2, 1000);
    listing_t l = {0};
    mg_throttle_foreach(table, 1000, collect, &l);
    cr_assert_eq(l.n, 3);
    cr_expect_eq(listed(&l, "grow")->quota.requests, 5);
    cr_expect_eq(listed(&l, "grow")->used, 3);
    cr_expect_eq(listed(&l, "shrink")->quota.requests, 1);
    cr_expect_eq(listed(&l, "shrink")->used, 1);
    cr_expect_eq(listed(&l, "keep")->quota.requests, 3);
    cr_expect_eq(listed(&l, "shrink")->admitted, 3, "totals survive a quota change");
    cr_expect_eq(listed(&l, "shrink")->rejected, 1);
    /* generation 1 can no longer undo it; "keep" stayed on generation 1 */
    fill("grow", q3, 1, 1000, 2);
    fill("shrink", q3, 1, 1000, 0);
    cr_expect_eq(acquire("keep", (mg_quota_t){4, 100}, 2, 1000, NULL), 1);
}

Test(table, a_key_is_evicted_only_after_its_whole_window)
{
    const mg_quota_t q = {2, 100};
    cr_assert_eq(acquire("k", q, 1, 10, NULL), 1);
    cr_assert_eq(acquire("k", q, 1, 50, NULL), 1);
    cr_assert_eq(acquire("k", q, 1, 60, NULL), 0);
    cr_expect_eq(mg_throttle_evict(table, 110), 0, "50 is still in the window");
    cr_expect_eq(mg_throttle_evict(table, 149), 0);
    cr_expect_eq(mg_throttle_count(table), 1);
    cr_expect_eq(mg_throttle_evict(table, 150), 1);
    cr_expect_eq(mg_throttle_count(table), 0);
    listing_t l = {0};
    mg_throttle_foreach(table, 150, collect, &l);
    cr_expect_eq(l.n, 0);
    cr_expect_eq(mg_throttle_evict(table, 150), 0);
}

typedef struct evicted {
    char keys[8][16];
    uint64_t admitted[8], rejected[8];
    uint32_t used[8];
    size_t n;
} evicted_t;

static void on_gone(void *arg, const mg_throttle_stat_t *s)
{
    evicted_t *ev = arg;
    cr_assert_lt(ev->n, 8);
    snprintf(ev->keys[ev->n], sizeof(ev->keys[0]), "%.*s", (int)s->len, s->key);
    ev->admitted[ev->n] = s->admitted;
    ev->rejected[ev->n] = s->rejected;
    ev->used[ev->n++] = s->used;
}

Test(table, eviction_hands_over_each_key_with_its_final_totals)
{
    const mg_quota_t q = {2, 100};
    evicted_t ev = {0};
    cr_assert_eq(acquire("a", q, 1, 10, NULL), 1);
    cr_assert_eq(acquire("a", q, 1, 20, NULL), 1);
    cr_assert_eq(acquire("a", q, 1, 30, NULL), 0);
    cr_assert_eq(acquire("a", q, 1, 40, NULL), 0);
    cr_assert_eq(acquire("b", q, 1, 90, NULL), 1);

    cr_expect_eq(mg_throttle_evict_each(table, 150, on_gone, &ev), 1, "b's window has not passed");
    cr_assert_eq(ev.n, 1);
    cr_expect_str_eq(ev.keys[0], "a");
    cr_expect_eq(ev.admitted[0], 2);
    cr_expect_eq(ev.rejected[0], 2);
    cr_expect_eq(ev.used[0], 0);

    cr_expect_eq(mg_throttle_evict_each(table, 150, on_gone, &ev), 0, "each key is handed over once");
    cr_expect_eq(mg_throttle_evict_each(table, 190, on_gone, &ev), 1);
    cr_expect_str_eq(ev.keys[1], "b");
    cr_expect_eq(ev.admitted[1], 1);
}

/* A decision that comes between the evictor's look at the entry and its freeze. */
static int race_armed;
static uint64_t race_now;

static void evict_race_point(void)
{
    if (race_armed && race_armed--)
        cr_assert_eq(mg_throttle_acquire(table, "k", 1, (mg_quota_t){1, 100}, 1, MG_THROTTLE_NO_CEILING, race_now, NULL), 1);
}

Test(table, an_admission_racing_an_eviction_keeps_the_key)
{
    const mg_quota_t q = {1, 100};
    fill("k", q, 1, 10, 1);
    race_armed = 1;
    race_now = 110;
    cr_expect_eq(mg_throttle_evict(table, 110), 0, "the key was admitted at 110 meanwhile");
    cr_expect_eq(race_armed, 0);
    cr_expect_eq(mg_throttle_count(table), 1);
    fill("k", q, 1, 209, 0);
    fill("k", q, 1, 210, 1);
    listing_t l = {0};
    mg_throttle_foreach(table, 210, collect, &l);
    cr_expect_eq(l.stat[0].admitted, 3);
}

Test(table, an_evicted_key_seen_again_starts_from_what_it_would_have_had)
{
    const mg_quota_t q = {2, 100};
    fill("k", q, 1, 100, 2);
    fill("other", q, 1, 180, 2);
    cr_expect_eq(mg_throttle_evict(table, 200), 1);
    mg_decision_t d;
    /* a caller whose clock reading is older than the eviction's: the ring time is the
     * eviction's, so the old admissions (<= 100) and the new ones never share a window */
    cr_assert_eq(acquire("k", q, 1, 150, &d), 1);
    cr_expect_eq(d.at_us, 200);
    cr_expect_eq(d.remaining, 1);
    cr_expect_eq(d.reset_us, 150, "from the caller's now (150) to 300");
    cr_assert_eq(acquire("k", q, 1, 190, NULL), 1);
    cr_assert_eq(acquire("k", q, 1, 190, &d), 0);
    cr_expect_eq(d.retry_after_us, 110);
    fill("k", q, 1, 299, 0);
    fill("k", q, 1, 300, 2);
    /* the key that was not evicted still has its history */
    fill("other", q, 1, 279, 0);
    fill("other", q, 1, 280, 2);
}

/* The entry of `key` (the table is not changing). */
static entry_t *entry_of(const char *key)
{
    lookup_key_t k = {key, strlen(key)};
    struct cds_lfht_iter iter;
    rcu_read_lock();
    cds_lfht_lookup(table->ht, key_hash(table, k.key, k.len), entry_match, &k, &iter);
    entry_t *e = iter_entry(&iter);
    READ_UNLOCK();
    cr_assert_not_null(e, "%s is not in the table", key);
    return e;
}

Test(table, a_key_whose_limiter_is_frozen_by_a_stalled_thread_goes_on)
{
    fill("k", q3, 1, 1000, 3);
    lookup_key_t k = {"k", 1};
    struct cds_lfht_iter iter;
    rcu_read_lock();
    cds_lfht_lookup(table->ht, key_hash(table, "k", 1), entry_match, &k, &iter);
    entry_t *e = caa_container_of(cds_lfht_iter_get_node(&iter), entry_t, node);
    /* a migrating thread froze it and stopped before replacing it */
    mg__limiter_freeze(e->limiter);
    READ_UNLOCK();
    fill("k", q3, 1, 1099, 0);
    fill("k", q3, 1, 1100, 3);
    cr_expect_neq(entry_of("k"), e, "the entry of the frozen limiter was replaced by a helper");
    listing_t ls = {0};
    mg_throttle_foreach(table, 1100, collect, &ls);
    cr_expect_eq(ls.stat[0].admitted, 6);
    cr_expect_eq(ls.stat[0].rejected, 3);
}

/* The limiter of `key` (the table is not changing). */
static mg_limiter_t *limiter_of(const char *key)
{
    return entry_of(key)->limiter;
}

Test(table, a_key_starts_with_a_small_ring_and_grows_with_its_admissions)
{
    const mg_quota_t q = {8000, UINT64_C(3600) * 1000000};
    cr_assert_eq(acquire("one", q, 1, 1000, NULL), 1);
    cr_expect_eq(limiter_of("one")->cap, INITIAL_CAP);
    cr_expect_eq(mg__limiter_bytes(limiter_of("one")), 64);
    /* 100 admissions in the window: the ring doubled as far as they needed, 128 slots */
    for (int i = 0; i < 100; i++)
        cr_assert_eq(acquire("busy", q, 1, 1000 + (uint64_t)i, NULL), 1);
    cr_expect_eq(limiter_of("busy")->cap, 128);
    /* the grown ring is the entry's, right after its key, its slots from a line's start */
    entry_t *busy = entry_of("busy");
    size_t at = (size_t)((char *)busy->limiter - (char *)busy);
    cr_expect_geq(at, offsetof(entry_t, key) + sizeof("busy"));
    cr_expect_lt(at, offsetof(entry_t, key) + sizeof("busy") + 64);
    cr_expect_eq((uintptr_t)&busy->limiter->slot[0] % 64, 0);
    listing_t l = {0};
    mg_throttle_foreach(table, 2000, collect, &l);
    cr_expect_eq(listed(&l, "busy")->used, 100);
    cr_expect_eq(listed(&l, "busy")->admitted, 100, "growth neither loses nor repeats an admission");
    /* and to N exactly: N admitted in one window, then Retry-After from the oldest */
    const mg_quota_t q5 = {5, 100};
    fill("five", q5, 1, 10, 5);
    cr_expect_eq(limiter_of("five")->cap, 5);
    mg_decision_t d;
    cr_assert_eq(acquire("five", q5, 1, 60, &d), 0);
    cr_expect_eq(d.retry_after_us, 50);
}

Test(table, a_ring_too_large_for_its_entry_gets_pages_of_its_own)
{
    const mg_quota_t q = {20000, UINT64_C(3600) * 1000000};
    for (int i = 0; i < 9000; i++)
        cr_assert_eq(acquire("huge", q, 1, 1000 + (uint64_t)i, NULL), 1);
    entry_t *e = entry_of("huge");
    cr_expect_eq(e->limiter->cap, 16384);
    cr_expect(mg__limiter_mapped(e->limiter->cap));
    uintptr_t at = (uintptr_t)e->limiter, from = (uintptr_t)e;
    cr_expect(at < from || at >= from + 4096, "not in the entry's block");
    listing_t l = {0};
    mg_throttle_foreach(table, 10000, collect, &l);
    cr_expect_eq(listed(&l, "huge")->used, 9000);
    cr_expect_eq(listed(&l, "huge")->admitted, 9000);
}

/* Heap bytes in use (glibc), small chunks and mapped ones. */
static size_t heap_used(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

Test(table, a_key_that_made_one_request_costs_bytes_not_its_quota)
{
    /* the case: invented tenant names under default_quota {8000 per hour}, one request
     * each; on a ring of N slots each would hold 64 KB */
    enum { NKEYS = 4096 };
    const mg_quota_t q = {8000, UINT64_C(3600) * 1000000};
    char key[32];
    cr_assert_eq(acquire("warm", q, 1, 1000, NULL), 1);
    size_t before = heap_used();
    for (int i = 0; i < NKEYS; i++) {
        int len = snprintf(key, sizeof(key), "t%ctenant-%06d", 0, i);
        cr_assert_eq(mg_throttle_acquire(table, key, (size_t)len, q, 1, MG_THROTTLE_NO_CEILING, 1000, NULL), 1);
    }
    size_t after = heap_used(), per_key = after > before ? (after - before) / NKEYS : 0;
    cr_log_info("%zu heap bytes per key (table entry, limiter, buckets)", per_key);
    cr_expect_leq(per_key, 400, "a key that made one request costs %zu bytes", per_key);
    cr_expect_eq(mg_throttle_count(table), NKEYS + 1);
}

/* Keys a decision may insert past the ceiling: none. */
Test(table, a_full_table_refuses_new_keys_and_decides_the_keys_it_has)
{
    const mg_quota_t q = {2, 1000}, q_long = {2, 5000};
    mg_decision_t d;
    cr_assert_eq(mg_throttle_acquire(table, "a", 1, q, 1, 3, 100, NULL), 1);
    cr_assert_eq(mg_throttle_acquire(table, "b", 1, q_long, 1, 3, 200, NULL), 1);
    cr_assert_eq(mg_throttle_acquire(table, "c", 1, q, 1, 3, 300, NULL), 1);
    memset(&d, 0xa5, sizeof(d));
    cr_assert_eq(mg_throttle_acquire(table, "d", 1, q, 1, 3, 300, &d), MG_THROTTLE_FULL);
    cr_expect(d.admitted == 0 && d.limit == 2 && d.remaining == 0 && d.at_us == 0);
    cr_expect_eq(d.retry_after_us, 1, "no eviction pass yet: nothing known, the least wait");
    cr_expect_eq(d.reset_us, d.retry_after_us);
    cr_expect_eq(mg_throttle_count(table), 3, "a refused key takes no place");
    /* the keys in the table are decided as usual, under any ceiling */
    cr_expect_eq(mg_throttle_acquire(table, "a", 1, q, 1, 3, 300, NULL), 1);
    cr_expect_eq(mg_throttle_acquire(table, "a", 1, q, 1, 1, 300, NULL), 0);
    /* a key the caller exempts enters past it */
    cr_expect_eq(mg_throttle_acquire(table, "listed", 6, q, 1, MG_THROTTLE_NO_CEILING, 300, NULL), 1);
    cr_expect_eq(mg_throttle_count(table), 4);
    cr_expect_eq(mg_throttle_acquire(table, "d", 1, q, 1, 4, 300, NULL), MG_THROTTLE_FULL);
    /* an eviction pass that frees nothing learns when the first window ends: "a" at 1300 */
    cr_expect_eq(mg_throttle_evict(table, 400), 0);
    cr_assert_eq(mg_throttle_acquire(table, "d", 1, q, 1, 3, 500, &d), MG_THROTTLE_FULL);
    cr_expect_eq(d.retry_after_us, 800);
    /* a larger ceiling lets it in */
    cr_expect_eq(mg_throttle_acquire(table, "d", 1, q, 1, 5, 500, NULL), 1);
    /* expired keys leave and make room again ("b" and "d" are still in their windows) */
    cr_expect_eq(mg_throttle_evict(table, 1300), 3);
    cr_expect_eq(mg_throttle_count(table), 2);
    cr_expect_eq(mg_throttle_acquire(table, "e", 1, q, 1, 3, 1300, NULL), 1);
    cr_expect_eq(mg_throttle_acquire(table, "f", 1, q, 1, 3, 1300, &d), MG_THROTTLE_FULL);
    cr_expect_eq(d.retry_after_us, 1500 - 1300, "d's window ends at 1500");
    cr_expect_eq(mg_throttle_evict(table, 6000), 3);
    cr_expect_eq(mg_throttle_count(table), 0, "the table shrinks back");
}

/* Threads insert distinct keys against one ceiling: exactly that many get in. */
enum { CEILING = 100, CEILING_THREADS = 4, CEILING_KEYS = 400 };

typedef struct ceiling_worker {
    pthread_t thread;
    pthread_barrier_t *start;
    int id, in, full, errors;
} ceiling_worker_t;

static void *ceiling_run(void *arg)
{
    ceiling_worker_t *w = arg;
    char key[24];
    pthread_barrier_wait(w->start);
    for (int i = 0; i < CEILING_KEYS; i++) {
        /* half the keys are shared with the next thread: inserts race on one key too */
        int len = snprintf(key, sizeof(key), "k%d-%d", i % 2 ? w->id : (w->id + 1) % CEILING_THREADS, i);
        int r = mg_throttle_acquire(table, key, (size_t)len, (mg_quota_t){1000, 1000}, 1, CEILING, 1000, NULL);
        w->in += r == 1;
        w->full += r == MG_THROTTLE_FULL;
        w->errors += r != 1 && r != MG_THROTTLE_FULL;
    }
    return NULL;
}

Test(table, concurrent_inserts_never_pass_the_ceiling, .timeout = 60)
{
    pthread_barrier_t start;
    ceiling_worker_t w[CEILING_THREADS];
    pthread_barrier_init(&start, NULL, CEILING_THREADS);
    for (int i = 0; i < CEILING_THREADS; i++) {
        w[i] = (ceiling_worker_t){.start = &start, .id = i};
        pthread_create(&w[i].thread, NULL, ceiling_run, &w[i]);
    }
    int in = 0;
    for (int i = 0; i < CEILING_THREADS; i++) {
        pthread_join(w[i].thread, NULL);
        cr_assert_eq(w[i].errors, 0);
        cr_assert_eq(w[i].in + w[i].full, CEILING_KEYS);
        in += w[i].in;
    }
    pthread_barrier_destroy(&start);
    cr_expect_eq(mg_throttle_count(table), CEILING);
    size_t keys = 0;
    struct cds_lfht_iter iter;
    entry_t *e;
    rcu_read_lock();
    FOR_EACH_ENTRY(table, &iter, e)
    {
        keys++;
    }
    READ_UNLOCK();
    cr_expect_eq(keys, CEILING, "%zu keys in the table", keys);
    cr_expect_geq(in, CEILING, "every key that got in was admitted (twice when shared): %d", in);
}

/* Several threads decide on shared keys while another evicts, all at instants the test
 * sets, then every key must have been admitted exactly N times per instant. */
enum { KEYS = 48, THREADS = 4, ROUNDS = 3 };
static const mg_quota_t qc = {4, 1000};

typedef struct worker {
    pthread_t thread;
    pthread_barrier_t *start;
    uint64_t now;
    int seed;
    int admitted[KEYS];
    int errors;
} worker_t;

static void *worker_run(void *arg)
{
    worker_t *w = arg;
    char key[16];
    pthread_barrier_wait(w->start);
    for (int round = 0; round < ROUNDS * (int)qc.requests; round++) {
        for (int i = 0; i < KEYS; i++) {
            int k = (i * 7 + w->seed * 13 + round) % KEYS;
            int len = snprintf(key, sizeof(key), "tenant-%d", k);
            int r = mg_throttle_acquire(table, key, (size_t)len, qc, 1, MG_THROTTLE_NO_CEILING, w->now, NULL);
            if (r < 0)
                w->errors++;
            else
                w->admitted[k] += r;
        }
    }
    return NULL;
}

typedef struct evictor {
    pthread_t thread;
    pthread_barrier_t *start;
    uint64_t now;
    _Atomic int stop;
    size_t evicted;
} evictor_t;

static void *evictor_run(void *arg)
{
    evictor_t *ev = arg;
    pthread_barrier_wait(ev->start);
    while (!atomic_load(&ev->stop))
        ev->evicted += mg_throttle_evict(table, ev->now);
    return NULL;
}

/* Runs THREADS workers at `now` against an evictor at `evict_now`; returns the evictions. */
static size_t race(uint64_t now, uint64_t evict_now, worker_t *w)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS + 1);
    evictor_t ev = {.start = &start, .now = evict_now};
    pthread_create(&ev.thread, NULL, evictor_run, &ev);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_t){.start = &start, .now = now, .seed = i};
        pthread_create(&w[i].thread, NULL, worker_run, &w[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(w[i].thread, NULL);
    atomic_store(&ev.stop, 1);
    pthread_join(ev.thread, NULL);
    pthread_barrier_destroy(&start);
    return ev.evicted;
}

static void expect_admitted_per_key(worker_t *w, int n)
{
    for (int k = 0; k < KEYS; k++) {
        int sum = 0;
        for (int i = 0; i < THREADS; i++) {
            sum += w[i].admitted[k];
            cr_assert_eq(w[i].errors, 0);
        }
        cr_assert_eq(sum, n, "tenant-%d admitted %d times, quota %d", k, sum, n);
    }
}

Test(table, concurrent_inserts_and_evictions_lose_nothing, .timeout = 60)
{
    worker_t w[THREADS];
    /* an evictor one microsecond early finds nothing to evict while keys appear */
    cr_expect_eq(race(1000, 1000 + qc.per_us - 1, w), 0);
    expect_admitted_per_key(w, (int)qc.requests);
    cr_expect_eq(mg_throttle_count(table), KEYS);
    /* every window has expired: keys are evicted and come back while others decide; an
     * admission made meanwhile keeps its key (or its copy) alive, so still exactly N */
    race(1000 + qc.per_us, 1000 + qc.per_us, w);
    expect_admitted_per_key(w, (int)qc.requests);
    cr_expect_eq(mg_throttle_evict(table, 1000 + 2 * qc.per_us), KEYS);
    cr_expect_eq(mg_throttle_count(table), 0);
    /* and once more from an empty table */
    race(1000 + 2 * qc.per_us, 1000 + 2 * qc.per_us, w);
    expect_admitted_per_key(w, (int)qc.requests);
}

/* Threads rejected on one key at once: every rejection is counted, striped or not. */
static void *reject_run(void *arg)
{
    for (int i = 0; i < 20000; i++)
        if (mg_throttle_acquire(table, "flood", 5, (mg_quota_t){1, 1000}, 1, MG_THROTTLE_NO_CEILING, 1000, NULL) != 0)
            (*(int *)arg)++;
    return NULL;
}

Test(table, concurrent_rejections_are_all_counted, .timeout = 60)
{
    fill("flood", (mg_quota_t){1, 1000}, 1, 1000, 1);
    pthread_t th[THREADS];
    int admitted[THREADS] = {0};
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, reject_run, &admitted[i]);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(admitted[i], 0);
    }
    listing_t l = {0};
    mg_throttle_foreach(table, 1000, collect, &l);
    cr_assert_eq(l.n, 1);
    cr_expect_eq(l.stat[0].rejected, 1 + THREADS * 20000);
    cr_expect_eq(l.stat[0].admitted, 1);
}

/* Random traces over a few keys with quota changes and evictions, against per-key models
 * that follow the table's rules (generations, eviction after the whole window). The clock
 * only moves forward here, so the eviction horizon never applies. */
typedef struct key_model {
    model_t m;
    uint64_t gen;
    int present;
} key_model_t;

static void key_model_decide(key_model_t *km, mg_quota_t quota, uint64_t gen, uint64_t now, mg_decision_t *d, int *r)
{
    if (!km->present) {
        model_init(&km->m, quota);
        km->gen = gen;
        km->present = 1;
    } else if (km->gen < gen) {
        if (quota.requests != km->m.quota.requests || quota.per_us != km->m.quota.per_us)
            model_requota(&km->m, quota);
        km->gen = gen;
    }
    *r = model_acquire(&km->m, now, d);
}

static size_t models_evict(key_model_t *km, size_t n, uint64_t now)
{
    size_t evicted = 0;
    for (size_t i = 0; i < n; i++) {
        if (!km[i].present || (km[i].m.len > 0 && km[i].m.at[km[i].m.len - 1] + km[i].m.quota.per_us > now))
            continue;
        model_free(&km[i].m);
        km[i].present = 0;
        evicted++;
    }
    return evicted;
}

Test(table, agrees_with_per_key_models_on_random_traces, .timeout = 60)
{
    enum { NKEYS = 5 };
    for (unsigned seed = 1; seed <= 12; seed++) {
        uint64_t rng = seed * 0x9e3779b97f4a7c15u, now = 1000, gen = 1;
        key_model_t km[NKEYS] = {0};
        mg_quota_t quota[NKEYS];
        for (int k = 0; k < NKEYS; k++)
            quota[k] = (mg_quota_t){1 + (uint32_t)(model_rand(&rng) % 6), 1 + model_rand(&rng) % 300};
        for (int step = 0; step < 4000; step++) {
            uint64_t r = model_rand(&rng) % 100;
            now += r < 60 ? model_rand(&rng) % 20 : r < 63 ? 300 + model_rand(&rng) % 300 : 0;
            if (r == 98) {
                gen++;
                int k = (int)(model_rand(&rng) % NKEYS);
                quota[k] = (mg_quota_t){1 + (uint32_t)(model_rand(&rng) % 6), 1 + model_rand(&rng) % 300};
            }
            if (r == 99) {
                size_t want = models_evict(km, NKEYS, now);
                cr_assert_eq(mg_throttle_evict(table, now), want, "seed %u step %d: evictions", seed, step);
                size_t present = 0;
                for (int i = 0; i < NKEYS; i++)
                    present += (size_t)km[i].present;
                cr_assert_eq(mg_throttle_count(table), present);
                continue;
            }
            int k = (int)(model_rand(&rng) % NKEYS), want_r;
            /* now and then a request still running on the previous generation */
            uint64_t g = gen > 1 && model_rand(&rng) % 8 == 0 ? gen - 1 : gen;
            mg_quota_t q = g == gen ? quota[k] : (mg_quota_t){1 + (uint32_t)(model_rand(&rng) % 6), 50};
            char key[8];
            snprintf(key, sizeof(key), "k%d", k);
            mg_decision_t got, want;
            key_model_decide(&km[k], q, g, now, &want, &want_r);
            int got_r = mg_throttle_acquire(table, key, 2, q, g, MG_THROTTLE_NO_CEILING, now, &got);
            cr_assert_eq(got_r, want_r, "seed %u step %d key %d now %llu", seed, step, k, (unsigned long long)now);
            cr_assert_eq(got.limit, want.limit, "seed %u step %d: limit", seed, step);
            cr_assert_eq(got.remaining, want.remaining, "seed %u step %d: remaining", seed, step);
            if (got_r)
                cr_assert_eq(got.at_us, want.at_us, "seed %u step %d: at", seed, step);
            else
                cr_assert_eq(got.retry_after_us, want.retry_after_us, "seed %u step %d: retry", seed, step);
            cr_assert_eq(got.reset_us, want.reset_us, "seed %u step %d: reset", seed, step);
        }
        for (int k = 0; k < NKEYS; k++)
            if (km[k].present)
                model_free(&km[k].m);
        mg_throttle_free(table);
        table = mg_throttle_new();
    }
}
