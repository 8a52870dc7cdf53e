/*
 * Compression (`compress:` at the top level, on a route or a branch; `compress: off` on a child):
 * the settings read at load, and the choices that need no body: which coding the client's
 * Accept-Encoding prefers (RFC 9110 12.5.3, q-values), and whether a media type is one to
 * compress. The encoders themselves run in the gateway (gateway/request/compress.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "routes/internal.h"

static const char *const mg_compress_keys[] = {"types", "min_size", "gzip", "brotli", "max_memory", NULL};

/* What nginx users list in gzip_types and what Envoy compresses by default, text that shrinks. */
static const char *const mg_compress_default_types[] = {
    "text/html",       "text/plain",        "text/css",         "text/javascript",
    "text/xml",        "text/event-stream", "application/json", "application/javascript",
    "application/xml", "application/wasm",  "image/svg+xml",    NULL};

static int mg_compress_type_ok(mg_str_t t)
{
    const char *slash = memchr(t.base, '/', t.len);
    if (slash == NULL || slash == t.base || (size_t)(slash - t.base) + 1 == t.len)
        return 0;
    if (t.base[t.len - 1] == '*') /* a whole type: "text/" and a star */
        return t.base[t.len - 2] == '/';
    return mg_is_token(t.base, (size_t)(slash - t.base)) && mg_is_token(slash + 1, t.len - (size_t)(slash - t.base) - 1);
}

static int mg_compress_read_types(mg_compress_t *c, const mg_node_t *seq, mg_errors_t *errs)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, errs) != 0)
        return -1;
    if (seq->u.sequence.size == 0) {
        mg_errors_add(errs, seq, "'types' needs at least one media type (write `compress: off` to compress nothing)");
        return -1;
    }
    if ((c->types = calloc(seq->u.sequence.size, sizeof(*c->types))) == NULL)
        abort();
    int ret = 0;
    for (size_t i = 0; i != seq->u.sequence.size; ++i) {
        mg_str_t s;
        if (mg__read_str(seq->u.sequence.items[i], &s, errs) != 0) {
            ret = -1;
        } else if (!mg_compress_type_ok(s)) {
            mg_errors_add(errs, seq->u.sequence.items[i],
                          "invalid media type '%s' (such as application/json, or text/* for every text type; no parameters)",
                          s.base);
            ret = -1;
        } else {
            char *t = mg_copy_or_abort(s.base, s.len);
            for (size_t j = 0; j != s.len; ++j)
                t[j] = t[j] >= 'A' && t[j] <= 'Z' ? (char)(t[j] - 'A' + 'a') : t[j];
            c->types[c->num_types++] = t;
        }
    }
    return ret;
}

static void mg_compress_default(mg_compress_t *c)
{
    size_t n = 0;
    while (mg_compress_default_types[n] != NULL)
        ++n;
    if ((c->types = calloc(n, sizeof(*c->types))) == NULL)
        abort();
    for (size_t i = 0; i != n; ++i)
        c->types[c->num_types++] = mg_copy_or_abort(mg_compress_default_types[i], strlen(mg_compress_default_types[i]));
}

static int mg_node_is_off(const mg_node_t *n)
{
    return n->kind == MG_NODE_SCALAR && n->u.scalar.plain &&
           (strcmp(n->u.scalar.str, "off") == 0 || strcmp(n->u.scalar.str, "false") == 0);
}

/* gzip: {level: 1..9} | off; brotli: {quality: 0..11} | off. *out -1 when off. */
static int mg_compress_read_coding(const mg_node_t *n, const char *key, uint64_t max, int *out, mg_errors_t *errs)
{
    const char *const keys[] = {key, NULL};
    const mg_node_t *v;
    uint64_t level;
    if (mg_node_is_off(n)) {
        *out = -1;
        return 0;
    }
    if (mg_node_expect(n, MG_NODE_MAPPING, errs) != 0 || mg_node_check_keys(n, keys, errs) != 0)
        return -1;
    if ((v = mg_node_get(n, key)) == NULL)
        return 0;
    if (mg_node_to_uint(v, strcmp(key, "level") == 0 ? 1 : 0, max, &level, errs) != 0)
        return -1;
    *out = (int)level;
    return 0;
}

static int mg_compress_read_size(const mg_node_t *n, uint64_t *out, mg_errors_t *errs)
{
    return n != NULL ? mg_node_to_size(n, out, errs) : 0;
}

static mg_compress_t *mg_compress_new(const mg_node_t *at)
{
    mg_compress_t *c = mg__route_part(sizeof(*c));
    c->min_size = MG_COMPRESS_DEFAULT_MIN_SIZE;
    c->gzip_level = MG_COMPRESS_DEFAULT_GZIP_LEVEL;
    c->brotli_quality = MG_COMPRESS_DEFAULT_BROTLI_QUALITY;
    c->max_memory = MG_COMPRESS_DEFAULT_MAX_MEMORY;
    c->line = at->line;
    c->column = at->column;
    return c;
}

static mg_compress_t *mg_compress_read(const mg_node_t *map, int top, mg_errors_t *errs)
{
    mg_compress_t *c = mg_compress_new(map);
    const mg_node_t *n;
    int ret = 0;
    if (mg_node_is_off(map)) {
        c->off = 1;
        return c;
    }
    if (mg_node_expect(map, MG_NODE_MAPPING, errs) != 0 || mg_node_check_keys(map, mg_compress_keys, errs) != 0) {
        mg__compress_free(c);
        return NULL;
    }
    if ((n = mg_node_get(map, "types")) != NULL)
        ret |= mg_compress_read_types(c, n, errs);
    else
        mg_compress_default(c);
    ret |= mg_compress_read_size(mg_node_get(map, "min_size"), &c->min_size, errs);
    if ((n = mg_node_get(map, "gzip")) != NULL)
        ret |= mg_compress_read_coding(n, "level", 9, &c->gzip_level, errs);
    if ((n = mg_node_get(map, "brotli")) != NULL)
        ret |= mg_compress_read_coding(n, "quality", 11, &c->brotli_quality, errs);
    if ((n = mg_node_get(map, "max_memory")) != NULL && !top) {
        mg_errors_add(errs, n,
                      "max_memory is the process's budget for every compressed answer: set it in the top-level "
                      "`compress:`");
        ret = -1;
    } else if (n != NULL) {
        ret |= mg_compress_read_size(n, &c->max_memory, errs);
    }
    if (ret == 0 && c->gzip_level < 0 && c->brotli_quality < 0) {
        mg_errors_add(errs, map, "both gzip and brotli are off: write `compress: off` to compress nothing");
        ret = -1;
    }
    if (ret != 0) {
        mg__compress_free(c);
        return NULL;
    }
    return c;
}

mg_compress_t *mg__compress_read(const mg_node_t *map, mg_errors_t *errs)
{
    return mg_compress_read(map, 0, errs);
}

mg_compress_t *mg_compress_read_top(const mg_node_t *map, mg_errors_t *errs)
{
    return mg_compress_read(map, 1, errs);
}

void mg__compress_free(mg_compress_t *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i != c->num_types; ++i)
        free(c->types[i]);
    free(c->types);
    free(c);
}

void mg_compress_free(mg_compress_t *c)
{
    mg__compress_free(c);
}

/* ---------------------------------------------------------------------------------------
 * Choosing
 */
static int mg_ci_eq(mg_str_t a, const char *b)
{
    return a.len == strlen(b) && strncasecmp(a.base, b, a.len) == 0;
}

int mg_compress_wants_type(const mg_compress_t *c, mg_str_t content_type)
{
    size_t len = 0;
    while (len != content_type.len && content_type.base[len] != ';' && content_type.base[len] != ' ' &&
           content_type.base[len] != '\t')
        ++len;
    mg_str_t t = mg_str(content_type.base, len);
    const char *slash = memchr(t.base, '/', t.len);
    for (size_t i = 0; slash != NULL && i != c->num_types; ++i) {
        size_t n = strlen(c->types[i]);
        if (c->types[i][n - 1] == '*' ? (size_t)(slash - t.base) + 1 == n - 1 && strncasecmp(t.base, c->types[i], n - 1) == 0
                                      : mg_ci_eq(t, c->types[i]))
            return 1;
    }
    return 0;
}

/* The q-value of one element's parameters ("q=0.8"), 1000 for 1; -1 when malformed. */
static int mg_qvalue(mg_str_t params)
{
    size_t i = 0;
    while (i < params.len && (params.base[i] == ' ' || params.base[i] == '\t' || params.base[i] == ';'))
        ++i;
    if (i + 1 >= params.len || (params.base[i] != 'q' && params.base[i] != 'Q') || params.base[i + 1] != '=')
        return i == params.len ? 1000 : -1;
    i += 2;
    int q = 0, digits = 0;
    if (i < params.len && (params.base[i] == '0' || params.base[i] == '1'))
        q = (params.base[i++] - '0') * 1000;
    else
        return -1;
    if (i < params.len && params.base[i] == '.')
        for (++i; i < params.len && params.base[i] >= '0' && params.base[i] <= '9' && digits < 3; ++i, ++digits)
            q += (params.base[i] - '0') * (digits == 0 ? 100 : digits == 1 ? 10 : 1);
    return q > 1000 ? -1 : q;
}

mg_coding_t mg_compress_choose(const mg_compress_t *c, mg_str_t accept_encoding)
{
    int q_gzip = -1, q_br = -1, q_any = -1;
    for (size_t i = 0; i < accept_encoding.len;) {
        size_t start = i;
        while (i < accept_encoding.len && accept_encoding.base[i] != ',')
            ++i;
        mg_str_t item = mg_str(accept_encoding.base + start, i - start);
        ++i;
        size_t a = 0, b;
        while (a < item.len && (item.base[a] == ' ' || item.base[a] == '\t'))
            ++a;
        for (b = a; b < item.len && item.base[b] != ';' && item.base[b] != ' ' && item.base[b] != '\t';)
            ++b;
        mg_str_t coding = mg_str(item.base + a, b - a);
        int q = mg_qvalue(mg_str(item.base + b, item.len - b));
        if (q < 0)
            continue; /* a malformed element says nothing */
        if (mg_ci_eq(coding, "gzip") || mg_ci_eq(coding, "x-gzip"))
            q_gzip = q;
        else if (mg_ci_eq(coding, "br"))
            q_br = q;
        else if (mg_ci_eq(coding, "*"))
            q_any = q;
    }
    /* "*" stands for the codings not named (RFC 9110 12.5.3) */
    q_gzip = q_gzip < 0 ? q_any : q_gzip;
    q_br = q_br < 0 ? q_any : q_br;
    if (c->brotli_quality < 0)
        q_br = -1;
    if (c->gzip_level < 0)
        q_gzip = -1;
    if (q_br > 0 && q_br >= q_gzip)
        return MG_CODING_BROTLI; /* brotli is preferred at equal q: smaller for the same work */
    return q_gzip > 0 ? MG_CODING_GZIP : MG_CODING_IDENTITY;
}

const char *mg_coding_name(mg_coding_t coding)
{
    return coding == MG_CODING_BROTLI ? "br" : coding == MG_CODING_GZIP ? "gzip" : "identity";
}
