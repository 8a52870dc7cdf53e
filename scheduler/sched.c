/*
 * The scheduler of one backend: slots, ordering keys, rings, waiting tasks; submit, complete
 * and the hand-over machinery (control.c has cancel, drain, expiry, reload and the rest).
 *
 * State (internal.h): a key with state is RUNNING (holds a slot, one task runs) or READY
 * (stands in the ring of its next task's priority, waiting for a slot); a key with neither a
 * running nor a waiting task is freed at once. An unordered task that cannot get a slot
 * stands in a ring itself. Every waiting task is also in `fifo`, in submission order, which is
 * deadline order since every task of a backend waits at most the same queue_timeout.
 *
 * Invariants, true whenever the lock is free (check.c verifies them):
 *   I1  a key is in a ring iff it is READY; READY implies it has waiting tasks and no
 *       running one; RUNNING implies exactly one task of it runs and holds a slot.
 *   I2  a READY key stands in the ring of the priority of its next task (key_peek).
 *   I3  nready = entries in the rings; in_flight >= running keys.
 *   I4  no lost wake-up: when an entry waits in a ring, every slot is taken (in_flight >=
 *       max_in_flight), or a lock-free release is between its decrement and its mg__pump.
 * So nothing ever has to "look for work": whoever frees a slot hands it to a ring entry
 * under the lock (pass_slot, mg__pump), and whoever makes an entry checks for a free slot first.
 * A key that has nothing left to run is freed by the very call that made it so (the
 * original scheduler's stall: a worker returned while still owning a drained queue).
 *
 * No lost wake-ups. Ordered tasks do everything under the lock, so for them I1-I4 follow
 * from each locked section keeping them. Unordered tasks take a slot and give it back
 * without the lock (one CAS, one decrement), which races with an entry going into a ring:
 *
 *   waiter (under the lock)              releaser (no lock)
 *   W: nready += 1                       D: in_flight -= 1
 *   C: try to take a slot (CAS)          R: read nready; if > 0: lock, mg__pump
 *   E: no slot: enter the ring, unlock
 *
 * All four are seq_cst. If R reads nready without W's increment, R precedes W in the single
 * total order, so D precedes C and C sees the freed slot: if C still finds none, every slot
 * was taken again by someone whose own D comes after C, hence whose R comes after W and sees
 * the waiter. If R sees W, the releaser locks; it gets the lock after the waiter's E (the
 * waiter held it from before W), so its mg__pump finds the entry. Either way the slot reaches the
 * entry or the entry gets the slot. The entry never leaves nready uncounted between W and E
 * (the registration becomes the entry's count). test_wakeup drives both interleavings.
 *
 * Fairness. A key that holds a slot keeps it for its next task while it has run fewer than
 * `quantum` tasks in a row, or when no entry waits; a normal task never keeps a slot while a
 * high entry waits. Otherwise the key goes to the tail of its ring and the slot goes to the
 * next entry: high first, but at most `high_burst` grants in a row to the high ring while the
 * normal ring is not empty.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP; the meson build defines it already */
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "scheduler/internal.h"

/* Tests stop or pause threads at these points: test_wakeup defines MG__SCHED_HOOK, the stress
 * test names a function in MG__SCHED_HOOK_FN. */
#ifdef MG__SCHED_HOOK_FN
void MG__SCHED_HOOK_FN(int point);
#define MG__SCHED_HOOK(point) MG__SCHED_HOOK_FN(point)
#endif
#ifndef MG__SCHED_HOOK
#define MG__SCHED_HOOK(point) ((void)0)
#endif

#define HIGH MG_SCHED_HIGH
#define NORMAL MG_SCHED_NORMAL

void mg__outbox_add(mg__outbox_t *o, mg_sched_task_t *t, mg_sched_status_t status)
{
    mg__task_set_state(t, MG__TASK_POSTED);
    t->mg__.node.status = (uint8_t)status;
    t->exec_next = NULL;
    *o->tail = t;
    o->tail = &t->exec_next;
}

static void outbox_post(mg_sched_t *s, mg__outbox_t *o)
{
    for (mg_sched_task_t *t = o->head, *next; t; t = next) {
        next = t->exec_next; /* the owner may reuse the task as soon as it is posted */
        s->ex.post(s->ex.ctx, t);
    }
}

void mg__unlock_and_post(mg_sched_t *s, mg__outbox_t *o)
{
    pthread_mutex_unlock(&s->lock);
    outbox_post(s, o);
}

uint64_t mg_sched_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- slots ------------------------------------------------------------------------------ */

static int slot_take(mg_sched_t *s)
{
    uint32_t max = atomic_load_explicit(&s->max_in_flight, memory_order_relaxed);
    uint32_t v = atomic_load(&s->in_flight);
    do {
        if (max && v >= max)
            return 0;
    } while (!atomic_compare_exchange_weak(&s->in_flight, &v, v + 1));
    return 1;
}

/* Whether a slot already held may be kept (a reload may have lowered the limit under it). */
static int slot_keepable(mg_sched_t *s)
{
    uint32_t max = atomic_load_explicit(&s->max_in_flight, memory_order_relaxed);
    return max == 0 || atomic_load_explicit(&s->in_flight, memory_order_relaxed) <= max;
}

/* Under the lock, for an entry that has a task to start: 1 when it got a slot (nobody waits
 * for one and one is free); 0 when it must wait, and then it is registered in nready (W, C
 * above): the caller puts it in a ring (ring_push_registered) or unregisters it. */
static int slot_or_register(mg_sched_t *s)
{
    atomic_fetch_add(&s->nready, 1);
    MG__SCHED_HOOK(1);
    if (mg__nring(s) == 0 && slot_take(s)) {
        atomic_fetch_sub(&s->nready, 1);
        return 1;
    }
    MG__SCHED_HOOK(2);
    return 0;
}

/* ---- rings and waiting tasks ------------------------------------------------------------ */

static void ring_push_registered(mg_sched_t *s, mg__node_t *n, int prio)
{
    n->priority = (uint8_t)prio;
    mg__link_insert_before(&s->ring[prio], &n->link);
    s->nring[prio]++;
}

static void ring_push(mg_sched_t *s, mg__node_t *n, int prio)
{
    atomic_fetch_add(&s->nready, 1);
    ring_push_registered(s, n, prio);
}

static void ring_remove(mg_sched_t *s, mg__node_t *n)
{
    mg__link_remove(&n->link);
    s->nring[n->priority]--;
    atomic_fetch_sub(&s->nready, 1);
}

/* To another ring's tail, without nready ever dipping (a lock-free release reading nready in
 * between would skip its mg__pump: a lost wake-up). */
static void ring_move(mg_sched_t *s, mg__node_t *n, int prio)
{
    mg__link_remove(&n->link);
    s->nring[n->priority]--;
    MG__SCHED_HOOK(5);
    ring_push_registered(s, n, prio);
}

/* The next entry to get a slot: the high ring first, but not more than high_burst times in
 * a row while the normal ring waits. NULL when both are empty. */
static mg__node_t *ring_pick(mg_sched_t *s)
{
    int prio;
    if (s->nring[HIGH] && (!s->nring[NORMAL] || s->high_streak < s->cfg.high_burst)) {
        prio = HIGH;
        s->high_streak = s->nring[NORMAL] ? s->high_streak + 1 : 0;
    } else if (s->nring[NORMAL]) {
        prio = NORMAL;
        s->high_streak = 0;
    } else {
        return NULL;
    }
    mg__node_t *n = (mg__node_t *)s->ring[prio].next;
    ring_remove(s, n);
    return n;
}

/* Files a waiting task in the deadline list. Submissions come nearly in time order (threads
 * read their clocks a little apart), so the place is found from the tail in a step or two. */
static void wait_add(mg_sched_t *s, mg_sched_task_t *t)
{
    mg__link_t *at = &s->fifo;
    while (at->prev != &s->fifo && mg__task_of_fifo(at->prev)->mg__.submitted_us > t->mg__.submitted_us)
        at = at->prev;
    mg__link_insert_before(at, &t->mg__.fifo);
    mg__task_set_state(t, MG__TASK_WAITING);
    s->waiting++;
    s->waiting_high += t->mg__.node.priority == HIGH;
}

static void wait_remove(mg_sched_t *s, mg_sched_task_t *t)
{
    mg__link_remove(&t->mg__.fifo);
    s->waiting--;
    s->waiting_high -= t->mg__.node.priority == HIGH;
}

static int queue_refuses(const mg_sched_t *s)
{
    return s->cfg.queue_max && s->waiting >= s->cfg.queue_max;
}

static mg_sched_result_t queued(const mg_sched_t *s)
{
    return s->cfg.queue_limit && s->waiting >= s->cfg.queue_limit ? MG_SCHED_QUEUED_FULL : MG_SCHED_QUEUED;
}

/* ---- keys ------------------------------------------------------------------------------- */

/* The key's next task and its priority: the oldest high task, unless high_burst high tasks
 * in a row have overtaken waiting normal ones; then the oldest normal task. */
static mg_sched_task_t *key_peek(const mg_sched_t *s, const mg__key_t *k, int *prio)
{
    int high = !mg__link_empty(&k->queue[HIGH]), normal = !mg__link_empty(&k->queue[NORMAL]);
    *prio = high && (!normal || k->high_streak < s->cfg.high_burst) ? HIGH : NORMAL;
    return high || normal ? mg__task_of_link(k->queue[*prio].next) : NULL;
}

static void key_enqueue(mg_sched_t *s, mg__key_t *k, mg_sched_task_t *t)
{
    t->mg__.key = k;
    mg__link_insert_before(&k->queue[t->mg__.node.priority], &t->mg__.node.link);
    k->waiting++;
    wait_add(s, t);
}

/* Takes a waiting task out of its key's queue and of the deadline list. */
void mg__key_unqueue(mg_sched_t *s, mg__key_t *k, mg_sched_task_t *t)
{
    mg__link_remove(&t->mg__.node.link);
    k->waiting--;
    wait_remove(s, t);
}

/* Starts the key's next task on the slot the key holds (or has just been granted). */
static void key_start(mg_sched_t *s, mg__key_t *k, mg__outbox_t *o, uint32_t turns)
{
    int prio;
    mg_sched_task_t *t = key_peek(s, k, &prio);
    int normal_waits = !mg__link_empty(&k->queue[NORMAL]);
    mg__key_unqueue(s, k, t);
    k->high_streak = prio == HIGH && normal_waits ? k->high_streak + 1 : 0;
    k->ring.state = MG__KEY_RUNNING;
    k->running = t;
    k->turns = turns;
    t->mg__.node.counted = 1;
    mg__outbox_add(o, t, MG_SCHED_RUN);
}

/* A key with nothing running and nothing waiting: its state goes (and the drain's notice). */
static void key_release(mg_sched_t *s, mg__key_t *k, mg__outbox_t *o)
{
    if (k->done)
        mg__outbox_add(o, k->done, MG_SCHED_DRAINED);
    mg__keytab_delete(s, k);
}

/* After a waiting task of `k` went away: a READY key left with nothing is released, one
 * whose next task changed priority moves to that ring (I1, I2). */
void mg__key_settle(mg_sched_t *s, mg__key_t *k, mg__outbox_t *o)
{
    if (k->ring.state != MG__KEY_READY)
        return;
    if (k->waiting == 0) {
        ring_remove(s, &k->ring);
        key_release(s, k, o);
        return;
    }
    int prio;
    key_peek(s, k, &prio);
    if (prio != k->ring.priority)
        ring_move(s, &k->ring, prio);
}

/* ---- handing slots over ----------------------------------------------------------------- */

static void start_node(mg_sched_t *s, mg__node_t *n, mg__outbox_t *o)
{
    if (n->kind == MG__NODE_KEY) {
        key_start(s, MG__CONTAINER(n, mg__key_t, ring), o, 1);
        return;
    }
    mg_sched_task_t *t = MG__CONTAINER(n, mg_sched_task_t, mg__.node);
    wait_remove(s, t);
    t->mg__.node.counted = 1;
    mg__outbox_add(o, t, MG_SCHED_RUN);
}

/* Gives free slots to ring entries while both exist. */
void mg__pump(mg_sched_t *s, mg__outbox_t *o)
{
    while (mg__nring(s) && slot_take(s))
        start_node(s, ring_pick(s), o);
}

/* The caller held a slot and is done with it: it goes to the next ring entry, or back. */
static void pass_slot(mg_sched_t *s, mg__outbox_t *o)
{
    if (mg__nring(s) && slot_keepable(s)) {
        start_node(s, ring_pick(s), o);
        return;
    }
    atomic_fetch_sub(&s->in_flight, 1);
    mg__pump(s, o);
}

/* The running task of `k` completed (under the lock). */
static void key_done(mg_sched_t *s, mg__key_t *k, mg__outbox_t *o)
{
    int prio;
    k->running = NULL;
    mg_sched_task_t *next = key_peek(s, k, &prio);
    if (next && slot_keepable(s) && (prio == HIGH || s->nring[HIGH] == 0)) {
        if (mg__nring(s) == 0) { /* nobody to yield to */
            key_start(s, k, o, 1);
            return;
        }
        if (k->turns < s->cfg.quantum) {
            key_start(s, k, o, k->turns + 1);
            return;
        }
    }
    if (next) {
        k->ring.state = MG__KEY_READY;
        ring_push(s, &k->ring, prio);
    } else {
        key_release(s, k, o);
    }
    pass_slot(s, o);
}

/* ---- entry points ----------------------------------------------------------------------- */

static mg_sched_result_t submit_ordered(mg_sched_t *s, mg_sched_task_t *t, const char *key, size_t len, uint64_t hash)
{
    mg__key_t *k = mg__keytab_find(s, key, len, hash);
    if (k) {
        if (k->draining)
            return MG_SCHED_DRAINING;
        if (queue_refuses(s))
            return MG_SCHED_FULL;
        key_enqueue(s, k, t);
        mg__key_settle(s, k, NULL); /* a high task may move a READY key to the high ring; releases nothing */
        return queued(s);
    }
    if (!(k = mg__key_new(key, len, hash)))
        return MG_SCHED_NOMEM;
    if (slot_or_register(s)) {
        k->ring.state = MG__KEY_RUNNING;
        k->running = t;
        k->turns = 1;
        t->mg__.key = k;
        t->mg__.node.counted = 1;
        mg__task_set_state(t, MG__TASK_RUNNING);
        mg__keytab_insert(s, k);
        return MG_SCHED_STARTED;
    }
    if (queue_refuses(s)) {
        atomic_fetch_sub(&s->nready, 1);
        free(k);
        return MG_SCHED_FULL;
    }
    mg__keytab_insert(s, k);
    key_enqueue(s, k, t);
    k->ring.state = MG__KEY_READY;
    ring_push_registered(s, &k->ring, t->mg__.node.priority);
    return queued(s);
}

static mg_sched_result_t submit_unordered_locked(mg_sched_t *s, mg_sched_task_t *t)
{
    if (slot_or_register(s)) {
        t->mg__.node.counted = 1;
        mg__task_set_state(t, MG__TASK_RUNNING);
        return MG_SCHED_STARTED;
    }
    if (queue_refuses(s)) {
        atomic_fetch_sub(&s->nready, 1);
        return MG_SCHED_FULL;
    }
    wait_add(s, t);
    ring_push_registered(s, &t->mg__.node, t->mg__.node.priority);
    return queued(s);
}

/* Unordered: no key, no lock while a slot is free and nobody waits for one. */
static mg_sched_result_t submit_unordered(mg_sched_t *s, mg_sched_task_t *t)
{
    uint32_t max = atomic_load_explicit(&s->max_in_flight, memory_order_relaxed);
    if (max == 0 || (atomic_load(&s->nready) == 0 && slot_take(s))) {
        t->mg__.node.counted = max != 0;
        mg__task_set_state(t, MG__TASK_RUNNING);
        return MG_SCHED_STARTED;
    }
    pthread_mutex_lock(&s->lock);
    mg_sched_result_t r = submit_unordered_locked(s, t);
    pthread_mutex_unlock(&s->lock);
    return r;
}

mg_sched_result_t mg_sched_submit(mg_sched_t *s, mg_sched_task_t *t, const char *key, size_t len, mg_sched_priority_t priority,
                                  uint64_t now_us)
{
    t->mg__.node.kind = MG__NODE_TASK;
    t->mg__.node.priority = priority == MG_SCHED_HIGH ? HIGH : NORMAL;
    t->mg__.node.counted = 0;
    t->mg__.key = NULL;
    t->mg__.submitted_us = now_us;
    if (!key || !len)
        return submit_unordered(s, t);
    if (len > MG_SCHED_MAX_KEY_LEN)
        len = MG_SCHED_MAX_KEY_LEN;
    uint64_t hash = mg__key_hash(s, key, len);
    pthread_mutex_lock(&s->lock);
    mg_sched_result_t r = submit_ordered(s, t, key, len, hash);
    pthread_mutex_unlock(&s->lock);
    return r;
}

int mg_sched_complete(mg_sched_t *s, mg_sched_task_t *t)
{
    if (mg__task_state(t) != MG__TASK_RUNNING)
        return -1;
    mg__task_set_state(t, MG__TASK_DONE);
    mg__key_t *k = t->mg__.key;
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    if (!k) {
        if (!t->mg__.node.counted)
            return 0;
        atomic_fetch_sub(&s->in_flight, 1); /* D */
        MG__SCHED_HOOK(3);
        if (atomic_load(&s->nready) == 0) /* R */
            return 0;
        MG__SCHED_HOOK(4);
        pthread_mutex_lock(&s->lock);
        mg__pump(s, &o);
    } else {
        pthread_mutex_lock(&s->lock);
        key_done(s, k, &o);
    }
    mg__unlock_and_post(s, &o);
    return 0;
}

/* Takes a waiting task out of wherever it waits (under the lock). */
void mg__withdraw(mg_sched_t *s, mg_sched_task_t *t, mg__outbox_t *o)
{
    mg__key_t *k = t->mg__.key;
    if (!k) {
        ring_remove(s, &t->mg__.node);
        wait_remove(s, t);
        return;
    }
    mg__key_unqueue(s, k, t);
    mg__key_settle(s, k, o);
}

void mg_sched_deliver(mg_sched_task_t *t)
{
    mg_sched_status_t status = (mg_sched_status_t)t->mg__.node.status;
    mg__task_set_state(t, status == MG_SCHED_RUN ? MG__TASK_RUNNING : MG__TASK_DONE);
    t->run(t, status);
}

void mg_sched_task_init(mg_sched_task_t *t, mg_sched_run_cb run, void *owner)
{
    memset(t, 0, sizeof(*t));
    t->run = run;
    t->owner = owner;
}
