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

#define MG_KEYSET_MAX_KEYS 100         /* keys in one set; a larger set is refused whole */
#define MG_KEYSET_MAX_BYTES (1u << 20) /* a JWKS document larger than this is refused */
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
mg_keyset_t *mg_keyset_parse(const char *json, size_t len, size_t *skipped, char *warn, size_t warnsize, char *err, size_t errsize);
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
    size_t num_audiences;   /* 0: `aud` is not checked */
    unsigned algorithms;    /* MG_JWT_ALG_BIT()s */
    int64_t clock_skew;     /* seconds */
    int require_exp;        /* a token without `exp` is refused */
    size_t max_token_bytes; /* a longer token is refused unread */
    const uint8_t *secret;  /* HS256/384/512 verify with this (secret_file), never with a key of the set */
    size_t secret_len;      /* 0: no secret, HS* tokens are refused as unknown key */
} mg_jwt_policy_t;

#define MG_JWT_MAX_KID 128 /* bytes of a `kid`; longer is malformed */
#define MG_JWT_MAX_TRIES 4 /* keys tried for a token without `kid` */

typedef struct mg_jwt_result {
    mg_auth_reason_t reason;
    mg_identity_t *identity;      /* MG_AUTH_OK: the claims, one reference for the caller */
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
/* The command line of `matchgate hash-key` (after the word "hash-key"); returns the exit status
 * (cli.c). */
int mg_auth_hash_key_main(int argc, char **argv);

/* ---------------------------------------------------------------------------------------
 * Authenticators as configured (the top-level `auth:`, read by gateway/config/auth.c) and their
 * keys at run time (keyring.c).
 */

/* A JWKS's current key set, shared by the workers and replaced whole by fetches (keyring.c). */
typedef struct mg_keyring mg_keyring_t;
/* One reference to a key set taken from a keyring (keyring.c). */
typedef struct mg_keys mg_keys_t;

typedef enum mg_auth_kind {
    MG_AUTH_KIND_JWT,
    MG_AUTH_KIND_API_KEY,
} mg_auth_kind_t;

/* Where a credential is read: `{header: N, prefix: P}`, `{cookie: N}`, `{query: N}`. */
typedef enum mg_auth_source_kind {
    MG_AUTH_FROM_HEADER,
    MG_AUTH_FROM_COOKIE,
    MG_AUTH_FROM_QUERY,
} mg_auth_source_kind_t;

typedef struct mg_auth_source {
    mg_auth_source_kind_t kind;
    mg_str_t name;   /* owned, NUL-terminated; a header's in lower case */
    mg_str_t prefix; /* header only: what precedes the credential ("Bearer ", compared without case); may be empty */
} mg_auth_source_t;

/* forward_claims: the claim `claim` goes to the backend as header `header`. */
typedef struct mg_forward_claim {
    mg_str_t claim;  /* a dotted name; owned */
    mg_str_t header; /* lower case; owned */
} mg_forward_claim_t;

/* Outcome counters by worker shard (like the route hits: no line shared between two workers). */
#define MG_AUTH_STAT_SHARDS 8

typedef struct mg_authenticator {
    char *name;
    unsigned index; /* its place under `auth:` (a route's `accept` bits) */
    mg_auth_kind_t kind;
    char *realm; /* WWW-Authenticate's realm */
    mg_auth_source_t *sources;
    size_t num_sources;
    mg_forward_claim_t *forward_claims;
    size_t num_forward_claims;
    int forward_token; /* 0: the credential is removed before the request goes on */
    /* jwt */
    mg_jwt_policy_t policy; /* its strings point into the fields below */
    char *issuer;
    char **audiences;
    size_t num_audiences;
    char *secret_file; /* resolved path (printed; the secret never is) */
    uint8_t *secret;   /* secret_file's bytes (HS*) */
    size_t secret_len;
    char *jwks_file; /* resolved; NULL: keys from jwks_url (or none: secret only) */
    char *jwks_url;
    uint64_t refresh_ms, min_refresh_ms, timeout_ms; /* jwks_url */
    uint64_t cache_ttl_ms;                           /* a verified token is kept at most this long; 0: not cached */
    mg_keyring_t *keys;                              /* jwks: the current set (file: the one read at load); NULL: none */
    /* api_key */
    char *keys_file;
    mg_apikeys_t *apikeys;
    /* outcomes: [shard][reason] (MG_AUTH_OK counts verified credentials) */
    _Alignas(64) atomic_uint_fast64_t outcomes[MG_AUTH_STAT_SHARDS][MG_AUTH_NUM_REASONS];
} mg_authenticator_t;

#define MG_AUTH_MAX_AUTHENTICATORS 64 /* a route's `accept` is a 64-bit mask */
#define MG_AUTH_DEFAULT_CACHE_ENTRIES 10000
#define MG_AUTH_DEFAULT_MAX_TOKEN_BYTES 8192

typedef struct mg_auth_conf {
    mg_authenticator_t **authenticators; /* in declaration order (the first whose source is present decides) */
    size_t num_authenticators;
    mg_str_t *strip_headers; /* every forward_claims header: removed from every request, then set from a verified one */
    size_t num_strip_headers;
    size_t cache_entries; /* verified tokens kept per worker (limits.auth_cache_entries) */
} mg_auth_conf_t;

/* The authenticator named `name`, or NULL. */
const mg_authenticator_t *mg_auth_find(const mg_auth_conf_t *ac, const char *name);
/* Frees what `ac` holds (not `ac` itself). */
void mg_auth_conf_free(mg_auth_conf_t *ac);
/* Counts one outcome of `a` on worker `worker` (relaxed, any thread). */
static inline void mg_auth_count(const mg_authenticator_t *a, unsigned worker, mg_auth_reason_t reason)
{
    mg_authenticator_t *w = (mg_authenticator_t *)a; /* the counters are the one mutable part */
    atomic_fetch_add_explicit(&w->outcomes[worker % MG_AUTH_STAT_SHARDS][reason], 1, memory_order_relaxed);
}
/* The outcomes of `reason` summed over the shards. */
uint64_t mg_auth_outcomes(const mg_authenticator_t *a, mg_auth_reason_t reason);

/* ---------------------------------------------------------------------------------------
 * Keyrings (keyring.c): the key set an authenticator verifies with now, replaced whole when its
 * JWKS is fetched again. Workers take a reference for one verification (on a cache miss only);
 * the fetcher installs new sets. Any thread.
 */
typedef struct mg_keyring_stats {
    size_t keys;                /* in the current set */
    uint64_t fetches, failures; /* attempts that installed a set / that kept the old one */
    int64_t last_good_ms;       /* CLOCK_REALTIME ms of the last set installed; 0: never */
    uint64_t generation;        /* +1 each time a set is installed */
} mg_keyring_stats_t;

mg_keyring_t *mg_keyring_new(void);
void mg_keyring_free(mg_keyring_t *ring);
/* Installs `ks` (taken; NULL empties the ring) as the current set: new verifications use it, and
 * tokens verified with an earlier set are verified again (the generation moves). */
void mg_keyring_install(mg_keyring_t *ring, mg_keyset_t *ks, int64_t now_ms);
/* Makes `ring` hold `from`'s current set and counters (a reload that keeps a JWKS url). */
void mg_keyring_adopt(mg_keyring_t *ring, mg_keyring_t *from);
/* Counts a fetch that failed (the current set stays). */
void mg_keyring_failed(mg_keyring_t *ring);
/* The current set, one reference (NULL when the ring holds none); give it back with mg_keys_release. */
mg_keys_t *mg_keyring_acquire(mg_keyring_t *ring);
const mg_keyset_t *mg_keys_set(const mg_keys_t *keys);
void mg_keys_release(mg_keys_t *keys);
/* The current generation, without a lock (cache entries remember the one they were verified under). */
uint64_t mg_keyring_generation(const mg_keyring_t *ring);
void mg_keyring_stats(mg_keyring_t *ring, mg_keyring_stats_t *out);
/*
 * A request met a key the set lacks (an unknown kid) or the ring is empty: asks the fetcher for
 * the set again, at most once per `min_interval_ms` (min_refresh), so that a flood of invented
 * kids costs one fetch. Cheap when a fetch is already asked for. Returns 1 when this call asked.
 */
int mg_keyring_want(mg_keyring_t *ring, uint64_t min_interval_ms, int64_t now_ms);
/* The fetcher's side: the ticket of the ask (nonzero; the ask cleared) when a fetch was asked for
 * since the last call, else 0. Once the fetch has ended, whatever its outcome (a set installed or
 * the old one kept), the fetcher calls mg_keyring_answer with it. */
uint64_t mg_keyring_take_want(mg_keyring_t *ring);
void mg_keyring_answer(mg_keyring_t *ring, uint64_t ticket);
/* The ticket of the latest ask while a fetch that answers it is still to end (asked, or on its
 * way), else 0; and whether `ticket` has been answered (a load of an atomic: a waiting request
 * polls it). */
uint64_t mg_keyring_pending(const mg_keyring_t *ring);
int mg_keyring_answered(const mg_keyring_t *ring, uint64_t ticket);
/* Registers the condition the fetcher sleeps on, signalled by mg_keyring_want (NULL: none). */
void mg_keyring_set_waker(mg_keyring_t *ring, pthread_mutex_t *lock, pthread_cond_t *cond);

/* ---------------------------------------------------------------------------------------
 * At request time (authenticate.c, cache.c)
 */

/* A worker's verified tokens: bounded, keyed by the SHA-256 of the token (with the configuration
 * and key set generations it was verified under), each valid until the earlier of its `exp` and
 * its authenticator's cache_ttl. One per worker thread: not shared. */
typedef struct mg_auth_cache mg_auth_cache_t;

/* A cache of about `entries` tokens (0: MG_AUTH_DEFAULT_CACHE_ENTRIES); NULL when out of memory. */
mg_auth_cache_t *mg_auth_cache_new(size_t entries);
void mg_auth_cache_free(mg_auth_cache_t *cache);
/* Bytes a cached token costs besides its identity (its entry), for the docs and the benchmark. */
size_t mg_auth_cache_entry_bytes(void);

typedef struct mg_auth_cache_stats {
    uint64_t hits, misses, evictions;
    size_t held;
} mg_auth_cache_stats_t;

void mg_auth_cache_stats(const mg_auth_cache_t *cache, mg_auth_cache_stats_t *out);

typedef enum mg_auth_outcome {
    MG_AUTH_ANONYMOUS,   /* no authenticator's source is present */
    MG_AUTH_VERIFIED,    /* identity holds the caller */
    MG_AUTH_FAILED,      /* 401: `reason` says why */
    MG_AUTH_UNAVAILABLE, /* 503: the authenticator has no usable key (MG_AUTH_NO_KEYS) */
} mg_auth_outcome_t;

typedef struct mg_auth_result {
    mg_auth_outcome_t outcome;
    const mg_authenticator_t *by; /* the authenticator whose source was present; NULL when anonymous */
    size_t source;                /* which of by->sources held it */
    mg_auth_reason_t reason;
    mg_identity_t *identity; /* MG_AUTH_VERIFIED: one reference, the caller's to release */
    int cached;              /* the verification came from the cache */
    /* nonzero: the token names a kid the keys lack (or there are no keys) and a fetch of by->keys
     * is on its way (mg_keyring_pending's ticket); the outcome is not counted yet */
    uint64_t keys_ticket;
} mg_auth_result_t;

/*
 * Finds the request's credential and verifies it: the first authenticator, in declaration order,
 * one of whose sources is present in `ctx` (headers, the Cookie header, the query) decides. A
 * token is verified through `cache` (NULL: every time) at `now_ms` (CLOCK_REALTIME ms). An
 * unknown kid or an empty key set asks for a new fetch (mg_keyring_want). Counts the outcome on
 * the authenticator (shard `worker`), but for a result with a keys_ticket: the caller may wait
 * for that fetch (mg_keyring_answered) and authenticate again, or take the result as it is and
 * count it with mg_auth_settle.
 */
void mg_auth_authenticate(const mg_auth_conf_t *ac, mg_auth_cache_t *cache, uint64_t conf_generation, const mg_ctx_t *ctx,
                          int64_t now_ms, unsigned worker, mg_auth_result_t *res);
/* Counts the outcome of a result with a keys_ticket, which is cleared (nothing otherwise). */
void mg_auth_settle(mg_auth_result_t *res, unsigned worker);

/* The credential of source `src` in ctx (the header's value past its prefix, the cookie's value,
 * the query parameter's value percent-decoded into ctx->alloc memory); base NULL when absent. */
mg_str_t mg_auth_source_value(const mg_auth_source_t *src, const mg_ctx_t *ctx);

/* ---------------------------------------------------------------------------------------
 * The route's verdict (decide.c): once the route is chosen, whether its `auth:` and `require:`
 * let the request on, and if not, the answer (RFC 6750 3 for the challenge).
 */
struct mg_route;

typedef struct mg_auth_decision {
    int status;                          /* 0: the request goes on; else 401, 403, 503, or 400 (a requirement undecided) */
    const char *code;                    /* X-Matchgate-Error: unauthenticated, forbidden, auth-unavailable, bad-request */
    const char *reason;                  /* the body's sentence (never the token) */
    const char *error;                   /* the challenge's error: "invalid_token", "insufficient_scope"; NULL: a bare challenge */
    const mg_authenticator_t *challenge; /* whose scheme and realm WWW-Authenticate names; NULL: no challenge */
    int anonymous;                       /* the request goes on without claims (a failed credential on an auth: none route) */
} mg_auth_decision_t;

/*
 * What `route` makes of the verification `res`: its `auth:` mode (mg_route_auth), the
 * authenticators it accepts, then its `require:` tested on `ctx` (which holds the claims). A
 * credential that failed (or could not be checked) only passes a route with `auth: none`, as
 * anonymous. `ac` gives the challenge of a request that sent no credential.
 */
void mg_auth_decide(const mg_auth_conf_t *ac, const mg_auth_result_t *res, const struct mg_route *route, mg_ctx_t *ctx,
                    mg_auth_decision_t *d);
/* The answer a credential that failed (401 invalid_token) or could not be checked (503
 * auth-unavailable) gets wherever a credential is needed: 1 with *d filled, 0 for any other
 * outcome. */
int mg_auth_refusal(const mg_auth_result_t *res, mg_auth_decision_t *d);
/* The WWW-Authenticate value of a refusal with a challenge: `Bearer realm="R"` (RFC 6750 3.1: no
 * error when no credential came), with `, error="E", error_description="D"` when there is one;
 * `ApiKey realm="R"...` for an api_key authenticator. snprintf-style. */
size_t mg_auth_challenge(const mg_auth_decision_t *d, char *buf, size_t size);

/*
 * What the backend gets of the credential (forward.c), applied to the context before the route's
 * actions: every header named by some authenticator's forward_claims is removed, whatever the
 * client sent under it; then the verifying authenticator's forward_claims set them from the
 * claims (a claim that is absent, not a scalar, or not a valid field value sets nothing); and with
 * forward_token: false the credential itself is removed (its header, its cookie, its query
 * parameter). Returns 1 when ctx->headers (a new array in ctx->alloc memory) or ctx->query
 * changed, else 0.
 */
int mg_auth_edit_request(const mg_auth_conf_t *ac, const mg_auth_result_t *res, mg_ctx_t *ctx);

/* ---------------------------------------------------------------------------------------
 * The JWKS fetcher (fetch.c): the gateway's side of the room, with libcurl, on a thread of its
 * own (part of the gateway's library, not of the room's h2o- and curl-free one).
 */
struct mg_config;
typedef struct mg_auth_fetcher mg_auth_fetcher_t;

/* Fetches every JWKS url of the configuration `acquire` gives (one reference per call, released by
 * the fetcher) once, then starts the thread that keeps them fresh. NULL when the thread cannot
 * start. libcurl's global state must be initialised. */
mg_auth_fetcher_t *mg_auth_fetcher_start(struct mg_config *(*acquire)(void *arg), void *arg);
/* Stops the thread and frees the fetcher; NULL is ignored. */
void mg_auth_fetcher_stop(mg_auth_fetcher_t *f);

#endif
