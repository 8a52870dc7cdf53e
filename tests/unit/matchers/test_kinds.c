/*
 * The condition kinds host, path regex, header, query, websocket and tenant; the regex module
 * (captures, per-thread match data); percent-decoding and query parameters; keys() and binds().
 * Conditions are written in flow style (flow.h).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "matchers/matchers.h"
#include "flow.h"

TestSuite(regex, .fini = suite_fini);
TestSuite(host, .fini = suite_fini);
TestSuite(path_regex, .fini = suite_fini);
TestSuite(header, .fini = suite_fini);
TestSuite(query, .fini = suite_fini);
TestSuite(decode, .fini = suite_fini);
TestSuite(websocket, .fini = suite_fini);
TestSuite(tenant, .fini = suite_fini);
TestSuite(keys, .fini = suite_fini);
TestSuite(binds, .fini = suite_fini);
TestSuite(describe_kinds, .fini = suite_fini);

/* ---------------------------------------------------------------------------------------
 * Helpers
 */

/* A GET / with nothing else; the allocator is the test arena. */
static mg_ctx_t new_ctx(void)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = MG_STR("GET");
    ctx.path = MG_STR("/");
    ctx.alloc = test_arena;
    return ctx;
}

static mg_str_t str(const char *s)
{
    return mg_str(s, strlen(s));
}

/* The variables bound by the last match_ctx: "name=value" joined by spaces, "name=%value" for
 * encoded ones. Variable names may belong to the matcher, which is freed: hence a copy. */
static char bound[512];

static void record_bound(const mg_ctx_t *ctx, size_t mark)
{
    size_t off = 0;
    bound[0] = '\0';
    for (size_t i = mark; i < ctx->num_vars && off < sizeof(bound); ++i) {
        const mg_var_t *v = &ctx->vars[i];
        off += (size_t)snprintf(bound + off, sizeof(bound) - off, "%s%.*s=%s%.*s", i == mark ? "" : " ", (int)v->name.len,
                                v->name.base, v->flags & MG_VAR_ENCODED ? "%" : "", (int)v->value.len, v->value.base);
    }
}

/* Compiles `cond`, matches it against *ctx and records what it bound in `bound`. A failed
 * match must leave no variable. The bindings are dropped before the matcher is freed. */
static int match_ctx(const char *cond, mg_ctx_t *ctx)
{
    size_t mark = ctx->num_vars;
    mg_matcher_t *m = compile_ok(cond);
    int ret = mg_matcher_match(m, ctx);
    record_bound(ctx, mark);
    if (ret != 1)
        cr_expect_eq(ctx->num_vars, mark, "%s: variables left after a failed match", cond);
    ctx->num_vars = mark;
    mg_matcher_free(m);
    return ret;
}

static int match_host(const char *cond, const char *host)
{
    mg_ctx_t ctx = new_ctx();
    ctx.host = str(host);
    return match_ctx(cond, &ctx);
}

static int match_path(const char *cond, const char *path)
{
    mg_ctx_t ctx = new_ctx();
    ctx.path = str(path);
    return match_ctx(cond, &ctx);
}

static int match_query(const char *cond, const char *query)
{
    mg_ctx_t ctx = new_ctx();
    ctx.query = str(query);
    return match_ctx(cond, &ctx);
}

/* Headers as "name: value" lines (names already lower case, as in the gateway). */
static int match_headers(const char *cond, const char *const *lines)
{
    static mg_header_t headers[16];
    size_t n = 0;
    for (; lines[n] != NULL; ++n) {
        const char *colon = strstr(lines[n], ": ");
        cr_assert_not_null(colon);
        headers[n] = (mg_header_t){mg_str(lines[n], (size_t)(colon - lines[n])), str(colon + 2)};
    }
    mg_ctx_t ctx = new_ctx();
    ctx.headers = headers;
    ctx.num_headers = n;
    return match_ctx(cond, &ctx);
}

#define HEADERS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_HEADERS ((const char *const[]){NULL})

/* The keys of `cond`, whose strings are gone: look at the flags only. */
static mg_matcher_keys_t keys_of(const char *cond)
{
    mg_matcher_t *m = compile_ok(cond);
    mg_matcher_keys_t keys = {.complete = 1};
    mg_matcher_get_keys(m, &keys);
    mg_matcher_free(m);
    return keys;
}

static int binds(const char *cond, const char *name)
{
    mg_matcher_t *m = compile_ok(cond);
    int ret = mg_matcher_binds(m, str(name));
    mg_matcher_free(m);
    return ret;
}

static mg_regex_t *regex_ok(const char *pattern, int caseless)
{
    char text[256];
    snprintf(text, sizeof(text), "'%s'", pattern);
    mg_regex_t *re = mg_regex_compile(flow_parse(text), caseless, &errs);
    cr_assert_not_null(re, "%s", pattern);
    return re;
}

/* ---------------------------------------------------------------------------------------
 * The regex module
 */
Test(regex, named_groups_that_took_part_are_bound)
{
    mg_regex_t *re = regex_ok("^/(?<a>x)?(?<b>[0-9]+)/(y)$", 0);
    mg_ctx_t ctx = new_ctx();
    cr_assert(mg_regex_match(re, MG_STR("/42/y"), &ctx, MG_VAR_ENCODED));
    record_bound(&ctx, 0);
    cr_expect_str_eq(bound, "b=%42", "a did not take part; the unnamed group is not a variable");
    ctx.num_vars = 0;
    cr_assert(mg_regex_match(re, MG_STR("/x7/y"), &ctx, 0));
    record_bound(&ctx, 0);
    cr_expect_str_eq(bound, "a=x b=7");
    ctx.num_vars = 0;
    cr_expect_not(mg_regex_match(re, MG_STR("/x7/z"), &ctx, 0));
    cr_expect_eq(ctx.num_vars, 0);
    mg_regex_free(re);
}

Test(regex, searches_unless_anchored_and_is_case_sensitive_unless_asked)
{
    mg_regex_t *re = regex_ok("b+", 0), *ci = regex_ok("^AB$", 1);
    mg_ctx_t ctx = new_ctx();
    cr_expect(mg_regex_match(re, MG_STR("abbc"), &ctx, 0));
    cr_expect_not(mg_regex_match(re, MG_STR("B"), &ctx, 0));
    cr_expect(mg_regex_match(ci, MG_STR("ab"), &ctx, 0));
    cr_expect(mg_regex_match(ci, MG_STR("aB"), &ctx, 0));
    cr_expect_not(mg_regex_match(ci, MG_STR("abc"), &ctx, 0));
    cr_expect_not(mg_regex_match(re, mg_str(NULL, 0), &ctx, 0), "an absent subject is an empty one");
    cr_expect_eq(ctx.num_vars, 0);
    mg_regex_free(re);
    mg_regex_free(ci);
}

Test(regex, full_variable_table_undoes_and_fails)
{
    mg_regex_t *re = regex_ok("(?<a>.)(?<b>.)", 0);
    mg_ctx_t ctx = new_ctx();
    ctx.num_vars = MG_CTX_MAX_VARS - 1; /* room for a, not for b */
    cr_expect_not(mg_regex_match(re, MG_STR("xy"), &ctx, 0));
    cr_expect_eq(ctx.num_vars, MG_CTX_MAX_VARS - 1);
    ctx.num_vars = MG_CTX_MAX_VARS - 2;
    cr_expect(mg_regex_match(re, MG_STR("xy"), &ctx, 0));
    cr_expect_eq(ctx.num_vars, MG_CTX_MAX_VARS);
    mg_regex_free(re);
}

Test(regex, duplicate_names_bind_the_branch_that_matched)
{
    mg_regex_t *re = regex_ok("(?J)^(?:a(?<v>[0-9])|b(?<v>[a-z]))$", 0);
    mg_ctx_t ctx = new_ctx();
    cr_assert(mg_regex_match(re, MG_STR("bq"), &ctx, 0));
    record_bound(&ctx, 0);
    cr_expect_str_eq(bound, "v=q");
    cr_expect(mg_regex_binds(re, MG_STR("v")));
    mg_regex_free(re);
}

Test(regex, binds_and_pattern)
{
    mg_regex_t *re = regex_ok("(?<id>[0-9]+)-(?<name_2>\\w+)-(x)", 0);
    cr_expect(mg_regex_binds(re, MG_STR("id")));
    cr_expect(mg_regex_binds(re, MG_STR("name_2")));
    cr_expect_not(mg_regex_binds(re, MG_STR("i")));
    cr_expect_not(mg_regex_binds(re, MG_STR("ids")));
    cr_expect_not(mg_regex_binds(re, MG_STR("3")));
    mg_str_t p = mg_regex_pattern(re);
    cr_expect_eq(p.len, strlen("(?<id>[0-9]+)-(?<name_2>\\w+)-(x)"));
    cr_expect(memcmp(p.base, "(?<id>[0-9]+)-(?<name_2>\\w+)-(x)", p.len) == 0);
    mg_regex_free(re);
    mg_regex_free(NULL);
}

Test(regex, compile_errors_name_the_offset)
{
    cr_expect_null(mg_regex_compile(flow_parse("\n  'a(b'"), 0, &errs));
    cr_expect_null(mg_regex_compile(flow_parse("'x**'"), 0, &errs));
    cr_expect_null(mg_regex_compile(flow_parse("[a]"), 0, &errs));
    cr_expect_null(mg_regex_compile(flow_parse("~"), 0, &errs));
    cr_assert_eq(errs.size, 4);
    cr_expect_str_eq(errs.entries[0].text, "test.yaml:2:3: invalid regex at offset 3: missing closing parenthesis");
    cr_expect_str_eq(errs.entries[1].text,
                     "test.yaml:1:1: invalid regex at offset 2: quantifier does not follow a repeatable item");
    cr_expect_str_eq(errs.entries[2].text, "test.yaml:1:1: expected a string, got a sequence");
    cr_expect_str_eq(errs.entries[3].text, "test.yaml:1:1: expected a string, got null");
}

/* A pattern with more groups than a thread's first match data has pairs makes it grow. */
Test(regex, match_data_grows_for_many_groups)
{
    char pattern[256] = "^", subject[32] = "";
    for (int i = 0; i != 20; ++i) {
        snprintf(pattern + strlen(pattern), sizeof(pattern) - strlen(pattern), "(?<g%d>.)", i);
        subject[i] = (char)('a' + i);
    }
    mg_regex_t *small = regex_ok("(?<one>a)", 0), *big = regex_ok(pattern, 0);
    mg_ctx_t ctx = new_ctx();
    cr_assert(mg_regex_match(small, str(subject), &ctx, 0));
    cr_assert(mg_regex_match(big, str(subject), &ctx, 0));
    cr_assert_eq(ctx.num_vars, 21);
    const mg_str_t *g19 = mg_ctx_get_var(&ctx, MG_STR("g19"));
    cr_assert_not_null(g19);
    cr_expect_eq(g19->base[0], 't');
    ctx.num_vars = 0;
    cr_expect(mg_regex_match(small, str(subject), &ctx, 0), "the grown match data serves small patterns too");
    mg_regex_thread_release();
    mg_regex_thread_release(); /* twice is harmless */
    cr_expect(mg_regex_match(big, str(subject), &ctx, 0), "a match after a release makes new match data");
    mg_regex_free(small);
    mg_regex_free(big);
}

typedef struct regex_thread {
    const mg_regex_t *re;
    int matched;
} regex_thread_t;

static void *regex_thread_main(void *arg)
{
    regex_thread_t *t = arg;
    mg_ctx_t ctx = new_ctx();
    for (int i = 0; i != 100; ++i)
        t->matched += mg_regex_match(t->re, MG_STR("id=12345"), &ctx, 0) && ctx.num_vars-- == 1;
    return NULL;
}

/* Threads share a pattern; each has its own match data, freed when it exits (a leak here is
 * reported by the sanitizer build). */
Test(regex, threads_have_their_own_match_data)
{
    mg_regex_t *re = regex_ok("id=(?<id>[0-9]+)", 0);
    regex_thread_t t[4];
    pthread_t tid[4];
    for (int i = 0; i != 4; ++i) {
        t[i] = (regex_thread_t){re, 0};
        cr_assert_eq(pthread_create(&tid[i], NULL, regex_thread_main, &t[i]), 0);
    }
    for (int i = 0; i != 4; ++i) {
        pthread_join(tid[i], NULL);
        cr_expect_eq(t[i].matched, 100);
    }
    mg_regex_free(re);
}

/* ---------------------------------------------------------------------------------------
 * Limits: a match that gives up is MG_MATCH_ERROR, never a non-match
 */

/* `n` copies of `unit` then `tail`, in a buffer the caller frees. */
static char *repeat(const char *unit, size_t n, const char *tail)
{
    size_t ul = strlen(unit), tl = strlen(tail);
    char *s = malloc(ul * n + tl + 1);
    for (size_t i = 0; i != n; ++i)
        memcpy(s + i * ul, unit, ul);
    memcpy(s + ul * n, tail, tl + 1);
    return s;
}

/* The subject on which ^(a+)+$ backtracks exponentially: about 2^40 steps unbounded. */
#define RUNAWAY "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"

Test(regex, a_runaway_match_is_an_error_that_says_why)
{
    mg_regex_t *re = regex_ok("^(?<x>a+)+$", 0);
    mg_ctx_t ctx = new_ctx();
    cr_expect_eq(mg_regex_match(re, MG_STR("aaaa"), &ctx, 0), 1);
    ctx.num_vars = 0;
    cr_expect_eq(mg_regex_match(re, MG_STR("aaab"), &ctx, 0), 0, "a quick non-match is a non-match");
    cr_expect_null(ctx.error.reason);
    cr_expect_eq(mg_regex_match(re, MG_STR(RUNAWAY), &ctx, 0), MG_MATCH_ERROR);
    cr_expect_eq(ctx.num_vars, 0, "nothing bound");
    cr_assert_not_null(ctx.error.reason);
    cr_expect_str_eq(ctx.error.reason, "hit the match limit");
    cr_expect_eq(ctx.error.pattern.len, strlen("^(?<x>a+)+$"));
    cr_expect_eq(memcmp(ctx.error.pattern.base, "^(?<x>a+)+$", ctx.error.pattern.len), 0);
    cr_expect_null(ctx.error.route);
    mg_regex_free(re);
}

Test(regex, the_first_failure_is_the_one_reported)
{
    mg_regex_t *a = regex_ok("^(a+)+$", 0), *b = regex_ok("^(a|aa)+$", 0);
    mg_ctx_t ctx = new_ctx();
    cr_expect_eq(mg_regex_match(a, MG_STR(RUNAWAY), &ctx, 0), MG_MATCH_ERROR);
    cr_expect_eq(mg_regex_match(b, MG_STR(RUNAWAY), &ctx, 0), MG_MATCH_ERROR);
    cr_expect_eq(ctx.error.pattern.base, mg_regex_pattern(a).base);
    mg_regex_free(a);
    mg_regex_free(b);
}

/* (*NO_JIT) makes PCRE2 interpret: the limits of the interpreter are set too. */
Test(regex, the_interpreter_has_the_same_match_limit)
{
    mg_regex_t *re = regex_ok("(*NO_JIT)^(a+)+$", 0);
    mg_ctx_t ctx = new_ctx();
    cr_expect_eq(mg_regex_match(re, MG_STR(RUNAWAY), &ctx, 0), MG_MATCH_ERROR);
    cr_expect_str_eq(ctx.error.reason, "hit the match limit");
    mg_regex_free(re);
}

/* Without explicit limits, PCRE2's defaults give the JIT a 32 KiB stack (this would fail) and the
 * interpreter a depth of 10,000,000 and 20 GB of heap (the 1 MiB cases would not fail). */
Test(regex, linear_patterns_over_64_kib_fit_the_limits_and_larger_ones_hit_them)
{
    char *abab = repeat("ab", 32 << 10, ""), *big = repeat("ab", 512 << 10, "");
    const char *patterns[] = {"^(?:a|b)*$", "^(a|b)*$", "(*NO_JIT)^(?:a|b)*$", "(*NO_JIT)^(a|b)*$"};
    const char *past[] = {"hit the JIT stack limit", "hit the JIT stack limit", "hit the depth limit", "hit the heap limit"};
    for (size_t i = 0; i != 4; ++i) {
        mg_regex_t *re = regex_ok(patterns[i], 0);
        mg_ctx_t ctx = new_ctx();
        cr_expect_eq(mg_regex_match(re, str(abab), &ctx, 0), 1, "%s over 64 KiB", patterns[i]);
        cr_expect_eq(mg_regex_match(re, str(big), &ctx, 0), MG_MATCH_ERROR, "%s over 1 MiB", patterns[i]);
        cr_expect_str_eq(ctx.error.reason ? ctx.error.reason : "(none)", past[i], "%s", patterns[i]);
        mg_regex_free(re);
    }
    free(abab);
    free(big);
}

static void *runaway_thread_main(void *arg)
{
    mg_ctx_t ctx = new_ctx();
    return (void *)(intptr_t)(mg_regex_match(arg, MG_STR(RUNAWAY), &ctx, 0) == MG_MATCH_ERROR && ctx.error.reason != NULL);
}

Test(regex, every_thread_gets_the_limits)
{
    mg_regex_t *re = regex_ok("^(a+)+$", 0);
    pthread_t tid[2];
    void *ok[2];
    for (int i = 0; i != 2; ++i)
        cr_assert_eq(pthread_create(&tid[i], NULL, runaway_thread_main, re), 0);
    for (int i = 0; i != 2; ++i) {
        pthread_join(tid[i], &ok[i]);
        cr_expect(ok[i] != NULL, "thread %d", i);
    }
    mg_regex_free(re);
}

/* Every kind with a regex passes the error on; a repeated header or query parameter decides by an
 * instance that passes, and is undecided only when none does. */
Test(regex, kinds_pass_the_error_on)
{
    mg_header_t runaway_first[] = {{MG_STR("x-q"), MG_STR(RUNAWAY)}, {MG_STR("x-q"), MG_STR("aaa")}};
    mg_header_t runaway_only[] = {{MG_STR("x-q"), MG_STR("b")}, {MG_STR("x-q"), MG_STR(RUNAWAY)}};
    mg_ctx_t ctx = new_ctx();
    ctx.headers = runaway_first, ctx.num_headers = 2;
    cr_expect_eq(match_ctx("{header: {name: x-q, regex: '^(a+)+$'}}", &ctx), 1);
    ctx.headers = runaway_only;
    cr_expect_eq(match_ctx("{header: {name: x-q, regex: '^(a+)+$'}}", &ctx), MG_MATCH_ERROR);
    cr_expect_eq(match_ctx("{header: {name: x-q, present: true}}", &ctx), 1, "no regex, no error");
    ctx.query = MG_STR("q=b&q=" RUNAWAY);
    cr_expect_eq(match_ctx("{query: {name: q, regex: '^(a+)+$'}}", &ctx), MG_MATCH_ERROR);
    ctx.query = MG_STR("q=" RUNAWAY "&q=aa");
    cr_expect_eq(match_ctx("{query: {name: q, regex: '^(a+)+$'}}", &ctx), 1);
    ctx.path = MG_STR("/" RUNAWAY);
    cr_expect_eq(match_ctx("{path: {regex: '^/(a+)+$'}}", &ctx), MG_MATCH_ERROR);
    ctx.host = MG_STR(RUNAWAY);
    cr_expect_eq(match_ctx("{host: {regex: '^(a+)+$'}}", &ctx), MG_MATCH_ERROR);
}

/* ---------------------------------------------------------------------------------------
 * host
 */
Test(host, exact_is_case_insensitive)
{
    cr_expect(match_host("{host: api.example.com}", "api.example.com"));
    cr_expect(match_host("{host: API.Example.COM}", "api.example.com"));
    cr_expect(match_host("{host: {exact: Api.example.com}}", "api.example.com"));
    cr_expect_not(match_host("{host: api.example.com}", "api.example.co"));
    cr_expect_not(match_host("{host: api.example.com}", "api.example.com.evil"));
    cr_expect_not(match_host("{host: api.example.com}", "xapi.example.com"));
    cr_expect_not(match_host("{host: api.example.com}", "a.api.example.com"));
    cr_expect_not(match_host("{host: api.example.com}", ""));
    cr_expect(match_host("{host: '[::1]'}", "[::1]"));
    cr_expect(match_host("{host: '[FE80::1]'}", "[fe80::1]"));
    cr_expect(match_host("{host: 127.0.0.1}", "127.0.0.1"));
    cr_expect_str_eq(bound, "");
}

Test(host, wildcard_is_one_or_more_labels)
{
    const char *w = "{host: '*.example.com'}";
    cr_expect(match_host(w, "a.example.com"));
    cr_expect(match_host(w, "a.b.example.com"));
    cr_expect(match_host(w, "x-1.y.z.example.com"));
    cr_expect(match_host("{host: '*.EXAMPLE.com'}", "a.example.com"));
    cr_expect_not(match_host(w, "example.com"));
    cr_expect_not(match_host(w, ".example.com"));
    cr_expect_not(match_host(w, "a..example.com"));
    cr_expect_not(match_host(w, ".a.example.com"));
    cr_expect_not(match_host(w, "aexample.com"));
    cr_expect_not(match_host(w, "a.example.com.evil"));
    cr_expect_not(match_host(w, "a.example.co"));
    cr_expect_not(match_host(w, ""));
    cr_expect(match_host("{host: '*.com'}", "example.com"));
    cr_expect_not(match_host("{host: '*.com'}", "com"));
}

Test(host, regex_is_caseless_and_binds)
{
    const char *re = "{host: {regex: '^(?<sub>[a-z0-9]+)\\.EXAMPLE\\.com$'}}";
    cr_expect(match_host(re, "eu1.example.com"));
    cr_expect_str_eq(bound, "sub=eu1", "host captures are not encoded");
    cr_expect_not(match_host(re, "a.b.example.com"));
    cr_expect_str_eq(bound, "");
    cr_expect(match_host("{host: {regex: 'example'}}", "www.example.org"), "a regex is searched, not anchored");
}

Test(host, errors)
{
    EXPECT_ERRORS("{host: 'api.example.com:8080'}",
                  "test.yaml:1:8: invalid host 'api.example.com:8080': a host cannot have a port (the port is ignored when "
                  "matching; IPv6 addresses go in brackets)");
    EXPECT_ERRORS("{host: '[::1]:80'}",
                  "test.yaml:1:8: invalid host '[::1]:80': a host cannot have a port (the port is ignored when matching)");
    EXPECT_ERRORS("{host: '[::1'}", "test.yaml:1:8: invalid host '[::1': invalid IPv6 address (expected [address])");
    EXPECT_ERRORS("{host: ''}", "test.yaml:1:8: invalid host '': a host cannot be empty");
    EXPECT_ERRORS("{host: ~}", "test.yaml:1:8: expected a string, got null");
    static const char bad_char[] = "a host cannot contain spaces, control characters, '/', '\\', '?', '#' or '@'";
    char msg[256];
    static const char *const bad[] = {"a.com/x", "a b.com", "a\\r.com", "a?b", "user@a.com"};
    static const char *const shown[] = {"a.com/x", "a b.com", "a\r.com", "a?b", "user@a.com"};
    for (size_t i = 0; i != sizeof(bad) / sizeof(bad[0]); ++i) {
        char text[64];
        snprintf(text, sizeof(text), "{host: \"%s\"}", bad[i]);
        snprintf(msg, sizeof(msg), "test.yaml:1:8: invalid host '%s': %s", shown[i], bad_char);
        expect_errors(text, (const char *const[]){msg, NULL});
    }
    static const char star[] = "'*' can only be the whole first label, as in '*.example.com'";
    static const char *const stars[] = {"a.*.com", "*example.com", "*", "*.*.com", "a*.example.com", "**.a.com"};
    for (size_t i = 0; i != sizeof(stars) / sizeof(stars[0]); ++i) {
        char text[64];
        snprintf(text, sizeof(text), "{host: '%s'}", stars[i]);
        snprintf(msg, sizeof(msg), "test.yaml:1:8: invalid host '%s': %s", stars[i], star);
        expect_errors(text, (const char *const[]){msg, NULL});
    }
    EXPECT_ERRORS("{host: '*.'}", "test.yaml:1:8: invalid host '*.': a wildcard needs a domain after '*.'");
    EXPECT_ERRORS("{host: {exact: '*.a.com'}}", "test.yaml:1:16: invalid host '*.a.com': 'exact' takes a host name without '*'");
    EXPECT_ERRORS("{host: 'a.com.'}", "test.yaml:1:8: invalid host 'a.com.': a host name cannot have an empty label ('.' at an "
                                      "end, or '..')");
    EXPECT_ERRORS("{host: 'a..com'}", "test.yaml:1:8: invalid host 'a..com': a host name cannot have an empty label ('.' at an "
                                      "end, or '..')");
    EXPECT_ERRORS("{host: [a.com]}", "test.yaml:1:8: expected a host name or a mapping with 'exact' or 'regex', got a sequence");
    EXPECT_ERRORS("{host: {exact: a.com, regex: a}}", "test.yaml:1:8: 'host' takes exactly one of 'exact' or 'regex'");
    EXPECT_ERRORS("{host: {}}", "test.yaml:1:8: 'host' takes exactly one of 'exact' or 'regex'");
    EXPECT_ERRORS("{host: {regx: a}}", "test.yaml:1:9: unknown key 'regx' (did you mean 'regex'?)");
    EXPECT_ERRORS("{all: [{path: /},\n  {host: {regex: '(?<x'}}]}",
                  "test.yaml:2:18: invalid regex at offset 4: syntax error in subpattern name (missing terminator?)");
}

/* ---------------------------------------------------------------------------------------
 * path: {regex: ...}
 */
Test(path_regex, captures_are_encoded_slices_of_the_normalized_path)
{
    const char *re = "{path: {regex: '^/users/(?<id>[^/]+)(?:/(?<tab>[a-z]+))?$'}}";
    cr_expect(match_path(re, "/users/a%2Fb"));
    cr_expect_str_eq(bound, "id=%a%2Fb");
    cr_expect(match_path(re, "/users/7/posts"));
    cr_expect_str_eq(bound, "id=%7 tab=%posts");
    cr_expect_not(match_path(re, "/users/7/8/posts"));
    cr_expect_not(match_path(re, "/users/"));
    cr_expect_not(match_path(re, "/Users/7"), "paths are case-sensitive");
    cr_expect(match_path("{path: {regex: '/v[0-9]+/'}}", "/api/v2/x"), "a regex is searched, not anchored");
}

Test(path_regex, failed_branches_undo_captures)
{
    mg_ctx_t ctx = new_ctx();
    ctx.path = MG_STR("/a/1");
    mg_ctx_set_var(&ctx, MG_STR("keep"), MG_STR("me"));
    cr_expect_not(match_ctx("{all: [{path: {regex: '^/(?<x>a)/(?<y>[0-9])$'}}, {method: POST}]}", &ctx));
    cr_expect_eq(ctx.num_vars, 1);
    cr_expect(match_ctx("{any: [{all: [{path: {regex: '^/(?<x>a)'}}, {method: POST}]}, {path: {regex: '(?<y>[0-9])$'}}]}", &ctx));
    cr_expect_str_eq(bound, "y=%1", "only the winning alternative's captures survive");
    cr_expect(match_ctx("{not: {path: {regex: '(?<z>b)'}}}", &ctx));
    cr_expect_str_eq(bound, "");
    cr_expect_not(match_ctx("{not: {path: {regex: '(?<z>a)'}}}", &ctx));
}

Test(path_regex, errors)
{
    EXPECT_ERRORS("{path: {regex: 'a(b'}}", "test.yaml:1:16: invalid regex at offset 3: missing closing parenthesis");
    EXPECT_ERRORS("{path: {regex: '^/a', prefix: /a}}", "test.yaml:1:8: 'path' takes exactly one of 'exact', 'prefix' or 'regex'");
    EXPECT_ERRORS("{path: {regexp: '^/a'}}", "test.yaml:1:9: unknown key 'regexp' (did you mean 'regex'?)");
}

/* ---------------------------------------------------------------------------------------
 * header
 */
Test(header, names_are_case_insensitive_values_exact)
{
    cr_expect(match_headers("{header: {name: X-Api-Key, equals: s3cret}}", HEADERS("x-api-key: s3cret")));
    cr_expect_not(match_headers("{header: {name: X-Api-Key, equals: s3cret}}", HEADERS("x-api-key: S3cret")));
    cr_expect_not(match_headers("{header: {name: X-Api-Key, equals: s3cret}}", HEADERS("x-api-key: s3cret ")));
    cr_expect_not(match_headers("{header: {name: X-Api-Key, equals: s3cret}}", HEADERS("x-api-ke: s3cret")));
    cr_expect_not(match_headers("{header: {name: X-Api-Key, equals: s3cret}}", NO_HEADERS));
    cr_expect(match_headers("{header: {name: x-e, equals: ''}}", HEADERS("x-e: ")));
    cr_expect_not(match_headers("{header: {name: x-e, equals: ''}}", NO_HEADERS));
}

Test(header, prefix_contains)
{
    const char *p = "{header: {name: accept, prefix: 'text/'}}", *c = "{header: {name: user-agent, contains: Mobile}}";
    cr_expect(match_headers(p, HEADERS("accept: text/html")));
    cr_expect(match_headers(p, HEADERS("accept: text/")));
    cr_expect_not(match_headers(p, HEADERS("accept: text")));
    cr_expect_not(match_headers(p, HEADERS("accept: application/json, text/html")), "a list is not split");
    cr_expect(match_headers(c, HEADERS("user-agent: Foo Mobile/1")));
    cr_expect(match_headers(c, HEADERS("user-agent: Mobile")));
    cr_expect_not(match_headers(c, HEADERS("user-agent: mobile")));
    cr_expect_not(match_headers(c, HEADERS("user-agent: Mobil")));
    cr_expect_not(match_headers(c, HEADERS("user-agent: ")));
    cr_expect(match_headers("{header: {name: a, contains: ''}}", HEADERS("a: ")));
}

Test(header, any_instance_of_a_repeated_header)
{
    const char *const *h = HEADERS("x-a: 1", "x-b: 2", "x-a: 2", "x-a: v=3", "x-a: v=4");
    cr_expect(match_headers("{header: {name: x-a, equals: '2'}}", h));
    cr_expect(match_headers("{header: {name: x-a, prefix: 'v='}}", h));
    cr_expect_not(match_headers("{header: {name: x-a, equals: '5'}}", h));
    cr_expect(match_headers("{header: {name: x-a, regex: '^v=(?<v>[0-9])$'}}", h));
    cr_expect_str_eq(bound, "v=3", "the first matching instance binds");
}

Test(header, present)
{
    cr_expect(match_headers("{header: {name: X-A, present: true}}", HEADERS("x-b: 1", "x-a: ")));
    cr_expect_not(match_headers("{header: {name: X-A, present: true}}", HEADERS("x-b: 1")));
    cr_expect_not(match_headers("{header: {name: X-A, present: true}}", NO_HEADERS));
    cr_expect(match_headers("{header: {name: X-A, present: false}}", NO_HEADERS));
    cr_expect(match_headers("{header: {name: X-A, present: false}}", HEADERS("x-b: 1", "x-ab: 1")));
    cr_expect_not(match_headers("{header: {name: X-A, present: false}}", HEADERS("x-a: 1", "x-a: 2")));
}

Test(header, errors)
{
    const char *one = "'header' takes 'name' and exactly one of 'equals', 'prefix', 'contains', 'regex' or 'present'";
    char msg[256];
    snprintf(msg, sizeof(msg), "test.yaml:1:10: %s", one);
    expect_errors("{header: {name: a}}", (const char *const[]){msg, NULL});
    expect_errors("{header: {name: a, equals: b, prefix: c}}", (const char *const[]){msg, NULL});
    expect_errors("{header: {equals: b}}", (const char *const[]){"test.yaml:1:10: missing key 'name'", NULL});
    expect_errors("{header: {present: true, equals: b}}", (const char *const[]){"test.yaml:1:10: missing key 'name'", msg, NULL});
    EXPECT_ERRORS("{header: {name: a, equal: b}}", "test.yaml:1:20: unknown key 'equal' (did you mean 'equals'?)");
    EXPECT_ERRORS("{header: {name: a, name: b, equals: c}}", "test.yaml:1:20: duplicate key 'name'");
    EXPECT_ERRORS("{header: {name: 'X A', equals: b}}",
                  "test.yaml:1:17: invalid header name 'X A' (a name is a token such as X-Api-Key)");
    EXPECT_ERRORS("{header: {name: 'x:', equals: b}}",
                  "test.yaml:1:17: invalid header name 'x:' (a name is a token such as X-Api-Key)");
    EXPECT_ERRORS("{header: {name: '', equals: b}}", "test.yaml:1:17: a header name cannot be empty");
    EXPECT_ERRORS("{header: {name: [a], equals: b}}", "test.yaml:1:17: expected a string, got a sequence");
    EXPECT_ERRORS("{header: {name: a, present: 'yes'}}", "test.yaml:1:29: expected true or false, got the quoted string 'yes'");
    EXPECT_ERRORS("{header: {name: a, equals: ~}}", "test.yaml:1:28: expected a string, got null");
    EXPECT_ERRORS("{header: {name: a, regex: '('}}", "test.yaml:1:27: invalid regex at offset 1: missing closing parenthesis");
    EXPECT_ERRORS("{header: x-a}", "test.yaml:1:10: expected a mapping such as {name: N, equals: V}, got a scalar");
}

/* ---------------------------------------------------------------------------------------
 * query
 */
Test(query, values_are_decoded)
{
    const char *sp = "{query: {name: q, equals: 'a b'}}";
    cr_expect(match_query(sp, "q=a+b"));
    cr_expect(match_query(sp, "q=a%20b"));
    cr_expect(match_query(sp, "x=1&q=a%20b&y=2"));
    cr_expect_not(match_query(sp, "q=a%2Bb"));
    cr_expect(match_query("{query: {name: q, equals: 'a+b'}}", "q=a%2Bb"));
    cr_expect(match_query("{query: {name: q, equals: 'a&b=c'}}", "q=a%26b%3dc"));
    cr_expect(match_query("{query: {name: q, equals: 'a'}}", "q=a&b"), "'&' ends the value");
    cr_expect(match_query("{query: {name: q, equals: '%zz'}}", "q=%zz"), "a malformed escape is kept");
    cr_expect(match_query("{query: {name: q, equals: '1%'}}", "q=1%"));
    cr_expect(match_query("{query: {name: q, equals: 'x=y'}}", "q=x=y"), "the first '=' splits");
    cr_expect_not(match_query(sp, "q=A+b"), "values are case-sensitive");
}

Test(query, names_are_decoded)
{
    const char *c = "{query: {name: 'my name', equals: '1'}}";
    cr_expect(match_query(c, "my+name=1"));
    cr_expect(match_query(c, "my%20name=1"));
    cr_expect(match_query(c, "my%20nam%65=1"));
    cr_expect_not(match_query(c, "my_name=1"));
    cr_expect_not(match_query(c, "My+name=1"), "names are case-sensitive");
    cr_expect(match_query("{query: {name: 'a&b', present: true}}", "a%26b"));
    cr_expect(match_query("{query: {name: 'a=b', equals: c}}", "a%3Db=c"));
}

Test(query, without_a_value)
{
    cr_expect(match_query("{query: {name: a, present: true}}", "a"));
    cr_expect(match_query("{query: {name: a, present: true}}", "a="));
    cr_expect(match_query("{query: {name: a, present: true}}", "x=1&a"));
    cr_expect(match_query("{query: {name: a, equals: ''}}", "a"));
    cr_expect(match_query("{query: {name: a, equals: ''}}", "a=&b=1"));
    cr_expect_not(match_query("{query: {name: a, equals: ''}}", "a=1"));
    cr_expect_not(match_query("{query: {name: a, present: true}}", "ab=1&b=a&xa"));
    cr_expect_not(match_query("{query: {name: a, present: true}}", ""));
    cr_expect(match_query("{query: {name: a, present: false}}", ""));
    cr_expect(match_query("{query: {name: a, present: false}}", "&&b&=a"));
    cr_expect_not(match_query("{query: {name: a, present: false}}", "b&a&c"));
}

Test(query, any_occurrence)
{
    cr_expect(match_query("{query: {name: tag, equals: y}}", "tag=x&tag=y&tag=z"));
    cr_expect(match_query("{query: {name: tag, prefix: 'y'}}", "tag=x&tag=yes"));
    cr_expect(match_query("{query: {name: tag, contains: 'e s'}}", "tag=x&tag=y%65+s"));
    cr_expect_not(match_query("{query: {name: tag, equals: w}}", "tag=x&tag=y&tag=z"));
    cr_expect(match_query("{query: {name: tag, regex: '^(?<t>[yz])$'}}", "tag=x&tag=y&tag=z"));
    cr_expect_str_eq(bound, "t=y");
}

/* Captures point at the decoded value: into the query itself when it had nothing to decode,
 * else into request memory. Either way they are not encoded (flags 0). */
Test(query, regex_captures_are_decoded)
{
    mg_matcher_t *m = compile_ok("{query: {name: id, regex: '^(?<id>.+)$'}}");
    mg_ctx_t ctx = new_ctx();
    ctx.query = MG_STR("x=1&id=a%2Fb+c");
    cr_assert(mg_matcher_match(m, &ctx));
    const mg_var_t *v = mg_ctx_find_var(&ctx, MG_STR("id"));
    cr_assert_not_null(v);
    cr_expect_eq(v->flags, 0);
    cr_expect_eq(v->value.len, 5);
    cr_expect(memcmp(v->value.base, "a/b c", 5) == 0);
    cr_expect(v->value.base < ctx.query.base || v->value.base >= ctx.query.base + ctx.query.len);

    ctx = new_ctx();
    ctx.query = MG_STR("id=plain");
    size_t before = num_allocs;
    cr_assert(mg_matcher_match(m, &ctx));
    v = mg_ctx_find_var(&ctx, MG_STR("id"));
    cr_assert_not_null(v);
    cr_expect_eq(v->value.base, ctx.query.base + 3, "an unescaped value is matched in place");
    cr_expect_eq(num_allocs, before, "no allocation for an unescaped value");
    mg_matcher_free(m);
}

Test(query, errors)
{
    EXPECT_ERRORS("{query: {name: '', present: true}}", "test.yaml:1:16: a query parameter name cannot be empty");
    EXPECT_ERRORS("{query: {name: a, contain: b}}", "test.yaml:1:19: unknown key 'contain' (did you mean 'contains'?)");
    EXPECT_ERRORS("{query: {name: a, present: maybe}}", "test.yaml:1:28: expected true or false, got 'maybe'");
    EXPECT_ERRORS("{query: {name: a}}",
                  "test.yaml:1:9: 'query' takes 'name' and exactly one of 'equals', 'prefix', 'contains', 'regex' or 'present'");
    EXPECT_ERRORS("{query: [a]}", "test.yaml:1:9: expected a mapping such as {name: N, equals: V}, got a sequence");
}

/* ---------------------------------------------------------------------------------------
 * Percent-decoding and query parameters
 */
static const char *decoded(const char *in, int plus)
{
    static char out[128];
    size_t n = mg_percent_decode(in, strlen(in), out, plus);
    out[n] = '\0';
    return out;
}

Test(decode, percent_decode)
{
    cr_expect_str_eq(decoded("%41%4a%4A%7e", 0), "AJJ~");
    cr_expect_str_eq(decoded("a+b%2B", 1), "a b+");
    cr_expect_str_eq(decoded("a+b%2B", 0), "a+b+");
    cr_expect_str_eq(decoded("%", 1), "%");
    cr_expect_str_eq(decoded("%4", 1), "%4");
    cr_expect_str_eq(decoded("x%4", 1), "x%4");
    cr_expect_str_eq(decoded("%zz%g1%1g", 1), "%zz%g1%1g");
    cr_expect_str_eq(decoded("%%41", 1), "%A");
    cr_expect_str_eq(decoded("%2541", 1), "%41", "decoded once");
    cr_expect_str_eq(decoded("", 1), "");
    char out[4];
    cr_expect_eq(mg_percent_decode("%00x", 4, out, 0), 2);
    cr_expect_eq(out[0], '\0');
    cr_expect_eq(out[1], 'x');
}

static const char *param(const char *query, const char *name)
{
    static char out[64];
    int found = -1;
    mg_str_t v = mg_query_param(str(query), str(name), &found);
    cr_assert(found == 0 || found == 1);
    if (!found)
        return "(absent)";
    snprintf(out, sizeof(out), "%.*s", (int)v.len, v.base);
    return out;
}

Test(decode, query_param)
{
    cr_expect_str_eq(param("a=1&b=2&a=3", "a"), "1");
    cr_expect_str_eq(param("a=1&b=2&a=3", "b"), "2");
    cr_expect_str_eq(param("a=1&b=2", "c"), "(absent)");
    cr_expect_str_eq(param("a", "a"), "");
    cr_expect_str_eq(param("a=", "a"), "");
    cr_expect_str_eq(param("b=1&a", "a"), "");
    cr_expect_str_eq(param("a=x%20y", "a"), "x%20y", "the value stays encoded");
    cr_expect_str_eq(param("a%20b=1", "a b"), "1");
    cr_expect_str_eq(param("a+b=1", "a b"), "1");
    cr_expect_str_eq(param("a%2=1", "a%2"), "1");
    cr_expect_str_eq(param("ab=1&a=2", "a"), "2");
    cr_expect_str_eq(param("", "a"), "(absent)");
    cr_expect_str_eq(param("&&", ""), "(absent)", "an empty segment is no parameter");
    cr_expect_str_eq(param("a=1&", ""), "(absent)");
    cr_expect_str_eq(param("=x", ""), "x");
    int found = -1;
    mg_query_param(mg_str(NULL, 0), MG_STR("a"), &found);
    cr_expect_eq(found, 0);
}

Test(decode, query_param_next_visits_every_occurrence)
{
    mg_str_t q = MG_STR("t=1&u=2&t&t=3&t%3d=4&t=");
    const char *expected[] = {"1", "", "3", ""};
    size_t pos = 0, n = 0;
    mg_str_t v;
    while (mg_query_param_next(q, MG_STR("t"), &pos, &v)) {
        cr_assert_lt(n, 4);
        cr_expect_eq(v.len, strlen(expected[n]));
        cr_expect(memcmp(v.base, expected[n], v.len) == 0);
        ++n;
    }
    cr_expect_eq(n, 4);
    cr_expect_eq(mg_query_param_next(q, MG_STR("t"), &pos, &v), 0, "the end stays the end");
    pos = 0;
    cr_expect(mg_query_param_next(q, MG_STR("t="), &pos, &v));
    cr_expect_eq(v.len, 1);
    cr_expect_eq(v.base[0], '4');
}

/* Inputs that end right before an unreadable page: a read past the end crashes the test. */
Test(decode, reads_stay_inside_the_input)
{
    long page = sysconf(_SC_PAGESIZE);
    char *mem = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(mem, MAP_FAILED);
    cr_assert_eq(mprotect(mem + page, (size_t)page, PROT_NONE), 0);
    static const char *const inputs[] = {"%", "%4", "a=%", "a=1&", "a", "a=", "a%2", "+", "a=1&a"};
    for (size_t i = 0; i != sizeof(inputs) / sizeof(inputs[0]); ++i) {
        size_t len = strlen(inputs[i]);
        char *in = mem + page - len, out[16];
        memcpy(in, inputs[i], len);
        mg_percent_decode(in, len, out, 1);
        size_t pos = 0;
        mg_str_t v;
        while (mg_query_param_next(mg_str(in, len), MG_STR("a"), &pos, &v))
            cr_expect_leq(v.base + v.len, mem + page);
        int found;
        mg_query_param(mg_str(in, len), MG_STR("a%2"), &found);
    }
    munmap(mem, (size_t)page * 2);
}

/* ---------------------------------------------------------------------------------------
 * websocket, tenant
 */
Test(websocket, upgrade_or_not)
{
    mg_ctx_t ctx = new_ctx();
    cr_expect(match_ctx("{websocket: false}", &ctx));
    cr_expect_not(match_ctx("{websocket: true}", &ctx));
    ctx.websocket = 1;
    cr_expect(match_ctx("{websocket: true}", &ctx));
    cr_expect(match_ctx("{websocket: yes}", &ctx));
    cr_expect_not(match_ctx("{websocket: false}", &ctx));
    EXPECT_ERRORS("{websocket: maybe}", "test.yaml:1:13: expected true or false, got 'maybe'");
    EXPECT_ERRORS("{websocket: 'true'}", "test.yaml:1:13: expected true or false, got the quoted string 'true'");
    EXPECT_ERRORS("{websocket: [true]}", "test.yaml:1:13: expected true or false, got a sequence");
}

Test(tenant, names_are_exact)
{
    mg_ctx_t ctx = new_ctx();
    cr_expect_not(match_ctx("{tenant: acme}", &ctx), "an unidentified request has no tenant");
    ctx.tenant = MG_STR("acme");
    cr_expect(match_ctx("{tenant: acme}", &ctx));
    cr_expect(match_ctx("{tenant: [globex, acme]}", &ctx));
    cr_expect_not(match_ctx("{tenant: Acme}", &ctx));
    cr_expect_not(match_ctx("{tenant: acm}", &ctx));
    cr_expect_not(match_ctx("{tenant: acmee}", &ctx));
    cr_expect_not(match_ctx("{tenant: [globex, initech]}", &ctx));
    cr_expect(match_ctx("{not: {tenant: globex}}", &ctx));
}

Test(tenant, errors)
{
    EXPECT_ERRORS("{tenant: ''}", "test.yaml:1:10: a tenant name cannot be empty or contain NUL");
    EXPECT_ERRORS("{tenant: []}", "test.yaml:1:10: 'tenant' needs at least one tenant");
    EXPECT_ERRORS("{tenant: [a, '', ~]}", "test.yaml:1:14: a tenant name cannot be empty or contain NUL",
                  "test.yaml:1:18: expected a string, got null");
    EXPECT_ERRORS("{tenant: {name: a}}", "test.yaml:1:10: expected a string, got a mapping");
}

/* ---------------------------------------------------------------------------------------
 * keys() and binds()
 */
static void expect_str(mg_str_t s, const char *expected)
{
    cr_expect_eq(s.len, strlen(expected), "'%.*s' is not '%s'", (int)s.len, s.base, expected);
    cr_expect(s.len == 0 || memcmp(s.base, expected, s.len) == 0, "'%.*s' is not '%s'", (int)s.len, s.base, expected);
}

Test(keys, host)
{
    mg_matcher_t *m = compile_ok("{host: API.example.com}");
    mg_matcher_keys_t k = {.complete = 1};
    mg_matcher_get_keys(m, &k);
    expect_str(k.host, "api.example.com");
    cr_expect_eq(k.complete, 1);
    cr_expect_eq(k.has_path, 0);
    mg_matcher_free(m);

    k = keys_of("{host: '*.example.com'}");
    expect_str(k.host, "");
    cr_expect_eq(k.complete, 0);
    k = keys_of("{host: {regex: '^a'}}");
    expect_str(k.host, "");
    cr_expect_eq(k.complete, 0);
}

Test(keys, host_and_path)
{
    mg_matcher_t *m = compile_ok("{all: [{host: a.example.com}, {path: {prefix: /api}}]}");
    mg_matcher_keys_t k = {.complete = 1};
    mg_matcher_get_keys(m, &k);
    expect_str(k.host, "a.example.com");
    expect_str(k.path, "/api");
    cr_expect_eq(k.path_prefix, 1);
    cr_expect_eq(k.has_path, 1);
    cr_expect_eq(k.complete, 1);
    mg_matcher_free(m);

    m = compile_ok("{host: a.example.com, path: /x, header: {name: a, present: true}}");
    k = (mg_matcher_keys_t){.complete = 1};
    mg_matcher_get_keys(m, &k);
    expect_str(k.host, "a.example.com");
    expect_str(k.path, "/x");
    cr_expect_eq(k.complete, 0, "the header is tested too");
    mg_matcher_free(m);
}

Test(keys, other_kinds_are_incomplete)
{
    static const char *const conds[] = {
        "{path: {regex: '^/a'}}",
        "{header: {name: a, present: true}}",
        "{query: {name: a, present: true}}",
        "{websocket: true}",
        "{tenant: a}",
        "{all: [{host: a.com}, {tenant: a}]}",
    };
    for (size_t i = 0; i != sizeof(conds) / sizeof(conds[0]); ++i)
        cr_expect_eq(keys_of(conds[i]).complete, 0, "%s", conds[i]);
    mg_matcher_keys_t k = keys_of("{path: {regex: '^/a'}}");
    cr_expect_eq(k.has_path, 0);
    mg_matcher_t *m = compile_ok("{all: [{host: a.com}, {tenant: a}]}");
    k = (mg_matcher_keys_t){.complete = 1};
    mg_matcher_get_keys(m, &k);
    expect_str(k.host, "a.com");
    mg_matcher_free(m);
}

Test(binds, named_groups_of_each_kind)
{
    cr_expect(binds("{host: {regex: '^(?<sub>[a-z]+)\\.'}}", "sub"));
    cr_expect_not(binds("{host: {regex: '^(?<sub>[a-z]+)\\.'}}", "su"));
    cr_expect_not(binds("{host: '*.a.com'}", "sub"));
    cr_expect(binds("{path: {regex: '^/(?<id>[0-9]+)'}}", "id"));
    cr_expect_not(binds("{path: {regex: '^/(?<id>[0-9]+)'}}", "remainder"));
    cr_expect(binds("{path: {prefix: /a}}", "remainder"));
    cr_expect(binds("{header: {name: a, regex: '(?<tok>.+)'}}", "tok"));
    cr_expect_not(binds("{header: {name: a, equals: tok}}", "tok"));
    cr_expect(binds("{query: {name: a, regex: '(?<q>.+)'}}", "q"));
    cr_expect_not(binds("{query: {name: q, present: true}}", "q"));
    cr_expect_not(binds("{tenant: t}", "t"));
    cr_expect_not(binds("{websocket: true}", "websocket"));
    const char *all = "{host: {regex: '(?<h>.)'}, path: {regex: '(?<p>.)'}, any: [{query: {name: a, regex: '(?<q>.)'}}]}";
    cr_expect(binds(all, "h"));
    cr_expect(binds(all, "p"));
    cr_expect(binds(all, "q"));
    cr_expect_not(binds(all, "x"));
}

/* ---------------------------------------------------------------------------------------
 * describe()
 */
Test(describe_kinds, each_kind)
{
    expect_describe("{host: API.example.com}", "{\"host\":\"api.example.com\"}");
    expect_describe("{host: {exact: a.example.com}}", "{\"host\":\"a.example.com\"}");
    expect_describe("{host: '*.Example.com'}", "{\"host\":\"*.example.com\"}");
    expect_describe("{host: {regex: '^(?<s>.+)\\.EXAMPLE$'}}", "{\"host\":{\"regex\":\"^(?<s>.+)\\\\.EXAMPLE$\"}}");
    expect_describe("{path: {regex: '^/a/\"b\"$'}}", "{\"path\":{\"regex\":\"^/a/\\\"b\\\"$\"}}");
    expect_describe("{header: {name: X-A, equals: v}}", "{\"header\":{\"name\":\"x-a\",\"equals\":\"v\"}}");
    expect_describe("{header: {name: x-a, prefix: ''}}", "{\"header\":{\"name\":\"x-a\",\"prefix\":\"\"}}");
    expect_describe("{header: {name: x-a, contains: c}}", "{\"header\":{\"name\":\"x-a\",\"contains\":\"c\"}}");
    expect_describe("{header: {name: x-a, regex: '^v'}}", "{\"header\":{\"name\":\"x-a\",\"regex\":\"^v\"}}");
    expect_describe("{header: {name: x-a, present: false}}", "{\"header\":{\"name\":\"x-a\",\"present\":false}}");
    expect_describe("{query: {name: 'a b', equals: 'c&d'}}", "{\"query\":{\"name\":\"a b\",\"equals\":\"c&d\"}}");
    expect_describe("{query: {name: Q, present: true}}", "{\"query\":{\"name\":\"Q\",\"present\":true}}");
    expect_describe("{websocket: true}", "{\"websocket\":true}");
    expect_describe("{websocket: off}", "{\"websocket\":false}");
    expect_describe("{tenant: acme}", "{\"tenant\":\"acme\"}");
    expect_describe("{tenant: [a, b]}", "{\"tenant\":[\"a\",\"b\"]}");
    expect_describe("{host: a.com, tenant: t}", "{\"all\":[{\"host\":\"a.com\"},{\"tenant\":\"t\"}]}");
}

Test(describe_kinds, truncates_like_snprintf)
{
    expect_describe_truncates("{header: {name: x-a, regex: '^(?<v>.)'}}", "{\"header\":{\"name\":\"x-a\",\"regex\":\"^(?<v>.)\"}}");
}
