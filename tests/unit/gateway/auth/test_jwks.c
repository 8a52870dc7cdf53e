/*
 * gateway/auth/jwks.c: which keys of a JWK Set are used, which are skipped (counted, the first
 * one's reason in the warning), and which documents are refused whole.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/auth/internal.h"

static mg_keyset_t *ks;
static size_t skipped;
static char warn[256], err[256];
static char *texts[64];
static size_t num_texts;

static void teardown(void)
{
    mg_keyset_free(ks);
    ks = NULL;
    while (num_texts != 0)
        free(texts[--num_texts]);
}

TestSuite(jwks, .fini = teardown);

static const char *keep(char *s)
{
    cr_assert_not_null(s);
    cr_assert_lt(num_texts, sizeof(texts) / sizeof(texts[0]));
    return texts[num_texts++] = s;
}

static mg_keyset_t *parse(const char *json)
{
    mg_keyset_free(ks);
    ks = mg_keyset_parse(json, strlen(json), &skipped, warn, sizeof(warn), err, sizeof(err));
    return ks;
}

/* A public JWK of a new key ("RSA" of `bits`, or an EC curve) with `kid`. */
static const char *new_jwk(const char *type, size_t bits, const char *kid)
{
    static const uint8_t e[] = {1, 0, 1};
    cjose_err cerr;
    cjose_jwk_t *k = strcmp(type, "RSA") == 0     ? cjose_jwk_create_RSA_random(bits, e, sizeof(e), &cerr)
                     : strcmp(type, "P-384") == 0 ? cjose_jwk_create_EC_random(CJOSE_JWK_EC_P_384, &cerr)
                                                  : cjose_jwk_create_EC_random(CJOSE_JWK_EC_P_256, &cerr);
    cr_assert_not_null(k);
    if (kid != NULL)
        cjose_jwk_set_kid(k, kid, strlen(kid), &cerr);
    char *json = cjose_jwk_to_json(k, false, &cerr);
    cjose_jwk_release(k);
    return keep(json);
}

static const char *fmt2(const char *f, const char *a, const char *b)
{
    char *s = NULL;
    cr_assert_geq(asprintf(&s, f, a, b), 0);
    return keep(s);
}

#define OKP "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\""

Test(jwks, a_good_set_is_read_whole)
{
    const char *json = fmt2("{\"keys\":[%s,%s," OKP ",\"kid\":\"ed\",\"use\":\"sig\",\"alg\":\"EdDSA\"}]}",
                            new_jwk("RSA", 2048, "r"), new_jwk("P-256", 0, NULL));
    cr_assert_not_null(parse(json), "%s", err);
    cr_expect_eq(mg_keyset_size(ks), 3);
    cr_expect_eq(skipped, 0);
    cr_expect_str_eq(warn, "");
    cr_expect_str_eq(mg_keyset_kid(ks, 0), "r");
    cr_expect_str_eq(mg_keyset_kid(ks, 1), "");
    cr_expect_str_eq(mg_keyset_kid(ks, 2), "ed");
    cr_expect_str_eq(mg_keyset_kid(ks, 3), "");
    cr_expect_eq(ks->keys[0].algs & MG_JWT_ALG_BIT(MG_JWT_PS512), MG_JWT_ALG_BIT(MG_JWT_PS512));
    cr_expect_eq(ks->keys[1].algs, MG_JWT_ALG_BIT(MG_JWT_ES256));
    cr_expect_eq(ks->keys[2].algs, MG_JWT_ALG_BIT(MG_JWT_EDDSA));
    cr_expect_eq(ks->keys[0].sig_len, 256);
    cr_expect_eq(ks->keys[1].sig_len, 64);
}

Test(jwks, a_weak_rsa_key_is_skipped_and_a_set_of_only_it_refused)
{
    const char *weak = new_jwk("RSA", 1024, "weak");
    cr_assert_not_null(parse(fmt2("{\"keys\":[%s,%s]}", weak, new_jwk("P-384", 0, "ok"))), "%s", err);
    cr_expect_eq(mg_keyset_size(ks), 1);
    cr_expect_eq(skipped, 1);
    cr_expect_str_eq(warn, "keys[0] (kid \"weak\") skipped: an RSA modulus of 1024 bits (at least 2048 are needed)");
    cr_expect_null(parse(fmt2("{\"keys\":[%s]%s}", weak, "")));
    cr_expect(strstr(err, "no usable key") != NULL && strstr(err, "1024 bits") != NULL, "%s", err);
}

Test(jwks, the_modulus_size_is_counted_in_bits)
{
    /* a 2047-bit modulus takes 256 bytes, as a 2048-bit one does */
    cr_expect_null(parse(fmt2("{\"keys\":[%s]%s}", new_jwk("RSA", 2047, NULL), "")));
    cr_expect(strstr(err, "2047 bits") != NULL, "%s", err);
}

Test(jwks, keys_not_for_signatures_are_skipped)
{
    const char *ec = new_jwk("P-256", 0, NULL);
    char body[1024];
    snprintf(body, sizeof(body), "%.*s", (int)strlen(ec) - 1, ec); /* its members, without the closing brace */
    const char *json = fmt2("{\"keys\":[%s,\"use\":\"enc\"},%s,\"key_ops\":[\"encrypt\"]},", body, body);
    json = fmt2("%s%s,\"key_ops\":[\"sign\",\"verify\"],\"use\":\"sig\"}]}", json, body);
    cr_assert_not_null(parse(json), "%s", err);
    cr_expect_eq(mg_keyset_size(ks), 1);
    cr_expect_eq(skipped, 2);
    cr_expect_str_eq(warn, "keys[0] skipped: its use is not \"sig\"");
}

Test(jwks, unknown_types_and_curves_are_skipped)
{
    static const char *const others[] = {
        "{\"kty\":\"oct\",\"k\":\"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0\"}",
        "{\"kty\":\"foo\"}",
        "{}",
        "[]",
        "{\"kty\":\"OKP\",\"crv\":\"X25519\",\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}",
        "{\"kty\":\"OKP\",\"crv\":\"Ed448\",\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}",
        "{\"kty\":\"EC\",\"crv\":\"secp256k1\",\"x\":\"AAAA\",\"y\":\"AAAA\"}",
        "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"AAAA\",\"y\":\"AAAA\"}", /* not a point of the curve */
        "{\"kty\":\"RSA\",\"n\":\"AQAB\"}",
        "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHUR\"}", /* 31 bytes */
    };
    for (size_t i = 0; i != sizeof(others) / sizeof(others[0]); ++i) {
        cr_assert_not_null(parse(fmt2("{\"keys\":[%s," OKP "%s}]}", others[i], "")), "%zu: %s", i, err);
        cr_expect_eq(mg_keyset_size(ks), 1, "%zu", i);
        cr_expect_eq(skipped, 1, "%zu", i);
    }
}

Test(jwks, members_that_are_wrong_skip_the_key)
{
    char long_kid[200];
    memset(long_kid, 'k', sizeof(long_kid) - 1);
    long_kid[sizeof(long_kid) - 1] = '\0';
    static const char *const bad[] = {
        ",\"alg\":\"RS999\"", ",\"alg\":\"none\"", ",\"alg\":\"RS256\"",      ",\"alg\":7",
        ",\"kid\":7",         ",\"use\":7",        ",\"key_ops\":\"verify\"", ",\"key_ops\":[]",
    };
    for (size_t i = 0; i != sizeof(bad) / sizeof(bad[0]); ++i) {
        cr_expect_null(parse(fmt2("{\"keys\":[" OKP "%s}]%s}", bad[i], "")), "%s", bad[i]);
        cr_expect_eq(skipped, 1, "%s", bad[i]);
    }
    cr_expect_null(parse(fmt2("{\"keys\":[" OKP ",\"kid\":\"%s\"}]%s}", long_kid, "")));
    cr_expect_str_eq(warn, "keys[0] skipped: its kid is not a string of at most 128 bytes");
}

/* The text of a set holding `key` only. */
static const char *set_of(json_t *key)
{
    json_t *set = json_pack("{s:[O]}", "keys", key);
    char *text = json_dumps(set, JSON_COMPACT);
    json_decref(set);
    return keep(text);
}

Test(jwks, rsa_members_are_checked)
{
    const char *rsa = new_jwk("RSA", 2048, NULL);
    json_t *j = json_loads(rsa, 0, NULL);
    static const char *const bad_e[] = {"AQ", "Ag", "AQA", ""}; /* 1, 2, 256, nothing */
    for (size_t i = 0; i != sizeof(bad_e) / sizeof(bad_e[0]); ++i) {
        json_object_set_new(j, "e", json_string(bad_e[i]));
        cr_expect_null(parse(set_of(j)), "e=%s", bad_e[i]);
    }
    json_object_set_new(j, "e", json_string("AQAB"));
    char *n = strdup(json_string_value(json_object_get(j, "n")));
    n[10] = '+';
    json_object_set_new(j, "n", json_string(n));
    cr_expect_null(parse(set_of(j)));
    free(n);
    json_decref(j);
}

Test(jwks, private_members_are_ignored)
{
    static const uint8_t e[] = {1, 0, 1};
    cjose_err cerr;
    cjose_jwk_t *k = cjose_jwk_create_RSA_random(2048, e, sizeof(e), &cerr);
    const char *priv = keep(cjose_jwk_to_json(k, true, &cerr));
    cjose_jwk_release(k);
    cr_assert(strstr(priv, "\"d\"") != NULL);
    cr_assert_not_null(parse(fmt2("{\"keys\":[%s]%s}", priv, "")), "%s", err);
    cr_expect_eq(mg_keyset_size(ks), 1);
}

static const char *many_keys(size_t n)
{
    size_t size = 64 + n * 128, len = 0;
    char *s = malloc(size);
    len += (size_t)snprintf(s, size, "{\"keys\":[");
    for (size_t i = 0; i != n; ++i)
        len += (size_t)snprintf(s + len, size - len, "%s" OKP ",\"kid\":\"k%zu\"}", i ? "," : "", i);
    snprintf(s + len, size - len, "]}");
    return keep(s);
}

Test(jwks, more_than_100_keys_are_refused_whole)
{
    cr_expect_not_null(parse(many_keys(MG_KEYSET_MAX_KEYS)), "%s", err);
    cr_expect_eq(mg_keyset_size(ks), MG_KEYSET_MAX_KEYS);
    cr_expect_str_eq(mg_keyset_kid(ks, 99), "k99");
    cr_expect_null(parse(many_keys(MG_KEYSET_MAX_KEYS + 1)));
    cr_expect_str_eq(err, "101 keys: a set holds at most 100");
    cr_expect_null(parse(many_keys(1000)));
}

Test(jwks, documents_that_are_no_jwk_set_are_refused)
{
    static const char *const bad[] = {"[]",
                                      "\"keys\"",
                                      "1",
                                      "null",
                                      "{}",
                                      "{\"keys\":{}}",
                                      "{\"keys\":\"x\"}",
                                      "{\"keys\":[]}",
                                      "{\"keys\":[],\"keys\":[]}",
                                      "",
                                      "{",
                                      "\x01\x02\xff garbage"};
    for (size_t i = 0; i != sizeof(bad) / sizeof(bad[0]); ++i) {
        cr_expect_null(parse(bad[i]), "%s", bad[i]);
        cr_expect_neq(err[0], '\0', "%s", bad[i]);
    }
    /* a duplicate member inside a key refuses the document, not only the key */
    cr_expect_null(parse("{\"keys\":[" OKP ",\"kid\":\"a\",\"kid\":\"b\"}]}"));
    cr_expect(strstr(err, "duplicate") != NULL, "%s", err);
}

Test(jwks, deep_nesting_is_refused)
{
    size_t depth = 10000;
    char *s = malloc(2 * depth + 32);
    strcpy(s, "{\"keys\":[");
    memset(s + 9, '[', depth);
    memset(s + 9 + depth, ']', depth);
    strcpy(s + 9 + 2 * depth, "]}");
    cr_expect_null(parse(keep(s)));
}

/* A document of exactly `size` bytes: a good set padded with spaces. */
static const char *padded(size_t size)
{
    const char *set = "{\"keys\":[" OKP "}]}";
    char *s = malloc(size + 1);
    memset(s, ' ', size);
    memcpy(s, set, strlen(set));
    s[size] = '\0';
    return keep(s);
}

Test(jwks, a_document_over_1_mib_is_refused_unread)
{
    cr_expect_not_null(parse(padded(MG_KEYSET_MAX_BYTES)), "%s", err);
    cr_expect_null(parse(padded(MG_KEYSET_MAX_BYTES + 1)));
    cr_expect_str_eq(err, "the JWKS document is larger than 1048576 bytes");
    cr_expect_null(mg_keyset_parse(NULL, 10u << 20, &skipped, NULL, 0, NULL, 0));
}

Test(jwks, alg_names_are_exact)
{
    for (int a = 0; a != MG_JWT_NUM_ALGS; ++a)
        cr_expect_eq(mg_jwt_alg_parse(mg_jwt_alg_name((mg_jwt_alg_t)a), strlen(mg_jwt_alg_name((mg_jwt_alg_t)a))), a);
    static const char *const not_algs[] = {"none", "None", "rs256", "RS256 ", "EDDSA", "HS256\0", ""};
    for (size_t i = 0; i != sizeof(not_algs) / sizeof(not_algs[0]); ++i)
        cr_expect_eq(mg_jwt_alg_parse(not_algs[i], strlen(not_algs[i]) + (i == 5)), -1, "%s", not_algs[i]);
    cr_expect_eq(mg_jwt_alg_parse("RS2", 3), -1);
}
