/*
 * The route index (routes/index.c) and the can-never-match warnings (routes/check.c).
 *
 * The index must change nothing but speed: every request is also pushed through
 * mg_routes_match_linear, and both must choose the same route and leave the same
 * variables. The differential test does that over random route lists and requests.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "routes/internal.h"

static mg_errors_t errs;
static int backend_api;

static void *resolve(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "api") == 0 ? &backend_api : NULL;
}

static void suite_fini(void)
{
    mg_errors_clear(&errs);
}

TestSuite(route_index, .fini = suite_fini);
TestSuite(route_index_random, .fini = suite_fini);
TestSuite(route_warnings, .fini = suite_fini);

static mg_routes_t *load(const char *yaml)
{
    mg_errors_clear(&errs);
    mg_doc_t *doc = mg_doc_load_string("routes.yaml", yaml, strlen(yaml), &errs);
    cr_assert_not_null(doc, "YAML syntax error in test: %s\n%s", errs.size ? errs.entries[0].text : "", yaml);
    mg_routes_t *routes = mg_routes_compile(mg_node_get(mg_doc_root(doc), "routes"), resolve, NULL, &errs);
    mg_doc_free(doc);
    if (routes == NULL)
        mg_errors_print(&errs, stderr);
    cr_assert_not_null(routes);
    return routes;
}

/* ---------------------------------------------------------------------------------------
 * Requests, matched both ways
 */
typedef struct request {
    const char *method, *host, *path;
} request_t;

/* Variables bound before matching (at least the tenant): MG_CTX_MAX_VARS leaves no room, so a
 * prefix (which binds `remainder`) cannot match, with the index or without. */
static size_t prefill_vars = 1;

static void ctx_init(mg_ctx_t *ctx, const request_t *req)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->method = mg_str(req->method, strlen(req->method));
    ctx->host = mg_str(req->host, strlen(req->host));
    ctx->path = mg_str(req->path, strlen(req->path));
    ctx->scheme = MG_STR("http");
    mg_ctx_set_var(ctx, MG_STR("tenant"), MG_STR("acme"));
    while (ctx->num_vars < prefill_vars)
        mg_ctx_set_var(ctx, MG_STR("filler"), MG_STR("x"));
}

static const char *route_name(const mg_route_t *r)
{
    return r != NULL ? r->name : "(none)";
}

/* Matches `req` with the index and linearly; both must agree on the route and the
 * variables. Returns the route. */
static const mg_route_t *match_both(const mg_routes_t *routes, const request_t *req)
{
    mg_ctx_t indexed, linear;
    ctx_init(&indexed, req);
    ctx_init(&linear, req);
    const mg_route_t *a = mg_routes_match(routes, &indexed), *b = mg_routes_match_linear(routes, &linear);
    cr_assert_eq(a, b, "%s %s %s: index chose %s, linear %s", req->method, req->host, req->path, route_name(a), route_name(b));
    cr_assert_eq(indexed.num_vars, linear.num_vars, "%s %s %s: %zu variables vs %zu", req->method, req->host, req->path,
                 indexed.num_vars, linear.num_vars);
    for (size_t i = 0; i != indexed.num_vars; ++i) {
        const mg_var_t *x = &indexed.vars[i], *y = &linear.vars[i];
        /* Names by content (the index binds `remainder` from its own literal: the same pointer only
         * when the linker merges the two), values by address (the same slice of the request). */
        cr_assert(x->name.len == y->name.len && memcmp(x->name.base, y->name.base, x->name.len) == 0 &&
                      x->value.base == y->value.base && x->value.len == y->value.len && x->flags == y->flags,
                  "%s %s %s: variable %zu differs", req->method, req->host, req->path, i);
    }
    return a;
}

static void expect_route(const mg_routes_t *routes, const char *method, const char *host, const char *path, const char *name)
{
    request_t req = {method, host, path};
    const mg_route_t *r = match_both(routes, &req);
    cr_expect_str_eq(route_name(r), name != NULL ? name : "(none)", "%s %s %s", method, host, path);
}

static const char *remainder_of(const mg_routes_t *routes, const char *path, char *buf, size_t size)
{
    request_t req = {"GET", "h.example", path};
    mg_ctx_t ctx;
    ctx_init(&ctx, &req);
    mg_routes_match(routes, &ctx);
    const mg_str_t *rem = mg_ctx_get_var(&ctx, MG_STR("remainder"));
    snprintf(buf, size, "%.*s", rem != NULL ? (int)rem->len : 6, rem != NULL ? rem->base : "(none)");
    return buf;
}

/* Eight exact-path routes after the interesting ones, so that every list is indexed. */
#define FILLERS                                                                                                                    \
    "  - {name: f1, match: {path: /f1}, forward: api}\n"                                                                           \
    "  - {name: f2, match: {path: /f2}, forward: api}\n"                                                                           \
    "  - {name: f3, match: {path: /f3}, forward: api}\n"                                                                           \
    "  - {name: f4, match: {path: /f4}, forward: api}\n"                                                                           \
    "  - {name: f5, match: {path: {prefix: /f5}}, forward: api}\n"                                                                 \
    "  - {name: f6, match: {path: {prefix: /f6/x}}, forward: api}\n"                                                               \
    "  - {name: f7, match: {method: DELETE}, forward: api}\n"                                                                      \
    "  - {name: f8, match: {path: /f8}, forward: api}\n"

/* The same as children of a top-level route. */
#define FILLERS_INSIDE                                                                                                             \
    "      - {name: c1, match: {path: /f1}, forward: api}\n"                                                                       \
    "      - {name: c2, match: {path: /f2}, forward: api}\n"                                                                       \
    "      - {name: c3, match: {path: /f3}, forward: api}\n"                                                                       \
    "      - {name: c4, match: {path: /f4}, forward: api}\n"                                                                       \
    "      - {name: c5, match: {path: {prefix: /f5}}, forward: api}\n"                                                             \
    "      - {name: c6, match: {path: {prefix: /f6/x}}, forward: api}\n"                                                           \
    "      - {name: c7, match: {method: DELETE}, forward: api}\n"                                                                  \
    "      - {name: c8, match: {path: /f8}, forward: api}\n"

/* ---------------------------------------------------------------------------------------
 * Explicit cases
 */
Test(route_index, built_for_long_lists_only)
{
    mg_routes_t *routes = load("routes:\n" FILLERS);
    cr_expect_not_null(routes->index);
    mg_routes_free(routes);
    routes = load("routes:\n"
                  "  - {name: a, match: {path: /a}, forward: api}\n"
                  "  - name: b\n"
                  "    match: {path: {prefix: /b}}\n"
                  "    routes:\n"
                  "      - {name: small, forward: api}\n"
                  "  - name: c\n"
                  "    routes:\n" FILLERS_INSIDE);
    cr_expect_null(routes->index);
    cr_expect_null(routes->routes[1]->index);
    cr_expect_not_null(routes->routes[2]->index, "a branch with 8 children gets its own index");
    expect_route(routes, "GET", "h", "/f6/x/y", "c6");
    expect_route(routes, "DELETE", "h", "/zz", "c7");
    expect_route(routes, "GET", "h", "/b/q", "small");
    mg_routes_free(routes);
}

Test(route_index, segment_boundaries)
{
    mg_routes_t *routes = load("routes:\n"
                               "  - {name: api, match: {path: {prefix: /api}}, forward: api}\n"
                               "  - {name: deep, match: {path: {prefix: /a/b/c}}, forward: api}\n" FILLERS);
    expect_route(routes, "GET", "h", "/api", "api");
    expect_route(routes, "GET", "h", "/api/", "api");
    expect_route(routes, "GET", "h", "/api/x/y", "api");
    expect_route(routes, "GET", "h", "/apix", NULL);
    expect_route(routes, "GET", "h", "/ap", NULL);
    expect_route(routes, "GET", "h", "/", NULL);
    expect_route(routes, "GET", "h", "", NULL);
    expect_route(routes, "GET", "h", "/a/b/c", "deep");
    expect_route(routes, "GET", "h", "/a/b/c/", "deep");
    expect_route(routes, "GET", "h", "/a/b/cd", NULL);
    expect_route(routes, "GET", "h", "/a/b", NULL);
    expect_route(routes, "GET", "h", "/f5x", NULL);
    expect_route(routes, "GET", "h", "/f6", NULL);
    char buf[64];
    cr_expect_str_eq(remainder_of(routes, "/api/x/y", buf, sizeof(buf)), "/x/y");
    cr_expect_str_eq(remainder_of(routes, "/api", buf, sizeof(buf)), "");
    mg_routes_free(routes);
}

Test(route_index, root_prefix_matches_everything_in_order)
{
    mg_routes_t *routes = load("routes:\n"
                               "  - {name: exact, match: {path: /x}, forward: api}\n"
                               "  - {name: root, match: {path: {prefix: /}}, forward: api}\n"
                               "  - {name: later, match: {path: {prefix: /y}}, forward: api}\n" FILLERS);
    expect_route(routes, "GET", "h", "/x", "exact");
    expect_route(routes, "GET", "h", "/y", "root");
    expect_route(routes, "GET", "h", "/", "root");
    expect_route(routes, "GET", "h", "/f1", "root");
    char buf[64];
    cr_expect_str_eq(remainder_of(routes, "/q/r", buf, sizeof(buf)), "/q/r");
    mg_routes_free(routes);
}

Test(route_index, trailing_slash)
{
    mg_routes_t *routes = load("routes:\n"
                               "  - {name: slash, match: {path: /s/}, forward: api}\n"
                               "  - {name: noslash, match: {path: /s}, forward: api}\n"
                               "  - {name: prefix-slash, match: {path: {prefix: /p/}}, forward: api}\n" FILLERS);
    expect_route(routes, "GET", "h", "/s/", "slash");
    expect_route(routes, "GET", "h", "/s", "noslash");
    expect_route(routes, "GET", "h", "/s//", NULL);
    expect_route(routes, "GET", "h", "/p", "prefix-slash");
    expect_route(routes, "GET", "h", "/p/", "prefix-slash");
    expect_route(routes, "GET", "h", "/p/q", "prefix-slash");
    expect_route(routes, "GET", "h", "/pq", NULL);
    mg_routes_free(routes);
}

Test(route_index, exact_and_prefix_keep_list_order)
{
    mg_routes_t *routes = load("routes:\n"
                               "  - {name: exact-first, match: {path: /a/b}, forward: api}\n"
                               "  - {name: prefix-a, match: {path: {prefix: /a}}, forward: api}\n"
                               "  - {name: exact-after, match: {path: /a/c}, forward: api}\n"
                               "  - {name: prefix-ab, match: {path: {prefix: /a/b}}, forward: api}\n" FILLERS);
    expect_route(routes, "GET", "h", "/a/b", "exact-first");
    expect_route(routes, "GET", "h", "/a/c", "prefix-a");
    expect_route(routes, "GET", "h", "/a/b/c", "prefix-a");
    expect_route(routes, "GET", "h", "/a", "prefix-a");
    mg_routes_free(routes);
    /* An exact path deeper than every prefix: the walk must still reach its end. */
    routes = load("routes:\n"
                  "  - {name: shallow, match: {path: {prefix: /s}}, forward: api}\n"
                  "  - {name: deep-exact, match: {path: /d/e/e/p}, forward: api}\n" FILLERS);
    expect_route(routes, "GET", "h", "/d/e/e/p", "deep-exact");
    expect_route(routes, "GET", "h", "/d/e/e/p/", NULL);
    expect_route(routes, "GET", "h", "/s/e/e/p", "shallow");
    mg_routes_free(routes);
}

Test(route_index, unindexed_routes_keep_their_place)
{
    mg_routes_t *routes = load("routes:\n"
                               "  - {name: get-api, match: {all: [{path: {prefix: /api}}, {method: GET}]}, forward: api}\n"
                               "  - {name: any-post, match: {method: POST}, forward: api}\n"
                               "  - {name: api, match: {path: {prefix: /api}}, forward: api}\n"
                               "  - {name: either, match: {any: [{path: /z}, {path: /api/z}]}, forward: api}\n"
                               "  - {name: api-z, match: {path: /api/z}, forward: api}\n" FILLERS
                               "  - {name: not-api, match: {not: {path: {prefix: /api}}}, forward: api}\n");
    expect_route(routes, "GET", "h", "/api/x", "get-api");
    expect_route(routes, "POST", "h", "/api/x", "any-post");
    expect_route(routes, "PUT", "h", "/api/x", "api");
    expect_route(routes, "PUT", "h", "/z", "either");
    expect_route(routes, "POST", "h", "/z", "any-post");
    expect_route(routes, "PUT", "h", "/q", "not-api");
    expect_route(routes, "DELETE", "h", "/q", "f7");
    mg_routes_free(routes);
}

Test(route_index, failed_branch_continues_after_it)
{
    mg_routes_t *routes = load("routes:\n"
                               "  - name: branch\n"
                               "    match: {path: {prefix: /api}}\n"
                               "    routes:\n"
                               "      - {name: post-only, match: {method: POST}, forward: api}\n"
                               "      - name: deeper\n"
                               "        match: {path: {prefix: /api/v2}}\n"
                               "        routes:\n"
                               "          - {name: put-only, match: {method: PUT}, forward: api}\n"
                               "  - {name: get, match: {method: GET}, forward: api}\n"
                               "  - {name: api-after, match: {path: {prefix: /api/v2/x}}, forward: api}\n" FILLERS);
    expect_route(routes, "POST", "h", "/api/v2/x", "post-only");
    expect_route(routes, "PUT", "h", "/api/v2/x", "put-only");
    expect_route(routes, "GET", "h", "/api/v2/x", "get");
    expect_route(routes, "HEAD", "h", "/api/v2/x/y", "api-after");
    expect_route(routes, "HEAD", "h", "/api/v2", NULL);
    char buf[64];
    cr_expect_str_eq(remainder_of(routes, "/api/v2/x/q", buf, sizeof(buf)), "(none)", "GET is chosen and binds nothing");
    mg_routes_free(routes);
}

Test(route_index, prefix_deeper_than_the_cursors)
{
    /* 20 segments: filed with the routes tried for every path. */
    mg_routes_t *routes = load("routes:\n"
                               "  - {name: deep, match: {path: {prefix: /1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/19/20}}, "
                               "forward: api}\n"
                               "  - {name: d16, match: {path: {prefix: /1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16}}, forward: api}\n"
                               "  - {name: d1, match: {path: {prefix: /1}}, forward: api}\n" FILLERS);
    expect_route(routes, "GET", "h", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/19/20/21", "deep");
    expect_route(routes, "GET", "h", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/19/20", "deep");
    expect_route(routes, "GET", "h", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/19", "d16");
    expect_route(routes, "GET", "h", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16", "d16");
    expect_route(routes, "GET", "h", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15", "d1");
    mg_routes_free(routes);
}

Test(route_index, host_buckets_in_list_order)
{
    mg_routes_t *routes = load("routes:\n"
                               "  - {name: a-api, match: {all: [{host: a.example}, {path: {prefix: /api}}]}, forward: api}\n"
                               "  - {name: any-api-x, match: {path: /api/x}, forward: api}\n"
                               "  - {name: a-all, match: {host: A.Example}, forward: api}\n"
                               "  - {name: wild, match: {host: \"*.example\"}, forward: api}\n"
                               "  - {name: b-exact, match: {all: [{host: b.example}, {path: /api/x}]}, forward: api}\n"
                               "  - {name: re, match: {host: {regex: '^c'}}, forward: api}\n"
                               "  - {name: c-post, match: {host: c.example, method: POST}, forward: api}\n" FILLERS);
    expect_route(routes, "GET", "a.example", "/api/x", "a-api");
    expect_route(routes, "GET", "a.example", "/apix", "a-all");
    expect_route(routes, "GET", "b.example", "/api/x", "any-api-x");
    expect_route(routes, "GET", "b.example", "/api/y", "wild");
    expect_route(routes, "GET", "x.b.example", "/api", "wild");
    expect_route(routes, "GET", "c.example", "/q", "wild");
    expect_route(routes, "POST", "c.org", "/q", "re");
    expect_route(routes, "POST", "d.org", "/q", NULL);
    expect_route(routes, "GET", "", "/api/x", "any-api-x");
    expect_route(routes, "GET", "", "/f1", "f1");
    expect_route(routes, "GET", "a.example", "/f1", "a-all");
    mg_routes_free(routes);
}

Test(route_index, host_and_path_lists_merge)
{
    /* The same path under several hosts and none: the request's host list and the any-host
     * list interleave by position. */
    mg_routes_t *routes = load("routes:\n"
                               "  - {name: h1-get, match: {host: h1.example, path: {prefix: /p}, method: GET}, forward: api}\n"
                               "  - {name: any-post, match: {path: {prefix: /p}, method: POST}, forward: api}\n"
                               "  - {name: h2, match: {host: h2.example, path: {prefix: /p}}, forward: api}\n"
                               "  - {name: h1-exact, match: {host: h1.example, path: /p/q}, forward: api}\n"
                               "  - {name: any-put, match: {method: PUT}, forward: api}\n"
                               "  - {name: h1, match: {host: h1.example, path: {prefix: /p}}, forward: api}\n"
                               "  - {name: any, match: {path: {prefix: /p}}, forward: api}\n" FILLERS);
    expect_route(routes, "GET", "h1.example", "/p/q", "h1-get");
    expect_route(routes, "POST", "h1.example", "/p/q", "any-post");
    expect_route(routes, "HEAD", "h1.example", "/p/q", "h1-exact");
    expect_route(routes, "PUT", "h1.example", "/p/r", "any-put");
    expect_route(routes, "HEAD", "h1.example", "/p/r", "h1");
    expect_route(routes, "HEAD", "h2.example", "/p/q", "h2");
    expect_route(routes, "HEAD", "h3.example", "/p/q", "any");
    expect_route(routes, "HEAD", "h3.example", "/q", NULL);
    mg_routes_free(routes);
}

Test(route_index, many_hosts)
{
    char *yaml;
    size_t len;
    FILE *f = open_memstream(&yaml, &len);
    fputs("routes:\n", f);
    for (unsigned i = 0; i != 20000; ++i)
        fprintf(f, "  - {name: t%u, match: {all: [{host: tenant%u.example.com}, {path: {prefix: /api}}]}, forward: api}\n", i, i);
    fputs("  - {name: fallback, respond: {status: 404}}\n", f);
    fclose(f);
    mg_routes_t *routes = load(yaml);
    free(yaml);
    cr_expect_eq(errs.num_warnings, 0);
    expect_route(routes, "GET", "tenant0.example.com", "/api/x", "t0");
    expect_route(routes, "GET", "tenant19999.example.com", "/api", "t19999");
    expect_route(routes, "GET", "tenant777.example.com", "/api/orders/1", "t777");
    expect_route(routes, "GET", "tenant777.example.com", "/apix", "fallback");
    expect_route(routes, "GET", "tenant20000.example.com", "/api", "fallback");
    mg_routes_free(routes);
}

/* Routes whose condition is nothing but an exact host and/or path are decided by the index
 * from its own copy of the keys: the same answers, variables included. */
Test(route_index, complete_keys)
{
    mg_routes_t *routes =
        load("routes:\n"
             "  - {name: up-api, match: {all: [{host: UP.Example}, {path: {prefix: /api}}]}, forward: api}\n"
             "  - {name: a-exact, match: {host: a.example, path: /api/x}, forward: api}\n"
             "  - {name: a-api, match: {all: [{path: {prefix: /api/}}, {host: a.example}]}, forward: api}\n"
             "  - {name: a-root, match: {all: [{host: a.example}, {all: [{path: {prefix: /}}]}]}, forward: api}\n"
             "  - {name: b-host, match: {host: {exact: B.example}}, forward: api}\n"
             "  - {name: x-exact, match: {path: /x/}, forward: api}\n"
             "  - {name: x-prefix, match: {path: {prefix: /x}}, forward: api}\n"
             "  - {name: deep, match: {path: {prefix: /1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17}}, forward: api}\n"
             "  - {name: c-deep, match: {host: c.example, path: {prefix: /1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18}}, "
             "forward: api}\n"
             "  - {name: root, match: {path: {prefix: /}}, forward: api}\n" FILLERS);
    static const struct {
        const char *host, *path, *name, *remainder;
    } cases[] = {
        {"up.example", "/api/v", "up-api", "/v"},
        {"UP.Example", "/api/v", "root", "/api/v"}, /* the context's host is compared as it is */
        {"up.example", "/apiv", "root", "/apiv"},
        {"a.example", "/api/x", "a-exact", NULL},
        {"a.example", "/api/x/", "a-api", "/x/"},
        {"a.example", "/api", "a-api", ""},
        {"a.example", "/ap", "a-root", "/ap"},
        {"a.example", "", "a-root", ""},
        {"a.examplex", "/ap", "root", "/ap"},
        {"b.example", "/api/x", "b-host", NULL},
        {"B.example", "/q", "root", "/q"},
        {"", "/x/", "x-exact", NULL},
        {"", "/x", "x-prefix", ""},
        {"", "/x//", "x-prefix", "//"},
        {"", "/xy", "root", "/xy"},
        {"", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18", "deep", "/18"},
        {"c.example", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/19", "deep", "/18/19"},
        {"", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/170", "root", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/170"},
        {"", "relative", NULL, NULL},
    };
    for (size_t full = 0; full != 2; ++full) {
        prefill_vars = full ? MG_CTX_MAX_VARS : 1;
        for (size_t i = 0; i != sizeof(cases) / sizeof(cases[0]); ++i) {
            request_t req = {"GET", cases[i].host, cases[i].path};
            mg_ctx_t ctx;
            const char *name = cases[i].name;
            if (full && cases[i].remainder != NULL) /* no room for `remainder`: only exact paths and hosts match */
                name = strcmp(cases[i].host, "b.example") == 0 ? "b-host" : NULL;
            cr_expect_str_eq(route_name(match_both(routes, &req)), name != NULL ? name : "(none)", "%s %s (%zu variables)",
                             cases[i].host, cases[i].path, prefill_vars);
            ctx_init(&ctx, &req);
            const mg_route_t *r = mg_routes_match(routes, &ctx);
            const mg_var_t *rem = mg_ctx_find_var(&ctx, MG_STR("remainder"));
            if (r != NULL && !full && cases[i].remainder != NULL) {
                cr_assert_not_null(rem, "%s %s", cases[i].host, cases[i].path);
                cr_expect(rem->value.len == strlen(cases[i].remainder) &&
                              memcmp(rem->value.base, cases[i].remainder, rem->value.len) == 0 && rem->flags == MG_VAR_ENCODED &&
                              rem->value.base >= req.path && rem->value.base <= req.path + strlen(req.path),
                          "%s %s: remainder '%.*s'", cases[i].host, cases[i].path, (int)rem->value.len, rem->value.base);
            } else {
                cr_expect_null(rem, "%s %s", cases[i].host, cases[i].path);
            }
        }
    }
    prefill_vars = 1;
    mg_routes_free(routes);
}

/* Several routes with the same keys share a list: each is still decided from its own entry. */
Test(route_index, complete_keys_in_shared_lists)
{
    mg_routes_t *routes = load("routes:\n"
                               "  - {name: get, match: {host: h.example, path: {prefix: /p}, method: GET}, forward: api}\n"
                               "  - {name: h-p, match: {host: h.example, path: {prefix: /p}}, forward: api}\n"
                               "  - {name: h-p-again, match: {host: h.example, path: {prefix: /p/}}, forward: api}\n"
                               "  - name: branch\n"
                               "    match: {host: h.example, path: {prefix: /b}}\n"
                               "    routes:\n"
                               "      - {name: inner, match: {path: /b/in}, forward: api}\n"
                               "  - {name: h-b, match: {all: [{host: h.example}, {path: {prefix: /b}}]}, forward: api}\n"
                               "  - {name: h, match: {host: h.example}, forward: api}\n"
                               "  - {name: h-twice, match: {host: h.example}, forward: api}\n" FILLERS);
    expect_route(routes, "GET", "h.example", "/p/1", "get");
    expect_route(routes, "PUT", "h.example", "/p/1", "h-p");
    expect_route(routes, "PUT", "h.example", "/b/in", "inner");
    expect_route(routes, "PUT", "h.example", "/b/out", "h-b");
    expect_route(routes, "PUT", "h.example", "/q", "h");
    expect_route(routes, "PUT", "i.example", "/p", NULL);
    prefill_vars = MG_CTX_MAX_VARS - 1;
    expect_route(routes, "PUT", "h.example", "/b/in", "inner");
    prefill_vars = MG_CTX_MAX_VARS;
    expect_route(routes, "PUT", "h.example", "/p/1", "h");
    expect_route(routes, "PUT", "h.example", "/b/in", "h");
    prefill_vars = 1;
    mg_routes_free(routes);
}

/* A generated list of `n` routes: `/pI` exact for even I, `{prefix: /qI}` for odd I, and a
 * fallback. */
static char *many_routes_yaml(size_t n)
{
    char *yaml;
    size_t len;
    FILE *f = open_memstream(&yaml, &len);
    fputs("routes:\n", f);
    for (size_t i = 0; i != n; ++i) {
        if (i % 2 == 0)
            fprintf(f, "  - {name: r%zu, match: {path: /p%zu}, forward: api}\n", i, i);
        else
            fprintf(f, "  - {name: r%zu, match: {path: {prefix: /q%zu}}, forward: api}\n", i, i);
    }
    fputs("  - {name: fallback, respond: {status: 404}}\n", f);
    fclose(f);
    return yaml;
}

Test(route_index, hundred_thousand_routes)
{
    char *yaml = many_routes_yaml(100000);
    mg_routes_t *routes = load(yaml);
    free(yaml);
    cr_expect_eq(errs.num_warnings, 0);
    cr_expect_eq(mg_routes_count(routes), 100001);
    expect_route(routes, "GET", "h", "/p0", "r0");
    expect_route(routes, "GET", "h", "/p99998", "r99998");
    expect_route(routes, "GET", "h", "/q99999/x", "r99999");
    expect_route(routes, "GET", "h", "/q1", "r1");
    expect_route(routes, "GET", "h", "/q12345/a/b", "r12345");
    expect_route(routes, "GET", "h", "/p1", "fallback");
    expect_route(routes, "GET", "h", "/q2", "fallback");
    expect_route(routes, "GET", "h", "/p99998/x", "fallback");
    mg_routes_free(routes);
}

/* ---------------------------------------------------------------------------------------
 * Differential: random lists, random requests
 */
static uint64_t rng_state;

static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13; /* xorshift64 */
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

static const char *const segments[] = {"a", "b", "ab", "api", "x", "v1", "v2", "users", "u", "us", "y", "z"};
static const char *const methods[] = {"GET", "POST", "PUT"};
static const char *const hosts[] = {"a.example", "b.example", "c.example", "x.a.example", "A.Example", ""};
static unsigned num_segments; /* of `segments`, for the current list: fewer means more overlap */

/* A path of up to `depth` segments (at least `min`); sometimes with a trailing slash. */
static void random_path(char *buf, size_t size, unsigned min, unsigned depth)
{
    size_t off = 0;
    unsigned n = min + rnd(depth - min + 1);
    buf[0] = '\0';
    for (unsigned i = 0; i != n; ++i) {
        unsigned k = rnd(num_segments);
        if (k < sizeof(segments) / sizeof(segments[0]))
            off += (size_t)snprintf(buf + off, size - off, "/%s", segments[k]);
        else
            off += (size_t)snprintf(buf + off, size - off, "/n%u", k);
    }
    if (n == 0 || rnd(6) == 0)
        snprintf(buf + off, size - off, "/");
}

/* Paths written in the current list, so that requests can aim at them. */
static char written[4096][64];
static unsigned num_written;

/* Exact hosts (also written in upper case: lowered at load), a wildcard, a regex. */
static void random_host_condition(FILE *f)
{
    static const char *const forms[] = {
        "a.example", "b.example", "B.EXAMPLE", "\"*.example\"", "{regex: '^[ab]\\.example$'}", "{exact: c.example}"};
    fprintf(f, "{host: %s}", forms[rnd(6)]);
}

static unsigned complete_heavy; /* most conditions test an exact host and/or a path only */

/* A condition that tests nothing but an exact host and/or an exact path or a prefix, in the
 * forms that say so: host alone, path alone, both in `all` (either order, nested or implicit),
 * the prefix "/", hosts written in upper case. */
static void random_complete_condition(FILE *f)
{
    static const char *const complete_hosts[] = {"a.example", "b.example",          "B.EXAMPLE",
                                                 "A.Example", "{exact: c.example}", "x.a.example"};
    char path[64];
    random_path(path, sizeof(path), rnd(6) == 0 ? 0 : 1, 3);
    if (num_written < sizeof(written) / sizeof(written[0]))
        memcpy(written[num_written++], path, sizeof(path));
    const char *host = complete_hosts[rnd(6)];
    char path_cond[96];
    switch (rnd(3)) {
    case 0:
        snprintf(path_cond, sizeof(path_cond), "{path: \"%s\"}", path);
        break;
    case 1:
        snprintf(path_cond, sizeof(path_cond), "{path: {prefix: \"%s\"}}", path);
        break;
    default:
        snprintf(path_cond, sizeof(path_cond), "{path: {prefix: \"%s\"}}", rnd(3) == 0 ? "/" : path);
        break;
    }
    switch (rnd(7)) {
    case 0:
        fprintf(f, "{host: %s}", host);
        break;
    case 1:
        fputs(path_cond, f);
        break;
    case 2:
        fprintf(f, "{all: [{host: %s}, %s]}", host, path_cond);
        break;
    case 3:
        fprintf(f, "{all: [%s, {host: %s}]}", path_cond, host);
        break;
    case 4:
        fprintf(f, "{all: [{all: [{host: %s}]}, {all: [%s]}]}", host, path_cond);
        break;
    case 5: /* the implicit all */
        fprintf(f, "{host: %s, path: %.*s}", host, (int)(strlen(path_cond) - 8), path_cond + 7);
        break;
    default:
        fprintf(f, "{all: [%s]}", path_cond);
        break;
    }
}

static void random_condition(FILE *f, unsigned depth)
{
    if (complete_heavy && rnd(3) != 0) {
        random_complete_condition(f);
        return;
    }
    char path[64];
    random_path(path, sizeof(path), rnd(8) == 0 ? 0 : 1, 3);
    if (num_written < sizeof(written) / sizeof(written[0]))
        memcpy(written[num_written++], path, sizeof(path));
    switch (rnd(depth < 2 ? 12 : 4)) {
    case 0:
        fprintf(f, "{path: \"%s\"}", path);
        break;
    case 1:
    case 2:
        fprintf(f, "{path: {prefix: \"%s\"}}", path);
        break;
    case 3:
        fprintf(f, rnd(2) ? "{method: %s}" : "{method: [%s, PUT]}", methods[rnd(3)]);
        break;
    case 4:
    case 5:
    case 6:
        fputs(rnd(3) ? "{all: [" : "{any: [", f);
        random_condition(f, depth + 1);
        fputs(", ", f);
        random_condition(f, depth + 1);
        fputs("]}", f);
        break;
    case 7:
        if (rnd(3) != 0) { /* mostly a narrow `not` */
            fprintf(f, "{all: [{path: {prefix: \"%s\"}}, {not: ", path);
            random_condition(f, depth + 1);
            fputs("}]}", f);
            break;
        }
        fputs("{not: ", f);
        random_condition(f, depth + 1);
        fputs("}", f);
        break;
    case 8:
        random_host_condition(f);
        break;
    case 9:
        fputs("{all: [", f);
        random_host_condition(f);
        fprintf(f, rnd(2) ? ", {path: {prefix: \"%s\"}}]}" : ", {path: \"%s\"}]}", path);
        break;
    case 10:
        fputs("{path: {regex: '^/(?<first>[a-z]+)(/|$)'}}", f);
        break;
    default: /* the implicit all */
        fprintf(f, "{path: {prefix: \"%s\"}, method: %s}", path, methods[rnd(3)]);
        break;
    }
}

static unsigned route_counter, catch_all_odds;

/* In long lists most conditions require a path, as real ones do; otherwise the first
 * method-only route would answer nearly every request and the rest would never be reached. */
static void random_narrow_condition(FILE *f)
{
    if (complete_heavy && rnd(3) != 0) {
        random_complete_condition(f);
        return;
    }
    if (catch_all_odds < 100 || rnd(10) == 0) {
        random_condition(f, 0);
        return;
    }
    char path[64];
    random_path(path, sizeof(path), 1, 4);
    if (num_written < sizeof(written) / sizeof(written[0]))
        memcpy(written[num_written++], path, sizeof(path));
    switch (rnd(5)) {
    case 0:
        fprintf(f, "{path: \"%s\"}", path);
        break;
    case 1:
        fprintf(f, "{path: {prefix: \"%s\"}}", path);
        break;
    case 2:
        fputs("{all: [", f);
        random_host_condition(f);
        fprintf(f, ", {path: {prefix: \"%s\"}}]}", path);
        break;
    default:
        fprintf(f, "{all: [{path: {prefix: \"%s\"}}, ", path);
        random_condition(f, 1);
        fputs("]}", f);
        break;
    }
}

static void random_routes(FILE *f, int indent, unsigned depth, unsigned n)
{
    for (unsigned i = 0; i != n; ++i) {
        fprintf(f, "%*s- name: r%u\n", indent, "", route_counter++);
        if (rnd(catch_all_odds) != 0) {
            fprintf(f, "%*s  match: ", indent, "");
            random_narrow_condition(f);
            fputs("\n", f);
        }
        if (depth < 3 && rnd(6) == 0) {
            fprintf(f, "%*s  routes:\n", indent, "");
            random_routes(f, indent + 4, depth + 1, 1 + rnd(rnd(3) == 0 ? 20 : 5));
        } else {
            fprintf(f, "%*s  forward: api\n", indent, "");
        }
    }
}

/* Adds ";params" to some segments of `path` and segments of params only between some: the
 * index must look such a path up as the path conditions compare it (mg_path_skip_params). */
static void add_params(char *path, size_t size)
{
    static const char *const params[] = {";p", ";", ";j=1", "/;q", "/;"};
    char out[256];
    size_t o = 0;
    for (const char *p = path; *p != '\0' && o + 8 < sizeof(out); ++p) {
        if (*p == '/' && p != path && rnd(4) == 0)
            o += (size_t)snprintf(out + o, sizeof(out) - o, "%s", params[rnd(5)]);
        out[o++] = *p;
    }
    if (rnd(3) == 0 && o + 8 < sizeof(out))
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%s", params[rnd(5)]);
    out[o] = '\0';
    if (o < size) /* else the path stays as it was */
        memcpy(path, out, o + 1);
}

/* A random path, or one written in the list, perhaps shortened or extended; now and then with
 * ";params". */
static void random_request(char *path, size_t size, request_t *req)
{
    random_path(path, size, 0, 5);
    if (num_written != 0 && rnd(2) == 0) {
        char tail[64];
        random_path(tail, sizeof(tail), 0, 2);
        const char *w = written[rnd(num_written)];
        size_t len = strlen(w);
        memcpy(path, w, len + 1);
        if (rnd(3) == 0)
            snprintf(path + len, size - len, "%s", tail);
        else if (rnd(3) == 0 && len > 1)
            path[rnd((unsigned)len)] = '\0';
    }
    if (rnd(3) == 0)
        add_params(path, size);
    req->method = methods[rnd(3)];
    req->host = hosts[rnd(6)];
    req->path = path;
}

static void differential(unsigned configs, unsigned max_routes, unsigned requests)
{
    for (unsigned c = 0; c != configs; ++c) {
        char *yaml;
        size_t len;
        FILE *f = open_memstream(&yaml, &len);
        fputs("routes:\n", f);
        route_counter = 0;
        num_written = 0;
        catch_all_odds = max_routes < 100 ? 25 : 4 * max_routes;
        num_segments = max_routes < 100 ? 3 + rnd(4) : 12 + rnd(300);
        random_routes(f, 2, 0, 1 + rnd(max_routes));
        fclose(f);
        mg_routes_t *routes = load(yaml);
        free(yaml);
        for (unsigned i = 0; i != requests; ++i) {
            char path[128];
            request_t req;
            random_request(path, sizeof(path), &req);
            /* Now and then a variable table with room for one more, or none. */
            unsigned k = rnd(8);
            prefill_vars = k == 0 ? MG_CTX_MAX_VARS : k == 1 ? MG_CTX_MAX_VARS - 1 : 1;
            match_both(routes, &req);
        }
        prefill_vars = 1;
        mg_routes_free(routes);
    }
}

Test(route_index_random, small_lists)
{
    rng_state = 0x9e3779b97f4a7c15u;
    differential(400, 40, 200);
}

Test(route_index_random, long_lists)
{
    rng_state = 0x243f6a8885a308d3u;
    differential(20, 2000, 2000);
}

Test(route_index_random, complete_keys_small_lists)
{
    rng_state = 0x13198a2e03707344u;
    complete_heavy = 1;
    differential(400, 40, 200);
    complete_heavy = 0;
}

Test(route_index_random, complete_keys_long_lists)
{
    rng_state = 0xa4093822299f31d0u;
    complete_heavy = 1;
    differential(20, 2000, 2000);
    complete_heavy = 0;
}

/* ---------------------------------------------------------------------------------------
 * Warnings
 */

/* Expects exactly these warnings, in order (NULL-terminated), and no error. */
static void expect_warnings(const char *yaml, const char *const *messages)
{
    mg_routes_free(load(yaml));
    size_t n = 0;
    for (size_t i = 0; i != errs.size; ++i) {
        cr_expect(errs.entries[i].warning, "error: %s", errs.entries[i].text);
        if (messages[n] == NULL)
            cr_expect_fail("unexpected warning: %s", errs.entries[i].text);
        else
            cr_expect_str_eq(errs.entries[i].text, messages[n++]);
    }
    cr_expect_null(messages[n], "missing warning '%s'", messages[n]);
}

#define EXPECT_WARNINGS(yaml, ...) expect_warnings(yaml, (const char *const[]){__VA_ARGS__, NULL})
#define EXPECT_NO_WARNING(yaml) expect_warnings(yaml, (const char *const[]){NULL})

Test(route_warnings, prefix_covers_later_paths)
{
    EXPECT_WARNINGS("routes:\n"
                    "  - {name: api, match: {path: {prefix: /api}}, forward: api}\n"
                    "  - {name: exact, match: {path: /api/x}, forward: api}\n"
                    "  - {name: same, match: {path: /api}, forward: api}\n"
                    "  - {name: deeper, match: {path: {prefix: /api/v1/}}, forward: api}\n"
                    "  - {name: narrower, match: {all: [{path: /api/y}, {method: GET}]}, forward: api}\n"
                    "  - {name: apix, match: {path: {prefix: /apix}}, forward: api}\n"
                    "  - {name: other, match: {path: /ap}, forward: api}\n"
                    "  - {name: wider, match: {path: {prefix: /}}, forward: api}\n",
                    "routes.yaml:3:5: warning: route 'exact' can never match: route 'api' (routes.yaml:2) catches all of its "
                    "requests",
                    "routes.yaml:4:5: warning: route 'same' can never match: route 'api' (routes.yaml:2) catches all of its "
                    "requests",
                    "routes.yaml:5:5: warning: route 'deeper' can never match: route 'api' (routes.yaml:2) catches all of its "
                    "requests",
                    "routes.yaml:6:5: warning: route 'narrower' can never match: route 'api' (routes.yaml:2) catches all of "
                    "its requests");
}

Test(route_warnings, root_prefix_covers_everything_after_it)
{
    EXPECT_WARNINGS("routes:\n"
                    "  - {name: root, match: {path: {prefix: /}}, respond: {status: 404}}\n"
                    "  - {name: x, match: {path: /x}, forward: api}\n"
                    "  - {name: get, match: {method: GET}, forward: api}\n",
                    "routes.yaml:3:5: warning: route 'x' can never match: route 'root' (routes.yaml:2) catches all of its "
                    "requests",
                    "routes.yaml:4:5: warning: route 'get' can never match: route 'root' (routes.yaml:2) catches all of its "
                    "requests");
}

Test(route_warnings, exact_paths)
{
    EXPECT_WARNINGS("routes:\n"
                    "  - {name: a, match: {path: /a}, forward: api}\n"
                    "  - {name: a-prefix, match: {path: {prefix: /a}}, forward: api}\n"
                    "  - {name: a-slash, match: {path: /a/}, forward: api}\n"
                    "  - {name: a-again, match: {path: /a}, forward: api}\n",
                    "routes.yaml:4:5: warning: route 'a-slash' can never match: route 'a-prefix' (routes.yaml:3) catches all "
                    "of its requests",
                    "routes.yaml:5:5: warning: route 'a-again' can never match: route 'a' (routes.yaml:2) has the same "
                    "condition and catches all of its requests");
}

Test(route_warnings, identical_conditions)
{
    EXPECT_WARNINGS("routes:\n"
                    "  - {name: get, match: {method: [GET, HEAD]}, forward: api}\n"
                    "  - {name: get-again, match: {method: [GET, HEAD]}, respond: {status: 200}}\n"
                    "  - {name: get-only, match: {method: GET}, forward: api}\n"
                    "  - {name: either, match: {any: [{path: /a}, {path: {prefix: /b}}]}, forward: api}\n"
                    "  - {name: either-again, match: {any: [{path: /a}, {path: {prefix: /b/}}]}, forward: api}\n"
                    "  - {name: not-x, match: {not: {path: /x}}, forward: api}\n"
                    "  - {name: not-x-again, match: {not: {path: /x}}, forward: api}\n",
                    "routes.yaml:3:5: warning: route 'get-again' can never match: route 'get' (routes.yaml:2) has the same "
                    "condition and catches all of its requests",
                    "routes.yaml:6:5: warning: route 'either-again' can never match: route 'either' (routes.yaml:5) has the "
                    "same condition and catches all of its requests",
                    "routes.yaml:8:5: warning: route 'not-x-again' can never match: route 'not-x' (routes.yaml:7) has the "
                    "same condition and catches all of its requests");
}

Test(route_warnings, extra_tests_do_not_catch)
{
    EXPECT_NO_WARNING("routes:\n"
                      "  - {name: get-api, match: {path: {prefix: /api}, method: GET}, forward: api}\n"
                      "  - {name: api-x, match: {path: /api/x}, forward: api}\n"
                      "  - {name: any, match: {any: [{path: {prefix: /b}}, {method: GET}]}, forward: api}\n"
                      "  - {name: b, match: {path: /b}, forward: api}\n"
                      "  - {name: exact, match: {path: /c}, forward: api}\n"
                      "  - {name: prefix-after-exact, match: {path: {prefix: /c}}, forward: api}\n");
}

Test(route_warnings, branches)
{
    EXPECT_WARNINGS("routes:\n"
                    "  - name: partial\n"
                    "    match: {path: {prefix: /p}}\n"
                    "    routes:\n"
                    "      - {name: p-get, match: {method: GET}, forward: api}\n"
                    "  - {name: p-x, match: {path: /p/x}, forward: api}\n"
                    "  - name: full\n"
                    "    match: {path: {prefix: /f}}\n"
                    "    routes:\n"
                    "      - {name: f-get, match: {method: GET}, forward: api}\n"
                    "      - {name: f-rest, respond: {status: 405}}\n"
                    "  - {name: f-x, match: {path: {prefix: /f/x}}, forward: api}\n"
                    "  - name: same-as-partial\n"
                    "    match: {path: {prefix: /p}}\n"
                    "    routes:\n"
                    "      - {name: p-post, match: {method: POST}, forward: api}\n",
                    "routes.yaml:12:5: warning: route 'f-x' can never match: route 'full' (routes.yaml:7) catches all of its "
                    "requests");
}

Test(route_warnings, one_warning_per_route_naming_the_first_catcher)
{
    EXPECT_WARNINGS("routes:\n"
                    "  - {name: b, match: {path: {prefix: /a/b}}, forward: api}\n"
                    "  - {name: a, match: {path: {prefix: /a}}, forward: api}\n"
                    "  - {name: c, match: {path: /a/b/c}, forward: api}\n"
                    "  - {name: all, forward: api}\n"
                    "  - {name: d, match: {path: /a/b/c}, forward: api}\n",
                    "routes.yaml:4:5: warning: route 'c' can never match: route 'b' (routes.yaml:2) catches all of its "
                    "requests",
                    "routes.yaml:6:5: warning: route 'd' can never match: route 'b' (routes.yaml:2) catches all of its "
                    "requests");
}

Test(route_warnings, after_a_catch_all)
{
    EXPECT_WARNINGS("routes:\n"
                    "  - {name: x, match: {path: /x}, forward: api}\n"
                    "  - {name: all, forward: api}\n"
                    "  - {name: y, match: {path: /y}, forward: api}\n"
                    "  - {name: z, match: {method: GET}, forward: api}\n",
                    "routes.yaml:4:5: warning: route 'y' can never match: route 'all' (routes.yaml:3) catches every request",
                    "routes.yaml:5:5: warning: route 'z' can never match: route 'all' (routes.yaml:3) catches every request");
}

Test(route_warnings, per_level)
{
    EXPECT_WARNINGS("routes:\n"
                    "  - {name: a, match: {path: {prefix: /a}}, forward: api}\n"
                    "  - name: branch\n"
                    "    match: {method: GET}\n"
                    "    routes:\n"
                    "      - {name: inner-a, match: {path: /a/1}, forward: api}\n"
                    "      - {name: inner-b, match: {path: {prefix: /b}}, forward: api}\n"
                    "      - {name: inner-b1, match: {path: /b/1}, forward: api}\n",
                    "routes.yaml:8:9: warning: route 'inner-b1' can never match: route 'inner-b' (routes.yaml:7) catches all "
                    "of its requests");
}

Test(route_warnings, hosts)
{
    EXPECT_WARNINGS("routes:\n"
                    "  - {name: a, match: {host: a.example}, forward: api}\n"
                    "  - {name: a-x, match: {host: A.EXAMPLE, path: /x}, forward: api}\n"
                    "  - {name: b-x, match: {host: b.example, path: /x}, forward: api}\n"
                    "  - {name: b-api, match: {all: [{host: b.example}, {path: {prefix: /api}}]}, forward: api}\n"
                    "  - {name: b-api-v1, match: {all: [{path: {prefix: /api/v1}}, {host: b.example}]}, forward: api}\n"
                    "  - {name: c-api-v1, match: {all: [{path: {prefix: /api/v1}}, {host: c.example}]}, forward: api}\n"
                    "  - {name: api-v1, match: {path: {prefix: /api/v1}}, forward: api}\n"
                    "  - {name: wild, match: {host: \"*.example\"}, forward: api}\n"
                    "  - {name: d-under-wild, match: {host: d.example}, forward: api}\n"
                    "  - {name: api, match: {path: {prefix: /api}}, forward: api}\n"
                    "  - {name: e-api, match: {host: e.example, path: /api/e}, forward: api}\n",
                    "routes.yaml:3:5: warning: route 'a-x' can never match: route 'a' (routes.yaml:2) catches all of its "
                    "requests",
                    "routes.yaml:6:5: warning: route 'b-api-v1' can never match: route 'b-api' (routes.yaml:5) catches all "
                    "of its requests",
                    "routes.yaml:12:5: warning: route 'e-api' can never match: route 'api' (routes.yaml:11) catches all of "
                    "its requests");
}

Test(route_warnings, hundred_thousand_routes_shadowed)
{
    /* Every route is shadowed by the one before it: one warning each, found by lookups. */
    char *yaml;
    size_t len;
    FILE *f = open_memstream(&yaml, &len);
    fputs("routes:\n", f);
    for (unsigned i = 0; i != 50000; ++i) {
        fprintf(f, "  - {name: p%u, match: {path: {prefix: /p%u}}, forward: api}\n", i, i);
        fprintf(f, "  - {name: e%u, match: {path: /p%u/x}, forward: api}\n", i, i);
    }
    fclose(f);
    mg_routes_free(load(yaml));
    free(yaml);
    cr_expect_eq(errs.num_warnings, 50000);
    cr_assert_eq(errs.size, 50000);
    cr_expect_str_eq(errs.entries[49999].text, "routes.yaml:100001:5: warning: route 'e49999' can never match: route "
                                               "'p49999' (routes.yaml:100000) catches all of its requests");
}
