/*
 * GET /metrics: the workers' counters summed, and the configuration's generation and reloads, in
 * the Prometheus text exposition format 0.0.4. Each worker writes only its own counters; this
 * reads them without stopping anyone, so the figures of one scrape are each exact but not taken
 * at the same instant.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "gateway/internal.h"

typedef struct worker_metric {
    const char *name, *type, *help;
    size_t offset; /* of its mg_stat_t in mg_worker_stats_t */
} worker_metric_t;

static const worker_metric_t worker_metrics[] = {
    {"matchgate_requests_total", "counter", "Requests received by the workers.", offsetof(mg_worker_stats_t, requests)},
    {"matchgate_requests_in_flight", "gauge", "Requests received and not finished yet.", offsetof(mg_worker_stats_t, in_flight)},
    {"matchgate_throttle_admitted_total", "counter", "Requests the tenant throttle admitted.",
     offsetof(mg_worker_stats_t, throttle_admitted)},
    {"matchgate_throttle_rejected_total", "counter", "Requests the tenant throttle refused with 429.",
     offsetof(mg_worker_stats_t, throttle_rejected)},
    {"matchgate_connections_rate_limited_total", "counter", "Requests refused by limits.max_requests_per_connection_per_second.",
     offsetof(mg_worker_stats_t, connections_rate_limited)},
};

static uint64_t sum_workers(mg_gateway_t *gw, size_t offset)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < gw->num_workers; i++)
        total += mg_stat_read((mg_stat_t *)((char *)&gw->workers[i].stats + offset));
    return total;
}

static void put_header(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_metrics(FILE *out, mg_gateway_t *gw, const mg_config_t *conf)
{
    for (size_t i = 0; i < sizeof(worker_metrics) / sizeof(worker_metrics[0]); i++) {
        const worker_metric_t *m = &worker_metrics[i];
        put_header(out, m->name, m->type, m->help);
        fprintf(out, "%s %llu\n", m->name, (unsigned long long)sum_workers(gw, m->offset));
    }
    put_header(out, "matchgate_responses_total", "counter", "Responses sent, by status class.");
    for (int c = 1; c <= 5; c++)
        fprintf(out, "matchgate_responses_total{class=\"%dxx\"} %llu\n", c,
                (unsigned long long)sum_workers(gw, offsetof(mg_worker_stats_t, responses) + (size_t)c * sizeof(mg_stat_t)));
    put_header(out, "matchgate_config_generation", "gauge", "Generation of the configuration in use: 1 at start, +1 per reload.");
    fprintf(out, "matchgate_config_generation %llu\n", (unsigned long long)conf->generation);
    put_header(out, "matchgate_reloads_total", "counter", "Configuration reloads, by result.");
    fprintf(out, "matchgate_reloads_total{result=\"ok\"} %llu\n", (unsigned long long)atomic_load(&gw->reloads_ok));
    fprintf(out, "matchgate_reloads_total{result=\"failed\"} %llu\n", (unsigned long long)atomic_load(&gw->reloads_failed));
}

void mg_admin_metrics(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);

    if (out == NULL) {
        mg_admin_send(req, 500, "text/plain; charset=utf-8", H2O_STRLIT("out of memory\n"));
        return;
    }
    put_metrics(out, gw, conf);
    fclose(out);
    mg_admin_send(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}
