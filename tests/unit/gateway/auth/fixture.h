/*
 * What the JWT suites share: keys, tokens made with them, and mg_jwt_verify with a policy the
 * test adjusts.
 *
 * Criterion runs each test in a process of its own, and generating two 2048-bit RSA keys per
 * test would cost seconds: the keys are generated once per run, in the runner (PRE_ALL), written
 * to a temporary file named by MG_TEST_JWT_KEYS (removed at POST_ALL), and imported by each
 * test's setup. Tokens are signed with cjose_jws_sign, except where the test needs bytes cjose
 * would not write (duplicate members: HMAC over the raw text) and EdDSA (OpenSSL's EVP).
 */
#ifndef MG_TEST_AUTH_FIXTURE_H
#define MG_TEST_AUTH_FIXTURE_H

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gateway/auth/internal.h"

#define NOW INT64_C(1700000000)
#define KEYS_ENV "MG_TEST_JWT_KEYS"
#define SECRET "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" /* 64 bytes: HS512 too */
#define ALL_ALGS ((1u << MG_JWT_NUM_ALGS) - 1)

enum { K_RSA1, K_RSA2, K_EVIL, K_EC256, K_EC384, K_EC521, K_NUM };
static const char *const key_names[K_NUM] = {"rsa1", "rsa2", "evil", "ec256", "ec384", "ec521"};

static cjose_jwk_t *keys[K_NUM]; /* private, kid = their name */
static EVP_PKEY *ed_key;         /* private Ed25519 */
static char ed_x[64];            /* its public key, base64url */
static char keys_file[256];

static mg_jwt_policy_t policy;
static mg_keyset_t *keyset;
static mg_jwt_result_t res;

/* Strings a test made, freed by its teardown. */
static char *kept[256];
static size_t num_kept;

static inline char *keep(char *s)
{
    cr_assert_not_null(s);
    cr_assert_lt(num_kept, sizeof(kept) / sizeof(kept[0]));
    return kept[num_kept++] = s;
}

__attribute__((format(printf, 1, 2))) static inline const char *fmt(const char *f, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, f);
    cr_assert_geq(vasprintf(&s, f, ap), 0);
    va_end(ap);
    return keep(s);
}

static inline const char *b64u(const void *data, size_t len)
{
    char *out = NULL;
    size_t out_len;
    cjose_err err;
    cr_assert(cjose_base64url_encode(data, len, &out, &out_len, &err));
    return keep(out);
}

/* ---------------------------------------------------------------------------------------
 * Keys: made once per run
 */
static cjose_jwk_t *generate_key(int i)
{
    static const uint8_t e[] = {1, 0, 1};
    cjose_err err;
    switch (i) {
    case K_EC256:
        return cjose_jwk_create_EC_random(CJOSE_JWK_EC_P_256, &err);
    case K_EC384:
        return cjose_jwk_create_EC_random(CJOSE_JWK_EC_P_384, &err);
    case K_EC521:
        return cjose_jwk_create_EC_random(CJOSE_JWK_EC_P_521, &err);
    default:
        return cjose_jwk_create_RSA_random(2048, e, sizeof(e), &err);
    }
}

static void write_keys(json_t *all)
{
    const char *dir = getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp";
    snprintf(keys_file, sizeof(keys_file), "%s/mg-test-jwt-XXXXXX", dir);
    int fd = mkstemp(keys_file);
    if (fd < 0 || json_dumpfd(all, fd, JSON_COMPACT) != 0 || close(fd) != 0)
        abort();
    setenv(KEYS_ENV, keys_file, 1);
}

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    json_t *all = json_object();
    cjose_err err;
    uint8_t ed[32];
    (void)set;
    for (int i = 0; i != K_NUM; ++i) {
        cjose_jwk_t *k = generate_key(i);
        if (k == NULL || !cjose_jwk_set_kid(k, key_names[i], strlen(key_names[i]), &err))
            abort();
        char *json = cjose_jwk_to_json(k, true, &err);
        json_object_set_new(all, key_names[i], json_loads(json, 0, NULL));
        free(json);
        cjose_jwk_release(k);
    }
    if (RAND_bytes(ed, sizeof(ed)) != 1)
        abort();
    char *ed_text = NULL;
    size_t ed_len;
    cjose_base64url_encode(ed, sizeof(ed), &ed_text, &ed_len, &err);
    json_object_set_new(all, "ed", json_string(ed_text));
    free(ed_text);
    write_keys(all);
    json_decref(all);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    if (keys_file[0] != '\0')
        unlink(keys_file);
}

static void load_ed(const json_t *all)
{
    uint8_t *raw = NULL, pub[32];
    size_t len = 0, pub_len = sizeof(pub);
    cjose_err err;
    const char *text = json_string_value(json_object_get(all, "ed"));
    cr_assert(cjose_base64url_decode(text, strlen(text), &raw, &len, &err));
    ed_key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, raw, len);
    free(raw);
    cr_assert_not_null(ed_key);
    cr_assert_eq(EVP_PKEY_get_raw_public_key(ed_key, pub, &pub_len), 1);
    snprintf(ed_x, sizeof(ed_x), "%s", b64u(pub, pub_len));
}

static void load_keys(void)
{
    json_t *all = json_load_file(getenv(KEYS_ENV), 0, NULL);
    cjose_err err;
    cr_assert_not_null(all, "the runner wrote no keys");
    for (int i = 0; i != K_NUM; ++i) {
        char *json = json_dumps(json_object_get(all, key_names[i]), JSON_COMPACT);
        keys[i] = cjose_jwk_import(json, strlen(json), &err);
        free(json);
        cr_assert_not_null(keys[i]);
    }
    load_ed(all);
    json_decref(all);
}

/* ---------------------------------------------------------------------------------------
 * JWKS texts and sets
 */
static inline const char *public_jwk(int key)
{
    cjose_err err;
    return keep(cjose_jwk_to_json(keys[key], false, &err));
}

/* The public JWK of `key` with members added (`extra`: "\"alg\":\"RS256\"", ...) and its kid replaced. */
static inline const char *public_jwk_as(int key, const char *kid, const char *extra)
{
    json_t *j = json_loads(public_jwk(key), 0, NULL), *more = json_loads(fmt("{%s}", extra), 0, NULL);
    cr_assert_not_null(more);
    json_object_set_new(j, "kid", json_string(kid));
    json_object_update(j, more);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    json_decref(more);
    return keep(s);
}

static inline const char *okp_jwk(const char *kid)
{
    return fmt("{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"%s\",\"kid\":\"%s\"}", ed_x, kid);
}

static inline void use_keys(const char *jwks)
{
    char err[512];
    mg_keyset_free(keyset);
    keyset = mg_keyset_parse(jwks, strlen(jwks), NULL, NULL, 0, err, sizeof(err));
    cr_assert_not_null(keyset, "%s", err);
}

/* The usual set: rsa1, ec256, ec384, ec521 and the Ed25519 key as "ed1" (not rsa2, not evil). */
static inline void use_default_keys(void)
{
    use_keys(fmt("{\"keys\":[%s,%s,%s,%s,%s]}", public_jwk(K_RSA1), public_jwk(K_EC256), public_jwk(K_EC384), public_jwk(K_EC521),
                 okp_jwk("ed1")));
}

/* ---------------------------------------------------------------------------------------
 * Tokens
 */

/* Signed by cjose with `jwk`: header {alg, kid (when not NULL), the members of `extra`}. */
static const char *sign_with(const cjose_jwk_t *jwk, const char *alg, const char *kid, const char *extra, const char *payload)
{
    json_t *h = json_loads(extra != NULL ? extra : "{}", 0, NULL);
    cjose_err err = {0};
    const char *compact;
    cr_assert_not_null(h);
    json_object_set_new(h, "alg", json_string(alg));
    if (kid != NULL)
        json_object_set_new(h, "kid", json_string(kid));
    cjose_jws_t *jws = cjose_jws_sign(jwk, h, (const uint8_t *)payload, strlen(payload), &err);
    cr_assert_not_null(jws, "cjose_jws_sign: %s", err.message);
    cr_assert(cjose_jws_export(jws, &compact, &err));
    char *token = strdup(compact);
    cjose_jws_release(jws);
    json_decref(h);
    return keep(token);
}

static inline const char *sign(int key, const char *alg, const char *kid, const char *extra, const char *payload)
{
    return sign_with(keys[key], alg, kid, extra, payload);
}

static inline const char *sign_secret(const char *secret, size_t len, const char *alg, const char *payload)
{
    cjose_err err;
    cjose_jwk_t *oct = cjose_jwk_create_oct_spec((const uint8_t *)secret, len, &err);
    cr_assert_not_null(oct);
    const char *token = sign_with(oct, alg, NULL, NULL, payload);
    cjose_jwk_release(oct);
    return token;
}

/* "b64(header).b64(payload)" of the texts as written */
static inline const char *signing_input(const char *header, const char *payload)
{
    return fmt("%s.%s", b64u(header, strlen(header)), b64u(payload, strlen(payload)));
}

/* HS256 by hand over the texts as written (duplicate members included) */
static inline const char *hs256_raw(const char *secret, const char *header, const char *payload)
{
    uint8_t mac[EVP_MAX_MD_SIZE];
    unsigned mac_len = 0;
    const char *input = signing_input(header, payload);
    cr_assert_not_null(HMAC(EVP_sha256(), secret, (int)strlen(secret), (const uint8_t *)input, strlen(input), mac, &mac_len));
    return fmt("%s.%s", input, b64u(mac, mac_len));
}

static inline const char *eddsa_raw(EVP_PKEY *key, const char *header, const char *payload)
{
    uint8_t sig[64];
    size_t sig_len = sizeof(sig);
    const char *input = signing_input(header, payload);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    cr_assert_eq(EVP_DigestSignInit(ctx, NULL, NULL, NULL, key), 1);
    cr_assert_eq(EVP_DigestSign(ctx, sig, &sig_len, (const uint8_t *)input, strlen(input)), 1);
    EVP_MD_CTX_free(ctx);
    return fmt("%s.%s", input, b64u(sig, sig_len));
}

/* ---------------------------------------------------------------------------------------
 * Verifying
 */
static inline mg_auth_reason_t verify(const char *token)
{
    mg_identity_release(res.identity);
    res.identity = NULL;
    mg_jwt_verify(&policy, keyset, token, strlen(token), NOW, &res);
    if (res.reason != MG_AUTH_OK)
        cr_assert_null(res.identity);
    return res.reason;
}

#define expect_reason(token, want)                                                                                                 \
    do {                                                                                                                           \
        mg_auth_reason_t got_ = verify(token);                                                                                     \
        cr_expect_eq(got_, (want), "%s: got %s, want %s", (token), mg_auth_reason_label(got_), mg_auth_reason_label(want));        \
    } while (0)

static void setup(void)
{
    load_keys();
    policy = (mg_jwt_policy_t){.algorithms = ALL_ALGS, .clock_skew = 30, .require_exp = 1, .max_token_bytes = 16384};
    use_default_keys();
}

static void teardown(void)
{
    mg_identity_release(res.identity);
    res.identity = NULL;
    mg_keyset_free(keyset);
    keyset = NULL;
    for (int i = 0; i != K_NUM; ++i)
        cjose_jwk_release(keys[i]);
    EVP_PKEY_free(ed_key);
    while (num_kept != 0)
        free(kept[--num_kept]);
}

#endif
