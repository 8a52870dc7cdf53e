/*
 * JWS algorithm names and JWK Sets (RFC 7517): the document is read with jansson (duplicate
 * members refused), each key's members are checked here, and the key material is handed to
 * cjose (RSA, EC) or OpenSSL (Ed25519, which this cjose does not know).
 *
 * Only public members reach cjose: a key is rebuilt from kty, n and e (or crv, x and y) before
 * it is imported, so a set that carries private members ("d", "p", ...) never has them parsed,
 * and no key of the set can sign. What each key may verify is decided once, here (mg__key_t's
 * `algs`); jwt.c never hands a key to cjose for an algorithm outside it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/auth/internal.h"

#define MG_RSA_ALGS                                                                                                                \
    (MG_JWT_ALG_BIT(MG_JWT_RS256) | MG_JWT_ALG_BIT(MG_JWT_RS384) | MG_JWT_ALG_BIT(MG_JWT_RS512) | MG_JWT_ALG_BIT(MG_JWT_PS256) |   \
     MG_JWT_ALG_BIT(MG_JWT_PS384) | MG_JWT_ALG_BIT(MG_JWT_PS512))
#define MG_WHY_SIZE 160
#define MG_FIRST_SIZE 256

static const char *const mg_jwt_alg_names[MG_JWT_NUM_ALGS] = {
    [MG_JWT_RS256] = "RS256", [MG_JWT_RS384] = "RS384", [MG_JWT_RS512] = "RS512", [MG_JWT_PS256] = "PS256",
    [MG_JWT_PS384] = "PS384", [MG_JWT_PS512] = "PS512", [MG_JWT_ES256] = "ES256", [MG_JWT_ES384] = "ES384",
    [MG_JWT_ES512] = "ES512", [MG_JWT_EDDSA] = "EdDSA", [MG_JWT_HS256] = "HS256", [MG_JWT_HS384] = "HS384",
    [MG_JWT_HS512] = "HS512",
};

/* The EC curves used: the JWK name, what cjose calls it, the algorithm, a signature's bytes. */
static const struct {
    const char *crv;
    cjose_jwk_ec_curve curve;
    mg_jwt_alg_t alg;
    size_t sig_len;
} mg_ec_curves[] = {
    {"P-256", CJOSE_JWK_EC_P_256, MG_JWT_ES256, 64},
    {"P-384", CJOSE_JWK_EC_P_384, MG_JWT_ES384, 96},
    {"P-521", CJOSE_JWK_EC_P_521, MG_JWT_ES512, 132},
};

const char *mg_jwt_alg_name(mg_jwt_alg_t alg)
{
    return (unsigned)alg < MG_JWT_NUM_ALGS ? mg_jwt_alg_names[alg] : "?";
}

int mg_jwt_alg_parse(const char *s, size_t len)
{
    for (int i = 0; i != MG_JWT_NUM_ALGS; ++i)
        if (strlen(mg_jwt_alg_names[i]) == len && memcmp(mg_jwt_alg_names[i], s, len) == 0)
            return i;
    return -1;
}

/* snprintf into an optional buffer (NULL or size 0: nothing is written). */
__attribute__((format(printf, 3, 4))) static void mg_say(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    if (buf == NULL || size == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* 1 when v is the JSON string s exactly. */
static int mg_json_is(const json_t *v, const char *s)
{
    return json_is_string(v) && json_string_length(v) == strlen(s) && memcmp(json_string_value(v), s, strlen(s)) == 0;
}

/* The string member `name` when it is base64url text (see mg__is_base64url), or NULL. */
static const json_t *mg_key_b64(const json_t *jk, const char *name)
{
    const json_t *v = json_object_get(jk, name);
    return json_is_string(v) && mg__is_base64url(json_string_value(v), json_string_length(v)) ? v : NULL;
}

/* `use` absent or "sig"; `key_ops` absent or holding "verify". */
static int mg_key_use(const json_t *jk, char *why)
{
    const json_t *use = json_object_get(jk, "use"), *ops = json_object_get(jk, "key_ops");
    int verify = 0;
    if (use != NULL && !mg_json_is(use, "sig")) {
        mg_say(why, MG_WHY_SIZE, "its use is not \"sig\"");
        return -1;
    }
    if (ops == NULL)
        return 0;
    for (size_t i = 0; i != json_array_size(ops); ++i)
        verify |= mg_json_is(json_array_get(ops, i), "verify");
    if (!verify)
        mg_say(why, MG_WHY_SIZE, "its key_ops is not an array holding \"verify\"");
    return verify ? 0 : -1;
}

static int mg_key_kid(const json_t *jk, mg__key_t *key, char *why)
{
    const json_t *kid = json_object_get(jk, "kid");
    if (kid == NULL)
        return 0;
    size_t len = json_string_length(kid);
    if (!json_is_string(kid) || len > MG_JWT_MAX_KID || memchr(json_string_value(kid), '\0', len) != NULL) {
        mg_say(why, MG_WHY_SIZE, "its kid is not a string of at most %d bytes", MG_JWT_MAX_KID);
        return -1;
    }
    memcpy(key->kid, json_string_value(kid), len);
    key->kid[len] = '\0';
    key->kid_len = len;
    return 0;
}

/* The key's own `alg`: -1 when absent, -2 (and why) when it names no algorithm we know. */
static int mg_key_alg(const json_t *jk, char *why)
{
    const json_t *alg = json_object_get(jk, "alg");
    int a = json_is_string(alg) ? mg_jwt_alg_parse(json_string_value(alg), json_string_length(alg)) : -1;
    if (alg == NULL)
        return -1;
    if (a < 0)
        mg_say(why, MG_WHY_SIZE, "its alg is not a signature algorithm known here");
    return a < 0 ? -2 : a;
}

/* Hands a key of public members only to cjose; NULL (and why) when it refuses it. */
static cjose_jwk_t *mg_key_import(json_t *pub, char *why)
{
    cjose_err err = {0};
    cjose_jwk_t *jwk = pub != NULL ? cjose_jwk_import_json(pub, &err) : NULL;
    json_decref(pub);
    if (jwk == NULL)
        mg_say(why, MG_WHY_SIZE, "the key is not valid (%s)", err.message != NULL ? err.message : "out of memory");
    return jwk;
}

/* The exact size of the modulus in bits (cjose rounds it up to whole bytes), or 0 when n or e is
 * not a number or e is even or 1 (e = 1 would make every message its own signature). */
static size_t mg_rsa_bits(const json_t *n, const json_t *e)
{
    uint8_t *nb = NULL, *eb = NULL;
    size_t nlen = 0, elen = 0, i = 0, bits = 0;
    cjose_err err;
    if (cjose_base64url_decode(json_string_value(n), json_string_length(n), &nb, &nlen, &err) &&
        cjose_base64url_decode(json_string_value(e), json_string_length(e), &eb, &elen, &err) && elen != 0 && (eb[elen - 1] & 1) &&
        !(elen == 1 && eb[0] == 1)) {
        while (i < nlen && nb[i] == 0)
            ++i;
        if (i < nlen)
            bits = (nlen - i - 1) * 8;
        for (uint8_t top = i < nlen ? nb[i] : 0; top != 0; top >>= 1)
            ++bits;
    }
    cjose_get_dealloc()(nb);
    cjose_get_dealloc()(eb);
    return bits;
}

static int mg_key_rsa(const json_t *jk, mg__key_t *key, char *why)
{
    const json_t *n = mg_key_b64(jk, "n"), *e = mg_key_b64(jk, "e");
    size_t bits = n != NULL && e != NULL ? mg_rsa_bits(n, e) : 0;
    if (bits == 0) {
        mg_say(why, MG_WHY_SIZE, "its n or e is missing or malformed");
        return -1;
    }
    if (bits < MG_KEYSET_MIN_RSA_BITS) {
        mg_say(why, MG_WHY_SIZE, "an RSA modulus of %zu bits (at least %d are needed)", bits, MG_KEYSET_MIN_RSA_BITS);
        return -1;
    }
    key->jwk = mg_key_import(json_pack("{s:s, s:O, s:O}", "kty", "RSA", "n", n, "e", e), why);
    key->algs = MG_RSA_ALGS;
    key->sig_len = (bits + 7) / 8;
    return key->jwk != NULL ? 0 : -1;
}

/* An EC coordinate as RFC 7518 6.2.1.2 writes it: exactly `size` bytes. Some libraries (PyJWT
 * 2.6, Debian bookworm's, for one) drop its leading zero bytes, one key in 128 for P-256:
 * those are padded back, the point is the same. NULL when `v` does not decode or is too long. */
static json_t *mg_ec_coordinate(const json_t *v, size_t size)
{
    uint8_t *raw = NULL, *full = NULL;
    char *text = NULL;
    size_t len = 0, text_len = 0;
    json_t *out = NULL;
    cjose_err err;
    if (cjose_base64url_decode(json_string_value(v), json_string_length(v), &raw, &len, &err) && len <= size &&
        (full = calloc(1, size)) != NULL) {
        memcpy(full + size - len, raw, len);
        if (cjose_base64url_encode(full, size, &text, &text_len, &err))
            out = json_stringn(text, text_len);
    }
    cjose_get_dealloc()(raw);
    cjose_get_dealloc()(text);
    free(full);
    return out;
}

static int mg_key_ec(const json_t *jk, mg__key_t *key, char *why)
{
    const json_t *crv = json_object_get(jk, "crv"), *x = mg_key_b64(jk, "x"), *y = mg_key_b64(jk, "y");
    size_t i = 0;
    while (i != sizeof(mg_ec_curves) / sizeof(mg_ec_curves[0]) && !mg_json_is(crv, mg_ec_curves[i].crv))
        ++i;
    if (i == sizeof(mg_ec_curves) / sizeof(mg_ec_curves[0]) || x == NULL || y == NULL) {
        mg_say(why, MG_WHY_SIZE, "its crv is not P-256, P-384 or P-521, or its x or y is missing or malformed");
        return -1;
    }
    json_t *fx = mg_ec_coordinate(x, mg_ec_curves[i].sig_len / 2), *fy = mg_ec_coordinate(y, mg_ec_curves[i].sig_len / 2);
    if (fx == NULL || fy == NULL) {
        json_decref(fx);
        json_decref(fy);
        mg_say(why, MG_WHY_SIZE, "its x or y is longer than a coordinate of %s", mg_ec_curves[i].crv);
        return -1;
    }
    key->jwk = mg_key_import(json_pack("{s:s, s:O, s:o, s:o}", "kty", "EC", "crv", crv, "x", fx, "y", fy), why);
    if (key->jwk == NULL)
        return -1;
    key->algs = MG_JWT_ALG_BIT(mg_ec_curves[i].alg);
    key->sig_len = mg_ec_curves[i].sig_len;
    if (cjose_jwk_EC_get_curve(key->jwk, NULL) != mg_ec_curves[i].curve) {
        mg_say(why, MG_WHY_SIZE, "the key is not on its crv");
        return -1;
    }
    return 0;
}

static int mg_key_okp(const json_t *jk, mg__key_t *key, char *why)
{
    const json_t *x = mg_key_b64(jk, "x");
    uint8_t *raw = NULL;
    size_t len = 0;
    cjose_err err;
    if (mg_json_is(json_object_get(jk, "crv"), "Ed25519") && x != NULL &&
        cjose_base64url_decode(json_string_value(x), json_string_length(x), &raw, &len, &err))
        key->ed25519 = mg__eddsa_public_key(raw, len);
    cjose_get_dealloc()(raw);
    if (key->ed25519 == NULL) {
        mg_say(why, MG_WHY_SIZE, "its crv is not Ed25519, or its x is not 32 bytes of base64url");
        return -1;
    }
    key->algs = MG_JWT_ALG_BIT(MG_JWT_EDDSA);
    key->sig_len = 64;
    return 0;
}

static void mg_key_dispose(mg__key_t *key)
{
    cjose_jwk_release(key->jwk);
    EVP_PKEY_free(key->ed25519);
}

/* The key material by type. */
static int mg_key_material(const json_t *jk, mg__key_t *key, char *why)
{
    const json_t *kty = json_object_get(jk, "kty");
    if (mg_json_is(kty, "RSA")) {
        key->kty = MG__KTY_RSA;
        return mg_key_rsa(jk, key, why);
    }
    if (mg_json_is(kty, "EC")) {
        key->kty = MG__KTY_EC;
        return mg_key_ec(jk, key, why);
    }
    if (mg_json_is(kty, "OKP")) {
        key->kty = MG__KTY_OKP;
        return mg_key_okp(jk, key, why);
    }
    mg_say(why, MG_WHY_SIZE, "its kty is not RSA, EC or OKP");
    return -1;
}

/* Narrows what the key verifies to its own alg (-1: none), which must be one its type can. */
static int mg_key_narrow(mg__key_t *key, int alg, char *why)
{
    if (alg < 0)
        return 0;
    if (!(key->algs & MG_JWT_ALG_BIT(alg))) {
        mg_say(why, MG_WHY_SIZE, "its alg %s does not fit its kty or crv", mg_jwt_alg_name((mg_jwt_alg_t)alg));
        return -1;
    }
    key->algs = MG_JWT_ALG_BIT(alg);
    return 0;
}

/* One key of the set: 0 with *key filled, or -1 with why it is skipped. */
static int mg_key_parse(const json_t *jk, mg__key_t *key, char *why)
{
    int alg;
    memset(key, 0, sizeof(*key));
    if (!json_is_object(jk)) {
        mg_say(why, MG_WHY_SIZE, "not a JSON object");
        return -1;
    }
    if (mg_key_kid(jk, key, why) != 0 || mg_key_use(jk, why) != 0 || (alg = mg_key_alg(jk, why)) == -2)
        return -1;
    if (mg_key_material(jk, key, why) == 0 && mg_key_narrow(key, alg, why) == 0)
        return 0;
    mg_key_dispose(key);
    return -1;
}

/* The kid for a message, when it is short and printable (a set may come from elsewhere). */
static const char *mg_kid_for_message(const json_t *jk)
{
    const json_t *kid = json_object_get(jk, "kid");
    const char *s = json_string_value(kid);
    size_t len = json_string_length(kid);
    for (size_t i = 0; s != NULL && i != len; ++i)
        if (s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\')
            return NULL;
    return s != NULL && len <= 64 ? s : NULL;
}

/* Counts a skipped key; the first one's reason goes to first[MG_FIRST_SIZE]. */
static void mg_keyset_skip(const json_t *jk, size_t i, const char *why, size_t *skipped, char *first)
{
    const char *kid = mg_kid_for_message(jk);
    if ((*skipped)++ != 0)
        return;
    if (kid != NULL)
        mg_say(first, MG_FIRST_SIZE, "keys[%zu] (kid \"%s\") skipped: %s", i, kid, why);
    else
        mg_say(first, MG_FIRST_SIZE, "keys[%zu] skipped: %s", i, why);
}

static mg_keyset_t *mg_keyset_collect(const json_t *keys, size_t *skipped, char *first)
{
    size_t n = json_array_size(keys);
    mg_keyset_t *ks = calloc(1, sizeof(*ks) + n * sizeof(ks->keys[0]));
    if (ks == NULL)
        return NULL;
    for (size_t i = 0; i != n; ++i) {
        char why[MG_WHY_SIZE] = "";
        if (mg_key_parse(json_array_get(keys, i), &ks->keys[ks->size], why) == 0)
            ks->size++;
        else
            mg_keyset_skip(json_array_get(keys, i), i, why, skipped, first);
    }
    return ks;
}

/* The document's "keys" array, or NULL with the reason in err. */
static const json_t *mg_keyset_array(const json_t *doc, const json_error_t *jerr, char *err, size_t errsize)
{
    const json_t *keys = json_object_get(doc, "keys");
    if (doc == NULL)
        mg_say(err, errsize, "not a JSON document: %s (line %d, column %d)", jerr->text, jerr->line, jerr->column);
    else if (!json_is_object(doc) || !json_is_array(keys))
        mg_say(err, errsize, "not a JWK Set (a JSON object with a \"keys\" array)");
    else if (json_array_size(keys) > MG_KEYSET_MAX_KEYS)
        mg_say(err, errsize, "%zu keys: a set holds at most %d", json_array_size(keys), MG_KEYSET_MAX_KEYS);
    else
        return keys;
    return NULL;
}

/* The set of the keys usable in `keys`, or NULL with the reason in err when there is none. */
static mg_keyset_t *mg_keyset_build(const json_t *keys, size_t *skipped, char *first, char *err, size_t errsize)
{
    mg_keyset_t *ks = mg_keyset_collect(keys, skipped, first);
    if (ks == NULL) {
        mg_say(err, errsize, "out of memory");
    } else if (ks->size == 0) {
        mg_say(err, errsize, "no usable key%s%s%s", first[0] != '\0' ? " (" : "", first, first[0] != '\0' ? ")" : "");
        mg_keyset_free(ks);
        ks = NULL;
    }
    return ks;
}

mg_keyset_t *mg_keyset_parse(const char *json, size_t len, size_t *skipped, char *warn, size_t warnsize, char *err, size_t errsize)
{
    size_t nskipped = 0;
    char first[MG_FIRST_SIZE] = "";
    json_error_t jerr;
    json_t *doc = NULL;
    const json_t *keys;
    mg_keyset_t *ks = NULL;
    mg_say(err, errsize, "%s", "");
    if (len > MG_KEYSET_MAX_BYTES) {
        mg_say(err, errsize, "the JWKS document is larger than %u bytes", MG_KEYSET_MAX_BYTES);
        goto Exit;
    }
    /* jansson refuses nesting past JSON_PARSER_MAX_DEPTH (2048) without recursing further */
    doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if ((keys = mg_keyset_array(doc, &jerr, err, errsize)) != NULL)
        ks = mg_keyset_build(keys, &nskipped, first, err, errsize);
Exit:
    json_decref(doc);
    if (skipped != NULL)
        *skipped = nskipped;
    mg_say(warn, warnsize, "%s", first);
    return ks;
}

size_t mg_keyset_size(const mg_keyset_t *ks)
{
    return ks != NULL ? ks->size : 0;
}

const char *mg_keyset_kid(const mg_keyset_t *ks, size_t i)
{
    return ks != NULL && i < ks->size ? ks->keys[i].kid : "";
}

void mg_keyset_free(mg_keyset_t *ks)
{
    if (ks == NULL)
        return;
    for (size_t i = 0; i != ks->size; ++i)
        mg_key_dispose(&ks->keys[i]);
    free(ks);
}
