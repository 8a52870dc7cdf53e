/* Fair shares of the waiting (sched.c: key_queue_max, group_queue_max): what one key and one
 * group may hold in a backend's queue, and that a group's count goes back down on every way a
 * task stops waiting. The invariant checker (including G1, the groups' counts) runs after
 * every step (support.h). */
#include "support.h"

static ttask_t *tgroup(ttask_t *t, int id, const char *key, const char *group)
{
    tinit(t, id, key);
    t->group = group;
    return t;
}

static mg_sched_config_t cfg_shares(uint32_t slots, uint32_t key_max, uint32_t group_max)
{
    return (mg_sched_config_t){.max_in_flight = slots, .key_queue_max = key_max, .group_queue_max = group_max};
}

Test(share, a_key_holds_at_most_its_share_of_the_waiting)
{
    setup_sched(cfg_shares(1, 3, 0));
    ttask_t k[7], b, u;
    for (int i = 0; i < 4; i++)
        tinit(&k[i], i, "k");
    cr_assert_eq(submit(&k[0], MG_SCHED_NORMAL), MG_SCHED_STARTED, "a task that starts is not counted");
    for (int i = 1; i < 4; i++)
        cr_assert_eq(submit(&k[i], MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    tinit(&k[4], 4, "k");
    cr_assert_eq(submit(&k[4], MG_SCHED_HIGH), MG_SCHED_KEY_FULL, "three wait: the fourth is over the share");
    tinit(&b, 10, "b");
    tinit(&u, 11, NULL);
    cr_assert_eq(submit(&b, MG_SCHED_NORMAL), MG_SCHED_QUEUED, "another key has its own share");
    cr_assert_eq(submit(&u, MG_SCHED_NORMAL), MG_SCHED_QUEUED, "unordered tasks have no key share");
    cr_assert_eq(stats().share_refused, 1);
    complete(&k[0]);
    cr_assert_eq(deliver(), 1);
    tinit(&k[5], 5, "k");
    tinit(&k[6], 6, "k");
    cr_assert_eq(submit(&k[5], MG_SCHED_NORMAL), MG_SCHED_QUEUED, "one started: room for one");
    cr_assert_eq(submit(&k[6], MG_SCHED_NORMAL), MG_SCHED_KEY_FULL);
    run_all();
    cr_assert_eq(k[4].calls + k[6].calls, 0, "refused tasks get no callback");
    static const int want[] = {0, 1, 2, 3, 5};
    int ids[16];
    size_t n = started_ids(ids, 16), ks = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 10)
            cr_assert_eq(ids[i], want[ks++], "the key's accepted tasks, in order");
    cr_assert_eq(n, 7);
    cr_assert_eq(ks, 5);
    cr_assert_eq(stats().share_refused, 2);
    teardown_sched();
}

Test(share, a_group_holds_at_most_its_share_across_keys_and_unordered_tasks)
{
    setup_sched(cfg_shares(1, 0, 3));
    ttask_t t[10];
    cr_assert_eq(submit(tgroup(&t[0], 0, NULL, "acme"), MG_SCHED_NORMAL), MG_SCHED_STARTED);
    cr_assert_eq(submit(tgroup(&t[1], 1, "a", "acme"), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(submit(tgroup(&t[2], 2, "b", "acme"), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(submit(tgroup(&t[3], 3, NULL, "acme"), MG_SCHED_HIGH), MG_SCHED_QUEUED);
    cr_assert_eq(stats().keys, 2);
    cr_assert_eq(submit(tgroup(&t[4], 4, "c", "acme"), MG_SCHED_NORMAL), MG_SCHED_GROUP_FULL, "a new key");
    cr_assert_eq(stats().keys, 2, "the refused key's state is gone");
    cr_assert_eq(submit(tgroup(&t[5], 5, "a", "acme"), MG_SCHED_NORMAL), MG_SCHED_GROUP_FULL, "a busy key");
    cr_assert_eq(submit(tgroup(&t[6], 6, NULL, "acme"), MG_SCHED_NORMAL), MG_SCHED_GROUP_FULL, "unordered");
    cr_assert_eq(submit(tgroup(&t[7], 7, "a", "globex"), MG_SCHED_NORMAL), MG_SCHED_QUEUED, "another group, same key");
    cr_assert_eq(submit(tgroup(&t[8], 8, NULL, "acme2"), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(submit(tgroup(&t[9], 9, "acme", NULL), MG_SCHED_NORMAL), MG_SCHED_QUEUED, "no group, a key named alike");
    mg_sched_stats_t st = stats();
    cr_assert_eq(st.groups, 3);
    cr_assert_eq(st.waiting, 6);
    cr_assert_eq(st.share_refused, 3);
    run_all();
    cr_assert_eq(t[4].calls + t[5].calls + t[6].calls, 0);
    cr_assert_eq(stats().groups, 0, "nothing waits: no group has state");
    teardown_sched();
}

/* Fills group g (share 2) while a blocker holds the only slot. */
static void fill(ttask_t *a, ttask_t *b, int id, const char *key_a, const char *key_b)
{
    cr_assert_eq(submit(tgroup(a, id, key_a, "g"), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(submit(tgroup(b, id + 1, key_b, "g"), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
}

static void assert_group_full(int id)
{
    ttask_t x;
    cr_assert_eq(submit(tgroup(&x, id, NULL, "g"), MG_SCHED_NORMAL), MG_SCHED_GROUP_FULL);
}

static void assert_group_room(int id)
{
    ttask_t x;
    cr_assert_eq(submit(tgroup(&x, id, "room", "g"), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(mg_sched_cancel(T.s, &x.t), 1);
    check();
}

Test(share, the_group_count_goes_down_on_every_way_out_of_waiting)
{
    mg_sched_config_t c = {.max_in_flight = 1, .queue_timeout_us = 100, .group_queue_max = 2};
    setup_sched(c);
    ttask_t blocker, a, b, d;
    tgroup(&blocker, 0, NULL, "g");
    cr_assert_eq(submit(&blocker, MG_SCHED_NORMAL), MG_SCHED_STARTED);

    /* withdrawn: mg_sched_cancel (unordered and ordered) */
    fill(&a, &b, 10, NULL, "k");
    assert_group_full(12);
    cr_assert_eq(mg_sched_cancel(T.s, &a.t), 1);
    check();
    assert_group_room(13);
    cr_assert_eq(mg_sched_cancel(T.s, &b.t), 1);
    cr_assert_eq(stats().groups, 0, "cancelled: nothing left");

    /* timed out */
    fill(&a, &b, 20, "k", NULL);
    assert_group_full(22);
    cr_assert_eq(mg_sched_expire(T.s, 100), MG_SCHED_NO_DEADLINE);
    cr_assert_eq(deliver(), 2);
    cr_assert(a.status == MG_SCHED_TIMEOUT && b.status == MG_SCHED_TIMEOUT);
    cr_assert_eq(stats().groups, 0, "timed out: nothing left");

    /* cancelled by a drain */
    fill(&a, &b, 30, "d", "d");
    assert_group_full(32);
    cr_assert_eq(mg_sched_drain(T.s, "d", 1, MG_SCHED_DRAIN_CANCEL, NULL), 1);
    cr_assert_eq(deliver(), 2);
    cr_assert_eq(stats().groups, 0, "drained: nothing left");

    /* started: granted a slot (unordered), then its key's turn after a drain that runs */
    fill(&a, &b, 40, NULL, "r");
    tgroup(&d, 42, "r", NULL);
    cr_assert_eq(submit(&d, MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(mg_sched_drain(T.s, "r", 1, MG_SCHED_DRAIN_RUN, NULL), 1);
    complete(&blocker);
    cr_assert_eq(deliver(), 1);
    cr_assert(a.running, "the unordered task is granted the slot");
    assert_group_room(43);
    complete(&a);
    deliver();
    cr_assert(b.running);
    cr_assert_eq(stats().groups, 0, "every task of g started");
    complete(&b);
    deliver();
    complete(&d);
    cr_assert_eq(stats().keys, 0);
    teardown_sched();
}

Test(share, a_lower_share_on_reload_keeps_what_waits_and_refuses_new_work)
{
    mg_sched_config_t c = cfg_shares(1, 3, 3);
    setup_sched(c);
    ttask_t t[8];
    submit(tgroup(&t[0], 0, NULL, NULL), MG_SCHED_NORMAL);
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(submit(tgroup(&t[i], i, "k", "g"), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    c.key_queue_max = c.group_queue_max = 1;
    cr_assert_eq(mg_sched_configure(T.s, &c), 0);
    check();
    cr_assert_eq(stats().waiting, 3, "nothing that waits is dropped");
    cr_assert_eq(submit(tgroup(&t[4], 4, "k", NULL), MG_SCHED_NORMAL), MG_SCHED_KEY_FULL);
    cr_assert_eq(submit(tgroup(&t[5], 5, NULL, "g"), MG_SCHED_NORMAL), MG_SCHED_GROUP_FULL);
    c.key_queue_max = c.group_queue_max = 0;
    cr_assert_eq(mg_sched_configure(T.s, &c), 0);
    cr_assert_eq(submit(tgroup(&t[6], 6, "k", "g"), MG_SCHED_NORMAL), MG_SCHED_QUEUED, "0: no share");
    run_all();
    assert_started(0, 1, 2, 3, 6);
    teardown_sched();
}

Test(share, shares_do_not_touch_work_that_starts_at_once_nor_the_backend_bound)
{
    /* unlimited slots: nothing waits for a slot; a share of 1 still lets a key's tasks queue
     * one at a time behind its running task, and the backend's queue_max still applies */
    setup_sched((mg_sched_config_t){.key_queue_max = 1, .group_queue_max = 2, .queue_max = 2});
    ttask_t t[6];
    cr_assert_eq(submit(tgroup(&t[0], 0, "a", "g"), MG_SCHED_NORMAL), MG_SCHED_STARTED);
    cr_assert_eq(submit(tgroup(&t[1], 1, "b", "g"), MG_SCHED_NORMAL), MG_SCHED_STARTED);
    cr_assert_eq(submit(tgroup(&t[2], 2, NULL, "g"), MG_SCHED_NORMAL), MG_SCHED_STARTED);
    cr_assert_eq(submit(tgroup(&t[3], 3, "a", "g"), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(submit(tgroup(&t[4], 4, "b", "h"), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(submit(tgroup(&t[5], 5, "c", "h"), MG_SCHED_NORMAL), MG_SCHED_STARTED);
    ttask_t over;
    tgroup(&over, 6, "c", "i");
    cr_assert_eq(submit(&over, MG_SCHED_NORMAL), MG_SCHED_FULL, "queue_max: the backend's bound");
    cr_assert_eq(stats().groups, 2, "the refused task's group was not kept");
    run_all();
    teardown_sched();
}

Test(share, group_names_are_bytes_and_truncated_like_keys)
{
    setup_sched(cfg_shares(1, 0, 1));
    char long_a[MG_SCHED_MAX_KEY_LEN + 2], long_b[MG_SCHED_MAX_KEY_LEN + 2];
    memset(long_a, 'x', sizeof(long_a));
    memcpy(long_b, long_a, sizeof(long_b));
    long_a[MG_SCHED_MAX_KEY_LEN] = 'a';
    long_b[MG_SCHED_MAX_KEY_LEN] = 'b';
    long_a[MG_SCHED_MAX_KEY_LEN + 1] = long_b[MG_SCHED_MAX_KEY_LEN + 1] = '\0';
    ttask_t t[5];
    submit(tgroup(&t[0], 0, NULL, NULL), MG_SCHED_NORMAL);
    cr_assert_eq(submit(tgroup(&t[1], 1, NULL, long_a), MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(submit(tgroup(&t[2], 2, NULL, long_b), MG_SCHED_NORMAL), MG_SCHED_GROUP_FULL, "the same first 1024 bytes");
    mg_sched_names_t nul = {NULL, 0, "a\0b", 3}, nul2 = {NULL, 0, "a\0c", 3};
    tinit(&t[3], 3, NULL);
    tinit(&t[4], 4, NULL);
    cr_assert_eq(mg_sched_submit_group(T.s, &t[3].t, &nul, MG_SCHED_NORMAL, 0), MG_SCHED_QUEUED);
    cr_assert_eq(mg_sched_submit_group(T.s, &t[4].t, &nul2, MG_SCHED_NORMAL, 0), MG_SCHED_QUEUED, "bytes after a NUL count");
    check();
    cr_assert_eq(stats().groups, 3);
    run_all();
    teardown_sched();
}

Test(share, the_checker_catches_a_group_count_that_drifts)
{
    setup_sched(cfg_shares(1, 0, 5));
    ttask_t t[3];
    submit(tgroup(&t[0], 0, NULL, NULL), MG_SCHED_NORMAL);
    submit(tgroup(&t[1], 1, "k", "g"), MG_SCHED_NORMAL);
    submit(tgroup(&t[2], 2, NULL, "g"), MG_SCHED_NORMAL);
    mg__sched_group_t *g = t[1].t.mg__.group;
    cr_assert_not_null(g);
    cr_assert_eq(g, t[2].t.mg__.group, "one state per group");
    char why[256];
    g->waiting++;
    cr_assert_eq(mg__sched_check(T.s, 1, why, sizeof(why)), -1);
    cr_assert(strstr(why, "group g") != NULL, "%s", why);
    g->waiting--;
    check();
    run_all();
    teardown_sched();
}
