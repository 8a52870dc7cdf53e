/* (to be folded into gateway/auth/internal.h at merge) */
#ifndef MG_GATEWAY_AUTH_INTERNAL_RT_H
#define MG_GATEWAY_AUTH_INTERNAL_RT_H

#include "gateway/auth/auth.h"

#define MG_AUTH_HASH_LEN 32 /* SHA-256 */

/* What a cached verification is valid for: the token's hash, under one configuration's
 * authenticator and one generation of its keys. */
typedef struct mg_auth_cache_key {
    uint8_t hash[MG_AUTH_HASH_LEN];
    uint64_t conf_generation;
    const mg_authenticator_t *by;
    uint64_t keys_generation;
} mg_auth_cache_key_t;

/* SHA-256 of token[0..len) into key->hash, with the cache's own digest context (no lookup of the
 * algorithm per call). */
void mg__auth_cache_hash(mg_auth_cache_t *cache, const char *token, size_t len, mg_auth_cache_key_t *key);
/* The identity verified under `key`, still valid at `now_ms`, one reference for the caller; NULL
 * (a miss) otherwise. */
mg_identity_t *mg__auth_cache_find(mg_auth_cache_t *cache, const mg_auth_cache_key_t *key, int64_t now_ms);
/* Keeps `id` (one more reference) under `key` until `expires_ms`. */
void mg__auth_cache_put(mg_auth_cache_t *cache, const mg_auth_cache_key_t *key, mg_identity_t *id, int64_t expires_ms);

#endif
