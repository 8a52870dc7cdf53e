/*
 * Templates in paths (issue 13, items 1, 7 and 9): a value that is not a slice of the request
 * path is one segment's content ('/' and '\' percent-encoded), no segment a variable touches
 * may be a dot segment (".", "..", ".;x", "%2E%2E"...), and a header value may hold no control
 * character but tab. Every value source is tried with every hostile value; then the property
 * the rules exist for: the text before a path template's first variable is the start of the
 * normalized path, whatever the values.
 */
#include <stdio.h>

#include "support.h"

TestSuite(template_paths, .fini = support_fini);

static const char *const known_names[] = {"remainder", "c", "e", "msg.id", NULL};

static int known(void *arg, mg_str_t name)
{
    (void)arg;
    for (const char *const *k = known_names; *k != NULL; ++k) {
        if (strlen(*k) == name.len && memcmp(*k, name.base, name.len) == 0)
            return 1;
    }
    return 0;
}

/* Compiles `source` (the template as written, no YAML quoting needed) for `target`. */
static mg_template_t *compile(const char *source, mg_template_target_t target)
{
    char yaml[512];
    snprintf(yaml, sizeof(yaml), "v: '%s'\n", source);
    mg_errors_clear(&errs);
    mg_doc_t *doc = mg_doc_load_string("t.yaml", yaml, strlen(yaml), &errs);
    cr_assert_not_null(doc, "YAML error in test");
    mg_template_t *t = mg_template_compile(mg_node_get(mg_doc_root(doc), "v"), target, known, NULL, &errs);
    mg_doc_free(doc);
    cr_assert_not_null(t, "%s did not compile: %s", source, errs.size != 0 ? errs.entries[0].text : "");
    return t;
}

static char *copy(const char *s, size_t len)
{
    char *p = arena_alloc(NULL, len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* Every byte as %XX, so that decoding ${query.v} gives `v` back exactly. */
static mg_str_t form_encoded(const char *name, mg_str_t v)
{
    char *p = arena_alloc(NULL, strlen(name) + 1 + 3 * v.len + 1), *o = p;
    o += sprintf(o, "%s=", name);
    for (size_t i = 0; i != v.len; ++i)
        o += sprintf(o, "%%%02X", (unsigned char)v.base[i]);
    return mg_str(p, (size_t)(o - p));
}

static mg_header_t header_v[1];

static mg_ctx_t request(void)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = MG_STR("GET");
    ctx.scheme = MG_STR("http");
    ctx.host = MG_STR("h.example.com");
    ctx.path = MG_STR("/in");
    ctx.query = MG_STR("");
    ctx.tenant = MG_STR("acme");
    ctx.alloc = (mg_alloc_t){arena_alloc, NULL};
    return ctx;
}

/* ---------------------------------------------------------------------------------------
 * Value sources: each binds `v` where its variable reads it.
 */
typedef struct source {
    const char *var; /* as written in a template */
    void (*bind)(mg_ctx_t *ctx, mg_str_t v);
} source_t;

static void bind_tenant(mg_ctx_t *ctx, mg_str_t v)
{
    ctx->tenant = v;
}
static void bind_host(mg_ctx_t *ctx, mg_str_t v)
{
    ctx->host = v;
}
static void bind_method(mg_ctx_t *ctx, mg_str_t v)
{
    ctx->method = v;
}
static void bind_header(mg_ctx_t *ctx, mg_str_t v)
{
    header_v[0] = (mg_header_t){MG_STR("x-v"), v};
    ctx->headers = header_v;
    ctx->num_headers = 1;
}
static void bind_query_param(mg_ctx_t *ctx, mg_str_t v)
{
    ctx->query = form_encoded("v", v);
}
static void bind_query(mg_ctx_t *ctx, mg_str_t v)
{
    ctx->query = v;
}
/* A capture of a host, header or query regex: plain. */
static void bind_capture(mg_ctx_t *ctx, mg_str_t v)
{
    mg_ctx_set_var(ctx, MG_STR("c"), v);
}
/* A bridge message's field: the gateway binds "msg.<field>" as a plain variable. */
static void bind_msg(mg_ctx_t *ctx, mg_str_t v)
{
    mg_ctx_set_var(ctx, MG_STR("msg.id"), v);
}
/* Slices of the normalized request path: percent-encoded. */
static void bind_path_capture(mg_ctx_t *ctx, mg_str_t v)
{
    mg_ctx_set_var_flags(ctx, MG_STR("e"), v, MG_VAR_ENCODED);
}
static void bind_remainder(mg_ctx_t *ctx, mg_str_t v)
{
    mg_ctx_set_var_flags(ctx, MG_STR("remainder"), v, MG_VAR_ENCODED);
}
static void bind_path(mg_ctx_t *ctx, mg_str_t v)
{
    ctx->path = v;
}

/* Sources whose values are one segment's content. */
static const source_t segment_sources[] = {
    {"${tenant}", bind_tenant},       {"${host}", bind_host}, {"${method}", bind_method}, {"${header.x-v}", bind_header},
    {"${query.v}", bind_query_param}, {"${c}", bind_capture}, {"${msg.id}", bind_msg},
};
/* Sources that are slices of the request path: they keep their '/'. */
static const source_t slice_sources[] = {{"${e}", bind_path_capture}, {"${remainder}", bind_remainder}, {"${path}", bind_path}};

#define NUM(a) (sizeof(a) / sizeof((a)[0]))

enum { OK = 0, DOT = MG_TEMPLATE_DOT_SEGMENT, CTL = MG_TEMPLATE_CONTROL, CRLF = MG_TEMPLATE_CRLF };

/* Expands `source` for `target` against ctx: the error, or 0 with *out. */
static int expand_ctx(const char *source, mg_template_target_t target, const mg_ctx_t *ctx, const char **out)
{
    mg_template_t *t = compile(source, target);
    mg_str_t s = {NULL, 0};
    int err = mg_template_expand(t, ctx, &s);
    mg_template_free(t);
    *out = err == 0 ? s.base : NULL;
    return err;
}

/* Expands `fmt` (its "%s", up to two, replaced by the source's variable) with v[0..vlen) bound
 * by `src`: the error, or 0 with *out. */
static int expand_source(const source_t *src, const char *fmt, mg_template_target_t target, const char *v, size_t vlen,
                         const char **out)
{
    char source[256];
    snprintf(source, sizeof(source), fmt, src->var, src->var);
    mg_ctx_t ctx = request();
    src->bind(&ctx, mg_str(copy(v, vlen), vlen));
    return expand_ctx(source, target, &ctx, out);
}

typedef struct value_case {
    const char *v;
    const char *want; /* with OK */
    int err;
} value_case_t;

static void check_cases(const source_t *sources, size_t num_sources, const char *fmt, mg_template_target_t target,
                        const value_case_t *cases, size_t num_cases)
{
    for (size_t i = 0; i != num_sources; ++i) {
        for (size_t j = 0; j != num_cases; ++j) {
            const value_case_t *c = &cases[j];
            const char *got;
            int err = expand_source(&sources[i], fmt, target, c->v, strlen(c->v), &got);
            cr_expect_eq(err, c->err, "%s = '%s' in '%s': error %d, want %d", sources[i].var, c->v, fmt, err, c->err);
            if (c->err == OK && err == OK)
                cr_expect_str_eq(got, c->want, "%s = '%s' in '%s'", sources[i].var, c->v, fmt);
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * One segment per value
 */
Test(template_paths, values_not_from_the_path_are_one_segment)
{
    static const value_case_t cases[] = {
        {"/", "/base/%2F/end", OK},
        {"\\", "/base/%5C/end", OK},
        {"a/../b", "/base/a%2F..%2Fb/end", OK},
        {"../../../bob/api/customer/1", "/base/..%2F..%2F..%2Fbob%2Fapi%2Fcustomer%2F1/end", OK},
        {"..\\admin", "/base/..%5Cadmin/end", OK},
        {"..%2Fadmin", "/base/..%252Fadmin/end", OK},
        {".", NULL, DOT},
        {"..", NULL, DOT},
        {".;x", NULL, DOT},
        {"..;jsessionid=1", NULL, DOT},
        {"..;", NULL, DOT},
        {"...", "/base/.../end", OK},
        {".x", "/base/.x/end", OK},
        {"x..", "/base/x../end", OK},
        {"%2E%2E", "/base/%252E%252E/end", OK}, /* a plain '%' is text: "%252E" is no dot */
        {";x", "/base/;x/end", OK},
        {"\x0b", "/base/%0B/end", OK}, /* in a path, other controls are encoded */
        {"", "/base//end", OK},
    };
    check_cases(segment_sources, NUM(segment_sources), "/base/%s/end", MG_TARGET_PATH, cases, NUM(cases));
    /* in a URL, before its '?', as in a path */
    check_cases(segment_sources, NUM(segment_sources), "/base/%s/end", MG_TARGET_URL, cases, NUM(cases));
}

Test(template_paths, slices_of_the_path_keep_their_slashes_but_make_no_dot_segment)
{
    static const value_case_t cases[] = {
        {"a/b", "/base/a/b/end", OK},
        {"a%2Fb", "/base/a%2Fb/end", OK}, /* escapes stay escapes */
        {"x../y", "/base/x../y/end", OK},
        {"a..b", "/base/a..b/end", OK},
        {".", NULL, DOT},
        {"..", NULL, DOT},
        {"../x", NULL, DOT}, /* a capture taken from "y../x" */
        {"x/..", NULL, DOT},
        {"x/./y", NULL, DOT},
        {"..;x", NULL, DOT},
        {"x/.;y/z", NULL, DOT},
        {"%2E%2E", NULL, DOT},
        {"%2e", NULL, DOT},
        {".%2E;a", NULL, DOT},
    };
    check_cases(slice_sources, NUM(slice_sources), "/base/%s/end", MG_TARGET_PATH, cases, NUM(cases));
}

Test(template_paths, the_whole_query_is_one_segment_too)
{
    static const source_t query[] = {{"${query}", bind_query}};
    static const value_case_t cases[] = {
        {"a/b", "/q/a%2Fb/end", OK},
        {"a\\b", "/q/a%5Cb/end", OK},
        {"a=1&b=2", "/q/a=1&b=2/end", OK},
        {"a?b", "/q/a%3Fb/end", OK},
        {"..", NULL, DOT},
        {"%2E%2E", NULL, DOT}, /* inserted as sent */
        {"%2e.", NULL, DOT},
        {"..;x", NULL, DOT},
        {".", NULL, DOT},
    };
    check_cases(query, NUM(query), "/q/%s/end", MG_TARGET_PATH, cases, NUM(cases));
}

Test(template_paths, a_query_parameter_is_decoded_then_one_segment)
{
    mg_ctx_t ctx = request();
    const char *got;
    ctx.query = MG_STR("q=..%2F..%2Fadmin%2Fdelete");
    cr_assert_eq(expand_ctx("/v1/search/${query.q}", MG_TARGET_PATH, &ctx, &got), OK);
    cr_expect_str_eq(got, "/v1/search/..%2F..%2Fadmin%2Fdelete");
    ctx.query = MG_STR("q=../../admin/delete");
    cr_assert_eq(expand_ctx("/v1/search/${query.q}", MG_TARGET_PATH, &ctx, &got), OK);
    cr_expect_str_eq(got, "/v1/search/..%2F..%2Fadmin%2Fdelete");
    static const char *const dots[] = {"q=..", "q=.", "q=%2E%2E", "q=%2e.", "q=..;x", "q=..%3Bx", "q=.%3B"};
    for (size_t i = 0; i != NUM(dots); ++i) {
        ctx.query = mg_str(dots[i], strlen(dots[i]));
        cr_expect_eq(expand_ctx("/v1/search/${query.q}", MG_TARGET_PATH, &ctx, &got), DOT, "%s", dots[i]);
    }
    ctx.query = MG_STR("q=..+");
    cr_assert_eq(expand_ctx("/v1/search/${query.q}", MG_TARGET_PATH, &ctx, &got), OK);
    cr_expect_str_eq(got, "/v1/search/..%20");
}

/* ---------------------------------------------------------------------------------------
 * Dot segments are judged on the assembled segment
 */
typedef struct pair_case {
    const char *tmpl;
    const char *c, *e; /* ${c} plain, ${e} a path slice */
    const char *want;
    int err;
} pair_case_t;

Test(template_paths, segments_are_judged_assembled)
{
    static const pair_case_t cases[] = {
        /* adjacent variables */
        {"/${c}${msg.id}", ".", NULL, NULL, DOT},
        {"/${c}${e}", ".", ".", NULL, DOT},
        {"/${c}${e}", ".", "./x", NULL, DOT},
        {"/${c}${e}", "a", "./x", "/a./x", OK},
        {"/${c}${e}", "", "..", NULL, DOT},
        {"/${c}${e}", ".", "x", "/.x", OK},
        {"/${c}${e}", "x", ".", "/x.", OK},
        {"/${c}${e}", "", "", "/", OK},
        {"/${c}/${e}", "a", "..", NULL, DOT},
        /* a variable next to literal dots, an empty one included */
        {"/.${c}", "", NULL, NULL, DOT},
        {"/.${c}", ".", NULL, NULL, DOT},
        {"/.${c}", "x", NULL, "/.x", OK},
        {"/..${c}", "", NULL, NULL, DOT},
        {"/..${c}", ";x", NULL, NULL, DOT},
        {"/..${c}", "x", NULL, "/..x", OK},
        {"/%2E${c}", ".", NULL, NULL, DOT},
        {"/%2e${c}/x", "", NULL, NULL, DOT},
        {"/x.${c}", ".", NULL, "/x..", OK},
        {"/${c}.", ".", NULL, NULL, DOT},
        {"/${c};x", "..", NULL, NULL, DOT},
        /* a capture that is part of a segment */
        {"/p/${e}", NULL, "../x", NULL, DOT},
        {"/p/y${e}", NULL, "../x", "/p/y../x", OK},
        {"/p${e}", NULL, "/..", NULL, DOT},
        {"/p${e}", NULL, "/..y", "/p/..y", OK},
        /* dot segments the author wrote are resolved later, as before */
        {"/a/../b/${c}", "x", NULL, "/a/../b/x", OK},
        {"/a/./${c}/..", "x", NULL, "/a/./x/..", OK}, /* a literal ".." after a variable's segment */
        {"/a/./${c}..", "x", NULL, "/a/./x..", OK},
        {"/a/${c}/..", "..", NULL, NULL, DOT}, /* ... but the variable's own segment is judged */
    };
    for (size_t i = 0; i != NUM(cases); ++i) {
        const pair_case_t *c = &cases[i];
        mg_ctx_t ctx = request();
        if (c->c != NULL) {
            mg_ctx_set_var(&ctx, MG_STR("c"), mg_str(c->c, strlen(c->c)));
            mg_ctx_set_var(&ctx, MG_STR("msg.id"), mg_str(c->c, strlen(c->c)));
        }
        if (c->e != NULL)
            mg_ctx_set_var_flags(&ctx, MG_STR("e"), mg_str(c->e, strlen(c->e)), MG_VAR_ENCODED);
        const char *got;
        int err = expand_ctx(c->tmpl, MG_TARGET_PATH, &ctx, &got);
        cr_expect_eq(err, c->err, "%s (c '%s', e '%s'): error %d, want %d", c->tmpl, c->c, c->e, err, c->err);
        if (err == OK && c->err == OK)
            cr_expect_str_eq(got, c->want, "%s", c->tmpl);
    }
}

Test(template_paths, urls_before_their_query)
{
    static const source_t capture[] = {{"${c}", bind_capture}};
    static const value_case_t in_path[] = {
        {"a/b", "https://h.example.com/p/a%2Fb?q=a/b", OK},
        {"..", NULL, DOT},
        {"..;x", NULL, DOT},
        {"%2E%2E", "https://h.example.com/p/%252E%252E?q=%252E%252E", OK},
    };
    check_cases(capture, 1, "https://h.example.com/p/%s?q=%s", MG_TARGET_URL, in_path, NUM(in_path));
    static const value_case_t in_query[] = {{"..", "https://h.example.com/p?q=..", OK},
                                            {"../..", "https://h.example.com/p?q=../..", OK}};
    check_cases(capture, 1, "https://h.example.com/p?q=%s", MG_TARGET_URL, in_query, NUM(in_query));
    static const value_case_t in_host[] = {{"..", NULL, DOT}, {"x", "https://x/p", OK}};
    check_cases(capture, 1, "https://%s/p", MG_TARGET_URL, in_host, NUM(in_host));
    /* a query is no path: its values keep '/' and dots */
    static const value_case_t query[] = {{"../..", "q=../..", OK}, {"..", "q=..", OK}};
    check_cases(capture, 1, "q=%s", MG_TARGET_QUERY, query, NUM(query));
}

/* ---------------------------------------------------------------------------------------
 * Header values: no control character but tab (item 9)
 */
typedef struct control_case {
    const char *raw, *encoded; /* the byte as plain sources hold it, and as path slices do */
    int err;
} control_case_t;

Test(template_paths, header_values_hold_no_control_character_but_tab)
{
    static const control_case_t cases[] = {
        {"a\x0b"
         "b",
         "a%0Bb", CTL},
        {"\x1b[31m", "%1b[31m", CTL},
        {"\x7f", "%7F", CTL},
        {"\x01", "%01", CTL},
        {"\x1f", "%1F", CTL},
        {"a\tb", "a%09b", OK},
        {"\r", "%0D", CRLF},
        {"x\n", "x%0a", CRLF},
        {"\xc3\xa9", "%C3%A9", OK},
        {"~", "%7E", OK},
    };
    for (size_t k = 0; k != NUM(cases); ++k) {
        const control_case_t *c = &cases[k];
        const char *got;
        for (size_t i = 0; i != NUM(segment_sources); ++i) {
            int err = expand_source(&segment_sources[i], "x %s", MG_TARGET_HEADER, c->raw, strlen(c->raw), &got);
            cr_expect_eq(err, c->err, "%s = '%s': error %d, want %d", segment_sources[i].var, c->encoded, err, c->err);
        }
        for (size_t i = 0; i != NUM(slice_sources); ++i) { /* decoded into a header */
            int err = expand_source(&slice_sources[i], "x %s", MG_TARGET_HEADER, c->encoded, strlen(c->encoded), &got);
            cr_expect_eq(err, c->err, "%s = '%s': error %d, want %d", slice_sources[i].var, c->encoded, err, c->err);
        }
        /* ${query} is inserted as sent: its escapes are text */
        static const source_t query[] = {{"${query}", bind_query}};
        cr_expect_eq(expand_source(&query[0], "x %s", MG_TARGET_HEADER, c->encoded, strlen(c->encoded), &got), OK);
        cr_expect_eq(expand_source(&query[0], "x %s", MG_TARGET_HEADER, c->raw, strlen(c->raw), &got), c->err);
    }
    cr_expect_str_eq(mg_template_strerror(CTL),
                     "the value would contain a control character (a header value allows tab and no other)");
    cr_expect_str_eq(mg_template_strerror(DOT), "a variable would make a '.' or '..' path segment");
    cr_expect_str_eq(mg_template_strerror(CRLF), "the value would contain CR, LF or NUL");
}

/* ---------------------------------------------------------------------------------------
 * The property: the literal prefix stays the prefix
 */
static const char *const tokens[] = {"", ".", "..", "/", "\\", ";", ";x", "x", "%2E", "%2F", "%"};

/* The value numbered n: up to three tokens. */
static size_t token_value(size_t n, char *buf)
{
    size_t len = 0;
    for (int i = 0; i != 3; ++i, n /= NUM(tokens)) {
        const char *t = tokens[n % NUM(tokens)];
        memcpy(buf + len, t, strlen(t));
        len += strlen(t);
    }
    buf[len] = '\0';
    return len;
}

static size_t count_char(const char *s, size_t len, char c)
{
    size_t n = 0;
    for (size_t i = 0; i != len; ++i)
        n += s[i] == c;
    return n;
}

/* The literal text of `tmpl` (its variables cut out); *prefix_len: the length before the first. */
static size_t literals_of(const char *tmpl, char *out, size_t *prefix_len)
{
    size_t n = 0;
    *prefix_len = SIZE_MAX;
    for (const char *p = tmpl; *p != '\0';) {
        if (p[0] == '$' && p[1] == '{') {
            if (*prefix_len == SIZE_MAX)
                *prefix_len = n;
            p = strchr(p, '}') + 1;
            continue;
        }
        out[n++] = *p++;
    }
    if (*prefix_len == SIZE_MAX)
        *prefix_len = n;
    return n;
}

/* Checks one expansion: refused, or a path that starts with the normalized literal prefix;
 * and when only one-segment values were inserted, exactly the literals' '/' and '\'. */
static void check_property(const char *tmpl, const mg_template_t *t, const mg_ctx_t *ctx, int slices)
{
    char lit[128], norm_prefix[128];
    size_t prefix_len, lit_len = literals_of(tmpl, lit, &prefix_len);
    long np = mg_path_normalize(lit, prefix_len, norm_prefix);
    cr_assert_geq(np, 0, "%s: the test's prefixes are normal", tmpl);
    mg_str_t out;
    if (mg_template_expand(t, ctx, &out) != 0)
        return;
    if (!slices) {
        cr_expect_eq(count_char(out.base, out.len, '/'), count_char(lit, lit_len, '/'), "%s -> %s: a value made a '/'", tmpl,
                     out.base);
        cr_expect_eq(count_char(out.base, out.len, '\\'), count_char(lit, lit_len, '\\'), "%s -> %s", tmpl, out.base);
    }
    char *norm = arena_alloc(NULL, out.len + 2);
    long n = mg_path_normalize(out.base, out.len, norm);
    if (n < 0)
        return; /* a malformed escape in a slice: the request gets a 400 too */
    cr_assert(n >= np && memcmp(norm, norm_prefix, (size_t)np) == 0, "%s -> %s -> %s: lost the prefix %s", tmpl, out.base, norm,
              norm_prefix);
}

Test(template_paths, the_literal_prefix_is_always_the_prefix)
{
    static const char *const prefixes[] = {"/v1/search/", "/t/", "/v1/x", "/", "/a.b/", "/%7Eu/"};
    static const char *const vars[] = {"${c}", "${e}", "${query.v}", "${query}", "${tenant}", "${msg.id}"};
    static const char *const suffixes[] = {"", "/end", "${c}", "/${e}/z"};
    size_t values = NUM(tokens) * NUM(tokens) * NUM(tokens), checked = 0;
    for (size_t p = 0; p != NUM(prefixes); ++p) {
        for (size_t v = 0; v != NUM(vars); ++v) {
            for (size_t s = 0; s != NUM(suffixes); ++s) {
                char tmpl[128];
                snprintf(tmpl, sizeof(tmpl), "%s%s%s", prefixes[p], vars[v], suffixes[s]);
                mg_template_t *t = compile(tmpl, MG_TARGET_PATH);
                int slices = strstr(tmpl, "${e}") != NULL;
                for (size_t n = 0; n != values; ++n) {
                    char buf[16];
                    size_t len = token_value(n, buf);
                    mg_ctx_t ctx = request();
                    mg_str_t value = mg_str(buf, len);
                    mg_ctx_set_var(&ctx, MG_STR("c"), value);
                    mg_ctx_set_var(&ctx, MG_STR("msg.id"), value);
                    mg_ctx_set_var_flags(&ctx, MG_STR("e"), value, MG_VAR_ENCODED);
                    ctx.query = strcmp(vars[v], "${query}") == 0 ? value : form_encoded("v", value);
                    ctx.tenant = value;
                    check_property(tmpl, t, &ctx, slices);
                    ++checked;
                }
                mg_template_free(t);
                support_fini(); /* the arena, between templates */
            }
        }
    }
    cr_expect_eq(checked, NUM(prefixes) * NUM(vars) * NUM(suffixes) * values);
}
