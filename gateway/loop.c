/*
 * How long each turn of a worker's event loop keeps it busy: from waking up (deps/h2o patch
 * 0012 records the instant epoll_wait returns) to the end of the turn, once h2o_evloop_run has
 * run the turn's callbacks and timers. Every connection of the worker waits while a turn runs,
 * so a long turn is tail latency for all of them, whatever request caused it. Per worker, on
 * /metrics: a histogram of turns (matchgate_loop_turn_seconds) and the longest turn that ended
 * in the last two seconds (matchgate_loop_turn_longest_seconds; 0 when none did: an idle loop,
 * or one still in a turn, which the histogram shows once it ends). A turn is recorded as it
 * ends, so the last one before the loop goes idle is counted too.
 */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include "gateway/process.h"

#define NS_PER_S UINT64_C(1000000000)

/* Upper bounds of the histogram's buckets, ns: from a turn of one small request to a stall. */
static const uint64_t turn_bounds_ns[MG_LOOP_TURN_BUCKETS] = {
    10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 50000000, 250000000,
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

#ifdef H2O_HAS_EVLOOP_TURN_TIMES
static void stat_set(mg_stat_t *p, uint64_t v)
{
    atomic_store_explicit(p, v, memory_order_relaxed);
}

/* One turn of `busy_ns` that ended at `end_ns` (CLOCK_MONOTONIC). */
static void loop_record(mg_worker_t *w, uint64_t busy_ns, uint64_t end_ns)
{
    size_t i = 0;
    while (i < MG_LOOP_TURN_BUCKETS && busy_ns > turn_bounds_ns[i])
        i++;
    mg_stat_inc(&w->stats.loop_turns[i]);
    mg_stat_add(&w->stats.loop_busy_ns, busy_ns);
    mg_loop_clock_t *c = &w->loop_clock;
    uint64_t second = end_ns / NS_PER_S;
    if (second != c->second) {
        c->longest_before_ns = second == c->second + 1 ? c->longest_ns : 0;
        c->second = second;
        c->longest_ns = 0;
    }
    if (busy_ns > c->longest_ns)
        c->longest_ns = busy_ns;
    stat_set(&w->stats.loop_longest_ns, c->longest_ns > c->longest_before_ns ? c->longest_ns : c->longest_before_ns);
    stat_set(&w->stats.loop_longest_second, second);
}

void mg_loop_turn_ended(mg_worker_t *w)
{
    uint64_t woke = w->ctx.loop->turn_woke_at_ns, now = now_ns();
    /* a run that failed before its wait (EINTR aside, an epoll_ctl error) woke from nothing */
    if (woke != 0 && woke != w->loop_clock.woke_ns && now >= woke)
        loop_record(w, now - woke, now);
    w->loop_clock.woke_ns = woke;
}
#else
void mg_loop_turn_ended(mg_worker_t *w)
{
    (void)w; /* Debian's unpatched h2o (a comparison build, docs/h2o.md): no turn times */
}
#endif

static void put_histogram(FILE *out, mg_worker_t *w)
{
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= MG_LOOP_TURN_BUCKETS; i++) {
        cumulative += mg_stat_read(&w->stats.loop_turns[i]);
        if (i < MG_LOOP_TURN_BUCKETS)
            fprintf(out, "matchgate_loop_turn_seconds_bucket{worker=\"%u\",le=\"%g\"} %" PRIu64 "\n", w->id,
                    (double)turn_bounds_ns[i] / 1e9, cumulative);
    }
    fprintf(out, "matchgate_loop_turn_seconds_bucket{worker=\"%u\",le=\"+Inf\"} %" PRIu64 "\n", w->id, cumulative);
    fprintf(out, "matchgate_loop_turn_seconds_sum{worker=\"%u\"} %.9f\n", w->id,
            (double)mg_stat_read(&w->stats.loop_busy_ns) / 1e9);
    fprintf(out, "matchgate_loop_turn_seconds_count{worker=\"%u\"} %" PRIu64 "\n", w->id, cumulative);
}

void mg_loop_put_metrics(FILE *out, mg_gateway_t *gw)
{
    fprintf(out, "# HELP matchgate_loop_turn_seconds How long each turn of a worker's event loop kept it busy, from waking "
                 "up to the end of its callbacks and timers: every connection of the worker waits while a turn runs.\n"
                 "# TYPE matchgate_loop_turn_seconds histogram\n");
    for (unsigned i = 0; i < gw->num_workers; i++)
        put_histogram(out, &gw->workers[i]);
    fprintf(out, "# HELP matchgate_loop_turn_longest_seconds The longest turn of each worker's event loop that ended in "
                 "the last two seconds (0 when none did).\n"
                 "# TYPE matchgate_loop_turn_longest_seconds gauge\n");
    uint64_t second = now_ns() / NS_PER_S;
    for (unsigned i = 0; i < gw->num_workers; i++) {
        mg_worker_stats_t *s = &gw->workers[i].stats;
        uint64_t longest = mg_stat_read(&s->loop_longest_ns), at = mg_stat_read(&s->loop_longest_second);
        fprintf(out, "matchgate_loop_turn_longest_seconds{worker=\"%u\"} %.9f\n", gw->workers[i].id,
                at + 1 >= second ? (double)longest / 1e9 : 0.0);
    }
}
