/*
 * throttle internals shared by limiter.c and table.c (not part of the module's door).
 *
 * The table replaces a key's limiter when the key's quota changes (reload) and retires it
 * when the key is evicted. Both start by freezing the limiter: from then on no admission can
 * be added to it (a racing acquirer is told MG__FROZEN and looks the key up again), so its
 * history is final and can be copied or dropped without losing or double-counting anything.
 * A frozen limiter never thaws: it is replaced or freed.
 */
#ifndef MG_THROTTLE_INTERNAL_H
#define MG_THROTTLE_INTERNAL_H

#include <stdatomic.h>
#include "throttle/throttle.h"

/* mg__limiter_decide: the limiter is frozen, nothing was decided. */
#define MG__FROZEN (-2)

/* One cache line of header, then N slots of 8 bytes (16-bit lap tag, 48-bit timestamp). */
struct mg_limiter {
    _Atomic uint64_t cursor;  /* frozen bit | lap | slot: where the next admission goes */
    uint32_t n;               /* N = quota.requests, slots in the ring */
    uint32_t mapped;          /* the ring has pages of its own (limiter.c) */
    uint64_t per_us;          /* P */
    _Atomic uint64_t gen;     /* table: configuration generation the quota comes from */
    uint64_t admitted_before; /* table: admissions of the limiters this one replaced */
    /* table: its struct rcu_head while the limiter waits for a grace period to be freed */
    union {
        void *p[2];
    } reclaim;
    uint64_t pad;
    _Atomic uint64_t slot[];
};

/* mg_limiter_acquire, except that a frozen limiter answers MG__FROZEN (and leaves `d`). */
int mg__limiter_decide(mg_limiter_t *l, uint64_t now_us, mg_decision_t *d);
/* Stops admissions for good; when it returns the history is final. Any thread, any number
 * of times. */
void mg__limiter_freeze(mg_limiter_t *l);
/* A new limiter of `quota` and `gen` holding the newest min(admitted, N, N') admissions of
 * the frozen `old`, in order; NULL when out of memory. */
mg_limiter_t *mg__limiter_copy(const mg_limiter_t *old, mg_quota_t quota, uint64_t gen);
/* Timestamp of the newest admission, 0 when there was none. */
uint64_t mg__limiter_last(const mg_limiter_t *l);
/* 1 if there was an admission and the newest one has left the window ending at `now_us`.
 * (A limiter without admissions is one being created: the first decision always admits.) */
int mg__limiter_expired(const mg_limiter_t *l, uint64_t now_us);
/* Admissions since the key was first seen (this limiter's and those it replaced). */
uint64_t mg__limiter_admitted(const mg_limiter_t *l);
/* 1 if `q` is within MG_QUOTA_MAX_REQUESTS / MG_QUOTA_MAX_PER_US. */
int mg__quota_valid(mg_quota_t q);

#endif
