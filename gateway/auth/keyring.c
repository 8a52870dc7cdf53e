/*
 * Keyrings: the key set an authenticator verifies with now. A set is immutable and replaced whole
 * (a fetch installs a new one), so a verification holds one reference for its duration and never
 * sees a set change under it. The lock is taken only on a cache miss and when a set is installed:
 * cached tokens read the generation alone.
 */
#include <stdlib.h>
#include "gateway/auth/auth.h"

struct mg_keys {
    atomic_uint refs;
    mg_keyset_t *set;
};

struct mg_keyring {
    pthread_mutex_t lock;
    mg_keys_t *current; /* NULL: no key yet */
    atomic_uint_fast64_t generation;
    uint64_t fetches, failures;
    int64_t last_good_ms;
    /* a fetch asked for by a request (mg_keyring_want), and when one was last asked; both written
     * under the lock, read without it on the fast path */
    atomic_int wanted;
    atomic_int_fast64_t wanted_at_ms;
    /* tickets: `asks` counts the asks (written under the lock), `answered` is the last one a
     * finished fetch took; a request waits for its ticket to be answered (mg_keyring_pending) */
    atomic_uint_fast64_t asks;
    atomic_uint_fast64_t answered;
    pthread_mutex_t *waker_lock;
    pthread_cond_t *waker;
};

mg_keyring_t *mg_keyring_new(void)
{
    mg_keyring_t *ring = calloc(1, sizeof(*ring));
    if (ring == NULL)
        abort();
    pthread_mutex_init(&ring->lock, NULL);
    atomic_init(&ring->wanted_at_ms, INT64_MIN / 2);
    return ring;
}

void mg_keys_release(mg_keys_t *keys)
{
    if (keys == NULL || atomic_fetch_sub_explicit(&keys->refs, 1, memory_order_acq_rel) != 1)
        return;
    mg_keyset_free(keys->set);
    free(keys);
}

void mg_keyring_free(mg_keyring_t *ring)
{
    if (ring == NULL)
        return;
    mg_keys_release(ring->current);
    pthread_mutex_destroy(&ring->lock);
    free(ring);
}

/* Replaces the current keys by `keys` (taken) under the lock; the old ones go when their last
 * verification ends. */
static void mg_keyring_swap(mg_keyring_t *ring, mg_keys_t *keys)
{
    pthread_mutex_lock(&ring->lock);
    mg_keys_t *old = ring->current;
    ring->current = keys;
    atomic_fetch_add_explicit(&ring->generation, 1, memory_order_release);
    pthread_mutex_unlock(&ring->lock);
    mg_keys_release(old);
}

void mg_keyring_install(mg_keyring_t *ring, mg_keyset_t *ks, int64_t now_ms)
{
    mg_keys_t *keys = NULL;
    if (ks != NULL) {
        if ((keys = malloc(sizeof(*keys))) == NULL)
            abort();
        atomic_init(&keys->refs, 1);
        keys->set = ks;
    }
    mg_keyring_swap(ring, keys);
    pthread_mutex_lock(&ring->lock);
    ring->fetches++;
    ring->last_good_ms = now_ms;
    pthread_mutex_unlock(&ring->lock);
}

void mg_keyring_adopt(mg_keyring_t *ring, mg_keyring_t *from)
{
    mg_keys_t *keys = mg_keyring_acquire(from);
    mg_keyring_stats_t st;
    mg_keyring_stats(from, &st);
    mg_keyring_swap(ring, keys);
    pthread_mutex_lock(&ring->lock);
    ring->fetches = st.fetches;
    ring->failures = st.failures;
    ring->last_good_ms = st.last_good_ms;
    pthread_mutex_unlock(&ring->lock);
}

void mg_keyring_failed(mg_keyring_t *ring)
{
    pthread_mutex_lock(&ring->lock);
    ring->failures++;
    pthread_mutex_unlock(&ring->lock);
}

mg_keys_t *mg_keyring_acquire(mg_keyring_t *ring)
{
    pthread_mutex_lock(&ring->lock);
    mg_keys_t *keys = ring->current;
    if (keys != NULL)
        atomic_fetch_add_explicit(&keys->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&ring->lock);
    return keys;
}

const mg_keyset_t *mg_keys_set(const mg_keys_t *keys)
{
    return keys != NULL ? keys->set : NULL;
}

uint64_t mg_keyring_generation(const mg_keyring_t *ring)
{
    return atomic_load_explicit(&ring->generation, memory_order_acquire);
}

void mg_keyring_stats(mg_keyring_t *ring, mg_keyring_stats_t *out)
{
    pthread_mutex_lock(&ring->lock);
    *out = (mg_keyring_stats_t){.keys = ring->current != NULL ? mg_keyset_size(ring->current->set) : 0,
                                .fetches = ring->fetches,
                                .failures = ring->failures,
                                .last_good_ms = ring->last_good_ms,
                                .generation = atomic_load(&ring->generation)};
    pthread_mutex_unlock(&ring->lock);
}

/* Only the first request of a flood reaches the lock: the flag is set until the fetcher takes it,
 * and `min_interval_ms` spaces the asks out. Both are checked again under the lock, where the
 * ask takes its ticket, so that a fetcher taking the flag never misses the ticket of its ask. */
int mg_keyring_want(mg_keyring_t *ring, uint64_t min_interval_ms, int64_t now_ms)
{
    if (atomic_load_explicit(&ring->wanted, memory_order_relaxed) ||
        now_ms - atomic_load_explicit(&ring->wanted_at_ms, memory_order_relaxed) < (int64_t)min_interval_ms)
        return 0;
    pthread_mutex_lock(&ring->lock);
    int asked = !atomic_load_explicit(&ring->wanted, memory_order_relaxed) &&
                now_ms - atomic_load_explicit(&ring->wanted_at_ms, memory_order_relaxed) >= (int64_t)min_interval_ms;
    if (asked) {
        atomic_store_explicit(&ring->wanted, 1, memory_order_relaxed);
        atomic_store_explicit(&ring->wanted_at_ms, now_ms, memory_order_relaxed);
        atomic_fetch_add_explicit(&ring->asks, 1, memory_order_relaxed);
    }
    pthread_mutex_t *lock = ring->waker_lock;
    pthread_cond_t *waker = ring->waker;
    pthread_mutex_unlock(&ring->lock);
    if (asked && waker != NULL) {
        pthread_mutex_lock(lock);
        pthread_cond_signal(waker);
        pthread_mutex_unlock(lock);
    }
    return asked;
}

uint64_t mg_keyring_take_want(mg_keyring_t *ring)
{
    pthread_mutex_lock(&ring->lock);
    uint64_t ticket = atomic_load_explicit(&ring->wanted, memory_order_relaxed) ? atomic_load(&ring->asks) : 0;
    atomic_store_explicit(&ring->wanted, 0, memory_order_relaxed);
    pthread_mutex_unlock(&ring->lock);
    return ticket;
}

void mg_keyring_answer(mg_keyring_t *ring, uint64_t ticket)
{
    /* only the fetcher writes it, and its tickets only grow */
    if (ticket > atomic_load_explicit(&ring->answered, memory_order_relaxed))
        atomic_store_explicit(&ring->answered, ticket, memory_order_release);
}

/* Two loads, no lock: each request of a flood of invented kids calls it. */
uint64_t mg_keyring_pending(const mg_keyring_t *ring)
{
    uint64_t ticket = atomic_load_explicit(&ring->asks, memory_order_relaxed);
    return mg_keyring_answered(ring, ticket) ? 0 : ticket;
}

int mg_keyring_answered(const mg_keyring_t *ring, uint64_t ticket)
{
    return atomic_load_explicit(&ring->answered, memory_order_acquire) >= ticket;
}

void mg_keyring_set_waker(mg_keyring_t *ring, pthread_mutex_t *lock, pthread_cond_t *cond)
{
    pthread_mutex_lock(&ring->lock);
    ring->waker_lock = lock;
    ring->waker = cond;
    pthread_mutex_unlock(&ring->lock);
}
