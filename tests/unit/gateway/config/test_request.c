/*
 * gateway/config/request.c: a request's head made ready for the route tree, the step the request
 * handler and the route tester share. The host (case, port), the path (normalized, refused when
 * it escapes the root or holds an escaped slash, unless limits.escaped_slashes keeps them), Host
 * required for HTTP/1.1, and the tenant rules, each refusal with its status and code.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/config/config.h"

static mg_errors_t errs;
static mg_config_t *conf;
static void *blocks[64];
static size_t num_blocks;

static void *test_alloc(void *arg, size_t size)
{
    (void)arg;
    cr_assert_lt(num_blocks, 64);
    return blocks[num_blocks++] = malloc(size);
}

static void teardown(void)
{
    mg_config_free(conf);
    conf = NULL;
    mg_errors_clear(&errs);
    while (num_blocks > 0)
        free(blocks[--num_blocks]);
}

TestSuite(request, .fini = teardown);

#define BASE "listen:\n  - address: \"127.0.0.1:8080\"\nroutes:\n  - name: r\n    respond: {status: 200}\n"

static void load(const char *text)
{
    conf = mg_config_load_string("gw.yaml", text, &errs);
    cr_assert_not_null(conf, "refused: %s", errs.size ? errs.entries[0].text : "(no error)");
}

static int prepare(const char *authority, const char *path, mg_ctx_t *ctx, mg_refusal_t *why)
{
    static const mg_header_t headers[] = {{MG_STR("x-tenant-id"), MG_STR("acme")}};
    mg_alloc_t alloc = {test_alloc, NULL};
    mg_request_head_t head = {.method = MG_STR("GET"),
                              .scheme = MG_STR("http"),
                              .authority = mg_str(authority, strlen(authority)),
                              .path = mg_str(path, strlen(path)),
                              .headers = headers,
                              .num_headers = strstr(path, "tenant") != NULL,
                              .host_required = 1};
    return mg_request_prepare(conf, &head, &alloc, ctx, why);
}

Test(request, the_host_is_lower_case_without_its_port)
{
    static const char *const cases[][2] = {{"Api.Example.COM:8443", "api.example.com"},
                                           {"[::1]:80", "[::1]"},
                                           {"[::1]", "[::1]"},
                                           {"host", "host"},
                                           {"a:b", "a:b"},
                                           {"x.test:", "x.test"}};
    load(BASE);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        mg_ctx_t ctx;
        mg_refusal_t why;
        cr_assert_eq(prepare(cases[i][0], "/", &ctx, &why), 0, "%s", cases[i][0]);
        cr_expect_eq(ctx.host.len, strlen(cases[i][1]), "%s", cases[i][0]);
        cr_expect_eq(memcmp(ctx.host.base, cases[i][1], ctx.host.len), 0, "%s", cases[i][0]);
    }
}

Test(request, the_path_is_normalized_or_refused)
{
    mg_ctx_t ctx;
    mg_refusal_t why;
    load(BASE);
    cr_assert_eq(prepare("x", "/a/./b//c/../%7Ed", &ctx, &why), 0);
    cr_expect_eq(ctx.path.len, strlen("/a/b/~d"));
    cr_expect_eq(memcmp(ctx.path.base, "/a/b/~d", ctx.path.len), 0);

    cr_assert_eq(prepare("x", "/a/../../etc", &ctx, &why), -1);
    cr_expect_eq(why.status, 400);
    cr_expect_str_eq(why.code, "bad-request");
    cr_expect_str_eq(why.reason, "invalid request path");
    cr_expect_eq(ctx.path.len, 0, "the path stays unknown");

    cr_assert_eq(prepare("x", "/a%2Fb", &ctx, &why), -1);
    cr_expect_eq(why.status, 400);
    cr_expect(strstr(why.reason, "escaped_slashes") != NULL, "%s", why.reason);
}

Test(request, escaped_slashes_can_be_kept)
{
    mg_ctx_t ctx;
    mg_refusal_t why;
    load("limits: {escaped_slashes: keep}\n" BASE);
    cr_expect_eq(prepare("x", "/a%2Fb", &ctx, &why), 0);
}

Test(request, http11_needs_a_host)
{
    mg_ctx_t ctx;
    mg_refusal_t why;
    load(BASE);
    cr_assert_eq(prepare("", "/", &ctx, &why), -1);
    cr_expect_eq(why.status, 400);
    cr_expect_str_eq(why.reason, "HTTP/1.1 request without Host");
}

Test(request, tenants_are_identified_or_refused)
{
    mg_ctx_t ctx;
    mg_refusal_t why;
    load("tenants:\n  identify: [{header: X-Tenant-Id}]\n  unidentified: reject\n" BASE);
    cr_assert_eq(prepare("x", "/tenant", &ctx, &why), 0);
    cr_expect_eq(ctx.tenant.len, 4);
    cr_expect_eq(memcmp(ctx.tenant.base, "acme", 4), 0);

    cr_assert_eq(prepare("x", "/other", &ctx, &why), -1);
    cr_expect_eq(why.status, 401);
    cr_expect_str_eq(why.code, "unidentified");
    cr_expect_eq(why.undecided, 0);
}
