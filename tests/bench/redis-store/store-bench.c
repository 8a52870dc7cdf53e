/*
 * store-bench: decision latency through one store client (one Redis connection, the test poll()
 * loop standing in for a worker's h2o loop), with 1, 16 and 256 decisions outstanding.
 *
 * A closed loop: DEPTH decisions are in flight; each answer starts the next one at once (from
 * its callback), so the decisions answered in one loop turn go out together in the next write.
 * Figures per row:
 *   p50 / p99 / p99.9   each decision's latency_us (mg_store_decide to its answer, as the
 *                       client measures it: queueing in the pipeline included)
 *   decisions/s         answers per second of wall time
 *   writes/decision     the client's flushes (writes that sent commands) per decision: the round
 *                       trips a decision costs (1.0 without pipelining)
 * Workloads: "admit" (quota 1,000,000 per second: every decision admits and appends to the
 * log) and "reject" (quota 1 per hour: every decision after the first rejects, reading only),
 * on 1 key and on 1,000 keys (tags "tenant-0" .. "tenant-999", drawn in turn).
 *
 * A benchmark: prints a table, never fails on time.
 *   store-bench PORT [DECISIONS [ROUNDS]]   defaults 200000 and 3 (the median round is shown)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/throttle/store_support.h"

enum { MAX_DEPTH = 256, MAX_ROUNDS = 9 };

typedef struct bench {
    tl_loop_t *loop;
    mg_store_client_t *client;
    mg_quota_t quota;
    int keys, depth;
    long target, issued, answered, failed;
    uint64_t *latency;
} bench_t;

typedef struct slot {
    bench_t *b;
    mg_store_call_t *call;
    mg_store_result_t now;
} slot_t;

static int on_failure(void *arg, void *call_arg, mg_quota_t quota, mg_store_failure_t why, mg_decision_t *d)
{
    return 0;
}

static void issue(slot_t *s);

static void on_done(void *arg, const mg_store_result_t *r)
{
    slot_t *s = arg;
    bench_t *b = s->b;
    b->failed += r->failure != MG_STORE_OK;
    b->latency[b->answered++] = r->latency_us;
    if (b->issued < b->target)
        issue(s);
}

static void issue(slot_t *s)
{
    bench_t *b = s->b;
    char tag[16];
    int len = snprintf(tag, sizeof(tag), "tenant-%ld", b->issued++ % b->keys);
    int rc = mg_store_decide(b->client, tag, (size_t)len, "t", 1, b->quota, on_done, s, &s->call, &s->now);
    if (rc == MG_STORE_ANSWERED)
        on_done(s, &s->now);
    if (rc < 0) {
        fprintf(stderr, "mg_store_decide: %d\n", rc);
        exit(1);
    }
}

static int all_answered(void *arg)
{
    bench_t *b = arg;
    return b->answered >= b->target;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct row {
    uint64_t p50, p99, p999;
    double per_s, writes;
    long failed;
} row_t;

static int connected(void *arg)
{
    mg_store_stats_t s;
    mg_store_client_stats(arg, &s);
    return s.connects > 0;
}

static row_t run(mg_store_t *store, mg_quota_t q, int keys, int depth, long decisions)
{
    static slot_t slots[MAX_DEPTH];
    bench_t b = {.loop = tl_loop_new(), .quota = q, .keys = keys, .depth = depth, .target = decisions};
    mg_store_client_conf_t conf;
    mg_store_stats_t before, after;
    row_t row;
    b.latency = malloc((size_t)decisions * sizeof(*b.latency));
    conf = (mg_store_client_conf_t){tl_loop_ops(b.loop), on_failure, NULL, NULL};
    b.client = mg_store_client_new(store, &conf);
    if (b.client == NULL || b.latency == NULL || !tl_run_until(b.loop, connected, b.client, 5000)) {
        fprintf(stderr, "no connection to Redis\n");
        exit(1);
    }
    mg_store_client_stats(b.client, &before);
    uint64_t start = tl_now_us();
    for (int i = 0; i < depth; i++) {
        slots[i].b = &b;
        issue(&slots[i]);
    }
    tl_run_until(b.loop, all_answered, &b, 600000);
    uint64_t elapsed = tl_now_us() - start;
    mg_store_client_stats(b.client, &after);
    qsort(b.latency, (size_t)b.answered, sizeof(uint64_t), compare_u64);
    row.p50 = b.latency[b.answered / 2];
    row.p99 = b.latency[b.answered * 99 / 100];
    row.p999 = b.latency[b.answered * 999 / 1000];
    row.per_s = (double)b.answered * 1e6 / (double)elapsed;
    row.writes = (double)(after.flushes - before.flushes) / (double)b.answered;
    row.failed = b.failed;
    mg_store_client_free(b.client);
    tl_loop_free(b.loop);
    free(b.latency);
    return row;
}

static int compare_rows(const void *a, const void *b)
{
    double x = ((const row_t *)a)->per_s, y = ((const row_t *)b)->per_s;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    static const int depths[] = {1, 16, 256}, key_counts[] = {1, 1000};
    static const struct {
        const char *name;
        mg_quota_t q;
    } loads[] = {{"admit", {1000000, 1000000}}, {"reject", {1, 3600000000u}}};
    if (argc < 2) {
        fprintf(stderr, "usage: store-bench PORT [DECISIONS [ROUNDS]]\n");
        return 2;
    }
    long decisions = argc > 2 ? atol(argv[2]) : 200000;
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    rounds = rounds < 1 ? 1 : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
    mg_store_addr_t addr = {"127.0.0.1", (uint16_t)atoi(argv[1])};
    mg_store_conf_t conf = {.servers = &addr, .num_servers = 1, .timeout_us = 1000000, .key_prefix = "bench:"};
    const char *err;
    mg_store_t *store = mg_store_new(&conf, &err);
    if (store == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("%-7s %5s %6s %9s %9s %9s %12s %16s %s\n", "load", "keys", "depth", "p50 us", "p99 us", "p99.9 us", "decisions/s",
           "writes/decision", "failed");
    for (size_t l = 0; l < 2; l++)
        for (size_t k = 0; k < 2; k++)
            for (size_t d = 0; d < 3; d++) {
                row_t rows[MAX_ROUNDS];
                for (int r = 0; r < rounds; r++)
                    rows[r] = run(store, loads[l].q, key_counts[k], depths[d], decisions);
                qsort(rows, (size_t)rounds, sizeof(rows[0]), compare_rows);
                row_t *m = &rows[rounds / 2];
                printf("%-7s %5d %6d %9llu %9llu %9llu %12.0f %16.4f %ld\n", loads[l].name, key_counts[k], depths[d],
                       (unsigned long long)m->p50, (unsigned long long)m->p99, (unsigned long long)m->p999, m->per_s, m->writes,
                       m->failed);
                fflush(stdout);
            }
    mg_store_free(store);
    return 0;
}
