/*
 * Actions and the redirect / forward.host terminals: reading them (errors at FILE:LINE:COL),
 * then mg_routes_match + mg_route_apply on requests, as the gateway does. The document is freed
 * right after compiling, and request memory comes from an arena freed after each test.
 */
#include "support.h"

static int backend_api;

static void *resolve(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "api") == 0 ? &backend_api : NULL;
}

static mg_routes_t *loaded;

static void fini(void)
{
    mg_routes_free(loaded);
    loaded = NULL;
    support_fini();
}

TestSuite(actions, .fini = fini);
TestSuite(actions_compile, .fini = fini);
TestSuite(redirect, .fini = fini);
TestSuite(forward_host, .fini = fini);

/* ---------------------------------------------------------------------------------------
 * Helpers
 */
static mg_routes_t *load(const char *yaml)
{
    return load_with(yaml, resolve);
}

/* Loads `yaml`, which must compile; the routes are freed after the test. */
static void load_ok(const char *yaml)
{
    mg_routes_free(loaded);
    loaded = load(yaml);
    if (loaded == NULL)
        mg_errors_print(&errs, stderr);
    cr_assert_not_null(loaded);
}

static void expect_errors(const char *yaml, const char *const *messages)
{
    expect_errors_with(yaml, resolve, messages);
}

#define EXPECT_ERRORS(yaml, ...) expect_errors(yaml, (const char *const[]){__VA_ARGS__, NULL})

/* The client's headers; tests check that applying never writes to them. */
static const mg_header_t client_headers[] = {
    {MG_STR("host"), MG_STR("acme.example.com")},    {MG_STR("cookie"), MG_STR("sid=1")}, {MG_STR("x-a"), MG_STR("one")},
    {MG_STR("authorization"), MG_STR("Basic dTpw")}, {MG_STR("x-a"), MG_STR("two")},      {MG_STR("cookie"), MG_STR("theme=dark")},
};
#define NUM_CLIENT_HEADERS (sizeof(client_headers) / sizeof(client_headers[0]))

static mg_header_t headers[NUM_CLIENT_HEADERS];

static mg_ctx_t request(const char *method, const char *path, const char *query)
{
    memcpy(headers, client_headers, sizeof(headers));
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = mg_str(method, strlen(method));
    ctx.scheme = MG_STR("http");
    ctx.host = MG_STR("acme.example.com");
    ctx.path = mg_str(path, strlen(path));
    ctx.query = mg_str(query, strlen(query));
    ctx.tenant = MG_STR("acme");
    ctx.headers = headers;
    ctx.num_headers = NUM_CLIENT_HEADERS;
    ctx.alloc = (mg_alloc_t){arena_alloc, NULL};
    return ctx;
}

/* Matches and applies; the chosen route (which must exist). */
static const mg_route_t *route(mg_ctx_t *ctx, mg_route_result_t *res, int expect_ret)
{
    const mg_route_t *r = mg_routes_match(loaded, ctx);
    cr_assert_not_null(r, "no route for %.*s", (int)ctx->path.len, ctx->path.base);
    int ret = mg_route_apply(r, ctx, res);
    cr_assert_eq(ret, expect_ret, "mg_route_apply: %d (%s)", ret, res->error != NULL ? res->error : "no error");
    cr_expect(memcmp(headers, client_headers, sizeof(headers)) == 0, "the client's header array was written to");
    return r;
}

static const char *header(const mg_ctx_t *ctx, const char *name)
{
    const mg_str_t *v = mg_ctx_get_header(ctx, mg_str(name, strlen(name)));
    return v != NULL ? v->base : NULL;
}

static int count(const mg_ctx_t *ctx, const char *name)
{
    int n = 0;
    for (size_t i = 0; i != ctx->num_headers; ++i)
        n += ctx->headers[i].name.len == strlen(name) && memcmp(ctx->headers[i].name.base, name, strlen(name)) == 0;
    return n;
}

static void expect_str(mg_str_t s, const char *want)
{
    cr_expect(s.len == strlen(want) && memcmp(s.base, want, s.len) == 0, "'%.*s', want '%s'", (int)s.len, s.base, want);
}

/* ---------------------------------------------------------------------------------------
 * Applying
 */
Test(actions, crm_by_tenant)
{
    load_ok("routes:\n"
            "  - name: crm-by-tenant\n"
            "    match: {path: {prefix: /crm}}\n"
            "    actions:\n"
            "      - set_header: {X-Tenant: \"${tenant}\", Authorization: \"Bearer internal\"}\n"
            "      - remove_header: Cookie\n"
            "      - rewrite_path: \"/${tenant}/crmapp${remainder}\"\n"
            "    forward: api\n");
    mg_ctx_t ctx = request("GET", "/crm/x", "a=1&b=2");
    mg_route_result_t res;
    route(&ctx, &res, 0);
    cr_expect(res.headers_changed);
    cr_expect_str_eq(header(&ctx, "x-tenant"), "acme");
    cr_expect_str_eq(header(&ctx, "authorization"), "Bearer internal");
    cr_expect_eq(count(&ctx, "authorization"), 1);
    cr_expect_null(header(&ctx, "cookie"));
    expect_str(ctx.path, "/acme/crmapp/x");
    expect_str(ctx.query, "a=1&b=2");
    expect_str(ctx.method, "GET");
    cr_expect_eq(res.host.len, 0);
    cr_expect_eq(ctx.num_headers, 5);
    /* set_header replaced in place, added at the end */
    cr_expect_str_eq(ctx.headers[0].name.base, "host");
    cr_expect_str_eq(ctx.headers[2].name.base, "authorization");
    cr_expect_str_eq(ctx.headers[4].name.base, "x-tenant");
}

Test(actions, order_and_visibility)
{
    load_ok("routes:\n"
            "  - name: r\n"
            "    match: {path: {prefix: /api}}\n"
            "    actions:\n"
            "      - set_header: {X-First: \"1\"}\n"
            "      - set_header: {X-Second: \"${header.X-First}-2\", X-Old-Path: \"${path}\"}\n"
            "      - rewrite_path: \"/v2${remainder}\"\n"
            "      - set_header: {X-New-Path: \"${path}\"}\n"
            "      - set_method: POST\n"
            "      - set_header: {X-Method: \"${method}\"}\n"
            "      - set_query: \"q=${query.a}&was=${query}\"\n"
            "      - set_header: {X-Query: \"${query}\", X-Q: \"${query.q}\"}\n"
            "      - remove_header: X-First\n"
            "    forward: api\n");
    mg_ctx_t ctx = request("GET", "/api/items/7", "a=x%20y");
    mg_route_result_t res;
    route(&ctx, &res, 0);
    cr_expect_null(header(&ctx, "x-first"));
    cr_expect_str_eq(header(&ctx, "x-second"), "1-2");
    cr_expect_str_eq(header(&ctx, "x-old-path"), "/api/items/7");
    cr_expect_str_eq(header(&ctx, "x-new-path"), "/v2/items/7");
    cr_expect_str_eq(header(&ctx, "x-method"), "POST");
    cr_expect_str_eq(header(&ctx, "x-query"), "q=x%20y&was=a=x%20y");
    cr_expect_str_eq(header(&ctx, "x-q"), "x y");
    expect_str(ctx.method, "POST");
    expect_str(ctx.path, "/v2/items/7");
    expect_str(ctx.query, "q=x%20y&was=a=x%20y");
}

Test(actions, set_header_replaces_every_instance)
{
    load_ok("routes:\n"
            "  - name: r\n"
            "    actions: [{set_header: {x-A: new}}, {add_header: {X-B: b1}}, {add_header: {X-B: b2, x-a: added}}]\n"
            "    forward: api\n");
    mg_ctx_t ctx = request("GET", "/", "");
    mg_route_result_t res;
    route(&ctx, &res, 0);
    cr_expect_eq(count(&ctx, "x-a"), 2);
    cr_expect_str_eq(ctx.headers[2].name.base, "x-a", "where the first one was");
    cr_expect_str_eq(ctx.headers[2].value.base, "new");
    cr_expect_eq(count(&ctx, "x-b"), 2);
    cr_expect_str_eq(ctx.headers[ctx.num_headers - 3].value.base, "b1");
    cr_expect_str_eq(ctx.headers[ctx.num_headers - 2].value.base, "b2");
    cr_expect_str_eq(ctx.headers[ctx.num_headers - 1].value.base, "added");
    cr_expect_eq(ctx.num_headers, NUM_CLIENT_HEADERS - 2 + 1 + 3);
}

Test(actions, remove_then_add)
{
    load_ok("routes:\n"
            "  - name: r\n"
            "    actions:\n"
            "      - remove_header: [Cookie, X-Absent]\n"
            "      - add_header: {Cookie: \"a=${header.X-A}\"}\n"
            "    forward: api\n");
    mg_ctx_t ctx = request("GET", "/", "");
    mg_route_result_t res;
    route(&ctx, &res, 0);
    cr_expect_eq(count(&ctx, "cookie"), 1);
    cr_expect_str_eq(header(&ctx, "cookie"), "a=one", "the first X-A");
}

Test(actions, removing_an_absent_header_changes_nothing)
{
    load_ok("routes:\n"
            "  - {name: r, actions: [{remove_header: X-Nothing}], forward: api}\n");
    mg_ctx_t ctx = request("GET", "/", "");
    mg_route_result_t res;
    route(&ctx, &res, 0);
    cr_expect_not(res.headers_changed);
    cr_expect_eq(ctx.headers, headers);
    cr_expect_eq(ctx.num_headers, NUM_CLIENT_HEADERS);
}

Test(actions, rewrite_path_is_normalized_and_keeps_the_root)
{
    load_ok("routes:\n"
            "  - name: up\n"
            "    match: {path: {prefix: /up}}\n"
            "    actions: [{rewrite_path: \"/base/${header.X-Up}/end\"}]\n"
            "    forward: api\n"
            "  - name: rel\n"
            "    match: {path: {prefix: /rel}}\n"
            "    actions: [{rewrite_path: \"${remainder}\"}]\n"
            "    forward: api\n"
            "  - name: dots\n"
            "    actions: [{rewrite_path: \"/a/./b//c/../%7Ed\"}]\n"
            "    forward: api\n");
    mg_ctx_t ctx = request("GET", "/up", "");
    mg_header_t up[] = {{MG_STR("x-up"), MG_STR("../x")}};
    ctx.headers = up;
    ctx.num_headers = 1;
    mg_route_result_t res;
    route(&ctx, &res, 0);
    expect_str(ctx.path, "/base/..%2Fx/end"); /* a header value is one segment: it cannot climb */
    ctx = request("GET", "/up", "");
    up[0].value = MG_STR("../../../etc");
    ctx.headers = up;
    ctx.num_headers = 1;
    route(&ctx, &res, 0);
    expect_str(ctx.path, "/base/..%2F..%2F..%2Fetc/end");
    ctx = request("GET", "/up", "");
    up[0].value = MG_STR("..");
    ctx.headers = up;
    ctx.num_headers = 1;
    route(&ctx, &res, -1);
    cr_expect_str_eq(res.error, "rewrite_path: a variable would make a '.' or '..' path segment");
    /* a template that starts with a variable gets a leading '/' when the value has none */
    ctx = request("GET", "/rel", "k=v");
    route(&ctx, &res, 0);
    expect_str(ctx.path, "/");
    expect_str(ctx.query, "k=v");
    ctx = request("GET", "/x", "");
    route(&ctx, &res, 0);
    expect_str(ctx.path, "/a/b/~d");
}

Test(actions, set_query_empty_means_none)
{
    load_ok("routes:\n"
            "  - {name: r, actions: [{set_query: \"\"}], forward: api}\n");
    mg_ctx_t ctx = request("GET", "/", "a=1");
    mg_route_result_t res;
    route(&ctx, &res, 0);
    cr_expect_eq(ctx.query.len, 0);
}

Test(actions, crlf_is_refused_with_a_reason)
{
    load_ok("routes:\n"
            "  - name: h\n"
            "    match: {path: {prefix: /h}}\n"
            "    actions: [{set_header: {X-Ok: fine}}, {set_header: {X-Rest: \"${remainder}\"}}]\n"
            "    forward: api\n"
            "  - name: q\n"
            "    match: {path: {prefix: /q}}\n"
            "    actions: [{set_query: \"v=${query.v}\"}]\n"
            "    forward: api\n"
            "  - name: p\n"
            "    match: {path: {prefix: /p}}\n"
            "    actions: [{rewrite_path: \"/x/${header.X-Evil}\"}]\n"
            "    forward: api\n");
    mg_route_result_t res;
    mg_ctx_t ctx = request("GET", "/h/a%0d%0aInjected:%20yes", "");
    mg_ctx_set_var(&ctx, MG_STR("unrelated"), MG_STR("x"));
    route(&ctx, &res, -1);
    cr_expect_str_eq(res.error, "set_header 'x-rest': the value would contain CR, LF or NUL");
    ctx = request("GET", "/q", "v=%0D%0A");
    route(&ctx, &res, -1);
    cr_expect_str_eq(res.error, "set_query: the value would contain CR, LF or NUL");
    ctx = request("GET", "/p", "");
    mg_header_t evil[] = {{MG_STR("x-evil"), MG_STR("a\nb")}};
    ctx.headers = evil;
    ctx.num_headers = 1;
    route(&ctx, &res, -1);
    cr_expect_str_eq(res.error, "rewrite_path: the value would contain CR, LF or NUL");
}

Test(actions, captures_from_conditions)
{
    load_ok("routes:\n"
            "  - name: by-host\n"
            "    match: {host: {regex: '^(?<tenant>[a-z0-9-]+)\\.example\\.com$'}}\n"
            "    routes:\n"
            "      - name: item\n"
            "        match: {path: {regex: '^/items/(?<id>[^/]+)$'}}\n"
            "        actions:\n"
            "          - set_header: {X-Tenant: \"${tenant}\", X-Id: \"${id}\"}\n"
            "          - rewrite_path: \"/${tenant}/i/${id}\"\n"
            "          - set_query: \"id=${id}\"\n"
            "        forward: api\n"
            "      - name: search\n"
            "        match: {query: {name: q, regex: '^(?<term>.+)$'}}\n"
            "        actions: [{set_query: \"t=${term}\"}, {set_header: {X-Term: \"${term}\"}}]\n"
            "        forward: api\n");
    mg_ctx_t ctx = request("GET", "/items/a%20b", "");
    ctx.host = MG_STR("globex.example.com");
    mg_route_result_t res;
    const mg_route_t *r = route(&ctx, &res, 0);
    cr_expect_str_eq(r->name, "item");
    cr_expect_str_eq(header(&ctx, "x-tenant"), "globex", "the host's named group shadows the identified tenant");
    cr_expect_str_eq(header(&ctx, "x-id"), "a b", "a path capture is decoded into a header");
    expect_str(ctx.path, "/globex/i/a%20b");
    expect_str(ctx.query, "id=a%20b");
    /* a path capture hiding CR LF */
    ctx = request("GET", "/items/x%0D%0Ay", "");
    ctx.host = MG_STR("globex.example.com");
    route(&ctx, &res, -1);
    cr_expect_str_eq(res.error, "set_header 'x-id': the value would contain CR, LF or NUL");
    /* a query capture is a decoded value: encoded again for the query */
    ctx = request("GET", "/search", "q=a+b%26c");
    ctx.host = MG_STR("globex.example.com");
    r = route(&ctx, &res, 0);
    cr_expect_str_eq(r->name, "search");
    expect_str(ctx.query, "t=a%20b%26c");
    cr_expect_str_eq(header(&ctx, "x-term"), "a b&c");
}

Test(actions_compile, captures_are_known_below_their_condition_only)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    match: {path: {regex: '^/a/(?<x>.*)$'}}\n"
                  "    routes:\n"
                  "      - {name: a1, actions: [{set_header: {X: \"${x}\"}}], forward: api}\n"
                  "  - name: b\n"
                  "    actions: [{set_header: {X: \"${x}\"}}]\n"
                  "    forward: api\n",
                  "routes.yaml:7:32: unknown variable '${x}' (known here: tenant, host, path, query, method, header.<Name>, "
                  "query.<name>, claim.<name>, and named groups of the conditions of this route and its parents)");
}

/* ---------------------------------------------------------------------------------------
 * Branches
 */
static const char branch_yaml[] = "routes:\n"
                                  "  - name: api\n"
                                  "    match: {path: {prefix: /api}}\n"
                                  "    actions:\n"
                                  "      - set_header: {X-Branch: \"${remainder}\"}\n"
                                  "      - rewrite_path: \"/inner${remainder}\"\n"
                                  "    routes:\n"
                                  "      - name: v2\n"
                                  "        match: {path: {prefix: /api/v2}}\n"
                                  "        actions:\n"
                                  "          - set_header: {X-Leaf: \"${path}\", X-Branch: \"leaf\"}\n"
                                  "        forward: api\n"
                                  "      - name: writes\n"
                                  "        match: {method: POST}\n"
                                  "        forward: api\n"
                                  "  - name: fallback\n"
                                  "    actions: [{set_header: {X-Fallback: \"yes\"}}]\n"
                                  "    respond: {status: 404}\n";

Test(actions, branch_actions_apply_root_first)
{
    load_ok(branch_yaml);
    mg_ctx_t ctx = request("GET", "/api/v2/x", "");
    mg_route_result_t res;
    const mg_route_t *r = route(&ctx, &res, 0);
    cr_expect_str_eq(r->name, "v2");
    /* the branch's ${remainder} is the latest binding: the child's "/x" */
    expect_str(ctx.path, "/inner/x");
    cr_expect_str_eq(header(&ctx, "x-leaf"), "/inner/x", "the leaf sees the branch's rewrite");
    cr_expect_str_eq(header(&ctx, "x-branch"), "leaf", "the leaf's set_header comes after the branch's");
    cr_expect_eq(count(&ctx, "x-branch"), 1);
    cr_expect_null(header(&ctx, "x-fallback"));
}

Test(actions, a_failed_branch_applies_nothing)
{
    load_ok(branch_yaml);
    mg_ctx_t ctx = request("GET", "/api/v3/x", "");
    mg_route_result_t res;
    const mg_route_t *r = route(&ctx, &res, 0);
    cr_expect_str_eq(r->name, "fallback");
    expect_str(ctx.path, "/api/v3/x");
    cr_expect_null(header(&ctx, "x-branch"));
    cr_expect_str_eq(header(&ctx, "x-fallback"), "yes");
    cr_expect_eq(ctx.num_vars, 0, "the branch's captures are gone");
    ctx = request("POST", "/api/v3/x", "");
    r = route(&ctx, &res, 0);
    cr_expect_str_eq(r->name, "writes");
    expect_str(ctx.path, "/inner/v3/x");
}

/* ---------------------------------------------------------------------------------------
 * Reading actions
 */
Test(actions_compile, entries_in_order)
{
    load_ok("routes:\n"
            "  - name: r\n"
            "    actions:\n"
            "      - set_header: {X-B: \"2\", X-A: \"1\"}\n"
            "      - remove_header: [Cookie, x-gone]\n"
            "      - set_method: PURGE\n"
            "      - rewrite_path: /x\n"
            "      - set_query: a=1\n"
            "      - add_header: {X-C: \"3\"}\n"
            "    forward: api\n");
    const mg_route_t *r = loaded->routes[0];
    static const mg_action_kind_t kinds[] = {MG_ACTION_SET_HEADER,    MG_ACTION_SET_HEADER, MG_ACTION_REMOVE_HEADER,
                                             MG_ACTION_REMOVE_HEADER, MG_ACTION_SET_METHOD, MG_ACTION_REWRITE_PATH,
                                             MG_ACTION_SET_QUERY,     MG_ACTION_ADD_HEADER};
    static const char *const names[] = {"x-b", "x-a", "cookie", "x-gone", "PURGE", NULL, NULL, "x-c"};
    cr_assert_eq(r->num_actions, 8);
    for (size_t i = 0; i != 8; ++i) {
        cr_expect_eq(r->actions[i].kind, kinds[i], "action %zu", i);
        if (names[i] != NULL)
            cr_expect_str_eq(r->actions[i].name.base, names[i]);
        cr_expect_eq(r->actions[i].value == NULL, kinds[i] == MG_ACTION_REMOVE_HEADER || kinds[i] == MG_ACTION_SET_METHOD);
    }
    expect_str(mg_template_source(r->actions[5].value), "/x");
}

Test(actions_compile, unknown_and_malformed_actions)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    actions:\n"
                  "      - set_headers: {X-A: 1}\n"
                  "      - frobnicate: 1\n"
                  "      - {set_header: {X-A: 1}, remove_header: X-B}\n"
                  "      - {}\n"
                  "      - remove_header\n"
                  "      - rewrite_path: [x]\n"
                  "    forward: api\n"
                  "  - name: s\n"
                  "    actions: {set_header: {X-A: 1}}\n"
                  "    forward: api\n",
                  "routes.yaml:4:9: unknown action 'set_headers' (did you mean 'set_header'?)",
                  "routes.yaml:5:9: unknown action 'frobnicate' (expected one of: set_header, add_header, remove_header, "
                  "rewrite_path, set_method, set_query)",
                  "routes.yaml:6:9: an action is a mapping with one key, such as {remove_header: Cookie} (got 2 keys: write each "
                  "action as its own list item)",
                  "routes.yaml:7:9: an action is a mapping with one key, such as {remove_header: Cookie} (got 0 keys: write each "
                  "action as its own list item)",
                  "routes.yaml:8:9: expected a mapping, got a scalar", "routes.yaml:9:23: expected a string, got a sequence",
                  "routes.yaml:12:14: expected a sequence, got a mapping");
}

Test(actions_compile, header_names)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    actions:\n"
                  "      - set_header: {Host: x, \"X A\": 1, Content-Length: 1, Connection: close}\n"
                  "      - add_header: {Proxy-Authorization: x, TE: trailers, X-Request-Id: x, \":path\": /x}\n"
                  "      - remove_header: [Transfer-Encoding, Upgrade, X-Forwarded-Host, Keep-Alive, Trailer]\n"
                  "      - set_header: {X-Dup: 1, x-dup: 2}\n"
                  "      - set_header: {}\n"
                  "      - remove_header: []\n"
                  "    forward: api\n",
                  "routes.yaml:4:22: header 'Host' is set by the gateway (use forward.host)",
                  "routes.yaml:4:31: invalid header name (a token such as X-Tenant: no spaces, ':', CR, LF or NUL)",
                  "routes.yaml:4:41: header 'Content-Length' is set by the gateway",
                  "routes.yaml:4:60: header 'Connection' is hop-by-hop: the gateway strips it",
                  "routes.yaml:5:22: header 'Proxy-Authorization' is hop-by-hop: the gateway strips it",
                  "routes.yaml:5:46: header 'TE' is hop-by-hop: the gateway strips it",
                  "routes.yaml:5:60: header 'X-Request-Id' is set by the gateway",
                  "routes.yaml:5:77: pseudo-header ':path' cannot be changed by actions (use rewrite_path, set_method or "
                  "forward.host)",
                  "routes.yaml:6:25: header 'Transfer-Encoding' is hop-by-hop: the gateway strips it",
                  "routes.yaml:6:44: header 'Upgrade' is hop-by-hop: the gateway strips it",
                  "routes.yaml:6:53: header 'X-Forwarded-Host' is set by the gateway",
                  "routes.yaml:6:71: header 'Keep-Alive' is hop-by-hop: the gateway strips it",
                  "routes.yaml:6:83: header 'Trailer' is hop-by-hop: the gateway strips it",
                  "routes.yaml:7:32: header 'x-dup' is set twice in one set_header",
                  "routes.yaml:8:21: 'set_header' needs at least one header ({Name: value})",
                  "routes.yaml:9:24: 'remove_header' needs at least one header name");
}

Test(actions_compile, set_method)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    actions:\n"
                  "      - set_method: get\n"
                  "      - set_method: \"GE T\"\n"
                  "      - set_method: [GET]\n"
                  "      - set_method: \"\"\n"
                  "    forward: api\n",
                  "routes.yaml:4:21: method 'get' must be upper case, methods are case-sensitive (did you mean 'GET'?)",
                  "routes.yaml:5:21: invalid method 'GE T' (a method is a token such as GET or PURGE)",
                  "routes.yaml:6:21: expected a string, got a sequence",
                  "routes.yaml:7:21: invalid method '' (a method is a token such as GET or PURGE)");
}

Test(actions_compile, templates_are_checked_where_they_are_used)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: exact\n"
                  "    match: {path: /a}\n"
                  "    actions: [{rewrite_path: \"/b${remainder}\"}]\n"
                  "    forward: api\n"
                  "  - name: branch\n"
                  "    match: {path: {prefix: /p}}\n"
                  "    routes:\n"
                  "      - name: child\n"
                  "        actions: [{set_header: {X-R: \"${remainder}\"}}, {set_query: \"${nope}\"}]\n"
                  "        forward: api\n"
                  "  - name: paths\n"
                  "    actions: [{rewrite_path: \"x/y\"}, {rewrite_path: \"\"}, {rewrite_path: \"/a?b\"}]\n"
                  "    forward: api\n",
                  "routes.yaml:4:30: unknown variable '${remainder}' (known here: tenant, host, path, query, method, "
                  "header.<Name>, query.<name>, claim.<name>, and named groups of the conditions of this route and its parents)",
                  "routes.yaml:10:68: unknown variable '${nope}' (known here: tenant, host, path, query, method, remainder, "
                  "header.<Name>, query.<name>, claim.<name>, and named groups of the conditions of this route and its parents)",
                  "routes.yaml:13:30: a path must start with '/'",
                  "routes.yaml:13:53: empty path (rewrite_path needs at least '/')",
                  "routes.yaml:13:73: a path cannot contain spaces, '?' or '#' (use set_query for the query)");
}

Test(actions_compile, a_bad_condition_adds_no_unknown_variable_errors)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    match: {pth: {prefix: /x}}\n"
                  "    actions: [{rewrite_path: \"/y${remainder}\"}]\n"
                  "    forward: api\n",
                  "routes.yaml:3:13: unknown condition 'pth' (did you mean 'path'?)");
}

/* ---------------------------------------------------------------------------------------
 * redirect
 */
Test(redirect, reading)
{
    load_ok("routes:\n"
            "  - {name: a, redirect: {location: /new}}\n"
            "  - {name: b, redirect: {location: \"https://x${path}\", status: 308}}\n");
    cr_expect_eq(loaded->routes[0]->kind, MG_ROUTE_REDIRECT);
    cr_expect_eq(loaded->routes[0]->redirect->status, 302);
    cr_expect_eq(loaded->routes[1]->redirect->status, 308);
    expect_str(mg_template_source(loaded->routes[1]->redirect->location), "https://x${path}");
}

Test(redirect, errors)
{
    EXPECT_ERRORS("routes:\n"
                  "  - {name: a, redirect: {location: /x, status: 200}}\n"
                  "  - {name: b, redirect: {status: 301}}\n"
                  "  - {name: c, redirect: {location: \"\"}}\n"
                  "  - {name: d, redirect: /x}\n"
                  "  - {name: e, redirect: {location: /x, code: 301}}\n"
                  "  - {name: f, redirect: {location: \"/${nope}\"}, forward: api}\n"
                  "  - {name: g, redirect: {location: \"/a b\", status: 1000}}\n",
                  "routes.yaml:2:48: redirect status must be 301, 302, 307 or 308", "routes.yaml:3:25: missing key 'location'",
                  "routes.yaml:4:36: empty redirect location", "routes.yaml:5:25: expected a mapping, got a scalar",
                  "routes.yaml:6:40: unknown key 'code'", "routes.yaml:7:5: route 'f' has both forward and redirect",
                  "routes.yaml:8:52: expected an integer between 100 and 599, got '1000'",
                  "routes.yaml:8:36: a URL cannot contain spaces, '?' or '#'");
}

Test(redirect, location_is_expanded)
{
    load_ok("routes:\n"
            "  - name: old\n"
            "    match: {path: {prefix: /old}}\n"
            "    redirect: {location: \"https://new.example.com/n${remainder}?from=${query.from}\", status: 301}\n");
    mg_ctx_t ctx = request("GET", "/old/a%20b", "from=x%26y");
    mg_route_result_t res;
    route(&ctx, &res, 0);
    expect_str(res.location, "https://new.example.com/n/a%20b?from=x%26y");
    ctx = request("GET", "/old", "from=%0d%0aSet-Cookie:%20x");
    route(&ctx, &res, -1);
    cr_expect_str_eq(res.error, "redirect location: the value would contain CR, LF or NUL");
}

/* ---------------------------------------------------------------------------------------
 * forward.host
 */
Test(forward_host, literal_and_template)
{
    load_ok("routes:\n"
            "  - name: lit\n"
            "    match: {path: /lit}\n"
            "    forward: {backend: api, host: \"crm.internal:8080\"}\n"
            "  - name: tpl\n"
            "    forward: {backend: api, host: \"${header.X-Backend}\"}\n");
    mg_ctx_t ctx = request("GET", "/lit", "");
    mg_route_result_t res;
    route(&ctx, &res, 0);
    expect_str(res.host, "crm.internal:8080");
    /* an empty expansion keeps the client's Host */
    ctx = request("GET", "/tpl", "");
    route(&ctx, &res, 0);
    cr_expect_eq(res.host.len, 0);
    static const char *const bad[] = {"a/b", "user@host", "a b", "a\tb", "a?b", "a#b", "a\\b", "a\rb"};
    for (size_t i = 0; i != sizeof(bad) / sizeof(bad[0]); ++i) {
        ctx = request("GET", "/tpl", "");
        mg_header_t h[] = {{MG_STR("x-backend"), mg_str(bad[i], strlen(bad[i]))}};
        ctx.headers = h;
        ctx.num_headers = 1;
        route(&ctx, &res, -1);
        cr_expect(strncmp(res.error, "forward.host: ", 14) == 0, "%s: %s", bad[i], res.error);
    }
    ctx = request("GET", "/tpl", "");
    mg_header_t ok[] = {{MG_STR("x-backend"), MG_STR("svc-3.internal")}};
    ctx.headers = ok;
    ctx.num_headers = 1;
    route(&ctx, &res, 0);
    expect_str(res.host, "svc-3.internal");
}

Test(forward_host, errors)
{
    EXPECT_ERRORS("routes:\n"
                  "  - {name: a, forward: {backend: api, host: \"${nope}.internal\"}}\n"
                  "  - {name: b, forward: {backend: api, host: \"a/${tenant}\"}}\n"
                  "  - {name: c, forward: {backend: api, host: \"${tenant\"}}\n",
                  "routes.yaml:2:45: unknown variable '${nope}' (known here: tenant, host, path, query, method, header.<Name>, "
                  "query.<name>, claim.<name>, and named groups of the conditions of this route and its parents)",
                  "routes.yaml:3:45: invalid host (expected a host name, optionally with a port)",
                  "routes.yaml:4:45: '${' without a closing '}' (write $$ for a literal '$')");
}
