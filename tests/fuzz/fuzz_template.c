/*
 * libFuzzer target: a random template (literal pieces and variables of every source) expanded
 * with random values drawn from the input bytes. Properties checked on every input:
 *   - a path: the text before the first variable is always the start of the expanded and
 *     normalized path, or expansion (or normalization) fails; checked for templates whose own
 *     text makes no dot segment (those are the author's and are resolved as written);
 *   - a path or URL made only of values that are not slices of the request path holds exactly
 *     the '/' and '\' of the template's text: a value is one segment's content;
 *   - a header value holds no control character but tab;
 *   - an expanded path normalizes to a path that normalizing again leaves as it is.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routes/routes.h"
#include "arena.h"

typedef struct draw {
    const uint8_t *p, *end;
} draw_t;

static unsigned pick(draw_t *d, unsigned n)
{
    return d->p < d->end ? *d->p++ % n : 0;
}

#define NUM(a) (sizeof(a) / sizeof((a)[0]))
#define PICK(d, array) (array)[pick((d), NUM(array))]

static const char *const literals[] = {"/",  "/v1", "/search/", ".",   "..", ";",   ";x", "%2E",       "x", "/t/", "a.b",
                                       "//", "%7E", "-",        "%2e", "\\", "?q=", "#f", "https://h", " ", "\t"};
/* Variables; `slice`: a slice of the request path (keeps its '/'). */
static const struct {
    const char *text;
    int slice;
} vars[] = {{"${tenant}", 0}, {"${host}", 0}, {"${method}", 0}, {"${header.x-v}", 0}, {"${query.v}", 0}, {"${query}", 0},
            {"${c}", 0},      {"${e}", 1},    {"${msg.id}", 0}, {"${remainder}", 1},  {"${path}", 1}};
static const char *const tokens[] = {"",    ".",  "..", "/",    "\\", ";", ";x", "x",   "%2E", "%2e", "%2F", "%",
                                     "%0b", "\v", "\t", "\x7f", "?",  "#", "+",  "%25", "%3B", "\r",  "%2",  "a"};

/* ---------------------------------------------------------------------------------------
 * Variables a condition may bind
 */
static int known(void *arg, mg_str_t name)
{
    static const char *const names[] = {"c", "e", "remainder", "msg.id"};
    for (size_t i = 0; i != NUM(names); ++i) {
        if (strlen(names[i]) == name.len && memcmp(names[i], name.base, name.len) == 0)
            return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * The template and the values
 */
typedef struct subject {
    char source[512];
    char literals[512]; /* the template's text without its variables */
    size_t prefix_len;  /* of `literals`: the text before the first variable */
    int has_var, has_slice;
    char values[8][64]; /* c, e, msg.id, tenant, host, method, header, query */
    mg_header_t header;
} subject_t;

static void append(char *buf, size_t size, const char *s)
{
    size_t len = strlen(buf);
    snprintf(buf + len, size - len, "%s", s);
}

static void draw_template(draw_t *d, subject_t *s)
{
    unsigned n = 1 + pick(d, 8);
    for (unsigned i = 0; i != n; ++i) {
        if (pick(d, 2) == 0) {
            const char *lit = PICK(d, literals);
            append(s->source, sizeof(s->source), lit);
            append(s->literals, sizeof(s->literals), lit);
            continue;
        }
        unsigned v = pick(d, NUM(vars));
        if (!s->has_var)
            s->prefix_len = strlen(s->literals);
        s->has_var = 1;
        s->has_slice |= vars[v].slice;
        append(s->source, sizeof(s->source), vars[v].text);
    }
    if (!s->has_var)
        s->prefix_len = strlen(s->literals);
}

static void draw_value(draw_t *d, char *buf, size_t size)
{
    unsigned n = pick(d, 7);
    buf[0] = '\0';
    for (unsigned i = 0; i != n; ++i)
        append(buf, size, PICK(d, tokens));
}

/* The context with every source bound: to the drawn values, or all to `fixed`. */
static mg_ctx_t context(subject_t *s, const char *fixed, char *query_buf, size_t query_size)
{
    const char *v[8];
    for (int i = 0; i != 8; ++i)
        v[i] = fixed != NULL ? fixed : s->values[i];
    s->header = (mg_header_t){MG_STR("x-v"), mg_str(v[6], strlen(v[6]))};
    mg_ctx_t ctx = {.method = mg_str(v[5], strlen(v[5])),
                    .scheme = MG_STR("http"),
                    .host = mg_str(v[4], strlen(v[4])),
                    .path = MG_STR("/in/x"),
                    .tenant = mg_str(v[3], strlen(v[3])),
                    .headers = &s->header,
                    .num_headers = 1,
                    .alloc = {arena_alloc, NULL}};
    /* ${query.v} reads v=<value>, ${query} the whole query: the same text serves both */
    snprintf(query_buf, query_size, "v=%s", v[7]);
    ctx.query = mg_str(query_buf, strlen(query_buf));
    mg_ctx_set_var(&ctx, MG_STR("c"), mg_str(v[0], strlen(v[0])));
    mg_ctx_set_var_flags(&ctx, MG_STR("e"), mg_str(v[1], strlen(v[1])), MG_VAR_ENCODED);
    mg_ctx_set_var_flags(&ctx, MG_STR("remainder"), mg_str(v[1], strlen(v[1])), MG_VAR_ENCODED);
    mg_ctx_set_var(&ctx, MG_STR("msg.id"), mg_str(v[2], strlen(v[2])));
    return ctx;
}

/* ---------------------------------------------------------------------------------------
 * Properties
 */
static size_t count(const char *s, size_t len, char c)
{
    size_t n = 0;
    for (size_t i = 0; i != len; ++i)
        n += s[i] == c;
    return n;
}

static int has_dot_segment(mg_str_t p)
{
    for (size_t a = 0, b; a <= p.len; a = b + 1) {
        for (b = a; b != p.len && p.base[b] != '/';)
            ++b;
        if (mg_path_dot_segment(p.base + a, b - a) != 0)
            return 1;
    }
    return 0;
}

/* What rewrite_path does: a '/' in front when there is none, then normalization. -1 when the
 * path is refused. */
static long normalized(mg_str_t out, char **norm)
{
    char *p = arena_alloc(NULL, out.len + 2);
    size_t len = 0;
    if (out.len == 0 || out.base[0] != '/')
        p[len++] = '/';
    memcpy(p + len, out.base, out.len);
    len += out.len;
    *norm = arena_alloc(NULL, len + 1);
    return mg_path_normalize(p, len, *norm);
}

static void check_header(mg_str_t out)
{
    for (size_t i = 0; i != out.len; ++i) {
        unsigned char c = (unsigned char)out.base[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            abort();
    }
}

/* Whether the normalized form of text[0..len) starts the normalized path norm[0..n). */
static void check_starts(const char *text, size_t len, const char *norm, long n)
{
    char *prefix;
    long pn = normalized(mg_str(text, len), &prefix);
    if (pn < 0 || n < pn || memcmp(norm, prefix, (size_t)pn) != 0)
        abort();
}

/* The literal prefix starts the normalized path, unless the template's own text makes a dot
 * segment (seen by expanding it with every value "x"). Its complete segments always do; so does
 * all of it when its last, partial segment is no dot segment by itself ("/v1/." may end as
 * "/v1/.x", or be "/v1/" once normalized). */
static void check_prefix(const mg_template_t *t, subject_t *s, const char *norm, long n)
{
    char query[96];
    mg_ctx_t ctx = context(s, "x", query, sizeof(query));
    mg_str_t plain;
    if (s->prefix_len == 0 || mg_template_expand(t, &ctx, &plain) != 0 || has_dot_segment(plain))
        return;
    const char *last = memrchr(s->literals, '/', s->prefix_len);
    size_t dir = last != NULL ? (size_t)(last - s->literals) + 1 : 0;
    check_starts(s->literals, dir, norm, n);
    if (mg_path_dot_segment(s->literals + dir, s->prefix_len - dir) == 0)
        check_starts(s->literals, s->prefix_len, norm, n);
}

static void check_path(const mg_template_t *t, subject_t *s, mg_str_t out, mg_template_target_t target)
{
    size_t lit_len = strlen(s->literals);
    int cut = target == MG_TARGET_URL && strpbrk(s->literals, "?#") != NULL;
    if (!s->has_slice && !cut &&
        (count(out.base, out.len, '/') != count(s->literals, lit_len, '/') ||
         count(out.base, out.len, '\\') != count(s->literals, lit_len, '\\')))
        abort(); /* a value made a separator */
    if (target != MG_TARGET_PATH)
        return;
    char *norm, *again;
    long n = normalized(out, &norm);
    if (n < 0)
        return; /* a 400, as the gateway answers */
    again = arena_alloc(NULL, (size_t)n + 1);
    if (mg_path_normalize(norm, (size_t)n, again) != n || memcmp(norm, again, (size_t)n) != 0)
        abort();
    check_prefix(t, s, norm, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const mg_template_target_t targets[] = {MG_TARGET_PATH, MG_TARGET_PATH,   MG_TARGET_PATH,
                                                   MG_TARGET_URL,  MG_TARGET_HEADER, MG_TARGET_QUERY};
    draw_t d = {data, data + size};
    static subject_t s;
    memset(&s, 0, sizeof(s));
    mg_template_target_t target = PICK(&d, targets);
    draw_template(&d, &s);
    for (int i = 0; i != 8; ++i)
        draw_value(&d, s.values[i], sizeof(s.values[i]));
    mg_node_t node = {.kind = MG_NODE_SCALAR, .file = "fuzz.yaml", .line = 1, .column = 1};
    node.u.scalar.str = s.source;
    node.u.scalar.len = strlen(s.source);
    mg_errors_t errs = {0};
    mg_template_t *t = mg_template_compile(&node, target, known, NULL, &errs);
    mg_errors_clear(&errs);
    if (t == NULL)
        return 0; /* a literal its target refuses */
    arena_used = 0;
    char query[96];
    mg_ctx_t ctx = context(&s, NULL, query, sizeof(query));
    mg_str_t out;
    if (mg_template_expand(t, &ctx, &out) == 0) {
        if (strlen(out.base) != out.len)
            abort(); /* NUL-terminated, no NUL inside */
        if (target == MG_TARGET_HEADER)
            check_header(out);
        else if (target != MG_TARGET_QUERY)
            check_path(t, &s, out, target);
    }
    mg_template_free(t);
    return 0;
}
