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

/* Where the answer's variables are allowed (a response action), `known` accepts this name. */
static int mg_knows_response(const mg_template_builder_t *b)
{
    return mg_known(b, MG_STR("response.<header>"));
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
    else if (!mg_knows_response(b) && (mg_name_is(name, "status") || mg_has_prefix(name, "response.")))
        snprintf(hint, sizeof(hint), "the answer's variables are only known in response actions; ");
    else if (near != NULL)
        snprintf(hint, sizeof(hint), "did you mean '${%s}'? ", near);
    mg_errors_add(
        b->errs, b->node,
        "unknown variable '${%.*s}' (%sknown here: tenant, host, path, query, method, %sheader.<Name>, query.<name>, claim.<name>, "
        "%sand named groups of the conditions of this route and its parents)",
        (int)name.len, name.base, hint, remainder ? "remainder, " : "", msg ? "msg.<field>, " : "");
}

/* ${header.<Name>} (`prefix` "header.") or ${response.header.<Name>}: a header of the request, or
 * of the answer. */
static int mg_compile_header_var(mg_template_builder_t *b, mg_str_t name, const char *prefix, mg_piece_kind_t kind)
{
    size_t skip = strlen(prefix);
    mg_str_t h = mg_str(name.base + skip, name.len - skip);
    size_t i = 0;
    while (i != h.len && mg_is_tchar(h.base[i]))
        ++i;
    if (h.len == 0 || i != h.len) {
        mg_errors_add(b->errs, b->node, "invalid header name in '${%.*s}' (expected ${%s<Name>}, a token such as X-Account-Id)",
                      (int)name.len, name.base, prefix);
        return -1;
    }
    mg_add_piece(b, kind, mg_keep_string(b, h.base, h.len, 1), 0);
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
        mg_errors_add(
            b->errs, b->node,
            "invalid claim name in '${%.*s}' (expected ${claim.<name>}, such as ${claim.sub} or ${claim.realm_access.roles})",
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
        return mg_compile_header_var(b, name, "header.", MG_PIECE_HEADER);
    if (mg_has_prefix(name, "response.header.") && mg_knows_response(b))
        return mg_compile_header_var(b, name, "response.header.", MG_PIECE_RESPONSE_HEADER);
    if (mg_has_prefix(name, "query."))
        return mg_compile_query_var(b, name);
    if (name.len == 4 && mg_has_prefix(name, "msg.") && mg_knows_msg(b)) {
        mg_errors_add(b->errs, b->node, "empty field name in '${msg.}' (expected ${msg.<field>})");
        return -1;
    }
    int bindable = mg_known(b, name);
    if (mg_name_is(name, "status") && mg_knows_response(b)) {
        mg_add_piece(b, MG_PIECE_STATUS, mg_keep_string(b, name.base, name.len, 0), bindable);
        return 0;
    }
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
    *b.next = '\0'; /* after the last string: a literal-only template's text is a C string too */
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

int mg_template_literal(const mg_template_t *t, mg_str_t *out)
{
    if (t->num_vars != 0)
        return 0;
    /* no variable: at most one literal piece, the whole text (its strings end with a NUL: the
     * builder wrote no more than the source's length into a buffer one byte longer) */
    *out = t->num_pieces != 0 ? t->pieces[0].text : mg_str("", 0);
    return 1;
}

unsigned mg_template_varies(const mg_template_t *t)
{
    unsigned varies = 0;
    for (size_t i = 0; i != t->num_pieces; ++i) {
        const mg_piece_t *p = &t->pieces[i];
        if (p->kind == MG_PIECE_TENANT && !p->may_be_bound)
            varies |= MG_TEMPLATE_TENANT;
        else if ((p->kind == MG_PIECE_STATUS && !p->may_be_bound) || p->kind == MG_PIECE_RESPONSE_HEADER)
            varies |= MG_TEMPLATE_RESPONSE;
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
