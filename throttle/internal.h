/*
 * throttle internals shared by limiter.c and table.c (not part of the module's door).
 *
 * The table replaces a key's limiter (with the entry that holds it) when the key's quota
 * changes (reload) or its ring must grow, and retires it when the key is evicted. All start
 * by freezing the limiter: from then on no admission can be added to it (a racing acquirer
 * is told MG__FROZEN and looks the key up again), so its history is final and can be copied
 * or dropped without losing or double-counting anything. A frozen limiter never thaws: it
 * is replaced or freed.
 */
#ifndef MG_THROTTLE_INTERNAL_H
#define MG_THROTTLE_INTERNAL_H

#include <stdatomic.h>
#include "throttle/throttle.h"

/* mg__limiter_decide: the limiter is frozen, nothing was decided. */
#define MG__FROZEN (-3)
/* mg__limiter_decide: the ring is too small to decide (C < N slots, all of them in the
 * window): nothing was decided; a copy (mg__limiter_copy) has room. */
#define MG__GROW (-4)

/*
 * A 48-byte header, then C slots of 8 bytes (16-bit lap tag, 48-bit timestamp). C, the ring's
 * capacity, is at most N: the table starts a key with a small ring and replaces it by a copy
 * of twice its size when an admission needs more (limiter.c). Rings of MG__ALIGNED_CAP slots
 * and more end their header on a cache line's end, so that the slots start on the next line;
 * smaller ones are packed. The table lays a key's ring out in the key's own entry
 * (mg__limiter_layout, mg__limiter_init), but for the largest, which get pages of their own.
 */
struct mg_limiter {
    _Atomic uint64_t cursor;      /* frozen bit | lap | slot: where the next admission goes */
    uint32_t n;                   /* N = quota.requests */
    uint32_t cap;                 /* C: slots in the ring, 1 .. N */
    uint64_t per_us;              /* P */
    _Atomic uint64_t gen;         /* table: configuration generation the quota comes from */
    uint64_t admitted_before;     /* table: admissions of the limiters this one replaced */
    _Atomic uint32_t oldest_hint; /* the oldest admission (number mod 2^32) a window count found */
    _Atomic uint64_t slot[];
};

#define MG__ALIGNED_CAP 8

/* A limiter of `quota` with a ring of `cap` slots (clamped to 1 .. N); NULL when out of
 * memory or the quota is out of range. mg_limiter_new is this with cap = N. */
mg_limiter_t *mg__limiter_new(mg_quota_t quota, uint32_t cap);
/* 1 if a ring of `cap` slots gets pages of its own (mg__limiter_new maps them): too large to
 * be laid out in another object. */
int mg__limiter_mapped(uint32_t cap);
/* Lays a ring of `cap` slots (not mapped) out in a block aligned to 64 bytes (to 8 when `cap`
 * is under MG__ALIGNED_CAP), from byte `at` on: `*offset` is where it starts; returns where it
 * ends. */
size_t mg__limiter_layout(uint32_t cap, size_t at, size_t *offset);
/* A limiter of the valid `quota` with `cap` (1 .. N) slots made at `mem`, a place
 * mg__limiter_layout gave. Never freed by itself: it goes with the memory around it. */
mg_limiter_t *mg__limiter_init(void *mem, mg_quota_t quota, uint32_t cap);
/* Bytes `l` takes (its header and ring, alignment included, before the allocator's own). */
size_t mg__limiter_bytes(const mg_limiter_t *l);
/* mg_limiter_acquire, except that a frozen limiter answers MG__FROZEN and a ring that must
 * grow first MG__GROW (both leave `d`). */
int mg__limiter_decide(mg_limiter_t *l, uint64_t now_us, mg_decision_t *d);
/* Stops admissions for good; when it returns the history is final. Any thread, any number
 * of times. */
void mg__limiter_freeze(mg_limiter_t *l);
/* A copy of the frozen `old` under `quota` (valid) keeps, in order, the admissions of old's
 * last window (those within old P of its newest admission), the newest N' of them when there
 * are more. Its ring has old C slots, twice that (at most N') when they were all in that
 * window: so a copy made because a decision found the ring too small (MG__GROW) has room, and
 * every thread copying one frozen limiter makes the same copy. mg__limiter_copy_cap is that
 * capacity; mg__limiter_copy_to fills `l`, a new limiter of that capacity, and gives it `gen`. */
uint32_t mg__limiter_copy_cap(const mg_limiter_t *old, mg_quota_t quota);
void mg__limiter_copy_to(mg_limiter_t *l, const mg_limiter_t *old, uint64_t gen);
/* Both in one: the copy in memory of its own (mg_limiter_free); NULL when out of memory. */
mg_limiter_t *mg__limiter_copy(const mg_limiter_t *old, mg_quota_t quota, uint64_t gen);
/* Timestamp of the newest admission, 0 when there was none. */
uint64_t mg__limiter_last(const mg_limiter_t *l);
/* When the newest admission leaves its window (its time + P): the key may be evicted from
 * then on. 0 when there was none (a limiter being created: its first decision admits). */
uint64_t mg__limiter_expiry(const mg_limiter_t *l);
/* Admissions since the key was first seen (this limiter's and those it replaced). */
uint64_t mg__limiter_admitted(const mg_limiter_t *l);
/* 1 if `q` is within MG_QUOTA_MAX_REQUESTS / MG_QUOTA_MAX_PER_US. */
int mg__quota_valid(mg_quota_t q);

#endif
