/*
 * gateway/auth/eddsa.c: Ed25519 against RFC 8037's Appendix A (A.1's key, A.4's JWS), directly
 * and through mg_jwt_verify with a JWKS holding that key.
 *
 * The vectors were checked against the RFC's text and against another implementation (Python's
 * `cryptography` signs A.4's input with A.1's private key into exactly this signature).
 */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/auth/internal.h"

#define RFC_D "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"
#define RFC_X "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
#define RFC_INPUT "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc"
#define RFC_SIG "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
#define RFC_JWKS "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"" RFC_X "\"}]}"

static EVP_PKEY *key;
static uint8_t *x, *sig;
static size_t x_len, sig_len;

static void setup(void)
{
    cjose_err err;
    cr_assert(cjose_base64url_decode(RFC_X, strlen(RFC_X), &x, &x_len, &err));
    cr_assert(cjose_base64url_decode(RFC_SIG, strlen(RFC_SIG), &sig, &sig_len, &err));
    cr_assert_eq(x_len, 32);
    cr_assert_eq(sig_len, 64);
    key = mg__eddsa_public_key(x, x_len);
    cr_assert_not_null(key);
}

static void teardown(void)
{
    EVP_PKEY_free(key);
    free(x);
    free(sig);
}

TestSuite(eddsa, .init = setup, .fini = teardown);

Test(eddsa, the_rfc_8037_signature_verifies)
{
    cr_expect_eq(mg__eddsa_verify(key, (const uint8_t *)RFC_INPUT, strlen(RFC_INPUT), sig, sig_len), 1);
}

Test(eddsa, one_flipped_bit_anywhere_fails)
{
    uint8_t input[] = RFC_INPUT;
    for (size_t bit = 0; bit < 8 * sig_len; bit += 37) {
        sig[bit / 8] ^= (uint8_t)(1u << bit % 8);
        cr_expect_eq(mg__eddsa_verify(key, input, strlen(RFC_INPUT), sig, sig_len), 0, "signature bit %zu", bit);
        sig[bit / 8] ^= (uint8_t)(1u << bit % 8);
    }
    input[30] ^= 1;
    cr_expect_eq(mg__eddsa_verify(key, input, strlen(RFC_INPUT), sig, sig_len), 0);
    input[30] ^= 1;
    x[0] ^= 1;
    EVP_PKEY *other = mg__eddsa_public_key(x, x_len);
    cr_expect(other == NULL || mg__eddsa_verify(other, input, strlen(RFC_INPUT), sig, sig_len) == 0);
    EVP_PKEY_free(other);
}

Test(eddsa, wrong_lengths_are_refused)
{
    cr_expect_null(mg__eddsa_public_key(x, 31));
    cr_expect_null(mg__eddsa_public_key(x, 33));
    cr_expect_eq(mg__eddsa_verify(key, (const uint8_t *)RFC_INPUT, strlen(RFC_INPUT), sig, 63), 0);
    cr_expect_eq(mg__eddsa_verify(NULL, (const uint8_t *)RFC_INPUT, strlen(RFC_INPUT), sig, sig_len), 0);
}

static mg_keyset_t *rfc_keyset(void)
{
    char err[256];
    mg_keyset_t *ks = mg_keyset_parse(RFC_JWKS, strlen(RFC_JWKS), NULL, NULL, 0, err, sizeof(err));
    cr_assert_not_null(ks, "%s", err);
    return ks;
}

Test(eddsa, the_rfc_jws_verifies_through_mg_jwt_verify)
{
    mg_keyset_t *ks = rfc_keyset();
    mg_jwt_policy_t policy = {.algorithms = MG_JWT_ALG_BIT(MG_JWT_EDDSA), .max_token_bytes = 1024};
    mg_jwt_result_t res;
    const char *token = RFC_INPUT "." RFC_SIG;
    /* A.4's payload is "Example of Ed25519 signing": the signature verifies, then the payload is
     * no JSON object (a signature that does not verify is reported first: see below) */
    mg_jwt_verify(&policy, ks, token, strlen(token), 0, &res);
    cr_expect_eq(res.reason, MG_AUTH_MALFORMED, "%s", mg_auth_reason_label(res.reason));
    /* one character of the signature changed ('G' to 'Z', the 10th) */
    const char *forged = RFC_INPUT ".hgyY0il_MZCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg";
    mg_jwt_verify(&policy, ks, forged, strlen(forged), 0, &res);
    cr_expect_eq(res.reason, MG_AUTH_BAD_SIGNATURE, "%s", mg_auth_reason_label(res.reason));
    policy.algorithms = MG_JWT_DEFAULT_ALGS;
    mg_jwt_verify(&policy, ks, token, strlen(token), 0, &res);
    cr_expect_eq(res.reason, MG_AUTH_ALG_NOT_ALLOWED);
    mg_keyset_free(ks);
}

/* A.1's private key signing A.4's header over a JSON payload: a token that verifies whole. */
Test(eddsa, a_token_signed_with_the_rfc_key_verifies_through_mg_jwt_verify)
{
    uint8_t *d = NULL, s[64];
    size_t d_len = 0, s_len = sizeof(s);
    cjose_err err;
    char *payload = NULL, *signature = NULL, token[512];
    cr_assert(cjose_base64url_decode(RFC_D, strlen(RFC_D), &d, &d_len, &err));
    cr_assert(cjose_base64url_encode((const uint8_t *)"{\"sub\":\"rfc8037\"}", 17, &payload, &s_len, &err));
    snprintf(token, sizeof(token), "eyJhbGciOiJFZERTQSJ9.%s", payload);
    EVP_PKEY *priv = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, d, d_len);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    s_len = sizeof(s);
    cr_assert(EVP_DigestSignInit(ctx, NULL, NULL, NULL, priv) == 1 &&
              EVP_DigestSign(ctx, s, &s_len, (const uint8_t *)token, strlen(token)) == 1);
    cr_assert(cjose_base64url_encode(s, s_len, &signature, &s_len, &err));
    strcat(token, ".");
    strcat(token, signature);

    mg_keyset_t *ks = rfc_keyset();
    mg_jwt_policy_t policy = {.algorithms = MG_JWT_ALG_BIT(MG_JWT_EDDSA), .max_token_bytes = 1024};
    mg_jwt_result_t res;
    mg_jwt_verify(&policy, ks, token, strlen(token), 1700000000, &res);
    cr_expect_eq(res.reason, MG_AUTH_OK, "%s", mg_auth_reason_label(res.reason));
    cr_expect(res.identity != NULL && res.identity->sub.len == 7 && memcmp(res.identity->sub.base, "rfc8037", 7) == 0);
    mg_identity_release(res.identity);
    policy.require_exp = 1;
    mg_jwt_verify(&policy, ks, token, strlen(token), 1700000000, &res);
    cr_expect_eq(res.reason, MG_AUTH_MISSING_EXP);
    mg_keyset_free(ks);
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(priv);
    free(d);
    free(payload);
    free(signature);
}
