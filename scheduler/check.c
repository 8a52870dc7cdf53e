/*
 * mg__sched_check: walks a scheduler nobody else is using and verifies the invariants that
 * sched.c states (I1-I4) and the bookkeeping behind them. For tests and debugging: it takes
 * the lock, so a stress test may call it between phases.
 */
#include <stdarg.h>
#include <stdio.h>
#include "scheduler/internal.h"

typedef struct walk {
    uint32_t waiting, waiting_high, running_keys, ready_keys;
    uint32_t ring_tasks[2];
} walk_t;

static int fail(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return -1;
}

static int check_queue(const mg__key_t *k, int prio, uint32_t *n, char *why, size_t len)
{
    for (mg__link_t *l = k->queue[prio].next; l != &k->queue[prio]; l = l->next) {
        const mg_sched_task_t *t = mg__task_of_link(l);
        if (t->mg__.key != k || mg__task_state(t) != MG__TASK_WAITING || t->mg__.node.priority != prio)
            return fail(why, len, "key %.*s: a queued task with key %p, state %d, priority %d", (int)k->len, k->name, t->mg__.key,
                        mg__task_state(t), t->mg__.node.priority);
        ++*n;
    }
    return 0;
}

/* The priority of a READY key's next task, as key_peek computes it (I2). */
static int next_priority(const mg_sched_t *s, const mg__key_t *k)
{
    int high = !mg__link_empty(&k->queue[MG_SCHED_HIGH]), normal = !mg__link_empty(&k->queue[MG_SCHED_NORMAL]);
    return high && (!normal || k->high_streak < s->cfg.high_burst) ? MG_SCHED_HIGH : MG_SCHED_NORMAL;
}

static int check_key(const mg_sched_t *s, const mg__key_t *k, walk_t *w, char *why, size_t len)
{
    uint32_t n = 0;
    if (check_queue(k, MG_SCHED_HIGH, &n, why, len) || check_queue(k, MG_SCHED_NORMAL, &n, why, len))
        return -1;
    if (n != k->waiting)
        return fail(why, len, "key %.*s: %u tasks queued, %u counted", (int)k->len, k->name, n, k->waiting);
    if (k->ring.state == MG__KEY_RUNNING) {
        if (!k->running || k->running->mg__.key != k || k->ring.link.next)
            return fail(why, len, "key %.*s: RUNNING without its running task, or in a ring", (int)k->len, k->name);
        w->running_keys++;
    } else if (k->ring.state == MG__KEY_READY) {
        if (k->running || !k->waiting || !k->ring.link.next)
            return fail(why, len, "key %.*s: READY with a running task, nothing waiting, or out of the rings", (int)k->len,
                        k->name);
        if (k->ring.priority != next_priority(s, k))
            return fail(why, len, "key %.*s: in the wrong ring", (int)k->len, k->name);
        w->ready_keys++;
    } else {
        return fail(why, len, "key %.*s: state %d", (int)k->len, k->name, k->ring.state);
    }
    return 0;
}

static int check_rings(const mg_sched_t *s, walk_t *w, char *why, size_t len)
{
    uint32_t keys = 0;
    for (int p = 0; p < 2; p++) {
        uint32_t n = 0;
        for (mg__link_t *l = s->ring[p].next; l != &s->ring[p]; l = l->next, n++) {
            const mg__node_t *node = (const mg__node_t *)l;
            if (node->priority != p)
                return fail(why, len, "ring %d: an entry of priority %d", p, node->priority);
            if (node->kind == MG__NODE_KEY) {
                keys++;
                continue;
            }
            const mg_sched_task_t *t = MG__CONTAINER(node, mg_sched_task_t, mg__.node);
            if (t->mg__.key || mg__task_state(t) != MG__TASK_WAITING)
                return fail(why, len, "ring %d: a task that is ordered or not waiting", p);
            w->ring_tasks[p]++;
        }
        if (n != s->nring[p])
            return fail(why, len, "ring %d: %u entries, %u counted", p, n, s->nring[p]);
    }
    if (keys != w->ready_keys)
        return fail(why, len, "%u keys in the rings, %u READY", keys, w->ready_keys);
    return 0;
}

static int check_fifo(const mg_sched_t *s, char *why, size_t len)
{
    uint32_t n = 0, high = 0;
    uint64_t last = 0;
    for (mg__link_t *l = s->fifo.next; l != &s->fifo; l = l->next, n++) {
        const mg_sched_task_t *t = mg__task_of_fifo(l);
        if (mg__task_state(t) != MG__TASK_WAITING)
            return fail(why, len, "a task in the deadline list in state %d", mg__task_state(t));
        if (t->mg__.submitted_us < last)
            return fail(why, len, "the deadline list is out of order");
        last = t->mg__.submitted_us;
        high += t->mg__.node.priority == MG_SCHED_HIGH;
    }
    if (n != s->waiting || high != s->waiting_high)
        return fail(why, len, "%u waiting (%u high) listed, %u (%u) counted", n, high, s->waiting, s->waiting_high);
    return 0;
}

static int check_locked(mg_sched_t *s, int quiet, char *why, size_t len)
{
    walk_t w = {0};
    uint32_t keys = 0;
    for (uint32_t i = 0; i < s->nbuckets; i++) {
        for (const mg__key_t *k = s->buckets[i]; k; k = k->hnext, keys++) {
            if ((k->hash & (s->nbuckets - 1)) != i)
                return fail(why, len, "key %.*s in the wrong bucket", (int)k->len, k->name);
            if (check_key(s, k, &w, why, len))
                return -1;
            w.waiting += k->waiting;
        }
    }
    if (keys != s->nkeys)
        return fail(why, len, "%u keys in the table, %u counted", keys, s->nkeys);
    if (check_rings(s, &w, why, len) || check_fifo(s, why, len))
        return -1;
    if (w.waiting + w.ring_tasks[0] + w.ring_tasks[1] != s->waiting)
        return fail(why, len, "%u tasks in keys and rings, %u waiting", w.waiting + w.ring_tasks[0] + w.ring_tasks[1], s->waiting);
    uint32_t in_flight = atomic_load(&s->in_flight), max = atomic_load(&s->max_in_flight);
    if (atomic_load(&s->nready) != s->nring[0] + s->nring[1])
        return fail(why, len, "nready %u, %u in the rings", atomic_load(&s->nready), s->nring[0] + s->nring[1]);
    if (in_flight < w.running_keys)
        return fail(why, len, "%u running keys, in_flight %u", w.running_keys, in_flight);
    if (quiet && s->nring[0] + s->nring[1] && (!max || in_flight < max))
        return fail(why, len, "a lost wake-up: %u entries wait, %u of %u slots taken", s->nring[0] + s->nring[1], in_flight, max);
    return 0;
}

int mg__sched_check(mg_sched_t *s, int quiet, char *why, size_t len)
{
    pthread_mutex_lock(&s->lock);
    int r = check_locked(s, quiet, why, len);
    pthread_mutex_unlock(&s->lock);
    return r;
}
