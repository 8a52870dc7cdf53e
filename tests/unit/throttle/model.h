/* The limiter's semantics written the plain way: every admission time in an array, and a
 * decision counts the ones in the window. Shared by the throttle tests that compare. */
#ifndef MG_TEST_THROTTLE_MODEL_H
#define MG_TEST_THROTTLE_MODEL_H

#include <stdlib.h>
#include <string.h>
#include "throttle/throttle.h"

typedef struct model {
    mg_quota_t quota;
    uint64_t *at; /* admission times, oldest first */
    size_t len, cap;
    uint64_t admitted;
} model_t;

static inline uint64_t model_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1du;
}

static inline void model_init(model_t *m, mg_quota_t quota)
{
    memset(m, 0, sizeof(*m));
    m->quota = quota;
}

static inline void model_free(model_t *m)
{
    free(m->at);
}

/* Admissions among the newest N that are in the window ending at `now`; the oldest of them. */
static inline uint32_t model_window(const model_t *m, uint64_t now, uint64_t *oldest)
{
    size_t from = m->len > m->quota.requests ? m->len - m->quota.requests : 0;
    uint32_t n = 0;
    *oldest = 0;
    for (size_t i = m->len; i-- > from;) {
        if (m->at[i] + m->quota.per_us <= now)
            break;
        n++;
        *oldest = m->at[i];
    }
    return n;
}

/* At the ring's time: a `now` before the newest admission counts as the newest. */
static inline uint32_t model_used(const model_t *m, uint64_t now)
{
    uint64_t oldest, newest = m->len > 0 ? m->at[m->len - 1] : 0;
    return model_window(m, now > newest ? now : newest, &oldest);
}

static inline int model_acquire(model_t *m, uint64_t now, mg_decision_t *d)
{
    uint64_t t = m->len > 0 && m->at[m->len - 1] > now ? m->at[m->len - 1] : now, oldest;
    uint32_t n = m->quota.requests;
    memset(d, 0, sizeof(*d));
    d->limit = n;
    if (model_window(m, t, &oldest) >= n) {
        d->retry_after_us = m->at[m->len - n] + m->quota.per_us - now;
        d->reset_us = d->retry_after_us;
        return 0;
    }
    if (m->len == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->at = realloc(m->at, m->cap * sizeof(*m->at));
    }
    m->at[m->len++] = t;
    m->admitted++;
    uint32_t used = model_window(m, t, &oldest);
    d->admitted = 1;
    d->at_us = t;
    d->remaining = n - used;
    d->reset_us = oldest + m->quota.per_us - now;
    return 1;
}

/* A quota change: the admissions of the last window (within P of the newest) are kept, the
 * newest N' of them when there are more. */
static inline void model_requota(model_t *m, mg_quota_t quota)
{
    size_t keep = 0;
    while (keep < m->len && m->at[m->len - 1 - keep] + m->quota.per_us > m->at[m->len - 1])
        keep++;
    if (keep > quota.requests)
        keep = quota.requests;
    memmove(m->at, m->at + (m->len - keep), keep * sizeof(*m->at));
    m->len = keep;
    m->quota = quota;
}

#endif
