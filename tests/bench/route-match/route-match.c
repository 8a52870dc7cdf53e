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
 * Reported per configuration: load time (parse, compile with index and checks), memory per
 * route (mallinfo2 in-use bytes after minus before, the document freed), the index's share of
 * it, and the time per match, median and p99. A clock read costs about as much as a match,
 * so matches are timed in batches of MG_BATCH with clock_gettime(CLOCK_MONOTONIC): one
 * sample is a batch's time divided by MG_BATCH. Requests are drawn before timing; every
 * match result is checked against the expected route outside the timed loop.
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

#define MG_BATCH 32
#define MG_NAME_SIZE 32
#define MG_REQUESTS 4096 /* distinct requests, drawn at random, cycled through */

typedef struct bench_request {
    char host[64], path[64];
    const char *expect; /* route name */
} bench_request_t;

typedef struct bench_config {
    const char *shape;
    size_t routes;
    char *yaml;
    bench_request_t *requests;
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

static size_t heap_in_use(void)
{
    return mallinfo2().uordblks;
}

/* ---------------------------------------------------------------------------------------
 * Configurations
 */
static char *expect_names; /* "tI" strings of the current configuration, MG_NAME_SIZE bytes each */

static bench_request_t *new_requests(void)
{
    bench_request_t *r = calloc(MG_REQUESTS, sizeof(*r));
    if (r == NULL)
        abort();
    return r;
}

static const char *name_of(size_t i)
{
    snprintf(expect_names + MG_NAME_SIZE * i, MG_NAME_SIZE, "t%zu", i);
    return expect_names + MG_NAME_SIZE * i;
}

static bench_config_t host_prefix(size_t n)
{
    bench_config_t c = {"host+prefix", n + 1, NULL, new_requests()};
    size_t len;
    FILE *f = open_memstream(&c.yaml, &len);
    fputs("routes:\n", f);
    for (size_t i = 0; i != n; ++i)
        fprintf(f, "  - {name: t%zu, match: {all: [{host: tenant%zu.example.com}, {path: {prefix: /api}}]}, forward: b}\n", i, i);
    fputs("  - {name: fallback, respond: {status: 404}}\n", f);
    fclose(f);
    for (size_t i = 0; i != MG_REQUESTS; ++i) {
        size_t t = (size_t)rnd(n);
        snprintf(c.requests[i].host, sizeof(c.requests[i].host), "tenant%zu.example.com", t);
        snprintf(c.requests[i].path, sizeof(c.requests[i].path), "/api/orders/42");
        c.requests[i].expect = name_of(t);
    }
    return c;
}

static bench_config_t prefix_only(size_t n)
{
    bench_config_t c = {"prefix", n + 1, NULL, new_requests()};
    size_t len;
    FILE *f = open_memstream(&c.yaml, &len);
    fputs("routes:\n", f);
    for (size_t i = 0; i != n; ++i)
        fprintf(f, "  - {name: t%zu, match: {path: {prefix: /tenant%zu}}, forward: b}\n", i, i);
    fputs("  - {name: fallback, respond: {status: 404}}\n", f);
    fclose(f);
    for (size_t i = 0; i != MG_REQUESTS; ++i) {
        size_t t = (size_t)rnd(n);
        snprintf(c.requests[i].host, sizeof(c.requests[i].host), "www.example.com");
        snprintf(c.requests[i].path, sizeof(c.requests[i].path), "/tenant%zu/api/orders", t);
        c.requests[i].expect = name_of(t);
    }
    return c;
}

/* 10 branches of 10 leaves; `regex`: the path tests are regexes (else prefixes). */
static bench_config_t deep_tree(int regex)
{
    bench_config_t c = {regex ? "deep tree (regex)" : "deep tree (no regex)", 111, NULL, new_requests()};
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
    for (size_t i = 0; i != MG_REQUESTS; ++i) {
        int k = (int)rnd(10), j = (int)rnd(10);
        snprintf(c.requests[i].host, sizeof(c.requests[i].host), "www.example.com");
        snprintf(c.requests[i].path, sizeof(c.requests[i].path), "/s%d/c%d/%d", k, j, (int)rnd(100000));
        snprintf(expect_names + MG_NAME_SIZE * (size_t)(k * 10 + j), MG_NAME_SIZE, "s%d-c%d", k, j);
        c.requests[i].expect = expect_names + MG_NAME_SIZE * (size_t)(k * 10 + j);
    }
    return c;
}

/* ---------------------------------------------------------------------------------------
 * Measuring
 */
typedef struct bench_figures {
    double parse_ms, compile_ms;
    double bytes_per_route, index_bytes_per_route;
    double median_ns, p99_ns, linear_median_ns;
    int ok;
} bench_figures_t;

static void ctx_of(mg_ctx_t *ctx, const bench_request_t *r)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->method = MG_STR("GET");
    ctx->scheme = MG_STR("http");
    ctx->host = mg_str(r->host, strlen(r->host));
    ctx->path = mg_str(r->path, strlen(r->path));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef const mg_route_t *(*match_fn_t)(const mg_routes_t *, mg_ctx_t *);

/* Per-match times of `samples` batches; the median, and the p99 when asked. */
static double time_matches(const mg_routes_t *routes, mg_ctx_t *ctxs, match_fn_t match, size_t samples, double *p99)
{
    double *ns = malloc(samples * sizeof(*ns));
    uintptr_t sink = 0;
    size_t next = 0;
    if (ns == NULL)
        abort();
    for (size_t s = 0; s != samples; ++s) {
        double t0 = now_ns();
        for (int i = 0; i != MG_BATCH; ++i) {
            mg_ctx_t *ctx = &ctxs[next++ % MG_REQUESTS];
            ctx->num_vars = 0;
            sink += (uintptr_t)match(routes, ctx);
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

static int check_matches(const mg_routes_t *routes, mg_ctx_t *ctxs, const bench_config_t *c)
{
    for (size_t i = 0; i != MG_REQUESTS; ++i) {
        ctxs[i].num_vars = 0;
        const mg_route_t *r = mg_routes_match(routes, &ctxs[i]);
        if (r == NULL || strcmp(r->name, c->requests[i].expect) != 0) {
            fprintf(stderr, "route-match: %s %s%s chose %s, expected %s\n", c->shape, c->requests[i].host, c->requests[i].path,
                    r != NULL ? r->name : "(none)", c->requests[i].expect);
            return 0;
        }
    }
    return 1;
}

static mg_routes_t *load(const bench_config_t *c, bench_figures_t *fig)
{
    mg_errors_t errs = {0};
    size_t before = heap_in_use();
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
    fig->bytes_per_route = routes != NULL ? (double)(heap_in_use() - before) / (double)mg_routes_count(routes) : 0;
    return routes;
}

/* The top-level index's share: built once more, measured, dropped. */
static double index_bytes_per_route(const mg_routes_t *routes)
{
    if (routes->index == NULL)
        return 0;
    size_t before = heap_in_use();
    mg_route_index_t *index = mg__route_index_build(routes->routes, routes->size);
    double per_route = (double)(heap_in_use() - before) / (double)routes->size;
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
    mg_ctx_t *ctxs = malloc(MG_REQUESTS * sizeof(*ctxs));
    if (ctxs == NULL)
        abort();
    for (size_t i = 0; i != MG_REQUESTS; ++i)
        ctx_of(&ctxs[i], &c->requests[i]);
    fig.ok = check_matches(routes, ctxs, c);
    time_matches(routes, ctxs, mg_routes_match, samples / 10 + 1, NULL); /* warm-up */
    fig.median_ns = time_matches(routes, ctxs, mg_routes_match, samples, &fig.p99_ns);
    /* Linear evaluation for comparison: a few batches at 100k routes, it is that slow. */
    size_t linear_samples = c->routes > 10000 ? 16 : samples / 10 + 1;
    fig.linear_median_ns = time_matches(routes, ctxs, mg_routes_match_linear, linear_samples, NULL);
    free(ctxs);
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
    printf("| %s | %zu | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f |%s\n", c->shape, c->routes, f->parse_ms, f->compile_ms,
           f->bytes_per_route, f->index_bytes_per_route, f->median_ns, f->p99_ns, f->linear_median_ns, f->ok ? "" : " WRONG ROUTE");
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
    printf("route-match: %zu batches of %d matches per figure; ns/match = batch time (CLOCK_MONOTONIC) / %d\n\n", samples, MG_BATCH,
           MG_BATCH);
    printf("| shape | routes | parse ms | compile ms | B/route | index B/route | ns/match median | p99 | linear median |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int shape = 0; shape != 2; ++shape) {
        for (size_t i = 0; i != sizeof(counts) / sizeof(counts[0]); ++i) {
            bench_config_t c = shape == 0 ? host_prefix(counts[i]) : prefix_only(counts[i]);
            bench_figures_t f = measure(&c, samples);
            print_row(&c, &f);
            fflush(stdout);
            ok &= f.ok;
            free(c.yaml);
            free(c.requests);
        }
    }
    bench_config_t c = deep_tree(have_path_regex());
    bench_figures_t f = measure(&c, samples);
    print_row(&c, &f);
    ok &= f.ok;
    free(c.yaml);
    free(c.requests);
    free(expect_names);
    return ok ? 0 : 1;
}
