/*
 * mg__sched_check: walks a scheduler under all its locks and verifies the invariants that
 * sched.c states (I1-I4) and the bookkeeping behind them (and the groups': G1). For tests and debugging; a stress
 * test may call it between phases.
 */
#include <stdarg.h>
#include <stdio.h>
#include "scheduler/internal.h"

typedef struct walk {
    uint32_t counted_keys, ring_keys, granted;
    uint64_t waiting;
} walk_t;

static int fail(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return -1;
}

static int check_queue(const mg__sched_key_t *k, int prio, uint32_t *n, char *why, size_t len)
{
    for (mg__link_t *l = k->queue[prio].next; l != &k->queue[prio]; l = l->next) {
        const mg_sched_task_t *t = mg__task_of_link(l);
        if (t->mg__.key != k || mg__task_state(t) != MG__TASK_WAITING || t->mg__.node.priority != prio ||
            t->mg__.node.shard != k->shard)
            return fail(why, len, "key %.*s: a queued task with key %p, state %d, priority %d", (int)k->len, k->name, t->mg__.key,
                        mg__task_state(t), t->mg__.node.priority);
        ++*n;
    }
    return 0;
}

/* The priority of an IN_RING key's next task, as key_peek computes it (I2). */
static int next_priority(const mg_sched_t *s, const mg__sched_key_t *k)
{
    int high = !mg__link_empty(&k->queue[MG_SCHED_HIGH]), normal = !mg__link_empty(&k->queue[MG_SCHED_NORMAL]);
    return high && (!normal || k->high_streak < s->cfg.high_burst) ? MG_SCHED_HIGH : MG_SCHED_NORMAL;
}

static int check_key(const mg_sched_t *s, const mg__sched_key_t *k, walk_t *w, char *why, size_t len)
{
    uint32_t n = 0;
    if (check_queue(k, MG_SCHED_HIGH, &n, why, len) || check_queue(k, MG_SCHED_NORMAL, &n, why, len))
        return -1;
    if (n != k->waiting)
        return fail(why, len, "key %.*s: %u tasks queued, %u counted", (int)k->len, k->name, n, k->waiting);
    w->waiting += n;
    int in_ring = k->ring.link.next != NULL;
    switch (mg__sched_key_ring_state(k)) {
    case MG__KEY_NONE:
        if (!k->running || k->running->mg__.key != k || in_ring)
            return fail(why, len, "key %.*s: neither running nor waiting for a slot, or in a ring", (int)k->len, k->name);
        if (k->running->mg__.group)
            return fail(why, len, "key %.*s: its running task is still counted in a group", (int)k->len, k->name);
        w->counted_keys += k->running->mg__.node.counted;
        return 0;
    case MG__KEY_IN_RING:
        if (k->running || !k->waiting || !in_ring)
            return fail(why, len, "key %.*s: IN_RING with a running task, nothing waiting, or out of the rings", (int)k->len,
                        k->name);
        if (k->ring.priority != next_priority(s, k))
            return fail(why, len, "key %.*s: in the wrong ring", (int)k->len, k->name);
        w->ring_keys++;
        return 0;
    case MG__KEY_GRANTED:
        if (k->running || in_ring)
            return fail(why, len, "key %.*s: GRANTED and running or in a ring", (int)k->len, k->name);
        w->granted++;
        return 0;
    default:
        return fail(why, len, "key %.*s: ring state %d", (int)k->len, k->name, mg__sched_key_ring_state(k));
    }
}

/* A deadline list: waiting tasks, oldest first, of the given counts. */
static int check_fifo(const mg__link_t *fifo, uint32_t waiting, uint32_t waiting_high, int ordered, char *why, size_t len)
{
    uint32_t n = 0, high = 0;
    uint64_t last = 0;
    for (const mg__link_t *l = fifo->next; l != fifo; l = l->next, n++) {
        const mg_sched_task_t *t = mg__task_of_fifo((mg__link_t *)l);
        if (mg__task_state(t) != MG__TASK_WAITING || (t->mg__.key != NULL) != ordered)
            return fail(why, len, "a task in a deadline list in state %d, key %p", mg__task_state(t), t->mg__.key);
        if (t->mg__.submitted_us < last)
            return fail(why, len, "a deadline list is out of order");
        last = t->mg__.submitted_us;
        high += t->mg__.node.priority == MG_SCHED_HIGH;
    }
    if (n != waiting || high != waiting_high)
        return fail(why, len, "%u waiting (%u high) listed, %u (%u) counted", n, high, waiting, waiting_high);
    return 0;
}

static int check_shard(const mg_sched_t *s, int i, walk_t *w, char *why, size_t len)
{
    const mg__shard_t *sh = &s->shards[i];
    uint32_t keys = 0;
    for (uint32_t b = 0; b < sh->tab.nbuckets; b++) {
        for (const mg__sched_key_t *k = sh->tab.buckets[b]; k; k = k->hnext, keys++) {
            if ((k->hash & (sh->tab.nbuckets - 1)) != b || k->shard != i || (int)(k->hash >> (64 - MG__SHARD_BITS)) != i)
                return fail(why, len, "key %.*s in the wrong bucket or shard", (int)k->len, k->name);
            if (check_key(s, k, w, why, len))
                return -1;
        }
    }
    if (keys != sh->tab.nkeys)
        return fail(why, len, "shard %d: %u keys in the table, %u counted", i, keys, sh->tab.nkeys);
    return check_fifo(&sh->fifo, sh->waiting, sh->waiting_high, 1, why, len);
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
        }
        if (n != s->nring[p])
            return fail(why, len, "ring %d: %u entries, %u counted", p, n, s->nring[p]);
    }
    if (keys != w->ring_keys)
        return fail(why, len, "%u keys in the rings, %u IN_RING", keys, w->ring_keys);
    return 0;
}

/* ---- groups: each counts exactly its waiting tasks, and none is empty ------------------ */

/* Every group of the tables, with `f` (-1 stops the walk). */
static int each_group(mg_sched_t *s, int (*f)(mg_sched_t *, int, uint32_t, mg__sched_group_t *, char *, size_t), char *why,
                      size_t len)
{
    for (int i = 0; i < MG__GROUP_SHARDS; i++) {
        const mg__keytab_t *tab = &s->groups[i].tab;
        uint32_t n = 0;
        for (uint32_t b = 0; b < tab->nbuckets; b++)
            for (mg__sched_group_t *g = tab->buckets[b]; g; g = g->hnext, n++)
                if (f(s, i, b, g, why, len))
                    return -1;
        if (n != tab->nkeys)
            return fail(why, len, "group shard %d: %u groups in the table, %u counted", i, n, tab->nkeys);
    }
    return 0;
}

/* Checks a group's place, and clears its tally (`turns`, which groups do not use). */
static int group_place(mg_sched_t *s, int i, uint32_t b, mg__sched_group_t *g, char *why, size_t len)
{
    if ((g->hash & (s->groups[i].tab.nbuckets - 1)) != b || g->shard != i || mg__group_shard_index(g->hash) != i)
        return fail(why, len, "group %.*s in the wrong bucket or shard", (int)g->len, g->name);
    if (g->waiting == 0)
        return fail(why, len, "group %.*s with nothing waiting", (int)g->len, g->name);
    g->turns = 0;
    return 0;
}

static int group_tally_matches(mg_sched_t *s, int i, uint32_t b, mg__sched_group_t *g, char *why, size_t len)
{
    (void)s, (void)i, (void)b;
    if (g->turns != g->waiting)
        return fail(why, len, "group %.*s: %u tasks wait in it, %u counted", (int)g->len, g->name, g->turns, g->waiting);
    return 0;
}

/* Tallies the waiting tasks of a deadline list in their groups. */
static int tally_fifo(mg_sched_t *s, const mg__link_t *fifo, char *why, size_t len)
{
    for (const mg__link_t *l = fifo->next; l != fifo; l = l->next) {
        mg__sched_group_t *g = mg__task_of_fifo((mg__link_t *)l)->mg__.group;
        if (!g)
            continue;
        if (mg__sched_keytab_find(&s->groups[g->shard].tab, g->name, g->len, g->hash) != g)
            return fail(why, len, "a waiting task counted in a group that is not in its table");
        g->turns++;
    }
    return 0;
}

static int check_groups(mg_sched_t *s, char *why, size_t len)
{
    if (each_group(s, group_place, why, len))
        return -1;
    for (int i = 0; i < MG__SHARDS; i++)
        if (tally_fifo(s, &s->shards[i].fifo, why, len))
            return -1;
    if (tally_fifo(s, &s->fifo, why, len))
        return -1;
    return each_group(s, group_tally_matches, why, len);
}

static int check_locked(mg_sched_t *s, int quiet, char *why, size_t len)
{
    walk_t w = {0};
    for (int i = 0; i < MG__SHARDS; i++)
        if (check_shard(s, i, &w, why, len))
            return -1;
    if (check_rings(s, &w, why, len) || check_fifo(&s->fifo, s->uwaiting, s->uwaiting_high, 0, why, len) ||
        check_groups(s, why, len))
        return -1;
    if (w.waiting + s->uwaiting != atomic_load(&s->waiting))
        return fail(why, len, "%llu tasks wait, %u counted", (unsigned long long)(w.waiting + s->uwaiting),
                    atomic_load(&s->waiting));
    uint32_t in_flight = atomic_load(&s->in_flight), max = atomic_load(&s->max_in_flight), entries = mg__nring(s);
    if (quiet && (atomic_load(&s->nready) != entries || atomic_load(&s->nready_high) != s->nring[MG_SCHED_HIGH]))
        return fail(why, len, "nready %u (high %u), %u in the rings (high %u)", atomic_load(&s->nready),
                    atomic_load(&s->nready_high), entries, s->nring[MG_SCHED_HIGH]);
    if (in_flight < w.counted_keys)
        return fail(why, len, "%u running keys hold a slot, in_flight %u", w.counted_keys, in_flight);
    if (quiet && w.granted)
        return fail(why, len, "%u keys GRANTED with no call in progress", w.granted);
    if (quiet && entries && (!max || in_flight < max))
        return fail(why, len, "a lost wake-up: %u entries wait, %u of %u slots taken", entries, in_flight, max);
    return 0;
}

int mg__sched_check(mg_sched_t *s, int quiet, char *why, size_t len)
{
    mg__lock_all(s);
    mg__lock_groups(s);
    int r = check_locked(s, quiet, why, len);
    mg__unlock_groups(s);
    mg__unlock_all(s);
    return r;
}
