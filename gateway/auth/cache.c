/*
 * The verified-token cache of one worker: a token is verified once per worker, then found by the
 * SHA-256 of its bytes. Buckets of four entries (one cache line of tags, then the entries), the
 * least recently used one replaced; a stale entry (expired, or verified under another
 * configuration or key set) is dropped where it is met. Single-threaded: each worker has its own.
 */
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include "gateway/auth/internal.h"

#define MG_AUTH_WAYS 4

typedef struct mg_auth_entry {
    mg_auth_cache_key_t key;
    mg_identity_t *identity; /* NULL: free */
    int64_t expires_ms;
    uint64_t used; /* the cache's clock when last found or put */
} mg_auth_entry_t;

struct mg_auth_cache {
    mg_auth_entry_t *entries; /* buckets x MG_AUTH_WAYS */
    size_t mask;              /* buckets - 1 */
    uint64_t clock;
    EVP_MD_CTX *md_ctx;
    EVP_MD *sha256;
    mg_auth_cache_stats_t stats;
};

mg_auth_cache_t *mg_auth_cache_new(size_t entries)
{
    size_t buckets = 1;
    mg_auth_cache_t *c = calloc(1, sizeof(*c));
    if (entries == 0)
        entries = MG_AUTH_DEFAULT_CACHE_ENTRIES;
    while (buckets * MG_AUTH_WAYS < entries)
        buckets <<= 1;
    if (c == NULL || (c->entries = calloc(buckets * MG_AUTH_WAYS, sizeof(*c->entries))) == NULL ||
        (c->md_ctx = EVP_MD_CTX_new()) == NULL || (c->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL)) == NULL) {
        mg_auth_cache_free(c);
        return NULL;
    }
    c->mask = buckets - 1;
    return c;
}

static void mg_entry_drop(mg_auth_cache_t *c, mg_auth_entry_t *e)
{
    if (e->identity == NULL)
        return;
    mg_identity_release(e->identity);
    e->identity = NULL;
    c->stats.held--;
}

void mg_auth_cache_free(mg_auth_cache_t *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; c->entries != NULL && i < (c->mask + 1) * MG_AUTH_WAYS; i++)
        mg_entry_drop(c, &c->entries[i]);
    free(c->entries);
    EVP_MD_CTX_free(c->md_ctx);
    EVP_MD_free(c->sha256);
    free(c);
}

size_t mg_auth_cache_entry_bytes(void)
{
    return sizeof(mg_auth_entry_t);
}

void mg_auth_cache_stats(const mg_auth_cache_t *c, mg_auth_cache_stats_t *out)
{
    *out = c->stats;
}

void mg__auth_cache_hash(mg_auth_cache_t *c, const char *token, size_t len, mg_auth_cache_key_t *key)
{
    unsigned int n = 0;
    if (EVP_DigestInit_ex2(c->md_ctx, c->sha256, NULL) != 1 || EVP_DigestUpdate(c->md_ctx, token, len) != 1 ||
        EVP_DigestFinal_ex(c->md_ctx, key->hash, &n) != 1 || n != MG_AUTH_HASH_LEN)
        abort(); /* SHA-256 over memory has no way to fail but running out of it */
}

static mg_auth_entry_t *mg_bucket(mg_auth_cache_t *c, const mg_auth_cache_key_t *key)
{
    uint64_t h;
    memcpy(&h, key->hash, sizeof(h));
    return &c->entries[(h & c->mask) * MG_AUTH_WAYS];
}

static int mg_same_key(const mg_auth_cache_key_t *a, const mg_auth_cache_key_t *b)
{
    return a->by == b->by && a->conf_generation == b->conf_generation && a->keys_generation == b->keys_generation &&
           memcmp(a->hash, b->hash, MG_AUTH_HASH_LEN) == 0;
}

mg_identity_t *mg__auth_cache_find(mg_auth_cache_t *c, const mg_auth_cache_key_t *key, int64_t now_ms)
{
    mg_auth_entry_t *b = mg_bucket(c, key);
    for (int i = 0; i < MG_AUTH_WAYS; i++) {
        mg_auth_entry_t *e = &b[i];
        if (e->identity == NULL || memcmp(e->key.hash, key->hash, MG_AUTH_HASH_LEN) != 0)
            continue;
        /* same token, but verified under other keys or settings, or expired: verify it again */
        if (!mg_same_key(&e->key, key) || now_ms >= e->expires_ms) {
            mg_entry_drop(c, e);
            break;
        }
        e->used = ++c->clock;
        c->stats.hits++;
        return mg_identity_retain(e->identity);
    }
    c->stats.misses++;
    return NULL;
}

void mg__auth_cache_put(mg_auth_cache_t *c, const mg_auth_cache_key_t *key, mg_identity_t *id, int64_t expires_ms)
{
    mg_auth_entry_t *b = mg_bucket(c, key), *victim = &b[0];
    for (int i = 0; i < MG_AUTH_WAYS; i++) {
        if (b[i].identity == NULL) {
            victim = &b[i];
            break;
        }
        if (b[i].used < victim->used)
            victim = &b[i];
    }
    if (victim->identity != NULL)
        c->stats.evictions++;
    mg_entry_drop(c, victim);
    *victim = (mg_auth_entry_t){.key = *key, .identity = mg_identity_retain(id), .expires_ms = expires_ms, .used = ++c->clock};
    c->stats.held++;
}
