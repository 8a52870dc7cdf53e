/*
 * GET /metrics, per route (labelled by route name): requests, responses by status class and a
 * duration histogram, for the first MG_ROUTE_METRICS_MAX routes of the configuration in use (the
 * bound on the label's cardinality; docs/operating.md). Counted since that configuration was
 * loaded: a reload starts them again from 0, which Prometheus reads as a counter reset.
 */
#include <stdio.h>
#include "gateway/admin/internal.h"

/* A route name as a label value (names have no control characters): backslash and quote escaped. */
static void put_route_label(FILE *out, const char *name)
{
    fputs("route=\"", out);
    for (const char *p = name; *p != '\0'; p++) {
        if (*p == '\\' || *p == '"')
            fputc('\\', out);
        fputc(*p, out);
    }
    fputc('"', out);
}

typedef void (*route_put_t)(FILE *out, const mg_config_t *conf, const mg_route_t *r);

/* Calls `put` for each route with metrics, depth first in file order (the order of their ids). */
static void each_route(FILE *out, const mg_config_t *conf, mg_route_t *const *list, size_t n, route_put_t put)
{
    for (size_t i = 0; i < n; i++) {
        if (list[i]->id >= conf->route_hits.stats_routes)
            return;
        if (list[i]->kind != MG_ROUTE_BRANCH) /* a branch is never chosen: its routes carry its requests */
            put(out, conf, list[i]);
        each_route(out, conf, list[i]->children, list[i]->num_children, put);
    }
}

static void put_requests(FILE *out, const mg_config_t *conf, const mg_route_t *r)
{
    fputs("matchgate_route_requests_total{", out);
    put_route_label(out, r->name);
    fprintf(out, "} %llu\n", (unsigned long long)mg_config_route_hits(conf, r));
}

static void put_responses(FILE *out, const mg_config_t *conf, const mg_route_t *r)
{
    static const char *const classes[MG_ROUTE_STAT_CLASSES] = {"1xx", "2xx", "3xx", "4xx", "5xx", "other"};
    for (unsigned c = 0; c < MG_ROUTE_STAT_CLASSES; c++) {
        fputs("matchgate_route_responses_total{", out);
        put_route_label(out, r->name);
        fprintf(out, ",class=\"%s\"} %llu\n", classes[c], (unsigned long long)mg_config_route_stat(conf, r, c));
    }
}

static void put_durations(FILE *out, const mg_config_t *conf, const mg_route_t *r)
{
    static const uint64_t bounds_ms[MG_ROUTE_DURATION_BUCKETS] = MG_ROUTE_DURATION_BOUNDS_MS;
    uint64_t cumulative = 0, count = 0;
    for (unsigned c = 0; c < MG_ROUTE_STAT_CLASSES; c++)
        count += mg_config_route_stat(conf, r, c);
    for (unsigned b = 0; b < MG_ROUTE_DURATION_BUCKETS; b++) {
        cumulative += mg_config_route_stat(conf, r, MG_ROUTE_STAT_CLASSES + b);
        fputs("matchgate_route_duration_seconds_bucket{", out);
        put_route_label(out, r->name);
        fprintf(out, ",le=\"%g\"} %llu\n", (double)bounds_ms[b] / 1000, (unsigned long long)cumulative);
    }
    /* read apart from the buckets: +Inf must not fall below the last one */
    count = count > cumulative ? count : cumulative;
    fputs("matchgate_route_duration_seconds_bucket{", out);
    put_route_label(out, r->name);
    fprintf(out, ",le=\"+Inf\"} %llu\nmatchgate_route_duration_seconds_sum{", (unsigned long long)count);
    put_route_label(out, r->name);
    fprintf(out, "} %.6f\nmatchgate_route_duration_seconds_count{", (double)mg_config_route_stat(conf, r, MG_ROUTE_STAT_SUM) / 1e6);
    put_route_label(out, r->name);
    fprintf(out, "} %llu\n", (unsigned long long)count);
}

/* `metric{route="R",backend="B"extra} value` for each mirror of `r`, the value read by `get`. */
static void put_mirrors(FILE *out, const mg_route_t *r, const char *metric, const char *extra,
                        uint64_t (*get)(const mg_route_mirror_t *m, void *arg), void *arg)
{
    for (size_t i = 0; r->mirrors != NULL && i < r->mirrors->size; i++) {
        const mg_route_mirror_t *m = &r->mirrors->items[i];
        fprintf(out, "%s{", metric);
        put_route_label(out, r->name);
        fputs(",backend=\"", out);
        mg__admin_put_label(out, m->backend_name);
        fprintf(out, "\"%s} %llu\n", extra, (unsigned long long)get(m, arg));
    }
}

#define MIRROR_COUNTER(field)                                                                                                      \
    static uint64_t get_##field(const mg_route_mirror_t *m, void *arg)                                                             \
    {                                                                                                                              \
        (void)arg;                                                                                                                 \
        return atomic_load_explicit(&m->field, memory_order_relaxed);                                                              \
    }
MIRROR_COUNTER(mirrored)
MIRROR_COUNTER(dropped_full)
MIRROR_COUNTER(dropped_body)
MIRROR_COUNTER(differed)
MIRROR_COUNTER(in_flight)

static uint64_t get_answers(const mg_route_mirror_t *m, void *arg)
{
    return atomic_load_explicit(&m->answers[*(const int *)arg], memory_order_relaxed);
}

static void put_mirror_requests(FILE *out, const mg_config_t *conf, const mg_route_t *r)
{
    put_mirrors(out, r, "matchgate_mirror_requests_total", "", get_mirrored, NULL);
}

static void put_mirror_dropped(FILE *out, const mg_config_t *conf, const mg_route_t *r)
{
    put_mirrors(out, r, "matchgate_mirror_dropped_total", ",reason=\"in_flight\"", get_dropped_full, NULL);
    put_mirrors(out, r, "matchgate_mirror_dropped_total", ",reason=\"body\"", get_dropped_body, NULL);
}

static void put_mirror_answers(FILE *out, const mg_config_t *conf, const mg_route_t *r)
{
    static const char *const classes[6] = {",class=\"none\"", ",class=\"1xx\"", ",class=\"2xx\"",
                                           ",class=\"3xx\"",  ",class=\"4xx\"", ",class=\"5xx\""};
    for (int c = 0; c < 6; c++)
        put_mirrors(out, r, "matchgate_mirror_answers_total", classes[c], get_answers, &c);
}

static void put_mirror_differed(FILE *out, const mg_config_t *conf, const mg_route_t *r)
{
    for (size_t i = 0; r->mirrors != NULL && i < r->mirrors->size; i++)
        if (r->mirrors->items[i].compare_status) {
            put_mirrors(out, r, "matchgate_mirror_status_differed_total", "", get_differed, NULL);
            return;
        }
}

static void put_mirror_in_flight(FILE *out, const mg_config_t *conf, const mg_route_t *r)
{
    put_mirrors(out, r, "matchgate_mirror_in_flight", "", get_in_flight, NULL);
}

/* The mirrors of every route (all of them: a route has at most MG_MIRROR_MAX, and few routes have one). */
static void each_mirrored(FILE *out, const mg_config_t *conf, mg_route_t *const *list, size_t n, route_put_t put)
{
    for (size_t i = 0; i < n; i++) {
        if (list[i]->mirrors != NULL)
            put(out, conf, list[i]);
        each_mirrored(out, conf, list[i]->children, list[i]->num_children, put);
    }
}

static void mg_admin_mirror_metrics(FILE *out, const mg_config_t *conf)
{
    static const struct {
        const char *name, *type, *help;
        route_put_t put;
    } families[] = {
        {"matchgate_mirror_requests_total", "counter", "Copies of a route's requests sent to its mirror.", put_mirror_requests},
        {"matchgate_mirror_dropped_total", "counter",
         "Copies not sent: the mirror's max_in_flight copies were at it (or the call could not start), or the body was over "
         "max_body.",
         put_mirror_dropped},
        {"matchgate_mirror_answers_total", "counter", "The mirror's answers to the copies, by status class (none: no answer).",
         put_mirror_answers},
        {"matchgate_mirror_status_differed_total", "counter",
         "Copies whose answer's status class differed from the client's answer's (compare: status).", put_mirror_differed},
        {"matchgate_mirror_in_flight", "gauge", "Copies at the mirror now.", put_mirror_in_flight},
    };
    for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", families[f].name, families[f].help, families[f].name, families[f].type);
        each_mirrored(out, conf, conf->routes->routes, conf->routes->size, families[f].put);
    }
}

void mg_admin_route_metrics(FILE *out, const mg_config_t *conf)
{
    static const struct {
        const char *name, *type, *help;
        route_put_t put;
    } families[] = {
        {"matchgate_route_requests_total", "counter", "Requests the route tree chose the route for.", put_requests},
        {"matchgate_route_responses_total", "counter", "Responses to the route's requests, by status class.", put_responses},
        {"matchgate_route_duration_seconds", "histogram", "Time from a request's arrival to the end of its response.",
         put_durations},
    };
    const mg_routes_t *routes = conf->routes;
    if (routes == NULL)
        return;
    for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
        fprintf(out, "# HELP %s %s (the first %d routes of the tree)\n# TYPE %s %s\n", families[f].name, families[f].help,
                MG_ROUTE_METRICS_MAX, families[f].name, families[f].type);
        each_route(out, conf, routes->routes, routes->size, families[f].put);
    }
    mg_admin_mirror_metrics(out, conf);
}
