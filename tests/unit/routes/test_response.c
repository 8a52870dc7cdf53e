/*
 * What a route does to its answer (routes/response.c, actions.c, cors.c): `response:` read with
 * its errors at FILE:LINE:COL and applied to an answer's fields, ancestors first, `always` ones
 * only on the gateway's own answers; `cors:` and `compress:` resolved from the nearest route;
 * the CORS decisions of the Fetch standard's protocol.
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

TestSuite(response, .fini = fini);
TestSuite(response_compile, .fini = fini);
TestSuite(cors, .fini = fini);

static void load_ok(const char *yaml)
{
    mg_routes_free(loaded);
    loaded = load_with(yaml, resolve);
    if (loaded == NULL)
        mg_errors_print(&errs, stderr);
    cr_assert_not_null(loaded);
}

#define EXPECT_ERRORS(yaml, ...) expect_errors_with(yaml, resolve, (const char *const[]){__VA_ARGS__, NULL})

static mg_ctx_t request(const char *path)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = MG_STR("GET");
    ctx.scheme = MG_STR("http");
    ctx.host = MG_STR("acme.example.com");
    ctx.path = mg_str(path, strlen(path));
    ctx.query = MG_STR("");
    ctx.tenant = MG_STR("acme");
    ctx.alloc = (mg_alloc_t){arena_alloc, NULL};
    return ctx;
}

static const mg_header_t backend_fields[] = {
    {MG_STR("content-type"), MG_STR("application/json")},
    {MG_STR("x-powered-by"), MG_STR("PHP/5.1")},
    {MG_STR("cache-control"), MG_STR("no-cache")},
};

static mg_fields_t fields;

/* The answer's maker owns its fields: a copy, edited in place, grown when full (3 is full). */
static mg_ctx_response_t answer(int status)
{
    fields.items = arena_alloc(NULL, 3 * sizeof(*fields.items));
    memcpy(fields.items, backend_fields, sizeof(backend_fields));
    fields.size = fields.capacity = 3;
    fields.alloc = (mg_alloc_t){arena_alloc, NULL};
    mg_ctx_response_t res = {.status = status, .ops = &mg_fields_array_ops, .fields = &fields};
    snprintf(res.status_text, sizeof(res.status_text), "%u", (unsigned)status % 1000u);
    return res;
}

static const char *field(const mg_ctx_response_t *res, const char *name, size_t nth)
{
    const mg_fields_t *f = res->fields;
    for (size_t i = 0; i != f->size; ++i)
        if (f->items[i].name.len == strlen(name) && memcmp(f->items[i].name.base, name, strlen(name)) == 0 && nth-- == 0)
            return f->items[i].value.base;
    return NULL;
}

/* The route for `path` with its answer's fields edited; *changed whether they were. */
static mg_ctx_response_t apply(const char *path, int status, int gateway_made, int *changed, unsigned *failed)
{
    mg_ctx_t ctx = request(path);
    const mg_route_t *r = mg_routes_match(loaded, &ctx);
    cr_assert_not_null(r);
    mg_ctx_response_t res = answer(status);
    *failed = 0;
    *changed = mg_route_response_apply(r, &ctx, gateway_made, &res, failed);
    cr_expect_null(ctx.response, "the answer is the context's only while the actions run");
    return res;
}

/* ---------------------------------------------------------------------------------------
 * Applying
 */
static const char *const tree =
    "routes:\n"
    "  - name: site\n"
    "    response:\n"
    "      - {set_header: {Strict-Transport-Security: max-age=600}, always: true}\n"
    "      - {remove_header: [X-Powered-By]}\n"
    "      - {add_header: {X-Layer: branch}}\n"
    "    routes:\n"
    "      - name: api\n"
    "        match: {path: {regex: '^/api/(?<item>[a-z]+)$'}}\n"
    "        response:\n"
    "          - {add_header: {X-Layer: leaf}}\n"
    "          - {set_header: {X-Echo: '${status} ${item} ${response.header.content-type} ${tenant}'}}\n"
    "          - {set_header: {X-Again: '${response.header.x-echo}'}, always: true}\n"
    "        forward: api\n"
    "      - {name: plain, forward: api}\n";

Test(response, ancestors_first_later_ones_see_earlier_fields)
{
    load_ok(tree);
    int changed;
    unsigned failed;
    mg_ctx_response_t res = apply("/api/books", 201, 0, &changed, &failed);
    cr_expect(changed);
    cr_expect_eq(failed, 0);
    cr_expect_str_eq(field(&res, "strict-transport-security", 0), "max-age=600");
    cr_expect_null(field(&res, "x-powered-by", 0));
    cr_expect_str_eq(field(&res, "x-layer", 0), "branch");
    cr_expect_str_eq(field(&res, "x-layer", 1), "leaf");
    cr_expect_str_eq(field(&res, "x-echo", 0), "201 books application/json acme");
    cr_expect_str_eq(field(&res, "x-again", 0), "201 books application/json acme");
    cr_expect_str_eq(field(&res, "cache-control", 0), "no-cache");
}

Test(response, gateway_made_answers_get_the_always_ones_only)
{
    load_ok(tree);
    int changed;
    unsigned failed;
    mg_ctx_response_t res = apply("/api/books", 502, 1, &changed, &failed);
    cr_expect(changed);
    cr_expect_str_eq(field(&res, "strict-transport-security", 0), "max-age=600");
    cr_expect_str_eq(field(&res, "x-powered-by", 0), "PHP/5.1");
    cr_expect_null(field(&res, "x-layer", 0));
    cr_expect_null(field(&res, "x-echo", 0));
    cr_expect_str_eq(field(&res, "x-again", 0), "", "x-echo was never set: an absent field is empty");
    cr_expect(mg_route_has_response_actions(loaded->routes[0]->children[1], 1));
    cr_expect(mg_route_response_needs_ctx(loaded->routes[0]->children[0]));
    cr_expect_not(mg_route_response_needs_ctx(loaded->routes[0]->children[1]));
}

Test(response, a_value_a_variable_would_split_is_left_out)
{
    load_ok("routes:\n"
            "  - name: r\n"
            "    match: {path: {regex: '^/(?<v>.*)$'}}\n"
            "    response: [{set_header: {X-V: '${v}', X-Fine: yes}}]\n"
            "    forward: api\n");
    int changed;
    unsigned failed;
    mg_ctx_response_t res = apply("/a%0D%0Ab", 200, 0, &changed, &failed);
    cr_expect_eq(failed, 1);
    cr_expect_null(field(&res, "x-v", 0));
    cr_expect_str_eq(field(&res, "x-fine", 0), "yes");
}

Test(response, nearest_cors_and_compress_win)
{
    load_ok("routes:\n"
            "  - name: b\n"
            "    cors: {origins: ['https://a.example']}\n"
            "    compress: {types: [application/json]}\n"
            "    routes:\n"
            "      - {name: off, match: {path: /off}, compress: off, forward: api}\n"
            "      - {name: own, match: {path: /own}, cors: {origins: ['*']}, forward: api}\n"
            "      - {name: inherit, forward: api}\n"
            "  - {name: none, forward: api}\n");
    const mg_route_t *b = loaded->routes[0], *off = b->children[0], *own = b->children[1], *inherit = b->children[2];
    cr_expect_eq(mg_route_cors(off), b->response->cors);
    cr_expect_eq(mg_route_cors(own), own->response->cors);
    cr_expect_eq(mg_route_cors(inherit), b->response->cors);
    cr_expect(mg_route_compress(off)->off);
    cr_expect_eq(mg_route_compress(inherit), b->response->compress);
    cr_expect_null(loaded->routes[1]->response_from);
    cr_expect_null(mg_route_cors(loaded->routes[1]));
    cr_expect(loaded->edits_answers);
}

/* ---------------------------------------------------------------------------------------
 * Reading
 */
Test(response_compile, refused_names_and_shapes)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    response:\n"
                  "      - {set_header: {Content-Length: '1'}}\n"
                  "      - {remove_header: Date}\n"
                  "      - {set_header: {Transfer-Encoding: chunked}}\n"
                  "      - {set_header: {Content-Encoding: gzip}}\n"
                  "      - {rewrite_path: /x}\n"
                  "      - {set_header: {X-A: a}, add_header: {X-B: b}}\n"
                  "      - {always: true}\n"
                  "      - {set_header: {X-A: a}, always: maybe}\n"
                  "    forward: api\n",
                  "routes.yaml:4:23: header 'Content-Length' frames the message: the gateway writes it",
                  "routes.yaml:5:25: header 'Date' is written by the gateway (RFC 9110 6.6.1)",
                  "routes.yaml:6:23: header 'Transfer-Encoding' frames the message: the gateway writes it",
                  "routes.yaml:7:23: header 'Content-Encoding' is the body's coding: only `compress:` may change it",
                  "routes.yaml:8:10: unknown response action 'rewrite_path' (expected one of: set_header, add_header, "
                  "remove_header; the request's path, method and query are for `actions:`)",
                  "routes.yaml:9:9: a response item is one action, such as {set_header: {X-Frame-Options: DENY}}, with "
                  "`always: true` beside it when the gateway's own answers get it too (got 2 actions: write each as its own item)",
                  "routes.yaml:10:9: a response item is one action, such as {set_header: {X-Frame-Options: DENY}}, with "
                  "`always: true` beside it when the gateway's own answers get it too (got 0 actions: write each as its own item)",
                  "routes.yaml:11:40: expected true or false, got 'maybe'");
}

Test(response_compile, a_value_written_with_cr_or_lf_is_refused_at_load)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    response: [{set_header: {X-A: \"a\\r\\nSet-Cookie: x=1\"}, always: true}]\n"
                  "    forward: api\n",
                  "routes.yaml:3:35: a header value cannot contain control characters (CR, LF, NUL...)");
}

Test(response_compile, the_answers_variables_are_known_in_response_actions_only)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    actions: [{set_header: {X-S: '${status}'}}]\n"
                  "    forward: api\n",
                  "routes.yaml:3:34: unknown variable '${status}' (the answer's variables are only known in response actions; "
                  "known here: tenant, host, path, query, method, header.<Name>, query.<name>, claim.<name>, and named groups of "
                  "the conditions of this route and its parents)");
    load_ok("routes:\n"
            "  - {name: r, response: [{set_header: {X-S: '${status}', X-T: '${response.header.X-Up}'}}], forward: api}\n");
}

/* ---------------------------------------------------------------------------------------
 * CORS decisions
 */
static const mg_cors_t *policy(const char *cors)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml), "routes:\n  - name: r\n    cors: %s\n    forward: api\n", cors);
    load_ok(yaml);
    return mg_route_cors(loaded->routes[0]);
}

static const char *answer_field(const mg_cors_answer_t *a, const char *name)
{
    for (size_t i = 0; i != a->num_headers; ++i)
        if (strcmp(a->headers[i].name.base, name) == 0) {
            char *copy = arena_alloc(NULL, a->headers[i].value.len + 1);
            memcpy(copy, a->headers[i].value.base, a->headers[i].value.len);
            copy[a->headers[i].value.len] = '\0';
            return copy;
        }
    return NULL;
}

Test(cors, origins_of_every_kind)
{
    const mg_cors_t *c = policy("{origins: ['https://App.example.com', '*.example.org', 'https://*.example.net:8443', "
                                "{regex: 'https://(red|blue)\\.example\\.io'}]}");
    static const char *const allowed[] = {"https://app.example.com",
                                          "HTTPS://APP.EXAMPLE.COM",
                                          "http://a.example.org",
                                          "https://a.b.example.org",
                                          "https://x.example.net:8443",
                                          "https://blue.example.io",
                                          NULL};
    static const char *const refused[] = {"http://app.example.com",
                                          "https://app.example.com:443",
                                          "https://example.org",
                                          "https://a.example.org.evil",
                                          "https://aexample.org",
                                          "ftp://a.example.org",
                                          "https://x.example.net",
                                          "http://x.example.net:8443",
                                          "https://red.example.io.evil",
                                          "https://xred.example.io",
                                          "null",
                                          "",
                                          NULL};
    for (size_t i = 0; allowed[i] != NULL; ++i)
        cr_expect(mg_cors_allows_origin(c, mg_str(allowed[i], strlen(allowed[i]))), "%s", allowed[i]);
    for (size_t i = 0; refused[i] != NULL; ++i)
        cr_expect_not(mg_cors_allows_origin(c, mg_str(refused[i], strlen(refused[i]))), "%s", refused[i]);
    cr_expect_not(mg_cors_allows_origin(c, MG_STR_NULL));
}

Test(cors, preflight_answers_and_refusals)
{
    const mg_cors_t *c = policy("{origins: ['https://a.example'], methods: [GET, PUT], headers: [Content-Type, X-Trace], "
                                "credentials: true, max_age: 10m}");
    mg_cors_answer_t a;
    mg_cors_preflight(c, MG_STR("https://a.example"), MG_STR("PUT"), MG_STR("content-type,X-Trace"), &a);
    cr_assert_null(a.refusal);
    cr_expect_str_eq(answer_field(&a, "access-control-allow-origin"), "https://a.example");
    cr_expect_str_eq(answer_field(&a, "access-control-allow-credentials"), "true");
    cr_expect_str_eq(answer_field(&a, "access-control-allow-methods"), "GET, PUT");
    cr_expect_str_eq(answer_field(&a, "access-control-allow-headers"), "content-type, x-trace");
    cr_expect_str_eq(answer_field(&a, "access-control-max-age"), "600");
    cr_expect_str_eq(answer_field(&a, "vary"), "Origin");

    mg_cors_preflight(c, MG_STR("https://a.example"), MG_STR("put"), MG_STR_NULL, &a);
    cr_expect_str_eq(a.refusal, "the method is not allowed", "methods are case-sensitive");
    mg_cors_preflight(c, MG_STR("https://a.example"), MG_STR("GET"), MG_STR("x-trace, x-other"), &a);
    cr_expect_str_eq(a.refusal, "a request header is not allowed");
    cr_expect(a.refused.len == 7 && memcmp(a.refused.base, "x-other", 7) == 0);
    cr_expect_null(answer_field(&a, "access-control-allow-origin"));
    mg_cors_preflight(c, MG_STR("https://b.example"), MG_STR("GET"), MG_STR_NULL, &a);
    cr_expect_str_eq(a.refusal, "the origin is not allowed");
    cr_expect_eq(a.num_headers, 1, "a refusal has Vary only");
}

Test(cors, actual_requests)
{
    const mg_cors_t *c = policy("{origins: ['*'], expose: [X-Total, X-Request-Id]}");
    mg_cors_answer_t a;
    mg_cors_actual(c, MG_STR("https://anyone.example"), &a);
    cr_expect_str_eq(answer_field(&a, "access-control-allow-origin"), "*");
    cr_expect_str_eq(answer_field(&a, "access-control-expose-headers"), "x-total, x-request-id");
    cr_expect_null(answer_field(&a, "vary"), "\"*\" without credentials does not depend on the origin");
    c = policy("{origins: ['https://a.example']}");
    mg_cors_actual(c, MG_STR_NULL, &a);
    cr_expect_null(a.refusal);
    cr_expect_eq(a.num_headers, 1);
    cr_expect_str_eq(answer_field(&a, "vary"), "Origin");
    mg_cors_actual(c, MG_STR("https://a.example"), &a);
    cr_expect_str_eq(answer_field(&a, "access-control-allow-origin"), "https://a.example");
    cr_expect_null(answer_field(&a, "access-control-allow-credentials"));
}

Test(cors, policy_errors)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    cors: {origins: ['*.example.com', '*'], credentials: true}\n"
                  "    forward: api\n",
                  "routes.yaml:3:21: \"*\" allows every origin: the others listed beside it say nothing",
                  "routes.yaml:3:58: credentials: true with the wildcard origin '*.example.com': name each origin, or use "
                  "{regex: ...}");
    EXPECT_ERRORS(
        "routes:\n"
        "  - name: r\n"
        "    cors: {origins: ['https://a.example/x', '*.', 'a*.example.com'], methods: [get], max_age: 25h}\n"
        "    forward: api\n",
        "routes.yaml:3:22: invalid origin 'https://a.example/x' (an origin is scheme://host[:port] with nothing after it, "
        "such as https://app.example.com)",
        "routes.yaml:3:45: invalid origin wildcard '*.' (expected *.example.com, or with a scheme and port: "
        "https://*.example.com:8443; '*' stands for one or more labels in front of the domain)",
        "routes.yaml:3:51: invalid origin wildcard 'a*.example.com' (expected *.example.com, or with a scheme and port: "
        "https://*.example.com:8443; '*' stands for one or more labels in front of the domain)",
        "routes.yaml:3:80: method 'get' must be upper case, methods are case-sensitive (did you mean 'GET'?)",
        "routes.yaml:3:95: max_age is whole seconds, at most 24h (browsers cap it lower: Chromium at 2h, Firefox at 24h)");
}
