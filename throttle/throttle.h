/*
 * throttle: exact sliding-window limits ("at most N admissions in any window of length P")
 * and the concurrent table of keys (tenants, route quota keys) that own them. Knows nothing
 * of HTTP, h2o or libcurl.
 *
 * Times are microseconds on the CLOCK_MONOTONIC scale of mg_throttle_now(); callers pass
 * `now` in so that tests can drive the clock.
 */
#ifndef MG_THROTTLE_H
#define MG_THROTTLE_H

#include <stddef.h>
#include <stdint.h>

/* A quota: at most `requests` admissions in any window of `per_us` microseconds. */
typedef struct mg_quota {
    uint32_t requests; /* 1 .. MG_QUOTA_MAX_REQUESTS */
    uint64_t per_us;   /* 1 .. MG_QUOTA_MAX_PER_US */
} mg_quota_t;

#define MG_QUOTA_MAX_REQUESTS 1000000u                  /* 8 MB of slots for one key */
#define MG_QUOTA_MAX_PER_US (UINT64_C(86400) * 1000000) /* one day */

/* What one decision found. On rejection `remaining` is 0. */
typedef struct mg_decision {
    int admitted;
    uint32_t limit;          /* N */
    uint32_t remaining;      /* admissions still possible in the window after this decision */
    uint64_t reset_us;       /* from now until the oldest admission in the window leaves it (0: none) */
    uint64_t retry_after_us; /* rejected: from now until one admission is possible (>= 1) */
    uint64_t at_us;          /* admitted: the admission's timestamp as recorded in the ring */
} mg_decision_t;

/* CLOCK_MONOTONIC in microseconds since a process-wide epoch taken at the first call (so that
 * a timestamp fits the ring's 48 bits for 8.9 years of process life). Never 0. */
uint64_t mg_throttle_now(void);

/* ---------------------------------------------------------------------------------------
 * One limiter: a ring of N tagged timestamps, 8 bytes each, after a 56-byte header. Deciding
 * and admitting is one atomic step (lock-free; see limiter.c for the argument). Any number of
 * threads may call mg_limiter_acquire on the same limiter at once. (The table's limiters start
 * with a ring of 2 slots and grow as their admissions need: see below.)
 */
typedef struct mg_limiter mg_limiter_t;

/* NULL when out of memory or the quota is out of range. */
mg_limiter_t *mg_limiter_new(mg_quota_t quota);
void mg_limiter_free(mg_limiter_t *l);
/* Decides one request at `now_us`: 1 admitted, 0 rejected; `*d` says why (may be NULL).
 * A `now_us` earlier than an admission already recorded counts as that admission's time (the
 * timestamps in the ring never go backwards). */
int mg_limiter_acquire(mg_limiter_t *l, uint64_t now_us, mg_decision_t *d);
/* Admissions of the last window at `now_us` (what RateLimit-Remaining subtracts from N). */
uint32_t mg_limiter_used(const mg_limiter_t *l, uint64_t now_us);
mg_quota_t mg_limiter_quota(const mg_limiter_t *l);
/* Bytes one limiter of `quota` takes with its whole ring (as mg_limiter_new makes it). */
size_t mg_limiter_size(mg_quota_t quota);

/* ---------------------------------------------------------------------------------------
 * The table: key -> limiter, a lock-free hash table (liburcu cds_lfht) shared by every
 * thread. Lookups and decisions never take a lock. Threads need no registration.
 *
 * Quotas come with each decision together with the configuration generation they belong to:
 * a key first seen gets that quota; a key whose limiter has an older generation and another
 * quota is migrated to the new quota, keeping its history (all of it when N grows, the newest
 * N' admissions when it shrinks); a decision from an older generation than the limiter's uses
 * the limiter's quota. So requests still running on the old configuration during a reload
 * never flip a key back.
 *
 * Idle keys are evicted by mg_throttle_evict only once every admission of their last window
 * has left it: a key evicted and seen again starts from exactly what it would have had.
 *
 * Memory follows use: a key's ring starts with 2 slots and doubles (up to N) when an admission
 * finds all of them in the window, so a key holds about 8 bytes per admission of its busiest
 * window, not 8 N; and each decision says how many keys the table may hold (`max_keys`).
 */
typedef struct mg_throttle mg_throttle_t;

mg_throttle_t *mg_throttle_new(void);
/* No other thread may use the table any more. */
void mg_throttle_free(mg_throttle_t *t);

/* mg_throttle_acquire: the key is not in the table and the table is full. */
#define MG_THROTTLE_FULL (-2)
/* max_keys for keys that may always enter the table (the caller bounds their number). */
#define MG_THROTTLE_NO_CEILING SIZE_MAX

/* Decides one request of `key` (any bytes, len <= 1024) under `quota` of generation `gen`.
 * 1 admitted, 0 rejected, -1 out of memory (the caller decides; the gateway admits).
 * (-1 also for a caller's bug, a quota out of range, which the configuration rules out.)
 * A key not in the table enters it only while the table holds fewer than `max_keys` keys;
 * else MG_THROTTLE_FULL, nothing is recorded, and `*d` says: not admitted, limit N, remaining
 * 0, retry_after_us = reset_us = from now until the soonest end of a window among the keys the
 * last mg_throttle_evict kept (at least 1): no key can leave the table before that.
 * Every decision runs at max(now_us, the latest `now_us` of an eviction). */
int mg_throttle_acquire(mg_throttle_t *t, const char *key, size_t len, mg_quota_t quota, uint64_t gen, size_t max_keys,
                        uint64_t now_us, mg_decision_t *d);

/* Moves every key to the quota `quota_of` gives it for generation `gen` (keys it returns 0 for
 * keep theirs): after a reload, so that listings and eviction see the new quotas at once. */
typedef int (*mg_throttle_quota_of_t)(void *arg, const char *key, size_t len, mg_quota_t *quota);
void mg_throttle_requota(mg_throttle_t *t, mg_throttle_quota_of_t quota_of, void *arg, uint64_t gen, uint64_t now_us);

/* Removes the keys whose whole window has expired at `now_us`; returns how many. Any thread.
 * Also notes the soonest end of a window among the keys it keeps (MG_THROTTLE_FULL's wait). */
size_t mg_throttle_evict(mg_throttle_t *t, uint64_t now_us);

/* One key as listed (the key string is valid during the callback only). */
typedef struct mg_throttle_stat {
    const char *key;
    size_t len;
    mg_quota_t quota;
    uint32_t used;     /* admissions in the window ending now */
    uint64_t admitted; /* since the key entered the table */
    uint64_t rejected;
} mg_throttle_stat_t;

/* Calls `cb` for every key, in no particular order (concurrent decisions continue). `cb` runs
 * inside the table's read-side section: it may decide, but must not call mg_throttle_free. */
void mg_throttle_foreach(mg_throttle_t *t, uint64_t now_us, void (*cb)(void *arg, const mg_throttle_stat_t *s), void *arg);
/* mg_throttle_evict that also calls `gone` (when not NULL) with each key it removes and the
 * key's final totals (`used` is 0: its window has passed), so that a caller can keep them: an
 * evicted key decides nothing any more, so these are all it will ever count. */
size_t mg_throttle_evict_each(mg_throttle_t *t, uint64_t now_us, void (*gone)(void *arg, const mg_throttle_stat_t *s), void *arg);
/* Number of keys in the table, counting those being inserted (so never more than the
 * `max_keys` of the decisions that inserted them); approximate while others insert or evict. */
size_t mg_throttle_count(mg_throttle_t *t);

#endif
