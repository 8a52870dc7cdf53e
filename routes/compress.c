/*
 * Compression (`compress:` at the top level, on a route or a branch; `compress: off` on a child):
 * the settings read at load, and the choices that need no body: which coding the client's
 * Accept-Encoding prefers (RFC 9110 12.5.3, q-values), and whether a media type is one to
 * compress. The encoders themselves run in the gateway (gateway/request/compress.c).
 *
 * Keys are inherited one by one, as nginx's gzip_* directives are: an answer takes each key from
 * the nearest `compress:` up the tree that writes it, then from the top-level one, then its
 * default (mg_compress_resolve). `off` writes no key: it only stops compression where it is the
 * nearest `compress:`.
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
    if (t.len == 3 && memcmp(t.base, "*/*", 3) == 0) /* every type, as nginx's `gzip_types *` */
        return 1;
    if (t.base[t.len - 1] == '*') /* a whole type: "text/" and a star */
        return t.base[t.len - 2] == '/' && mg_is_token(t.base, (size_t)(slash - t.base));
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
                          "invalid media type '%s' (such as application/json, text/* for every text type, or */*; no "
                          "parameters)",
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
    if ((n = mg_node_get(map, "types")) != NULL) {
        ret |= mg_compress_read_types(c, n, errs);
        c->set |= MG_COMPRESS_SET_TYPES;
    }
    if ((n = mg_node_get(map, "min_size")) != NULL) {
        ret |= mg_node_to_size(n, &c->min_size, errs);
        c->set |= MG_COMPRESS_SET_MIN_SIZE;
    }
    if ((n = mg_node_get(map, "gzip")) != NULL) {
        ret |= mg_compress_read_coding(n, "level", 9, &c->gzip_level, errs);
        c->set |= MG_COMPRESS_SET_GZIP;
    }
    if ((n = mg_node_get(map, "brotli")) != NULL) {
        ret |= mg_compress_read_coding(n, "quality", 11, &c->brotli_quality, errs);
        c->set |= MG_COMPRESS_SET_BROTLI;
    }
    if ((n = mg_node_get(map, "max_memory")) != NULL && !top) {
        mg_errors_add(errs, n,
                      "max_memory is the process's budget for every compressed answer: set it in the top-level "
                      "`compress:`");
        ret = -1;
    } else if (n != NULL) {
        ret |= mg_node_to_size(n, &c->max_memory, errs);
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

static int mg_ci_eq(mg_str_t a, const char *b)
{
    return a.len == strlen(b) && strncasecmp(a.base, b, a.len) == 0;
}

/* ---------------------------------------------------------------------------------------
 * Resolving what applies to an answer
 */
static void mg_compress_take(const mg_compress_t *c, unsigned *need, mg_compress_settings_t *out)
{
    unsigned take = c->set & *need;
    if (take & MG_COMPRESS_SET_TYPES) {
        out->types = (const char *const *)c->types;
        out->num_types = c->num_types;
    }
    if (take & MG_COMPRESS_SET_MIN_SIZE)
        out->min_size = c->min_size;
    if (take & MG_COMPRESS_SET_GZIP)
        out->gzip_level = c->gzip_level;
    if (take & MG_COMPRESS_SET_BROTLI)
        out->brotli_quality = c->brotli_quality;
    *need &= ~take;
}

int mg_compress_resolve(const mg_route_t *leaf, const mg_compress_t *top, mg_compress_settings_t *out)
{
    const mg_compress_t *nearest = leaf != NULL ? mg_route_compress(leaf) : NULL;
    if (nearest == NULL)
        nearest = top;
    if (nearest == NULL || nearest->off)
        return 0;
    *out = (mg_compress_settings_t){
        mg_compress_default_types, sizeof(mg_compress_default_types) / sizeof(mg_compress_default_types[0]) - 1,
        MG_COMPRESS_DEFAULT_MIN_SIZE, MG_COMPRESS_DEFAULT_GZIP_LEVEL, MG_COMPRESS_DEFAULT_BROTLI_QUALITY};
    unsigned need = MG_COMPRESS_SET_ALL;
    for (const mg_route_t *r = leaf != NULL ? leaf->response_from : NULL; r != NULL && need != 0;
         r = r->parent != NULL ? r->parent->response_from : NULL) {
        if (r->response->compress != NULL)
            mg_compress_take(r->response->compress, &need, out);
    }
    if (top != NULL && need != 0)
        mg_compress_take(top, &need, out);
    return 1;
}

/* ---------------------------------------------------------------------------------------
 * Choosing
 */
int mg_compress_wants_type(const mg_compress_settings_t *c, mg_str_t content_type)
{
    size_t len = 0;
    while (len != content_type.len && content_type.base[len] != ';' && content_type.base[len] != ' ' &&
           content_type.base[len] != '\t')
        ++len;
    mg_str_t t = mg_str(content_type.base, len);
    const char *slash = memchr(t.base, '/', t.len);
    for (size_t i = 0; slash != NULL && i != c->num_types; ++i) {
        size_t n = strlen(c->types[i]);
        if (n == 3 && memcmp(c->types[i], "*/*", 3) == 0)
            return 1;
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

mg_coding_t mg_compress_choose(const mg_compress_settings_t *c, mg_str_t accept_encoding)
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

/* ---------------------------------------------------------------------------------------
 * Deciding
 */
static const char *const mg_compress_skip_labels[MG_COMPRESS_NUM_SKIPS] = {
    "", "status", "encoded", "no_transform", "type", "size", "method", "http_version", "not_accepted", "memory"};

const char *mg_compress_skip_label(mg_compress_skip_t why)
{
    return mg_compress_skip_labels[why];
}

int mg_cache_control_no_transform(mg_str_t value)
{
    for (size_t i = 0; i < value.len;) {
        while (i < value.len && (value.base[i] == ' ' || value.base[i] == '\t' || value.base[i] == ','))
            ++i;
        size_t start = i;
        while (i < value.len && value.base[i] != ',' && value.base[i] != '=' && value.base[i] != ' ' && value.base[i] != '\t')
            ++i;
        if (mg_ci_eq(mg_str(value.base + start, i - start), "no-transform"))
            return 1;
        /* past the directive's argument, a quoted string included (it may hold commas) */
        for (int quoted = 0; i < value.len && (quoted || value.base[i] != ','); ++i) {
            if (value.base[i] == '"')
                quoted = !quoted;
            else if (quoted && value.base[i] == '\\')
                ++i;
        }
    }
    return 0;
}

/* Statuses whose body is the resource or an error page: like nginx's 200, 403 and 404, widened to
 * every 2xx with a body of its own (not 204, 205 and 206) and every 4xx and 5xx. 1xx and 3xx
 * answers have no body worth it (a 304 none at all). */
static int mg_compress_status_ok(int status)
{
    if (status >= 200 && status < 300)
        return status != 204 && status != 205 && status != 206;
    return status >= 400 && status < 600;
}

/* Why the answer itself is not one to compress, whoever asks for it (no Vary then). */
static mg_compress_skip_t mg_compress_skip_answer(const mg_compress_settings_t *s, const mg_compress_facts_t *f)
{
    if (!mg_compress_status_ok(f->status))
        return MG_COMPRESS_SKIP_STATUS;
    if (f->encoded)
        return MG_COMPRESS_SKIP_ENCODED;
    if (f->no_transform)
        return MG_COMPRESS_SKIP_NO_TRANSFORM; /* RFC 9111 5.2.2.6: a proxy must not change the body */
    if (f->content_type.base == NULL || !mg_compress_wants_type(s, f->content_type))
        return MG_COMPRESS_SKIP_TYPE;
    if (f->length != UINT64_MAX && (f->length == 0 || f->length < s->min_size))
        return MG_COMPRESS_SKIP_SIZE;
    return MG_COMPRESS_YES;
}

mg_compress_skip_t mg_compress_decide(const mg_compress_settings_t *s, const mg_compress_facts_t *f, mg_coding_t *coding, int *vary)
{
    mg_compress_skip_t why = mg_compress_skip_answer(s, f);
    *coding = MG_CODING_IDENTITY;
    *vary = why == MG_COMPRESS_YES;
    if (why != MG_COMPRESS_YES)
        return why;
    /* from here on the answer depends on the request: caches must know it (Vary), even for this
     * one, which goes as it is (a HEAD's fields are those of a GET) */
    if (f->head)
        return MG_COMPRESS_SKIP_METHOD;
    if (f->http10)
        return MG_COMPRESS_SKIP_HTTP_VERSION; /* as nginx's gzip_http_version 1.1: no chunked framing */
    if (f->accept_encoding.base == NULL || (*coding = mg_compress_choose(s, f->accept_encoding)) == MG_CODING_IDENTITY)
        return MG_COMPRESS_SKIP_NOT_ACCEPTED;
    return MG_COMPRESS_YES;
}
