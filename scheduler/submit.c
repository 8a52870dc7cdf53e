/*
 * The scheduler's entry points for tasks (sched.c has the machinery they use: slots, shares,
 * rings, waiting lists, keys and the hand-over): a task submitted (a new key, an ordered task of a
 * known key, an unordered one), a task completed, a waiting task withdrawn, a task delivered on
 * its owner's thread. The locking rules and invariants are sched.c's header.
 */
#include <stdlib.h>
#include <string.h>
#include "scheduler/internal.h"

#define HIGH MG_SCHED_HIGH
#define NORMAL MG_SCHED_NORMAL

/* A new key with its first task: starts at once when a slot is free and nobody waits for one,
 * else waits in a ring. Under the shard's lock; takes the backend's when it cannot start. */
static mg_sched_result_t submit_new_key(mg_sched_t *s, mg__shard_t *sh, mg__sched_key_t *k, mg_sched_task_t *t,
                                        const mg_sched_names_t *g)
{
    int counted = atomic_load_explicit(&s->max_in_flight, memory_order_relaxed) != 0;
    if (!counted || (atomic_load(&s->nready) == 0 && mg__sched_slot_take(s)))
        goto Started;
    pthread_mutex_lock(&s->lock);
    if (mg__sched_slot_or_register(s)) {
        pthread_mutex_unlock(&s->lock);
        goto Started;
    }
    mg_sched_result_t r = mg__sched_place_reserve(s, k, t, g);
    if (!mg__sched_is_queued(r)) {
        atomic_fetch_sub(&s->nready, 1);
        pthread_mutex_unlock(&s->lock);
        free(k);
        return r;
    }
    mg__sched_keytab_insert(&sh->tab, k);
    mg__sched_key_enqueue(s, k, t);
    mg__sched_key_set_ring_state(k, MG__KEY_IN_RING);
    mg__sched_ring_push_registered(s, &k->ring, t->mg__.node.priority);
    pthread_mutex_unlock(&s->lock);
    return r;
Started:
    k->running = t;
    k->turns = 1;
    t->mg__.key = k;
    t->mg__.node.shard = k->shard;
    t->mg__.node.counted = (uint8_t)counted;
    mg__task_set_state(t, MG__TASK_RUNNING);
    mg__sched_keytab_insert(&sh->tab, k);
    return MG_SCHED_STARTED;
}

/* Under the shard's lock. */
static mg_sched_result_t submit_ordered(mg_sched_t *s, mg__shard_t *sh, mg_sched_task_t *t, const mg_sched_names_t *n,
                                        uint64_t hash)
{
    mg__sched_key_t *k = mg__sched_keytab_find(&sh->tab, n->key, n->key_len, hash);
    if (!k) {
        if (!(k = mg__sched_key_new(n->key, n->key_len, hash)))
            return MG_SCHED_NOMEM;
        k->shard = (uint8_t)(sh - s->shards);
        return submit_new_key(s, sh, k, t, n);
    }
    if (k->draining)
        return MG_SCHED_DRAINING;
    mg_sched_result_t r = mg__sched_place_reserve(s, k, t, n);
    if (!mg__sched_is_queued(r))
        return r;
    mg__sched_key_enqueue(s, k, t);
    if (!k->running && mg__sched_key_ring_state(k) == MG__KEY_IN_RING) {
        mg__outbox_t none = MG__OUTBOX_INIT(none);
        mg__sched_key_settle(s, k, &none); /* a high task may move it to the high ring; releases nothing */
    }
    return r;
}

/* Unordered: no key, and no lock while a slot is free and nobody waits for one. */
static mg_sched_result_t submit_unordered(mg_sched_t *s, mg_sched_task_t *t, const mg_sched_names_t *g)
{
    uint32_t max = atomic_load_explicit(&s->max_in_flight, memory_order_relaxed);
    if (max == 0 || (atomic_load(&s->nready) == 0 && mg__sched_slot_take(s))) {
        t->mg__.node.counted = max != 0;
        mg__task_set_state(t, MG__TASK_RUNNING);
        return MG_SCHED_STARTED;
    }
    mg_sched_result_t r = MG_SCHED_STARTED;
    pthread_mutex_lock(&s->lock);
    if (mg__sched_slot_or_register(s)) {
        t->mg__.node.counted = 1;
        mg__task_set_state(t, MG__TASK_RUNNING);
    } else if (!mg__sched_is_queued(r = mg__sched_place_reserve(s, NULL, t, g))) {
        atomic_fetch_sub(&s->nready, 1);
    } else {
        mg__sched_uwait_add(s, t);
        mg__sched_ring_push_registered(s, &t->mg__.node, t->mg__.node.priority);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

mg_sched_result_t mg_sched_submit_group(mg_sched_t *s, mg_sched_task_t *t, const mg_sched_names_t *names,
                                        mg_sched_priority_t priority, uint64_t now_us)
{
    mg_sched_names_t n = *names;
    t->mg__.node.kind = MG__NODE_TASK;
    t->mg__.node.priority = priority == MG_SCHED_HIGH ? HIGH : NORMAL;
    t->mg__.node.counted = 0;
    t->mg__.key = NULL;
    t->mg__.group = NULL;
    t->mg__.submitted_us = now_us;
    if (n.group_len > MG_SCHED_MAX_KEY_LEN)
        n.group_len = MG_SCHED_MAX_KEY_LEN;
    if (!n.key || !n.key_len)
        return submit_unordered(s, t, &n);
    if (n.key_len > MG_SCHED_MAX_KEY_LEN)
        n.key_len = MG_SCHED_MAX_KEY_LEN;
    uint64_t hash = mg__sched_key_hash(s, n.key, n.key_len);
    mg__shard_t *sh = mg__shard_of(s, hash);
    pthread_mutex_lock(&sh->lock);
    mg_sched_result_t r = submit_ordered(s, sh, t, &n, hash);
    pthread_mutex_unlock(&sh->lock);
    return r;
}

mg_sched_result_t mg_sched_submit(mg_sched_t *s, mg_sched_task_t *t, const char *key, size_t len, mg_sched_priority_t priority,
                                  uint64_t now_us)
{
    mg_sched_names_t n = {key, len, NULL, 0};
    return mg_sched_submit_group(s, t, &n, priority, now_us);
}

int mg_sched_complete(mg_sched_t *s, mg_sched_task_t *t)
{
    if (mg__task_state(t) != MG__TASK_RUNNING)
        return -1;
    mg__task_set_state(t, MG__TASK_DONE);
    mg__sched_key_t *k = t->mg__.key;
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    int release = t->mg__.node.counted;
    if (k) {
        mg__shard_t *sh = &s->shards[t->mg__.node.shard];
        pthread_mutex_lock(&sh->lock);
        release = mg__sched_key_done(s, k, t, &o);
        pthread_mutex_unlock(&sh->lock);
    }
    if (release)
        mg__sched_slot_release(s, &o);
    mg__flush(s, &o);
    return 0;
}

void mg__withdraw(mg_sched_t *s, mg_sched_task_t *t, mg__outbox_t *o)
{
    mg__sched_key_t *k = t->mg__.key;
    if (!k) {
        mg__sched_ring_remove(s, &t->mg__.node);
        mg__sched_uwait_remove(s, t);
        return;
    }
    mg__sched_key_unqueue(s, k, t);
    mg__sched_key_settle(s, k, o);
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
