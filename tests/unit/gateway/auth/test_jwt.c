/*
 * gateway/auth/jwt.c: signatures, keys and headers. Every algorithm verifies with the key made
 * for it and with no other; every way a token can be shaped wrong is refused with its reason;
 * nothing the token says (alg none, jku, x5u, jwk, a secret made of a public key) can choose
 * the key it is checked with. The claims' checks are test_jwt_claims.c's.
 */
#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include "fixture.h"

TestSuite(jwt, .init = setup, .fini = teardown);

#define PAYLOAD "{\"sub\":\"alice\",\"exp\":1700000100}"

/* ---------------------------------------------------------------------------------------
 * Valid tokens
 */
Test(jwt, rsa_algorithms_verify_with_the_rsa_key)
{
    static const char *const algs[] = {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"};
    for (size_t i = 0; i != sizeof(algs) / sizeof(algs[0]); ++i)
        expect_reason(sign(K_RSA1, algs[i], "rsa1", NULL, PAYLOAD), MG_AUTH_OK);
}

Test(jwt, ec_algorithms_verify_with_the_key_of_their_curve)
{
    expect_reason(sign(K_EC256, "ES256", "ec256", NULL, PAYLOAD), MG_AUTH_OK);
    expect_reason(sign(K_EC384, "ES384", "ec384", NULL, PAYLOAD), MG_AUTH_OK);
    expect_reason(sign(K_EC521, "ES512", "ec521", NULL, PAYLOAD), MG_AUTH_OK);
    /* without kid: the one key that fits is found among the others */
    expect_reason(sign(K_EC384, "ES384", NULL, NULL, PAYLOAD), MG_AUTH_OK);
}

Test(jwt, hs_algorithms_verify_with_the_secret_only)
{
    policy.secret = (const uint8_t *)SECRET;
    policy.secret_len = strlen(SECRET);
    expect_reason(sign_secret(SECRET, strlen(SECRET), "HS256", PAYLOAD), MG_AUTH_OK);
    expect_reason(sign_secret(SECRET, strlen(SECRET), "HS384", PAYLOAD), MG_AUTH_OK);
    expect_reason(sign_secret(SECRET, strlen(SECRET), "HS512", PAYLOAD), MG_AUTH_OK);
    expect_reason(sign_secret(SECRET "x", strlen(SECRET) + 1, "HS256", PAYLOAD), MG_AUTH_BAD_SIGNATURE);
    /* the secret needs no key set */
    mg_keyset_free(keyset);
    keyset = NULL;
    expect_reason(sign_secret(SECRET, strlen(SECRET), "HS256", PAYLOAD), MG_AUTH_OK);
}

Test(jwt, eddsa_verifies_with_the_ed25519_key)
{
    expect_reason(eddsa_raw(ed_key, "{\"alg\":\"EdDSA\",\"kid\":\"ed1\"}", PAYLOAD), MG_AUTH_OK);
    expect_reason(eddsa_raw(ed_key, "{\"alg\":\"EdDSA\"}", PAYLOAD), MG_AUTH_OK);
}

Test(jwt, a_valid_token_gives_its_claims_and_kid)
{
    cr_assert_eq(verify(sign(K_RSA1, "RS256", "rsa1", NULL, "{\"sub\":\"alice\",\"exp\":1700000100,\"roles\":[\"a\",\"b\"]}")),
                 MG_AUTH_OK);
    cr_assert_not_null(res.identity);
    cr_expect_str_eq(res.kid, "rsa1");
    cr_expect_eq(res.identity->exp, 1700000100);
    cr_expect_eq(res.identity->sub.len, 5);
    cr_expect_eq(memcmp(res.identity->sub.base, "alice", 5), 0);
    cr_expect_eq(res.identity->tenant.len, 0);
    size_t count;
    mg_claims_find(&res.identity->claims, MG_STR("roles"), &count);
    cr_expect_eq(count, 3); /* the array, then "a" and "b" */
}

Test(jwt, every_flipped_signature_bit_is_a_bad_signature)
{
    policy.secret = (const uint8_t *)SECRET;
    policy.secret_len = strlen(SECRET);
    const char *tokens[] = {sign(K_RSA1, "RS256", "rsa1", NULL, PAYLOAD), sign(K_RSA1, "PS256", "rsa1", NULL, PAYLOAD),
                            sign(K_EC256, "ES256", "ec256", NULL, PAYLOAD), sign_secret(SECRET, strlen(SECRET), "HS256", PAYLOAD),
                            eddsa_raw(ed_key, "{\"alg\":\"EdDSA\",\"kid\":\"ed1\"}", PAYLOAD)};
    for (size_t i = 0; i != sizeof(tokens) / sizeof(tokens[0]); ++i) {
        char *t = (char *)fmt("%s", tokens[i]);
        char *sig = strrchr(t, '.') + 1;
        sig[5] = sig[5] == 'A' ? 'B' : 'A';
        expect_reason(t, MG_AUTH_BAD_SIGNATURE);
    }
}

/* ---------------------------------------------------------------------------------------
 * alg: none, not allowed, not fitting the key
 */
Test(jwt, alg_none_in_any_case_never_verifies)
{
    static const char *const nones[] = {"none", "None", "nOnE", "NONE"};
    for (size_t i = 0; i != sizeof(nones) / sizeof(nones[0]); ++i) {
        const char *input = signing_input(fmt("{\"alg\":\"%s\"}", nones[i]), PAYLOAD);
        expect_reason(fmt("%s.", input), MG_AUTH_MALFORMED); /* the unsigned form: empty signature */
        expect_reason(fmt("%s.c2lnbmF0dXJl", input), MG_AUTH_ALG_NOT_ALLOWED);
        expect_reason(fmt("%s.%s", input, strrchr(sign(K_RSA1, "RS256", "rsa1", NULL, PAYLOAD), '.') + 1), MG_AUTH_ALG_NOT_ALLOWED);
    }
}

Test(jwt, an_alg_outside_the_policy_or_unknown_is_refused)
{
    policy.algorithms = MG_JWT_ALG_BIT(MG_JWT_RS256);
    expect_reason(sign(K_RSA1, "RS256", "rsa1", NULL, PAYLOAD), MG_AUTH_OK);
    expect_reason(sign(K_RSA1, "PS256", "rsa1", NULL, PAYLOAD), MG_AUTH_ALG_NOT_ALLOWED);
    expect_reason(sign(K_EC256, "ES256", "ec256", NULL, PAYLOAD), MG_AUTH_ALG_NOT_ALLOWED);
    policy.algorithms = ALL_ALGS;
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"rs256\",\"kid\":\"rsa1\"}", PAYLOAD), MG_AUTH_ALG_NOT_ALLOWED);
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"ES256K\"}", PAYLOAD), MG_AUTH_ALG_NOT_ALLOWED);
    expect_reason(hs256_raw(SECRET, "{\"alg\":256}", PAYLOAD), MG_AUTH_ALG_NOT_ALLOWED);
    expect_reason(hs256_raw(SECRET, "{\"kid\":\"rsa1\"}", PAYLOAD), MG_AUTH_ALG_NOT_ALLOWED);
}

/* The public key's PEM, what an attacker hands an HMAC verifier as its secret. */
static const char *rsa_public_pem(int key)
{
    json_t *jwk = json_loads(public_jwk(key), 0, NULL);
    uint8_t *n = NULL, *e = NULL;
    size_t n_len, e_len;
    cjose_err err;
    const char *n64 = json_string_value(json_object_get(jwk, "n")), *e64 = json_string_value(json_object_get(jwk, "e"));
    cr_assert(cjose_base64url_decode(n64, strlen(n64), &n, &n_len, &err) &&
              cjose_base64url_decode(e64, strlen(e64), &e, &e_len, &err));
    BIGNUM *bn = BN_bin2bn(n, (int)n_len, NULL), *be = BN_bin2bn(e, (int)e_len, NULL);
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn);
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be);
    OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
    EVP_PKEY *pkey = NULL;
    cr_assert(EVP_PKEY_fromdata_init(ctx) == 1 && EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) == 1);
    BIO *bio = BIO_new(BIO_s_mem());
    cr_assert_eq(PEM_write_bio_PUBKEY(bio, pkey), 1);
    char *pem;
    long len = BIO_get_mem_data(bio, &pem);
    const char *copy = fmt("%.*s", (int)len, pem);
    BIO_free(bio), EVP_PKEY_free(pkey), EVP_PKEY_CTX_free(ctx), OSSL_PARAM_free(params), OSSL_PARAM_BLD_free(bld);
    BN_free(bn), BN_free(be), free(n), free(e), json_decref(jwk);
    return copy;
}

Test(jwt, hs256_signed_with_the_rsa_public_key_never_verifies)
{
    const char *pem = rsa_public_pem(K_RSA1);
    cr_assert(strncmp(pem, "-----BEGIN PUBLIC KEY-----", 26) == 0);
    const char *token = sign_secret(pem, strlen(pem), "HS256", PAYLOAD);
    const char *with_kid = hs256_raw(pem, "{\"alg\":\"HS256\",\"kid\":\"rsa1\"}", PAYLOAD);
    /* no secret configured: no key of the set is ever an HMAC key */
    expect_reason(token, MG_AUTH_UNKNOWN_KEY);
    expect_reason(with_kid, MG_AUTH_UNKNOWN_KEY);
    policy.algorithms = MG_JWT_DEFAULT_ALGS;
    expect_reason(token, MG_AUTH_ALG_NOT_ALLOWED);
    /* HS256 allowed with another secret */
    policy.algorithms = ALL_ALGS;
    policy.secret = (const uint8_t *)SECRET;
    policy.secret_len = strlen(SECRET);
    expect_reason(token, MG_AUTH_BAD_SIGNATURE);
    expect_reason(with_kid, MG_AUTH_BAD_SIGNATURE);
}

Test(jwt, a_key_never_checks_an_alg_outside_its_type)
{
    /* the RSA key's kid on an ES256 token, and the reverse */
    expect_reason(sign(K_EC256, "ES256", "rsa1", NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    expect_reason(sign(K_RSA1, "RS256", "ec256", NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    /* a P-256 key and an ES384 token; an Ed25519 key and an RS256 token */
    expect_reason(sign(K_EC384, "ES384", "ec256", NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    expect_reason(sign(K_RSA1, "RS256", "ed1", NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    /* a set of one RSA key, a token of each other alg: none fits */
    use_keys(fmt("{\"keys\":[%s]}", public_jwk(K_RSA1)));
    expect_reason(sign(K_EC256, "ES256", NULL, NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    expect_reason(eddsa_raw(ed_key, "{\"alg\":\"EdDSA\"}", PAYLOAD), MG_AUTH_UNKNOWN_KEY);
}

Test(jwt, a_keys_own_alg_must_be_the_tokens)
{
    use_keys(fmt("{\"keys\":[%s]}", public_jwk_as(K_RSA1, "rsa1", "\"alg\":\"RS256\"")));
    expect_reason(sign(K_RSA1, "RS256", "rsa1", NULL, PAYLOAD), MG_AUTH_OK);
    expect_reason(sign(K_RSA1, "PS256", "rsa1", NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    expect_reason(sign(K_RSA1, "RS512", NULL, NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
}

/* ---------------------------------------------------------------------------------------
 * Keys chosen by kid, and without one
 */
Test(jwt, a_signature_moved_onto_another_header_or_payload_fails)
{
    const char *token = sign(K_RSA1, "RS256", "rsa1", NULL, PAYLOAD), *sig = strrchr(token, '.') + 1;
    const char *other = sign(K_RSA1, "RS256", "rsa1", "{\"typ\":\"JWT\"}", PAYLOAD);
    int other_input = (int)(strrchr(other, '.') - other);
    expect_reason(other, MG_AUTH_OK);
    /* the other header (same key, same payload) with this signature */
    expect_reason(fmt("%.*s.%s", other_input, other, sig), MG_AUTH_BAD_SIGNATURE);
    /* the same header naming another alg of the same key */
    expect_reason(fmt("%s.%s", signing_input("{\"alg\":\"PS256\",\"kid\":\"rsa1\"}", PAYLOAD), sig), MG_AUTH_BAD_SIGNATURE);
    /* another payload */
    const char *forged = signing_input("{\"alg\":\"RS256\",\"kid\":\"rsa1\"}", "{\"sub\":\"admin\",\"exp\":1700000100}");
    expect_reason(fmt("%s.%s", forged, sig), MG_AUTH_BAD_SIGNATURE);
}

Test(jwt, a_kid_selects_its_key_only)
{
    expect_reason(sign(K_RSA2, "RS256", "rsa2", NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    cr_expect_str_eq(res.kid, "rsa2");
    expect_reason(sign(K_RSA1, "RS256", "../../etc/passwd", NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    cr_expect_str_eq(res.kid, "../../etc/passwd");
    expect_reason(sign(K_RSA1, "RS256", "", NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    /* the right key under another kid is not tried */
    use_keys(fmt("{\"keys\":[%s,%s]}", public_jwk_as(K_RSA1, "a", ""), public_jwk_as(K_RSA2, "b", "")));
    expect_reason(sign(K_RSA1, "RS256", "b", NULL, PAYLOAD), MG_AUTH_BAD_SIGNATURE);
    expect_reason(sign(K_RSA1, "RS256", "a", NULL, PAYLOAD), MG_AUTH_OK);
}

Test(jwt, a_kid_too_long_or_not_a_string_is_malformed)
{
    char kid[MG_JWT_MAX_KID + 2];
    memset(kid, 'k', sizeof(kid) - 1);
    kid[sizeof(kid) - 1] = '\0';
    expect_reason(sign(K_RSA1, "RS256", kid, NULL, PAYLOAD), MG_AUTH_MALFORMED);
    kid[MG_JWT_MAX_KID] = '\0';
    expect_reason(sign(K_RSA1, "RS256", kid, NULL, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    cr_expect_eq(strlen(res.kid), MG_JWT_MAX_KID);
    expect_reason(sign(K_RSA1, "RS256", NULL, "{\"kid\":7}", PAYLOAD), MG_AUTH_MALFORMED);
    expect_reason(sign(K_RSA1, "RS256", NULL, "{\"kid\":null}", PAYLOAD), MG_AUTH_MALFORMED);
}

Test(jwt, without_kid_at_most_four_fitting_keys_are_tried)
{
    use_keys(fmt("{\"keys\":[%s,%s,%s,%s,%s,%s]}", public_jwk(K_EC256), public_jwk_as(K_RSA1, "a", ""),
                 public_jwk_as(K_RSA1, "b", ""), public_jwk_as(K_RSA1, "c", ""), public_jwk_as(K_RSA2, "d", ""),
                 public_jwk_as(K_RSA2, "e", "")));
    expect_reason(sign(K_RSA1, "RS256", NULL, NULL, PAYLOAD), MG_AUTH_OK);
    expect_reason(sign(K_RSA2, "PS384", NULL, NULL, PAYLOAD), MG_AUTH_OK); /* the 4th RSA key */
    use_keys(fmt("{\"keys\":[%s,%s,%s,%s,%s]}", public_jwk_as(K_RSA1, "a", ""), public_jwk_as(K_RSA1, "b", ""),
                 public_jwk_as(K_RSA1, "c", ""), public_jwk_as(K_RSA1, "d", ""), public_jwk_as(K_RSA2, "e", "")));
    expect_reason(sign(K_RSA2, "RS256", NULL, NULL, PAYLOAD), MG_AUTH_BAD_SIGNATURE); /* the 5th is never tried */
    expect_reason(sign(K_RSA2, "RS256", "e", NULL, PAYLOAD), MG_AUTH_OK);
}

Test(jwt, no_keys_yet_is_not_an_unknown_key)
{
    mg_keyset_free(keyset);
    keyset = NULL;
    expect_reason(sign(K_RSA1, "RS256", "rsa1", NULL, PAYLOAD), MG_AUTH_NO_KEYS);
    expect_reason(sign(K_RSA1, "RS256", NULL, NULL, PAYLOAD), MG_AUTH_NO_KEYS);
    expect_reason(sign_secret(SECRET, strlen(SECRET), "HS256", PAYLOAD), MG_AUTH_UNKNOWN_KEY); /* no secret either */
}

/* ---------------------------------------------------------------------------------------
 * Header members that are refused or ignored
 */
Test(jwt, crit_is_refused_whatever_it_names)
{
    expect_reason(sign(K_RSA1, "RS256", "rsa1", "{\"crit\":[\"exp\"],\"exp\":1}", PAYLOAD), MG_AUTH_CRIT);
    expect_reason(sign(K_RSA1, "RS256", "rsa1", "{\"crit\":[]}", PAYLOAD), MG_AUTH_CRIT);
    expect_reason(sign(K_RSA1, "RS256", "rsa1", "{\"crit\":\"b64\",\"b64\":false}", PAYLOAD), MG_AUTH_CRIT);
}

Test(jwt, jku_x5u_jwk_and_x5c_never_choose_the_key)
{
    const char *evil = public_jwk(K_EVIL);
    const char *extra = fmt("{\"jku\":\"http://127.0.0.1:1/jwks\",\"x5u\":\"http://127.0.0.1:1/cert\",\"jwk\":%s,"
                            "\"x5c\":[\"MIIB\"]}",
                            evil);
    /* signed with a key of the attacker's, which the header points at or embeds */
    expect_reason(sign(K_EVIL, "RS256", "evil", extra, PAYLOAD), MG_AUTH_UNKNOWN_KEY);
    expect_reason(sign(K_EVIL, "RS256", NULL, extra, PAYLOAD), MG_AUTH_BAD_SIGNATURE);
    expect_reason(sign(K_EVIL, "RS256", "rsa1", extra, PAYLOAD), MG_AUTH_BAD_SIGNATURE);
    /* signed with the configured key: the members are ignored */
    expect_reason(sign(K_RSA1, "RS256", "rsa1", extra, PAYLOAD), MG_AUTH_OK);
}

/* ---------------------------------------------------------------------------------------
 * Shapes
 */
Test(jwt, anything_but_three_nonempty_parts_is_malformed)
{
    const char *good = sign(K_RSA1, "RS256", "rsa1", NULL, PAYLOAD);
    static const char *const bad[] = {"", ".", "..", "...", "abc", "abcd.efgh", "abcd..efgh", ".efgh.ijkl", "abcd.efgh."};
    for (size_t i = 0; i != sizeof(bad) / sizeof(bad[0]); ++i)
        expect_reason(bad[i], MG_AUTH_MALFORMED);
    expect_reason(fmt("%s.", good), MG_AUTH_MALFORMED);
    expect_reason(fmt("%s.abcd", good), MG_AUTH_MALFORMED);
    expect_reason(fmt(".%s", good), MG_AUTH_MALFORMED);
}

Test(jwt, characters_outside_base64url_are_malformed)
{
    const char *good = sign(K_RSA1, "RS256", "rsa1", NULL, PAYLOAD);
    size_t dot1 = (size_t)(strchr(good, '.') - good), dot2 = (size_t)(strrchr(good, '.') - good);
    size_t at[] = {0, dot1 + 1, dot2 + 1};
    static const char bad[] = {'+', '/', '=', ' ', '\n', '\0', '\x80'};
    for (size_t i = 0; i != 3; ++i)
        for (size_t j = 0; j != sizeof(bad); ++j) {
            char *t = (char *)fmt("%s", good);
            t[at[i] + 2] = bad[j];
            mg_jwt_verify(&policy, keyset, t, strlen(good), NOW, &res);
            cr_expect_eq(res.reason, MG_AUTH_MALFORMED, "part %zu, byte 0x%02x", i, (unsigned char)bad[j]);
        }
    /* padding, and a length no bytes encode to (4n + 1 characters) */
    expect_reason(fmt("%s=", good), MG_AUTH_MALFORMED);
    const char *longer = good;
    while ((strlen(longer) - dot2 - 1) % 4 != 1)
        longer = fmt("%sA", longer);
    expect_reason(longer, MG_AUTH_MALFORMED);
}

Test(jwt, a_header_or_payload_that_is_not_an_object_is_malformed)
{
    policy.secret = (const uint8_t *)SECRET;
    policy.secret_len = strlen(SECRET);
    static const char *const not_objects[] = {"[]",    "\"HS256\"",           "1", "null", "{\"alg\":\"HS256\"",
                                              "{} {}", "{\"alg\":\"HS256\"}x"};
    for (size_t i = 0; i != sizeof(not_objects) / sizeof(not_objects[0]); ++i) {
        expect_reason(hs256_raw(SECRET, not_objects[i], PAYLOAD), MG_AUTH_MALFORMED);
        expect_reason(hs256_raw(SECRET, "{\"alg\":\"HS256\"}", not_objects[i]), MG_AUTH_MALFORMED);
    }
    /* not JSON text at all, signed */
    expect_reason(sign_secret(SECRET, strlen(SECRET), "HS256", "hello"), MG_AUTH_MALFORMED);
}

static const char *nested(const char *open, const char *inner, const char *close, int depth)
{
    size_t o = strlen(open), c = strlen(close), n = strlen(inner);
    char *s = malloc((o + c) * (size_t)depth + n + 1), *p = s;
    for (int i = 0; i != depth; ++i, p += o)
        memcpy(p, open, o);
    memcpy(p, inner, n);
    p += n;
    for (int i = 0; i != depth; ++i, p += c)
        memcpy(p, close, c);
    *p = '\0';
    return keep(s);
}

Test(jwt, deep_nesting_is_malformed)
{
    policy.secret = (const uint8_t *)SECRET;
    policy.secret_len = strlen(SECRET);
    policy.max_token_bytes = 1 << 20;
    const char *deep = nested("[", "", "]", 10000);
    expect_reason(hs256_raw(SECRET, fmt("{\"alg\":\"HS256\",\"x\":%s}", deep), PAYLOAD), MG_AUTH_MALFORMED);
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"HS256\"}", fmt("{\"exp\":1700000100,\"x\":%s}", deep)), MG_AUTH_MALFORMED);
    /* within jansson's bound, past the claims' */
    const char *deep17 = nested("{\"a\":", "1", "}", MG_CLAIMS_MAX_DEPTH + 1),
               *deep16 = nested("{\"a\":", "1", "}", MG_CLAIMS_MAX_DEPTH);
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"HS256\"}", fmt("{\"exp\":1700000100,\"x\":%s}", deep17)), MG_AUTH_MALFORMED);
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"HS256\"}", fmt("{\"exp\":1700000100,\"x\":%s}", deep16)), MG_AUTH_OK);
}

Test(jwt, duplicate_members_are_malformed)
{
    policy.secret = (const uint8_t *)SECRET;
    policy.secret_len = strlen(SECRET);
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"HS256\",\"alg\":\"HS256\"}", PAYLOAD), MG_AUTH_MALFORMED);
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"HS256\",\"kid\":\"a\",\"kid\":\"b\"}", PAYLOAD), MG_AUTH_MALFORMED);
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"HS256\"}", "{\"sub\":\"alice\",\"exp\":1700000100,\"sub\":\"admin\"}"),
                  MG_AUTH_MALFORMED);
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"HS256\"}", "{\"exp\":1700000100,\"o\":{\"a\":1,\"a\":2}}"), MG_AUTH_MALFORMED);
    expect_reason(hs256_raw(SECRET, "{\"alg\":\"HS256\"}", PAYLOAD), MG_AUTH_OK);
}

Test(jwt, a_token_longer_than_max_token_bytes_is_refused_unread)
{
    const char *token = sign(K_RSA1, "RS256", "rsa1", NULL, PAYLOAD);
    policy.max_token_bytes = strlen(token);
    expect_reason(token, MG_AUTH_OK);
    policy.max_token_bytes = strlen(token) - 1;
    expect_reason(token, MG_AUTH_TOO_LARGE);
    cr_expect_str_eq(res.kid, "");
    /* unread: not even its first byte */
    mg_jwt_verify(&policy, keyset, NULL, strlen(token), NOW, &res);
    cr_expect_eq(res.reason, MG_AUTH_TOO_LARGE);
}
