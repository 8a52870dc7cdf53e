/*
 * Expanding a template per request (template.c compiles it): each piece's value looked up in the
 * routing context and written with the encoding its target needs (template.c's header describes
 * the forms and the path rules), then the checks no value may fail: CR, LF or NUL anywhere, a
 * control character in a header, a dot segment a variable touches in a path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

typedef struct mg_value {
    mg_str_t s;
    mg_value_form_t form;
} mg_value_t;

static mg_value_t mg_value(mg_str_t s, mg_value_form_t form)
{
    return (mg_value_t){s.base != NULL ? s : mg_str("", 0), form};
}

static mg_value_t mg_builtin_value(const mg_piece_t *p, const mg_ctx_t *ctx)
{
    switch (p->kind) {
    case MG_PIECE_TENANT:
        return mg_value(ctx->tenant, MG_FORM_PLAIN);
    case MG_PIECE_HOST:
        return mg_value(ctx->host, MG_FORM_PLAIN);
    case MG_PIECE_PATH:
        return mg_value(ctx->path, MG_FORM_ENCODED);
    case MG_PIECE_QUERY:
        return mg_value(ctx->query, MG_FORM_OPAQUE);
    default:
        return mg_value(ctx->method, MG_FORM_PLAIN);
    }
}

/* ${status} and ${response.header.<Name>} (the first field of that name): empty without an answer. */
static mg_value_t mg_response_value(const mg_piece_t *p, const mg_ctx_response_t *res)
{
    if (res == NULL)
        return mg_value(MG_STR_NULL, MG_FORM_PLAIN);
    if (p->kind == MG_PIECE_STATUS)
        return mg_value(mg_str(res->status_text, strlen(res->status_text)), MG_FORM_PLAIN);
    const mg_str_t *v = res->ops->get(res->fields, p->text);
    return mg_value(v != NULL ? *v : MG_STR_NULL, MG_FORM_PLAIN);
}

static mg_value_t mg_piece_value(const mg_piece_t *p, const mg_ctx_t *ctx)
{
    if (p->may_be_bound) {
        /* A capture wins over the builtin of the same name; an unbound capture is empty. */
        const mg_var_t *v = mg_ctx_find_var(ctx, p->text);
        if (v != NULL)
            return mg_value(v->value, (v->flags & MG_VAR_ENCODED) != 0 ? MG_FORM_ENCODED : MG_FORM_PLAIN);
        if (p->kind == MG_PIECE_VAR)
            return mg_value(MG_STR_NULL, MG_FORM_PLAIN);
    }
    if (p->kind == MG_PIECE_HEADER) {
        const mg_str_t *h = mg_ctx_get_header(ctx, p->text);
        return mg_value(h != NULL ? *h : MG_STR_NULL, MG_FORM_PLAIN);
    }
    if (p->kind == MG_PIECE_QUERY_PARAM) {
        int found;
        return mg_value(mg_query_param(ctx->query, p->text, &found), MG_FORM_QUERY_VALUE);
    }
    if (p->kind == MG_PIECE_STATUS || p->kind == MG_PIECE_RESPONSE_HEADER)
        return mg_response_value(p, ctx->response);
    if (p->kind == MG_PIECE_CLAIM) {
        const mg_str_t *v = mg_claims_value(ctx->claims, p->text);
        return mg_value(v != NULL ? *v : MG_STR_NULL, MG_FORM_PLAIN);
    }
    return mg_builtin_value(p, ctx);
}

/* The next decoded byte of s at *i (advancing *i past its escape, if any). */
static unsigned char mg_next_decoded(mg_str_t s, size_t *i, int plus)
{
    int hi, lo;
    if (s.base[*i] == '%' && *i + 2 < s.len && (hi = mg_hex_value(s.base[*i + 1])) >= 0 &&
        (lo = mg_hex_value(s.base[*i + 2])) >= 0) {
        *i += 3;
        return (unsigned char)(hi << 4 | lo);
    }
    char c = s.base[(*i)++];
    return plus && c == '+' ? ' ' : (unsigned char)c;
}

static int mg_is_unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
}

/* Whether a plain byte is written as it is into `target` (else it is %-encoded). In a path,
 * '/' and '\' are encoded: a plain value is one segment's content. */
static int mg_keeps(mg_template_target_t target, unsigned char c)
{
    if (mg_is_unreserved(c))
        return 1;
    if (target == MG_TARGET_QUERY)
        return c != '\0' && strchr("/:@?!$'()*,;", c) != NULL;
    return c != '\0' && strchr("!$&'()*+,;=:@", c) != NULL; /* sub-delims, ':', '@' */
}

static char *mg_put_escaped(char *out, unsigned char c)
{
    static const char hex[] = "0123456789ABCDEF";
    *out++ = '%';
    *out++ = hex[c >> 4];
    *out++ = hex[c & 15];
    return out;
}

/* A raw slice: as it is, but a '?' or '#' would end a path early and a '#' a query; with
 * `segment`, a '/' or '\' would start a new path segment. */
static char *mg_put_raw(char *out, const char *s, size_t len, mg_template_target_t target, int segment)
{
    for (size_t i = 0; i != len; ++i) {
        unsigned char c = (unsigned char)s[i];
        if ((c == '#' && target != MG_TARGET_HEADER) || (c == '?' && target == MG_TARGET_PATH) ||
            (segment && (c == '/' || c == '\\')))
            out = mg_put_escaped(out, c);
        else
            *out++ = (char)c;
    }
    return out;
}

/* Writes one value at out; NULL when its decoded form holds CR, LF or NUL. */
static char *mg_put_value(char *out, mg_value_t v, mg_template_target_t target)
{
    int raw = v.form == MG_FORM_OPAQUE || (v.form == MG_FORM_ENCODED && target != MG_TARGET_HEADER);
    int decode = v.form == MG_FORM_ENCODED || v.form == MG_FORM_QUERY_VALUE;
    for (size_t i = 0; i != v.s.len;) {
        size_t start = i;
        unsigned char c = decode ? mg_next_decoded(v.s, &i, v.form == MG_FORM_QUERY_VALUE) : (unsigned char)v.s.base[i++];
        if (c == '\r' || c == '\n' || c == '\0')
            return NULL;
        if (raw) /* ${query} is no slice of the path: in one, it is one segment too */
            out = mg_put_raw(out, v.s.base + start, i - start, target, v.form == MG_FORM_OPAQUE && target == MG_TARGET_PATH);
        else if (target == MG_TARGET_HEADER || mg_keeps(target, c))
            *out++ = (char)c;
        else
            out = mg_put_escaped(out, c);
    }
    return out;
}

/* Where a variable's value landed in the output: bytes [start, end), empty when end == start. */
typedef struct mg_span {
    size_t start, end;
} mg_span_t;

/* A header value is checked whole, whatever its parts' forms (literals were checked at load):
 * RFC 9110 5.5 allows tab, and no other control character. */
static int mg_check_header(const char *s, size_t len)
{
    for (size_t i = 0; i != len; ++i) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\r' || c == '\n' || c == '\0')
            return MG_TEMPLATE_CRLF;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return MG_TEMPLATE_CONTROL;
    }
    return 0;
}

/*
 * The path's segments (up to a URL's '?' or '#'), each with its ending '/' or end: none that a
 * variable's span touches may be a dot segment. Touching includes an empty span at either end
 * ("/..${x}" with x empty is a variable's ".."). Spans are in order and do not overlap.
 */
static int mg_check_segments(const char *s, size_t len, const mg_span_t *spans, size_t num_spans)
{
    size_t k = 0;
    for (size_t a = 0;;) {
        size_t b = a;
        while (b != len && s[b] != '/' && s[b] != '?' && s[b] != '#')
            ++b;
        while (k != num_spans && spans[k].end < a)
            ++k;
        if (k != num_spans && spans[k].start <= b && mg_path_dot_segment(s + a, b - a) != 0)
            return MG_TEMPLATE_DOT_SEGMENT;
        if (b == len || s[b] != '/')
            return 0;
        a = b + 1;
    }
}

/* Writes the pieces at buf; the end, or NULL with *err set. `spans` (NULL: not wanted) gets
 * where each variable landed. */
static char *mg_put_pieces(const mg_template_t *t, const mg_ctx_t *ctx, char *buf, mg_span_t *spans, int *err)
{
    char *end = buf;
    for (size_t i = 0; i != t->num_pieces; ++i) {
        const mg_piece_t *p = &t->pieces[i];
        if (p->kind == MG_PIECE_LITERAL) {
            memcpy(end, p->text.base, p->text.len);
            end += p->text.len;
            continue;
        }
        char *start = end;
        if ((end = mg_put_value(end, mg_piece_value(p, ctx), p->target)) == NULL) {
            *err = MG_TEMPLATE_CRLF;
            return NULL;
        }
        if (spans != NULL)
            *spans++ = (mg_span_t){(size_t)(start - buf), (size_t)(end - buf)};
    }
    return end;
}

int mg_template_expand(const mg_template_t *t, const mg_ctx_t *ctx, mg_str_t *out)
{
    /* Two passes over the pieces (lookups are cheap) rather than a per-piece array. */
    size_t room = 1;
    for (size_t i = 0; i != t->num_pieces; ++i) {
        const mg_piece_t *p = &t->pieces[i];
        room += p->kind == MG_PIECE_LITERAL ? p->text.len : 3 * mg_piece_value(p, ctx).s.len; /* %XX at most triples */
    }
    int path = t->target == MG_TARGET_PATH || t->target == MG_TARGET_URL, err = 0;
    mg_span_t *spans = path && t->num_vars != 0 ? mg_alloc(&ctx->alloc, t->num_vars * sizeof(*spans)) : NULL;
    char *buf = mg_alloc(&ctx->alloc, room), *end = mg_put_pieces(t, ctx, buf, spans, &err);
    if (end == NULL)
        return err;
    size_t len = (size_t)(end - buf);
    if (t->target == MG_TARGET_HEADER && (err = mg_check_header(buf, len)) != 0)
        return err;
    if (spans != NULL && (err = mg_check_segments(buf, len, spans, t->num_vars)) != 0)
        return err;
    *end = '\0';
    *out = mg_str(buf, len);
    return 0;
}

const char *mg_template_strerror(int err)
{
    switch (err) {
    case MG_TEMPLATE_CRLF:
        return "the value would contain CR, LF or NUL";
    case MG_TEMPLATE_CONTROL:
        return "the value would contain a control character (a header value allows tab and no other)";
    case MG_TEMPLATE_DOT_SEGMENT:
        return "a variable would make a '.' or '..' path segment";
    }
    return "the value cannot be made";
}
