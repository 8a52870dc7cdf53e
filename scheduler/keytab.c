/*
 * The scheduler's tables of keys with state, one per shard (and of groups with waiting tasks,
 * one per group shard): chained hash tables that grow and shrink with the number of live
 * entries, so that idle keys cost nothing (the buckets of a scheduler that had many keys
 * shrink back once they are gone).
 *
 * Keys and groups come from clients (a header value, a tenant name), so they are hashed with
 * SipHash-1-3 under a random per-scheduler seed: a client cannot choose keys that fall into one
 * chain (nor one shard). The hash is computed before any lock is taken.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include "scheduler/internal.h"

#define MIN_BUCKETS 8u /* one cache line */

static uint64_t rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static void sip_round(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = rotl(v[1], 13) ^ v[0];
    v[0] = rotl(v[0], 32);
    v[2] += v[3];
    v[3] = rotl(v[3], 16) ^ v[2];
    v[0] += v[3];
    v[3] = rotl(v[3], 21) ^ v[0];
    v[2] += v[1];
    v[1] = rotl(v[1], 17) ^ v[2];
    v[2] = rotl(v[2], 32);
}

static void sip_absorb(uint64_t v[4], uint64_t m)
{
    v[3] ^= m;
    sip_round(v);
    v[0] ^= m;
}

/* SipHash-1-3 (one compression round, three finalization rounds). */
uint64_t mg__sched_key_hash(const mg_sched_t *s, const char *key, size_t len)
{
    uint64_t v[4] = {s->hash_seed[0] ^ UINT64_C(0x736f6d6570736575), s->hash_seed[1] ^ UINT64_C(0x646f72616e646f6d),
                     s->hash_seed[0] ^ UINT64_C(0x6c7967656e657261), s->hash_seed[1] ^ UINT64_C(0x7465646279746573)};
    const unsigned char *p = (const unsigned char *)key;
    size_t left = len;
    uint64_t m;
    for (; left >= 8; left -= 8, p += 8) {
        memcpy(&m, p, 8);
        sip_absorb(v, m);
    }
    m = (uint64_t)len << 56;
    for (size_t i = 0; i < left; i++)
        m |= (uint64_t)p[i] << (8 * i);
    sip_absorb(v, m);
    v[2] ^= 0xff;
    for (int i = 0; i < 3; i++)
        sip_round(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

void mg__sched_keytab_seed(mg_sched_t *s)
{
    if (getrandom(s->hash_seed, sizeof(s->hash_seed), GRND_NONBLOCK) != (ssize_t)sizeof(s->hash_seed)) {
        /* no entropy yet (early boot): still different per process and per scheduler */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s->hash_seed[0] = (uint64_t)ts.tv_nsec * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)(uintptr_t)s;
        s->hash_seed[1] = (uint64_t)ts.tv_sec * UINT64_C(0xbf58476d1ce4e5b9) ^ (uint64_t)(uintptr_t)&ts;
    }
}

/* Bucket arrays are whole cache lines of their own, so that two shards' small tables never
 * share one (threads working on different shards would bounce it between their cores). */
static mg__sched_key_t **buckets_new(uint32_t n)
{
    size_t size = n * sizeof(mg__sched_key_t *);
    mg__sched_key_t **b = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (b)
        memset(b, 0, size);
    return b;
}

int mg__sched_keytab_init(mg__keytab_t *tab)
{
    tab->nbuckets = MIN_BUCKETS;
    tab->nkeys = 0;
    tab->buckets = buckets_new(tab->nbuckets);
    return tab->buckets ? 0 : -1;
}

void mg__sched_keytab_dispose(mg__keytab_t *tab)
{
    for (uint32_t i = 0; tab->buckets && i < tab->nbuckets; i++) {
        for (mg__sched_key_t *k = tab->buckets[i], *next; k; k = next) {
            next = k->hnext;
            free(k);
        }
    }
    free(tab->buckets);
    tab->buckets = NULL;
}

mg__sched_key_t *mg__sched_keytab_find(const mg__keytab_t *tab, const char *key, size_t len, uint64_t hash)
{
    for (mg__sched_key_t *k = tab->buckets[hash & (tab->nbuckets - 1)]; k; k = k->hnext) {
        if (k->hash == hash && k->len == len && memcmp(k->name, key, len) == 0)
            return k;
    }
    return NULL;
}

mg__sched_key_t *mg__sched_key_new(const char *key, size_t len, uint64_t hash)
{
    mg__sched_key_t *k = malloc(sizeof(*k) + len);
    if (!k)
        return NULL;
    memset(k, 0, sizeof(*k));
    k->ring.kind = MG__NODE_KEY;
    mg__link_init(&k->queue[MG_SCHED_NORMAL]);
    mg__link_init(&k->queue[MG_SCHED_HIGH]);
    k->hash = hash;
    k->len = (uint32_t)len;
    memcpy(k->name, key, len);
    return k;
}

/* Rehashes into `n` buckets; keeps the old table when out of memory (chains just get longer). */
static void resize(mg__keytab_t *tab, uint32_t n)
{
    mg__sched_key_t **b = buckets_new(n);
    if (!b)
        return;
    for (uint32_t i = 0; i < tab->nbuckets; i++) {
        for (mg__sched_key_t *k = tab->buckets[i], *next; k; k = next) {
            next = k->hnext;
            k->hnext = b[k->hash & (n - 1)];
            b[k->hash & (n - 1)] = k;
        }
    }
    free(tab->buckets);
    tab->buckets = b;
    tab->nbuckets = n;
}

void mg__sched_keytab_insert(mg__keytab_t *tab, mg__sched_key_t *k)
{
    mg__sched_key_t **head = &tab->buckets[k->hash & (tab->nbuckets - 1)];
    k->hnext = *head;
    *head = k;
    if (++tab->nkeys > tab->nbuckets && tab->nbuckets < (UINT32_C(1) << 31))
        resize(tab, tab->nbuckets * 2);
}

void mg__sched_keytab_delete(mg__keytab_t *tab, mg__sched_key_t *k)
{
    mg__sched_key_t **p = &tab->buckets[k->hash & (tab->nbuckets - 1)];
    while (*p != k)
        p = &(*p)->hnext;
    *p = k->hnext;
    free(k);
    /* shrink with hysteresis (grow at 1 key per bucket, shrink below 1/8) */
    if (--tab->nkeys < tab->nbuckets / 8 && tab->nbuckets > MIN_BUCKETS)
        resize(tab, tab->nbuckets / 2);
}
