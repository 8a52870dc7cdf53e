/*
 * Client connections per address, for limits.max_connections_per_client: one count per address
 * with at least one connection open, in a hash table shared by the workers.
 *
 * A worker touches the table twice per connection (accept, close), never per request, so a
 * mutex is cheap enough; the table is split in shards by hash so that workers accepting at the
 * same time rarely wait for each other. The hash is seeded at random: an attacker who chooses
 * source addresses cannot aim them at one chain. An entry is freed with its address's last
 * connection, so the table never holds more entries than there are connections.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include "gateway/connections/internal.h"

#define SHARDS 64
#define MIN_BUCKETS 16

struct mg_client {
    struct mg_client *next;
    uint32_t hash;
    uint32_t count; /* connections open */
    uint8_t len;    /* 4 (IPv4, IPv4-mapped IPv6 included) or 16 */
    uint8_t addr[16];
};

typedef struct shard {
    pthread_mutex_t lock;
    mg_client_t **buckets;
    size_t num_buckets, size;
} shard_t;

struct mg_clients {
    uint64_t seed;
    shard_t shards[SHARDS];
};

int mg_client_key(const struct sockaddr *sa, socklen_t len, uint8_t out[16])
{
    if (len >= sizeof(struct sockaddr_in) && sa->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 4;
    }
    if (len >= sizeof(struct sockaddr_in6) && sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        /* an IPv4 client on a dual-stack socket is the same client as over IPv4 */
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            memcpy(out, a->s6_addr + 12, 4);
            return 4;
        }
        memcpy(out, a->s6_addr, 16);
        return 16;
    }
    return 0;
}

/* A seeded multiply-xorshift over the key's bytes (not cryptographic: it only spreads chains). */
static uint32_t hash_key(uint64_t seed, const uint8_t *key, size_t len)
{
    uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ULL);
    for (size_t i = 0; i < len; i++) {
        h = (h ^ key[i]) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    h *= 0xbf58476d1ce4e5b9ULL;
    return (uint32_t)(h ^ (h >> 32));
}

mg_clients_t *mg_clients_new(void)
{
    mg_clients_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    if (getrandom(&t->seed, sizeof(t->seed), 0) != sizeof(t->seed))
        t->seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < SHARDS; i++)
        pthread_mutex_init(&t->shards[i].lock, NULL);
    return t;
}

void mg_clients_free(mg_clients_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < SHARDS; i++) {
        shard_t *s = &t->shards[i];
        for (size_t b = 0; b < s->num_buckets; b++) {
            while (s->buckets[b] != NULL) {
                mg_client_t *c = s->buckets[b];
                s->buckets[b] = c->next;
                free(c);
            }
        }
        free(s->buckets);
        pthread_mutex_destroy(&s->lock);
    }
    free(t);
}

/* Doubles the buckets once there are more entries than buckets; keeps the old ones when out of
 * memory (chains grow longer, nothing is lost). */
static void grow(shard_t *s)
{
    size_t n = s->num_buckets != 0 ? s->num_buckets * 2 : MIN_BUCKETS;
    mg_client_t **buckets = calloc(n, sizeof(*buckets));
    if (buckets == NULL)
        return;
    for (size_t b = 0; b < s->num_buckets; b++) {
        while (s->buckets[b] != NULL) {
            mg_client_t *c = s->buckets[b];
            s->buckets[b] = c->next;
            c->next = buckets[(c->hash / SHARDS) & (n - 1)];
            buckets[(c->hash / SHARDS) & (n - 1)] = c;
        }
    }
    free(s->buckets);
    s->buckets = buckets;
    s->num_buckets = n;
}

static mg_client_t **find(shard_t *s, uint32_t hash, const uint8_t *key, size_t len)
{
    mg_client_t **at = &s->buckets[(hash / SHARDS) & (s->num_buckets - 1)];
    while (*at != NULL && !((*at)->hash == hash && (*at)->len == len && memcmp((*at)->addr, key, len) == 0))
        at = &(*at)->next;
    return at;
}

/* The entry of `key` with one more connection, made when missing; NULL when out of memory. */
static mg_client_t *add(shard_t *s, uint32_t hash, const uint8_t *key, size_t len, unsigned cap, int *refused)
{
    if (s->size >= s->num_buckets)
        grow(s);
    if (s->num_buckets == 0)
        return NULL;
    mg_client_t **at = find(s, hash, key, len);
    if (*at != NULL) {
        if (cap != 0 && (*at)->count >= cap) {
            *refused = 1;
            return NULL;
        }
        (*at)->count++;
        return *at;
    }
    mg_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    *c = (mg_client_t){.hash = hash, .count = 1, .len = (uint8_t)len};
    memcpy(c->addr, key, len);
    *at = c;
    s->size++;
    return c;
}

mg_client_t *mg_clients_acquire(mg_clients_t *t, const struct sockaddr *sa, socklen_t salen, unsigned cap, int *refused)
{
    uint8_t key[16];
    int len = mg_client_key(sa, salen, key);
    *refused = 0;
    if (t == NULL || len == 0)
        return NULL;
    uint32_t hash = hash_key(t->seed, key, (size_t)len);
    shard_t *s = &t->shards[hash % SHARDS];
    pthread_mutex_lock(&s->lock);
    mg_client_t *c = add(s, hash, key, (size_t)len, cap, refused);
    pthread_mutex_unlock(&s->lock);
    return c;
}

void mg_clients_release(mg_clients_t *t, mg_client_t *c)
{
    if (c == NULL)
        return;
    shard_t *s = &t->shards[c->hash % SHARDS];
    pthread_mutex_lock(&s->lock);
    if (--c->count == 0) {
        *find(s, c->hash, c->addr, c->len) = c->next;
        s->size--;
        free(c);
    }
    pthread_mutex_unlock(&s->lock);
}

unsigned mg_client_connections(mg_clients_t *t, mg_client_t *c)
{
    shard_t *s = &t->shards[c->hash % SHARDS];
    pthread_mutex_lock(&s->lock);
    unsigned n = c->count;
    pthread_mutex_unlock(&s->lock);
    return n;
}

size_t mg_clients_size(mg_clients_t *t)
{
    size_t n = 0;
    for (size_t i = 0; i < SHARDS; i++) {
        pthread_mutex_lock(&t->shards[i].lock);
        n += t->shards[i].size;
        pthread_mutex_unlock(&t->shards[i].lock);
    }
    return n;
}
