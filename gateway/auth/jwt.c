/*
 * JWT verification (RFC 7519 over RFC 7515's compact serialization), in the order that keeps
 * unauthenticated input away from most of the code: the token's shape and base64url alphabet,
 * then its header (a JSON object without duplicate members: `kid`, `crit`, `alg`), then the
 * signature with a key the configuration chose, and only then the payload and its claims.
 *
 * Which key may check which algorithm is decided here and in jwks.c, never by cjose: an RSA key
 * only meets RS* and PS*, an EC key only the ES* of its curve, an Ed25519 key only EdDSA, and
 * HS* only the policy's secret. The signature's length is checked against the key's before any
 * cryptography runs. cjose verifies RS, PS, ES and HS signatures; eddsa.c verifies EdDSA.
 *
 * Claims: exp, nbf and iat are NumericDates (mg__numeric_date); `iss` or `aud` of the wrong type
 * (not a string; an `aud` array holding something else) is MG_AUTH_BAD_CLAIM when that claim is
 * checked, and is not looked at otherwise. A header's `kid` of "" is a kid like another: it
 * selects the keys without one.
 */
#include <string.h>
#include "gateway/auth/internal.h"

/* A token being verified: its parts, and what was decoded of them (freed by mg_jwt_dispose). */
typedef struct mg_jwt {
    mg_str_t header, payload, signature; /* the base64url texts */
    json_t *hdr, *claims;
    uint8_t *sig;
    size_t sig_len;
    mg_jwt_alg_t alg;
    int has_kid;
    cjose_jws_t *jws; /* imported once, for the first key cjose checks */
} mg_jwt_t;

int mg__is_base64url(const char *s, size_t len)
{
    if (len == 0 || len % 4 == 1)
        return 0;
    for (size_t i = 0; i != len; ++i) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

/* Three non-empty base64url parts separated by two dots (a third dot is not base64url). */
static int mg_jwt_split(const char *token, size_t len, mg_jwt_t *t)
{
    const char *dot1 = len != 0 ? memchr(token, '.', len) : NULL;
    if (dot1 == NULL)
        return -1;
    const char *rest = dot1 + 1, *end = token + len;
    const char *dot2 = memchr(rest, '.', (size_t)(end - rest));
    if (dot2 == NULL)
        return -1;
    t->header = mg_str(token, (size_t)(dot1 - token));
    t->payload = mg_str(rest, (size_t)(dot2 - rest));
    t->signature = mg_str(dot2 + 1, (size_t)(end - dot2 - 1));
    int ok = mg__is_base64url(t->header.base, t->header.len) && mg__is_base64url(t->payload.base, t->payload.len) &&
             mg__is_base64url(t->signature.base, t->signature.len);
    return ok ? 0 : -1;
}

/* The JSON object a part encodes (duplicate members, nesting past jansson's bound and trailing
 * bytes refused), or NULL. */
static json_t *mg_jwt_object(mg_str_t part)
{
    uint8_t *raw = NULL;
    size_t len = 0;
    cjose_err err;
    if (!cjose_base64url_decode(part.base, part.len, &raw, &len, &err))
        return NULL;
    json_t *v = json_loadb((const char *)raw, len, JSON_REJECT_DUPLICATES, NULL);
    cjose_get_dealloc()(raw);
    if (v != NULL && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

static mg_auth_reason_t mg_jwt_read_header(const mg_jwt_policy_t *policy, mg_jwt_t *t, mg_jwt_result_t *out)
{
    const json_t *kid = json_object_get(t->hdr, "kid"), *alg = json_object_get(t->hdr, "alg");
    if (kid != NULL) {
        size_t len = json_string_length(kid);
        if (!json_is_string(kid) || len > MG_JWT_MAX_KID || memchr(json_string_value(kid), '\0', len) != NULL)
            return MG_AUTH_MALFORMED;
        memcpy(out->kid, json_string_value(kid), len);
        out->kid[len] = '\0';
        t->has_kid = 1;
    }
    /* we understand no extension, so any `crit` names one we do not (RFC 7515 4.1.11) */
    if (json_object_get(t->hdr, "crit") != NULL)
        return MG_AUTH_CRIT;
    int a = json_is_string(alg) ? mg_jwt_alg_parse(json_string_value(alg), json_string_length(alg)) : -1;
    if (a < 0 || !(policy->algorithms & MG_JWT_ALG_BIT(a)))
        return MG_AUTH_ALG_NOT_ALLOWED;
    t->alg = (mg_jwt_alg_t)a;
    return MG_AUTH_OK;
}

/* cjose's verdict with `jwk`, whose type fits t->alg (checked by the callers). */
static int mg_jwt_cjose_verify(mg_jwt_t *t, const cjose_jwk_t *jwk)
{
    cjose_err err;
    if (t->jws == NULL) {
        size_t len = t->header.len + 1 + t->payload.len + 1 + t->signature.len;
        t->jws = cjose_jws_import(t->header.base, len, &err);
    }
    return t->jws != NULL && cjose_jws_verify(t->jws, jwk, &err);
}

static int mg_jwt_verify_with(mg_jwt_t *t, const mg__key_t *key)
{
    if (t->sig_len != key->sig_len)
        return 0;
    if (key->kty == MG__KTY_OKP) /* the signing input: the ASCII header "." payload */
        return mg__eddsa_verify(key->ed25519, (const uint8_t *)t->header.base, t->header.len + 1 + t->payload.len, t->sig,
                                t->sig_len);
    return mg_jwt_cjose_verify(t, key->jwk);
}

/* HS256/384/512: the policy's secret as an oct key, never a key of the set. */
static mg_auth_reason_t mg_jwt_check_secret(const mg_jwt_policy_t *policy, mg_jwt_t *t)
{
    size_t mac_len = t->alg == MG_JWT_HS256 ? 32 : t->alg == MG_JWT_HS384 ? 48 : 64;
    cjose_err err;
    if (policy->secret == NULL || policy->secret_len == 0)
        return MG_AUTH_UNKNOWN_KEY;
    if (t->sig_len != mac_len)
        return MG_AUTH_BAD_SIGNATURE;
    cjose_jwk_t *jwk = cjose_jwk_create_oct_spec(policy->secret, policy->secret_len, &err);
    int verified = jwk != NULL && mg_jwt_cjose_verify(t, jwk);
    cjose_jwk_release(jwk);
    return verified ? MG_AUTH_OK : MG_AUTH_BAD_SIGNATURE;
}

/* The keys to try, in the set's order: those of the token's kid (all, without one) that fit
 * its alg, at most MG_JWT_MAX_TRIES. */
static size_t mg_jwt_pick_keys(const mg_keyset_t *keys, const mg_jwt_t *t, const char *kid, const mg__key_t **picked)
{
    size_t n = 0, kid_len = strlen(kid);
    for (size_t i = 0; i != keys->size && n != MG_JWT_MAX_TRIES; ++i) {
        const mg__key_t *key = &keys->keys[i];
        if (t->has_kid && (key->kid_len != kid_len || memcmp(key->kid, kid, kid_len) != 0))
            continue;
        if (key->algs & MG_JWT_ALG_BIT(t->alg))
            picked[n++] = key;
    }
    return n;
}

static mg_auth_reason_t mg_jwt_check_signature(const mg_jwt_policy_t *policy, const mg_keyset_t *keys, mg_jwt_t *t, const char *kid)
{
    const mg__key_t *picked[MG_JWT_MAX_TRIES];
    cjose_err err;
    if (!cjose_base64url_decode(t->signature.base, t->signature.len, &t->sig, &t->sig_len, &err))
        return MG_AUTH_MALFORMED;
    if (MG_JWT_HS_ALGS & MG_JWT_ALG_BIT(t->alg))
        return mg_jwt_check_secret(policy, t);
    if (keys == NULL || keys->size == 0)
        return MG_AUTH_NO_KEYS;
    size_t n = mg_jwt_pick_keys(keys, t, kid, picked);
    if (n == 0)
        return MG_AUTH_UNKNOWN_KEY;
    for (size_t i = 0; i != n; ++i)
        if (mg_jwt_verify_with(t, picked[i]))
            return MG_AUTH_OK;
    return MG_AUTH_BAD_SIGNATURE;
}

/* now - skew and now + skew, saturated rather than wrapped. */
static void mg_jwt_window(int64_t now, int64_t skew, int64_t *lo, int64_t *hi)
{
    if (__builtin_sub_overflow(now, skew, lo))
        *lo = skew > 0 ? INT64_MIN : INT64_MAX;
    if (__builtin_add_overflow(now, skew, hi))
        *hi = skew > 0 ? INT64_MAX : INT64_MIN;
}

/* exp, nbf, iat. With whole seconds on the clock, "now - skew > exp" holds exactly when it holds
 * for exp's floor, and "now + skew < nbf" (or "iat > now + skew") for the ceiling. */
static mg_auth_reason_t mg_jwt_check_times(const mg_jwt_policy_t *policy, const json_t *claims, int64_t now)
{
    const json_t *exp = json_object_get(claims, "exp"), *nbf = json_object_get(claims, "nbf"),
                 *iat = json_object_get(claims, "iat");
    int64_t exp_s = 0, nbf_s = 0, nbf_c = 0, iat_s = 0, iat_c = 0, lo, hi;
    if ((exp != NULL && mg__numeric_date(exp, &exp_s, NULL) != 0) || (nbf != NULL && mg__numeric_date(nbf, &nbf_s, &nbf_c) != 0) ||
        (iat != NULL && mg__numeric_date(iat, &iat_s, &iat_c) != 0))
        return MG_AUTH_BAD_CLAIM;
    mg_jwt_window(now, policy->clock_skew, &lo, &hi);
    if (exp == NULL && policy->require_exp)
        return MG_AUTH_MISSING_EXP;
    if (exp != NULL && lo > exp_s)
        return MG_AUTH_EXPIRED;
    if (nbf != NULL && hi < nbf_c)
        return MG_AUTH_NOT_YET_VALID;
    if (iat != NULL && iat_c > hi)
        return MG_AUTH_ISSUED_IN_FUTURE;
    return MG_AUTH_OK;
}

/* 1 when JSON string v is s exactly. */
static int mg_jwt_str_is(const json_t *v, const char *s)
{
    size_t len = strlen(s);
    return json_string_length(v) == len && memcmp(json_string_value(v), s, len) == 0;
}

static mg_auth_reason_t mg_jwt_check_issuer(const mg_jwt_policy_t *policy, const json_t *claims)
{
    const json_t *iss = json_object_get(claims, "iss");
    if (policy->issuer == NULL)
        return MG_AUTH_OK;
    if (iss == NULL)
        return MG_AUTH_WRONG_ISSUER;
    if (!json_is_string(iss))
        return MG_AUTH_BAD_CLAIM;
    return mg_jwt_str_is(iss, policy->issuer) ? MG_AUTH_OK : MG_AUTH_WRONG_ISSUER;
}

static int mg_jwt_audience_known(const mg_jwt_policy_t *policy, const json_t *aud)
{
    for (size_t i = 0; i != policy->num_audiences; ++i)
        if (mg_jwt_str_is(aud, policy->audiences[i]))
            return 1;
    return 0;
}

static mg_auth_reason_t mg_jwt_check_audience(const mg_jwt_policy_t *policy, const json_t *claims)
{
    const json_t *aud = json_object_get(claims, "aud");
    int known = 0;
    if (policy->num_audiences == 0)
        return MG_AUTH_OK;
    if (aud == NULL)
        return MG_AUTH_WRONG_AUDIENCE;
    if (json_is_string(aud))
        return mg_jwt_audience_known(policy, aud) ? MG_AUTH_OK : MG_AUTH_WRONG_AUDIENCE;
    if (!json_is_array(aud))
        return MG_AUTH_BAD_CLAIM;
    for (size_t i = 0; i != json_array_size(aud); ++i) {
        const json_t *v = json_array_get(aud, i);
        if (!json_is_string(v))
            return MG_AUTH_BAD_CLAIM;
        known |= mg_jwt_audience_known(policy, v);
    }
    return known ? MG_AUTH_OK : MG_AUTH_WRONG_AUDIENCE;
}

static mg_auth_reason_t mg_jwt_check_claims(const mg_jwt_policy_t *policy, const json_t *claims, int64_t now)
{
    mg_auth_reason_t reason = mg_jwt_check_times(policy, claims, now);
    if (reason == MG_AUTH_OK)
        reason = mg_jwt_check_issuer(policy, claims);
    if (reason == MG_AUTH_OK)
        reason = mg_jwt_check_audience(policy, claims);
    return reason;
}

static mg_auth_reason_t mg_jwt_run(const mg_jwt_policy_t *policy, const mg_keyset_t *keys, const char *token, size_t len,
                                   int64_t now, mg_jwt_t *t, mg_jwt_result_t *out)
{
    mg_auth_reason_t reason;
    if (mg_jwt_split(token, len, t) != 0 || (t->hdr = mg_jwt_object(t->header)) == NULL)
        return MG_AUTH_MALFORMED;
    if ((reason = mg_jwt_read_header(policy, t, out)) != MG_AUTH_OK ||
        (reason = mg_jwt_check_signature(policy, keys, t, out->kid)) != MG_AUTH_OK)
        return reason;
    if ((t->claims = mg_jwt_object(t->payload)) == NULL)
        return MG_AUTH_MALFORMED;
    if ((reason = mg_jwt_check_claims(policy, t->claims, now)) != MG_AUTH_OK)
        return reason;
    /* a payload past the identity's limits (entries, depth, name length) is malformed here */
    out->identity = mg_identity_new(t->claims, MG_STR(""));
    return out->identity != NULL ? MG_AUTH_OK : MG_AUTH_MALFORMED;
}

static void mg_jwt_dispose(mg_jwt_t *t)
{
    json_decref(t->hdr);
    json_decref(t->claims);
    cjose_get_dealloc()(t->sig);
    cjose_jws_release(t->jws);
}

void mg_jwt_verify(const mg_jwt_policy_t *policy, const mg_keyset_t *keys, const char *token, size_t len, int64_t now,
                   mg_jwt_result_t *out)
{
    mg_jwt_t t = {0};
    out->identity = NULL;
    out->kid[0] = '\0';
    if (len > policy->max_token_bytes) {
        out->reason = MG_AUTH_TOO_LARGE;
        return;
    }
    out->reason = mg_jwt_run(policy, keys, token, len, now, &t, out);
    mg_jwt_dispose(&t);
}
