/*
 * libFuzzer target: a random route tree and a random request, both drawn from the input
 * bytes. Properties checked on every input:
 *   - the indexed match (mg_routes_match) and plain linear evaluation choose the same route
 *     and leave the same variables: the index may only skip routes that cannot match; a
 *     condition that cannot be decided (a regex past its limit) stops both at the same route;
 *   - applying the chosen route either refuses the request (400) or yields a path that is
 *     normalized and headers, host and location free of CR, LF and NUL.
 * Request paths include ";params" segments, so the index's walk of a path's key is compared
 * with the conditions' (fuzz_template checks the template rules themselves).
 * The tree is written as YAML and compiled by the real loader, so every condition kind,
 * action and template goes through the code users' files go through.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routes/routes.h"
#include "arena.h"

/* ---------------------------------------------------------------------------------------
 * Drawing choices from the input
 */
typedef struct draw {
    const uint8_t *p, *end;
} draw_t;

static unsigned pick(draw_t *d, unsigned n)
{
    return d->p < d->end ? *d->p++ % n : 0;
}

#define PICK(d, array) (array)[pick((d), sizeof(array) / sizeof((array)[0]))]

typedef struct text {
    char buf[16384];
    size_t len;
    int overflow;
} text_t;

static void put(text_t *t, const char *s)
{
    size_t n = strlen(s);
    if (t->len + n + 1 > sizeof(t->buf)) {
        t->overflow = 1;
        return;
    }
    memcpy(t->buf + t->len, s, n + 1);
    t->len += n;
}

/* ---------------------------------------------------------------------------------------
 * The tree
 */
static const char *const leaf_conds[] = {"{path: /}",
                                         "{path: /a}",
                                         "{path: /a/b}",
                                         "{path: {prefix: /a}}",
                                         "{path: {prefix: /a/b}}",
                                         "{path: {prefix: /}}",
                                         "{path: {prefix: /b}}",
                                         "{path: {regex: '^/(?<p>[a-z]+)'}}",
                                         "{method: GET}",
                                         "{method: [POST, PUT]}",
                                         "{host: a.example.com}",
                                         "{host: b.example.com}",
                                         "{host: '*.example.com'}",
                                         "{host: {regex: '^(?<tenant>[a-z]+)\\.example\\.com$'}}",
                                         "{header: {name: x-a, equals: v}}",
                                         "{header: {name: x-a, prefix: v}}",
                                         "{header: {name: x-a, contains: x}}",
                                         "{header: {name: x-b, present: true}}",
                                         "{header: {name: x-a, regex: '^(?<h>.*)$'}}",
                                         "{query: {name: q, equals: '1'}}",
                                         "{query: {name: q, present: true}}",
                                         "{query: {name: q, regex: '^(?<qv>.*)$'}}",
                                         "{header: {name: x-a, regex: '^(a+)+$'}}", /* past its limit on aaa...! */
                                         "{websocket: true}",
                                         "{tenant: acme}",
                                         "{all: [{host: a.example.com}, {path: {prefix: /a}}]}",
                                         "{host: a.example.com, path: /a/b}"};

static const char *const actions[] = {
    "{set_header: {x-out: '${host}'}}", "{add_header: {x-out: '${header.x-a}'}}", "{remove_header: x-a}",
    "{rewrite_path: '/r${path}'}",      "{rewrite_path: '/${query.q}/x'}",        "{set_method: PATCH}",
    "{set_query: 'q=${method}'}",       "{set_header: {x-q: '${query.q}'}}",      "{rewrite_path: '/..${path}'}",
    "{set_header: {x-t: '${tenant}'}}"};

static const char *const terminals[] = {"respond: {status: 200}", "forward: b", "forward: {backend: b, host: '${header.x-a}'}",
                                        "redirect: {location: 'https://${host}${path}?${query}'}",
                                        "forward: {backend: b, host: 'h-${query.q}'}"};

static void put_cond(draw_t *d, text_t *t, int depth)
{
    unsigned k = pick(d, depth < 3 ? 8 : 5);
    if (k < 5) {
        put(t, PICK(d, leaf_conds));
    } else if (k == 7) {
        put(t, "{not: ");
        put_cond(d, t, depth + 1);
        put(t, "}");
    } else {
        put(t, k == 5 ? "{all: [" : "{any: [");
        put_cond(d, t, depth + 1);
        put(t, ", ");
        put_cond(d, t, depth + 1);
        put(t, "]}");
    }
}

static void put_routes(draw_t *d, text_t *t, int depth, unsigned *serial);

static void put_route(draw_t *d, text_t *t, int depth, unsigned *serial)
{
    char name[32];
    snprintf(name, sizeof(name), "{name: r%u", (*serial)++);
    put(t, name);
    if (pick(d, 4) != 0) {
        put(t, ", match: ");
        put_cond(d, t, 0);
    }
    if (pick(d, 3) == 0) {
        put(t, ", actions: [");
        put(t, PICK(d, actions));
        if (pick(d, 2))
            put(t, ", "), put(t, PICK(d, actions));
        put(t, "]");
    }
    if (depth < 2 && pick(d, 4) == 0) {
        put(t, ", routes: ");
        put_routes(d, t, depth + 1, serial);
    } else {
        put(t, ", ");
        put(t, PICK(d, terminals));
    }
    put(t, "}");
}

static void put_routes(draw_t *d, text_t *t, int depth, unsigned *serial)
{
    /* up to 24 at the top level, enough for the index to be built */
    unsigned n = 1 + pick(d, depth == 0 ? 24 : 6);
    put(t, "[");
    for (unsigned i = 0; i != n; ++i) {
        if (i != 0)
            put(t, ", ");
        put_route(d, t, depth, serial);
    }
    put(t, "]");
}

/* ---------------------------------------------------------------------------------------
 * The request
 */
static const char *const methods[] = {"GET", "POST", "PUT", "DELETE", "HEAD"};
static const char *const hosts[] = {"a.example.com", "b.example.com", "x.a.example.com", "example.com", ""};
/* ";params" segments exercise the index's walk of the path's key (mg_path_skip_params). */
static const char *const segments[] = {"/a",   "/b", "/ab",    "/c",   "/..", "/.",    "//",  "/%2e%2e", "/%0d%0a",
                                       "/%41", "/",  "/x%2Fy", "/a;x", "/;p", "/..;x", "/b;", "/.;"};
static const char *const queries[] = {"", "q=1", "q=%0d%0a", "a=b&q=2", "q", "q=%2e%2e", "q=a+b&q=3", "q=..%2F..%2Fa", "q=..;x"};
static const mg_header_t header_pool[] = {{{"x-a", 3}, {"v", 1}},      {{"x-a", 3}, {"vx", 2}},
                                          {{"x-a", 3}, {"xv", 2}},     {{"x-b", 3}, {"", 0}},
                                          {{"x-a", 3}, {"a\tb", 3}},   {{"cookie", 6}, {"c=1", 3}},
                                          {{"x-a", 3}, {"%0d%0a", 6}}, {{"x-a", 3}, {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", 33}}};

typedef struct request {
    char raw_path[256];
    char path[256];
    mg_header_t headers[4];
    mg_ctx_t ctx;
} request_t;

static int draw_request(draw_t *d, request_t *rq)
{
    size_t len = 0;
    unsigned n = pick(d, 5);
    rq->raw_path[0] = '/';
    rq->raw_path[1] = '\0';
    len = n == 0 ? 1 : 0;
    for (unsigned i = 0; i != n; ++i) {
        const char *s = PICK(d, segments);
        memcpy(rq->raw_path + len, s, strlen(s) + 1);
        len += strlen(s);
    }
    long plen = mg_path_normalize(rq->raw_path, len, rq->path);
    if (plen < 0)
        return -1; /* the gateway answers 400 before matching */
    unsigned nh = pick(d, 5);
    for (unsigned i = 0; i != nh; ++i)
        rq->headers[i] = PICK(d, header_pool);
    const char *query = PICK(d, queries);
    rq->ctx = (mg_ctx_t){.method = mg_str(PICK(d, methods), 0),
                         .scheme = MG_STR("http"),
                         .host = mg_str(PICK(d, hosts), 0),
                         .path = mg_str(rq->path, (size_t)plen),
                         .query = mg_str(query, strlen(query)),
                         .peer = MG_STR("127.0.0.1"),
                         .headers = rq->headers,
                         .num_headers = nh,
                         .websocket = (int)pick(d, 2),
                         .tenant = pick(d, 2) ? MG_STR("acme") : MG_STR(""),
                         .alloc = {arena_alloc, NULL}};
    rq->ctx.method.len = strlen(rq->ctx.method.base);
    rq->ctx.host.len = strlen(rq->ctx.host.base);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Properties
 */
static void *resolve(void *arg, const char *name)
{
    return strcmp(name, "b") == 0 ? (void *)resolve : NULL;
}

static int str_eq(mg_str_t a, mg_str_t b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.base, b.base, a.len) == 0);
}

static void check_clean(mg_str_t s)
{
    for (size_t i = 0; i != s.len; ++i) {
        if (s.base[i] == '\r' || s.base[i] == '\n' || s.base[i] == '\0')
            abort();
    }
}

/* Returns the chosen route with rq->ctx as the index left it. */
static const mg_route_t *check_same_match(const mg_routes_t *routes, request_t *rq)
{
    mg_ctx_t linear = rq->ctx;
    const mg_route_t *a = mg_routes_match(routes, &rq->ctx);
    const mg_route_t *b = mg_routes_match_linear(routes, &linear);
    if (a != b || rq->ctx.num_vars != linear.num_vars)
        abort();
    /* an undecidable condition (a regex past its limit) stops both the same way, at the same route */
    if ((rq->ctx.error.reason == NULL) != (linear.error.reason == NULL) || rq->ctx.error.route != linear.error.route ||
        (a != NULL && rq->ctx.error.reason != NULL))
        abort();
    for (size_t i = 0; i != linear.num_vars; ++i) {
        if (!str_eq(rq->ctx.vars[i].name, linear.vars[i].name) || !str_eq(rq->ctx.vars[i].value, linear.vars[i].value))
            abort();
    }
    return a;
}

static void check_apply(const mg_route_t *route, mg_ctx_t *ctx)
{
    mg_route_result_t res = {0};
    if (mg_route_apply(route, ctx, &res) != 0) {
        if (res.error == NULL)
            abort(); /* a 400 must say why */
        return;
    }
    char again[1024];
    if (ctx->path.len >= sizeof(again) || ctx->path.len == 0 || ctx->path.base[0] != '/')
        abort();
    long n = mg_path_normalize(ctx->path.base, ctx->path.len, again);
    if (n < 0 || !str_eq(mg_str(again, (size_t)n), ctx->path))
        abort(); /* a rewritten path goes out normalized */
    for (size_t i = 0; i != ctx->num_headers; ++i)
        check_clean(ctx->headers[i].value);
    check_clean(res.host);
    check_clean(res.location);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    draw_t d = {data, data + size};
    static text_t t;
    t.len = 0;
    t.overflow = 0;
    unsigned serial = 0;
    put(&t, "routes: ");
    put_routes(&d, &t, 0, &serial);
    if (t.overflow)
        return 0;
    mg_errors_t errs = {0};
    mg_doc_t *doc = mg_doc_load_string("fuzz.yaml", t.buf, t.len, &errs);
    if (doc == NULL)
        abort(); /* the generator writes valid YAML */
    mg_routes_t *routes = mg_routes_compile(mg_node_get(mg_doc_root(doc), "routes"), resolve, NULL, &errs);
    mg_doc_free(doc);
    for (int i = 0; routes != NULL && i != 4; ++i) {
        static request_t rq;
        arena_used = 0;
        if (draw_request(&d, &rq) != 0)
            continue;
        const mg_route_t *chosen = check_same_match(routes, &rq);
        if (chosen != NULL)
            check_apply(chosen, &rq.ctx);
    }
    mg_routes_free(routes);
    mg_errors_clear(&errs);
    return 0;
}
