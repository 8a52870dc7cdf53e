/*
 * The explain hook (mg_ctx_t.trace) the route tester uses: every route tried is reported in the
 * order the tree tries it, with its condition's result; a branch whose children all fail is
 * reported as exhausted; each failed condition is reported with the context it was tested on;
 * and the choice is the same with and without the hook, through the index (whose fast path the
 * hook turns off) as linearly.
 */
#include "support.h"

TestSuite(trace, .fini = support_fini);

typedef struct seen {
    char log[4096];
    size_t len;
} seen_t;

static void on_condition(void *arg, const mg_matcher_t *m, int result, const mg_ctx_t *ctx)
{
    seen_t *s = arg;
    char desc[256];
    mg_matcher_describe(m, desc, sizeof(desc));
    s->len += (size_t)snprintf(s->log + s->len, sizeof(s->log) - s->len, "  %s=%d\n", desc, result);
}

static void on_route(void *arg, const void *route, int result, const mg_ctx_t *ctx)
{
    seen_t *s = arg;
    s->len += (size_t)snprintf(s->log + s->len, sizeof(s->log) - s->len, "%s:%d\n", ((const mg_route_t *)route)->name, result);
}

static mg_ctx_t ctx_for(const char *path, const mg_trace_t *trace)
{
    return (mg_ctx_t){.method = MG_STR("GET"),
                      .host = MG_STR("x.test"),
                      .path = mg_str(path, strlen(path)),
                      .alloc = {arena_alloc, NULL},
                      .trace = trace};
}

static const char *const tree = "routes:\n"
                                "  - name: api\n"
                                "    match: {path: {prefix: /api}}\n"
                                "    routes:\n"
                                "      - name: v2\n"
                                "        match: {all: [{path: {prefix: /api/v2}}, {method: GET}]}\n"
                                "        respond: {status: 200}\n"
                                "      - name: v1\n"
                                "        match: {not: {method: POST}}\n"
                                "        respond: {status: 200}\n"
                                "  - name: site\n"
                                "    respond: {status: 200}\n";

Test(trace, routes_and_conditions_are_reported_in_order)
{
    mg_routes_t *routes = load_with(tree, NULL);
    seen_t s = {{0}, 0};
    mg_trace_t trace = {on_condition, on_route, &s};
    mg_ctx_t ctx = ctx_for("/api/v3", &trace);
    ctx.method = MG_STR("POST");

    const mg_route_t *r = mg_routes_match(routes, &ctx);

    cr_assert_not_null(r);
    cr_expect_str_eq(r->name, "site");
    cr_expect_str_eq(s.log, "  {\"path\":{\"prefix\":\"/api\"}}=1\n"
                            "api:1\n"
                            "  {\"path\":{\"prefix\":\"/api/v2\"}}=0\n"
                            "  {\"all\":[{\"path\":{\"prefix\":\"/api/v2\"}},{\"method\":\"GET\"}]}=0\n"
                            "v2:0\n"
                            "  {\"method\":\"POST\"}=1\n"
                            "  {\"not\":{\"method\":\"POST\"}}=0\n"
                            "v1:0\n"
                            "api:2\n"
                            "site:1\n");
    mg_routes_free(routes);
}

Test(trace, a_failed_branch_leaves_no_variables_with_the_hook_either)
{
    mg_routes_t *routes = load_with(tree, NULL);
    seen_t s = {{0}, 0};
    mg_trace_t trace = {on_condition, on_route, &s};
    mg_ctx_t ctx = ctx_for("/api/v3", &trace);
    ctx.method = MG_STR("POST");

    mg_routes_match(routes, &ctx);

    cr_expect_eq(ctx.num_vars, 0, "the branch's ${remainder} must be undone");
    mg_routes_free(routes);
}

/* Ten routes get an index; exact paths and prefixes use its fast path without the hook. */
static char *indexed_tree(void)
{
    static char text[4096];
    size_t len = (size_t)snprintf(text, sizeof(text), "routes:\n");
    for (int i = 0; i < 10; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len,
                                "  - name: r%d\n    match: {path: {prefix: /p%d}}\n    respond: {status: 200}\n", i, i);
    snprintf(text + len, sizeof(text) - len, "  - name: last\n    respond: {status: 404}\n");
    return text;
}

Test(trace, the_index_chooses_the_same_and_each_condition_tried_is_reported)
{
    mg_routes_t *routes = load_with(indexed_tree(), NULL);
    cr_assert_not_null(routes->index, "the test needs an indexed list");
    static const char *const paths[] = {"/p0", "/p7/x", "/p9", "/p10", "/q", "/"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        seen_t s = {{0}, 0};
        mg_trace_t trace = {on_condition, on_route, &s};
        mg_ctx_t plain = ctx_for(paths[i], NULL), traced = ctx_for(paths[i], &trace);
        const mg_route_t *a = mg_routes_match(routes, &plain), *b = mg_routes_match(routes, &traced);
        cr_expect_eq(a, b, "%s: %s with the hook, %s without", paths[i], b ? b->name : "none", a ? a->name : "none");
        cr_expect_eq(plain.num_vars, traced.num_vars, "%s: the same variables", paths[i]);
        char want[64];
        snprintf(want, sizeof(want), "%s:1\n", a->name);
        cr_expect(s.len >= strlen(want) && strcmp(s.log + s.len - strlen(want), want) == 0,
                  "%s: the chosen route is reported last:\n%s", paths[i], s.log);
    }
    mg_routes_free(routes);
}
