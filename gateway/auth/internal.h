/*
 * gateway/auth's private parts: what its files share and nothing else includes (the unit tests
 * excepted). The public door is auth.h.
 */
#ifndef MG_GATEWAY_AUTH_INTERNAL_H
#define MG_GATEWAY_AUTH_INTERNAL_H

#include <cjose/cjose.h>
#include <jansson.h>
#include <openssl/evp.h>
#include "gateway/auth/auth.h"

/* The key types of a JWK Set we verify with (jwks.c). */
typedef enum mg__kty {
    MG__KTY_RSA,
    MG__KTY_EC,
    MG__KTY_OKP,
} mg__kty_t;

/* One usable key of a set, immutable once parsed. */
typedef struct mg__key {
    char kid[MG_JWT_MAX_KID + 1]; /* "" without one; never holds NUL */
    size_t kid_len;
    mg__kty_t kty;
    unsigned algs;     /* MG_JWT_ALG_BITs it may verify: its type's (and curve's), narrowed to its own `alg` */
    size_t sig_len;    /* bytes of every signature it made: the modulus's, twice a coordinate's, 64 */
    cjose_jwk_t *jwk;  /* RSA and EC */
    EVP_PKEY *ed25519; /* OKP */
} mg__key_t;

struct mg_keyset {
    size_t size;
    mg__key_t keys[];
};

/* 1 when s[0..len) is base64url text as JWS writes it: A-Z a-z 0-9 '-' '_', no '=' padding,
 * and a length that a whole number of bytes encodes to (len % 4 != 1). 0 for "". */
int mg__is_base64url(const char *s, size_t len);

/* A NumericDate (RFC 7519 2): a JSON integer or real in [0, 2^63). 0 with the second it falls
 * in (*secs, the floor) and the first second not before it (*secs_ceil; equal for an integer);
 * -1 for anything else (a string, a negative number, 1e19). `secs_ceil` may be NULL. (claims.c) */
int mg__numeric_date(const json_t *v, int64_t *secs, int64_t *secs_ceil);

/* Ed25519 (eddsa.c), through OpenSSL's EVP: the public key of raw bytes x[0..len) (32 of them),
 * or NULL; and 1 when sig[0..sig_len) is key's signature of msg[0..len), 0 otherwise. */
EVP_PKEY *mg__eddsa_public_key(const uint8_t *x, size_t len);
int mg__eddsa_verify(EVP_PKEY *key, const uint8_t *msg, size_t len, const uint8_t *sig, size_t sig_len);

/* ---------------------------------------------------------------------------------------
 * The verified-token cache's inside (cache.c), for authenticate.c and the benchmark
 */
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
