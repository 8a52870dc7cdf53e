/*
 * Canaries that drive themselves (`canary:` on a split; routes/split.c reads them and judges a
 * step's figures): one thread decides for the whole process (the prober's, at each of its ticks),
 * so every worker reads the same weights. A step's figures are those of the canary leg's backend
 * since the step began: its servers' answers (a 5xx, a failed connection or a broken answer is an
 * error) and its response-time histogram (the head's time, as GET /backends shows it), from which
 * the p99 is the bound of the bucket the 99th percentile falls in.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <jansson.h>
#include "gateway/backend/internal.h"

/* baseline[]: what the canary keeps of its leg's figures at a step's start */
enum { BASE_REQUESTS, BASE_ERRORS, BASE_TIMED, BASE_BUCKETS };
_Static_assert(BASE_BUCKETS + MG_SERVER_HEAD_BUCKETS <= MG_CANARY_BASELINE, "the canary's baseline holds the histogram");

/* The figures of backend `b`, all its servers, as counters since they started. */
static void figures_of(const mg_backend_conf_t *b, uint64_t *out)
{
    memset(out, 0, MG_CANARY_BASELINE * sizeof(*out));
    for (size_t i = 0; i < b->num_servers; i++) {
        mg_server_stats_t st;
        mg_server_stats(&b->servers[i], &st);
        for (int c = 0; c < 5; c++)
            out[BASE_REQUESTS] += st.responses[c];
        out[BASE_REQUESTS] += st.connect_failures + st.failures;
        out[BASE_ERRORS] += st.responses[4] + st.connect_failures + st.failures;
        out[BASE_TIMED] += st.head_count;
        for (int k = 0; k < MG_SERVER_HEAD_BUCKETS; k++)
            out[BASE_BUCKETS + k] += st.head_buckets[k];
    }
}

/* The p99 of the heads timed between `base` and `now`: the bound of the bucket it falls in. */
static uint64_t p99_of(const uint64_t *base, const uint64_t *now)
{
    static const uint64_t bounds[MG_SERVER_HEAD_BUCKETS] = MG_SERVER_HEAD_BOUNDS_US;
    uint64_t timed = now[BASE_TIMED] - base[BASE_TIMED], seen = 0;
    if (timed == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(0.99 * (double)timed);
    for (int k = 0; k < MG_SERVER_HEAD_BUCKETS; k++) {
        seen += now[BASE_BUCKETS + k] - base[BASE_BUCKETS + k];
        if (seen >= rank)
            return bounds[k];
    }
    return UINT64_MAX;
}

static const char *state_name(mg_canary_state_t s)
{
    static const char *const names[] = {"running", "paused", "promoted", "rolled_back", "aborted"};
    return names[s];
}

uint32_t mg_canary_percent(const mg_canary_t *c)
{
    switch (c->state) {
    case MG_CANARY_PROMOTED:
        return 100;
    case MG_CANARY_ROLLED_BACK:
    case MG_CANARY_ABORTED:
        return 0;
    default:
        return c->steps[c->step];
    }
}

struct json_t *mg_canary_decision_json(const mg_canary_decision_t *d)
{
    json_t *j = json_pack("{s:s,s:I,s:i,s:I,s:I}", "decision", d->decision, "at_ms", (json_int_t)d->at_ms, "percent",
                          (int)d->percent, "requests", (json_int_t)d->requests, "errors", (json_int_t)d->errors);
    json_object_set_new(j, "error_ratio", json_real(d->requests != 0 ? (double)d->errors / (double)d->requests : 0.0));
    json_object_set_new(j, "p99_ms", d->p99_us == UINT64_MAX ? json_string("over 10000") : json_real((double)d->p99_us / 1000));
    return j;
}

/* One JSON line on stderr per decision, as the health checks' verdicts. */
static void log_decision(const char *route, const mg_canary_decision_t *d)
{
    json_t *line = mg_canary_decision_json(d);
    json_object_set_new(line, "event", json_string("canary"));
    json_object_set_new(line, "route", json_string(route));
    char *text = json_dumps(line, JSON_COMPACT | JSON_SORT_KEYS);
    if (text != NULL)
        fprintf(stderr, "%s\n", text);
    free(text);
    json_decref(line);
}

void mg_canary_decide(mg_route_t *r, const char *decision, uint64_t requests, uint64_t errors, uint64_t p99_us)
{
    mg_canary_t *c = r->forward.split->canary;
    mg_canary_decision_t d = {.at_ms = mg_realtime_ms(),
                              .percent = mg_canary_percent(c),
                              .requests = requests,
                              .errors = errors,
                              .p99_us = p99_us,
                              .decision = decision};
    mg_canary_record(c, &d);
    log_decision(r->name, &d);
}

/* The step is over: the next one (the last is 100: promoted), or back to 0. */
static void judge(mg_route_t *r, mg_canary_t *c, const mg_backend_conf_t *b, uint64_t now_ms)
{
    uint64_t figures[MG_CANARY_BASELINE];
    figures_of(b, figures);
    uint64_t requests = figures[BASE_REQUESTS] - c->baseline[BASE_REQUESTS],
             errors = figures[BASE_ERRORS] - c->baseline[BASE_ERRORS];
    uint64_t p99 = p99_of(c->baseline, figures);
    c->next_at_ms = now_ms + c->interval_ms;
    switch (mg_canary_judge(c, requests, errors, p99)) {
    case MG_CANARY_HOLD:
        mg_canary_decide(r, "hold", requests, errors, p99); /* the figures go on adding up */
        return;
    case MG_CANARY_BACK:
        mg_canary_decide(r, "rolled_back", requests, errors, p99);
        c->state = MG_CANARY_ROLLED_BACK;
        mg_canary_set_share(r->forward.split, 0);
        return;
    case MG_CANARY_NEXT:
        c->step++;
        if (c->steps[c->step] == 100)
            c->state = MG_CANARY_PROMOTED;
        mg_canary_set_share(r->forward.split, c->steps[c->step]);
        mg_canary_decide(r, c->state == MG_CANARY_PROMOTED ? "promoted" : "next", requests, errors, p99);
        memcpy(c->baseline, figures, sizeof(figures));
        return;
    }
}

void mg_canaries_tick(const mg_config_t *conf, uint64_t now_ms)
{
    for (size_t i = 0; conf->routes != NULL && i < conf->routes->num_canaries; i++) {
        mg_route_t *r = conf->routes->canaries[i];
        mg_canary_t *c = r->forward.split->canary;
        const mg_backend_conf_t *b = r->forward.split->legs[c->to].backend;
        pthread_mutex_lock(&c->lock);
        if (c->state == MG_CANARY_RUNNING && c->next_at_ms == 0) { /* a (re)start: the step's figures from now */
            figures_of(b, c->baseline);
            c->next_at_ms = now_ms + c->interval_ms;
        } else if (c->state == MG_CANARY_RUNNING && now_ms >= c->next_at_ms) {
            judge(r, c, b, now_ms);
        }
        pthread_mutex_unlock(&c->lock);
    }
}

const char *mg_canary_state_name(const mg_canary_t *c)
{
    return state_name(c->state);
}
