/*
 * The table: key -> limiter in liburcu's lock-free hash table (cds_lfht), with the
 * "bulletproof" RCU flavour (urcu-bp) so that any thread may use it without registering.
 * Lookups and decisions take no lock; removed entries and replaced limiters are freed by
 * call_rcu once no reader can hold them.
 *
 * An entry is a key and its limiter, the limiter laid out in the entry after the key (a
 * ring too large for that gets pages of its own, and the entry points to them): a lookup and
 * the decision after it read neighbouring cache lines of one block. So an entry is never
 * changed in place; it is replaced by another (cds_lfht_replace: quota change, growth) or
 * removed (eviction), always after freezing its limiter (internal.h), so that a decision
 * racing with either is either in the history that is copied or checked, or sees the freeze
 * and looks the key up again:
 *   - replace: freeze, copy into a new entry under the new quota, replace the old node by the
 *     new one; a thread that finds a frozen limiter does the same (helping), the first
 *     replacement wins (the others find the old node removed), the losers free their copies.
 *     So nobody waits for a thread that froze a limiter and stalled.
 *   - evict: the window looked expired; freeze, check again on the final history (an
 *     admission may have got in), then remove the node (which fails if a helper replaced it
 *     first) and free it after a grace period.
 * Before evicting, the table's horizon is raised to the eviction's `now`, and every decision
 * runs at max(now, horizon): an evicted key's admissions were all at or before horizon - P,
 * so its fresh limiter can never share a window with them, even for a caller whose clock
 * reading is older than the evictor's.
 *
 * Growing a key's ring is a replacement too: a decision that finds all of a small ring's
 * slots in the window (MG__GROW) freezes it and copies it into an entry with twice the slots,
 * so what holds for quota changes (nothing lost, nothing counted twice, helpers instead of
 * waiting) holds for growth, and the grown ring sits next to its key as the first one did. A
 * key enters with a ring of INITIAL_CAP slots.
 *
 * The rejection count moves to the new entry with its value at the copy. A ring decides
 * rejections only once it has grown to N, so growth never races with one; a rejection
 * counted on an entry while a reload replaces it may be missed by the count (a statistic;
 * admissions are exact).
 *
 * The key ceiling: `count` is raised before a key is inserted (by a CAS that fails once it
 * has reached the decision's `max_keys`) and lowered when an insert loses a race or a key is
 * evicted, so the table never holds more keys than the largest `max_keys` it was given.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <urcu-bp.h>
#include <urcu/rculfhash.h>
#include "throttle/internal.h"

#define RETRY 2 /* entry_decide: the entry is gone, look the key up again */
/* Slots of a new key's ring: a packed block from malloc, 136 bytes with a 15-byte key (the
 * 144-byte chunk has no room for a third slot anyway). */
#define INITIAL_CAP 2

/* ThreadSanitizer cannot see liburcu's grace periods (the library is not instrumented): tell
 * it that a callback run by call_rcu comes after every read-side section that could have
 * seen the object. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MG_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(MG_TSAN)
#define MG_TSAN 1
#endif
#ifdef MG_TSAN
#include <sanitizer/tsan_interface.h>
static char tsan_grace;
#define READ_UNLOCK() (__tsan_release(&tsan_grace), rcu_read_unlock())
#define GRACE_PERIOD_PASSED() __tsan_acquire(&tsan_grace)
#else
#define READ_UNLOCK() rcu_read_unlock()
#define GRACE_PERIOD_PASSED() ((void)0)
#endif

/* Where a decision may slip in while an entry is being evicted; a test that includes this
 * file defines it to make that happen. */
#ifndef MG__EVICT_RACE_POINT
#define MG__EVICT_RACE_POINT() ((void)0)
#endif

struct mg_throttle {
    struct cds_lfht *ht;
    _Atomic uint64_t horizon;     /* the latest `now` at which a key was evicted */
    _Atomic uint64_t next_expiry; /* the soonest end of a window the last eviction pass saw */
    _Atomic size_t count;         /* keys in the table and being inserted */
    uint64_t seed[2];
};

/* One stripe of a contended key's rejection count, on a cache line of its own. */
typedef struct stripe {
    _Alignas(64) _Atomic uint64_t n;
} stripe_t;

#define STRIPES 8

/*
 * An entry is one block: a line of these fields, the key from the next line on, then the
 * limiter. A key whose ring has MG__ALIGNED_CAP slots and more (one that uses its quota) gets
 * a block on cache lines, with the ring's slots from a line's start: a decision on a short
 * key (up to 24 bytes) then reads two lines before the slots, both in one 128-byte pair, the
 * node and the counts, then the key and the limiter's header. The rejection count shares the
 * node's line: only an uncontended rejection writes it (once two threads collide on it, each
 * adds to a stripe of its own), so a flood from every core does not take the line from the
 * lookups.
 */
typedef struct entry {
    struct cds_lfht_node node;
    /* in this block after the key, or mapped (mg__limiter_mapped); set once, with release,
     * when the entry is complete: entry_limiter's acquire then sees all of it (for
     * ThreadSanitizer, which cannot see liburcu's barriers when the entry is published) */
    _Atomic(mg_limiter_t *) limiter;
    size_t len;
    _Atomic uint64_t rejected;
    _Atomic(stripe_t *) stripes; /* made once rejections of this key collide */
    struct rcu_head rcu;
    char key[];
} entry_t;

_Static_assert(offsetof(entry_t, key) == 64, "an entry's fields are one cache line");

typedef struct lookup_key {
    const char *key;
    size_t len;
} lookup_key_t;

/* SipHash-1-3: keys can come from clients (route quota keys are templates), so the hash is
 * keyed with a per-table random seed against collision flooding. */
#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND(v0, v1, v2, v3)                                                                                                   \
    do {                                                                                                                           \
        v0 += v1, v1 = ROTL(v1, 13), v1 ^= v0, v0 = ROTL(v0, 32);                                                                  \
        v2 += v3, v3 = ROTL(v3, 16), v3 ^= v2;                                                                                     \
        v0 += v3, v3 = ROTL(v3, 21), v3 ^= v0;                                                                                     \
        v2 += v1, v1 = ROTL(v1, 17), v1 ^= v2, v2 = ROTL(v2, 32);                                                                  \
    } while (0)

static uint64_t key_hash(const mg_throttle_t *t, const char *key, size_t len)
{
    uint64_t v0 = t->seed[0] ^ 0x736f6d6570736575u, v1 = t->seed[1] ^ 0x646f72616e646f6du;
    uint64_t v2 = t->seed[0] ^ 0x6c7967656e657261u, v3 = t->seed[1] ^ 0x7465646279746573u, m;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&m, key + i, 8);
        v3 ^= m;
        SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    m = (uint64_t)len << 56;
    for (size_t j = 0; i + j < len; j++)
        m |= (uint64_t)(unsigned char)key[i + j] << (8 * j);
    v3 ^= m;
    SIPROUND(v0, v1, v2, v3);
    v0 ^= m;
    v2 ^= 0xff;
    SIPROUND(v0, v1, v2, v3);
    SIPROUND(v0, v1, v2, v3);
    SIPROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

/* The entry at `iter`, which is at one: the acquire load orders the reads of its key and
 * limiter after their making (see entry_t). */
static entry_t *entry_at(struct cds_lfht_iter *iter)
{
    entry_t *e = caa_container_of(cds_lfht_iter_get_node(iter), entry_t, node);
    (void)atomic_load_explicit(&e->limiter, memory_order_acquire);
    return e;
}

/* The entry at `iter`, NULL at the end of a walk. */
static entry_t *iter_entry(struct cds_lfht_iter *iter)
{
    return cds_lfht_iter_get_node(iter) != NULL ? entry_at(iter) : NULL;
}

/* cds_lfht_for_each_entry, without its container_of of the NULL that ends the walk */
#define FOR_EACH_ENTRY(t, iter, e)                                                                                                 \
    for (cds_lfht_first((t)->ht, (iter)); ((e) = iter_entry(iter)) != NULL; cds_lfht_next((t)->ht, (iter)))

static mg_limiter_t *entry_limiter(entry_t *e)
{
    return atomic_load_explicit(&e->limiter, memory_order_acquire);
}

static int entry_match(struct cds_lfht_node *node, const void *arg)
{
    entry_t *e = caa_container_of(node, entry_t, node);
    const lookup_key_t *k = arg;
    (void)entry_limiter(e); /* orders the reads of the key after its making (see entry_t) */
    return e->len == k->len && memcmp(e->key, k->key, k->len) == 0;
}

static void entry_free(entry_t *e)
{
    mg_limiter_t *l = entry_limiter(e);
    if (mg__limiter_mapped(l->cap))
        mg_limiter_free(l);
    free(atomic_load(&e->stripes));
    free(e);
}

/*
 * Counting rejections: a flood of one key's requests is rejected by every thread at once,
 * and one shared counter would then be the only cache line they all write (the rejection
 * itself only reads). So the count is striped once two threads collide on it (as Java's
 * LongAdder does): each thread then adds to its own stripe.
 */
static unsigned thread_stripe(void)
{
    static _Atomic unsigned next;
    static __thread unsigned stripe;
    if (stripe == 0)
        stripe = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % STRIPES + 1;
    return stripe - 1;
}

static void entry_count_rejection(entry_t *e)
{
    stripe_t *stripes = atomic_load_explicit(&e->stripes, memory_order_acquire);
    if (stripes == NULL) {
        uint64_t n = atomic_load_explicit(&e->rejected, memory_order_relaxed);
        if (atomic_compare_exchange_strong_explicit(&e->rejected, &n, n + 1, memory_order_relaxed, memory_order_relaxed))
            return;
        stripe_t *mine = aligned_alloc(64, STRIPES * sizeof(*mine)), *none = NULL;
        if (mine == NULL) {
            entry_count_rejection(e);
            return;
        }
        for (int i = 0; i < STRIPES; i++)
            atomic_init(&mine[i].n, 0);
        stripes = mine;
        if (!atomic_compare_exchange_strong(&e->stripes, &none, mine)) {
            free(mine); /* another thread striped it first */
            stripes = none;
        }
    }
    atomic_fetch_add_explicit(&stripes[thread_stripe()].n, 1, memory_order_relaxed);
}

static uint64_t entry_rejected(entry_t *e)
{
    stripe_t *stripes = atomic_load_explicit(&e->stripes, memory_order_acquire);
    uint64_t n = atomic_load_explicit(&e->rejected, memory_order_relaxed);
    for (int i = 0; stripes != NULL && i < STRIPES; i++)
        n += atomic_load_explicit(&stripes[i].n, memory_order_relaxed);
    return n;
}

static void entry_free_rcu(struct rcu_head *head)
{
    GRACE_PERIOD_PASSED();
    entry_free(caa_container_of(head, entry_t, rcu));
}

mg_throttle_t *mg_throttle_new(void)
{
    mg_throttle_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    if (getrandom(t->seed, sizeof(t->seed), 0) != sizeof(t->seed)) {
        /* no entropy yet (early boot): still a fine hash, only not flood-proof */
        t->seed[0] = (uintptr_t)t ^ mg_throttle_now();
        t->seed[1] = t->seed[0] * 0x9e3779b97f4a7c15u;
    }
    t->ht = cds_lfht_new(16384, 1024, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING, NULL);
    if (t->ht == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

void mg_throttle_free(mg_throttle_t *t)
{
    if (t == NULL)
        return;
    struct cds_lfht_iter iter;
    entry_t *e;
    rcu_read_lock();
    FOR_EACH_ENTRY(t, &iter, e)
    {
        if (cds_lfht_del(t->ht, &e->node) == 0)
            call_rcu(&e->rcu, entry_free_rcu);
    }
    READ_UNLOCK();
    /* evicted entries and replaced limiters may still wait for their grace period */
    rcu_barrier();
    cds_lfht_destroy(t->ht, NULL);
    free(t);
}

/* A new entry for the key with a limiter of `quota` (valid) and `cap` slots (1 .. N) at
 * generation `gen`: empty, or a copy of the frozen limiter of `old`; NULL when out of memory. */
static entry_t *entry_new(const char *key, size_t len, mg_quota_t quota, uint32_t cap, uint64_t gen, entry_t *old)
{
    size_t at = offsetof(entry_t, key) + len + 1, offset = 0, end = at;
    int mapped = mg__limiter_mapped(cap);
    if (!mapped)
        end = mg__limiter_layout(cap, at, &offset);
    /* a ring of MG__ALIGNED_CAP slots and more (a key that uses its quota) on cache lines as
     * above; a smaller one (most often a key that made a request or two) packed, from plain
     * malloc: an aligned block would cost it a third more memory */
    entry_t *e = cap >= MG__ALIGNED_CAP ? aligned_alloc(64, (end + 63) / 64 * 64) : malloc(end);
    mg_limiter_t *l = e == NULL ? NULL : mapped ? mg__limiter_new(quota, cap) : mg__limiter_init((char *)e + offset, quota, cap);
    if (l == NULL) {
        free(e);
        return NULL;
    }
    atomic_init(&l->gen, gen);
    if (old != NULL)
        mg__limiter_copy_to(l, entry_limiter(old), gen);
    atomic_init(&e->rejected, old != NULL ? entry_rejected(old) : 0);
    atomic_init(&e->stripes, NULL);
    cds_lfht_node_init(&e->node);
    e->len = len;
    memcpy(e->key, key, len);
    e->key[len] = '\0';
    atomic_store_explicit(&e->limiter, l, memory_order_release); /* last: see entry_t */
    return e;
}

/* Replaces the entry at `iter` (`hash` its key's), its limiter frozen first, by a copy under
 * `quota` and `gen`. RETRY: look the key up again (replaced, by this thread or a helper, or
 * evicted); -1: out of memory. */
static int entry_replace(mg_throttle_t *t, struct cds_lfht_iter *iter, uint64_t hash, mg_quota_t quota, uint64_t gen)
{
    entry_t *e = entry_at(iter);
    mg_limiter_t *l = entry_limiter(e);
    mg__limiter_freeze(l);
    entry_t *copy = entry_new(e->key, e->len, quota, mg__limiter_copy_cap(l, quota), gen, e);
    if (copy == NULL)
        return -1;
    lookup_key_t k = {e->key, e->len};
    if (cds_lfht_replace(t->ht, iter, hash, entry_match, &k, &copy->node) == 0)
        call_rcu(&e->rcu, entry_free_rcu);
    else
        entry_free(copy); /* replaced or evicted by another thread first; ours was never seen */
    return RETRY;
}

static int quota_differs(const mg_limiter_t *l, mg_quota_t quota)
{
    return l->n != quota.requests || l->per_us != quota.per_us;
}

/* Brings the entry at `iter` to generation `gen` (quota `quota`) unless it is newer already.
 * 0, RETRY (replaced: look the key up again) or -1 (out of memory). */
static int entry_update(mg_throttle_t *t, struct cds_lfht_iter *iter, uint64_t hash, mg_quota_t quota, uint64_t gen)
{
    mg_limiter_t *l = entry_limiter(entry_at(iter));
    uint64_t lgen = atomic_load_explicit(&l->gen, memory_order_relaxed);
    if (lgen < gen && quota_differs(l, quota))
        return entry_replace(t, iter, hash, quota, gen);
    /* same quota: only the generation moves on, so that older decisions keep to it */
    while (lgen < gen && !atomic_compare_exchange_weak(&l->gen, &lgen, gen))
        ;
    return 0;
}

/* 1 admitted, 0 rejected, RETRY, or -1 (out of memory). */
static int entry_decide(mg_throttle_t *t, struct cds_lfht_iter *iter, uint64_t hash, mg_quota_t quota, uint64_t gen, uint64_t now,
                        mg_decision_t *d)
{
    int r = entry_update(t, iter, hash, quota, gen);
    if (r != 0)
        return r;
    entry_t *e = entry_at(iter);
    mg_limiter_t *l = entry_limiter(e);
    uint64_t horizon = atomic_load(&t->horizon), late = now < horizon ? horizon - now : 0;
    r = mg__limiter_decide(l, now + late, d);
    if (r >= 0 && d != NULL && d->reset_us > 0) {
        /* waits count from the caller's now */
        d->reset_us += late;
        d->retry_after_us += r == 0 ? late : 0;
    }
    if (r == MG__FROZEN || r == MG__GROW) {
        /* being replaced or evicted: help replace it (an evicted one is not found again); or
         * too small: replace it by a copy with room (the copy sees it was full) */
        return entry_replace(t, iter, hash, mg_limiter_quota(l), atomic_load(&l->gen));
    }
    if (r == 0)
        entry_count_rejection(e);
    return r;
}

/* Takes a place in the table for a new key: 0, or -1 when `max_keys` are taken. */
static int place_take(mg_throttle_t *t, size_t max_keys)
{
    size_t n = atomic_load_explicit(&t->count, memory_order_relaxed);
    do {
        if (n >= max_keys)
            return -1;
    } while (!atomic_compare_exchange_weak_explicit(&t->count, &n, n + 1, memory_order_relaxed, memory_order_relaxed));
    return 0;
}

static void place_give_back(mg_throttle_t *t)
{
    atomic_fetch_sub_explicit(&t->count, 1, memory_order_relaxed);
}

/* Inserts the key, unless another thread did meanwhile: RETRY (look it up), -1 out of memory,
 * MG_THROTTLE_FULL. */
static int entry_insert(mg_throttle_t *t, const lookup_key_t *k, uint64_t hash, mg_quota_t quota, uint64_t gen, size_t max_keys)
{
    if (place_take(t, max_keys) != 0)
        return MG_THROTTLE_FULL;
    entry_t *e = entry_new(k->key, k->len, quota, INITIAL_CAP < quota.requests ? INITIAL_CAP : quota.requests, gen, NULL);
    if (e == NULL) {
        place_give_back(t);
        return -1;
    }
    if (cds_lfht_add_unique(t->ht, hash, entry_match, k, &e->node) != &e->node) {
        entry_free(e); /* another thread inserted the key first */
        place_give_back(t);
    }
    return RETRY;
}

/* What MG_THROTTLE_FULL tells: no key leaves the table before the soonest end of a window. */
static void decision_full(mg_throttle_t *t, mg_quota_t quota, uint64_t now, mg_decision_t *d)
{
    uint64_t next = atomic_load_explicit(&t->next_expiry, memory_order_relaxed);
    *d = (mg_decision_t){.limit = quota.requests, .retry_after_us = next > now ? next - now : 1};
    d->reset_us = d->retry_after_us;
}

int mg_throttle_acquire(mg_throttle_t *t, const char *key, size_t len, mg_quota_t quota, uint64_t gen, size_t max_keys,
                        uint64_t now_us, mg_decision_t *d)
{
    /* the configuration checks quotas; keys of any length work (a longer one only costs) */
    if (!mg__quota_valid(quota))
        return -1;
    lookup_key_t k = {key, len};
    uint64_t hash = key_hash(t, key, len);
    struct cds_lfht_iter iter;
    int r;
    rcu_read_lock();
    do {
        cds_lfht_lookup(t->ht, hash, entry_match, &k, &iter);
        if (cds_lfht_iter_get_node(&iter) == NULL)
            r = entry_insert(t, &k, hash, quota, gen, max_keys);
        else
            r = entry_decide(t, &iter, hash, quota, gen, now_us, d);
    } while (r == RETRY);
    READ_UNLOCK();
    if (r == MG_THROTTLE_FULL && d != NULL)
        decision_full(t, quota, now_us, d);
    return r;
}

void mg_throttle_requota(mg_throttle_t *t, mg_throttle_quota_of_t quota_of, void *arg, uint64_t gen, uint64_t now_us)
{
    struct cds_lfht_iter iter;
    entry_t *e;
    rcu_read_lock();
    FOR_EACH_ENTRY(t, &iter, e)
    {
        mg_quota_t quota;
        /* a replaced entry's copy comes after it in the walk and is not seen: it is done;
         * out of memory: the key's next decision tries again */
        if (quota_of(arg, e->key, e->len, &quota) && mg__quota_valid(quota))
            entry_update(t, &iter, key_hash(t, e->key, e->len), quota, gen);
    }
    READ_UNLOCK();
}

typedef struct evict_hook {
    void (*gone)(void *arg, const mg_throttle_stat_t *s);
    void *arg;
} evict_hook_t;

/* 1 if the entry at `iter` was evicted (by this thread); else `*expiry` is when its window
 * ends (0: not known, the entry is new or was replaced). */
static int entry_evict(mg_throttle_t *t, struct cds_lfht_iter *iter, uint64_t now, uint64_t *expiry, const evict_hook_t *hook)
{
    entry_t *e = entry_at(iter);
    mg_limiter_t *l = entry_limiter(e);
    *expiry = mg__limiter_expiry(l);
    if (*expiry == 0 || *expiry > now)
        return 0;
    MG__EVICT_RACE_POINT();
    mg__limiter_freeze(l);
    if ((*expiry = mg__limiter_expiry(l)) > now) {
        /* an admission got in before the freeze: the key lives on in a copy */
        entry_replace(t, iter, key_hash(t, e->key, e->len), mg_limiter_quota(l), atomic_load(&l->gen));
        return 0;
    }
    *expiry = 0;
    uint64_t horizon = atomic_load(&t->horizon);
    while (horizon < now && !atomic_compare_exchange_weak(&t->horizon, &horizon, now))
        ;
    if (cds_lfht_del(t->ht, &e->node) != 0)
        return 0; /* a helper replaced it first: the key lives on in its copy */
    if (hook->gone != NULL) {
        /* frozen with its window passed: no decision can admit or reject on it any more */
        mg_throttle_stat_t s = {e->key, e->len, mg_limiter_quota(l), 0, mg__limiter_admitted(l), entry_rejected(e)};
        hook->gone(hook->arg, &s);
    }
    place_give_back(t);
    call_rcu(&e->rcu, entry_free_rcu);
    return 1;
}

size_t mg_throttle_evict(mg_throttle_t *t, uint64_t now_us)
{
    return mg_throttle_evict_each(t, now_us, NULL, NULL);
}

size_t mg_throttle_evict_each(mg_throttle_t *t, uint64_t now_us, void (*gone)(void *arg, const mg_throttle_stat_t *s), void *arg)
{
    evict_hook_t hook = {gone, arg};
    struct cds_lfht_iter iter;
    entry_t *e;
    size_t n = 0;
    uint64_t next = UINT64_MAX, expiry;
    rcu_read_lock();
    FOR_EACH_ENTRY(t, &iter, e)
    {
        n += (size_t)entry_evict(t, &iter, now_us, &expiry, &hook);
        if (expiry != 0 && expiry < next)
            next = expiry;
    }
    READ_UNLOCK();
    /* windows only end later as keys admit more, so no key seen here leaves before `next`
     * (one inserted during or after the walk came while there was room: the wait of
     * MG_THROTTLE_FULL is for a full table) */
    atomic_store_explicit(&t->next_expiry, next != UINT64_MAX ? next : now_us, memory_order_relaxed);
    return n;
}

void mg_throttle_foreach(mg_throttle_t *t, uint64_t now_us, void (*cb)(void *arg, const mg_throttle_stat_t *s), void *arg)
{
    struct cds_lfht_iter iter;
    entry_t *e;
    rcu_read_lock();
    FOR_EACH_ENTRY(t, &iter, e)
    {
        mg_limiter_t *l = entry_limiter(e);
        mg_throttle_stat_t s = {
            .key = e->key,
            .len = e->len,
            .quota = mg_limiter_quota(l),
            .used = mg_limiter_used(l, now_us),
            .admitted = mg__limiter_admitted(l),
            .rejected = entry_rejected(e),
        };
        cb(arg, &s);
    }
    READ_UNLOCK();
}

size_t mg_throttle_count(mg_throttle_t *t)
{
    return atomic_load_explicit(&t->count, memory_order_relaxed);
}
