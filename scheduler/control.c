/*
 * What the scheduler does besides submit and complete: withdrawing a task, draining a key,
 * queue timeouts, reconfiguration, figures, and the life of a scheduler. The hand-over
 * machinery and its invariants are in sched.c; the locks in internal.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP; the meson build defines it already */
#endif
#include <stdlib.h>
#include <string.h>
#include "scheduler/internal.h"

/* The lock that guards a waiting task: its key's shard's, or the backend's. */
static pthread_mutex_t *lock_of(mg_sched_t *s, const mg_sched_task_t *t)
{
    return t->mg__.key ? &s->shards[t->mg__.node.shard].lock : &s->lock;
}

int mg_sched_cancel(mg_sched_t *s, mg_sched_task_t *t)
{
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    /* on the owner's thread: a task that is not waiting cannot become waiting meanwhile, and the
     * key pointer and shard of a waiting one stay valid */
    if (mg__task_state(t) != MG__TASK_WAITING)
        return 0;
    pthread_mutex_t *lock = lock_of(s, t);
    pthread_mutex_lock(lock);
    int waiting = mg__task_state(t) == MG__TASK_WAITING;
    if (waiting) {
        mg__withdraw(s, t, &o);
        mg__task_set_state(t, MG__TASK_DONE);
        if (t->mg__.key)
            s->shards[t->mg__.node.shard].cancelled++;
        else
            s->cancelled++;
    }
    pthread_mutex_unlock(lock);
    mg__flush(s, &o);
    return waiting;
}

static void cancel_queue(mg_sched_t *s, mg__sched_key_t *k, mg__link_t *q, mg__outbox_t *o)
{
    while (!mg__link_empty(q)) {
        mg_sched_task_t *t = mg__task_of_link(q->next);
        mg__sched_key_unqueue(s, k, t);
        mg__outbox_add(o, t, MG_SCHED_CANCELLED);
        s->shards[k->shard].cancelled++;
    }
}

int mg_sched_drain(mg_sched_t *s, const char *key, size_t len, mg_sched_drain_mode_t mode, mg_sched_task_t *done)
{
    if (!key || !len)
        return 0;
    if (len > MG_SCHED_MAX_KEY_LEN)
        len = MG_SCHED_MAX_KEY_LEN;
    uint64_t hash = mg__sched_key_hash(s, key, len);
    mg__shard_t *sh = mg__shard_of(s, hash);
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    pthread_mutex_lock(&sh->lock);
    mg__sched_key_t *k = mg__sched_keytab_find(&sh->tab, key, len, hash);
    int r = k ? 1 : 0;
    if (k && done && k->done)
        r = -1;
    else if (k && done)
        k->done = done;
    if (k) {
        k->draining = 1;
        if (mode == MG_SCHED_DRAIN_CANCEL) {
            cancel_queue(s, k, &k->queue[MG_SCHED_HIGH], &o);
            cancel_queue(s, k, &k->queue[MG_SCHED_NORMAL], &o);
            mg__sched_key_settle(s, k, &o);
        }
    }
    pthread_mutex_unlock(&sh->lock);
    mg__flush(s, &o);
    return r;
}

/* ---- queue timeouts --------------------------------------------------------------------- */

/* When the oldest task of a deadline list will have waited queue_timeout. */
static uint64_t deadline_of(const mg_sched_t *s, const mg__link_t *fifo)
{
    if (!s->cfg.queue_timeout_us || mg__link_empty(fifo))
        return MG_SCHED_NO_DEADLINE;
    uint64_t at = mg__task_of_fifo(fifo->next)->mg__.submitted_us;
    return at > MG_SCHED_NO_DEADLINE - 1 - s->cfg.queue_timeout_us ? MG_SCHED_NO_DEADLINE - 1 : at + s->cfg.queue_timeout_us;
}

/* Whether the oldest task of a list has waited queue_timeout at `now_us` (a `now_us` before its
 * submission, from a thread whose clock read came a little earlier, is no wait at all). */
static int head_expired(const mg_sched_t *s, const mg__link_t *fifo, uint64_t now_us)
{
    if (!s->cfg.queue_timeout_us || mg__link_empty(fifo))
        return 0;
    uint64_t at = mg__task_of_fifo(fifo->next)->mg__.submitted_us;
    return now_us >= at && now_us - at >= s->cfg.queue_timeout_us;
}

/* Times out the due tasks of one list (under its lock); returns the list's next deadline. */
static uint64_t expire_list(mg_sched_t *s, mg__link_t *fifo, uint64_t *timeouts, uint64_t now_us, mg__outbox_t *o)
{
    while (head_expired(s, fifo, now_us)) {
        mg_sched_task_t *t = mg__task_of_fifo(fifo->next);
        mg__outbox_add(o, t, MG_SCHED_TIMEOUT); /* before its key's drain notice, if this ends the key */
        mg__withdraw(s, t, o);
        ++*timeouts;
    }
    return deadline_of(s, fifo);
}

/* With `now_us` = 0 nothing is due: the next deadline only. */
static uint64_t expire(mg_sched_t *s, uint64_t now_us)
{
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    uint64_t next = MG_SCHED_NO_DEADLINE, d;
    for (int i = 0; i < MG__SHARDS; i++) {
        mg__shard_t *sh = &s->shards[i];
        pthread_mutex_lock(&sh->lock);
        if ((d = expire_list(s, &sh->fifo, &sh->timeouts, now_us, &o)) < next)
            next = d;
        pthread_mutex_unlock(&sh->lock);
    }
    pthread_mutex_lock(&s->lock);
    if ((d = expire_list(s, &s->fifo, &s->timeouts, now_us, &o)) < next)
        next = d;
    pthread_mutex_unlock(&s->lock);
    mg__flush(s, &o);
    return next;
}

uint64_t mg_sched_expire(mg_sched_t *s, uint64_t now_us)
{
    return expire(s, now_us);
}

uint64_t mg_sched_next_deadline(mg_sched_t *s)
{
    return expire(s, 0);
}

/* ---- life of a scheduler ---------------------------------------------------------------- */

int mg_sched_config_check(const mg_sched_config_t *cfg, const char **why)
{
    const char *w = NULL;
    if (cfg->quantum > MG_SCHED_MAX_QUANTUM)
        w = "quantum must be 1..1000";
    else if (cfg->high_burst > MG_SCHED_MAX_HIGH_BURST)
        w = "high_burst must be 1..1000";
    else if (cfg->queue_max && cfg->queue_limit > cfg->queue_max)
        w = "queue_max must not be below queue_limit";
    if (w && why)
        *why = w;
    return w ? -1 : 0;
}

static mg_sched_config_t with_defaults(const mg_sched_config_t *cfg)
{
    mg_sched_config_t c = *cfg;
    if (!c.quantum)
        c.quantum = MG_SCHED_DEFAULT_QUANTUM;
    if (!c.high_burst)
        c.high_burst = MG_SCHED_DEFAULT_HIGH_BURST;
    return c;
}

static void mutex_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP); /* short sections: spin a little first */
    pthread_mutex_init(m, &attr);
    pthread_mutexattr_destroy(&attr);
}

mg_sched_t *mg_sched_new(const mg_sched_config_t *cfg, const mg_sched_executor_t *executor)
{
    if (mg_sched_config_check(cfg, NULL) != 0 || !executor || !executor->post)
        return NULL;
    mg_sched_t *s = aligned_alloc(64, sizeof(*s));
    if (!s)
        return NULL;
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < MG__SHARDS; i++) {
        if (mg__sched_keytab_init(&s->shards[i].tab) != 0) {
            mg_sched_free(s);
            return NULL;
        }
        mutex_init(&s->shards[i].lock);
        mg__link_init(&s->shards[i].fifo);
    }
    for (int i = 0; i < MG__GROUP_SHARDS; i++) {
        if (mg__sched_keytab_init(&s->groups[i].tab) != 0) {
            mg_sched_free(s);
            return NULL;
        }
        mutex_init(&s->groups[i].lock);
    }
    mg__sched_keytab_seed(s);
    mutex_init(&s->lock);
    s->cfg = with_defaults(cfg);
    s->ex = *executor;
    atomic_init(&s->max_in_flight, s->cfg.max_in_flight);
    mg__link_init(&s->ring[MG_SCHED_HIGH]);
    mg__link_init(&s->ring[MG_SCHED_NORMAL]);
    mg__link_init(&s->fifo);
    return s;
}

void mg_sched_free(mg_sched_t *s)
{
    if (!s)
        return;
    for (int i = 0; i < MG__SHARDS; i++) {
        if (s->shards[i].tab.buckets)
            pthread_mutex_destroy(&s->shards[i].lock);
        mg__sched_keytab_dispose(&s->shards[i].tab);
    }
    for (int i = 0; i < MG__GROUP_SHARDS; i++) {
        if (s->groups[i].tab.buckets)
            pthread_mutex_destroy(&s->groups[i].lock);
        mg__sched_keytab_dispose(&s->groups[i].tab);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void mg__lock_all(mg_sched_t *s)
{
    for (int i = 0; i < MG__SHARDS; i++)
        pthread_mutex_lock(&s->shards[i].lock);
    pthread_mutex_lock(&s->lock);
}

void mg__lock_groups(mg_sched_t *s)
{
    for (int i = 0; i < MG__GROUP_SHARDS; i++)
        pthread_mutex_lock(&s->groups[i].lock);
}

void mg__unlock_groups(mg_sched_t *s)
{
    for (int i = MG__GROUP_SHARDS - 1; i >= 0; i--)
        pthread_mutex_unlock(&s->groups[i].lock);
}

void mg__unlock_all(mg_sched_t *s)
{
    pthread_mutex_unlock(&s->lock);
    for (int i = MG__SHARDS - 1; i >= 0; i--)
        pthread_mutex_unlock(&s->shards[i].lock);
}

int mg_sched_configure(mg_sched_t *s, const mg_sched_config_t *cfg)
{
    if (mg_sched_config_check(cfg, NULL) != 0)
        return -1;
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    mg__lock_all(s); /* every reader of cfg holds one of them */
    s->cfg = with_defaults(cfg);
    atomic_store(&s->max_in_flight, s->cfg.max_in_flight);
    mg__sched_rering(s); /* a new high_burst may pick another next task for a waiting key */
    mg__pump(s, &o);
    mg__unlock_all(s);
    mg__flush(s, &o);
    return 0;
}

void mg_sched_stats(mg_sched_t *s, mg_sched_stats_t *st)
{
    memset(st, 0, sizeof(*st));
    mg__lock_all(s);
    mg__lock_groups(s);
    for (int i = 0; i < MG__SHARDS; i++) {
        const mg__shard_t *sh = &s->shards[i];
        st->keys += sh->tab.nkeys;
        st->waiting += sh->waiting;
        st->waiting_high += sh->waiting_high;
        st->timeouts += sh->timeouts;
        st->cancelled += sh->cancelled;
        st->share_refused += sh->share_refused;
    }
    for (int i = 0; i < MG__GROUP_SHARDS; i++)
        st->groups += s->groups[i].tab.nkeys;
    st->waiting += s->uwaiting;
    st->waiting_high += s->uwaiting_high;
    st->timeouts += s->timeouts;
    st->cancelled += s->cancelled;
    st->share_refused += s->share_refused;
    st->in_flight = atomic_load(&s->in_flight);
    st->ready = mg__nring(s);
    mg__unlock_groups(s);
    mg__unlock_all(s);
}
