/*
 * route-match: what a route list costs to load, to keep and to match, as it grows.
 *
 * Configurations are generated in memory and loaded as the gateway loads them
 * (mg_doc_load_string + mg_routes_compile; backends resolve to a dummy pointer):
 *
 *   host+prefix  N routes {name: tI, match: {all: [{host: tenantI.example.com},
 *                {path: {prefix: /api}}]}, forward: b}, then a fallback;
 *                requests: a random existing tenant, GET /api/orders/42
 *   prefix       N routes {name: tI, match: {path: {prefix: /tenantI}}, forward: b}, then a
 *                fallback; requests: GET /tenantI/api/orders for a random existing I
 *   deep tree    10 branches x 10 leaves, every condition an any/all/not tree with regexes
 *                (path regexes when the build has them, else prefixes), then a fallback;
 *                requests: a random leaf
 *
 * Reported per configuration: load time (parse; compile, index and checks included), memory
 * per route, heap (mallinfo2 in-use bytes, mapped blocks included, after minus before, the
 * document freed) and RSS (VmRSS after minus before, freed memory handed back with
 * malloc_trim both times as the gateway does after a load; a few pages either way make it
 * meaningless for the small configurations), the index's share of the heap, and the time per
 * match, median and p99. A clock read costs about as much as a match, so matches are timed in
 * batches of MG_BATCH with clock_gettime(CLOCK_MONOTONIC): one sample is a batch's time
 * divided by MG_BATCH. Each match fills one context (method, host, path, no variables), as
 * the gateway does per request.
 *
 * Two request sets, drawn before timing and cycled through:
 *   hot     MG_HOT requests (random existing tenants), like the tenants active lately: their
 *           routes and index slots stay mostly in the CPU caches;
 *   spread  MG_SPREAD requests drawn over all tenants: at 100,000 routes nearly every match
 *           touches routes and index slots no recent match touched (cache misses).
 * Every match result of both sets is checked against the expected route outside the timed
 * loops. "linear" is mg_routes_match_linear on the hot set, for comparison.
 *
 * A benchmark: prints figures, never fails on time. Exit status 1 only when a configuration
 * does not load or a match picks the wrong route.
 *
 *   route-match [SAMPLES]      SAMPLES batches per figure (default 20000)
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "routes/internal.h"
#include "tests/bench/lib/memory.h"

#define MG_BATCH 32
#define MG_NAME_SIZE 32
#define MG_HOT 4096
#define MG_SPREAD 131072

typedef struct bench_request {
    char host[40], path[40];
    uint32_t host_len, path_len;
    const char *expect; /* route name */
} bench_request_t;

typedef struct bench_requests {
    bench_request_t *items;
    size_t size;
} bench_requests_t;

typedef struct bench_config {
    const char *shape;
    size_t routes;
    char *yaml;
    bench_requests_t hot, spread;
} bench_config_t;

static int dummy_backend;
static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

static void *resolve(void *arg, const char *name)
{
    (void)arg;
    (void)name;
    return &dummy_backend;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The process's resident bytes, after handing freed memory back as the gateway does once a
 * configuration is loaded (gateway/memory.c): what a configuration costs the machine. */
static size_t rss_trimmed(void)
{
    malloc_trim(0);
    return mg_bench_rss_bytes();
}

/* ---------------------------------------------------------------------------------------
 * Configurations
 */
static char *expect_names; /* "tI" strings of the current configuration, MG_NAME_SIZE bytes each */

static bench_requests_t new_requests(size_t size)
{
    bench_requests_t r = {calloc(size, sizeof(*r.items)), size};
    if (r.items == NULL)
        abort();
    return r;
}

static void set_request(bench_request_t *r, const char *host, const char *path, const char *expect)
{
    r->host_len = (uint32_t)snprintf(r->host, sizeof(r->host), "%s", host);
    r->path_len = (uint32_t)snprintf(r->path, sizeof(r->path), "%s", path);
    r->expect = expect;
}

typedef void (*draw_fn_t)(bench_request_t *r, size_t routes);

/* Both request sets of `c`, drawn with `draw`. */
static void draw_requests(bench_config_t *c, size_t routes, draw_fn_t draw)
{
    c->hot = new_requests(MG_HOT);
    c->spread = new_requests(MG_SPREAD);
    for (size_t i = 0; i != c->hot.size; ++i)
        draw(&c->hot.items[i], routes);
    for (size_t i = 0; i != c->spread.size; ++i)
        draw(&c->spread.items[i], routes);
}

static const char *name_of(size_t i)
{
    snprintf(expect_names + MG_NAME_SIZE * i, MG_NAME_SIZE, "t%zu", i);
    return expect_names + MG_NAME_SIZE * i;
}

static void draw_host_prefix(bench_request_t *r, size_t routes)
{
    char host[40];
    size_t t = (size_t)rnd(routes);
    snprintf(host, sizeof(host), "tenant%zu.example.com", t);
    set_request(r, host, "/api/orders/42", name_of(t));
}

/* n tenant routes written with `route` (a format taking the tenant number twice), then a
 * fallback; requests drawn with `draw`. */
static bench_config_t tenant_routes(const char *shape, size_t n, const char *route, draw_fn_t draw)
{
    bench_config_t c = {shape, n + 1, NULL, {NULL, 0}, {NULL, 0}};
    size_t len;
    FILE *f = open_memstream(&c.yaml, &len);
    fputs("routes:\n", f);
    for (size_t i = 0; i != n; ++i)
        fprintf(f, route, i, i);
    fputs("  - {name: fallback, respond: {status: 404}}\n", f);
    fclose(f);
    draw_requests(&c, n, draw);
    return c;
}

static bench_config_t host_prefix(size_t n)
{
    return tenant_routes("host+prefix", n,
                         "  - {name: t%zu, match: {all: [{host: tenant%zu.example.com}, {path: {prefix: /api}}]}, forward: b}\n",
                         draw_host_prefix);
}

static void draw_prefix(bench_request_t *r, size_t routes)
{
    char path[40];
    size_t t = (size_t)rnd(routes);
    snprintf(path, sizeof(path), "/tenant%zu/api/orders", t);
    set_request(r, "www.example.com", path, name_of(t));
}

static bench_config_t prefix_only(size_t n)
{
    return tenant_routes("prefix", n, "  - {name: t%zu, match: {path: {prefix: /tenant%zu}}, forward: b}\n", draw_prefix);
}

static void draw_deep(bench_request_t *r, size_t routes)
{
    char path[40];
    int k = (int)rnd(10), j = (int)rnd(10);
    (void)routes;
    snprintf(path, sizeof(path), "/s%d/c%d/%d", k, j, (int)rnd(100000));
    set_request(r, "www.example.com", path, expect_names + MG_NAME_SIZE * (size_t)(k * 10 + j));
}

/* 10 branches of 10 leaves; `regex`: the path tests are regexes (else prefixes). */
static bench_config_t deep_tree(int regex)
{
    bench_config_t c = {regex ? "deep tree (regex)" : "deep tree (no regex)", 111, NULL, {NULL, 0}, {NULL, 0}};
    size_t len;
    FILE *f = open_memstream(&c.yaml, &len);
    fputs("routes:\n", f);
    for (int k = 0; k != 10; ++k) {
        fprintf(f, "  - name: s%d\n    match:\n      any:\n        - path: {prefix: /s%d}\n", k, k);
        if (regex)
            fprintf(f, "        - all: [{method: [GET, HEAD]}, {path: {regex: '^/legacy/s%d/'}}]\n", k);
        else
            fprintf(f, "        - all: [{method: [GET, HEAD]}, {path: {prefix: /legacy/s%d}}]\n", k);
        fputs("    routes:\n", f);
        for (int j = 0; j != 10; ++j) {
            fprintf(f, "      - name: s%d-c%d\n        match:\n          all:\n", k, j);
            fputs("            - any: [{method: GET}, {method: POST}, {not: {method: [DELETE, PATCH]}}]\n", f);
            if (regex)
                fprintf(f, "            - path: {regex: '^/(s%d|legacy/s%d)/c%d/(?<id>[0-9]+)$'}\n", k, k, j);
            else
                fprintf(f, "            - any: [{path: {prefix: /s%d/c%d}}, {path: {prefix: /legacy/s%d/c%d}}]\n", k, j, k, j);
            fputs("            - not: {all: [{method: PUT}, {path: {prefix: /readonly}}]}\n        forward: b\n", f);
        }
    }
    fputs("  - {name: fallback, respond: {status: 404}}\n", f);
    fclose(f);
    for (int k = 0; k != 10; ++k) {
        for (int j = 0; j != 10; ++j)
            snprintf(expect_names + MG_NAME_SIZE * (size_t)(k * 10 + j), MG_NAME_SIZE, "s%d-c%d", k, j);
    }
    draw_requests(&c, 100, draw_deep);
    return c;
}

/* ---------------------------------------------------------------------------------------
 * Measuring
 */
typedef struct bench_figures {
    double parse_ms, compile_ms;
    double bytes_per_route, rss_per_route, index_bytes_per_route;
    double hot_median_ns, hot_p99_ns, spread_median_ns, spread_p99_ns, linear_median_ns;
    int ok;
} bench_figures_t;

/* What the gateway fills per request; the rest stays zero. */
static void ctx_fill(mg_ctx_t *ctx, const bench_request_t *r)
{
    ctx->host = mg_str(r->host, r->host_len);
    ctx->path = mg_str(r->path, r->path_len);
    ctx->num_vars = 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef const mg_route_t *(*match_fn_t)(const mg_routes_t *, mg_ctx_t *);

/* Per-match times of `samples` batches over `reqs`, cycled; the median, and the p99 when asked. */
static double time_matches(const mg_routes_t *routes, const bench_requests_t *reqs, match_fn_t match, size_t samples, double *p99)
{
    double *ns = malloc(samples * sizeof(*ns));
    uintptr_t sink = 0;
    size_t next = 0;
    mg_ctx_t ctx;
    if (ns == NULL)
        abort();
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = MG_STR("GET");
    ctx.scheme = MG_STR("http");
    for (size_t s = 0; s != samples; ++s) {
        double t0 = now_ns();
        for (int i = 0; i != MG_BATCH; ++i) {
            ctx_fill(&ctx, &reqs->items[next]);
            next = next + 1 != reqs->size ? next + 1 : 0;
            sink += (uintptr_t)match(routes, &ctx);
        }
        ns[s] = (now_ns() - t0) / MG_BATCH;
    }
    qsort(ns, samples, sizeof(*ns), cmp_double);
    double median = ns[samples / 2];
    if (p99 != NULL)
        *p99 = ns[samples * 99 / 100];
    free(ns);
    if (sink == 1) /* never: keeps the matches from being optimized away */
        puts("");
    return median;
}

static int check_matches(const mg_routes_t *routes, const bench_requests_t *reqs, const char *shape)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = MG_STR("GET");
    for (size_t i = 0; i != reqs->size; ++i) {
        const bench_request_t *req = &reqs->items[i];
        ctx_fill(&ctx, req);
        const mg_route_t *r = mg_routes_match(routes, &ctx);
        if (r == NULL || strcmp(r->name, req->expect) != 0) {
            fprintf(stderr, "route-match: %s %s%s chose %s, expected %s\n", shape, req->host, req->path,
                    r != NULL ? r->name : "(none)", req->expect);
            return 0;
        }
    }
    return 1;
}

static mg_routes_t *load(const bench_config_t *c, bench_figures_t *fig)
{
    mg_errors_t errs = {0};
    size_t rss_before = rss_trimmed(), before = mg_bench_heap_bytes();
    double t0 = now_ns();
    mg_doc_t *doc = mg_doc_load_string("bench.yaml", c->yaml, strlen(c->yaml), &errs);
    double t1 = now_ns();
    mg_routes_t *routes = doc != NULL ? mg_routes_compile(mg_node_get(mg_doc_root(doc), "routes"), resolve, NULL, &errs) : NULL;
    double t2 = now_ns();
    mg_doc_free(doc);
    fig->parse_ms = (t1 - t0) / 1e6;
    fig->compile_ms = (t2 - t1) / 1e6;
    if (routes == NULL || errs.num_warnings != 0) {
        fprintf(stderr, "route-match: %s x %zu does not load cleanly (%zu errors, %zu warnings), first: %s\n", c->shape, c->routes,
                errs.num_errors, errs.num_warnings, errs.size != 0 ? errs.entries[0].text : "");
    }
    mg_errors_clear(&errs);
    size_t count = routes != NULL ? mg_routes_count(routes) : 0;
    fig->bytes_per_route = count != 0 ? (double)(mg_bench_heap_bytes() - before) / (double)count : 0;
    fig->rss_per_route = count != 0 ? ((double)rss_trimmed() - (double)rss_before) / (double)count : 0;
    return routes;
}

/* The top-level index's share: built once more, measured, dropped. */
static double index_bytes_per_route(const mg_routes_t *routes)
{
    if (routes->index == NULL)
        return 0;
    size_t before = mg_bench_heap_bytes();
    mg_route_index_t *index = mg__route_index_build(routes->routes, routes->size);
    double per_route = (double)(mg_bench_heap_bytes() - before) / (double)routes->size;
    mg__route_index_free(index);
    return per_route;
}

static bench_figures_t measure(const bench_config_t *c, size_t samples)
{
    bench_figures_t fig = {0};
    mg_routes_t *routes = load(c, &fig);
    if (routes == NULL)
        return fig;
    fig.index_bytes_per_route = index_bytes_per_route(routes);
    fig.ok = check_matches(routes, &c->hot, c->shape) && check_matches(routes, &c->spread, c->shape);
    time_matches(routes, &c->hot, mg_routes_match, samples / 10 + 1, NULL); /* warm-up */
    fig.hot_median_ns = time_matches(routes, &c->hot, mg_routes_match, samples, &fig.hot_p99_ns);
    fig.spread_median_ns = time_matches(routes, &c->spread, mg_routes_match, samples, &fig.spread_p99_ns);
    /* Linear evaluation for comparison: a few batches at 100k routes, it is that slow. */
    size_t linear_samples = c->routes > 10000 ? 16 : samples / 10 + 1;
    fig.linear_median_ns = time_matches(routes, &c->hot, mg_routes_match_linear, linear_samples, NULL);
    mg_routes_free(routes);
    return fig;
}

/* 1 when the build knows path regexes (the kinds branch brings them). */
static int have_path_regex(void)
{
    static const char yaml[] = "routes: [{name: r, match: {path: {regex: '^/x'}}, forward: b}]\n";
    mg_errors_t errs = {0};
    mg_doc_t *doc = mg_doc_load_string("probe.yaml", yaml, sizeof(yaml) - 1, &errs);
    mg_routes_t *routes = doc != NULL ? mg_routes_compile(mg_node_get(mg_doc_root(doc), "routes"), resolve, NULL, &errs) : NULL;
    int ok = routes != NULL;
    mg_routes_free(routes);
    mg_doc_free(doc);
    mg_errors_clear(&errs);
    return ok;
}

static void print_row(const bench_config_t *c, const bench_figures_t *f)
{
    printf("| %s | %zu | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |%s\n", c->shape, c->routes,
           f->parse_ms, f->compile_ms, f->bytes_per_route, f->rss_per_route, f->index_bytes_per_route, f->hot_median_ns,
           f->hot_p99_ns, f->spread_median_ns, f->spread_p99_ns, f->linear_median_ns, f->ok ? "" : " WRONG ROUTE");
}

int main(int argc, char **argv)
{
    size_t samples = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
    static const size_t counts[] = {10, 1000, 100000};
    int ok = 1;
    if (samples < 100)
        samples = 100;
    if ((expect_names = calloc(100000, MG_NAME_SIZE)) == NULL)
        abort();
    printf("route-match: %zu batches of %d matches per figure; ns/match = batch time (CLOCK_MONOTONIC) / %d\n", samples, MG_BATCH,
           MG_BATCH);
    printf("hot: %d random existing tenants, cycled; spread: %d random draws over all tenants, cycled\n\n", MG_HOT, MG_SPREAD);
    printf("| shape | routes | parse ms | compile ms | heap B/route | RSS B/route | index B/route | hot median ns | hot p99 | "
           "spread median | spread p99 | linear median |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int shape = 0; shape != 2; ++shape) {
        for (size_t i = 0; i != sizeof(counts) / sizeof(counts[0]); ++i) {
            bench_config_t c = shape == 0 ? host_prefix(counts[i]) : prefix_only(counts[i]);
            bench_figures_t f = measure(&c, samples);
            print_row(&c, &f);
            fflush(stdout);
            ok &= f.ok;
            free(c.yaml);
            free(c.hot.items);
            free(c.spread.items);
        }
    }
    bench_config_t c = deep_tree(have_path_regex());
    bench_figures_t f = measure(&c, samples);
    print_row(&c, &f);
    ok &= f.ok;
    free(c.yaml);
    free(c.hot.items);
    free(c.spread.items);
    free(expect_names);
    return ok ? 0 : 1;
}
