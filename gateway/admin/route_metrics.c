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
}
