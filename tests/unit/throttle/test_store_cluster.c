/*
 * The store client on a three-master Redis Cluster started by the test (redis-server
 * --cluster-enabled yes x3, joined by redis-cli --cluster create): keys go to the node that owns
 * their slot (hash slots computed as Redis does), a client that knows one node learns the rest
 * from MOVED, and a slot migrated (MOVED and ASK) while clients on two threads hammer its keys
 * keeps every key exact. Each test starts its own Cluster (about 2 s); the suite takes about
 * 10 s.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include "throttle/store_internal.h"
#include "store_harness.h"

static rs_cluster_t cluster;
static mg_store_addr_t seeds[RS_CLUSTER_NODES];

static void start_or_skip(void)
{
    const char *why;
    if (!rs_available(&why))
        cr_skip_test("%s", why);
    cr_assert_eq(rs_cluster_start(&cluster), 0, "the Cluster did not come up (see %s/create.log)", cluster.node[0].dir);
    for (int i = 0; i < RS_CLUSTER_NODES; i++)
        seeds[i] = (mg_store_addr_t){"127.0.0.1", cluster.node[i].port};
}

static void stop(void)
{
    rs_cluster_stop(&cluster);
}

static int knows_all_nodes(void *arg)
{
    harness_t *h = arg;
    mg_store_stats_t s = h_stats(h);
    return s.slot_maps > 0 && s.nodes == RS_CLUSTER_NODES && s.nodes_up == RS_CLUSTER_NODES && s.connects >= RS_CLUSTER_NODES;
}

/* The key the store makes for (tag, "t"), and its slot. */
static size_t store_key(const char *tag, char *out)
{
    return mg__store_key(out, "mg:", 3, tag, strlen(tag), "t", 1);
}

Test(store_cluster, keys_go_to_the_node_that_owns_their_slot, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    static ask_t a[200];
    h_options_t o = {.servers = seeds, .num_servers = RS_CLUSTER_NODES, .timeout_us = 500000, .policy = POLICY_REJECT};
    h_init(&h, &o);
    cr_assert(tl_run_until(h.loop, knows_all_nodes, &h, 3000), "the slot map did not arrive: %s", h.last_event);
    for (int i = 0; i < 200; i++) {
        char tag[16];
        snprintf(tag, sizeof(tag), "tenant-%d", i);
        h_ask(&h, &a[i], tag, "t", (mg_quota_t){5, 10000000});
    }
    h_wait_answers(&h, 200, 3000);
    mg_store_stats_t s = h_stats(&h);
    cr_expect_eq(s.shared, 200);
    cr_expect_eq(s.moved + s.ask, 0, "every decision went straight to its slot's owner");
    cr_expect_eq(tl_watching(h.loop), RS_CLUSTER_NODES, "one connection per node");
    int per_node[RS_CLUSTER_NODES] = {0};
    for (int i = 0; i < 200; i++) {
        char key[64];
        size_t len = store_key(a[i].tag, key);
        unsigned slot = mg__store_slot(key, len);
        cr_assert_eq(rs_integer(&cluster.node[0], "CLUSTER KEYSLOT %b", key, len), (long long)slot, "%s", a[i].tag);
        int owner = rs_cluster_owner(&cluster, slot);
        cr_assert(owner >= 0);
        cr_expect_eq(rs_integer(&cluster.node[owner], "EXISTS %b", key, len), 1, "%s is on its owner", a[i].tag);
        per_node[owner]++;
    }
    for (int n = 0; n < RS_CLUSTER_NODES; n++)
        cr_expect(per_node[n] > 30, "node %d holds %d of 200 tenants", n, per_node[n]);
    h_fini(&h);
}

Test(store_cluster, one_node_named_as_a_plain_redis_learns_the_cluster_from_moved, .init = start_or_skip, .fini = stop)
{
    harness_t h;
    static ask_t a[60];
    h_options_t o = {.servers = seeds, .num_servers = 1, .timeout_us = 500000, .policy = POLICY_REJECT};
    h_init(&h, &o);
    h_wait_connected(&h);
    for (int i = 0; i < 30; i++) {
        char tag[16];
        snprintf(tag, sizeof(tag), "tenant-%d", i);
        h_ask(&h, &a[i], tag, "t", (mg_quota_t){5, 10000000});
    }
    h_wait_answers(&h, 30, 3000);
    mg_store_stats_t s = h_stats(&h);
    cr_expect_eq(s.shared, 30, "%llu of 30 decided by Redis", (unsigned long long)s.shared);
    cr_expect(s.moved > 0, "the other nodes' tenants were MOVED");
    cr_assert(tl_run_until(h.loop, knows_all_nodes, &h, 3000), "the whole map was asked for after MOVED");
    for (int i = 0; i < 30; i++)
        h_ask(&h, &a[30 + i], a[i].tag, "t", (mg_quota_t){5, 10000000});
    h_wait_answers(&h, 60, 3000);
    cr_expect_eq(h_stats(&h).moved, s.moved, "no more MOVED once the map is known");
    for (int i = 0; i < 30; i++)
        cr_expect_eq(a[30 + i].r.decision.remaining, 3, "%s: its second decision on the same key", a[i].tag);
    h_fini(&h);
}

/* ---- a slot migrated during a run ---- */

enum { THREADS = 2, KEYS = 12 };
static const mg_quota_t Q = {8, 200000};
static volatile int running;

typedef struct worker {
    pthread_t thread;
    recorder_t rec;
} worker_t;

/* twelve keys of one tenant: one slot */
static void acme_keys(int k, char *tag, char *rest)
{
    snprintf(tag, 32, "acme");
    snprintf(rest, 32, "r%d", k);
}

static int still_running(void *arg)
{
    return running;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    harness_t h;
    h_options_t o = {.servers = seeds, .num_servers = RS_CLUSTER_NODES, .timeout_us = 1000000, .policy = POLICY_REJECT};
    h_init(&h, &o);
    tl_run_until(h.loop, knows_all_nodes, &h, 3000);
    h_record_run(&h, &w->rec);
    h_fini(&h);
    return NULL;
}

Test(store_cluster, a_slot_migrated_during_a_run_stays_exact, .init = start_or_skip, .fini = stop)
{
    static worker_t w[THREADS];
    recorder_t *recs[THREADS];
    char key[64];
    unsigned slot = mg__store_slot(key, store_key("acme", key));
    int from = rs_cluster_owner(&cluster, slot), to = (from + 1) % RS_CLUSTER_NODES;
    cr_assert(from >= 0);
    running = 1;
    for (int i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].rec = (recorder_t){.keys = KEYS, .key_of = acme_keys, .quota = Q, .go_on = still_running};
        recs[i] = &w[i].rec;
        cr_assert_eq(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
    }
    usleep(400000);
    /* one key every 40 ms: decisions meet both the source (keys not moved yet) and ASK */
    int moved = rs_cluster_move_slot(&cluster, slot, from, to, 40000);
    usleep(400000);
    running = 0;
    for (int i = 0; i < THREADS; i++)
        pthread_join(w[i].thread, NULL);
    cr_assert_eq(moved, 0, "the migration failed");
    cr_expect_eq(rs_cluster_owner(&cluster, slot), to);

    uint64_t moved_seen = 0, ask_seen = 0;
    int decided = 0, fallback = 0;
    for (int i = 0; i < THREADS; i++) {
        moved_seen += w[i].rec.stats.moved;
        ask_seen += w[i].rec.stats.ask;
        decided += w[i].rec.decided;
        fallback += w[i].rec.fallback;
    }
    cr_log_info("%d decisions, %llu MOVED, %llu ASK, %d by the policy", decided, (unsigned long long)moved_seen,
                (unsigned long long)ask_seen, fallback);
    cr_expect(moved_seen > 0, "MOVED after the slot was handed over");
    cr_expect(ask_seen > 0, "ASK while its keys were moving");
    cr_expect_eq(fallback, 0, "every decision was Redis's, through the migration");
    for (int k = 0; k < KEYS; k++)
        cr_expect(h_check_windows(recs, THREADS, k, Q) >= 4 * (int)Q.requests, "key r%d admitted throughout", k);
}
