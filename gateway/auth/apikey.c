/*
 * API keys: a keys file of SHA-256 hashes, one line per key ("<64 hex digits> <tenant>
 * [claims]"), read into an array sorted by hash. A key is looked up by the first 8 bytes of its
 * hash (a binary search), then compared whole with CRYPTO_memcmp, so that the comparison that
 * decides takes the same time whatever the bytes.
 *
 * Errors never quote the hash field: a user who pasted a key instead of its hash would find the
 * key in every log that shows the error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>
#include "gateway/auth/internal.h"

#define MG_SHA256_BYTES 32
#define MG_HASH_HEX (2 * MG_SHA256_BYTES)
#define MG_PREFIX_BYTES 8 /* what the binary search compares */
#define MG_TENANT_MAX 128

typedef struct mg_apikey {
    uint8_t hash[MG_SHA256_BYTES];
    unsigned line;
    mg_identity_t *id;
} mg_apikey_t;

struct mg_apikeys {
    mg_apikey_t *items;
    size_t size, capacity;
};

/* Reading one file: where the errors go and what line we are on. */
typedef struct mg_keys_reader {
    const char *path;
    mg_errors_t *errs;
    unsigned line;
} mg_keys_reader_t;

static int mg_sha256(const void *data, size_t len, uint8_t out[MG_SHA256_BYTES])
{
    return EVP_Digest(data, len, out, NULL, EVP_sha256(), NULL) == 1 ? 0 : -1;
}

static int mg_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static size_t mg_skip_blanks(const char *s, size_t i, size_t len)
{
    while (i < len && (s[i] == ' ' || s[i] == '\t'))
        ++i;
    return i;
}

static size_t mg_field_end(const char *s, size_t i, size_t len)
{
    while (i < len && s[i] != ' ' && s[i] != '\t')
        ++i;
    return i;
}

/* The hash field s[0..end): 64 hex digits (either case). */
static int mg_read_hash(mg_keys_reader_t *rd, const char *s, size_t end, uint8_t hash[MG_SHA256_BYTES])
{
    if (end != MG_HASH_HEX) {
        mg_errors_add_at(rd->errs, rd->path, rd->line, 1, "expected %d hex digits (the SHA-256 of the key), got %zu characters",
                         MG_HASH_HEX, end);
        return -1;
    }
    for (size_t i = 0; i != MG_HASH_HEX; i += 2) {
        int hi = mg_hex_digit(s[i]), lo = mg_hex_digit(s[i + 1]);
        if (hi < 0 || lo < 0) {
            mg_errors_add_at(rd->errs, rd->path, rd->line, (unsigned)(hi < 0 ? i + 1 : i + 2),
                             "expected %d hex digits (the SHA-256 of the key), got a character that is not one", MG_HASH_HEX);
            return -1;
        }
        hash[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/* Why s[0..len) cannot name a tenant (as tenants.identify refuses), or NULL. */
static const char *mg_tenant_problem(const char *s, size_t len)
{
    if (len == 0)
        return "a tenant name is missing after the hash";
    if (len > MG_TENANT_MAX)
        return "a tenant name is at most 128 bytes";
    if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
        return "\".\" and \"..\" are not tenant names";
    for (size_t i = 0; i != len; ++i) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return "a tenant name cannot hold a control character";
        if (c == '/' || c == '\\')
            return "a tenant name cannot hold '/' or '\\'";
    }
    return NULL;
}

/* The claims text s[from..len) ("" for none) as a JSON object, or NULL after an error. */
static json_t *mg_read_claims(mg_keys_reader_t *rd, const char *s, size_t from, size_t len)
{
    json_error_t jerr;
    if (from == len)
        return json_object();
    json_t *v = json_loadb(s + from, len - from, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (v == NULL) {
        unsigned column = (unsigned)from + (jerr.column > 0 ? (unsigned)jerr.column : 1);
        mg_errors_add_at(rd->errs, rd->path, rd->line, column, "the claims are not valid JSON: %s", jerr.text);
    } else if (!json_is_object(v)) {
        mg_errors_add_at(rd->errs, rd->path, rd->line, (unsigned)from + 1, "the claims must be a JSON object");
        json_decref(v);
        v = NULL;
    }
    return v;
}

static int mg_apikeys_push(mg_apikeys_t *keys, const mg_apikey_t *key)
{
    if (keys->size == keys->capacity) {
        size_t capacity = keys->capacity != 0 ? 2 * keys->capacity : 16;
        mg_apikey_t *items = realloc(keys->items, capacity * sizeof(*items));
        if (items == NULL)
            return -1;
        keys->items = items;
        keys->capacity = capacity;
    }
    keys->items[keys->size++] = *key;
    return 0;
}

/* The identity of a line: its claims (from column `from`) and its tenant. */
static mg_identity_t *mg_read_identity(mg_keys_reader_t *rd, const char *s, size_t from, size_t len, mg_str_t tenant)
{
    json_t *claims = mg_read_claims(rd, s, from, len);
    if (claims == NULL)
        return NULL;
    mg_identity_t *id = mg_identity_new(claims, tenant);
    json_decref(claims);
    if (id == NULL)
        mg_errors_add_at(rd->errs, rd->path, rd->line, (unsigned)from + 1,
                         "the claims are past the limits (%d entries, names of %d bytes, %d levels of nesting) or hold a NUL",
                         MG_CLAIMS_MAX_ENTRIES, MG_CLAIMS_MAX_NAME, MG_CLAIMS_MAX_DEPTH);
    return id;
}

/* One line that is not blank nor a comment: hash, tenant, optional claims. */
static void mg_read_key_line(mg_keys_reader_t *rd, mg_apikeys_t *keys, const char *s, size_t len)
{
    mg_apikey_t key = {.line = rd->line};
    size_t hash_end = mg_field_end(s, 0, len), tenant_at = mg_skip_blanks(s, hash_end, len);
    size_t tenant_end = mg_field_end(s, tenant_at, len), claims_at = mg_skip_blanks(s, tenant_end, len);
    if (mg_read_hash(rd, s, hash_end, key.hash) != 0)
        return;
    const char *problem = mg_tenant_problem(s + tenant_at, tenant_end - tenant_at);
    if (problem != NULL) {
        mg_errors_add_at(rd->errs, rd->path, rd->line, (unsigned)tenant_at + 1, "%s", problem);
        return;
    }
    key.id = mg_read_identity(rd, s, claims_at, len, mg_str(s + tenant_at, tenant_end - tenant_at));
    if (key.id != NULL && mg_apikeys_push(keys, &key) != 0) {
        mg_errors_add_at(rd->errs, rd->path, rd->line, 1, "out of memory");
        mg_identity_release(key.id);
    }
}

static void mg_read_line(mg_keys_reader_t *rd, mg_apikeys_t *keys, const char *s, size_t len)
{
    /* a line of a file edited on Windows ends with CR LF */
    while (len != 0 && (s[len - 1] == '\n' || s[len - 1] == '\r'))
        --len;
    if (mg_skip_blanks(s, 0, len) == len || s[0] == '#')
        return;
    mg_read_key_line(rd, keys, s, len);
}

static int mg_apikey_cmp(const void *a, const void *b)
{
    const mg_apikey_t *x = a, *y = b;
    int c = memcmp(x->hash, y->hash, MG_SHA256_BYTES);
    return c != 0 ? c : (x->line > y->line) - (x->line < y->line);
}

/* Sorts by hash; a hash given twice is an error on its later line. */
static void mg_apikeys_sort(mg_keys_reader_t *rd, mg_apikeys_t *keys)
{
    if (keys->size > 1)
        qsort(keys->items, keys->size, sizeof(keys->items[0]), mg_apikey_cmp);
    for (size_t i = 1; i < keys->size; ++i)
        if (memcmp(keys->items[i - 1].hash, keys->items[i].hash, MG_SHA256_BYTES) == 0)
            mg_errors_add_at(rd->errs, rd->path, keys->items[i].line, 1, "this hash is already given on line %u",
                             keys->items[i - 1].line);
}

static void mg_read_file(mg_keys_reader_t *rd, mg_apikeys_t *keys, FILE *f)
{
    char *line = NULL;
    size_t size = 0;
    ssize_t n;
    while ((n = getline(&line, &size, f)) >= 0) {
        rd->line++;
        mg_read_line(rd, keys, line, (size_t)n);
    }
    if (ferror(f))
        mg_errors_add_at(rd->errs, NULL, 0, 0, "%s: cannot read it: %s", rd->path, strerror(errno));
    free(line);
}

mg_apikeys_t *mg_apikeys_load(const char *path, mg_errors_t *errs)
{
    mg_keys_reader_t rd = {.path = path, .errs = errs};
    size_t errors = errs->num_errors;
    mg_apikeys_t *keys = calloc(1, sizeof(*keys));
    FILE *f = fopen(path, "r");
    if (keys == NULL || f == NULL) {
        mg_errors_add_at(errs, NULL, 0, 0, "%s: cannot read it: %s", path, keys == NULL ? "out of memory" : strerror(errno));
        goto Exit;
    }
    mg_read_file(&rd, keys, f);
    mg_apikeys_sort(&rd, keys);
Exit:
    if (f != NULL)
        fclose(f);
    if (errs->num_errors != errors) {
        mg_apikeys_free(keys);
        keys = NULL;
    }
    return keys;
}

/* The first entry whose hash does not start below `hash`'s first bytes. */
static size_t mg_apikeys_lower_bound(const mg_apikeys_t *keys, const uint8_t *hash)
{
    size_t lo = 0, hi = keys->size;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (memcmp(keys->items[mid].hash, hash, MG_PREFIX_BYTES) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

mg_identity_t *mg_apikeys_find(const mg_apikeys_t *keys, const char *key, size_t len)
{
    uint8_t hash[MG_SHA256_BYTES];
    mg_identity_t *found = NULL;
    if (keys == NULL || keys->size == 0 || mg_sha256(key, len, hash) != 0)
        return NULL;
    /* every entry of the same first bytes is compared whole, the match or not */
    for (size_t i = mg_apikeys_lower_bound(keys, hash); i < keys->size && memcmp(keys->items[i].hash, hash, MG_PREFIX_BYTES) == 0;
         ++i)
        if (CRYPTO_memcmp(keys->items[i].hash, hash, MG_SHA256_BYTES) == 0)
            found = keys->items[i].id;
    return found;
}

size_t mg_apikeys_size(const mg_apikeys_t *keys)
{
    return keys != NULL ? keys->size : 0;
}

void mg_apikeys_free(mg_apikeys_t *keys)
{
    if (keys == NULL)
        return;
    for (size_t i = 0; i != keys->size; ++i)
        mg_identity_release(keys->items[i].id);
    free(keys->items);
    free(keys);
}

char *mg_apikey_line(const char *key, size_t len, const char *tenant, const char *claims_json)
{
    uint8_t hash[MG_SHA256_BYTES];
    char hex[MG_HASH_HEX + 1], *line = NULL;
    int has_claims = claims_json != NULL && claims_json[0] != '\0';
    if (mg_sha256(key, len, hash) != 0)
        return NULL;
    for (size_t i = 0; i != MG_SHA256_BYTES; ++i)
        snprintf(hex + 2 * i, 3, "%02x", hash[i]);
    if (asprintf(&line, "%s %s%s%s\n", hex, tenant, has_claims ? " " : "", has_claims ? claims_json : "") < 0)
        return NULL;
    return line;
}
