/*
 * libFuzzer target: JWT verification (gateway/auth/jwt.c) over arbitrary bytes, with a fixed
 * policy that allows every algorithm, a fixed key set (one RSA-2048 and one EC P-256 public key,
 * parsed once), a 32-byte HMAC secret and a fixed clock. Properties checked on every input:
 *   - the reason is one of mg_auth_reason_t, and an identity comes with MG_AUTH_OK only;
 *   - the kid is NUL-terminated within its MG_JWT_MAX_KID bytes;
 *   - an identity's claims are sorted by name and its strings lie inside its one block.
 * The seeds (corpus/jwt) hold tokens that verify with these keys and this secret (made with
 * Python's cryptography and hmac modules), so mutations start from every stage of the check.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/auth/auth.h"

#define NOW 1700000000

static const char jwks[] = "{\"keys\":["
                           "{\"kty\":\"RSA\",\"kid\":\"fuzz-rsa\",\"e\":\"AQAB\",\"n\":\""
                           "s50BwNdwVxJ4FpVlDMNd1ZDNLHm85EJyc7aYtXhLLvTJ2swP3LVUaZXqxqklQaCgGAS_tCetWQvgJeKQ_oI14hwhyCmuNJK7"
                           "lkOeaDcOFOABo9Lpu9Sag7IfogL4xK1SN_cJeFwYv3KorKGTENGi9MTx0xT74xdch8IwokYo5wA0dcCa8x8GajFDlvUvkYFB"
                           "UHQdoxosXgEFi9YXd_HnzJdYt3Z_6JzmDglc-nZ0NbyqYk6W1yWp5R7y7tXNLHZw6c1e5D6XdA15k_G6-uUGrMTwvIRVEzWq"
                           "cACmfLdXMJCcWbVlElGKkZxPLX4XnP3MZzIHJcHM-MSf4o12ypWmdw"
                           "\"},"
                           "{\"kty\":\"EC\",\"kid\":\"fuzz-ec\",\"crv\":\"P-256\","
                           "\"x\":\"_OzB5bEe6iSviJJQvIv1FOj2syrIBVJGtt8bJc4FVyM\","
                           "\"y\":\"lQTa57g-OAQEoVba-0cmn2D_HZ4LME6YWrN3PLjRj7M\"}"
                           "]}";
static const uint8_t secret[] = "matchgate-fuzz-secret-0123456789";
static char *const audiences[] = {"api"};

static const mg_keyset_t *keyset(void)
{
    static mg_keyset_t *keys;
    char err[256];
    if (keys == NULL && (keys = mg_keyset_parse(jwks, strlen(jwks), NULL, NULL, 0, err, sizeof(err))) == NULL)
        abort();
    return keys;
}

static int inside(const mg_identity_t *id, mg_str_t s)
{
    return s.len == 0 || (s.base >= (const char *)id && s.base + s.len <= (const char *)id + id->bytes);
}

static void check_identity(const mg_identity_t *id)
{
    const mg_claims_t *c = &id->claims;
    for (size_t i = 0; i != c->size; ++i) {
        if (!inside(id, c->items[i].name) || (c->items[i].type <= MG_CLAIM_NUMBER && !inside(id, c->items[i].value)))
            abort();
        if (i != 0) {
            mg_str_t a = c->items[i - 1].name, b = c->items[i].name;
            size_t n = a.len < b.len ? a.len : b.len;
            int cmp = n != 0 ? memcmp(a.base, b.base, n) : 0;
            if (cmp > 0 || (cmp == 0 && a.len > b.len))
                abort();
        }
    }
    if (!inside(id, id->sub) || id->tenant.len != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const mg_jwt_policy_t policy = {
        .issuer = "https://issuer.example",
        .audiences = audiences,
        .num_audiences = 1,
        .algorithms = (1u << MG_JWT_NUM_ALGS) - 1,
        .clock_skew = 30,
        .require_exp = 0,
        .max_token_bytes = 8192,
        .secret = secret,
        .secret_len = sizeof(secret) - 1,
    };
    mg_jwt_result_t res;
    memset(res.kid, 'x', sizeof(res.kid));
    mg_jwt_verify(&policy, keyset(), (const char *)data, size, NOW, &res);
    if ((unsigned)res.reason >= MG_AUTH_NUM_REASONS || (res.identity != NULL) != (res.reason == MG_AUTH_OK) ||
        memchr(res.kid, '\0', sizeof(res.kid)) == NULL)
        abort();
    if (res.identity != NULL) {
        check_identity(res.identity);
        mg_identity_release(res.identity);
    }
    return 0;
}
