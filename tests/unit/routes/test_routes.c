/*
 * Route trees: compile a `routes:` list from YAML text, then push requests through it.
 * The document is freed right after compiling, so a string the tree forgot to copy shows up
 * under the sanitizers.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "support.h"

static int backend_api, backend_crm;

static void *resolve(void *arg, const char *name)
{
    (void)arg;
    if (strcmp(name, "api") == 0)
        return &backend_api;
    if (strcmp(name, "crm") == 0)
        return &backend_crm;
    return NULL;
}

TestSuite(routes_match, .fini = support_fini);
TestSuite(routes_compile, .fini = support_fini);

static mg_routes_t *load(const char *yaml)
{
    return load_with(yaml, resolve);
}

static mg_routes_t *load_ok(const char *yaml)
{
    mg_routes_t *routes = load(yaml);
    if (routes == NULL)
        mg_errors_print(&errs, stderr);
    cr_assert_not_null(routes);
    cr_assert_eq(errs.num_errors, 0);
    return routes;
}

static void expect_errors(const char *yaml, const char *const *messages)
{
    expect_errors_with(yaml, resolve, messages);
}

#define EXPECT_ERRORS(yaml, ...) expect_errors(yaml, (const char *const[]){__VA_ARGS__, NULL})

/* ---------------------------------------------------------------------------------------
 * Matching
 */
typedef struct request_case {
    const char *method, *path;
    const char *route;     /* NULL: no route */
    const char *remainder; /* NULL: unbound */
    size_t num_vars;       /* variables bound, on top of the one the test binds first */
} request_case_t;

static void run_requests(const char *yaml, const request_case_t *cases, size_t n)
{
    mg_routes_t *routes = load_ok(yaml);
    for (size_t i = 0; i != n; ++i) {
        const request_case_t *c = &cases[i];
        mg_ctx_t ctx;
        memset(&ctx, 0, sizeof(ctx));
        ctx.method = mg_str(c->method, strlen(c->method));
        ctx.path = mg_str(c->path, strlen(c->path));
        mg_ctx_set_var(&ctx, MG_STR("tenant"), MG_STR("acme"));
        const mg_route_t *r = mg_routes_match(routes, &ctx);
        const char *got = r != NULL ? r->name : "(none)";
        cr_expect_str_eq(got, c->route != NULL ? c->route : "(none)", "%s %s", c->method, c->path);
        cr_expect_eq(ctx.num_vars, 1 + c->num_vars, "%s %s: %zu variables", c->method, c->path, ctx.num_vars - 1);
        const mg_str_t *rem = mg_ctx_get_var(&ctx, MG_STR("remainder"));
        char buf[128];
        snprintf(buf, sizeof(buf), "%.*s", rem != NULL ? (int)rem->len : 6, rem != NULL ? rem->base : "(none)");
        cr_expect_str_eq(buf, c->remainder != NULL ? c->remainder : "(none)", "%s %s remainder", c->method, c->path);
        cr_expect_str_eq(mg_ctx_get_var(&ctx, MG_STR("tenant"))->base, "acme");
        if (r != NULL)
            cr_expect_neq(r->kind, MG_ROUTE_BRANCH);
    }
    mg_routes_free(routes);
}

static const char tree_yaml[] = "routes:\n"
                                "  - name: health\n"
                                "    match: {path: /healthz, method: [GET, HEAD]}\n"
                                "    respond: {status: 200, body: \"ok\\n\"}\n"
                                "  - name: api-customer\n"
                                "    match: {path: {prefix: /api/customer}}\n"
                                "    routes:\n"
                                "      - name: customer-write\n"
                                "        match: {method: [POST, PUT, DELETE]}\n"
                                "        forward: {backend: api, host: api.internal}\n"
                                "      - name: customer-v2\n"
                                "        match: {path: {prefix: /api/customer/v2}}\n"
                                "        forward: api\n"
                                "  - name: api\n"
                                "    match:\n"
                                "      path: {prefix: /api}\n"
                                "    forward: api\n"
                                "  - name: nested\n"
                                "    match: {path: {prefix: /n}}\n"
                                "    routes:\n"
                                "      - name: nested-inner\n"
                                "        match: {path: {prefix: /n/a}}\n"
                                "        routes:\n"
                                "          - name: nested-leaf\n"
                                "            match: {method: GET}\n"
                                "            forward: crm\n"
                                "  - name: not-delete\n"
                                "    match: {not: {any: [{method: DELETE}, {path: {prefix: /x}}]}}\n"
                                "    respond: {status: 404}\n";

Test(routes_match, first_match_depth_first)
{
    static const request_case_t cases[] = {
        {"GET", "/healthz", "health", NULL, 0},
        {"HEAD", "/healthz", "health", NULL, 0},
        {"POST", "/healthz", "not-delete", NULL, 0},
        {"PUT", "/api/customer/1", "customer-write", "/1", 1},
        {"PUT", "/api/customer", "customer-write", "", 1},
        {"GET", "/api/customer/v2/x", "customer-v2", "/x", 2},
        {"GET", "/api/orders", "api", "/orders", 1},
        {"GET", "/apix", "not-delete", NULL, 0},
        {"GET", "/n/a/b", "nested-leaf", "/b", 2},
        {"DELETE", "/zzz", NULL, NULL, 0},
        {"GET", "/x/1", NULL, NULL, 0},
    };
    run_requests(tree_yaml, cases, sizeof(cases) / sizeof(cases[0]));
}

Test(routes_match, failed_branches_leave_no_variables)
{
    static const request_case_t cases[] = {
        /* api-customer binds remainder "/1", none of its children matches: the later route
         * sees only its own binding. */
        {"GET", "/api/customer/1", "api", "/customer/1", 1},
        /* two levels of branches bind and fail before the fallback */
        {"POST", "/n/a/b", "not-delete", NULL, 0},
        {"DELETE", "/n/a/b", NULL, NULL, 0},
        {"DELETE", "/api/customer/v2/q", "customer-write", "/v2/q", 1},
    };
    run_requests(tree_yaml, cases, sizeof(cases) / sizeof(cases[0]));
}

Test(routes_match, route_without_match_catches_all)
{
    static const char yaml[] = "routes:\n"
                               "  - name: root\n"
                               "    match: {path: {prefix: /}}\n"
                               "    routes:\n"
                               "      - {name: only-post, match: {method: POST}, forward: api}\n"
                               "  - name: fallback\n"
                               "    respond: {status: 404, body: \"no route\\n\"}\n";
    static const request_case_t cases[] = {
        {"POST", "/a/b", "only-post", "/a/b", 1},
        {"GET", "/a/b", "fallback", NULL, 0},
        {"GET", "/", "fallback", NULL, 0},
    };
    run_requests(yaml, cases, sizeof(cases) / sizeof(cases[0]));
}

Test(routes_match, empty_and_absent_lists_match_nothing)
{
    mg_routes_t *routes = load_ok("routes: []\n");
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = MG_STR("GET");
    ctx.path = MG_STR("/");
    cr_expect_null(mg_routes_match(routes, &ctx));
    cr_expect_eq(mg_routes_count(routes), 0);
    mg_routes_free(routes);
    routes = load_ok("listen: []\n");
    cr_expect_null(mg_routes_match(routes, &ctx));
    mg_routes_free(routes);
}

/* ---------------------------------------------------------------------------------------
 * What a compiled route holds
 */
static const mg_route_t *find(const mg_route_t *const *list, size_t size, const char *name)
{
    for (size_t i = 0; i != size; ++i) {
        if (strcmp(list[i]->name, name) == 0)
            return list[i];
        const mg_route_t *r = find((const mg_route_t *const *)list[i]->children, list[i]->num_children, name);
        if (r != NULL)
            return r;
    }
    return NULL;
}

Test(routes_compile, terminals_are_copied)
{
    mg_routes_t *routes = load_ok(tree_yaml);
    const mg_route_t *const *top = (const mg_route_t *const *)routes->routes;
    cr_expect_eq(mg_routes_count(routes), 9);
    cr_expect_eq(routes->size, 5);
    cr_expect_str_eq(routes->file, "routes.yaml");

    const mg_route_t *health = find(top, routes->size, "health");
    cr_assert_not_null(health);
    cr_expect_eq(health->kind, MG_ROUTE_RESPOND);
    cr_expect_eq(health->respond->status, 200);
    cr_expect_eq(health->respond->body_len, 3);
    cr_expect_str_eq(health->respond->body, "ok\n");
    cr_expect_eq(health->file, routes->file);
    cr_expect_eq(health->line, 2);
    cr_expect_eq(health->column, 5);
    cr_expect_null(health->parent);

    const mg_route_t *write = find(top, routes->size, "customer-write");
    cr_assert_not_null(write);
    cr_expect_eq(write->kind, MG_ROUTE_FORWARD);
    cr_expect_str_eq(write->forward.backend_name, "api");
    cr_expect_eq(write->forward.backend, &backend_api);
    cr_expect_str_eq(mg_template_source(write->forward.host).base, "api.internal");
    cr_expect_str_eq(write->parent->name, "api-customer");
    cr_expect_eq(write->match->file, routes->file, "matchers name the copied file");

    const mg_route_t *leaf = find(top, routes->size, "nested-leaf");
    cr_expect_eq(leaf->forward.backend, &backend_crm);
    cr_expect_null(leaf->forward.host);
    cr_expect_str_eq(leaf->parent->parent->name, "nested");
    cr_expect_eq(find(top, routes->size, "nested")->kind, MG_ROUTE_BRANCH);
    mg_routes_free(routes);
}

/* What a route does not write costs it nothing: each optional part is NULL; and the routes to one
 * backend share one copy of its name (docs/performance.md, "What a route costs"). */
Test(routes_compile, parts_only_where_written)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - {name: a, match: {path: /a}, forward: api}\n"
                                  "  - {name: b, match: {path: /b}, forward: {backend: api, host: x.internal}}\n"
                                  "  - {name: c, match: {path: /c}, forward: crm}\n"
                                  "  - {name: d, match: {path: /d}, bridge: {backend: api, method: POST}}\n"
                                  "  - {name: e, match: {path: /e}, respond: {status: 204}}\n");
    mg_route_t *const *r = routes->routes;
    cr_expect_str_eq(r[0]->forward.backend_name, "api");
    cr_expect_eq(r[1]->forward.backend_name, r[0]->forward.backend_name, "one copy of 'api'");
    cr_assert_not_null(r[3]->bridge);
    cr_expect_eq(r[3]->bridge->backend_name, r[0]->forward.backend_name, "a bridge's too");
    cr_expect_str_eq(r[2]->forward.backend_name, "crm");
    cr_expect_null(r[0]->respond);
    cr_expect_null(r[0]->redirect);
    cr_expect_null(r[0]->bridge);
    cr_expect_null(r[0]->quota);
    cr_expect_null(r[0]->order);
    cr_expect_null(r[0]->auth);
    cr_expect_eq(mg_route_auth_mode(r[0]), MG_ROUTE_AUTH_INHERIT);
    cr_assert_not_null(r[4]->respond);
    cr_expect_eq(r[4]->respond->status, 204);
    cr_expect_null(r[4]->forward.backend_name);
    cr_expect_str_eq(r[4]->name, "e");
    mg_routes_free(routes);
}

Test(routes_compile, respond_headers)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: teapot\n"
                                  "    respond:\n"
                                  "      status: 418\n"
                                  "      headers: {Content-Type: text/plain, X-Count: 3, X-Empty: \"\", X-Tab: \"a\\tb\"}\n");
    const mg_route_t *r = routes->routes[0];
    cr_expect_eq(r->respond->status, 418);
    cr_expect_null(r->respond->body);
    cr_assert_eq(r->respond->num_headers, 4);
    cr_expect_str_eq(r->respond->headers[0].name.base, "content-type");
    cr_expect_eq(r->respond->headers[0].name.len, 12);
    cr_expect_str_eq(r->respond->headers[0].value.base, "text/plain");
    cr_expect_str_eq(r->respond->headers[1].name.base, "x-count");
    cr_expect_str_eq(r->respond->headers[1].value.base, "3");
    cr_expect_eq(r->respond->headers[2].value.len, 0);
    cr_expect_str_eq(r->respond->headers[3].value.base, "a\tb");
    mg_routes_free(routes);
}

/* ---------------------------------------------------------------------------------------
 * Errors
 */
Test(routes_compile, duplicate_names_across_the_tree)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    forward: api\n"
                  "  - name: b\n"
                  "    routes:\n"
                  "      - name: a\n"
                  "        forward: api\n"
                  "  - name: b\n"
                  "    forward: api\n",
                  "routes.yaml:6:15: duplicate route name 'a' (first defined at routes.yaml:2:11)",
                  "routes.yaml:8:11: duplicate route name 'b' (first defined at routes.yaml:4:11)");
}

Test(routes_compile, names)
{
    EXPECT_ERRORS("routes:\n"
                  "  - match: {path: /a}\n"
                  "    forward: api\n"
                  "  - {name: \"\", forward: api}\n"
                  "  - {name: a/b, forward: api}\n"
                  "  - {name: [x], forward: api}\n",
                  "routes.yaml:2:5: missing key 'name'",
                  "routes.yaml:4:12: invalid route name (it must be non-empty, without '/' or control characters)",
                  "routes.yaml:5:12: invalid route name (it must be non-empty, without '/' or control characters)",
                  "routes.yaml:6:12: expected a string, got a sequence");
}

Test(routes_compile, terminals)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: none\n"
                  "    match: {path: /a}\n"
                  "  - name: two\n"
                  "    forward: api\n"
                  "    respond: {status: 200}\n"
                  "  - name: three\n"
                  "    routes: [{name: c, forward: api}]\n"
                  "    respond: {status: 200}\n"
                  "    forward: api\n"
                  "  - name: empty\n"
                  "    routes: []\n",
                  "routes.yaml:2:5: route 'none' has no terminal (forward, bridge, respond, redirect or routes)",
                  "routes.yaml:4:5: route 'two' has both forward and respond",
                  "routes.yaml:7:5: route 'three' has both forward and respond",
                  "routes.yaml:12:13: route 'empty' has an empty 'routes' list");
}

Test(routes_compile, unknown_keys)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    forwrd: api\n"
                  "  - name: b\n"
                  "    mach: {path: /x}\n"
                  "    forward: {backend: api, hots: x}\n",
                  "routes.yaml:3:5: unknown key 'forwrd' (did you mean 'forward'?)",
                  "routes.yaml:2:5: route 'a' has no terminal (forward, bridge, respond, redirect or routes)",
                  "routes.yaml:5:5: unknown key 'mach' (did you mean 'match'?)",
                  "routes.yaml:6:29: unknown key 'hots' (did you mean 'host'?)");
}

Test(routes_compile, undefined_backend)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    forward: nope\n"
                  "  - name: b\n"
                  "    forward: {backend: crn, host: crm.internal}\n"
                  "  - name: c\n"
                  "    forward: {host: crm.internal}\n"
                  "  - name: d\n"
                  "    forward: {backend: crm, host: \"a b\"}\n",
                  "routes.yaml:3:14: undefined backend 'nope'", "routes.yaml:5:24: undefined backend 'crn'",
                  "routes.yaml:7:14: missing key 'backend'",
                  "routes.yaml:9:35: invalid host (expected a host name, optionally with a port)");
}

Test(routes_compile, respond_errors)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    respond: {body: x}\n"
                  "  - name: b\n"
                  "    respond: {status: 600, bdy: x}\n"
                  "  - name: c\n"
                  "    respond:\n"
                  "      status: 200\n"
                  "      headers: {\"X A\": 1, X-B: \"a\\r\\nb\", Content-Length: 5, X-C: [1]}\n"
                  "  - name: d\n"
                  "    respond: 200\n",
                  "routes.yaml:3:14: missing key 'status'", "routes.yaml:5:28: unknown key 'bdy' (did you mean 'body'?)",
                  "routes.yaml:9:17: invalid header name (a token such as X-Reason: no spaces, ':', CR, LF or NUL)",
                  "routes.yaml:9:32: invalid header value (CR, LF, NUL and other control characters are refused)",
                  "routes.yaml:9:42: header 'Content-Length' is set by the gateway",
                  "routes.yaml:9:66: expected a string, got a sequence", "routes.yaml:11:14: expected a mapping, got a scalar");
}

Test(routes_compile, status_range)
{
    EXPECT_ERRORS("routes:\n"
                  "  - {name: a, respond: {status: 99}}\n"
                  "  - {name: b, respond: {status: 600}}\n"
                  "  - {name: c, respond: {status: -1}}\n",
                  "routes.yaml:2:33: expected an integer between 100 and 599, got '99'",
                  "routes.yaml:3:33: expected an integer between 100 and 599, got '600'",
                  "routes.yaml:4:33: expected an integer between 100 and 599, got '-1'");
}

Test(routes_compile, condition_errors_are_reported)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    match: {pth: /x}\n"
                  "    forward: api\n"
                  "  - name: b\n"
                  "    match: {method: get}\n"
                  "    forward: nope\n",
                  "routes.yaml:3:13: unknown condition 'pth' (did you mean 'path'?)",
                  "routes.yaml:6:21: method 'get' must be upper case, methods are case-sensitive (did you mean 'GET'?)",
                  "routes.yaml:7:14: undefined backend 'nope'");
}

Test(routes_compile, not_a_list)
{
    EXPECT_ERRORS("routes: {name: a}\n", "routes.yaml:1:9: expected a sequence, got a mapping");
    EXPECT_ERRORS("routes: [a]\n", "routes.yaml:1:10: expected a mapping, got a scalar");
}

/* ---------------------------------------------------------------------------------------
 * Warnings
 */
Test(routes_compile, routes_after_a_catch_all_can_never_match)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: first\n"
                                  "    match: {path: /a}\n"
                                  "    forward: api\n"
                                  "  - name: branch\n"
                                  "    routes:\n"
                                  "      - {name: inner, match: {method: GET}, forward: api}\n"
                                  "  - name: catch\n"
                                  "    forward: api\n"
                                  "  - name: dead\n"
                                  "    match: {path: /b}\n"
                                  "    forward: api\n"
                                  "  - name: dead-branch\n"
                                  "    routes:\n"
                                  "      - name: inner-catch\n"
                                  "        respond: {status: 404}\n"
                                  "      - name: inner-dead\n"
                                  "        forward: api\n");
    cr_expect_eq(errs.num_warnings, 3);
    cr_assert_eq(errs.size, 3);
    cr_expect_str_eq(
        errs.entries[0].text,
        "routes.yaml:10:5: warning: route 'dead' can never match: route 'catch' (routes.yaml:8) catches every request");
    cr_expect_str_eq(errs.entries[1].text, "routes.yaml:17:9: warning: route 'inner-dead' can never match: route 'inner-catch' "
                                           "(routes.yaml:15) catches every request");
    cr_expect_str_eq(errs.entries[2].text, "routes.yaml:13:5: warning: route 'dead-branch' can never match: route 'catch' "
                                           "(routes.yaml:8) catches every request");
    mg_routes_free(routes);
}

Test(routes_compile, branch_that_always_answers_catches_all)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: branch\n"
                                  "    routes:\n"
                                  "      - {name: inner, match: {method: GET}, forward: api}\n"
                                  "      - {name: inner-fallback, respond: {status: 405}}\n"
                                  "  - {name: dead, forward: api}\n");
    cr_assert_eq(errs.size, 1);
    cr_expect_str_eq(
        errs.entries[0].text,
        "routes.yaml:6:5: warning: route 'dead' can never match: route 'branch' (routes.yaml:2) catches every request");
    mg_routes_free(routes);
}

/* ---------------------------------------------------------------------------------------
 * Scale: names are checked without a quadratic scan, and the tree is walked in order.
 */
Test(routes_compile, many_routes)
{
    enum { N = 5000 };
    size_t cap = (size_t)N * 64 + 64, len = 0;
    char *yaml = malloc(cap);
    len += (size_t)snprintf(yaml + len, cap - len, "routes:\n");
    for (int i = 0; i != N; ++i)
        len += (size_t)snprintf(yaml + len, cap - len, "  - {name: r%d, match: {path: /p%d}, forward: api}\n", i, i);
    mg_routes_t *routes = load_ok(yaml);
    free(yaml);
    cr_expect_eq(mg_routes_count(routes), N);
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = MG_STR("GET");
    ctx.path = MG_STR("/p4321");
    const mg_route_t *r = mg_routes_match(routes, &ctx);
    cr_assert_not_null(r);
    cr_expect_str_eq(r->name, "r4321");
    mg_routes_free(routes);
}

Test(routes_compile, quotas)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: api\n"
                                  "    match: {path: {regex: '^/u/(?<user>[a-z]+)'}}\n"
                                  "    quota: {requests: 20, per: 500ms, key: \"${user}\"}\n"
                                  "    routes:\n"
                                  "      - name: leaf\n"
                                  "        quota: {requests: 3, per: 1m}\n"
                                  "        forward: api\n"
                                  "  - name: none\n"
                                  "    forward: api\n");
    const mg_route_t *api = routes->routes[0], *leaf = api->children[0], *none = routes->routes[1];
    cr_assert_not_null(api->quota);
    cr_expect_eq(api->quota->limit.requests, 20);
    cr_expect_eq(api->quota->limit.per_us, 500000);
    cr_assert_not_null(api->quota->key);
    cr_expect_eq(mg_template_source(api->quota->key).len, 7);
    cr_assert_not_null(leaf->quota);
    cr_expect_eq(leaf->quota->limit.requests, 3);
    cr_expect_eq(leaf->quota->limit.per_us, UINT64_C(60000000));
    cr_expect_null(leaf->quota->key, "no key: the tenant");
    cr_expect_null(none->quota, "no quota written: none");
    mg_routes_free(routes);
}

Test(routes_compile, order)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: accounts\n"
                                  "    match: {path: {regex: '^/a/(?<acct>[0-9]+)'}}\n"
                                  "    order: {key: \"${acct}\", priority_header: X-Priority}\n"
                                  "    routes:\n"
                                  "      - name: leaf\n"
                                  "        forward: api\n"
                                  "      - name: own\n"
                                  "        order: {key: \"${header.X-Account-Id}\"}\n"
                                  "        forward: api\n"
                                  "  - name: none\n"
                                  "    forward: api\n");
    const mg_route_t *acc = routes->routes[0], *leaf = acc->children[0], *own = acc->children[1], *none = routes->routes[1];
    cr_assert_not_null(acc->order);
    cr_assert_not_null(acc->order->key);
    cr_expect_str_eq(acc->order->priority_header, "x-priority", "lower-cased");
    cr_expect_null(leaf->order, "none of its own");
    cr_expect_eq(mg_route_order(leaf), acc, "inherited from the nearest ancestor");
    cr_expect_eq(mg_route_order(own), own);
    cr_assert_not_null(own->order);
    cr_expect_null(own->order->priority_header);
    cr_expect_null(mg_route_order(none));
    cr_expect(mg_order_is_high(MG_STR("HiGh")));
    cr_expect_not(mg_order_is_high(MG_STR("higher")));
    cr_expect_not(mg_order_is_high(MG_STR("")));
    mg_routes_free(routes);
}

Test(routes_compile, order_errors)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    order: {priority_header: X-P}\n"
                  "    forward: api\n"
                  "  - name: b\n"
                  "    order: {key: \"${usr}\", priority: high}\n"
                  "    forward: api\n"
                  "  - name: c\n"
                  "    order: \"${header.X-A}\"\n"
                  "    forward: api\n"
                  "  - name: d\n"
                  "    order: {key: x, priority_header: \"X P\"}\n"
                  "    forward: api\n",
                  "routes.yaml:3:12: missing key 'key'", "routes.yaml:6:28: unknown key 'priority'",
                  "routes.yaml:6:18: unknown variable '${usr}' (known here: tenant, host, path, query, method, header.<Name>, "
                  "query.<name>, claim.<name>, and named groups of the conditions of this route and its parents)",
                  "routes.yaml:9:12: expected a mapping, got a scalar", "routes.yaml:12:38: invalid header name 'X P'");
}

Test(routes_compile, quota_errors)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    quota: {requests: 0, per: 1s}\n"
                  "    forward: api\n"
                  "  - name: b\n"
                  "    quota: {requests: 1, per: 1s, key: \"${usr}\", burst: 2}\n"
                  "    forward: api\n"
                  "  - name: c\n"
                  "    quota: 10\n"
                  "    forward: api\n",
                  "routes.yaml:3:23: expected an integer between 1 and 1000000, got '0'", "routes.yaml:6:50: unknown key 'burst'",
                  "routes.yaml:6:40: unknown variable '${usr}' (known here: tenant, host, path, query, method, header.<Name>, "
                  "query.<name>, claim.<name>, and named groups of the conditions of this route and its parents)",
                  "routes.yaml:9:12: expected a mapping, got a scalar");
}

Test(routes_compile, find_by_name_anywhere_in_the_tree)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: top\n"
                                  "    routes:\n"
                                  "      - name: inner\n"
                                  "        respond: {status: 200}\n"
                                  "  - name: last\n"
                                  "    respond: {status: 404}\n");
    cr_assert_not_null(routes);
    cr_expect_str_eq(mg_routes_find(routes, "top")->name, "top");
    cr_expect_str_eq(mg_routes_find(routes, "inner")->name, "inner");
    cr_expect_str_eq(mg_routes_find(routes, "last")->name, "last");
    cr_expect_null(mg_routes_find(routes, "nope"));
    mg_routes_free(routes);
}

/* ---------------------------------------------------------------------------------------
 * A condition that cannot be decided (a regex past its PCRE2 limit) stops the evaluation, in
 * both the indexed and the linear walk: no route is chosen, and ctx.error names the route.
 */
TestSuite(routes_undecided, .fini = support_fini);

#define RUNAWAY_PATH "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"

/* On `path`: the chosen route (or "-") and, when undecided, "!route"; indexed and linear agree. */
static const char *choose(const mg_routes_t *routes, const char *path)
{
    static char out[2][64];
    for (int linear = 0; linear != 2; ++linear) {
        mg_ctx_t ctx;
        memset(&ctx, 0, sizeof(ctx));
        ctx.method = MG_STR("GET");
        ctx.path = mg_str(path, strlen(path));
        const mg_route_t *r = linear ? mg_routes_match_linear(routes, &ctx) : mg_routes_match(routes, &ctx);
        if (ctx.error.reason != NULL) {
            cr_expect_null(r, "%s: a route chosen although undecided", path);
            cr_expect_str_eq(ctx.error.reason, "hit the match limit");
            cr_expect_eq(ctx.num_vars, 0, "%s: variables left", path);
        }
        snprintf(out[linear], sizeof(out[linear]), "%s%s", ctx.error.reason ? "!" : "",
                 ctx.error.reason ? ctx.error.route
                 : r != NULL      ? r->name
                                  : "-");
    }
    cr_expect_str_eq(out[0], out[1], "%s: indexed and linear differ", path);
    return out[0];
}

/* Eight exact-path routes first, so that the list has an index (routes/index.c). */
#define FILLERS                                                                                                                    \
    "  - {name: f0, match: {path: /f0}, forward: api}\n  - {name: f1, match: {path: /f1}, forward: api}\n"                         \
    "  - {name: f2, match: {path: /f2}, forward: api}\n  - {name: f3, match: {path: /f3}, forward: api}\n"                         \
    "  - {name: f4, match: {path: /f4}, forward: api}\n  - {name: f5, match: {path: /f5}, forward: api}\n"                         \
    "  - {name: f6, match: {path: /f6}, forward: api}\n  - {name: f7, match: {path: {prefix: /public}}, forward: api}\n"

Test(routes_undecided, a_deny_route_never_fails_open)
{
    mg_routes_t *routes = load_ok("routes:\n" FILLERS "  - name: deny\n    match: {path: {regex: '^/(a+)+$'}}\n"
                                  "    respond: {status: 403}\n"
                                  "  - name: allow\n    forward: api\n");
    cr_expect_str_eq(choose(routes, RUNAWAY_PATH), "!deny");
    cr_expect_str_eq(choose(routes, "/aaaa"), "deny");
    cr_expect_str_eq(choose(routes, "/b"), "allow");
    cr_expect_str_eq(choose(routes, "/public/x"), "f7", "an earlier route decides before the regex runs");
    cr_expect_str_eq(choose(routes, "/f3"), "f3");
    mg_routes_free(routes);
}

Test(routes_undecided, a_not_over_an_undecided_regex_is_no_match)
{
    mg_routes_t *routes = load_ok("routes:\n" FILLERS "  - name: only-safe\n    match: {not: {path: {regex: '^/(a+)+$'}}}\n"
                                  "    forward: api\n"
                                  "  - name: refuse\n    respond: {status: 403}\n");
    cr_expect_str_eq(choose(routes, RUNAWAY_PATH), "!only-safe");
    cr_expect_str_eq(choose(routes, "/aaaa"), "refuse");
    cr_expect_str_eq(choose(routes, "/b"), "only-safe");
    mg_routes_free(routes);
}

Test(routes_undecided, in_a_branch_the_child_is_named_and_nothing_after_it_runs)
{
    mg_routes_t *routes = load_ok("routes:\n  - name: api\n    match: {path: {prefix: /}}\n    routes:\n"
                                  "      - name: deny-child\n        match: {any: [{method: POST}, {path: {regex: '^/(a+)+$'}}]}\n"
                                  "        respond: {status: 403}\n"
                                  "      - name: other-child\n        match: {method: PUT}\n        forward: api\n"
                                  "  - name: after\n    forward: api\n");
    cr_expect_str_eq(choose(routes, RUNAWAY_PATH), "!deny-child");
    cr_expect_str_eq(choose(routes, "/b"), "after");
    mg_routes_free(routes);
}

Test(routes_undecided, an_error_decided_by_another_part_is_forgotten)
{
    /* route `a` is decided (its method part fails); the error inside it must not stop `b` */
    mg_routes_t *routes = load_ok("routes:\n  - name: a\n    match: {all: [{path: {regex: '^/(a+)+$'}}, {method: POST}]}\n"
                                  "    respond: {status: 403}\n"
                                  "  - name: b\n    match: {any: [{path: {regex: '^/(a+)+$'}}, {path: {prefix: /}}]}\n"
                                  "    forward: api\n");
    cr_expect_str_eq(choose(routes, RUNAWAY_PATH), "b");
    mg_routes_free(routes);
}
