/*
 * The admin API's view of the backends' servers (admin thread): GET /backends lists every backend
 * of the configuration in use with its scheduler's figures (in flight, queued), and every server
 * with its health (gateway/backend/health.c), traffic and checks;
 * POST /backends/{name}/servers/{index}/{drain,disable,enable} sets what an operator decides
 * (HAProxy's `set server state`), in the server's shared word, so it holds for every worker at
 * once and across reloads that keep the server. /metrics gets the same figures per server.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/admin/internal.h"
#include "gateway/backend/backend.h"
#include "gateway/request/request.h"

static const char *const state_names[] = {"healthy", "ejected", "unhealthy", "draining", "disabled"};

static json_t *responses_of(const mg_server_stats_t *st)
{
    json_t *o = json_object();
    char name[4];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof(name), "%dxx", i + 1);
        json_object_set_new(o, name, json_integer((json_int_t)st->responses[i]));
    }
    return o;
}

static json_t *server_json(const mg_server_conf_t *s, size_t index, uint64_t now)
{
    mg_server_stats_t st;
    uint64_t until = 0;
    mg_server_state_t state = mg_server_state(s, now, &until);
    mg_server_stats(s, &st);
    json_t *o =
        json_pack("{s:I, s:s, s:I, s:s, s:I, s:I, s:o, s:I, s:I, s:I}", "index", (json_int_t)index, "url", s->url, "weight",
                  (json_int_t)s->weight, "state", state_names[state], "in_flight", (json_int_t)st.in_flight, "requests",
                  (json_int_t)st.attempts, "responses", responses_of(&st), "connect_failures", (json_int_t)st.connect_failures,
                  "failures", (json_int_t)st.failures, "ejections", (json_int_t)st.ejections);
    if (o == NULL)
        return NULL;
    /* an ejection shows even under a drain or a disable: it still runs */
    json_object_set_new(o, "ejected_for_ms", until > now ? json_integer((json_int_t)(until - now)) : json_null());
    uint64_t ramp_left = 0;
    unsigned permille = mg_server_weight_permille(s, now, &ramp_left);
    json_object_set_new(o, "weight_factor", json_real(permille / 1000.0));
    json_object_set_new(o, "slow_start_left_ms", ramp_left != 0 ? json_integer((json_int_t)ramp_left) : json_null());
    if (st.last_check_ms != 0)
        json_object_set_new(o, "last_check",
                            json_pack("{s:I, s:I, s:I}", "ago_ms", (json_int_t)(now - st.last_check_ms), "status",
                                      (json_int_t)st.last_check_status, "changes", (json_int_t)st.check_transitions));
    else
        json_object_set_new(o, "last_check", json_null());
    return o;
}

static json_t *backend_json(const mg_backend_conf_t *b, uint64_t now)
{
    json_t *servers = json_array();
    uint64_t in_flight = 0, queued = 0;
    for (size_t i = 0; i < b->num_servers; i++)
        json_array_append_new(servers, server_json(&b->servers[i], i, now));
    if (b->sched != NULL) {
        mg_sched_stats_t st;
        mg_sched_stats(b->sched->sched, &st);
        queued = st.waiting;
        in_flight = atomic_load_explicit(&b->sched->running, memory_order_relaxed);
    }
    json_t *j = json_pack("{s:s, s:s, s:b, s:b, s:b, s:I, s:I, s:o}", "name", b->name, "balance", mg_balance_name(b->balance),
                          "panic", b->panic, "active_checks", b->health.path != NULL, "outlier",
                          b->outlier.consecutive_failures != 0 || b->outlier.consecutive_5xx != 0, "in_flight",
                          (json_int_t)in_flight, "queued", (json_int_t)queued, "servers", servers);
    if (j != NULL && b->primary != NULL)
        json_object_set_new(j, "primary", json_string(b->primary));
    return j;
}

/* GET /backends */
void mg_admin_backends(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    uint64_t now = mg_health_clock();
    json_t *list = json_array();
    for (size_t i = 0; i < conf->num_backends; i++)
        json_array_append_new(list, backend_json(&conf->backends[i], now));
    mg_admin_send_json(req, 200, json_pack("{s:I, s:o}", "generation", (json_int_t)conf->generation, "backends", list));
}

/* POST /backends/{name}/servers/{index}/{drain,disable,enable} */
void mg_admin_server_action(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    static const char *const actions[] = {"enable", "drain", "disable"}; /* in the order of mg_server_admin_t */
    const char *name = mg__admin_segment(req, 1), *index = mg__admin_segment(req, 3), *action = mg__admin_segment(req, 4);
    size_t a = 0;
    while (a < 3 && strcmp(actions[a], action) != 0)
        a++;
    if (a == 3) {
        mg_admin_send_error(req, 404, "unknown action (drain, disable, enable)");
        return;
    }
    const mg_backend_conf_t *b = NULL;
    for (size_t i = 0; i < conf->num_backends && b == NULL; i++)
        if (strcmp(conf->backends[i].name, name) == 0)
            b = &conf->backends[i];
    char *end;
    unsigned long i = strtoul(index, &end, 10);
    if (b == NULL || *index < '0' || *index > '9' || *end != '\0' || i >= b->num_servers) {
        mg_admin_send_error(req, 404, b == NULL ? "no such backend" : "no such server (index from 0)");
        return;
    }
    mg_server_set_admin(&b->servers[i], (mg_server_admin_t)a);
    fprintf(stderr, "matchgate: admin: %s server %lu (%s) of backend %s\n", action, i, b->servers[i].url, b->name);
    mg_admin_send_json(req, 200, server_json(&b->servers[i], i, mg_health_clock()));
}

/* ---------------------------------------------------------------------------------------
 * /metrics
 */

/* `metric{backend="B",server="URL"extra} `: the value is the caller's. */
static void put_server_labels(FILE *out, const char *metric, const mg_backend_conf_t *b, const mg_server_conf_t *s,
                              const char *extra)
{
    fprintf(out, "%s{backend=\"", metric);
    mg__admin_put_label(out, b->name);
    fputs("\",server=\"", out);
    mg__admin_put_label(out, s->url);
    fprintf(out, "\"%s} ", extra != NULL ? extra : "");
}

static void put_server_sample(FILE *out, const char *metric, const mg_backend_conf_t *b, const mg_server_conf_t *s,
                              const char *extra, uint64_t value)
{
    put_server_labels(out, metric, b, s, extra);
    fprintf(out, "%llu\n", (unsigned long long)value);
}

/* What a metric shows: one figure of mg_server_stats_t, or one sample per class or state. */
#define BY_CLASS ((size_t)-1)
#define BY_STATE ((size_t)-2)

static const struct {
    const char *name, *type, *help;
    size_t offset; /* in mg_server_stats_t, or BY_CLASS, BY_STATE */
} server_metrics[] = {
    {"matchgate_server_requests_total", "counter", "Attempts sent to the server (retries included).",
     offsetof(mg_server_stats_t, attempts)},
    {"matchgate_server_responses_total", "counter", "Responses of the server, by status class.", BY_CLASS},
    {"matchgate_server_connect_failures_total", "counter", "Attempts that got no connection (refused, connect_timeout).",
     offsetof(mg_server_stats_t, connect_failures)},
    {"matchgate_server_failures_total", "counter",
     "Attempts that failed after the connection: resets, timeouts, malformed responses.", offsetof(mg_server_stats_t, failures)},
    {"matchgate_server_ejections_total", "counter", "Times the outlier checks ejected the server.",
     offsetof(mg_server_stats_t, ejections)},
    {"matchgate_server_in_flight", "gauge", "Attempts at the server not finished yet.", offsetof(mg_server_stats_t, in_flight)},
    {"matchgate_server_state", "gauge",
     "1 for the server's state (healthy, ejected, unhealthy, draining, disabled), 0 for the others.", BY_STATE},
};

static void put_server_metric(FILE *out, size_t m, const mg_backend_conf_t *b, const mg_server_conf_t *s, uint64_t now)
{
    mg_server_stats_t st;
    char extra[32];
    mg_server_stats(s, &st);
    if (server_metrics[m].offset == BY_CLASS) {
        for (int i = 0; i < 5; i++) {
            snprintf(extra, sizeof(extra), ",class=\"%dxx\"", i + 1);
            put_server_sample(out, server_metrics[m].name, b, s, extra, st.responses[i]);
        }
    } else if (server_metrics[m].offset == BY_STATE) {
        mg_server_state_t state = mg_server_state(s, now, NULL);
        for (int i = 0; i < 5; i++) {
            snprintf(extra, sizeof(extra), ",state=\"%s\"", state_names[i]);
            put_server_sample(out, server_metrics[m].name, b, s, extra, (int)state == i);
        }
    } else {
        put_server_sample(out, server_metrics[m].name, b, s, NULL,
                          *(const uint64_t *)((const char *)&st + server_metrics[m].offset));
    }
}

/* matchgate_server_response_seconds: one server's histogram, cumulative as Prometheus has it. */
static void put_head_histogram(FILE *out, const mg_backend_conf_t *b, const mg_server_conf_t *s)
{
    static const uint64_t bounds[MG_SERVER_HEAD_BUCKETS] = MG_SERVER_HEAD_BOUNDS_US;
    mg_server_stats_t st;
    char extra[40];
    uint64_t cumulative = 0;
    mg_server_stats(s, &st);
    for (size_t i = 0; i < MG_SERVER_HEAD_BUCKETS; i++) {
        cumulative += st.head_buckets[i];
        snprintf(extra, sizeof(extra), ",le=\"%g\"", (double)bounds[i] / 1e6);
        put_server_sample(out, "matchgate_server_response_seconds_bucket", b, s, extra, cumulative);
    }
    /* read apart from the buckets: +Inf must not fall below the last one */
    uint64_t count = st.head_count > cumulative ? st.head_count : cumulative;
    put_server_sample(out, "matchgate_server_response_seconds_bucket", b, s, ",le=\"+Inf\"", count);
    put_server_labels(out, "matchgate_server_response_seconds_sum", b, s, NULL);
    fprintf(out, "%.6f\n", (double)st.head_sum_us / 1e6);
    put_server_sample(out, "matchgate_server_response_seconds_count", b, s, NULL, count);
}

void mg_admin_put_server_metrics(FILE *out, const mg_config_t *conf)
{
    uint64_t now = mg_health_clock();
    for (size_t m = 0; m < sizeof(server_metrics) / sizeof(server_metrics[0]); m++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", server_metrics[m].name, server_metrics[m].help, server_metrics[m].name,
                server_metrics[m].type);
        for (size_t i = 0; i < conf->num_backends; i++)
            for (size_t j = 0; j < conf->backends[i].num_servers; j++)
                put_server_metric(out, m, &conf->backends[i], &conf->backends[i].servers[j], now);
    }
    fputs("# HELP matchgate_server_response_seconds Time from the start of an attempt at the server (its connection "
          "included) to the response head.\n# TYPE matchgate_server_response_seconds histogram\n",
          out);
    for (size_t i = 0; i < conf->num_backends; i++)
        for (size_t j = 0; j < conf->backends[i].num_servers; j++)
            put_head_histogram(out, &conf->backends[i], &conf->backends[i].servers[j]);
}
