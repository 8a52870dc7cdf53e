/*
 * Matcher combinators, variable undo, compile errors and describe(); the path and method
 * kinds. The other kinds are in test_kinds.c. Conditions are written in flow style (flow.h).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "matchers/matchers.h"
#include "flow.h"

/* ---------------------------------------------------------------------------------------
 * Helpers
 */
TestSuite(context, .fini = suite_fini);
TestSuite(matchers, .fini = suite_fini);
TestSuite(compile_errors, .fini = suite_fini);
TestSuite(describe, .fini = suite_fini);

static mg_ctx_t request(const char *method, const char *path)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = mg_str(method, strlen(method));
    ctx.path = mg_str(path, strlen(path));
    return ctx;
}

/* Matches `text` against method + path; on a match, *remainder gets ${remainder} (or "-"). */
static int matches(const char *text, const char *method, const char *path, const char **remainder)
{
    static char rem[128];
    mg_matcher_t *m = compile_ok(text);
    mg_ctx_t ctx = request(method, path);
    int ret = mg_matcher_match(m, &ctx);
    const mg_str_t *v = mg_ctx_get_var(&ctx, MG_STR("remainder"));
    snprintf(rem, sizeof(rem), "%.*s", v != NULL ? (int)v->len : 1, v != NULL ? v->base : "-");
    if (remainder != NULL)
        *remainder = rem;
    if (ret != 1)
        cr_expect_eq(ctx.num_vars, 0, "%s: variables left after a failed match", text);
    mg_matcher_free(m);
    return ret;
}

/* ---------------------------------------------------------------------------------------
 * The routing context
 */
Test(context, variables_shadow_and_fill_up)
{
    mg_ctx_t ctx = request("GET", "/");
    cr_expect_null(mg_ctx_get_var(&ctx, MG_STR("x")));
    cr_assert_eq(mg_ctx_set_var(&ctx, MG_STR("x"), MG_STR("1")), 0);
    cr_assert_eq(mg_ctx_set_var(&ctx, MG_STR("y"), MG_STR("2")), 0);
    cr_assert_eq(mg_ctx_set_var(&ctx, MG_STR("x"), MG_STR("3")), 0);
    cr_expect_eq(mg_ctx_get_var(&ctx, MG_STR("x"))->base[0], '3');
    cr_expect_eq(mg_ctx_get_var(&ctx, MG_STR("y"))->base[0], '2');
    ctx.num_vars = 2; /* undoing the shadowing binding reveals the first one */
    cr_expect_eq(mg_ctx_get_var(&ctx, MG_STR("x"))->base[0], '1');
    while (ctx.num_vars < MG_CTX_MAX_VARS)
        cr_assert_eq(mg_ctx_set_var(&ctx, MG_STR("z"), MG_STR("")), 0);
    cr_expect_eq(mg_ctx_set_var(&ctx, MG_STR("w"), MG_STR("")), -1);
    cr_expect_eq(ctx.num_vars, MG_CTX_MAX_VARS);
    cr_expect_null(mg_ctx_get_var(&ctx, MG_STR("w")));
    cr_expect_null(mg_ctx_get_var(&ctx, MG_STR("")));
}

Test(context, headers_first_one_wins)
{
    mg_header_t headers[] = {
        {MG_STR("x-a"), MG_STR("1")},
        {MG_STR("x-b"), MG_STR("2")},
        {MG_STR("x-a"), MG_STR("3")},
    };
    mg_ctx_t ctx = request("GET", "/");
    ctx.headers = headers;
    ctx.num_headers = 3;
    cr_expect_eq(mg_ctx_get_header(&ctx, MG_STR("x-a"))->base[0], '1');
    cr_expect_eq(mg_ctx_get_header(&ctx, MG_STR("X-B"))->base[0], '2');
    cr_expect_null(mg_ctx_get_header(&ctx, MG_STR("x-c")));
    cr_expect_null(mg_ctx_get_header(&ctx, MG_STR("x-")));
}

/* ---------------------------------------------------------------------------------------
 * Kinds
 */
Test(matchers, kind_table)
{
    static const char *const expected[] = {"host", "path", "method", "header", "query", "websocket", "tenant", "claim", "all", "any", "not"};
    size_t n = 0;
    for (; mg_matcher_kind_names[n] != NULL; ++n) {
        cr_assert_lt(n, 11);
        cr_expect_str_eq(mg_matcher_kind_names[n], expected[n]);
    }
    cr_expect_eq(n, 11);
}

Test(matchers, path_exact)
{
    cr_expect(matches("{path: /x}", "GET", "/x", NULL));
    cr_expect(matches("{path: {exact: /x}}", "GET", "/x", NULL));
    cr_expect(matches("{path: /}", "GET", "/", NULL));
    cr_expect_not(matches("{path: /x}", "GET", "/x/", NULL));
    cr_expect_not(matches("{path: /x}", "GET", "/xy", NULL));
    cr_expect_not(matches("{path: /x}", "GET", "/", NULL));
    cr_expect_not(matches("{path: /x/}", "GET", "/x", NULL));
    const char *rem;
    cr_expect(matches("{path: /x}", "GET", "/x", &rem));
    cr_expect_str_eq(rem, "-", "an exact path binds nothing");
}

Test(matchers, path_prefix_on_segment_boundaries)
{
    const char *rem;
    cr_expect(matches("{path: {prefix: /api}}", "GET", "/api", &rem));
    cr_expect_str_eq(rem, "");
    cr_expect(matches("{path: {prefix: /api}}", "GET", "/api/", &rem));
    cr_expect_str_eq(rem, "/");
    cr_expect(matches("{path: {prefix: /api}}", "GET", "/api/x/y", &rem));
    cr_expect_str_eq(rem, "/x/y");
    cr_expect_not(matches("{path: {prefix: /api}}", "GET", "/apix", NULL));
    cr_expect_not(matches("{path: {prefix: /api}}", "GET", "/ap", NULL));
    cr_expect_not(matches("{path: {prefix: /api}}", "GET", "/", NULL));
    cr_expect_not(matches("{path: {prefix: /api/v1}}", "GET", "/api/v2/x", NULL));
}

Test(matchers, path_prefix_trailing_slash_and_root)
{
    const char *rem;
    cr_expect(matches("{path: {prefix: /api/}}", "GET", "/api", &rem));
    cr_expect_str_eq(rem, "");
    cr_expect(matches("{path: {prefix: /api/}}", "GET", "/api/x", &rem));
    cr_expect_str_eq(rem, "/x");
    cr_expect_not(matches("{path: {prefix: /api/}}", "GET", "/apix", NULL));
    cr_expect(matches("{path: {prefix: /}}", "GET", "/", &rem));
    cr_expect_str_eq(rem, "/");
    cr_expect(matches("{path: {prefix: /}}", "GET", "/anything/at/all", &rem));
    cr_expect_str_eq(rem, "/anything/at/all");
}

/* ";params" of the request's segments are not part of what exact paths and prefixes compare
 * (Tomcat and Spring drop them); `remainder` is a slice of the path as it is, params kept. */
Test(matchers, path_params_are_ignored)
{
    static const struct {
        const char *cond, *path, *remainder; /* remainder NULL: no match */
    } cases[] = {
        {"{path: /admin}", "/admin;x", "-"},
        {"{path: /admin}", "/admin;", "-"},
        {"{path: /a/admin}", "/a;x/admin;y", "-"},
        {"{path: /a/admin}", "/a/;x/admin", "-"},
        {"{path: /a/admin}", "/;x/a/;y/;z/admin", "-"},
        {"{path: /admin}", "/admin;x/", NULL},
        {"{path: /admin}", "/adm;x/in", NULL},
        {"{path: /admin}", "/admin/;x", NULL}, /* a trailing '/' */
        {"{path: /admin/}", "/admin/;x", "-"},
        {"{path: /admin}", "/admin%3Bx", NULL},
        {"{path: /}", "/;x", "-"},
        {"{path: {prefix: /admin}}", "/admin;x", ""},
        {"{path: {prefix: /admin}}", "/admin;x/y;z", "/y;z"},
        {"{path: {prefix: /admin}}", "/admin/;x/y", "/;x/y"},
        {"{path: {prefix: /a/admin}}", "/a;x/admin;y/z", "/z"},
        {"{path: {prefix: /admin}}", "/adminx;y", NULL},
        {"{path: {prefix: /admin}}", "/admi;n", NULL},
        {"{path: {prefix: /}}", "/;x/y", "/;x/y"},
    };
    for (size_t i = 0; i != sizeof(cases) / sizeof(cases[0]); ++i) {
        const char *rem;
        int m = matches(cases[i].cond, "GET", cases[i].path, &rem);
        cr_expect_eq(m, cases[i].remainder != NULL, "%s on %s", cases[i].cond, cases[i].path);
        if (m && cases[i].remainder != NULL)
            cr_expect_str_eq(rem, cases[i].remainder, "%s on %s", cases[i].cond, cases[i].path);
    }
    /* a regex sees the path as it is, params included */
    cr_expect_not(matches("{path: {regex: '^/admin$'}}", "GET", "/admin;x", NULL));
    cr_expect(matches("{path: {regex: '^/admin(;[^/]*)?$'}}", "GET", "/admin;x", NULL));
}

Test(matchers, path_skip_params_walks_the_key)
{
    static const struct {
        const char *path, *key;
    } cases[] = {{"/a;x/b", "/a/b"},   {"/a/;x/b", "/a/b"}, {"/a/;x", "/a/"}, {"/;x", "/"},         {"/a;", "/a"},
                 {"/a;x;y/b", "/a/b"}, {"/;a/;b/c", "/c"},  {"/a/b", "/a/b"}, {"/a%3Bx", "/a%3Bx"}, {"/;a/;b/", "/"}};
    for (size_t i = 0; i != sizeof(cases) / sizeof(cases[0]); ++i) {
        mg_str_t path = mg_str(cases[i].path, strlen(cases[i].path));
        char key[64];
        size_t n = 0;
        for (size_t j = mg_path_skip_params(path, 0); j != path.len; j = mg_path_skip_params(path, j + 1))
            key[n++] = path.base[j];
        key[n] = '\0';
        cr_expect_str_eq(key, cases[i].key, "%s", cases[i].path);
    }
}

Test(matchers, path_in_config_is_normalized)
{
    cr_expect(matches("{path: '/a/%7euser/./x/../y'}", "GET", "/a/~user/y", NULL));
    cr_expect(matches("{path: {prefix: '//a%2fb/'}}", "GET", "/a%2Fb/c", NULL));
}

Test(matchers, path_prefix_with_full_variable_table_fails_closed)
{
    mg_matcher_t *m = compile_ok("{path: {prefix: /a}}");
    mg_ctx_t ctx = request("GET", "/a/b");
    ctx.num_vars = MG_CTX_MAX_VARS;
    cr_expect_not(mg_matcher_match(m, &ctx));
    cr_expect_eq(ctx.num_vars, MG_CTX_MAX_VARS);
    mg_matcher_free(m);
}

Test(matchers, method)
{
    cr_expect(matches("{method: GET}", "GET", "/", NULL));
    cr_expect_not(matches("{method: GET}", "get", "/", NULL));
    cr_expect_not(matches("{method: GET}", "GETS", "/", NULL));
    cr_expect_not(matches("{method: GET}", "GE", "/", NULL));
    cr_expect_not(matches("{method: GET}", "", "/", NULL));
    cr_expect(matches("{method: [POST, PUT]}", "PUT", "/", NULL));
    cr_expect(matches("{method: [POST, PUT]}", "POST", "/", NULL));
    cr_expect_not(matches("{method: [POST, PUT]}", "DELETE", "/", NULL));
    cr_expect(matches("{method: [M-SEARCH]}", "M-SEARCH", "/", NULL));
}

Test(matchers, all_any_not)
{
    const char *all = "{all: [{path: {prefix: /a}}, {method: GET}]}";
    cr_expect(matches(all, "GET", "/a/b", NULL));
    cr_expect_not(matches(all, "POST", "/a/b", NULL));
    cr_expect_not(matches(all, "GET", "/b", NULL));
    const char *any = "{any: [{path: /a}, {method: POST}]}";
    cr_expect(matches(any, "GET", "/a", NULL));
    cr_expect(matches(any, "POST", "/b", NULL));
    cr_expect_not(matches(any, "GET", "/b", NULL));
    cr_expect(matches("{not: {method: GET}}", "POST", "/", NULL));
    cr_expect_not(matches("{not: {method: GET}}", "GET", "/", NULL));
}

Test(matchers, several_keys_mean_all)
{
    const char *text = "{path: {prefix: /a}, method: [GET, HEAD]}";
    const char *rem;
    cr_expect(matches(text, "HEAD", "/a/z", &rem));
    cr_expect_str_eq(rem, "/z");
    cr_expect_not(matches(text, "POST", "/a/z", NULL));
    cr_expect_not(matches(text, "GET", "/b", NULL));
    cr_expect(matches("{all: {path: /a, method: GET}}", "GET", "/a", NULL));
}

Test(matchers, failed_all_undoes_its_variables)
{
    mg_matcher_t *m = compile_ok("{all: [{path: {prefix: /a}}, {path: {prefix: /a/b}}, {method: POST}]}");
    mg_ctx_t ctx = request("GET", "/a/b/c");
    mg_ctx_set_var(&ctx, MG_STR("keep"), MG_STR("me"));
    cr_expect_not(mg_matcher_match(m, &ctx));
    cr_expect_eq(ctx.num_vars, 1);
    cr_expect_null(mg_ctx_get_var(&ctx, MG_STR("remainder")));
    mg_matcher_free(m);
}

Test(matchers, any_keeps_only_the_winning_alternative)
{
    /* The first alternative binds remainder "/x/y" and then fails on the method; the second
     * one binds "/y". Only the second binding may survive. */
    mg_matcher_t *m = compile_ok("{any: [{all: [{path: {prefix: /x}}, {method: POST}]}, {path: {prefix: /x/y}}]}");
    mg_ctx_t ctx = request("GET", "/x/y/z");
    cr_assert(mg_matcher_match(m, &ctx));
    cr_expect_eq(ctx.num_vars, 1);
    const mg_str_t *rem = mg_ctx_get_var(&ctx, MG_STR("remainder"));
    cr_assert_not_null(rem);
    cr_expect_eq(rem->len, 2);
    cr_expect(memcmp(rem->base, "/z", 2) == 0);
    mg_matcher_free(m);
}

Test(matchers, not_never_binds)
{
    mg_matcher_t *m = compile_ok("{not: {not: {path: {prefix: /a}}}}");
    mg_ctx_t ctx = request("GET", "/a/b");
    cr_expect(mg_matcher_match(m, &ctx));
    cr_expect_eq(ctx.num_vars, 0);
    ctx = request("GET", "/b");
    cr_expect_not(mg_matcher_match(m, &ctx));
    cr_expect_eq(ctx.num_vars, 0);
    mg_matcher_free(m);
}

Test(matchers, positions_and_file)
{
    mg_matcher_t *m = compile_ok("{all: [\n  {path: /a},\n  {method: GET}]}");
    cr_expect_str_eq(m->file, "test.yaml");
    cr_expect_eq(m->line, 1);
    cr_expect_eq(m->column, 2);
    const mg_matcher_list_t *list = m->data;
    cr_assert_eq(list->size, 2);
    cr_expect_eq(list->items[1]->line, 3);
    cr_expect_eq(list->items[1]->column, 4);
    mg_matcher_free(m);

    static const char keep[] = "kept.yaml";
    m = mg_matcher_compile_in(flow_parse("{not: {path: /a}}"), keep, &errs);
    cr_assert_not_null(m);
    cr_expect_eq(m->file, keep);
    cr_expect_eq(((const mg_matcher_t *)m->data)->file, keep, "children record the same file");
    mg_matcher_free(m);
}

/* ---------------------------------------------------------------------------------------
 * Compile errors
 */
Test(compile_errors, unknown_kind)
{
    EXPECT_ERRORS("{pth: /x}", "test.yaml:1:2: unknown condition 'pth' (did you mean 'path'?)");
    EXPECT_ERRORS("{methods: GET}", "test.yaml:1:2: unknown condition 'methods' (did you mean 'method'?)");
    EXPECT_ERRORS("{zzzzzzzz: 1}", "test.yaml:1:2: unknown condition 'zzzzzzzz' (expected one of: host, path, method, header, "
                                   "query, websocket, tenant, claim, all, any, not)");
    EXPECT_ERRORS("{hots: api.example.com}", "test.yaml:1:2: unknown condition 'hots' (did you mean 'host'?)");
    EXPECT_ERRORS("{all: [{headers: {name: X, present: true}}]}",
                  "test.yaml:1:9: unknown condition 'headers' (did you mean 'header'?)");
    EXPECT_ERRORS("{tenants: a}", "test.yaml:1:2: unknown condition 'tenants' (did you mean 'tenant'?)");
}

Test(compile_errors, condition_shape)
{
    EXPECT_ERRORS("{}", "test.yaml:1:1: empty condition (expected a key naming its kind, such as 'path')");
    EXPECT_ERRORS("[{path: /x}]", "test.yaml:1:1: expected a mapping, got a sequence");
    EXPECT_ERRORS("/x", "test.yaml:1:1: expected a mapping, got a scalar");
}

Test(compile_errors, path)
{
    EXPECT_ERRORS("{path: x}", "test.yaml:1:8: a path must start with '/'");
    EXPECT_ERRORS("{path: '/a?b'}", "test.yaml:1:8: a path cannot contain '?', '#' or NUL (the query is matched with 'query')");
    EXPECT_ERRORS("{path: '/a;b'}", "test.yaml:1:8: a path cannot contain ';': paths are compared without their ';' parameters "
                                    "(match parameters with a regex)");
    EXPECT_ERRORS("{path: {prefix: '/a;b/c'}}", "test.yaml:1:17: a path cannot contain ';': paths are compared without their ';' "
                                                "parameters (match parameters with a regex)");
    EXPECT_ERRORS("{path: '/a/../..'}", "test.yaml:1:8: invalid path '/a/../..' (a malformed %-escape, or '..' above the root)");
    EXPECT_ERRORS("{path: {prefix: '/%zz'}}", "test.yaml:1:17: invalid path '/%zz' (a malformed %-escape, or '..' above the root)");
    EXPECT_ERRORS("{path: {prefx: /a}}", "test.yaml:1:9: unknown key 'prefx' (did you mean 'prefix'?)");
    EXPECT_ERRORS("{path: {prefix: /a, exact: /b}}", "test.yaml:1:8: 'path' takes exactly one of 'exact', 'prefix' or 'regex'");
    EXPECT_ERRORS("{path: {}}", "test.yaml:1:8: 'path' takes exactly one of 'exact', 'prefix' or 'regex'");
    EXPECT_ERRORS("{path: [/a]}", "test.yaml:1:8: expected a path or a mapping with 'exact', 'prefix' or 'regex', got a sequence");
    EXPECT_ERRORS("{path: ~}", "test.yaml:1:8: expected a string, got null");
}

Test(compile_errors, method)
{
    EXPECT_ERRORS("{method: get}",
                  "test.yaml:1:10: method 'get' must be upper case, methods are case-sensitive (did you mean 'GET'?)");
    EXPECT_ERRORS("{method: 'G T'}", "test.yaml:1:10: invalid method 'G T' (a method is a token such as GET or PURGE)");
    EXPECT_ERRORS("{method: \"GET\\r\"}", "test.yaml:1:10: invalid method 'GET\r' (a method is a token such as GET or PURGE)");
    EXPECT_ERRORS("{method: ''}", "test.yaml:1:10: invalid method '' (a method is a token such as GET or PURGE)");
    EXPECT_ERRORS("{method: []}", "test.yaml:1:10: 'method' needs at least one method");
    EXPECT_ERRORS("{method: [GET, {a: b}]}", "test.yaml:1:16: expected a string, got a mapping");
}

Test(compile_errors, combinators)
{
    EXPECT_ERRORS("{all: []}", "test.yaml:1:7: 'all' needs at least one condition");
    EXPECT_ERRORS("{any: []}", "test.yaml:1:7: 'any' needs at least one condition");
    EXPECT_ERRORS("{any: {path: /x}}", "test.yaml:1:7: expected a sequence, got a mapping");
    EXPECT_ERRORS("{all: /x}", "test.yaml:1:7: expected a sequence, got a scalar");
    EXPECT_ERRORS("{not: [{path: /x}]}", "test.yaml:1:7: expected a mapping, got a sequence");
    EXPECT_ERRORS("{not: {}}", "test.yaml:1:7: empty condition (expected a key naming its kind, such as 'path')");
}

Test(compile_errors, every_error_in_one_run)
{
    EXPECT_ERRORS("{all: [{pth: /x},\n       {method: get},\n       {any: [{path: y}]}]}",
                  "test.yaml:1:9: unknown condition 'pth' (did you mean 'path'?)",
                  "test.yaml:2:17: method 'get' must be upper case, methods are case-sensitive (did you mean 'GET'?)",
                  "test.yaml:3:22: a path must start with '/'");
    EXPECT_ERRORS("{pth: /x, method: get}", "test.yaml:1:2: unknown condition 'pth' (did you mean 'path'?)",
                  "test.yaml:1:19: method 'get' must be upper case, methods are case-sensitive (did you mean 'GET'?)");
}

/* ---------------------------------------------------------------------------------------
 * describe()
 */
Test(describe, each_kind)
{
    expect_describe("{path: /x}", "{\"path\":\"/x\"}");
    expect_describe("{path: {exact: /x}}", "{\"path\":\"/x\"}");
    expect_describe("{path: {prefix: /api}}", "{\"path\":{\"prefix\":\"/api\"}}");
    expect_describe("{path: {prefix: /api/}}", "{\"path\":{\"prefix\":\"/api\"}}");
    expect_describe("{path: {prefix: /}}", "{\"path\":{\"prefix\":\"/\"}}");
    expect_describe("{method: GET}", "{\"method\":\"GET\"}");
    expect_describe("{method: [POST, PUT]}", "{\"method\":[\"POST\",\"PUT\"]}");
    expect_describe("{not: {method: GET}}", "{\"not\":{\"method\":\"GET\"}}");
    expect_describe("{any: [{path: /a}, {not: {path: /b}}]}", "{\"any\":[{\"path\":\"/a\"},{\"not\":{\"path\":\"/b\"}}]}");
    expect_describe("{path: /a, method: GET}", "{\"all\":[{\"path\":\"/a\"},{\"method\":\"GET\"}]}");
}

Test(describe, json_escapes)
{
    expect_describe("{path: '/a\"b\\c'}", "{\"path\":\"/a\\\"b\\\\c\"}");
    expect_describe("{path: \"/a\\nb\"}", "{\"path\":\"/a\\u000ab\"}");
}

Test(describe, truncates_like_snprintf)
{
    expect_describe_truncates("{all: [{path: {prefix: /api}}, {method: [GET, PUT]}]}",
                              "{\"all\":[{\"path\":{\"prefix\":\"/api\"}},{\"method\":[\"GET\",\"PUT\"]}]}");
}

/* ---------------------------------------------------------------------------------------
 * Undecidable conditions: three-valued logic, so that a regex that gave up decides only what
 * nothing else decides, and never turns into a match
 */
TestSuite(undecided, .fini = suite_fini);

/* The path regex P cannot decide on this path (its match limit); `method` is GET. */
#define P "{path: {regex: '^/(a+)+$'}}"
#define RUNAWAY_PATH "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"

/* The result on GET RUNAWAY_PATH; `*reason` is what ctx.error says after it (or "-"). */
static int undecided(const char *text, const char **reason)
{
    mg_matcher_t *m = compile_ok(text);
    mg_ctx_t ctx = request("GET", RUNAWAY_PATH);
    int ret = mg_matcher_match(m, &ctx);
    *reason = ctx.error.reason != NULL ? ctx.error.reason : "-";
    if (ret != 1)
        cr_expect_eq(ctx.num_vars, 0, "%s: variables left", text);
    mg_matcher_free(m);
    return ret;
}

Test(undecided, combinators_follow_three_valued_logic)
{
    static const struct {
        const char *cond;
        int expected;
    } table[] = {
        {P, MG_MATCH_ERROR},
        {"{not: " P "}", MG_MATCH_ERROR}, /* never a match */
        {"{not: {not: " P "}}", MG_MATCH_ERROR},
        {"{any: [" P ", {method: GET}]}", 1}, /* decided by the other part */
        {"{any: [{method: GET}, " P "]}", 1},
        {"{any: [" P ", {method: POST}]}", MG_MATCH_ERROR},
        {"{any: [{method: POST}, " P "]}", MG_MATCH_ERROR},
        {"{all: [" P ", {method: POST}]}", 0}, /* decided by the other part */
        {"{all: [{method: POST}, " P "]}", 0},
        {"{all: [" P ", {method: GET}]}", MG_MATCH_ERROR},
        {"{all: [{path: {prefix: /}}, " P "]}", MG_MATCH_ERROR}, /* and the prefix's remainder undone */
        {"{method: GET, path: {regex: '^/(a+)+$'}}", MG_MATCH_ERROR},
        {"{not: {any: [" P ", {method: GET}]}}", 0},
        {"{not: {all: [" P ", {method: POST}]}}", 1},
        {"{not: {all: [" P ", {method: GET}]}}", MG_MATCH_ERROR},
        {"{all: [{any: [" P ", {method: GET}]}, {method: POST}]}", 0},
        {"{any: [{all: [" P ", {method: POST}]}, {method: POST}]}", 0},
        {"{any: [{all: [" P ", {method: GET}]}, {not: " P "}]}", MG_MATCH_ERROR},
    };
    for (size_t i = 0; i != sizeof(table) / sizeof(table[0]); ++i) {
        const char *reason;
        int got = undecided(table[i].cond, &reason);
        cr_expect_eq(got, table[i].expected, "%s: %d, expected %d", table[i].cond, got, table[i].expected);
        /* the failure is described exactly when the result is undecided */
        cr_expect_str_eq(reason, got == MG_MATCH_ERROR ? "hit the match limit" : "-", "%s", table[i].cond);
    }
}

Test(undecided, a_regex_that_decides_is_unaffected)
{
    const char *reason;
    cr_expect_eq(undecided("{path: {regex: '^/a+b$'}}", &reason), 1);
    cr_expect_eq(undecided("{not: {path: {regex: '^/(a+)+c$'}}}", &reason), 1, "a quick non-match is a non-match");
    cr_expect_str_eq(reason, "-");
}

/* The tchar table against RFC 9110 5.6.2's grammar, byte by byte. */
Test(strings, tchar_is_rfc9110_tchar)
{
    for (int c = 0; c < 256; c++) {
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int digit = c >= '0' && c <= '9';
        int special = c != 0 && c < 128 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
        cr_assert_eq(mg_is_tchar((char)c), alpha || digit || special, "byte 0x%02x", c);
    }
    cr_assert(mg_is_token("x-tenant-id", 11));
    cr_assert(!mg_is_token("x tenant", 8));
    cr_assert(!mg_is_token("", 0));
}
