/*
 * GET /metrics: the workers' counters summed, the configuration's generation and reloads, and per
 * backend its scheduler's figures (queue depth, in flight, queue timeouts, waiting time), in
 * the Prometheus text exposition format 0.0.4. Each worker writes only its own counters; this
 * reads them without stopping anyone, so the figures of one scrape are each exact but not taken
 * at the same instant.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "gateway/admin/internal.h"
#include "gateway/request/request.h"
#include "gateway/quota/quota.h"
#include "gateway/connections/connections.h"
#include "gateway/process.h"

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
    {"matchgate_websocket_sessions", "gauge", "WebSocket sessions open (tunnels and bridges).",
     offsetof(mg_worker_stats_t, ws_sessions)},
    {"matchgate_websocket_bridged_messages_total", "counter", "Client messages a WebSocket bridge has answered.",
     offsetof(mg_worker_stats_t, ws_bridged)},
    {"matchgate_cors_refused_total", "counter", "Requests whose Origin their route's CORS policy does not allow.",
     offsetof(mg_worker_stats_t, cors_refused)},
    {"matchgate_response_action_failures_total", "counter",
     "Response actions left out because a variable would have put CR, LF or a control character in the value.",
     offsetof(mg_worker_stats_t, response_action_failures)},
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

/* tenants.store: who decided (Redis, or on_failure), why on_failure did, and Redis's latency. */
static void put_store_metrics(FILE *out, mg_gateway_t *gw)
{
    static const char *const errors[] = {NULL, "down", "timeout", "refused"};
    static const uint64_t bounds[MG_STORE_LATENCY_BUCKETS] = MG_STORE_LATENCY_BOUNDS_US;
    uint64_t cumulative = 0;

    put_header(out, "matchgate_store_decisions_total", "counter",
               "Quota decisions with tenants.store: by Redis (store) or by on_failure (fallback).");
    fprintf(out, "matchgate_store_decisions_total{by=\"store\"} %llu\n",
            (unsigned long long)sum_workers(gw, offsetof(mg_worker_stats_t, store_shared)));
    fprintf(out, "matchgate_store_decisions_total{by=\"fallback\"} %llu\n",
            (unsigned long long)sum_workers(gw, offsetof(mg_worker_stats_t, store_fallback)));
    put_header(out, "matchgate_store_errors_total", "counter", "Decisions Redis could not make, by why (on_failure made them).");
    for (size_t i = 1; i < 4; i++)
        fprintf(out, "matchgate_store_errors_total{error=\"%s\"} %llu\n", errors[i],
                (unsigned long long)sum_workers(gw, offsetof(mg_worker_stats_t, store_errors) + i * sizeof(mg_stat_t)));
    put_header(out, "matchgate_store_writes_total", "counter",
               "Writes that sent commands to Redis: decisions in one loop turn share one (pipelining).");
    fprintf(out, "matchgate_store_writes_total %llu\n",
            (unsigned long long)sum_workers(gw, offsetof(mg_worker_stats_t, store_writes)));
    put_header(out, "matchgate_store_commands_total", "counter",
               "Commands sent to Redis (decisions, redirects, handshakes, probes).");
    fprintf(out, "matchgate_store_commands_total %llu\n",
            (unsigned long long)sum_workers(gw, offsetof(mg_worker_stats_t, store_commands)));
    put_header(out, "matchgate_store_latency_seconds", "histogram", "Time from a quota decision's start to Redis's answer.");
    for (size_t i = 0; i < MG_STORE_LATENCY_BUCKETS; i++) {
        cumulative += sum_workers(gw, offsetof(mg_worker_stats_t, store_latency) + i * sizeof(mg_stat_t));
        fprintf(out, "matchgate_store_latency_seconds_bucket{le=\"%g\"} %llu\n", (double)bounds[i] / 1e6,
                (unsigned long long)cumulative);
    }
    uint64_t count = sum_workers(gw, offsetof(mg_worker_stats_t, store_shared));
    fprintf(out, "matchgate_store_latency_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)count);
    fprintf(out, "matchgate_store_latency_seconds_sum %.6f\n",
            (double)sum_workers(gw, offsetof(mg_worker_stats_t, store_latency_sum_us)) / 1e6);
    fprintf(out, "matchgate_store_latency_seconds_count %llu\n", (unsigned long long)count);
}

static void put_metrics(FILE *out, mg_gateway_t *gw, const mg_config_t *conf)
{
    for (size_t i = 0; i < sizeof(worker_metrics) / sizeof(worker_metrics[0]); i++) {
        const worker_metric_t *m = &worker_metrics[i];
        put_header(out, m->name, m->type, m->help);
        fprintf(out, "%s %llu\n", m->name, (unsigned long long)sum_workers(gw, m->offset));
    }
    put_header(out, "matchgate_cors_preflights_total", "counter", "CORS preflights the gateway answered, by result.");
    fprintf(out, "matchgate_cors_preflights_total{result=\"allowed\"} %llu\n",
            (unsigned long long)sum_workers(gw, offsetof(mg_worker_stats_t, cors_preflight_allowed)));
    fprintf(out, "matchgate_cors_preflights_total{result=\"refused\"} %llu\n",
            (unsigned long long)sum_workers(gw, offsetof(mg_worker_stats_t, cors_preflight_refused)));
    put_header(out, "matchgate_responses_total", "counter", "Responses sent, by status class.");
    for (int c = 1; c <= 5; c++)
        fprintf(out, "matchgate_responses_total{class=\"%dxx\"} %llu\n", c,
                (unsigned long long)sum_workers(gw, offsetof(mg_worker_stats_t, responses) + (size_t)c * sizeof(mg_stat_t)));
    /* how close the throttle is to its key ceiling (tenants.max_keys) */
    put_header(out, "matchgate_throttle_keys", "gauge", "Keys (tenants and route quota keys) the throttle holds.");
    fprintf(out, "matchgate_throttle_keys %zu\n", mg_throttle_count(gw->throttle));
    put_header(out, "matchgate_throttle_max_keys", "gauge", "tenants.max_keys: the most keys a client can make the throttle hold.");
    fprintf(out, "matchgate_throttle_max_keys %llu\n", (unsigned long long)conf->tenants.max_keys);
    put_store_metrics(out, gw);
    put_header(out, "matchgate_config_generation", "gauge", "Generation of the configuration in use: 1 at start, +1 per reload.");
    fprintf(out, "matchgate_config_generation %llu\n", (unsigned long long)conf->generation);
    put_header(out, "matchgate_reloads_total", "counter", "Configuration reloads, by result.");
    fprintf(out, "matchgate_reloads_total{result=\"ok\"} %llu\n", (unsigned long long)atomic_load(&gw->reloads_ok));
    fprintf(out, "matchgate_reloads_total{result=\"failed\"} %llu\n", (unsigned long long)atomic_load(&gw->reloads_failed));
}

/* A backend name as a label value: backslash, double quote and newline escaped. */
void mg__admin_put_label(FILE *out, const char *value)
{
    for (const char *p = value; *p != '\0'; p++) {
        if (*p == '\\' || *p == '"')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else
            fputc(*p, out);
    }
}

static void put_backend_sample(FILE *out, const char *metric, const char *backend, const char *le, const char *value)
{
    fprintf(out, "%s{backend=\"", metric);
    mg__admin_put_label(out, backend);
    if (le != NULL)
        fprintf(out, "\",le=\"%s", le);
    fprintf(out, "\"} %s\n", value);
}

static void put_backend_u64(FILE *out, const char *metric, const char *backend, uint64_t value)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)value);
    put_backend_sample(out, metric, backend, NULL, buf);
}

static void put_wait_histogram(FILE *out, const mg_backend_conf_t *b)
{
    static const uint64_t bounds[MG_WAIT_BUCKETS] = MG_WAIT_BUCKET_BOUNDS_US;
    const char *metric = "matchgate_backend_queue_wait_seconds_bucket";
    mg_backend_sched_t *bs = b->sched;
    uint64_t cumulative = 0, count = atomic_load_explicit(&bs->wait_count, memory_order_relaxed);
    char le[24], value[32];
    for (size_t i = 0; i < MG_WAIT_BUCKETS; i++) {
        cumulative += atomic_load_explicit(&bs->wait_buckets[i], memory_order_relaxed);
        snprintf(le, sizeof(le), "%g", (double)bounds[i] / 1e6);
        snprintf(value, sizeof(value), "%llu", (unsigned long long)cumulative);
        put_backend_sample(out, metric, b->name, le, value);
    }
    /* read apart from the buckets: +Inf must not fall below the last one */
    snprintf(value, sizeof(value), "%llu", (unsigned long long)(count > cumulative ? count : cumulative));
    put_backend_sample(out, metric, b->name, "+Inf", value);
    snprintf(value, sizeof(value), "%.6f", (double)atomic_load_explicit(&bs->wait_sum_us, memory_order_relaxed) / 1e6);
    put_backend_sample(out, "matchgate_backend_queue_wait_seconds_sum", b->name, NULL, value);
    put_backend_u64(out, "matchgate_backend_queue_wait_seconds_count", b->name, count > cumulative ? count : cumulative);
}

/* One backend's figures, read once per scrape: mg_sched_stats takes every lock of the scheduler,
 * which the workers take too. */
typedef struct backend_figures {
    uint64_t depth, in_flight, timeouts, share_refused;
} backend_figures_t;

static backend_figures_t backend_figures(mg_backend_sched_t *bs)
{
    mg_sched_stats_t st;
    mg_sched_stats(bs->sched, &st);
    return (backend_figures_t){st.waiting, atomic_load_explicit(&bs->running, memory_order_relaxed), st.timeouts, st.share_refused};
}

typedef struct backend_metric {
    const char *name, *type, *help;
    size_t offset; /* of its figure in backend_figures_t */
} backend_metric_t;

static const backend_metric_t backend_metrics[] = {
    {"matchgate_backend_queue_depth", "gauge", "Requests waiting in the backend's scheduler.", offsetof(backend_figures_t, depth)},
    {"matchgate_backend_in_flight", "gauge", "Requests sent to the backend and not finished yet.",
     offsetof(backend_figures_t, in_flight)},
    {"matchgate_backend_queue_timeouts_total", "counter", "Requests that waited queue_timeout and got 503.",
     offsetof(backend_figures_t, timeouts)},
    {"matchgate_backend_queue_share_refused_total", "counter",
     "Requests and bridged messages refused (503 queue-full) because their ordering key or client held max_queued_per_key.",
     offsetof(backend_figures_t, share_refused)},
};

/* Per backend of the configuration in use: its scheduler's figures. */
static void put_backend_metrics(FILE *out, const mg_config_t *conf)
{
    backend_figures_t *figures = calloc(conf->num_backends + 1, sizeof(*figures));
    if (figures == NULL)
        return;
    for (size_t i = 0; i < conf->num_backends; i++)
        if (conf->backends[i].sched != NULL)
            figures[i] = backend_figures(conf->backends[i].sched);
    for (size_t m = 0; m < sizeof(backend_metrics) / sizeof(backend_metrics[0]); m++) {
        put_header(out, backend_metrics[m].name, backend_metrics[m].type, backend_metrics[m].help);
        for (size_t i = 0; i < conf->num_backends; i++)
            if (conf->backends[i].sched != NULL)
                put_backend_u64(out, backend_metrics[m].name, conf->backends[i].name,
                                *(const uint64_t *)((const char *)&figures[i] + backend_metrics[m].offset));
    }
    free(figures);
    put_header(out, "matchgate_backend_queue_wait_seconds", "histogram",
               "Time requests waited in the scheduler before being sent.");
    for (size_t i = 0; i < conf->num_backends; i++)
        if (conf->backends[i].sched != NULL)
            put_wait_histogram(out, &conf->backends[i]);
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
    mg_conns_put_metrics(out, gw, conf);
    mg_loop_put_metrics(out, gw);
    mg_compress_put_metrics(out, gw, conf);
    put_backend_metrics(out, conf);
    mg_admin_route_metrics(out, conf);
    mg_admin_put_server_metrics(out, conf);
    mg_admin_auth_metrics(out, conf);
    fclose(out);
    mg_admin_send(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}
