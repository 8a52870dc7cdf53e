/*
 * The scheduler of one backend: slots, ordering keys, rings, waiting tasks; submit, complete
 * and the hand-over machinery (control.c has cancel, drain, expiry, reload and the rest).
 *
 * State (internal.h). A key with state runs one task (and holds a slot), or stands in the
 * ring of its next task's priority waiting for a slot (IN_RING), or has just been granted one
 * (GRANTED); a key with neither a running nor a waiting task, and not GRANTED, is freed at
 * once. An unordered task that cannot get a slot stands in a ring itself. Every waiting task
 * is in a list in submission order (its key's shard's, or the backend's when unordered), which
 * is deadline order since every task of a backend waits at most the same queue_timeout.
 *
 * Invariants whenever no call is in progress (check.c verifies them under every lock):
 *   I1  a key is in a ring iff IN_RING; IN_RING implies waiting tasks and no running one; a
 *       running key holds a slot (or none, when the backend was unlimited as it started);
 *       no key is GRANTED (that state lasts from a grant to the end of the same call).
 *   I2  an IN_RING key stands in the ring of the priority of its next task (key_peek).
 *   I3  nready = entries in the rings; nready_high = entries in the high ring.
 *   I4  no lost wake-up: when an entry waits in a ring, every slot is taken.
 *   G1  a group's count is the number of waiting tasks counted in it, never 0 (a group with
 *       nothing waiting is freed), and only waiting tasks are counted in a group: every way out
 *       of waiting (a start, a grant, a withdrawal: cancel, timeout, drain) passes through
 *       mg__sched_key_unqueue or uwait_remove, which uncount the task.
 * So nothing ever has to "look for work": whoever frees a slot hands it to a ring entry (a
 * grant, then a start) or hands it back and looks at the rings (pump), and whoever makes an
 * entry checks for a free slot first. A key with nothing left to run is released by the very
 * call that made it so, including a granted key whose tasks went away before its start: the
 * thread that started it gives the slot back and releases the key (the original scheduler's
 * stall was a worker returning while still owning a drained queue).
 *
 * Locks. A task that needs no slot change and no ring (the common case: its key is idle or
 * busy, a slot is free or it continues on its key's slot) takes only its key's shard lock, so
 * ordered tasks of different keys rarely meet. Rings are the backend lock's. A key leaves its
 * ring under the backend lock, GRANTED, and is started under its shard lock after the backend
 * lock is released (mg__flush), so that the lock order (shard, then backend) holds.
 *
 * No lost wake-ups. Slots are taken (CAS on in_flight) without a lock, and given back: under
 * the backend lock straight to the next entry when nready says some wait, otherwise by a
 * decrement without a lock, which races with an entry going into a ring under the lock:
 *
 *   waiter (under the backend lock)      releaser (no lock)
 *   W: nready += 1                       D: in_flight -= 1
 *   C: try to take a slot (CAS)          R: read nready; if > 0: lock, pump
 *   E: no slot: enter the ring, unlock
 *
 * All four are seq_cst. If R reads nready without W's increment, R precedes W in the single
 * total order, so D precedes C and C sees the freed slot: if C still finds none, every slot
 * was taken again by someone whose own D comes after C, hence whose R comes after W and sees
 * the waiter. If R sees W, the releaser locks; it gets the lock after the waiter's E (the
 * waiter held it from before W), so its pump finds the entry. Either way the slot reaches the
 * entry or the entry gets the slot. nready never dips while an entry exists (a registration
 * becomes the entry's count; a ring move leaves it alone). test_wakeup drives these
 * interleavings; the stress test pauses threads at the same points at random.
 *
 * Fairness. A key that holds a slot keeps it for its next task while it has run fewer than
 * `quantum` tasks in a row, or when no entry waits; a normal task never keeps a slot while a
 * high entry waits. Otherwise the key goes to the tail of its ring and the slot goes to the
 * next entry: high first, but at most `high_burst` grants in a row to the high ring while the
 * normal ring is not empty. (The continuation test reads nready without the backend lock: a
 * key may run one more task than its quantum when an entry arrives at that very moment.)
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

uint64_t mg_sched_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- slots ------------------------------------------------------------------------------ */

int mg__sched_slot_take(mg_sched_t *s)
{
    uint32_t max = atomic_load_explicit(&s->max_in_flight, memory_order_relaxed);
    uint32_t v = atomic_load(&s->in_flight);
    do {
        if (max && v >= max)
            return 0;
    } while (!atomic_compare_exchange_weak(&s->in_flight, &v, v + 1));
    return 1;
}

/* Whether the slot a finished task held (`counted`: it took one) may go on to the next task of
 * its key: a reload may have lowered the limit under it, or set one where there was none. */
static int slot_keepable(mg_sched_t *s, int counted)
{
    uint32_t max = atomic_load_explicit(&s->max_in_flight, memory_order_relaxed);
    if (!counted)
        return max == 0;
    return max == 0 || atomic_load_explicit(&s->in_flight, memory_order_relaxed) <= max;
}

/* Under the backend lock, for an entry with a task to start: 1 when it got a slot (nobody waits
 * for one and one is free); 0 when it must wait, and then it is registered in nready (W, C
 * above): the caller puts it in a ring (ring_push_registered) or unregisters it. */
int mg__sched_slot_or_register(mg_sched_t *s)
{
    atomic_fetch_add(&s->nready, 1);
    MG__SCHED_HOOK(1);
    if (mg__nring(s) == 0 && mg__sched_slot_take(s)) {
        atomic_fetch_sub(&s->nready, 1);
        return 1;
    }
    MG__SCHED_HOOK(2);
    return 0;
}

static void pass_slot(mg_sched_t *s, mg__outbox_t *o);

/* Gives a slot back. When entries wait, under the backend lock straight to the next one;
 * otherwise without a lock (D, R above), and an entry that came meanwhile gets it through the
 * pump. */
void mg__sched_slot_release(mg_sched_t *s, mg__outbox_t *o)
{
    MG__SCHED_HOOK(7);
    if (atomic_load(&s->nready)) {
        MG__SCHED_HOOK(4);
        pthread_mutex_lock(&s->lock);
        pass_slot(s, o);
        pthread_mutex_unlock(&s->lock);
        return;
    }
    MG__SCHED_HOOK(8);
    atomic_fetch_sub(&s->in_flight, 1);
    MG__SCHED_HOOK(3);
    if (atomic_load(&s->nready) == 0)
        return;
    MG__SCHED_HOOK(4);
    pthread_mutex_lock(&s->lock);
    mg__pump(s, o);
    pthread_mutex_unlock(&s->lock);
}

/* ---- shares of the waiting ------------------------------------------------------------ */

/* A task's group counts it while it waits. A group's lock is a leaf: taken under the lock that
 * guards the task's wait (its key's shard's, or the backend's), never the other way round. */

/* Counts `t` in the group named `g` (none when empty): MG_SCHED_QUEUED, or the refusal
 * (GROUP_FULL when group_queue_max of the group wait, NOMEM), with nothing counted. */
static mg_sched_result_t group_join(mg_sched_t *s, mg_sched_task_t *t, const mg_sched_names_t *g)
{
    t->mg__.group = NULL;
    if (!g || !g->group || !g->group_len)
        return MG_SCHED_QUEUED;
    uint64_t hash = mg__sched_key_hash(s, g->group, g->group_len);
    uint8_t i = mg__group_shard_index(hash);
    mg__group_shard_t *gs = &s->groups[i];
    mg_sched_result_t r = MG_SCHED_QUEUED;
    pthread_mutex_lock(&gs->lock);
    mg__sched_group_t *grp = mg__sched_keytab_find(&gs->tab, g->group, g->group_len, hash);
    if (grp && s->cfg.group_queue_max && grp->waiting >= s->cfg.group_queue_max) {
        r = MG_SCHED_GROUP_FULL;
    } else if (!grp && !(grp = mg__sched_key_new(g->group, g->group_len, hash))) {
        r = MG_SCHED_NOMEM;
    } else {
        if (grp->waiting == 0) {
            grp->shard = i;
            mg__sched_keytab_insert(&gs->tab, grp);
        }
        grp->waiting++;
        t->mg__.group = grp;
    }
    pthread_mutex_unlock(&gs->lock);
    return r;
}

/* `t` stops waiting: its group counts it no more, and goes when nothing of it waits. */
static void group_leave(mg_sched_t *s, mg_sched_task_t *t)
{
    mg__sched_group_t *grp = t->mg__.group;
    if (!grp)
        return;
    t->mg__.group = NULL;
    mg__group_shard_t *gs = &s->groups[grp->shard];
    pthread_mutex_lock(&gs->lock);
    if (--grp->waiting == 0)
        mg__sched_keytab_delete(&gs->tab, grp);
    pthread_mutex_unlock(&gs->lock);
}

int mg__sched_is_queued(mg_sched_result_t r)
{
    return r == MG_SCHED_QUEUED || r == MG_SCHED_QUEUED_FULL;
}

/* Reserves a place among the waiting tasks for `t`, of key `k` (NULL when unordered) and of the
 * group `g`: QUEUED or QUEUED_FULL, or the refusal with nothing kept. The shares come first, so
 * that a key or group over its share is refused before the backend's whole queue is. Under the
 * lock that guards the task's wait. */
mg_sched_result_t mg__sched_place_reserve(mg_sched_t *s, const mg__sched_key_t *k, mg_sched_task_t *t, const mg_sched_names_t *g)
{
    uint64_t *refused = k ? &s->shards[k->shard].share_refused : &s->share_refused;
    if (k && s->cfg.key_queue_max && k->waiting >= s->cfg.key_queue_max) {
        ++*refused;
        return MG_SCHED_KEY_FULL;
    }
    mg_sched_result_t r = group_join(s, t, g);
    if (r != MG_SCHED_QUEUED) {
        *refused += r == MG_SCHED_GROUP_FULL;
        return r;
    }
    uint32_t n = atomic_fetch_add(&s->waiting, 1) + 1;
    if (s->cfg.queue_max && n > s->cfg.queue_max) {
        atomic_fetch_sub(&s->waiting, 1);
        group_leave(s, t);
        return MG_SCHED_FULL;
    }
    return s->cfg.queue_limit && n >= s->cfg.queue_limit ? MG_SCHED_QUEUED_FULL : MG_SCHED_QUEUED;
}

/* ---- rings (under the backend lock) ----------------------------------------------------- */

void mg__sched_ring_push_registered(mg_sched_t *s, mg__node_t *n, int prio)
{
    n->priority = (uint8_t)prio;
    mg__link_insert_before(&s->ring[prio], &n->link);
    s->nring[prio]++;
    if (prio == HIGH)
        atomic_fetch_add(&s->nready_high, 1);
}

static void ring_push(mg_sched_t *s, mg__node_t *n, int prio)
{
    atomic_fetch_add(&s->nready, 1);
    mg__sched_ring_push_registered(s, n, prio);
}

static void ring_unlink(mg_sched_t *s, mg__node_t *n)
{
    mg__link_remove(&n->link);
    s->nring[n->priority]--;
    if (n->priority == HIGH)
        atomic_fetch_sub(&s->nready_high, 1);
}

void mg__sched_ring_remove(mg_sched_t *s, mg__node_t *n)
{
    ring_unlink(s, n);
    atomic_fetch_sub(&s->nready, 1);
}

/* To another ring's tail, without nready ever dipping (a lock-free release reading nready in
 * between would skip its pump: a lost wake-up). */
static void ring_move(mg_sched_t *s, mg__node_t *n, int prio)
{
    ring_unlink(s, n);
    MG__SCHED_HOOK(5);
    mg__sched_ring_push_registered(s, n, prio);
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
    mg__sched_ring_remove(s, n);
    return n;
}

/* ---- waiting tasks ---------------------------------------------------------------------- */

/* Files a waiting task in a deadline list. Submissions come nearly in time order (threads
 * read their clocks a little apart), so the place is found from the tail in a step or two. */
static void fifo_add(mg__link_t *fifo, mg_sched_task_t *t)
{
    mg__link_t *at = fifo;
    while (at->prev != fifo && mg__task_of_fifo(at->prev)->mg__.submitted_us > t->mg__.submitted_us)
        at = at->prev;
    mg__link_insert_before(at, &t->mg__.fifo);
    mg__task_set_state(t, MG__TASK_WAITING);
}

/* An unordered task waits (backend lock). */
void mg__sched_uwait_add(mg_sched_t *s, mg_sched_task_t *t)
{
    fifo_add(&s->fifo, t);
    s->uwaiting++;
    s->uwaiting_high += t->mg__.node.priority == HIGH;
}

void mg__sched_uwait_remove(mg_sched_t *s, mg_sched_task_t *t)
{
    mg__link_remove(&t->mg__.fifo);
    s->uwaiting--;
    s->uwaiting_high -= t->mg__.node.priority == HIGH;
    atomic_fetch_sub(&s->waiting, 1);
    group_leave(s, t);
}

/* ---- keys (under their shard's lock) ---------------------------------------------------- */

/* The key's next task and its priority: the oldest high task, unless high_burst high tasks
 * in a row have overtaken waiting normal ones; then the oldest normal task. */
static mg_sched_task_t *key_peek(const mg_sched_t *s, const mg__sched_key_t *k, int *prio)
{
    int high = !mg__link_empty(&k->queue[HIGH]), normal = !mg__link_empty(&k->queue[NORMAL]);
    *prio = high && (!normal || k->high_streak < s->cfg.high_burst) ? HIGH : NORMAL;
    return high || normal ? mg__task_of_link(k->queue[*prio].next) : NULL;
}

void mg__sched_key_enqueue(mg_sched_t *s, mg__sched_key_t *k, mg_sched_task_t *t)
{
    mg__shard_t *sh = &s->shards[k->shard];
    t->mg__.key = k;
    t->mg__.node.shard = k->shard;
    mg__link_insert_before(&k->queue[t->mg__.node.priority], &t->mg__.node.link);
    k->waiting++;
    fifo_add(&sh->fifo, t);
    sh->waiting++;
    sh->waiting_high += t->mg__.node.priority == HIGH;
}

void mg__sched_key_unqueue(mg_sched_t *s, mg__sched_key_t *k, mg_sched_task_t *t)
{
    mg__shard_t *sh = &s->shards[k->shard];
    mg__link_remove(&t->mg__.node.link);
    k->waiting--;
    mg__link_remove(&t->mg__.fifo);
    sh->waiting--;
    sh->waiting_high -= t->mg__.node.priority == HIGH;
    atomic_fetch_sub(&s->waiting, 1);
    group_leave(s, t);
}

/* Starts the key's next task on the slot the key holds, or has just been granted. */
static void key_start(mg_sched_t *s, mg__sched_key_t *k, mg__outbox_t *o, uint32_t turns, int counted)
{
    int prio;
    mg_sched_task_t *t = key_peek(s, k, &prio);
    int normal_waits = !mg__link_empty(&k->queue[NORMAL]);
    mg__sched_key_unqueue(s, k, t);
    k->high_streak = prio == HIGH && normal_waits ? k->high_streak + 1 : 0;
    k->running = t;
    k->turns = turns;
    t->mg__.node.counted = (uint8_t)counted;
    mg__outbox_add(o, t, MG_SCHED_RUN);
}

/* A key with nothing running and nothing waiting: its state goes (and the drain's notice). */
static void key_release(mg_sched_t *s, mg__sched_key_t *k, mg__outbox_t *o)
{
    if (k->done)
        mg__outbox_add(o, k->done, MG_SCHED_DRAINED);
    mg__sched_keytab_delete(&s->shards[k->shard].tab, k);
}

void mg__sched_key_settle(mg_sched_t *s, mg__sched_key_t *k, mg__outbox_t *o)
{
    if (k->running || mg__sched_key_ring_state(k) == MG__KEY_GRANTED)
        return; /* a GRANTED key's starter settles it */
    pthread_mutex_lock(&s->lock);
    /* IN_RING, unless the backend has granted it since: then its starter settles it */
    if (mg__sched_key_ring_state(k) == MG__KEY_IN_RING) {
        if (k->waiting == 0) {
            mg__sched_ring_remove(s, &k->ring);
            mg__sched_key_set_ring_state(k, MG__KEY_NONE);
            pthread_mutex_unlock(&s->lock);
            key_release(s, k, o);
            return;
        }
        int prio;
        key_peek(s, k, &prio);
        if (prio != k->ring.priority)
            ring_move(s, &k->ring, prio);
    }
    pthread_mutex_unlock(&s->lock);
}

/* Under every lock, after high_burst changed: a waiting key's next task may now be of the
 * other priority (key_peek reads high_burst), so the key moves to that ring to keep I2. */
void mg__sched_rering(mg_sched_t *s)
{
    for (int p = 0; p < 2; p++) {
        mg__link_t *l = s->ring[p].next;
        while (l != &s->ring[p]) {
            mg__node_t *n = (mg__node_t *)l;
            int prio;
            l = l->next; /* before a move takes `n` to the other ring */
            if (n->kind != MG__NODE_KEY)
                continue; /* an unordered task keeps its own priority */
            key_peek(s, MG__CONTAINER(n, mg__sched_key_t, ring), &prio);
            if (prio != p)
                ring_move(s, n, prio);
        }
    }
}

/* ---- handing slots over ----------------------------------------------------------------- */

/* Under the backend lock: the entry `n` has been given a slot. An unordered task starts; a key
 * is GRANTED and started by mg__flush, under its shard's lock. */
static void grant(mg_sched_t *s, mg__node_t *n, mg__outbox_t *o)
{
    if (n->kind == MG__NODE_KEY) {
        mg__sched_key_t *k = MG__CONTAINER(n, mg__sched_key_t, ring);
        mg__sched_key_set_ring_state(k, MG__KEY_GRANTED);
        k->grant_next = NULL;
        *o->grants_tail = k;
        o->grants_tail = &k->grant_next;
        return;
    }
    mg_sched_task_t *t = MG__CONTAINER(n, mg_sched_task_t, mg__.node);
    mg__sched_uwait_remove(s, t);
    t->mg__.node.counted = 1;
    mg__outbox_add(o, t, MG_SCHED_RUN);
}

void mg__pump(mg_sched_t *s, mg__outbox_t *o)
{
    while (mg__nring(s) && mg__sched_slot_take(s))
        grant(s, ring_pick(s), o);
}

/* Starts a granted key's next task, or, when its tasks went away since, gives the slot back and
 * releases the key. */
static void start_granted(mg_sched_t *s, mg__sched_key_t *k, mg__outbox_t *o)
{
    mg__shard_t *sh = &s->shards[k->shard];
    int prio;
    MG__SCHED_HOOK(6);
    pthread_mutex_lock(&sh->lock);
    mg__sched_key_set_ring_state(k, MG__KEY_NONE);
    int nothing = key_peek(s, k, &prio) == NULL;
    if (nothing)
        key_release(s, k, o);
    else
        key_start(s, k, o, 1, 1);
    pthread_mutex_unlock(&sh->lock);
    if (nothing)
        mg__sched_slot_release(s, o);
}

void mg__flush(mg_sched_t *s, mg__outbox_t *o)
{
    while (o->grants) { /* in grant order; a start may give a slot back, and the pump grant it again */
        mg__sched_key_t *k = o->grants;
        if (!(o->grants = k->grant_next))
            o->grants_tail = &o->grants;
        start_granted(s, k, o);
    }
    for (mg_sched_task_t *t = o->head, *next; t; t = next) {
        next = t->exec_next; /* the owner may reuse the task as soon as it is posted */
        s->ex.post(s->ex.ctx, t);
    }
}

/* Under the backend lock: the caller held a slot and is done with it: it goes to the next
 * ring entry, or back. */
static void pass_slot(mg_sched_t *s, mg__outbox_t *o)
{
    if (mg__nring(s) && slot_keepable(s, 1)) {
        grant(s, ring_pick(s), o);
        return;
    }
    atomic_fetch_sub(&s->in_flight, 1);
    mg__pump(s, o);
}

/* Under the shard's lock: the running task `t` of `k` completed. Returns 1 when the caller must
 * give the task's slot back (with slot_release, once the shard's lock is released). */
int mg__sched_key_done(mg_sched_t *s, mg__sched_key_t *k, mg_sched_task_t *t, mg__outbox_t *o)
{
    int prio, counted = t->mg__.node.counted;
    k->running = NULL;
    mg_sched_task_t *next = key_peek(s, k, &prio);
    if (!next) {
        key_release(s, k, o);
        return counted;
    }
    if (slot_keepable(s, counted) && (prio == HIGH || atomic_load(&s->nready_high) == 0)) {
        if (atomic_load(&s->nready) == 0) { /* nobody to yield to */
            key_start(s, k, o, 1, counted);
            return 0;
        }
        if (k->turns < s->cfg.quantum) {
            key_start(s, k, o, k->turns + 1, counted);
            return 0;
        }
    }
    /* its turn is over: to the tail of its ring, and the slot to the next entry */
    pthread_mutex_lock(&s->lock);
    mg__sched_key_set_ring_state(k, MG__KEY_IN_RING);
    ring_push(s, &k->ring, prio);
    if (counted)
        pass_slot(s, o);
    else
        mg__pump(s, o);
    pthread_mutex_unlock(&s->lock);
    return 0;
}
