/*
 * gateway/auth: who is calling. Named authenticators (the top-level `auth:`), of kind `jwt`
 * (JWS-signed tokens checked against JWKS keys from a file or a URL, or an HMAC secret) or
 * `api_key` (keys kept as SHA-256 hashes in a keys file); the identity a verified credential
 * gives (its claims, an API key's tenant); and what the request path needs: the credential found
 * and verified once per request, through a bounded per-worker cache of verified tokens.
 *
 * The room's library knows no h2o and no libcurl (the configuration and the fuzz targets link
 * it); fetching JWKS keys from a URL is fetch.c's, on a thread of its own, off the request path.
 * Cryptography and base64 are the JOSE library's (cjose) and OpenSSL's: nothing here signs,
 * verifies or decodes by hand. docs/configuration.md ("auth") is the user's reference.
 */
#ifndef MG_GATEWAY_AUTH_H
#define MG_GATEWAY_AUTH_H

#include <stdatomic.h>
#include <stdint.h>
#include <pthread.h>
#include "matchers/matchers.h"

/* ---------------------------------------------------------------------------------------
 * Outcomes of a verification: why a credential was refused (the 401's error_description, the
 * metrics' `reason` label).
 */
typedef enum mg_auth_reason {
    MG_AUTH_OK,
    MG_AUTH_MALFORMED,        /* not three parts, bad base64url, header or payload not a JSON object, duplicate members, too deep */
    MG_AUTH_TOO_LARGE,        /* longer than max_token_bytes */
    MG_AUTH_ALG_NOT_ALLOWED,  /* `alg` missing, not in `algorithms` (`none` never is), or unknown */
    MG_AUTH_CRIT,             /* `crit` names an extension we do not understand (RFC 7515 4.1.11) */
    MG_AUTH_UNKNOWN_KEY,      /* no key of the set has the token's `kid` (or fits its `alg`) */
    MG_AUTH_BAD_SIGNATURE,    /* the signature does not verify */
    MG_AUTH_BAD_CLAIM,        /* exp, nbf or iat not a NumericDate, iss or aud of the wrong type */
    MG_AUTH_MISSING_EXP,      /* no `exp` and require_exp */
    MG_AUTH_EXPIRED,          /* exp + clock_skew is past */
    MG_AUTH_NOT_YET_VALID,    /* nbf - clock_skew is ahead */
    MG_AUTH_ISSUED_IN_FUTURE, /* iat - clock_skew is ahead */
    MG_AUTH_WRONG_ISSUER,     /* iss missing or not `issuer` */
    MG_AUTH_WRONG_AUDIENCE,   /* aud missing or holding none of `audiences` */
    MG_AUTH_UNKNOWN_API_KEY,  /* no key of keys_file hashes to it */
    MG_AUTH_NO_KEYS,          /* the authenticator holds no usable key yet: 503 auth-unavailable, not 401 */
    MG_AUTH_NUM_REASONS
} mg_auth_reason_t;

/* A sentence for the client (error_description, the 401's body): "the token has expired". Never
 * holds the token or anything from it. */
const char *mg_auth_reason_text(mg_auth_reason_t reason);
/* A label for /metrics: "ok", "expired", "bad_signature", ... */
const char *mg_auth_reason_label(mg_auth_reason_t reason);

/* ---------------------------------------------------------------------------------------
 * Identities (claims.c): what a verified credential says of its caller. One allocation each,
 * reference-counted (atomically): the verified-token cache holds one reference, each request or
 * WebSocket session that uses it holds another.
 */
#define MG_CLAIMS_MAX_ENTRIES 512 /* flattened entries of one payload (mg_claims_t) */
#define MG_CLAIMS_MAX_NAME 256    /* bytes of one dotted name */
#define MG_CLAIMS_MAX_DEPTH 16    /* objects and arrays nested in a payload */

typedef struct mg_identity {
    atomic_uint refs;
    mg_claims_t claims; /* sorted, flattened (see mg_claims_t) */
    mg_str_t tenant;    /* an API key's tenant; empty for a token */
    mg_str_t sub;       /* the `sub` claim when it is a string (the access log's `sub`); empty otherwise */
    int64_t exp;        /* `exp` in seconds since the epoch; INT64_MAX when there is none */
    size_t bytes;       /* the allocation's size, all of it */
} mg_identity_t;

/*
 * Flattens JSON object `payload` (a jansson json_t *, const; passed as void * so that callers
 * need not include jansson) into a new identity with one reference: every member, nested
 * objects by dotted name, arrays element by element (see mg_claims_t); numbers as their JSON
 * text. `tenant` is copied. NULL when the payload is not an object, holds more than
 * MG_CLAIMS_MAX_ENTRIES entries, a name longer than MG_CLAIMS_MAX_NAME, nesting deeper than
 * MG_CLAIMS_MAX_DEPTH or a string with NUL, or when memory runs out.
 */
mg_identity_t *mg_identity_new(const void *payload, mg_str_t tenant);
mg_identity_t *mg_identity_retain(mg_identity_t *id);
/* Drops one reference; the last one frees it. NULL is ignored. */
void mg_identity_release(mg_identity_t *id);

/* ---------------------------------------------------------------------------------------
 * JWS algorithms and key sets (jwks.c)
 */
typedef enum mg_jwt_alg {
    MG_JWT_RS256,
    MG_JWT_RS384,
    MG_JWT_RS512,
    MG_JWT_PS256,
    MG_JWT_PS384,
    MG_JWT_PS512,
    MG_JWT_ES256,
    MG_JWT_ES384,
    MG_JWT_ES512,
    MG_JWT_EDDSA,
    MG_JWT_HS256,
    MG_JWT_HS384,
    MG_JWT_HS512,
    MG_JWT_NUM_ALGS
} mg_jwt_alg_t;

#define MG_JWT_ALG_BIT(a) (1u << (a))
#define MG_JWT_HS_ALGS (MG_JWT_ALG_BIT(MG_JWT_HS256) | MG_JWT_ALG_BIT(MG_JWT_HS384) | MG_JWT_ALG_BIT(MG_JWT_HS512))
#define MG_JWT_DEFAULT_ALGS (MG_JWT_ALG_BIT(MG_JWT_RS256) | MG_JWT_ALG_BIT(MG_JWT_ES256))

/* "RS256", ... */
const char *mg_jwt_alg_name(mg_jwt_alg_t alg);
/* The algorithm named s[0..len) exactly (case-sensitive: "none", "None", "rs256" are not one), or -1. */
int mg_jwt_alg_parse(const char *s, size_t len);

/* A JWK Set's usable signature keys, immutable once parsed (shared by every worker). */
typedef struct mg_keyset mg_keyset_t;

#define MG_KEYSET_MAX_KEYS 100           /* keys in one set; a larger set is refused whole */
#define MG_KEYSET_MAX_BYTES (1u << 20)   /* a JWKS document larger than this is refused */
#define MG_KEYSET_MIN_RSA_BITS 2048

/*
 * Parses a JWK Set (RFC 7517 5): a JSON object with a "keys" array. Keys used: kty RSA (a modulus
 * of at least MG_KEYSET_MIN_RSA_BITS), EC (P-256, P-384, P-521), OKP (Ed25519); `use` absent or
 * "sig", `key_ops` absent or holding "verify". Other keys (encryption keys, other types and
 * curves, weak RSA keys, malformed members) are skipped: *skipped counts them, and the first
 * one's reason is written to `warn` (may be NULL). Returns NULL with the reason in `err` when the
 * document is larger than MG_KEYSET_MAX_BYTES, is not such an object (duplicate members and
 * nesting past jansson's bound included), holds more than MG_KEYSET_MAX_KEYS keys, or leaves no
 * usable key.
 */
mg_keyset_t *mg_keyset_parse(const char *json, size_t len, size_t *skipped, char *warn, size_t warnsize, char *err,
                             size_t errsize);
/* Keys held. */
size_t mg_keyset_size(const mg_keyset_t *ks);
/* The kid of key `i` ("" when it has none). */
const char *mg_keyset_kid(const mg_keyset_t *ks, size_t i);
void mg_keyset_free(mg_keyset_t *ks);

/* ---------------------------------------------------------------------------------------
 * JWT verification (jwt.c)
 */
typedef struct mg_jwt_policy {
    const char *issuer; /* NULL: `iss` is not checked */
    char *const *audiences;
    size_t num_audiences;    /* 0: `aud` is not checked */
    unsigned algorithms;     /* MG_JWT_ALG_BIT()s */
    int64_t clock_skew;      /* seconds */
    int require_exp;         /* a token without `exp` is refused */
    size_t max_token_bytes;  /* a longer token is refused unread */
    const uint8_t *secret;   /* HS256/384/512 verify with this (secret_file), never with a key of the set */
    size_t secret_len;       /* 0: no secret, HS* tokens are refused as unknown key */
} mg_jwt_policy_t;

#define MG_JWT_MAX_KID 128  /* bytes of a `kid`; longer is malformed */
#define MG_JWT_MAX_TRIES 4  /* keys tried for a token without `kid` */

typedef struct mg_jwt_result {
    mg_auth_reason_t reason;
    mg_identity_t *identity; /* MG_AUTH_OK: the claims, one reference for the caller */
    char kid[MG_JWT_MAX_KID + 1]; /* the token's kid, NUL-terminated, once its header was read ("" without) */
} mg_jwt_result_t;

/*
 * Verifies compact JWS token[0..len) under `policy` at `now` (seconds since the epoch), with the
 * keys of `keys` (may be NULL: none yet) or the policy's secret:
 * - the header and the payload are JSON objects without duplicate members;
 * - `alg` is one of policy->algorithms and fits the key it is checked with: RS* and PS* an RSA key,
 *   ES256/384/512 an EC key on P-256/384/521, EdDSA an Ed25519 key, HS* the secret only; a key's
 *   own `alg`, when it has one, must be the token's;
 * - with a `kid`, only the key of that kid is tried (none: MG_AUTH_UNKNOWN_KEY; no keys at all:
 *   MG_AUTH_NO_KEYS); without one, each fitting key in order, at most MG_JWT_MAX_TRIES;
 * - `crit` present makes the token invalid (we understand no extension); `jku`, `x5u`, `jwk` and
 *   `x5c` are never followed (the keys are the configuration's only);
 * - then the claims: exp (required with policy->require_exp), nbf and iat as NumericDates (an
 *   integer or a fraction below 2^63, never a string), each with clock_skew; iss; aud (a string or
 *   an array of strings).
 * On MG_AUTH_OK out->identity holds the flattened payload. Never allocates for the caller
 * otherwise.
 */
void mg_jwt_verify(const mg_jwt_policy_t *policy, const mg_keyset_t *keys, const char *token, size_t len, int64_t now,
                   mg_jwt_result_t *out);

/* ---------------------------------------------------------------------------------------
 * API keys (apikey.c): keys_file lines "<sha256 of the key, 64 hex digits> <tenant> [claims as
 * a JSON object]"; blank lines and lines starting with '#' are skipped. The file never holds a
 * key in the clear.
 */
typedef struct mg_apikeys mg_apikeys_t;

/*
 * Reads a keys file. Errors name the file's line and column ("keys.txt:3:1: expected 64 hex
 * digits (the SHA-256 of the key), got ..."): a bad hash, a hash given twice, a tenant name that
 * a tenant cannot have (as tenants.identify refuses: empty, over 128 bytes, a control character,
 * '/' or '\', "." or ".."), claims that are not a JSON object. NULL after recording them.
 */
mg_apikeys_t *mg_apikeys_load(const char *path, mg_errors_t *errs);
/* The identity of `key` (the key as the client sent it), not retained (it lives as long as the
 * table), or NULL. The key is hashed (SHA-256) and the hash found by its first bytes, then
 * compared whole in constant time (CRYPTO_memcmp). */
mg_identity_t *mg_apikeys_find(const mg_apikeys_t *keys, const char *key, size_t len);
size_t mg_apikeys_size(const mg_apikeys_t *keys);
void mg_apikeys_free(mg_apikeys_t *keys);
/* `matchgate hash-key`: the keys_file line for `key` ("<hex> <tenant>[ <claims>]\n"), malloc'ed. */
char *mg_apikey_line(const char *key, size_t len, const char *tenant, const char *claims_json);

#endif
