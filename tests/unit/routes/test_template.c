/*
 * Templates: syntax, every variable, the encoding of each value form in each target, the
 * CR/LF/NUL rule and the load-time errors. Templates are compiled from real YAML scalars (the
 * document is freed right after, so a string the template forgot to copy shows up under the
 * sanitizers); expansion allocates from an arena freed after each test.
 */
#include <stdio.h>

#include "support.h"

TestSuite(template, .fini = support_fini);

/* ---------------------------------------------------------------------------------------
 * Helpers
 */

/* The variables a condition "may bind" for these tests, NULL-terminated. */
static const char *const *known_names;

static int known(void *arg, mg_str_t name)
{
    (void)arg;
    for (const char *const *k = known_names; k != NULL && *k != NULL; ++k) {
        if (strlen(*k) == name.len && memcmp(*k, name.base, name.len) == 0)
            return 1;
    }
    return 0;
}

/* Compiles the value `scalar` (YAML text) written as "v: <scalar>" on line 1. */
static mg_template_t *compile_with(const char *scalar, mg_template_target_t target, const char *const *names)
{
    char yaml[512];
    snprintf(yaml, sizeof(yaml), "v: %s\n", scalar);
    mg_errors_clear(&errs);
    mg_doc_t *doc = mg_doc_load_string("t.yaml", yaml, strlen(yaml), &errs);
    cr_assert_not_null(doc, "YAML error in test: %s", errs.size != 0 ? errs.entries[0].text : "");
    known_names = names;
    mg_template_t *t = mg_template_compile(mg_node_get(mg_doc_root(doc), "v"), target, known, NULL, &errs);
    mg_doc_free(doc);
    return t;
}

static const char *const captures[] = {"remainder", "user", "word", "tenant", "nl", NULL};

static mg_template_t *compile(const char *scalar, mg_template_target_t target)
{
    mg_template_t *t = compile_with(scalar, target, captures);
    if (t == NULL)
        mg_errors_print(&errs, stderr);
    cr_assert_not_null(t, "%s did not compile", scalar);
    return t;
}

static void expect_error(const char *scalar, mg_template_target_t target, const char *message)
{
    mg_template_t *t = compile_with(scalar, target, captures);
    cr_expect_null(t, "%s compiled", scalar);
    mg_template_free(t);
    cr_assert_eq(errs.size, 1, "%s: %zu messages", scalar, errs.size);
    cr_expect_str_eq(errs.entries[0].text, message);
}

static mg_header_t headers[] = {
    {MG_STR("x-user"), MG_STR("Ann Lee")}, {MG_STR("accept"), MG_STR("*/*")},
    {MG_STR("x-user"), MG_STR("second")},  {MG_STR("x-evil"), MG_STR("a\r\nInjected: 1")},
    {MG_STR("x-enc"), MG_STR("a%0d%0ab")}, {MG_STR("x-host"), MG_STR("Back.Example:8080")},
};

static mg_ctx_t request(void)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = MG_STR("GET");
    ctx.scheme = MG_STR("http");
    ctx.host = MG_STR("acme.example.com");
    ctx.path = MG_STR("/crm/a%20b/c");
    ctx.query = MG_STR("q=a+b%26c&empty=&flag&nl=x%0d%0ay&amp=%26%3D%2B%23&path=/x?y");
    ctx.tenant = MG_STR("acme");
    ctx.headers = headers;
    ctx.num_headers = sizeof(headers) / sizeof(headers[0]);
    ctx.alloc = (mg_alloc_t){arena_alloc, NULL};
    return ctx;
}

/* Expands `scalar` for `target` against ctx; NULL when expansion refused the value. */
static const char *expand_in(const mg_ctx_t *ctx, const char *scalar, mg_template_target_t target)
{
    mg_template_t *t = compile(scalar, target);
    mg_str_t out = {NULL, 0};
    int ret = mg_template_expand(t, ctx, &out);
    mg_template_free(t);
    if (ret != 0)
        return NULL;
    cr_assert_eq(strlen(out.base), out.len, "NUL-terminated, no NUL inside");
    return out.base;
}

static const char *expand(const char *scalar, mg_template_target_t target)
{
    mg_ctx_t ctx = request();
    return expand_in(&ctx, scalar, target);
}

#define EXPECT_EXPANDS(scalar, target, want)                                                                                       \
    do {                                                                                                                           \
        const char *got_ = expand(scalar, target);                                                                                 \
        cr_expect(got_ != NULL && strcmp(got_, want) == 0, "%s -> '%s', want '%s'", scalar, got_ != NULL ? got_ : "(refused)",     \
                  want);                                                                                                           \
    } while (0)

/* ---------------------------------------------------------------------------------------
 * Syntax
 */
Test(template, literals_and_dollars)
{
    EXPECT_EXPANDS("plain text", MG_TARGET_HEADER, "plain text");
    EXPECT_EXPANDS("\"\"", MG_TARGET_HEADER, "");
    EXPECT_EXPANDS("price $5", MG_TARGET_HEADER, "price $5");
    EXPECT_EXPANDS("a$", MG_TARGET_HEADER, "a$");
    EXPECT_EXPANDS("$$", MG_TARGET_HEADER, "$");
    EXPECT_EXPANDS("$$$$x", MG_TARGET_HEADER, "$$x");
    EXPECT_EXPANDS("\"$${tenant}\"", MG_TARGET_HEADER, "${tenant}");
    EXPECT_EXPANDS("\"$$${tenant}\"", MG_TARGET_HEADER, "$acme");
    EXPECT_EXPANDS("\"${tenant}${tenant}\"", MG_TARGET_HEADER, "acmeacme");
    EXPECT_EXPANDS("\"{${tenant}}\"", MG_TARGET_HEADER, "{acme}");
}

Test(template, source_is_kept)
{
    mg_template_t *t = compile("\"/${tenant}/x$$\"", MG_TARGET_PATH);
    mg_str_t src = mg_template_source(t);
    cr_expect_eq(src.len, 14);
    cr_expect_str_eq(src.base, "/${tenant}/x$$");
    mg_template_free(t);
}

Test(template, syntax_errors)
{
    expect_error("\"${tenant\"", MG_TARGET_HEADER, "t.yaml:1:4: '${' without a closing '}' (write $$ for a literal '$')");
    expect_error("\"a ${\"", MG_TARGET_HEADER, "t.yaml:1:4: '${' without a closing '}' (write $$ for a literal '$')");
    expect_error("\"${}\"", MG_TARGET_HEADER, "t.yaml:1:4: empty variable name '${}'");
    expect_error("\"${header.}\"", MG_TARGET_HEADER,
                 "t.yaml:1:4: invalid header name in '${header.}' (expected ${header.<Name>}, a token such as X-Account-Id)");
    expect_error("\"${header.X A}\"", MG_TARGET_HEADER,
                 "t.yaml:1:4: invalid header name in '${header.X A}' (expected ${header.<Name>}, a token such as X-Account-Id)");
    expect_error("\"${query.}\"", MG_TARGET_HEADER, "t.yaml:1:4: empty parameter name in '${query.}' (expected ${query.<name>})");
    expect_error("[x]", MG_TARGET_HEADER, "t.yaml:1:4: expected a string, got a sequence");
    expect_error("", MG_TARGET_HEADER, "t.yaml:1:3: expected a string, got null");
}

Test(template, unknown_variables)
{
    static const char *const none[] = {NULL};
    static const char *const rem[] = {"remainder", NULL};
    mg_template_t *t = compile_with("\"/x/${foo}\"", MG_TARGET_PATH, none);
    cr_expect_null(t);
    cr_assert_eq(errs.size, 1);
    cr_expect_str_eq(errs.entries[0].text,
                     "t.yaml:1:4: unknown variable '${foo}' (known here: tenant, host, path, query, method, header.<Name>, "
                     "query.<name>, claim.<name>, and named groups of the conditions of this route and its parents)");
    /* remainder only where a condition binds it */
    t = compile_with("\"${remainder}\"", MG_TARGET_PATH, none);
    cr_expect_null(t);
    cr_expect_str_eq(errs.entries[0].text,
                     "t.yaml:1:4: unknown variable '${remainder}' (known here: tenant, host, path, query, method, header.<Name>, "
                     "query.<name>, claim.<name>, and named groups of the conditions of this route and its parents)");
    t = compile_with("\"${remainder}\"", MG_TARGET_PATH, rem);
    cr_expect_not_null(t);
    mg_template_free(t);
    /* a near miss gets a suggestion */
    t = compile_with("\"${tennant}\"", MG_TARGET_HEADER, rem);
    cr_expect_null(t);
    cr_expect_str_eq(errs.entries[0].text, "t.yaml:1:4: unknown variable '${tennant}' (did you mean '${tenant}'? known here: "
                                           "tenant, host, path, query, method, remainder, header.<Name>, query.<name>, claim.<name>, and "
                                           "named groups of the conditions of this route and its parents)");
    /* positions follow the node, on any line */
    mg_errors_clear(&errs);
    static const char yaml[] = "a: 1\nlist:\n  - \"${nope}\"\n";
    mg_doc_t *doc = mg_doc_load_string("t.yaml", yaml, sizeof(yaml) - 1, &errs);
    known_names = none;
    t = mg_template_compile(mg_node_get(mg_doc_root(doc), "list")->u.sequence.items[0], MG_TARGET_HEADER, known, NULL, &errs);
    mg_doc_free(doc);
    cr_expect_null(t);
    cr_assert_eq(errs.size, 1);
    cr_expect(strncmp(errs.entries[0].text, "t.yaml:3:5: unknown variable '${nope}'", 38) == 0, "%s", errs.entries[0].text);
}

Test(template, literal_rules_per_target)
{
    expect_error("\"/a b\"", MG_TARGET_PATH, "t.yaml:1:4: a path cannot contain spaces, '?' or '#'");
    expect_error("\"/a?b=1\"", MG_TARGET_PATH,
                 "t.yaml:1:4: a path cannot contain spaces, '?' or '#' (use set_query for the query)");
    expect_error("\"/a%zz\"", MG_TARGET_PATH, "t.yaml:1:4: malformed %-escape in a path (write %25 for a literal '%')");
    expect_error("\"/a%2\"", MG_TARGET_PATH, "t.yaml:1:4: malformed %-escape in a path (write %25 for a literal '%')");
    expect_error("\"a=1#frag\"", MG_TARGET_QUERY, "t.yaml:1:4: a query string cannot contain spaces, '?' or '#'");
    expect_error("\"a\\r\\nb\"", MG_TARGET_HEADER, "t.yaml:1:4: a header value cannot contain control characters (CR, LF, NUL...)");
    expect_error("\"a\\0b\"", MG_TARGET_QUERY, "t.yaml:1:4: a query string cannot contain control characters (CR, LF, NUL...)");
    expect_error("\"https://x/a b\"", MG_TARGET_URL, "t.yaml:1:4: a URL cannot contain spaces, '?' or '#'");
    EXPECT_EXPANDS("\"a\\tb\"", MG_TARGET_HEADER, "a\tb");
    EXPECT_EXPANDS("\"/a%2Fb?\"", MG_TARGET_URL, "/a%2Fb?");
    EXPECT_EXPANDS("\"a=1&b=?/:@\"", MG_TARGET_QUERY, "a=1&b=?/:@");
    EXPECT_EXPANDS("\"https://x/p?a=1#frag\"", MG_TARGET_URL, "https://x/p?a=1#frag");
}

/* ---------------------------------------------------------------------------------------
 * Variables
 */
Test(template, builtins)
{
    EXPECT_EXPANDS("\"${tenant}|${host}|${path}|${query}|${method}\"", MG_TARGET_HEADER,
                   "acme|acme.example.com|/crm/a b/c|q=a+b%26c&empty=&flag&nl=x%0d%0ay&amp=%26%3D%2B%23&path=/x?y|GET");
    mg_ctx_t ctx = request();
    ctx.tenant = MG_STR_NULL;
    ctx.query = MG_STR_NULL;
    const char *got = expand_in(&ctx, "\"[${tenant}][${query}]\"", MG_TARGET_HEADER);
    cr_expect_str_eq(got, "[][]", "unidentified tenant and absent query are empty");
}

Test(template, headers_by_name)
{
    EXPECT_EXPANDS("\"${header.X-User}\"", MG_TARGET_HEADER, "Ann Lee");
    EXPECT_EXPANDS("\"${header.x-user}\"", MG_TARGET_HEADER, "Ann Lee");
    EXPECT_EXPANDS("\"[${header.X-Missing}]\"", MG_TARGET_HEADER, "[]");
    EXPECT_EXPANDS("\"${header.X-Enc}\"", MG_TARGET_HEADER, "a%0d%0ab"); /* header values are not decoded */
    EXPECT_EXPANDS("\"/u/${header.X-User}\"", MG_TARGET_PATH, "/u/Ann%20Lee");
    EXPECT_EXPANDS("\"u=${header.X-User}\"", MG_TARGET_QUERY, "u=Ann%20Lee");
}

Test(template, query_parameters)
{
    EXPECT_EXPANDS("\"${query.q}\"", MG_TARGET_HEADER, "a b&c");
    EXPECT_EXPANDS("\"[${query.empty}][${query.flag}][${query.missing}]\"", MG_TARGET_HEADER, "[][][]");
    EXPECT_EXPANDS("\"/s/${query.q}\"", MG_TARGET_PATH, "/s/a%20b&c");
    EXPECT_EXPANDS("\"q=${query.q}\"", MG_TARGET_QUERY, "q=a%20b%26c");
    EXPECT_EXPANDS("\"${query.amp}\"", MG_TARGET_QUERY, "%26%3D%2B%23");
    EXPECT_EXPANDS("\"${query.amp}\"", MG_TARGET_PATH, "&=+%23");
    EXPECT_EXPANDS("\"${query.path}\"", MG_TARGET_PATH, "%2Fx%3Fy"); /* one segment: its '/' encoded */
    EXPECT_EXPANDS("\"${query.path}\"", MG_TARGET_QUERY, "/x?y");
}

Test(template, captures_shadow_builtins)
{
    static const char *const none[] = {NULL};
    mg_ctx_t ctx = request();
    mg_ctx_set_var(&ctx, MG_STR("tenant"), MG_STR("from-host"));
    /* where a condition may bind `tenant`, the capture wins */
    cr_expect_str_eq(expand_in(&ctx, "\"${tenant}\"", MG_TARGET_HEADER), "from-host");
    /* where none can, it is the identified tenant */
    mg_template_t *t = compile_with("\"${tenant}\"", MG_TARGET_HEADER, none);
    mg_str_t out;
    cr_assert_eq(mg_template_expand(t, &ctx, &out), 0);
    cr_expect_str_eq(out.base, "acme");
    mg_template_free(t);
    /* a later binding shadows an earlier one; a known but unbound capture is empty */
    mg_ctx_set_var(&ctx, MG_STR("user"), MG_STR("first"));
    mg_ctx_set_var(&ctx, MG_STR("user"), MG_STR("second"));
    cr_expect_str_eq(expand_in(&ctx, "\"${user}|${word}|\"", MG_TARGET_HEADER), "second||");
    ctx.num_vars = 0;
    cr_expect_str_eq(expand_in(&ctx, "\"${tenant}\"", MG_TARGET_HEADER), "acme", "unbound: the builtin");
}

/* What a value can vary with: the throttle's key ceiling exempts keys that only vary with a
 * (listed) tenant. */
Test(template, varies_tells_literal_tenant_and_request_parts)
{
    static const char *const none[] = {NULL};
    static const struct {
        const char *scalar;
        const char *const *names;
        unsigned varies;
    } cases[] = {
        {"all", none, 0},
        {"\"a$${tenant}b\"", none, 0},
        {"\"${tenant}\"", none, MG_TEMPLATE_TENANT},
        {"\"t-${tenant}-x\"", none, MG_TEMPLATE_TENANT},
        /* a capture named tenant comes from the request, not from identification */
        {"\"${tenant}\"", captures, MG_TEMPLATE_REQUEST},
        {"\"${header.X-User}\"", none, MG_TEMPLATE_REQUEST},
        {"\"${tenant}/${query.u}\"", none, MG_TEMPLATE_TENANT | MG_TEMPLATE_REQUEST},
        {"\"${host}\"", none, MG_TEMPLATE_REQUEST},
        {"\"${method}\"", none, MG_TEMPLATE_REQUEST},
        {"\"${user}\"", captures, MG_TEMPLATE_REQUEST},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        mg_template_t *t = compile_with(cases[i].scalar, MG_TARGET_HEADER, cases[i].names);
        cr_assert_not_null(t, "%s", cases[i].scalar);
        cr_expect_eq(mg_template_varies(t), cases[i].varies, "%s", cases[i].scalar);
        mg_template_free(t);
    }
}

/* ---------------------------------------------------------------------------------------
 * Encoding per target
 */
Test(template, encoded_values)
{
    mg_ctx_t ctx = request();
    mg_ctx_set_var_flags(&ctx, MG_STR("remainder"), MG_STR("/a%20b/%2Fc+d"), MG_VAR_ENCODED);
    cr_expect_str_eq(expand_in(&ctx, "\"/x${remainder}\"", MG_TARGET_PATH), "/x/a%20b/%2Fc+d");
    cr_expect_str_eq(expand_in(&ctx, "\"r=${remainder}\"", MG_TARGET_QUERY), "r=/a%20b/%2Fc+d");
    cr_expect_str_eq(expand_in(&ctx, "\"http://h${remainder}\"", MG_TARGET_URL), "http://h/a%20b/%2Fc+d");
    cr_expect_str_eq(expand_in(&ctx, "\"${remainder}\"", MG_TARGET_HEADER), "/a b//c+d", "decoded, '+' stays");
    cr_expect_str_eq(expand_in(&ctx, "\"${path}\"", MG_TARGET_PATH), "/crm/a%20b/c");
    cr_expect_str_eq(expand_in(&ctx, "\"${path}\"", MG_TARGET_HEADER), "/crm/a b/c");
    /* a raw '#' or '?' cannot end a path (or a '#' a query) early */
    mg_ctx_set_var_flags(&ctx, MG_STR("word"), MG_STR("a#b?c"), MG_VAR_ENCODED);
    cr_expect_str_eq(expand_in(&ctx, "\"/${word}\"", MG_TARGET_PATH), "/a%23b%3Fc");
    cr_expect_str_eq(expand_in(&ctx, "\"${word}\"", MG_TARGET_QUERY), "a%23b?c");
    cr_expect_str_eq(expand_in(&ctx, "\"/${word}?w=${word}\"", MG_TARGET_URL), "/a%23b%3Fc?w=a%23b?c");
}

Test(template, plain_values)
{
    mg_ctx_t ctx = request();
    mg_ctx_set_var(&ctx, MG_STR("word"), MG_STR("a b/c?d&e=f+g#h%i:@!$'()*,;~"));
    cr_expect_str_eq(expand_in(&ctx, "\"/${word}\"", MG_TARGET_PATH), "/a%20b%2Fc%3Fd&e=f+g%23h%25i:@!$'()*,;~");
    cr_expect_str_eq(expand_in(&ctx, "\"/${word}\"", MG_TARGET_URL), "/a%20b%2Fc%3Fd&e=f+g%23h%25i:@!$'()*,;~");
    cr_expect_str_eq(expand_in(&ctx, "\"${word}\"", MG_TARGET_QUERY), "a%20b/c?d%26e%3Df%2Bg%23h%25i:@!$'()*,;~");
    cr_expect_str_eq(expand_in(&ctx, "\"${word}\"", MG_TARGET_HEADER), "a b/c?d&e=f+g#h%i:@!$'()*,;~");
    mg_ctx_set_var(&ctx, MG_STR("word"), MG_STR("\xc3\xa9"));
    cr_expect_str_eq(expand_in(&ctx, "\"/${word}\"", MG_TARGET_PATH), "/%C3%A9");
}

Test(template, opaque_query)
{
    mg_ctx_t ctx = request();
    ctx.query = MG_STR("a=%20&b=c+d");
    cr_expect_str_eq(expand_in(&ctx, "\"${query}\"", MG_TARGET_HEADER), "a=%20&b=c+d");
    cr_expect_str_eq(expand_in(&ctx, "\"${query}&x=1\"", MG_TARGET_QUERY), "a=%20&b=c+d&x=1");
    cr_expect_str_eq(expand_in(&ctx, "\"https://h/p?${query}\"", MG_TARGET_URL), "https://h/p?a=%20&b=c+d");
    ctx.query = MG_STR("a?b");
    cr_expect_str_eq(expand_in(&ctx, "\"/q/${query}\"", MG_TARGET_PATH), "/q/a%3Fb");
}

Test(template, url_is_a_query_after_its_question_mark)
{
    EXPECT_EXPANDS("\"https://login.example.com/${query.path}?next=${query.path}&h=${host}\"", MG_TARGET_URL,
                   "https://login.example.com/%2Fx%3Fy?next=/x?y&h=acme.example.com");
    EXPECT_EXPANDS("\"/go?q=${query.q}\"", MG_TARGET_URL, "/go?q=a%20b%26c");
    EXPECT_EXPANDS("\"/go?q=${query.q}#top\"", MG_TARGET_URL, "/go?q=a%20b%26c#top");
}

/* ---------------------------------------------------------------------------------------
 * CR, LF and NUL
 */
Test(template, crlf_in_an_encoded_capture_is_refused_everywhere)
{
    mg_ctx_t ctx = request();
    mg_ctx_set_var_flags(&ctx, MG_STR("nl"), MG_STR("/a%0d%0aInjected:%201"), MG_VAR_ENCODED);
    for (mg_template_target_t target = MG_TARGET_HEADER; target <= MG_TARGET_URL; ++target)
        cr_expect_null(expand_in(&ctx, "\"/p${nl}\"", target), "target %d", (int)target);
    mg_ctx_set_var_flags(&ctx, MG_STR("nl"), MG_STR("/a%00b"), MG_VAR_ENCODED);
    cr_expect_null(expand_in(&ctx, "\"/p${nl}\"", MG_TARGET_PATH));
    mg_ctx_set_var_flags(&ctx, MG_STR("nl"), MG_STR("/a%0Db"), MG_VAR_ENCODED);
    cr_expect_null(expand_in(&ctx, "\"/p${nl}\"", MG_TARGET_QUERY));
    ctx.path = MG_STR("/a%0Ab");
    cr_expect_null(expand_in(&ctx, "\"${path}\"", MG_TARGET_HEADER));
    cr_expect_null(expand_in(&ctx, "\"${path}\"", MG_TARGET_PATH));
}

Test(template, crlf_in_a_query_value_is_refused_everywhere)
{
    for (mg_template_target_t target = MG_TARGET_HEADER; target <= MG_TARGET_URL; ++target)
        cr_expect_null(expand("\"/${query.nl}\"", target), "target %d", (int)target);
    mg_ctx_t ctx = request();
    ctx.query = MG_STR("nl=a%00");
    cr_expect_null(expand_in(&ctx, "\"/${query.nl}\"", MG_TARGET_PATH));
    /* the whole query is inserted as it is: its escapes stay escapes */
    cr_expect_str_eq(expand_in(&ctx, "\"${query}\"", MG_TARGET_HEADER), "nl=a%00");
}

Test(template, crlf_in_a_header_value_or_plain_capture_is_refused)
{
    for (mg_template_target_t target = MG_TARGET_HEADER; target <= MG_TARGET_URL; ++target)
        cr_expect_null(expand("\"/${header.X-Evil}\"", target), "target %d", (int)target);
    mg_ctx_t ctx = request();
    mg_ctx_set_var(&ctx, MG_STR("user"), mg_str("a\0b", 3));
    cr_expect_null(expand_in(&ctx, "\"${user}\"", MG_TARGET_HEADER));
    mg_ctx_set_var(&ctx, MG_STR("user"), MG_STR("a\nb"));
    cr_expect_null(expand_in(&ctx, "\"/${user}\"", MG_TARGET_PATH));
    /* escapes in a header value are text, not characters */
    cr_expect_str_eq(expand_in(&ctx, "\"${header.X-Enc}\"", MG_TARGET_HEADER), "a%0d%0ab");
}

Test(template, long_values)
{
    mg_ctx_t ctx = request();
    size_t n = 100000;
    char *big = malloc(n);
    memset(big, ' ', n);
    mg_ctx_set_var(&ctx, MG_STR("word"), mg_str(big, n));
    const char *got = expand_in(&ctx, "\"/${word}/${word}\"", MG_TARGET_PATH);
    cr_assert_not_null(got);
    cr_expect_eq(strlen(got), 2 + 2 * 3 * n);
    cr_expect_eq(strncmp(got, "/%20%20", 7), 0);
    free(big);
}
