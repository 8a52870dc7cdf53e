/*
 * The limiter: "at most N admissions in any window of length P", exactly, lock-free.
 *
 * A sliding-window log: admission number k (0, 1, 2, ...) is recorded in slot k mod C of a
 * ring of C slots, C <= N. Admitting at time t is allowed iff admission k - C (the one C
 * places earlier, the one slot k mod C still holds) was at or before t - P, or does not
 * exist: then the window (t - P, t] holds at most C - 1 <= N - 1 earlier admissions, because
 * timestamps never go backwards in admission order. When it is in the window:
 *   - C = N: the window holds N admissions, the request is rejected;
 *   - C < N: the ring cannot tell, and nothing is decided (MG__GROW): the table freezes the
 *     limiter and replaces it by a copy with twice the slots (at most N), which has a free
 *     slot, through the path it uses for quota changes (internal.h, table.c).
 * So a ring only grows as far as one window's admissions need: a key that made one request
 * holds 2 slots, one hammering its quota N. An admission overwritten in the ring had left the
 * window when it was overwritten, so the ring always holds every admission of the window.
 *
 * Memory: a 48-byte header and 8 bytes per slot: a 16-bit lap tag (lap + 1 of the admission
 * the slot holds, mod 2^16; 0 = never written) and a 48-bit timestamp in microseconds.
 *
 * The cursor (one 64-bit word) is the next admission's place, as lap (k / C) and slot
 * (k mod C), plus a frozen bit (internal.h). One decision:
 *   1. read the cursor (lap L, slot s), slot s, slot s - 1 (the newest admission, for the
 *      clock clamp below), and the cursor again: if it moved, start over. So both slots
 *      were read while the cursor was at k: slot s holds admission k - C (tag L) or already
 *      admission k (tag L + 1: stamped by a thread that has not advanced the cursor yet;
 *      we advance it for that thread and start over), never anything older or newer.
 *   2. decide from slot s's timestamp. A rejection writes nothing.
 *   3. admit: CAS slot s from what was read (admission k - C) to (L + 1, t). This CAS is the
 *      linearization point: it succeeds for exactly one thread and only while the cursor is
 *      still at k, since the cursor only passes k once slot s holds admission k. A slot
 *      value never repeats (a slot's timestamps grow by at least P each lap), so there is
 *      no ABA. Then CAS the cursor from k to k + 1; failure means someone helped.
 * Every step that fails does so because another thread made progress: lock-free.
 *
 * The clock clamp: t = max(now, newest admission). Threads read the clock at slightly
 * different moments, and a clock may step; the ring's timestamps stay sorted regardless.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "throttle/internal.h"

_Static_assert(offsetof(struct mg_limiter, slot) == 48, "the limiter's header is 48 bytes");
_Static_assert(MG_QUOTA_MAX_REQUESTS < (1u << 20), "a slot number fits the cursor's 20 bits");

#define CURSOR_FROZEN (UINT64_C(1) << 63)
#define CURSOR_SLOT_BITS 20
#define CURSOR_SLOT_MASK ((UINT64_C(1) << CURSOR_SLOT_BITS) - 1)
#define CURSOR_LAP_BITS (63 - CURSOR_SLOT_BITS)
#define TS_BITS 48
#define TS_MAX ((UINT64_C(1) << TS_BITS) - 1)

#define LOAD(p) atomic_load_explicit((p), memory_order_acquire)

static uint64_t cursor_lap(uint64_t c)
{
    return (c & ~CURSOR_FROZEN) >> CURSOR_SLOT_BITS;
}

static uint32_t cursor_slot(uint64_t c)
{
    return (uint32_t)(c & CURSOR_SLOT_MASK);
}

static uint64_t cursor_next(const mg_limiter_t *l, uint64_t c)
{
    if (cursor_slot(c) + 1 < l->cap)
        return c + 1;
    /* after 2^43 laps (decades at any real rate), go on from lap 2^16: the same tag, and
     * still "not the first lap" */
    uint64_t lap = cursor_lap(c) + 1;
    if (lap >> CURSOR_LAP_BITS)
        lap = UINT64_C(1) << 16;
    return lap << CURSOR_SLOT_BITS;
}

/* The tag of an admission made on `lap`; the tag a slot has before it on `lap - 1`. */
static uint16_t lap_tag(uint64_t lap)
{
    return (uint16_t)(lap + 1);
}

static uint64_t slot_make(uint16_t tag, uint64_t ts)
{
    return (uint64_t)tag << TS_BITS | ts;
}

static uint16_t slot_tag(uint64_t v)
{
    return (uint16_t)(v >> TS_BITS);
}

static uint64_t slot_ts(uint64_t v)
{
    return v & TS_MAX;
}

static uint32_t slot_before(const mg_limiter_t *l, uint32_t s)
{
    return s == 0 ? l->cap - 1 : s - 1;
}

uint64_t mg_throttle_now(void)
{
    static _Atomic uint64_t epoch;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t raw = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000 + 1, e = 0;
    if (!atomic_compare_exchange_strong(&epoch, &e, raw))
        return raw > e ? raw - e + 1 : 1;
    return 1;
}

int mg__quota_valid(mg_quota_t q)
{
    return q.requests >= 1 && q.requests <= MG_QUOTA_MAX_REQUESTS && q.per_us >= 1 && q.per_us <= MG_QUOTA_MAX_PER_US;
}

/*
 * Where a ring lives. A small one (under MG__ALIGNED_CAP slots: a key that made a few
 * requests) is packed, header and slots together. A larger one, which a key only reaches by
 * using it, ends its header where a cache line ends: the slots begin on the next line, and
 * the header, read by every decision, shares its line with nothing a decision writes but the
 * cursor (its admissions write the cursor and a slot; its rejections only read). The table
 * lays these out in the key's entry (mg__limiter_layout); mg__limiter_new gives one memory of
 * its own. A ring of 64 KiB and more always gets pages of its own from the kernel: they come
 * zeroed (every slot "never written") and are only backed by memory once an admission writes
 * them, so zeroing 8 MB never happens on a decision.
 */
#define MAPPED_MIN_SIZE (64 * 1024)
#define LINE 64

static size_t ring_pad(uint32_t cap)
{
    return cap >= MG__ALIGNED_CAP ? LINE - sizeof(mg_limiter_t) : 0;
}

static size_t ring_size(uint32_t cap)
{
    return ring_pad(cap) + sizeof(mg_limiter_t) + (size_t)cap * sizeof(uint64_t);
}

int mg__limiter_mapped(uint32_t cap)
{
    return ring_size(cap) >= MAPPED_MIN_SIZE;
}

size_t mg_limiter_size(mg_quota_t quota)
{
    return ring_size(quota.requests);
}

size_t mg__limiter_bytes(const mg_limiter_t *l)
{
    return ring_size(l->cap);
}

size_t mg__limiter_layout(uint32_t cap, size_t at, size_t *offset)
{
    size_t header = sizeof(mg_limiter_t), align = _Alignof(mg_limiter_t);
    if (cap >= MG__ALIGNED_CAP)
        *offset = (at + header + LINE - 1) / LINE * LINE - header; /* the slots on a line's start */
    else
        *offset = (at + align - 1) / align * align;
    return *offset + header + (size_t)cap * sizeof(uint64_t);
}

mg_limiter_t *mg__limiter_init(void *mem, mg_quota_t quota, uint32_t cap)
{
    mg_limiter_t *l = mem;
    /* all slots start as tag 0: "lap -1", i.e. no admission yet */
    memset(l, 0, sizeof(*l) + (size_t)cap * sizeof(uint64_t));
    l->n = quota.requests;
    l->cap = cap;
    l->per_us = quota.per_us;
    return l;
}

mg_limiter_t *mg__limiter_new(mg_quota_t quota, uint32_t cap)
{
    if (!mg__quota_valid(quota))
        return NULL;
    cap = cap < 1 ? 1 : cap > quota.requests ? quota.requests : cap;
    void *mem;
    size_t size = ring_size(cap);
    if (mg__limiter_mapped(cap)) {
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
            return NULL;
        mg_limiter_t *l = (void *)((char *)mem + ring_pad(cap));
        l->n = quota.requests;
        l->cap = cap;
        l->per_us = quota.per_us;
        return l;
    }
    if (ring_pad(cap) != 0 ? posix_memalign(&mem, LINE, size) != 0 : (mem = malloc(size)) == NULL)
        return NULL;
    return mg__limiter_init((char *)mem + ring_pad(cap), quota, cap);
}

mg_limiter_t *mg_limiter_new(mg_quota_t quota)
{
    return mg__limiter_new(quota, quota.requests);
}

void mg_limiter_free(mg_limiter_t *l)
{
    if (l == NULL)
        return;
    void *mem = (char *)l - ring_pad(l->cap);
    if (mg__limiter_mapped(l->cap))
        munmap(mem, ring_size(l->cap));
    else
        free(mem);
}

mg_quota_t mg_limiter_quota(const mg_limiter_t *l)
{
    return (mg_quota_t){l->n, l->per_us};
}

/* The ring as one window count sees it: admission i (0 = the oldest of `count`) is in slot
 * first + i (mod C). */
typedef struct ring_view {
    const mg_limiter_t *l;
    uint64_t lap, now;
    uint32_t s, first, count;
    int frozen;
} ring_view_t;

/* 1 if admission i is still in the slot and in the window ending at now; `*ts` its time. */
static int view_in_window(const ring_view_t *r, uint32_t i, uint64_t *ts)
{
    uint32_t pos = r->first + i >= r->l->cap ? r->first + i - r->l->cap : r->first + i;
    uint64_t v = LOAD(&r->l->slot[pos]);
    uint16_t want = pos >= r->s ? lap_tag(r->lap - 1) : lap_tag(r->lap);
    /* a frozen limiter's slot s may be sealed (tag + 2): still admission k - C */
    int held = slot_tag(v) == want || (r->frozen && pos == r->s && slot_tag(v) == (uint16_t)(want + 2));
    *ts = slot_ts(v);
    return held && *ts + r->l->per_us > r->now;
}

/* 1 if admission i is in the window: then [lo, hi) narrows to [lo, i) and `*oldest` is its time;
 * else to [i + 1, hi). */
static int view_probe(const ring_view_t *r, uint32_t i, uint32_t *lo, uint32_t *hi, uint64_t *oldest)
{
    uint64_t ts;
    if (view_in_window(r, i, &ts)) {
        *hi = i;
        *oldest = ts;
        return 1;
    }
    *lo = i + 1;
    return 0;
}

/*
 * How many of the ring's admissions are in the window ending at `now` (timestamp + P > now),
 * and the oldest of them. The ring is sorted by time, so the ones in the window are the
 * newest few: a search for the first of them. A slot overwritten meanwhile by a newer admission
 * counts as out of the window: overwriting admission j needed admission j + C, at least P
 * after j, and the overwritten ones are always the oldest, so the predicate stays monotonic and
 * any start finds the same first admission. The start is the limiter's hint, the first one the
 * last count found (time only moves on, so it is a few admissions back at most: a few probes on
 * one or two cache lines, where a search from the newest makes twice the log of the window's
 * admissions across the ring), or the newest when the hint is not in the ring any more. From the
 * start, gallop (1, 2, 4, ... places) back while in the window or on while out, then bisect.
 * `*first` is the first admission in the window, as a number mod 2^32, the next hint.
 */
static uint32_t window_count(const mg_limiter_t *l, uint64_t now, uint64_t *oldest, uint32_t *first)
{
    uint64_t c = LOAD(&l->cursor);
    ring_view_t r = {.l = l, .lap = cursor_lap(c), .now = now, .s = cursor_slot(c), .frozen = (c & CURSOR_FROZEN) != 0};
    r.count = r.lap > 0 ? l->cap : r.s;
    r.first = r.lap > 0 ? r.s : 0;
    /* admission number (mod 2^32) of view index 0: the cursor's admission k, less count */
    uint32_t base = (uint32_t)(r.lap * l->cap) + r.s - r.count, lo = 0, hi = r.count; /* [hi, count) in, [0, lo) out */
    *oldest = 0;
    *first = base + r.count;
    if (r.count == 0)
        return 0;
    uint32_t start = atomic_load_explicit(&l->oldest_hint, memory_order_relaxed) - base;
    if (start >= r.count)
        start = r.count - 1;
    if (view_probe(&r, start, &lo, &hi, oldest)) {
        for (uint32_t step = 1; step <= hi - lo; step *= 2)
            if (!view_probe(&r, hi - step, &lo, &hi, oldest))
                break;
    } else {
        for (uint32_t step = 1; lo + step - 1 < hi; step *= 2)
            if (view_probe(&r, lo + step - 1, &lo, &hi, oldest))
                break;
    }
    while (lo < hi)
        view_probe(&r, lo + (hi - lo) / 2, &lo, &hi, oldest);
    *first = base + hi;
    return r.count - hi;
}

uint32_t mg_limiter_used(const mg_limiter_t *l, uint64_t now_us)
{
    /* at the ring's time, as a decision would be: admissions a ring of C < N slots has
     * overwritten had left the window by then, not necessarily by an earlier `now` */
    uint64_t oldest, last = mg__limiter_last(l);
    uint32_t first;
    return window_count(l, now_us > last ? now_us : last, &oldest, &first);
}

static void decision_admitted(mg_limiter_t *l, uint64_t now, uint64_t at, mg_decision_t *d)
{
    uint64_t oldest;
    uint32_t first, used = window_count(l, at, &oldest, &first);
    /* a hint only: racing decisions may leave an older or newer one, which costs probes, not
     * exactness (written only when it moved: the line is the cursor's, which admissions write) */
    if (first != atomic_load_explicit(&l->oldest_hint, memory_order_relaxed))
        atomic_store_explicit(&l->oldest_hint, first, memory_order_relaxed);
    d->admitted = 1;
    d->limit = l->n;
    d->remaining = used < l->n ? l->n - used : 0;
    d->reset_us = used > 0 && oldest + l->per_us > now ? oldest + l->per_us - now : 0;
    d->retry_after_us = 0;
    d->at_us = at;
}

static void decision_rejected(const mg_limiter_t *l, uint64_t now, uint64_t oldest, mg_decision_t *d)
{
    /* the ring is full of the window's admissions; the oldest leaves at oldest + P, and
     * until then the clamped time (>= now) stays below it */
    d->admitted = 0;
    d->limit = l->n;
    d->remaining = 0;
    d->retry_after_us = oldest + l->per_us - now;
    d->reset_us = d->retry_after_us;
    d->at_us = 0;
}

int mg__limiter_decide(mg_limiter_t *l, uint64_t now, mg_decision_t *d)
{
    if (now > TS_MAX)
        now = TS_MAX;
    for (;;) {
        uint64_t c = LOAD(&l->cursor), lap = cursor_lap(c);
        if (c & CURSOR_FROZEN)
            return MG__FROZEN;
        uint32_t s = cursor_slot(c);
        uint64_t v = LOAD(&l->slot[s]);
        uint64_t newest = lap > 0 || s > 0 ? slot_ts(LOAD(&l->slot[slot_before(l, s)])) : 0;
        if (LOAD(&l->cursor) != c)
            continue;
        if (slot_tag(v) == lap_tag(lap)) {
            /* admission k is in, the cursor not yet past it: help */
            atomic_compare_exchange_strong(&l->cursor, &c, cursor_next(l, c));
            continue;
        }
        if (slot_tag(v) != lap_tag(lap - 1))
            continue; /* not reachable with an unmoved cursor; never decide on it */
        uint64_t t = now > newest ? now : newest;
        if (lap > 0 && t < slot_ts(v) + l->per_us) {
            if (l->cap < l->n)
                return MG__GROW; /* C admissions in the window: N may not be reached yet */
            if (d != NULL)
                decision_rejected(l, now, slot_ts(v), d);
            return 0;
        }
        if (!atomic_compare_exchange_strong(&l->slot[s], &v, slot_make(lap_tag(lap), t)))
            continue;
        atomic_compare_exchange_strong(&l->cursor, &c, cursor_next(l, c));
        if (d != NULL)
            decision_admitted(l, now, t, d);
        return 1;
    }
}

int mg_limiter_acquire(mg_limiter_t *l, uint64_t now_us, mg_decision_t *d)
{
    /* only the table freezes limiters, and only its own; only its rings are smaller than N */
    return mg__limiter_decide(l, now_us, d);
}

/*
 * Freezing: set the frozen bit (no cursor CAS can succeed after it, so the cursor is final
 * at some k), then seal slot s = k mod C: a thread that read the cursor at k before the
 * freeze may still be about to CAS slot s for admission k. Either it got there first (the
 * slot has tag L + 1: admission k is in the history) or the seal (tag L + 2, the timestamp
 * of admission k - C kept) makes its CAS fail and it finds the cursor frozen.
 */
void mg__limiter_freeze(mg_limiter_t *l)
{
    uint64_t c = atomic_fetch_or(&l->cursor, CURSOR_FROZEN), lap = cursor_lap(c);
    _Atomic uint64_t *slot = &l->slot[cursor_slot(c)];
    uint64_t v = LOAD(slot);
    while (slot_tag(v) == lap_tag(lap - 1) && !atomic_compare_exchange_weak(slot, &v, slot_make(lap_tag(lap + 1), slot_ts(v))))
        ;
}

/* Admissions in a (possibly unfrozen, then racy) limiter, and the slot after the newest. */
static uint64_t history(const mg_limiter_t *l, uint32_t *end)
{
    uint64_t c = LOAD(&l->cursor), lap = cursor_lap(c);
    uint32_t s = cursor_slot(c);
    int stamped = slot_tag(LOAD(&l->slot[s])) == lap_tag(lap);
    *end = stamped ? (s + 1 == l->cap ? 0 : s + 1) : s;
    return lap * l->cap + s + (uint64_t)stamped;
}

/* How many of the newest admissions of the frozen `l` (`total` of them, the newest in the slot
 * before `end`) are within P of the newest: its last window, which a copy keeps. */
static uint32_t last_window(const mg_limiter_t *l, uint64_t total, uint32_t end)
{
    uint32_t held = total < l->cap ? (uint32_t)total : l->cap, in = 0, pos = end;
    uint64_t last = total > 0 ? slot_ts(LOAD(&l->slot[slot_before(l, end)])) : 0;
    while (in < held && slot_ts(LOAD(&l->slot[pos = slot_before(l, pos)])) + l->per_us > last)
        in++;
    return in;
}

uint32_t mg__limiter_copy_cap(const mg_limiter_t *old, mg_quota_t quota)
{
    uint32_t end;
    uint64_t total = history(old, &end);
    /* a ring whose every slot is in the window is too small for the next admission (the
     * decision said MG__GROW, or would); any other keeps its size */
    uint32_t cap = last_window(old, total, end) == old->cap ? 2 * old->cap : old->cap;
    return cap < quota.requests ? cap : quota.requests;
}

void mg__limiter_copy_to(mg_limiter_t *l, const mg_limiter_t *old, uint64_t gen)
{
    uint32_t pos;
    uint64_t total = history(old, &pos);
    uint32_t in = last_window(old, total, pos), keep = in < l->n ? in : l->n;
    for (uint32_t i = keep; i-- > 0;) {
        pos = slot_before(old, pos);
        atomic_init(&l->slot[i], slot_make(lap_tag(0), slot_ts(LOAD(&old->slot[pos]))));
    }
    atomic_init(&l->cursor, keep == l->cap ? UINT64_C(1) << CURSOR_SLOT_BITS : keep);
    atomic_init(&l->gen, gen);
    l->admitted_before = old->admitted_before + total - keep;
}

mg_limiter_t *mg__limiter_copy(const mg_limiter_t *old, mg_quota_t quota, uint64_t gen)
{
    mg_limiter_t *l = mg__limiter_new(quota, mg__limiter_copy_cap(old, quota));
    if (l != NULL)
        mg__limiter_copy_to(l, old, gen);
    return l;
}

uint64_t mg__limiter_last(const mg_limiter_t *l)
{
    uint32_t end;
    return history(l, &end) == 0 ? 0 : slot_ts(LOAD(&l->slot[slot_before(l, end)]));
}

uint64_t mg__limiter_expiry(const mg_limiter_t *l)
{
    uint32_t end;
    return history(l, &end) == 0 ? 0 : slot_ts(LOAD(&l->slot[slot_before(l, end)])) + l->per_us;
}

uint64_t mg__limiter_admitted(const mg_limiter_t *l)
{
    uint32_t end;
    return l->admitted_before + history(l, &end);
}
