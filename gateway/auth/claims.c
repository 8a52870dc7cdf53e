/*
 * Identities: a verified payload flattened into mg_claims_t (see matchers.h) inside a single
 * allocation: the struct, then the entries, then every string they point to (the tenant, the
 * names, the values). One block makes `bytes` exact for the verified-token cache's budget and
 * lets the last release free it all at once.
 *
 * The payload is walked twice with the same code: once to measure (and to refuse what breaks a
 * limit before anything is allocated), once to fill the block. Entries are made in document
 * order (jansson keeps members in the order read), then sorted by name with a stable merge
 * sort, so the entries of one name keep that order.
 *
 * Number texts: an integer is its decimal text ("42", "-7"); a real is jansson's compact
 * encoding at the lowest precision of 15, 16 or 17 digits that reads back as the same double
 * ("1.5", "0.1", "1e19", "1.0"): the text a writer of the token most likely wrote, and the text
 * a `claim` condition compares.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/auth/internal.h"

/* The walk's state: measuring when items is NULL, filling the block otherwise. */
typedef struct mg_flat {
    mg_claim_t *items;
    char *text;   /* filling: where the next string goes */
    size_t count; /* entries so far */
    size_t bytes; /* bytes of strings so far */
} mg_flat_t;

#define MG_NUMBER_TEXT 48

static int mg_flat_value(mg_flat_t *f, mg_str_t name, const json_t *v, unsigned nesting);

/* Takes len bytes of text for s (copied when filling): the copy, or NULL when measuring. */
static char *mg_flat_take(mg_flat_t *f, const char *s, size_t len)
{
    f->bytes += len;
    if (f->items == NULL)
        return NULL;
    char *p = f->text;
    if (len != 0)
        memcpy(p, s, len);
    f->text += len;
    return p;
}

static int mg_flat_push(mg_flat_t *f, mg_str_t name, mg_claim_type_t type, mg_str_t value)
{
    if (f->count == MG_CLAIMS_MAX_ENTRIES)
        return -1;
    if (f->items != NULL)
        f->items[f->count] = (mg_claim_t){name, value, type};
    f->count++;
    return 0;
}

/* The name of member `key` of the object named `prefix` ("prefix.key"; "key" at the top). */
static int mg_flat_name(mg_flat_t *f, mg_str_t prefix, int top, const char *key, size_t key_len, mg_str_t *out)
{
    size_t len = top ? key_len : prefix.len + 1 + key_len;
    if (len > MG_CLAIMS_MAX_NAME || memchr(key, '\0', key_len) != NULL)
        return -1;
    if (top) {
        *out = mg_str(mg_flat_take(f, key, key_len), len);
        return 0;
    }
    char *p = mg_flat_take(f, prefix.base, prefix.len);
    mg_flat_take(f, ".", 1);
    mg_flat_take(f, key, key_len);
    *out = mg_str(p, len);
    return 0;
}

static int mg_flat_members(mg_flat_t *f, mg_str_t prefix, int top, const json_t *obj, unsigned nesting)
{
    /* jansson's iterators take a non-const object but do not change it */
    json_t *o = (json_t *)obj;
    for (void *it = json_object_iter(o); it != NULL; it = json_object_iter_next(o, it)) {
        mg_str_t name;
        if (mg_flat_name(f, prefix, top, json_object_iter_key(it), json_object_iter_key_len(it), &name) != 0 ||
            mg_flat_value(f, name, json_object_iter_value(it), nesting) != 0)
            return -1;
    }
    return 0;
}

static int mg_flat_container(mg_flat_t *f, mg_str_t name, const json_t *v, unsigned nesting)
{
    if (nesting + 1 > MG_CLAIMS_MAX_DEPTH)
        return -1;
    if (json_is_object(v))
        return mg_flat_push(f, name, MG_CLAIM_OBJECT, MG_STR("")) != 0 ? -1 : mg_flat_members(f, name, 0, v, nesting + 1);
    if (mg_flat_push(f, name, MG_CLAIM_ARRAY, MG_STR("")) != 0)
        return -1;
    for (size_t i = 0; i != json_array_size(v); ++i)
        if (mg_flat_value(f, name, json_array_get(v, i), nesting + 1) != 0)
            return -1;
    return 0;
}

static int mg_flat_string(mg_flat_t *f, mg_str_t name, const json_t *v)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (memchr(s, '\0', len) != NULL)
        return -1;
    return mg_flat_push(f, name, MG_CLAIM_STRING, mg_str(mg_flat_take(f, s, len), len));
}

/* The text of a JSON number (see the top of the file) in buf[MG_NUMBER_TEXT]; 0 on failure. */
static size_t mg_number_text(const json_t *v, char *buf)
{
    if (json_is_integer(v)) {
        int n = snprintf(buf, MG_NUMBER_TEXT, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return n > 0 && n < MG_NUMBER_TEXT ? (size_t)n : 0;
    }
    for (int precision = 15;; ++precision) {
        size_t n = json_dumpb(v, buf, MG_NUMBER_TEXT - 1, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(precision));
        if (n == 0 || n >= MG_NUMBER_TEXT)
            return 0;
        buf[n] = '\0';
        if (precision == 17 || strtod(buf, NULL) == json_real_value(v))
            return n;
    }
}

static int mg_flat_number(mg_flat_t *f, mg_str_t name, const json_t *v)
{
    char buf[MG_NUMBER_TEXT];
    size_t len = mg_number_text(v, buf);
    if (len == 0)
        return -1;
    return mg_flat_push(f, name, MG_CLAIM_NUMBER, mg_str(mg_flat_take(f, buf, len), len));
}

/* `nesting`: the objects and arrays around v, the payload itself not counted. */
static int mg_flat_value(mg_flat_t *f, mg_str_t name, const json_t *v, unsigned nesting)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
    case JSON_ARRAY:
        return mg_flat_container(f, name, v, nesting);
    case JSON_STRING:
        return mg_flat_string(f, name, v);
    case JSON_INTEGER:
    case JSON_REAL:
        return mg_flat_number(f, name, v);
    case JSON_TRUE:
        return mg_flat_push(f, name, MG_CLAIM_BOOL, MG_STR("true"));
    case JSON_FALSE:
        return mg_flat_push(f, name, MG_CLAIM_BOOL, MG_STR("false"));
    case JSON_NULL:
        return mg_flat_push(f, name, MG_CLAIM_NULL, MG_STR("null"));
    }
    return -1;
}

/* The order of mg_claims_find (matchers/claims.c): bytes, then the shorter first. */
static int mg_claim_cmp(const mg_claim_t *a, const mg_claim_t *b)
{
    size_t n = a->name.len < b->name.len ? a->name.len : b->name.len;
    int c = n != 0 ? memcmp(a->name.base, b->name.base, n) : 0;
    return c != 0 ? c : (a->name.len > b->name.len) - (a->name.len < b->name.len);
}

/* Merges src[lo..mid) and src[mid..hi) into dst[lo..hi), the left run first among equals. */
static void mg_claims_merge(mg_claim_t *dst, const mg_claim_t *src, size_t lo, size_t mid, size_t hi)
{
    size_t i = lo, j = mid, k = lo;
    while (i < mid && j < hi)
        dst[k++] = mg_claim_cmp(&src[j], &src[i]) < 0 ? src[j++] : src[i++];
    while (i < mid)
        dst[k++] = src[i++];
    while (j < hi)
        dst[k++] = src[j++];
}

/* A stable sort by name (bottom-up merge sort: qsort is not stable). -1 when out of memory. */
static int mg_claims_sort(mg_claim_t *items, size_t n)
{
    if (n < 2)
        return 0;
    mg_claim_t *scratch = malloc(n * sizeof(*scratch)), *src = items, *dst = scratch;
    if (scratch == NULL)
        return -1;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            mg_claims_merge(dst, src, lo, mid, hi);
        }
        mg_claim_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != items)
        memcpy(items, src, n * sizeof(*items));
    free(scratch);
    return 0;
}

int mg__numeric_date(const json_t *v, int64_t *secs, int64_t *secs_ceil)
{
    int64_t lo;
    int fraction = 0;
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            return -1;
        lo = (int64_t)json_integer_value(v);
    } else if (json_is_real(v)) {
        double r = json_real_value(v);
        /* 2^63 exactly; the largest double below it converts to int64 without overflow */
        if (!(r >= 0 && r < 9223372036854775808.0))
            return -1;
        lo = (int64_t)r; /* truncation is the floor for r >= 0 */
        fraction = (double)lo < r;
    } else {
        return -1;
    }
    *secs = lo;
    if (secs_ceil != NULL)
        *secs_ceil = lo + fraction;
    return 0;
}

/* `sub` when the payload's member is a string: its entry (the only one of that name). */
static mg_str_t mg_identity_sub(const json_t *payload, const mg_claims_t *claims)
{
    size_t count, i;
    if (!json_is_string(json_object_get(payload, "sub")))
        return MG_STR("");
    i = mg_claims_find(claims, MG_STR("sub"), &count);
    return count == 1 ? claims->items[i].value : MG_STR("");
}

static void mg_identity_fill(mg_identity_t *id, size_t size, const json_t *payload, size_t count)
{
    int64_t exp;
    atomic_init(&id->refs, 1);
    id->claims = (mg_claims_t){(const mg_claim_t *)(id + 1), count};
    id->sub = mg_identity_sub(payload, &id->claims);
    id->exp = mg__numeric_date(json_object_get(payload, "exp"), &exp, NULL) == 0 ? exp : INT64_MAX;
    id->bytes = size;
}

mg_identity_t *mg_identity_new(const void *payload, mg_str_t tenant)
{
    const json_t *obj = payload;
    mg_flat_t measure = {0};
    if (obj == NULL || !json_is_object(obj) || mg_flat_members(&measure, MG_STR_NULL, 1, obj, 0) != 0)
        return NULL;
    size_t size = sizeof(mg_identity_t) + measure.count * sizeof(mg_claim_t) + tenant.len + measure.bytes;
    mg_identity_t *id = malloc(size);
    if (id == NULL)
        return NULL;
    mg_claim_t *items = (mg_claim_t *)(id + 1);
    char *text = (char *)(items + measure.count);
    if (tenant.len != 0)
        memcpy(text, tenant.base, tenant.len);
    id->tenant = mg_str(text, tenant.len);
    mg_flat_t fill = {.items = items, .text = text + tenant.len};
    /* the same walk over the same object: it cannot fail where measuring did not */
    if (mg_flat_members(&fill, MG_STR_NULL, 1, obj, 0) != 0 || fill.count != measure.count ||
        mg_claims_sort(items, fill.count) != 0) {
        free(id);
        return NULL;
    }
    mg_identity_fill(id, size, obj, fill.count);
    return id;
}

mg_identity_t *mg_identity_retain(mg_identity_t *id)
{
    if (id != NULL)
        atomic_fetch_add_explicit(&id->refs, 1, memory_order_relaxed);
    return id;
}

void mg_identity_release(mg_identity_t *id)
{
    /* acq_rel: the thread that frees sees every other holder's last use before it */
    if (id != NULL && atomic_fetch_sub_explicit(&id->refs, 1, memory_order_acq_rel) == 1)
        free(id);
}
