/*
 * EdDSA (RFC 8037) with Ed25519 keys: the one signature check not done by cjose, whose Debian
 * version (0.6.2) knows no OKP keys. OpenSSL's EVP does the work; this file only holds the calls.
 */
#include "gateway/auth/internal.h"

#define MG_ED25519_KEY_BYTES 32
#define MG_ED25519_SIG_BYTES 64

EVP_PKEY *mg__eddsa_public_key(const uint8_t *x, size_t len)
{
    if (len != MG_ED25519_KEY_BYTES)
        return NULL;
    return EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, x, len);
}

int mg__eddsa_verify(EVP_PKEY *key, const uint8_t *msg, size_t len, const uint8_t *sig, size_t sig_len)
{
    int verified = 0;
    /* OpenSSL would refuse another length too; checking first keeps a wrong one off its path */
    if (key == NULL || sig_len != MG_ED25519_SIG_BYTES)
        return 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL)
        return 0;
    /* Ed25519 hashes internally: no digest, and one-shot EVP_DigestVerify only */
    if (EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, key) != 1)
        goto Exit;
    verified = EVP_DigestVerify(ctx, sig, sig_len, msg, len) == 1;
Exit:
    EVP_MD_CTX_free(ctx);
    return verified;
}
