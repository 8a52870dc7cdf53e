/*
 * Templates: "/${tenant}/crmapp${remainder}" is compiled once, at load, into literal and variable
 * pieces; expanding it per request walks the pieces, looks each variable up and writes the value
 * with the encoding its target needs. Nothing is parsed per request.
 *
 * Syntax: "${name}" is a variable; "$$" is a literal "$" (so "$${x}" is the text "${x}"); a "$"
 * not followed by "{" or "$" is a literal "$". "${" without "}" and "${}" are errors.
 *
 * Values come in four forms, which decide how they land in each target:
 *   plain   (tenant, host, method, header values, unencoded captures, a bridge message's
 *           ${msg.<field>}): percent-encoded into a path, query or URL, inserted as they are
 *           into a header;
 *   encoded (${path}, remainder, path captures: slices of the request path): inserted as they
 *           are into a path, query or URL, percent-decoded into a header;
 *   form    (${query.<name>}): decoded ('+' is a space), then treated as plain;
 *   opaque  (${query}): inserted as it is everywhere, but a path gets its '/' and '\' encoded.
 * Whatever the form, the decoded value must not contain CR, LF or NUL: expansion fails; nor may
 * a header value hold any other control character but tab.
 *
 * Paths (and a URL before its '?'): only slices of the request path may span segments; every
 * other value is one segment's content, its '/' and '\' percent-encoded (a backend that treats
 * '\' as '/' must not see a new segment either). And after expansion, a segment that a
 * variable touched (holds one of its bytes, or the place of an empty one) may not be a dot
 * segment ("..", ".", "..;x", "%2E%2E"...): expansion fails. Encoding the dots instead would not
 * do: "%2E%2E" is ".." to every backend that normalizes (RFC 3986 6.2.2.2). Dot segments
 * written in the template itself are the author's and are resolved when the path is normalized.
 * Together: the text before a path template's first variable is always the start of the path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

typedef enum mg_piece_kind {
    MG_PIECE_LITERAL,
    MG_PIECE_TENANT,
    MG_PIECE_HOST,
    MG_PIECE_PATH,
    MG_PIECE_QUERY,
    MG_PIECE_METHOD,
    MG_PIECE_VAR,         /* remainder, a named capture or a bridge's msg.<field> (bound by the gateway) */
    MG_PIECE_HEADER,      /* ${header.<Name>}: text is the lower-case name */
    MG_PIECE_QUERY_PARAM, /* ${query.<name>}: text is the parameter name */
    MG_PIECE_CLAIM,       /* ${claim.<name>}: text is the claim's (dotted) name */
} mg_piece_kind_t;

typedef struct mg_piece {
    mg_piece_kind_t kind;
    mg_template_target_t target; /* how values are written: a URL's are a path's, a query's after its '?' */
    int may_be_bound;            /* a builtin that a capture of the same name shadows */
    mg_str_t text;               /* literal text or name, in the template's `strings` */
} mg_piece_t;

struct mg_template {
    mg_template_target_t target;
    size_t num_vars; /* pieces that are not literals */
    char *source;    /* as written, NUL-terminated */
    size_t source_len;
    char *strings; /* literal texts ("$$" unescaped) and names */
    mg_piece_t *pieces;
    size_t num_pieces;
};

typedef enum mg_value_form {
    MG_FORM_PLAIN,
    MG_FORM_ENCODED,
    MG_FORM_QUERY_VALUE,
    MG_FORM_OPAQUE,
} mg_value_form_t;

static const struct {
    const char *name;
    mg_piece_kind_t kind;
} mg_builtins[] = {{"tenant", MG_PIECE_TENANT},
                   {"host", MG_PIECE_HOST},
                   {"path", MG_PIECE_PATH},
                   {"query", MG_PIECE_QUERY},
                   {"method", MG_PIECE_METHOD}};

#define MG_NUM_BUILTINS (sizeof(mg_builtins) / sizeof(mg_builtins[0]))

/* ---------------------------------------------------------------------------------------
 * Compiling
 */
typedef struct mg_template_builder {
    mg_template_t *t;
    const mg_node_t *node;
    mg_template_known_t known;
    void *arg;
    mg_errors_t *errs;
    char *next; /* where the next string goes in t->strings */
    mg_template_target_t target;
    int in_query; /* a URL's text so far has a '?' */
} mg_template_builder_t;

static int mg_known(const mg_template_builder_t *b, mg_str_t name)
{
    return b->known != NULL && b->known(b->arg, name);
}

static mg_str_t mg_keep_string(mg_template_builder_t *b, const char *s, size_t len, int lower)
{
    char *p = b->next;
    for (size_t i = 0; i != len; ++i)
        p[i] = lower && s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
    b->next += len;
    return mg_str(p, len);
}

static void mg_add_piece(mg_template_builder_t *b, mg_piece_kind_t kind, mg_str_t text, int may_be_bound)
{
    /* Values go into a URL as into a path, or as into a query after its '?'. */
    mg_template_target_t target = b->target != MG_TARGET_URL ? b->target : b->in_query ? MG_TARGET_QUERY : MG_TARGET_PATH;
    b->t->pieces[b->t->num_pieces++] = (mg_piece_t){kind, target, may_be_bound, text};
    b->t->num_vars += kind != MG_PIECE_LITERAL;
}

static int mg_name_is(mg_str_t name, const char *s)
{
    return name.len == strlen(s) && memcmp(name.base, s, name.len) == 0;
}

static int mg_has_prefix(mg_str_t name, const char *prefix)
{
    size_t n = strlen(prefix);
    return name.len >= n && memcmp(name.base, prefix, n) == 0;
}

/* Where ${msg.<field>} is allowed (a bridge's path), `known` accepts any such name. */
static int mg_knows_msg(const mg_template_builder_t *b)
{
    return mg_known(b, MG_STR("msg.<field>"));
}

static void mg_unknown_variable(mg_template_builder_t *b, mg_str_t name)
{
    char word[72];
    snprintf(word, sizeof(word), "%.*s", (int)(name.len < 64 ? name.len : 64), name.base);
    const char *candidates[MG_NUM_BUILTINS + 2];
    size_t n = 0;
    for (size_t i = 0; i != MG_NUM_BUILTINS; ++i)
        candidates[n++] = mg_builtins[i].name;
    int remainder = mg_known(b, MG_STR("remainder")), msg = mg_knows_msg(b);
    if (remainder)
        candidates[n++] = "remainder";
    candidates[n] = NULL;
    const char *near = mg_closest_word(word, candidates);
    char hint[80] = "";
    /* Users who saw ${msg.<field>} in a bridge will try it elsewhere: say where it belongs. */
    if (!msg && mg_has_prefix(name, "msg."))
        snprintf(hint, sizeof(hint), "message fields are only known in bridge.path; ");
    else if (near != NULL)
        snprintf(hint, sizeof(hint), "did you mean '${%s}'? ", near);
    mg_errors_add(b->errs, b->node,
                  "unknown variable '${%.*s}' (%sknown here: tenant, host, path, query, method, %sheader.<Name>, query.<name>, claim.<name>, "
                  "%sand named groups of the conditions of this route and its parents)",
                  (int)name.len, name.base, hint, remainder ? "remainder, " : "", msg ? "msg.<field>, " : "");
}

static int mg_compile_header_var(mg_template_builder_t *b, mg_str_t name)
{
    mg_str_t h = mg_str(name.base + 7, name.len - 7);
    size_t i = 0;
    while (i != h.len && mg_is_tchar(h.base[i]))
        ++i;
    if (h.len == 0 || i != h.len) {
        mg_errors_add(b->errs, b->node,
                      "invalid header name in '${%.*s}' (expected ${header.<Name>}, a token such as X-Account-Id)", (int)name.len,
                      name.base);
        return -1;
    }
    mg_add_piece(b, MG_PIECE_HEADER, mg_keep_string(b, h.base, h.len, 1), 0);
    return 0;
}

static int mg_compile_query_var(mg_template_builder_t *b, mg_str_t name)
{
    if (name.len == 6) {
        mg_errors_add(b->errs, b->node, "empty parameter name in '${query.}' (expected ${query.<name>})");
        return -1;
    }
    mg_add_piece(b, MG_PIECE_QUERY_PARAM, mg_keep_string(b, name.base + 6, name.len - 6, 0), 0);
    return 0;
}

/* ${claim.<name>}: the first scalar value of a verified credential's claim (empty without one). */
static int mg_compile_claim_var(mg_template_builder_t *b, mg_str_t name)
{
    mg_str_t c = mg_str(name.base + 6, name.len - 6);
    int ok = c.len != 0 && c.base[0] != '.' && c.base[c.len - 1] != '.';
    for (size_t i = 0; ok && i != c.len; ++i)
        ok = (unsigned char)c.base[i] > 0x20 && c.base[i] != 0x7f && !(c.base[i] == '.' && c.base[i + 1] == '.');
    if (!ok) {
        mg_errors_add(b->errs, b->node, "invalid claim name in '${%.*s}' (expected ${claim.<name>}, such as ${claim.sub} or ${claim.realm_access.roles})",
                      (int)name.len, name.base);
        return -1;
    }
    mg_add_piece(b, MG_PIECE_CLAIM, mg_keep_string(b, c.base, c.len, 0), 0);
    return 0;
}

/* One "${name}" (name without the braces). */
static int mg_compile_var(mg_template_builder_t *b, mg_str_t name)
{
    if (mg_has_prefix(name, "claim."))
        return mg_compile_claim_var(b, name);
    if (mg_has_prefix(name, "header."))
        return mg_compile_header_var(b, name);
    if (mg_has_prefix(name, "query."))
        return mg_compile_query_var(b, name);
    if (name.len == 4 && mg_has_prefix(name, "msg.") && mg_knows_msg(b)) {
        mg_errors_add(b->errs, b->node, "empty field name in '${msg.}' (expected ${msg.<field>})");
        return -1;
    }
    int bindable = mg_known(b, name);
    for (size_t i = 0; i != MG_NUM_BUILTINS; ++i) {
        if (mg_name_is(name, mg_builtins[i].name)) {
            mg_add_piece(b, mg_builtins[i].kind, mg_keep_string(b, name.base, name.len, 0), bindable);
            return 0;
        }
    }
    if (!bindable) {
        mg_unknown_variable(b, name);
        return -1;
    }
    mg_add_piece(b, MG_PIECE_VAR, mg_keep_string(b, name.base, name.len, 0), 1);
    return 0;
}

/* Characters a literal may not hold in each target. */
static const char *mg_literal_refused(mg_template_target_t target)
{
    switch (target) {
    case MG_TARGET_HEADER:
        return "";
    case MG_TARGET_PATH:
        return " ?#";
    case MG_TARGET_QUERY:
        return " #";
    case MG_TARGET_URL:
        return " ";
    }
    return "";
}

static const char *mg_target_what(mg_template_target_t target)
{
    switch (target) {
    case MG_TARGET_HEADER:
        return "a header value";
    case MG_TARGET_PATH:
        return "a path";
    case MG_TARGET_QUERY:
        return "a query string";
    case MG_TARGET_URL:
        return "a URL";
    }
    return "";
}

/* Checks literal text for its target; -1 after recording an error. */
static int mg_check_literal(mg_template_builder_t *b, mg_str_t lit)
{
    const char *refused = mg_literal_refused(b->target);
    for (size_t i = 0; i != lit.len; ++i) {
        unsigned char c = (unsigned char)lit.base[i];
        int control = (c < 0x20 && !(c == '\t' && b->target == MG_TARGET_HEADER)) || c == 0x7f;
        if (control || (c != '\0' && strchr(refused, c) != NULL)) {
            mg_errors_add(b->errs, b->node, "%s cannot contain %s%s", mg_target_what(b->target),
                          control ? "control characters (CR, LF, NUL...)" : "spaces, '?' or '#'",
                          b->target == MG_TARGET_PATH && c == '?' ? " (use set_query for the query)" : "");
            return -1;
        }
        if (c == '%' && b->target != MG_TARGET_HEADER &&
            !(i + 2 < lit.len && mg_hex_value(lit.base[i + 1]) >= 0 && mg_hex_value(lit.base[i + 2]) >= 0)) {
            mg_errors_add(b->errs, b->node, "malformed %%-escape in %s (write %%25 for a literal '%%')", mg_target_what(b->target));
            return -1;
        }
    }
    return 0;
}

static int mg_add_literal(mg_template_builder_t *b, mg_str_t lit)
{
    if (lit.len == 0)
        return 0;
    if (mg_check_literal(b, lit) != 0)
        return -1;
    mg_add_piece(b, MG_PIECE_LITERAL, lit, 0);
    if (memchr(lit.base, '?', lit.len) != NULL)
        b->in_query = 1;
    return 0;
}

/* Splits the source into pieces; -1 after recording the first error. */
static int mg_template_parse(mg_template_builder_t *b, const char *s, size_t len)
{
    char *lit = b->next;
    for (size_t i = 0; i != len;) {
        if (s[i] != '$' || i + 1 == len || (s[i + 1] != '{' && s[i + 1] != '$')) {
            *b->next++ = s[i++];
            continue;
        }
        if (s[i + 1] == '$') {
            *b->next++ = '$';
            i += 2;
            continue;
        }
        const char *close = memchr(s + i + 2, '}', len - i - 2);
        if (close == NULL) {
            mg_errors_add(b->errs, b->node, "'${' without a closing '}' (write $$ for a literal '$')");
            return -1;
        }
        mg_str_t name = mg_str(s + i + 2, (size_t)(close - s - i - 2));
        if (name.len == 0) {
            mg_errors_add(b->errs, b->node, "empty variable name '${}'");
            return -1;
        }
        if (mg_add_literal(b, mg_str(lit, (size_t)(b->next - lit))) != 0 || mg_compile_var(b, name) != 0)
            return -1;
        lit = b->next;
        i = (size_t)(close - s) + 1;
    }
    return mg_add_literal(b, mg_str(lit, (size_t)(b->next - lit)));
}

mg_template_t *mg_template_compile(const mg_node_t *node, mg_template_target_t target, mg_template_known_t known, void *arg,
                                   mg_errors_t *errs)
{
    const char *s;
    if (mg_node_to_str(node, &s, errs) != 0)
        return NULL;
    size_t len = node->u.scalar.len;
    mg_template_t *t = calloc(1, sizeof(*t));
    if (t == NULL || (t->source = malloc(len + 1)) == NULL || (t->strings = malloc(len + 1)) == NULL ||
        (t->pieces = calloc(len / 2 + 1, sizeof(*t->pieces))) == NULL)
        abort();
    memcpy(t->source, s, len);
    t->source[len] = '\0';
    t->source_len = len;
    t->target = target;
    mg_template_builder_t b = {t, node, known, arg, errs, t->strings, target, 0};
    if (mg_template_parse(&b, s, len) != 0) {
        mg_template_free(t);
        return NULL;
    }
    return t;
}

void mg__template_each_var(const mg_template_t *t, void (*fn)(void *arg, mg_str_t name), void *arg)
{
    for (size_t i = 0; i != t->num_pieces; ++i) {
        if (t->pieces[i].kind == MG_PIECE_VAR)
            fn(arg, t->pieces[i].text);
    }
}

mg_str_t mg_template_source(const mg_template_t *t)
{
    return mg_str(t->source, t->source_len);
}

unsigned mg_template_varies(const mg_template_t *t)
{
    unsigned varies = 0;
    for (size_t i = 0; i != t->num_pieces; ++i) {
        const mg_piece_t *p = &t->pieces[i];
        if (p->kind == MG_PIECE_TENANT && !p->may_be_bound)
            varies |= MG_TEMPLATE_TENANT;
        else if (p->kind != MG_PIECE_LITERAL)
            varies |= MG_TEMPLATE_REQUEST;
    }
    return varies;
}

void mg_template_free(mg_template_t *t)
{
    if (t == NULL)
        return;
    free(t->source);
    free(t->strings);
    free(t->pieces);
    free(t);
}

/* ---------------------------------------------------------------------------------------
 * Expanding
 */
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
