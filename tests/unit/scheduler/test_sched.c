/* The scheduler on one thread, with an executor the test drives: order within a key,
 * priorities without preemption, quantum fairness (Jain's index), capacity, high-first
 * with its starvation bound, queue timeout, limits, cancel, drain (run and cancel), removal
 * while running, reconfiguration, and key states freed when idle. Every step is followed
 * by a check of the scheduler's invariants (support.h). */
#include "support.h"

static mg_sched_config_t cfg_slots(uint32_t max_in_flight)
{
    return (mg_sched_config_t){.max_in_flight = max_in_flight};
}

Test(sched, order_within_a_key)
{
    setup_sched(cfg_slots(0));
    ttask_t a[5];
    for (int i = 0; i < 5; i++)
        tinit(&a[i], i + 1, "acct-42");
    cr_assert_eq(submit(&a[0], MG_SCHED_NORMAL), MG_SCHED_STARTED);
    for (int i = 1; i < 5; i++)
        cr_assert_eq(submit(&a[i], MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(deliver(), 0, "nothing starts while the key's first task runs");
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 5; j++)
            cr_assert_eq(a[j].running, j == i, "only task %d runs", i + 1);
        complete(&a[i]);
        cr_assert_eq(deliver(), i < 4 ? 1u : 0u);
    }
    assert_started(1, 2, 3, 4, 5);
    cr_assert_eq(stats().keys, 0, "the idle key has no state");
    teardown_sched();
}

Test(sched, keys_run_side_by_side_and_unordered_tasks_touch_no_key)
{
    setup_sched(cfg_slots(0));
    ttask_t a, b, u;
    tinit(&a, 1, "a");
    tinit(&b, 2, "b");
    tinit(&u, 3, NULL);
    cr_assert_eq(submit(&a, MG_SCHED_NORMAL), MG_SCHED_STARTED);
    cr_assert_eq(submit(&b, MG_SCHED_NORMAL), MG_SCHED_STARTED);
    cr_assert_eq(submit(&u, MG_SCHED_NORMAL), MG_SCHED_STARTED);
    mg_sched_stats_t st = stats();
    cr_assert_eq(st.keys, 2);
    cr_assert_eq(st.in_flight, 0, "tasks of an unlimited backend hold no counted slot");
    complete(&u);
    complete(&b);
    complete(&a);
    cr_assert_eq(stats().keys, 0);
    cr_assert_eq(mg_sched_complete(T.s, &a.t), -1, "a second completion is refused");
    teardown_sched();
}

Test(sched, binary_and_long_keys)
{
    setup_sched(cfg_slots(0));
    ttask_t a, b, c, d;
    tinit(&a, 1, NULL);
    tinit(&b, 2, NULL);
    cr_assert_eq(mg_sched_submit(T.s, &a.t, "x\0y", 3, MG_SCHED_NORMAL, 0), MG_SCHED_STARTED);
    cr_assert_eq(mg_sched_submit(T.s, &b.t, "x\0z", 3, MG_SCHED_NORMAL, 0), MG_SCHED_STARTED, "keys are bytes, not strings");
    static char long1[MG_SCHED_MAX_KEY_LEN + 10], long2[MG_SCHED_MAX_KEY_LEN + 10];
    memset(long1, 'k', sizeof(long1));
    memset(long2, 'k', sizeof(long2));
    long2[MG_SCHED_MAX_KEY_LEN + 5] = 'j';
    tinit(&c, 3, NULL);
    tinit(&d, 4, NULL);
    cr_assert_eq(mg_sched_submit(T.s, &c.t, long1, sizeof(long1), MG_SCHED_NORMAL, 0), MG_SCHED_STARTED);
    cr_assert_eq(mg_sched_submit(T.s, &d.t, long2, sizeof(long2), MG_SCHED_NORMAL, 0), MG_SCHED_QUEUED,
                 "keys are cut at MG_SCHED_MAX_KEY_LEN bytes");
    cr_assert_eq(stats().keys, 3);
    a.running = b.running = c.running = 1;
    complete(&a);
    complete(&b);
    complete(&c);
    deliver();
    cr_assert(d.running);
    complete(&d);
    teardown_sched();
}

Test(sched, high_priority_jumps_ahead_but_never_preempts)
{
    setup_sched(cfg_slots(0));
    ttask_t t1, n2, n3, h4, h5;
    tinit(&t1, 1, "k");
    tinit(&n2, 2, "k");
    tinit(&n3, 3, "k");
    tinit(&h4, 4, "k");
    tinit(&h5, 5, "k");
    cr_assert_eq(submit(&t1, MG_SCHED_NORMAL), MG_SCHED_STARTED);
    submit(&n2, MG_SCHED_NORMAL);
    submit(&n3, MG_SCHED_NORMAL);
    cr_assert_eq(submit(&h4, MG_SCHED_HIGH), MG_SCHED_QUEUED);
    submit(&h5, MG_SCHED_HIGH);
    cr_assert_eq(deliver(), 0, "the running task is not interrupted");
    cr_assert(t1.running);
    cr_assert_eq(stats().waiting_high, 2);
    run_all();
    assert_started(1, 4, 5, 2, 3);
    teardown_sched();
}

Test(sched, high_tasks_overtake_a_normal_one_at_most_high_burst_in_a_row)
{
    setup_sched((mg_sched_config_t){.high_burst = 3});
    ttask_t t0, n1, h[6];
    tinit(&t0, 1, "k");
    tinit(&n1, 2, "k");
    cr_assert_eq(submit(&t0, MG_SCHED_NORMAL), MG_SCHED_STARTED);
    submit(&n1, MG_SCHED_NORMAL);
    for (int i = 0; i < 6; i++) {
        tinit(&h[i], 11 + i, "k");
        submit(&h[i], MG_SCHED_HIGH);
    }
    run_all();
    assert_started(1, 11, 12, 13, 2, 14, 15, 16);
    teardown_sched();
}

Test(sched, keys_take_turns_of_one_quantum)
{
    setup_sched((mg_sched_config_t){.max_in_flight = 1, .quantum = 3});
    ttask_t a[10], b[10];
    for (int i = 0; i < 10; i++) {
        tinit(&a[i], 100 + i, "a");
        tinit(&b[i], 200 + i, "b");
    }
    for (int i = 0; i < 10; i++) {
        submit(&a[i], MG_SCHED_NORMAL);
        submit(&b[i], MG_SCHED_NORMAL);
    }
    cr_assert_eq(run_all(), 1);
    assert_started(100, 101, 102, 200, 201, 202, 103, 104, 105, 203, 204, 205, 106, 107, 108, 206, 207, 208, 109, 209);
    teardown_sched();
}

/* Jain's fairness index over the keys of the skewed load: one key with 10,000 tasks
 * (submitted first) and 99 keys with 10 each, all waiting at the start; tasks complete in the
 * order they started. What is measured: x_k = tasks of key k started from the first start up
 * to the start of the last task of the small keys (the span in which the big key competes
 * with small keys that still have work); index = (sum x)^2 / (n * sum x^2). Ideal round
 * robin gives each key one quantum Q in that span, and each small key has 10 tasks, so the
 * big key gets min(Q, ...) against 10: (Q + 990)^2 / (100 (Q^2 + 9900)) when C = 1. */
static double jain_skewed(uint32_t slots, uint32_t quantum)
{
    setup_sched((mg_sched_config_t){.max_in_flight = slots, .quantum = quantum});
    T.no_check = 1;
    static ttask_t tasks[10990];
    static char names[100][8];
    int n = 0;
    for (int k = 0; k < 100; k++) {
        snprintf(names[k], sizeof(names[k]), "k%d", k);
        for (int i = 0; i < (k == 0 ? 10000 : 10); i++, n++) {
            tinit(&tasks[n], n, names[k]);
            cr_assert_neq(submit(&tasks[n], MG_SCHED_NORMAL), MG_SCHED_NOMEM);
        }
    }
    T.no_check = 0;
    check();
    T.no_check = 1;
    cr_assert_leq(run_all(), (int)slots);
    static int order[10990];
    size_t started = 0;
    for (size_t i = 0; i < T.nlog; i++)
        order[started++] = T.log[i].id;
    cr_assert_eq(started, 10990u, "every task ran once");
    size_t end = 0;
    for (size_t i = 0; i < started; i++)
        if (order[i] >= 10000)
            end = i;
    double x[100] = {0}, sum = 0, sq = 0;
    for (size_t i = 0; i <= end; i++)
        x[order[i] < 10000 ? 0 : 1 + (order[i] - 10000) / 10] += 1;
    for (int k = 0; k < 100; k++) {
        sum += x[k];
        sq += x[k] * x[k];
    }
    T.no_check = 0;
    cr_assert_eq(stats().keys, 0);
    teardown_sched();
    return sum * sum / (100 * sq);
}

static double jain_expected(double q)
{
    double big = q < 10000 ? q : 10000;
    return (big + 990) * (big + 990) / (100 * (big * big + 9900));
}

Test(sched, quantum_fairness_jain_index_on_a_skewed_load)
{
    /* the default quantum, at any number of slots: with more than one slot the big key gets a
     * second turn inside the span (20 against 10), which is the 0.992 floor */
    for (uint32_t slots = 1; slots <= 16; slots *= 2) {
        double j = jain_skewed(slots, 0);
        cr_expect_geq(j, 0.99, "default quantum, %u slots: Jain %.4f", slots, j);
    }
    /* one slot: exactly what round robin with a quantum gives */
    uint32_t quanta[] = {10, 16, 20, 50};
    for (size_t i = 0; i < sizeof(quanta) / sizeof(quanta[0]); i++) {
        double j = jain_skewed(1, quanta[i]);
        cr_expect_float_eq(j, jain_expected(quanta[i]), 1e-9, "quantum %u: %.6f against %.6f", quanta[i], j,
                           jain_expected(quanta[i]));
    }
    /* the index does tell: a quantum of 50 lets the big key take 50 turns against 10, and no
     * quantum (1000: more than the small keys' whole backlog) lets it run ahead of them */
    cr_expect_lt(jain_skewed(1, 50), 0.9);
    double none = jain_skewed(1, MG_SCHED_MAX_QUANTUM);
    cr_expect_lt(none, 0.05, "without a quantum: Jain %.4f", none);
}

Test(sched, capacity_caps_running_tasks)
{
    setup_sched(cfg_slots(3));
    ttask_t k[10], u[5];
    static char names[10][4];
    for (int i = 0; i < 10; i++) {
        snprintf(names[i], sizeof(names[i]), "k%d", i);
        tinit(&k[i], i, names[i]);
        cr_assert_eq(submit(&k[i], MG_SCHED_NORMAL), i < 3 ? MG_SCHED_STARTED : MG_SCHED_QUEUED);
    }
    for (int i = 0; i < 5; i++) {
        tinit(&u[i], 10 + i, NULL);
        cr_assert_eq(submit(&u[i], MG_SCHED_NORMAL), MG_SCHED_QUEUED, "unordered tasks wait for a slot too");
    }
    mg_sched_stats_t st = stats();
    cr_assert_eq(st.in_flight, 3);
    cr_assert_eq(st.waiting, 12);
    cr_assert_eq(st.ready, 12, "7 keys and 5 unordered tasks wait for a slot");
    cr_assert_eq(run_all(), 3, "never more than max_in_flight at once");
    assert_started(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14);
    cr_assert_eq(stats().in_flight, 0);
    teardown_sched();
}

Test(sched, unordered_fast_path_and_its_slot)
{
    setup_sched(cfg_slots(1));
    ttask_t u1, u2, k1;
    tinit(&u1, 1, NULL);
    tinit(&u2, 2, NULL);
    tinit(&k1, 3, "k");
    cr_assert_eq(submit(&u1, MG_SCHED_NORMAL), MG_SCHED_STARTED);
    cr_assert_eq(stats().in_flight, 1);
    cr_assert_eq(submit(&k1, MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(submit(&u2, MG_SCHED_HIGH), MG_SCHED_QUEUED);
    complete(&u1); /* lock-free release; entries wait, so it pumps */
    cr_assert_eq(deliver(), 1);
    cr_assert(u2.running, "the high entry first");
    complete(&u2);
    cr_assert_eq(deliver(), 1);
    cr_assert(k1.running);
    complete(&k1);
    teardown_sched();
}

Test(sched, high_entries_first_normal_ones_after_high_burst_grants)
{
    setup_sched((mg_sched_config_t){.max_in_flight = 1, .high_burst = 2});
    ttask_t x, n, h[6];
    static char names[6][4];
    tinit(&x, 1, "x");
    tinit(&n, 2, "n");
    cr_assert_eq(submit(&x, MG_SCHED_NORMAL), MG_SCHED_STARTED);
    submit(&n, MG_SCHED_NORMAL);
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof(names[i]), "h%d", i);
        tinit(&h[i], 11 + i, names[i]);
        submit(&h[i], MG_SCHED_HIGH);
    }
    run_all();
    assert_started(1, 11, 12, 2, 13, 14, 15, 16);
    teardown_sched();
}

Test(sched, a_normal_key_gives_its_slot_up_when_high_work_waits)
{
    setup_sched(cfg_slots(1));
    ttask_t a[4], h;
    for (int i = 0; i < 4; i++) {
        tinit(&a[i], i, "a");
        submit(&a[i], MG_SCHED_NORMAL);
    }
    tinit(&h, 9, "h");
    cr_assert_eq(submit(&h, MG_SCHED_HIGH), MG_SCHED_QUEUED);
    run_all();
    assert_started(0, 9, 1, 2, 3);
    teardown_sched();
}

Test(sched, queue_timeout)
{
    setup_sched((mg_sched_config_t){.max_in_flight = 1, .queue_timeout_us = 100});
    ttask_t u0, u1, k1, k2, k3;
    tinit(&u0, 1, NULL);
    tinit(&u1, 2, NULL);
    tinit(&k1, 3, "k");
    tinit(&k2, 4, "k");
    tinit(&k3, 5, "k");
    cr_assert_eq(submit_at(&u0, MG_SCHED_NORMAL, 0), MG_SCHED_STARTED);
    cr_assert_eq(mg_sched_next_deadline(T.s), MG_SCHED_NO_DEADLINE);
    submit_at(&u1, MG_SCHED_NORMAL, 10);
    submit_at(&k1, MG_SCHED_NORMAL, 20);
    submit_at(&k2, MG_SCHED_NORMAL, 30);
    cr_assert_eq(mg_sched_next_deadline(T.s), 110);
    cr_assert_eq(mg_sched_expire(T.s, 109), 110);
    cr_assert_eq(deliver(), 0);
    cr_assert_eq(mg_sched_expire(T.s, 110), 120);
    cr_assert_eq(deliver(), 1);
    cr_assert_eq(u1.status, MG_SCHED_TIMEOUT);
    cr_assert_eq(mg_sched_expire(T.s, 125), 130);
    cr_assert_eq(deliver(), 1);
    cr_assert_eq(k1.status, MG_SCHED_TIMEOUT, "the key's head timed out; the key still waits for its next task");
    cr_assert_eq(stats().ready, 1);
    complete(&u0);
    cr_assert_eq(deliver(), 1);
    cr_assert(k2.running);
    submit_at(&k3, MG_SCHED_NORMAL, 200);
    cr_assert_eq(mg_sched_expire(T.s, 299), 300);
    cr_assert_eq(mg_sched_expire(T.s, 300), MG_SCHED_NO_DEADLINE);
    cr_assert_eq(deliver(), 1);
    cr_assert_eq(k3.status, MG_SCHED_TIMEOUT, "waiting behind its key counts as waiting");
    cr_assert(k2.running, "the running task is not touched");
    complete(&k2);
    cr_assert_eq(deliver(), 0);
    mg_sched_stats_t st = stats();
    cr_assert_eq(st.timeouts, 3);
    cr_assert_eq(st.keys, 0);
    ttask_t *ended[] = {&u1, &k1, &k2, &k3};
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(ended[i]->calls, 1, "task %d: %d callbacks", ended[i]->id, ended[i]->calls);
    teardown_sched();
}

Test(sched, a_ready_key_whose_tasks_all_time_out_is_released)
{
    setup_sched((mg_sched_config_t){.max_in_flight = 1, .queue_timeout_us = 100});
    ttask_t u0, z1, z2, a1;
    tinit(&u0, 1, NULL);
    tinit(&z1, 2, "z");
    tinit(&z2, 3, "z");
    tinit(&a1, 4, "a");
    submit_at(&u0, MG_SCHED_NORMAL, 0);
    submit_at(&z1, MG_SCHED_NORMAL, 0);
    submit_at(&z2, MG_SCHED_HIGH, 0);
    submit_at(&a1, MG_SCHED_NORMAL, 50);
    cr_assert_eq(stats().ready, 2);
    cr_assert_eq(mg_sched_expire(T.s, 100), 150);
    cr_assert_eq(deliver(), 2);
    mg_sched_stats_t st = stats();
    cr_assert_eq(st.keys, 1, "z has nothing left: no state");
    cr_assert_eq(st.ready, 1);
    complete(&u0);
    cr_assert_eq(deliver(), 1);
    cr_assert(a1.running, "the slot goes to a, not to the released z");
    complete(&a1);
    teardown_sched();
}

Test(sched, queue_limit_signals_full_and_queue_max_refuses)
{
    setup_sched((mg_sched_config_t){.max_in_flight = 1, .queue_limit = 2, .queue_max = 3});
    ttask_t u[6], k1, k2;
    for (int i = 0; i < 6; i++)
        tinit(&u[i], i, NULL);
    tinit(&k1, 10, "k");
    tinit(&k2, 11, "k");
    cr_assert_eq(submit(&u[0], MG_SCHED_NORMAL), MG_SCHED_STARTED, "a task that need not wait is never refused");
    cr_assert_eq(submit(&u[1], MG_SCHED_NORMAL), MG_SCHED_QUEUED);
    cr_assert_eq(submit(&u[2], MG_SCHED_NORMAL), MG_SCHED_QUEUED_FULL);
    cr_assert_eq(submit(&u[3], MG_SCHED_NORMAL), MG_SCHED_QUEUED_FULL);
    cr_assert_eq(submit(&u[4], MG_SCHED_NORMAL), MG_SCHED_FULL);
    cr_assert_eq(submit(&k1, MG_SCHED_NORMAL), MG_SCHED_FULL);
    cr_assert_eq(stats().keys, 0, "a refused task leaves no key state");
    complete(&u[0]);
    deliver();
    cr_assert_eq(submit(&k1, MG_SCHED_NORMAL), MG_SCHED_QUEUED_FULL, "room again");
    cr_assert_eq(submit(&k2, MG_SCHED_NORMAL), MG_SCHED_FULL, "refused on a key with state too");
    run_all();
    assert_started(0, 1, 2, 3, 10);
    cr_assert_eq(u[4].calls + k2.calls, 0, "refused tasks get no callback");
    teardown_sched();
}

Test(sched, cancel_a_waiting_task)
{
    setup_sched(cfg_slots(1));
    ttask_t u0, w1, k1, u2;
    tinit(&u0, 1, NULL);
    tinit(&w1, 2, NULL);
    tinit(&k1, 3, "k");
    tinit(&u2, 4, NULL);
    submit(&u0, MG_SCHED_NORMAL);
    submit(&w1, MG_SCHED_NORMAL);
    submit(&k1, MG_SCHED_NORMAL);
    submit(&u2, MG_SCHED_NORMAL);
    cr_assert_eq(mg_sched_cancel(T.s, &w1.t), 1);
    cr_assert_eq(mg_sched_cancel(T.s, &w1.t), 0, "once");
    cr_assert_eq(mg_sched_cancel(T.s, &k1.t), 1);
    check();
    cr_assert_eq(stats().keys, 0, "the key lost its only task");
    cr_assert_eq(mg_sched_cancel(T.s, &u0.t), 0, "a running task is not withdrawn");
    complete(&u0);
    cr_assert_eq(mg_sched_cancel(T.s, &u2.t), 0, "posted: its callback is on its way");
    cr_assert_eq(deliver(), 1);
    cr_assert(u2.running);
    complete(&u2);
    cr_assert_eq(w1.calls + k1.calls, 0);
    cr_assert_eq(stats().cancelled, 2);
    teardown_sched();
}

Test(sched, drain_run_finishes_the_key_then_frees_it)
{
    setup_sched(cfg_slots(0));
    ttask_t s[3], late, again, done;
    for (int i = 0; i < 3; i++) {
        tinit(&s[i], i, "session");
        submit(&s[i], MG_SCHED_NORMAL);
    }
    tinit(&late, 10, "session");
    tinit(&again, 11, "session");
    tinit(&done, 99, NULL);
    cr_assert_eq(mg_sched_drain(T.s, "nobody", 6, MG_SCHED_DRAIN_RUN, &done.t), 0, "no state, nothing to drain");
    cr_assert_eq(mg_sched_drain(T.s, "session", 7, MG_SCHED_DRAIN_RUN, &done.t), 1);
    cr_assert_eq(mg_sched_drain(T.s, "session", 7, MG_SCHED_DRAIN_RUN, &done.t), -1, "one notice per drain");
    cr_assert_eq(submit(&late, MG_SCHED_HIGH), MG_SCHED_DRAINING);
    cr_assert_eq(deliver(), 0);
    run_all();
    assert_started(0, 1, 2);
    cr_assert_eq(done.calls, 1);
    cr_assert_eq(done.status, MG_SCHED_DRAINED);
    cr_assert_eq(T.log[T.nlog - 1].id, 99, "the notice comes after the last task");
    cr_assert_eq(stats().keys, 0);
    cr_assert_eq(submit(&again, MG_SCHED_NORMAL), MG_SCHED_STARTED, "a drained key can be used again");
    complete(&again);
    teardown_sched();
}

Test(sched, drain_cancel_while_running_removes_the_key_after_its_running_task)
{
    setup_sched(cfg_slots(0));
    ttask_t s[4], done;
    for (int i = 0; i < 4; i++) {
        tinit(&s[i], i, "session");
        submit(&s[i], i == 3 ? MG_SCHED_HIGH : MG_SCHED_NORMAL);
    }
    tinit(&done, 99, NULL);
    cr_assert_eq(mg_sched_drain(T.s, "session", 7, MG_SCHED_DRAIN_CANCEL, &done.t), 1);
    cr_assert_eq(deliver(), 3);
    for (int i = 1; i < 4; i++)
        cr_assert_eq(s[i].status, MG_SCHED_CANCELLED);
    cr_assert(s[0].running, "the running task goes on");
    cr_assert_eq(done.calls, 0, "the key lives while its task runs");
    cr_assert_eq(stats().keys, 1);
    complete(&s[0]);
    cr_assert_eq(deliver(), 1);
    cr_assert_eq(done.status, MG_SCHED_DRAINED);
    mg_sched_stats_t st = stats();
    cr_assert_eq(st.keys, 0);
    cr_assert_eq(st.cancelled, 3);
    teardown_sched();
}

Test(sched, remove_a_running_key_with_nothing_waiting)
{
    setup_sched(cfg_slots(2));
    ttask_t r, done;
    tinit(&r, 1, "r");
    tinit(&done, 99, NULL);
    submit(&r, MG_SCHED_NORMAL);
    cr_assert_eq(mg_sched_drain(T.s, "r", 1, MG_SCHED_DRAIN_CANCEL, NULL), 1);
    cr_assert_eq(mg_sched_drain(T.s, "r", 1, MG_SCHED_DRAIN_RUN, &done.t), 1, "the first drain had no notice");
    cr_assert_eq(deliver(), 0);
    complete(&r);
    cr_assert_eq(deliver(), 1);
    cr_assert_eq(done.status, MG_SCHED_DRAINED);
    cr_assert_eq(stats().keys, 0);
    cr_assert_eq(stats().in_flight, 0);
    teardown_sched();
}

Test(sched, drain_cancel_of_a_waiting_key_frees_it_at_once)
{
    setup_sched(cfg_slots(1));
    ttask_t u0, r1, r2, b1, done;
    tinit(&u0, 1, NULL);
    tinit(&r1, 2, "r");
    tinit(&r2, 3, "r");
    tinit(&b1, 4, "b");
    tinit(&done, 99, NULL);
    submit(&u0, MG_SCHED_NORMAL);
    submit(&r1, MG_SCHED_NORMAL);
    submit(&r2, MG_SCHED_NORMAL);
    submit(&b1, MG_SCHED_NORMAL);
    cr_assert_eq(mg_sched_drain(T.s, "r", 1, MG_SCHED_DRAIN_CANCEL, &done.t), 1);
    cr_assert_eq(deliver(), 3);
    cr_assert_eq(r1.status, MG_SCHED_CANCELLED);
    cr_assert_eq(r2.status, MG_SCHED_CANCELLED);
    cr_assert_eq(done.status, MG_SCHED_DRAINED);
    mg_sched_stats_t st = stats();
    cr_assert_eq(st.keys, 1);
    cr_assert_eq(st.ready, 1, "r left the ring");
    complete(&u0);
    cr_assert_eq(deliver(), 1);
    cr_assert(b1.running, "the freed slot goes to b, nobody finds an empty r");
    complete(&b1);
    teardown_sched();
}

Test(sched, completion_from_inside_the_run_callback)
{
    setup_sched(cfg_slots(0));
    T.complete_on_run = 1;
    ttask_t a[5];
    for (int i = 0; i < 5; i++) {
        tinit(&a[i], i, "k");
        submit(&a[i], MG_SCHED_NORMAL);
    }
    complete(&a[0]);
    cr_assert_eq(deliver(), 4, "each completion posts the next, the same delivery round delivers it");
    assert_started(0, 1, 2, 3, 4);
    cr_assert_eq(stats().keys, 0);
    teardown_sched();
}

Test(sched, reconfigure_slots_and_timeout)
{
    setup_sched((mg_sched_config_t){.max_in_flight = 1});
    ttask_t u[4], a0, a1, b0;
    for (int i = 0; i < 4; i++) {
        tinit(&u[i], i, NULL);
        submit(&u[i], MG_SCHED_NORMAL);
    }
    mg_sched_config_t c = {.max_in_flight = 3, .queue_timeout_us = 50};
    cr_assert_eq(mg_sched_configure(T.s, &c), 0);
    cr_assert_eq(deliver(), 2, "two more slots start two waiting tasks at once");
    c.max_in_flight = 1;
    cr_assert_eq(mg_sched_configure(T.s, &c), 0);
    complete(&u[0]);
    complete(&u[1]);
    cr_assert_eq(deliver(), 0, "two still run: nothing starts above the new limit");
    cr_assert_eq(mg_sched_next_deadline(T.s), 50, "the new timeout applies to waiting tasks");
    complete(&u[2]);
    cr_assert_eq(deliver(), 1);
    complete(&u[3]);

    /* a key that holds a slot above a lowered limit gives it up */
    c.max_in_flight = 2;
    mg_sched_configure(T.s, &c);
    tinit(&a0, 10, "a");
    tinit(&a1, 11, "a");
    tinit(&b0, 12, "b");
    submit(&a0, MG_SCHED_NORMAL);
    submit(&b0, MG_SCHED_NORMAL);
    submit(&a1, MG_SCHED_NORMAL);
    c.max_in_flight = 1;
    mg_sched_configure(T.s, &c);
    complete(&a0);
    cr_assert_eq(deliver(), 0);
    complete(&b0);
    cr_assert_eq(deliver(), 1);
    complete(&a1);
    mg_sched_config_t bad = {.quantum = MG_SCHED_MAX_QUANTUM + 1};
    cr_assert_eq(mg_sched_configure(T.s, &bad), -1);
    teardown_sched();
}

Test(sched, reconfigure_high_burst_moves_waiting_keys_to_their_new_ring)
{
    /* one slot, quantum 1: key k gives its slot up after each task while x waits */
    setup_sched((mg_sched_config_t){.max_in_flight = 1, .quantum = 1, .high_burst = 2});
    ttask_t k0, n1, h[3], x0;
    tinit(&k0, 1, "k");
    tinit(&x0, 2, "x");
    tinit(&n1, 3, "k");
    cr_assert_eq(submit(&k0, MG_SCHED_NORMAL), MG_SCHED_STARTED);
    submit(&x0, MG_SCHED_NORMAL);
    submit(&n1, MG_SCHED_NORMAL);
    for (int i = 0; i < 3; i++) {
        tinit(&h[i], 11 + i, "k");
        submit(&h[i], MG_SCHED_HIGH);
    }
    complete(&k0);
    deliver();
    complete(&h[0]);
    deliver();
    complete(&h[1]);
    deliver();
    /* two high tasks overtook n1: k's next is n1, so k waits in the normal ring, x runs */
    assert_started(1, 11, 12, 2);
    mg_sched_config_t c = {.max_in_flight = 1, .quantum = 1, .high_burst = 5};
    cr_assert_eq(mg_sched_configure(T.s, &c), 0);
    check(); /* under high_burst 5 k's next is h[2]: k must stand in the high ring */
    c.high_burst = 2;
    cr_assert_eq(mg_sched_configure(T.s, &c), 0);
    check(); /* and back */
    c.high_burst = 5;
    cr_assert_eq(mg_sched_configure(T.s, &c), 0);
    run_all();
    assert_started(1, 11, 12, 2, 13, 3);
    teardown_sched();
}

Test(sched, config_check)
{
    const char *why = NULL;
    mg_sched_config_t c = {0};
    cr_assert_eq(mg_sched_config_check(&c, &why), 0);
    c.high_burst = MG_SCHED_MAX_HIGH_BURST + 1;
    cr_assert_eq(mg_sched_config_check(&c, &why), -1);
    cr_assert_str_eq(why, "high_burst must be 1..1000");
    c = (mg_sched_config_t){.queue_limit = 10, .queue_max = 5};
    cr_assert_eq(mg_sched_config_check(&c, &why), -1);
    cr_assert_null(mg_sched_new(&c, &executor));
    mg_sched_executor_t none = {NULL, NULL};
    c.queue_max = 0;
    cr_assert_null(mg_sched_new(&c, &none));
}

static uint32_t buckets(void)
{
    uint32_t n = 0;
    for (int i = 0; i < MG__SHARDS; i++)
        n += T.s->shards[i].tab.nbuckets;
    return n;
}

Test(sched, idle_keys_cost_no_memory)
{
    setup_sched(cfg_slots(0));
    T.no_check = 1;
    static ttask_t t[10000];
    static char names[10000][8];
    for (int i = 0; i < 10000; i++) {
        snprintf(names[i], sizeof(names[i]), "k%d", i);
        tinit(&t[i], i, names[i]);
        cr_assert_eq(submit(&t[i], MG_SCHED_NORMAL), MG_SCHED_STARTED);
    }
    cr_assert_eq(stats().keys, 10000);
    cr_assert_geq(buckets(), 10000u);
    for (int i = 0; i < 10000; i++)
        complete(&t[i]);
    T.no_check = 0;
    check();
    cr_assert_eq(stats().keys, 0, "every key state is freed");
    cr_assert_eq(buckets(), 8u * MG__SHARDS, "and the tables shrank back");
    teardown_sched();
}
