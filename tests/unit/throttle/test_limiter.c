/* The limiter alone, on a clock the test drives: window edges, Retry-After, idle periods,
 * extreme quotas, clock steps, freezing and copying (the table's reload support), and a
 * comparison with a plain model on seeded random traces. Includes limiter.c to reach its
 * cursor and slot helpers. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <unistd.h>
#include "throttle/limiter.c"
#include "model.h"

static mg_limiter_t *limiter(uint32_t n, uint64_t per)
{
    mg_limiter_t *l = mg_limiter_new((mg_quota_t){n, per});
    cr_assert_not_null(l);
    return l;
}

/* One decision that must go the way `admitted` says. */
static mg_decision_t decide(mg_limiter_t *l, uint64_t now, int admitted)
{
    mg_decision_t d;
    memset(&d, 0xa5, sizeof(d));
    int r = mg_limiter_acquire(l, now, &d);
    cr_assert_eq(r, admitted, "at %llu: %s, expected %s", (unsigned long long)now, r ? "admitted" : "rejected",
                 admitted ? "admitted" : "rejected");
    cr_assert_eq(d.admitted, admitted);
    cr_assert_eq(d.limit, l->n);
    return d;
}

Test(limiter, window_edges_and_decision_fields)
{
    mg_limiter_t *l = limiter(3, 100);
    mg_decision_t d = decide(l, 1000, 1);
    cr_expect_eq(d.at_us, 1000);
    cr_expect_eq(d.remaining, 2);
    cr_expect_eq(d.reset_us, 100);
    d = decide(l, 1010, 1);
    cr_expect_eq(d.remaining, 1);
    cr_expect_eq(d.reset_us, 90, "the oldest (1000) leaves at 1100: %llu", (unsigned long long)d.reset_us);
    d = decide(l, 1020, 1);
    cr_expect_eq(d.remaining, 0);
    cr_expect_eq(d.reset_us, 80);
    d = decide(l, 1020, 0);
    cr_expect_eq(d.retry_after_us, 80);
    cr_expect_eq(d.reset_us, 80);
    cr_expect_eq(d.remaining, 0);
    d = decide(l, 1099, 0); /* P - 1 after the oldest: still in */
    cr_expect_eq(d.retry_after_us, 1);
    d = decide(l, 1100, 1); /* exactly P after: out */
    cr_expect_eq(d.at_us, 1100);
    cr_expect_eq(d.remaining, 0, "1010, 1020, 1100 are in the window");
    cr_expect_eq(d.reset_us, 10);
    d = decide(l, 1109, 0);
    cr_expect_eq(d.retry_after_us, 1);
    decide(l, 1110, 1);
    cr_expect_eq(mg_limiter_used(l, 1110), 3);
    cr_expect_eq(mg_limiter_used(l, 1119), 3);
    cr_expect_eq(mg_limiter_used(l, 1120), 2);
    cr_expect_eq(mg_limiter_used(l, 1209), 1);
    cr_expect_eq(mg_limiter_used(l, 1210), 0);
    cr_expect_eq(mg_limiter_acquire(l, 1210, NULL), 1, "a decision without a decision record");
    mg_limiter_free(l);
}

Test(limiter, retry_after_is_exact_at_every_moment_of_a_full_window)
{
    mg_limiter_t *l = limiter(4, 1000);
    static const uint64_t at[] = {5000, 5100, 5700, 5900};
    for (size_t i = 0; i < 4; i++)
        decide(l, at[i], 1);
    /* until 6000 the oldest (5000) holds the window full; waiting exactly Retry-After works */
    for (uint64_t now = 5900; now < 6000; now += 7) {
        mg_decision_t d = decide(l, now, 0);
        cr_assert_eq(d.retry_after_us, 6000 - now);
    }
    decide(l, 6000, 1);
    /* now 5100 is the oldest: full again until 6100 */
    mg_decision_t d = decide(l, 6000, 0);
    cr_expect_eq(d.retry_after_us, 100);
    decide(l, 6000 + d.retry_after_us, 1);
    d = decide(l, 6100, 0);
    cr_expect_eq(d.retry_after_us, 600, "5700 is the oldest now");
    mg_limiter_free(l);
}

Test(limiter, idle_then_burst_gets_the_full_quota)
{
    mg_limiter_t *l = limiter(5, 1000);
    for (uint64_t t = 100; t < 105; t++)
        decide(l, t, 1);
    decide(l, 105, 0);
    /* long idle: the whole ring has expired, a burst gets all N at one instant */
    for (int i = 0; i < 5; i++) {
        mg_decision_t d = decide(l, 50000, 1);
        cr_expect_eq(d.remaining, (uint32_t)(4 - i));
    }
    mg_decision_t d = decide(l, 50000, 0);
    cr_expect_eq(d.retry_after_us, 1000);
    /* a partial idle: 2 admissions leave, 2 come back, not more */
    decide(l, 50900, 0);
    mg_limiter_t *m = limiter(5, 1000);
    decide(m, 1, 1);
    decide(m, 1, 1);
    decide(m, 500, 1);
    decide(m, 500, 1);
    decide(m, 500, 1);
    decide(m, 1001, 1);
    decide(m, 1001, 1);
    decide(m, 1001, 0);
    d = decide(m, 1001, 0);
    cr_expect_eq(d.retry_after_us, 499);
    /* idle exactly P after the last admission: everything is available again */
    for (int i = 0; i < 5; i++)
        decide(m, 2001, 1);
    decide(m, 2001, 0);
    mg_limiter_free(m);
    mg_limiter_free(l);
}

Test(limiter, one_request_per_window)
{
    mg_limiter_t *l = limiter(1, 250);
    mg_decision_t d = decide(l, 10, 1);
    cr_expect_eq(d.remaining, 0);
    cr_expect_eq(d.reset_us, 250);
    for (uint64_t t = 10; t < 260; t += 13) {
        d = decide(l, t, 0);
        cr_assert_eq(d.retry_after_us, 260 - t);
    }
    decide(l, 259, 0);
    decide(l, 260, 1);
    decide(l, 260, 0);
    decide(l, 100000, 1);
    cr_expect_eq(mg_limiter_used(l, 100000), 1);
    cr_expect_eq(mg_limiter_used(l, 100250), 0);
    mg_limiter_free(l);
}

Test(limiter, a_million_requests_per_window, .timeout = 60)
{
    const uint32_t n = MG_QUOTA_MAX_REQUESTS;
    cr_expect_eq(mg_limiter_size((mg_quota_t){n, 1}), 64 + (size_t)n * 8);
    mg_limiter_t *l = limiter(n, MG_QUOTA_MAX_PER_US);
    const uint64_t t0 = 1000;
    for (uint32_t i = 0; i < n; i++)
        cr_assert_eq(mg_limiter_acquire(l, t0 + i / 1000, NULL), 1, "admission %u rejected", i);
    mg_decision_t d = decide(l, t0 + 1000, 0);
    cr_expect_eq(d.retry_after_us, MG_QUOTA_MAX_PER_US - 1000);
    cr_expect_eq(mg_limiter_used(l, t0 + 1000), n);
    /* the first thousand (all at t0) leave together */
    for (int i = 0; i < 1000; i++)
        decide(l, t0 + MG_QUOTA_MAX_PER_US, 1);
    d = decide(l, t0 + MG_QUOTA_MAX_PER_US, 0);
    cr_expect_eq(d.retry_after_us, 1);
    cr_expect_eq(mg__limiter_admitted(l), (uint64_t)n + 1000);
    mg_limiter_free(l);
}

/* Pages of `l`'s ring the process has in memory (mincore). */
static size_t resident_pages(const mg_limiter_t *l)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), size = mg_limiter_size(mg_limiter_quota(l));
    uintptr_t base = (uintptr_t)l & ~(uintptr_t)(page - 1); /* the header sits 8 bytes in */
    size_t pages = ((uintptr_t)l + size - base + page - 1) / page, resident = 0;
    unsigned char *vec = malloc(pages);
    cr_assert_eq(mincore((void *)base, pages * page, vec), 0, "the ring is not a mapping of its own");
    for (size_t i = 0; i < pages; i++)
        resident += vec[i] & 1;
    free(vec);
    return resident;
}

Test(limiter, a_large_quota_costs_the_memory_its_admissions_use)
{
    /* 8 MB of slots: a new key must not pay for (or zero) all of them up front */
    mg_limiter_t *l = limiter(MG_QUOTA_MAX_REQUESTS, 1000000);
    cr_assert(mg__limiter_mapped(l->cap));
    for (uint64_t t = 1; t <= 10; t++)
        decide(l, t, 1);
    cr_expect_leq(resident_pages(l), 4);
    cr_expect_eq(mg_limiter_used(l, 10), 10);
    mg_limiter_free(l);
    /* small rings come from malloc */
    l = limiter(100, 1000000);
    cr_expect_not(mg__limiter_mapped(l->cap));
    mg_limiter_free(l);
}

Test(limiter, clock_stepping_back_counts_as_the_newest_admission)
{
    mg_limiter_t *l = limiter(2, 100);
    decide(l, 1000, 1);
    mg_decision_t d = decide(l, 500, 1);
    cr_expect_eq(d.at_us, 1000, "the ring's time never goes backwards");
    cr_expect_eq(d.remaining, 0);
    d = decide(l, 600, 0);
    cr_expect_eq(d.retry_after_us, 500, "Retry-After counts from the caller's now");
    d = decide(l, 1099, 0);
    cr_expect_eq(d.retry_after_us, 1);
    d = decide(l, 1100, 1);
    cr_expect_eq(d.at_us, 1100);
    /* a step back after that window: still no more than N in any window of ring time */
    d = decide(l, 1150, 1);
    d = decide(l, 20, 0);
    cr_expect_eq(d.retry_after_us, 1100 + 100 - 20);
    mg_limiter_free(l);
}

Test(limiter, quota_out_of_range_is_refused)
{
    static const mg_quota_t bad[] = {
        {0, 1000}, {MG_QUOTA_MAX_REQUESTS + 1, 1000}, {10, 0}, {10, MG_QUOTA_MAX_PER_US + 1}, {0, 0},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_null(mg_limiter_new(bad[i]), "quota %zu accepted", i);
    mg_limiter_t *l = mg_limiter_new((mg_quota_t){1, MG_QUOTA_MAX_PER_US});
    cr_expect_not_null(l);
    mg_quota_t q = mg_limiter_quota(l);
    cr_expect(q.requests == 1 && q.per_us == MG_QUOTA_MAX_PER_US);
    mg_limiter_free(l);
    l = mg_limiter_new((mg_quota_t){1, 1});
    cr_expect_not_null(l);
    mg_limiter_free(l);
}

Test(limiter, header_is_48_bytes_and_large_rings_start_on_a_cache_line)
{
    cr_expect_eq(offsetof(mg_limiter_t, slot), 48);
    cr_expect_eq(sizeof(((mg_limiter_t *)NULL)->slot[0]), 8);
    /* from MG__ALIGNED_CAP slots (and for mappings): the header is one line, the slots start
     * on the next */
    static const uint32_t caps[] = {MG__ALIGNED_CAP, 100, 9000, MG_QUOTA_MAX_REQUESTS};
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        mg_limiter_t *l = limiter(caps[i], 10);
        cr_expect_eq((uintptr_t)l % 64, 16, "%u slots: the header ends at a line", caps[i]);
        cr_expect_eq((uintptr_t)&l->slot[0] % 64, 0);
        cr_expect_eq(mg__limiter_bytes(l), 64 + 8 * (size_t)caps[i]);
        mg_limiter_free(l);
    }
    /* below: header and slots together, no padding */
    mg_limiter_t *l = mg__limiter_new((mg_quota_t){1000, 10}, MG__ALIGNED_CAP - 1);
    cr_assert_not_null(l);
    cr_expect_eq(l->cap, MG__ALIGNED_CAP - 1);
    cr_expect_eq(mg__limiter_bytes(l), 48 + 8 * (MG__ALIGNED_CAP - 1));
    mg_limiter_free(l);
}

Test(limiter, a_ring_laid_out_in_a_block_starts_after_its_place_and_keeps_the_line_rule)
{
    static const uint32_t caps[] = {1, 2, MG__ALIGNED_CAP - 1, MG__ALIGNED_CAP, 100, 4000};
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        for (size_t at = 0; at < 200; at++) {
            size_t offset, end = mg__limiter_layout(caps[i], at, &offset);
            cr_assert_geq(offset, at, "%u slots at %zu", caps[i], at);
            cr_assert_eq(offset % 8, 0);
            cr_assert_eq(end, offset + 48 + 8 * (size_t)caps[i]);
            if (caps[i] >= MG__ALIGNED_CAP) {
                cr_assert_eq((offset + 48) % 64, 0, "%u slots at %zu: the slots start a line", caps[i], at);
                cr_assert_lt(offset, at + 64, "no more than a line of padding");
            } else {
                cr_assert_lt(offset, at + 8, "packed");
            }
        }
    }
    /* a limiter made there works as one of its own */
    _Alignas(64) unsigned char block[64 * 4];
    size_t offset;
    mg__limiter_layout(MG__ALIGNED_CAP, 10, &offset);
    memset(block, 0xa5, sizeof(block));
    mg_limiter_t *l = mg__limiter_init(block + offset, (mg_quota_t){MG__ALIGNED_CAP, 100}, MG__ALIGNED_CAP);
    for (uint32_t i = 0; i < MG__ALIGNED_CAP; i++)
        decide(l, 1000, 1);
    cr_expect_eq(decide(l, 1050, 0).retry_after_us, 50);
    cr_expect_eq(mg_limiter_used(l, 1050), MG__ALIGNED_CAP);
}

Test(limiter, helps_a_stamped_admission_and_laps_wrap_their_tags)
{
    mg_limiter_t *l = limiter(3, 10);
    decide(l, 1, 1);
    /* a thread stamped admission 1 and stopped before advancing the cursor */
    atomic_store(&l->slot[1], slot_make(lap_tag(0), 2));
    mg_decision_t d = decide(l, 3, 1);
    cr_expect_eq(d.at_us, 3);
    cr_expect_eq(cursor_slot(atomic_load(&l->cursor)), 0, "both admissions counted");
    cr_expect_eq(mg__limiter_admitted(l), 3);
    decide(l, 3, 0);
    /* the cursor goes on past 2^16 laps, the tags wrap and the limit still holds */
    mg_limiter_t *m = limiter(1, 1);
    for (uint64_t t = 1; t < 70000 * 2; t += 2) {
        cr_assert_eq(mg_limiter_acquire(m, t, NULL), 1);
        cr_assert_eq(mg_limiter_acquire(m, t, NULL), 0);
    }
    cr_expect_eq(cursor_lap(atomic_load(&m->cursor)), 70000);
    uint64_t wrap = (((UINT64_C(1) << CURSOR_LAP_BITS) - 1) << CURSOR_SLOT_BITS);
    cr_expect_eq(cursor_next(m, wrap), UINT64_C(1) << 16 << CURSOR_SLOT_BITS, "the lap wraps to lap 2^16");
    mg_limiter_free(m);
    mg_limiter_free(l);
}

Test(limiter, frozen_history_is_final_and_copies_keep_the_newest)
{
    mg_limiter_t *l = limiter(4, 100);
    for (uint64_t t = 10; t < 16; t++)
        decide(l, t * 10, t < 14 ? 1 : 0);
    decide(l, 200, 1); /* admissions 100, 110, 120, 130, 200 */
    /* a thread read the cursor before the freeze, and tries to stamp after it */
    uint64_t c = atomic_load(&l->cursor), v = atomic_load(&l->slot[cursor_slot(c)]);
    mg__limiter_freeze(l);
    mg__limiter_freeze(l);
    cr_expect_not(atomic_compare_exchange_strong(&l->slot[cursor_slot(c)], &v, slot_make(lap_tag(cursor_lap(c)), 201)),
                  "the slot after a freeze is sealed");
    cr_expect_eq(mg__limiter_decide(l, 500, NULL), MG__FROZEN);
    cr_expect_eq(mg__limiter_last(l), 200);
    cr_expect_eq(mg__limiter_admitted(l), 5);
    cr_expect_eq(mg_limiter_used(l, 200), 4, "the sealed slot still counts");

    mg_limiter_t *grow = mg__limiter_copy(l, (mg_quota_t){6, 100}, 7);
    cr_assert_not_null(grow);
    cr_expect_eq(atomic_load(&grow->gen), 7);
    cr_expect_eq(mg_limiter_used(grow, 200), 4, "all history the ring had is kept");
    cr_expect_eq(mg__limiter_admitted(grow), 5);
    decide(grow, 200, 1);
    decide(grow, 200, 1);
    mg_decision_t d = decide(grow, 200, 0);
    cr_expect_eq(d.retry_after_us, 10, "110 is the oldest of 6: %llu", (unsigned long long)d.retry_after_us);

    mg_limiter_t *shrink = mg__limiter_copy(l, (mg_quota_t){2, 100}, 8);
    cr_assert_not_null(shrink);
    cr_expect_eq(mg_limiter_used(shrink, 200), 2);
    d = decide(shrink, 200, 0);
    cr_expect_eq(d.retry_after_us, 30, "the newest two (130, 200) are kept");
    decide(shrink, 230, 1);
    cr_expect_eq(mg__limiter_last(shrink), 230);

    mg_limiter_t *p = mg__limiter_copy(l, (mg_quota_t){4, 1000}, 9);
    d = decide(p, 500, 0);
    cr_expect_eq(d.retry_after_us, 610 - 0, "a longer window counts the copied history: %llu",
                 (unsigned long long)d.retry_after_us);
    mg_limiter_free(p);
    mg_limiter_free(shrink);
    mg_limiter_free(grow);
    mg_limiter_free(l);
}

Test(limiter, a_stamped_admission_before_the_freeze_is_kept)
{
    mg_limiter_t *l = limiter(3, 100);
    decide(l, 10, 1);
    decide(l, 20, 1);
    decide(l, 30, 1);
    /* admission 3 at lap 1, slot 0: stamped, cursor not advanced, then frozen */
    atomic_store(&l->slot[0], slot_make(lap_tag(1), 200));
    mg__limiter_freeze(l);
    cr_expect_eq(mg__limiter_admitted(l), 4);
    cr_expect_eq(mg__limiter_last(l), 200);
    mg_limiter_t *c = mg__limiter_copy(l, (mg_quota_t){3, 100}, 1);
    cr_expect_eq(mg_limiter_used(c, 200), 1, "20 and 30 left the window at 200, 200 is in it");
    mg_decision_t d = decide(c, 200, 1);
    cr_expect_eq(d.remaining, 1);
    decide(c, 200, 1);
    decide(c, 200, 0);
    mg_limiter_free(c);
    c = mg__limiter_copy(l, (mg_quota_t){1, 100}, 1);
    d = decide(c, 250, 0);
    cr_expect_eq(d.retry_after_us, 50);
    mg_limiter_free(c);
    mg_limiter_free(l);
}

Test(limiter, a_small_ring_grows_only_when_its_window_needs_it)
{
    const mg_quota_t q = {10, 100};
    mg_limiter_t *l = mg__limiter_new(q, 2);
    cr_assert_not_null(l);
    cr_expect_eq(l->cap, 2);
    cr_expect_eq(mg__limiter_bytes(l), 48 + 2 * 8, "a new key's ring: tens of bytes, not 8 N");
    /* one request per window, for fifty windows: two slots are always enough */
    for (uint64_t t = 1000; t < 6000; t += 100)
        decide(l, t, 1);
    decide(l, 6000, 1);
    decide(l, 6050, 1); /* 5900 has left the window: its slot takes 6050 */
    cr_expect_eq(l->cap, 2);
    /* a third admission within one window: the ring cannot tell N = 10 from 2, and says so
     * without deciding anything */
    mg_decision_t d;
    memset(&d, 0xa5, sizeof(d));
    cr_assert_eq(mg__limiter_decide(l, 6060, &d), MG__GROW);
    cr_expect_eq(d.admitted, (int)0xa5a5a5a5, "nothing decided");
    cr_expect_eq(mg__limiter_admitted(l), 52);
    /* the table's answer: freeze, copy into twice the slots, decide there */
    mg__limiter_freeze(l);
    mg_limiter_t *c = mg__limiter_copy(l, q, 3);
    mg_limiter_free(l);
    cr_assert_not_null(c);
    cr_expect_eq(c->cap, 4);
    cr_expect_eq(mg_limiter_used(c, 6060), 2, "6000 and 6050 are kept");
    cr_expect_eq(mg__limiter_admitted(c), 52);
    d = decide(c, 6060, 1);
    cr_expect_eq(d.remaining, 7);
    decide(c, 6060, 1);
    cr_assert_eq(mg__limiter_decide(c, 6060, &d), MG__GROW);
    /* 8, then 10 (N), never more */
    for (int i = 0; i < 2; i++) {
        mg__limiter_freeze(c);
        l = mg__limiter_copy(c, q, 3);
        mg_limiter_free(c);
        c = l;
        while (mg__limiter_decide(c, 6060, &d) == 1)
            ;
    }
    cr_expect_eq(c->cap, 10);
    cr_expect_eq(mg_limiter_used(c, 6060), 10);
    d = decide(c, 6060, 0);
    cr_expect_eq(d.retry_after_us, 40, "exact: the oldest of the window (6000) leaves at 6100");
    cr_expect_eq(mg__limiter_bytes(c), 64 + 10 * 8);
    mg_limiter_free(c);
}

Test(limiter, a_copy_keeps_the_last_window_only)
{
    mg_limiter_t *l = limiter(3, 100);
    decide(l, 100, 1);
    decide(l, 150, 1);
    decide(l, 300, 1);
    mg__limiter_freeze(l);
    /* P grows to 1000: 100 and 150 had left the window of their quota; they are not
     * counted again */
    mg_limiter_t *c = mg__limiter_copy(l, (mg_quota_t){3, 1000}, 2);
    cr_expect_eq(mg_limiter_used(c, 300), 1);
    cr_expect_eq(mg__limiter_admitted(c), 3);
    decide(c, 300, 1);
    decide(c, 300, 1);
    mg_decision_t d = decide(c, 300, 0);
    cr_expect_eq(d.retry_after_us, 1000);
    cr_expect_eq(c->cap, 3, "the ring had room: no growth");
    mg_limiter_free(c);
    mg_limiter_free(l);
}

/* mg_limiter_acquire as the table decides: a ring too small for the decision (MG__GROW) is
 * frozen and replaced by its copy, which must have more slots. */
static int acquire_growing(mg_limiter_t **lp, uint64_t now, mg_decision_t *d, int *growths)
{
    int r;
    while ((r = mg__limiter_decide(*lp, now, d)) == MG__GROW) {
        mg_limiter_t *old = *lp;
        mg__limiter_freeze(old);
        *lp = mg__limiter_copy(old, mg_limiter_quota(old), atomic_load(&old->gen));
        cr_assert_not_null(*lp);
        cr_assert_eq((*lp)->cap, old->cap * 2 < old->n ? old->cap * 2 : old->n, "a ring grows to twice its size, at most N");
        cr_assert_eq(mg__limiter_admitted(*lp), mg__limiter_admitted(old));
        mg_limiter_free(old);
        ++*growths;
    }
    return r;
}

/* Random traces against the model: times mostly advance, sometimes jump (idle) or step
 * back; now and then the limiter is frozen and copied to another quota. Most traces start
 * from a ring of 1 to 3 slots that grows as the table grows it; a ring never has more than
 * twice the slots of the busiest window it held (or its first size). */
Test(limiter, agrees_with_a_model_on_random_traces)
{
    int growths = 0;
    for (unsigned seed = 1; seed <= 60; seed++) {
        uint64_t rng = seed * 0x9e3779b97f4a7c15u;
        mg_quota_t q = {1 + (uint32_t)(model_rand(&rng) % (seed % 2 ? 12 : 40)), 1 + model_rand(&rng) % 400};
        uint32_t first = seed % 4 == 0 ? q.requests : 1 + (uint32_t)(model_rand(&rng) % 3), peak = 0;
        mg_limiter_t *l = mg__limiter_new(q, first);
        cr_assert_not_null(l);
        model_t m;
        model_init(&m, q);
        uint64_t now = 1 + model_rand(&rng) % 1000;
        for (int step = 0; step < 3000; step++) {
            uint64_t r = model_rand(&rng) % 100;
            if (r < 70)
                now += model_rand(&rng) % (q.per_us / 8 + 2);
            else if (r < 75)
                now += q.per_us + model_rand(&rng) % (2 * q.per_us);
            else if (r < 80)
                now -= now > 50 ? model_rand(&rng) % 50 : 0;
            if (r == 99) {
                mg_quota_t nq = {1 + (uint32_t)(model_rand(&rng) % 12), 1 + model_rand(&rng) % 400};
                mg__limiter_freeze(l);
                mg_limiter_t *c = mg__limiter_copy(l, nq, 0);
                mg_limiter_free(l);
                l = c;
                model_requota(&m, nq);
                first = first < nq.requests ? first : nq.requests;
            }
            mg_decision_t got, want;
            int r1 = acquire_growing(&l, now, &got, &growths), r2 = model_acquire(&m, now, &want);
            cr_assert_eq(r1, r2, "seed %u step %d now %llu", seed, step, (unsigned long long)now);
            cr_assert_eq(got.remaining, want.remaining, "seed %u step %d: remaining", seed, step);
            cr_assert_eq(got.reset_us, want.reset_us, "seed %u step %d: reset", seed, step);
            if (r1) {
                cr_assert_eq(got.at_us, want.at_us, "seed %u step %d: at", seed, step);
                peak = m.quota.requests - want.remaining > peak ? m.quota.requests - want.remaining : peak;
            } else {
                cr_assert_eq(got.retry_after_us, want.retry_after_us, "seed %u step %d: retry", seed, step);
            }
            cr_assert_leq(l->cap, m.quota.requests);
            cr_assert_leq(l->cap, first > 2 * peak ? first : 2 * peak, "seed %u step %d: %u slots, busiest window %u", seed, step,
                          l->cap, peak);
            uint64_t later = now + model_rand(&rng) % (2 * m.quota.per_us);
            cr_assert_eq(mg_limiter_used(l, later), model_used(&m, later), "seed %u step %d: used", seed, step);
        }
        cr_expect_eq(mg__limiter_admitted(l), m.admitted);
        model_free(&m);
        mg_limiter_free(l);
    }
    cr_expect_gt(growths, 100, "the traces grew rings (%d times)", growths);
}

/* The window count against a count of every slot, from every start its hint may give: the first
 * admission in the window, one on either side, the ends, and values far outside the ring (a
 * stale hint, one from before a copy or a lap counter's wrap). Rings on their first lap and
 * later ones, windows partly expired. */
static uint32_t brute_used(const mg_limiter_t *l, uint64_t now, uint64_t *oldest)
{
    uint64_t c = LOAD(&l->cursor);
    uint32_t count = cursor_lap(c) > 0 ? l->cap : cursor_slot(c), used = 0;
    *oldest = 0;
    for (uint32_t s = 0; s < count; s++) {
        uint64_t ts = slot_ts(LOAD(&l->slot[s]));
        if (ts + l->per_us > now) {
            used++;
            if (*oldest == 0 || ts < *oldest)
                *oldest = ts;
        }
    }
    return used;
}

Test(limiter, a_window_count_is_exact_from_any_hint)
{
    static const uint32_t admitted[] = {1, 5, 99, 100, 101, 250, 777};
    for (size_t a = 0; a < sizeof(admitted) / sizeof(admitted[0]); a++) {
        mg_limiter_t *l = limiter(100, 1000);
        /* one admission every 10 us (and every 11 after the first lap): a 1000 us window holds
         * up to 100, and a ring past its first lap holds admissions of several windows' age */
        uint64_t t = 1000;
        for (uint32_t i = 0; i < admitted[a]; i++, t += i < 100 ? 10 : 11)
            if (mg_limiter_acquire(l, t, &(mg_decision_t){0}) != 1)
                t += 1000; /* full: the next one after the window moved on */
        uint64_t c = LOAD(&l->cursor);
        uint32_t k = (uint32_t)(cursor_lap(c) * l->cap) + cursor_slot(c);
        for (uint64_t now = t; now < t + 1200; now += 37) {
            uint64_t want_oldest;
            uint32_t want = brute_used(l, now, &want_oldest);
            const uint32_t hints[] = {0, 1, k, k - 1, k - want, k - want - 1, k - want + 1, k - 100, k + 5, k - 5000, UINT32_MAX};
            for (size_t h = 0; h < sizeof(hints) / sizeof(hints[0]); h++) {
                atomic_store(&l->oldest_hint, hints[h]);
                uint64_t oldest;
                uint32_t first, used = window_count(l, now, &oldest, &first);
                cr_assert_eq(used, want, "%u admitted, now %llu, hint %u: %u counted, %u in the window", admitted[a],
                             (unsigned long long)now, hints[h], used, want);
                cr_assert_eq(first, k - want, "the first admission in the window is the next hint");
                cr_assert_eq(oldest, want_oldest, "the oldest admission's time");
            }
        }
        mg_limiter_free(l);
    }
}

/* A busy key's stream, where the hint is what each count starts from: a decision every `gap_lo`
 * to `gap_hi` us, and every 5,000 an idle gap of half a window or one and a half (the hint is
 * then that far behind). Remaining, Reset and Retry-After against the admission times counted
 * with two pointers; after every admission the hint is the first admission in the window. */
static void stream_against_two_pointers(mg_quota_t q, uint32_t decisions, uint64_t gap_lo, uint64_t gap_hi)
{
    mg_limiter_t *l = limiter(q.requests, q.per_us);
    uint64_t *at = malloc(decisions * sizeof(*at)), rng = q.requests, now = 1000;
    cr_assert_not_null(at);
    uint32_t len = 0, first = 0, rejected = 0;
    for (uint32_t i = 0; i < decisions; i++) {
        uint64_t idle = i % 10000 == 4999 ? q.per_us / 2 : q.per_us * 3 / 2;
        now += i % 5000 == 4999 ? idle : gap_lo + model_rand(&rng) % (gap_hi - gap_lo + 1);
        while (first < len && at[first] + q.per_us <= now)
            first++;
        int admit = len - first < q.requests;
        mg_decision_t d = decide(l, now, admit);
        if (!admit) {
            rejected++;
            cr_assert_eq(d.retry_after_us, at[first] + q.per_us - now, "decision %u", i);
            continue;
        }
        at[len++] = now;
        cr_assert_eq(d.remaining, q.requests - (len - first), "decision %u: remaining", i);
        cr_assert_eq(d.reset_us, at[first] + q.per_us - now, "decision %u: reset", i);
        cr_assert_eq(atomic_load(&l->oldest_hint), first, "decision %u: the next count starts at the window's first", i);
    }
    cr_expect_gt(cursor_lap(LOAD(&l->cursor)), 1, "the ring went round");
    if (gap_hi * q.requests < q.per_us)
        cr_expect_gt(rejected, 0, "the window filled");
    free(at);
    mg_limiter_free(l);
}

Test(limiter, a_steady_stream_counts_from_the_hint)
{
    /* 25,000 admissions in a 1 s window (as at 25,000 requests per second), five laps */
    stream_against_two_pointers((mg_quota_t){30000, 1000000}, 150000, 20, 60);
    /* more decisions than the quota, several at one time: rejections, many laps */
    stream_against_two_pointers((mg_quota_t){1000, 100000}, 30000, 0, 90);
}
