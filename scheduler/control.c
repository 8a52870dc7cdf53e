/*
 * What the scheduler does besides submit and complete: withdrawing a task, draining a key,
 * queue timeouts, reconfiguration, figures, and the life of a scheduler. The hand-over
 * machinery and its invariants are in sched.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP; the meson build defines it already */
#endif
#include <stdlib.h>
#include <string.h>
#include "scheduler/internal.h"

int mg_sched_cancel(mg_sched_t *s, mg_sched_task_t *t)
{
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    pthread_mutex_lock(&s->lock);
    int waiting = mg__task_state(t) == MG__TASK_WAITING;
    if (waiting) {
        mg__withdraw(s, t, &o);
        mg__task_set_state(t, MG__TASK_DONE);
        s->cancelled++;
    }
    mg__unlock_and_post(s, &o);
    return waiting;
}

static void cancel_queue(mg_sched_t *s, mg__key_t *k, mg__link_t *q, mg__outbox_t *o)
{
    while (!mg__link_empty(q)) {
        mg_sched_task_t *t = mg__task_of_link(q->next);
        mg__key_unqueue(s, k, t);
        mg__outbox_add(o, t, MG_SCHED_CANCELLED);
        s->cancelled++;
    }
}

int mg_sched_drain(mg_sched_t *s, const char *key, size_t len, mg_sched_drain_mode_t mode, mg_sched_task_t *done)
{
    if (!key || !len)
        return 0;
    if (len > MG_SCHED_MAX_KEY_LEN)
        len = MG_SCHED_MAX_KEY_LEN;
    uint64_t hash = mg__key_hash(s, key, len);
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    pthread_mutex_lock(&s->lock);
    mg__key_t *k = mg__keytab_find(s, key, len, hash);
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
            mg__key_settle(s, k, &o);
        }
    }
    mg__unlock_and_post(s, &o);
    return r;
}

static uint64_t next_deadline(const mg_sched_t *s)
{
    if (!s->cfg.queue_timeout_us || mg__link_empty(&s->fifo))
        return MG_SCHED_NO_DEADLINE;
    uint64_t at = mg__task_of_fifo(s->fifo.next)->mg__.submitted_us;
    return at > MG_SCHED_NO_DEADLINE - 1 - s->cfg.queue_timeout_us ? MG_SCHED_NO_DEADLINE - 1 : at + s->cfg.queue_timeout_us;
}

/* Whether the oldest waiting task has waited queue_timeout at `now_us` (a `now_us` before its
 * submission, from a thread whose clock read came a little earlier, is no wait at all). */
static int head_expired(const mg_sched_t *s, uint64_t now_us)
{
    if (!s->cfg.queue_timeout_us || mg__link_empty(&s->fifo))
        return 0;
    uint64_t at = mg__task_of_fifo(s->fifo.next)->mg__.submitted_us;
    return now_us >= at && now_us - at >= s->cfg.queue_timeout_us;
}

uint64_t mg_sched_expire(mg_sched_t *s, uint64_t now_us)
{
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    pthread_mutex_lock(&s->lock);
    while (head_expired(s, now_us)) {
        mg_sched_task_t *t = mg__task_of_fifo(s->fifo.next);
        mg__outbox_add(&o, t, MG_SCHED_TIMEOUT); /* before its key's drain notice, if this ends the key */
        mg__withdraw(s, t, &o);
        s->timeouts++;
    }
    uint64_t next = next_deadline(s);
    mg__unlock_and_post(s, &o);
    return next;
}

uint64_t mg_sched_next_deadline(mg_sched_t *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t next = next_deadline(s);
    pthread_mutex_unlock(&s->lock);
    return next;
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

mg_sched_t *mg_sched_new(const mg_sched_config_t *cfg, const mg_sched_executor_t *executor)
{
    if (mg_sched_config_check(cfg, NULL) != 0 || !executor || !executor->post)
        return NULL;
    mg_sched_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (mg__keytab_init(s) != 0) {
        free(s);
        return NULL;
    }
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP); /* short sections: spin a little first */
    pthread_mutex_init(&s->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    s->cfg = with_defaults(cfg);
    s->ex = *executor;
    atomic_init(&s->in_flight, 0);
    atomic_init(&s->nready, 0);
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
    mg__keytab_dispose(s);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int mg_sched_configure(mg_sched_t *s, const mg_sched_config_t *cfg)
{
    if (mg_sched_config_check(cfg, NULL) != 0)
        return -1;
    mg__outbox_t o = MG__OUTBOX_INIT(o);
    pthread_mutex_lock(&s->lock);
    s->cfg = with_defaults(cfg);
    atomic_store(&s->max_in_flight, s->cfg.max_in_flight);
    mg__pump(s, &o);
    mg__unlock_and_post(s, &o);
    return 0;
}

void mg_sched_stats(mg_sched_t *s, mg_sched_stats_t *st)
{
    pthread_mutex_lock(&s->lock);
    st->in_flight = atomic_load(&s->in_flight);
    st->waiting = s->waiting;
    st->waiting_high = s->waiting_high;
    st->keys = s->nkeys;
    st->ready = mg__nring(s);
    st->timeouts = s->timeouts;
    st->cancelled = s->cancelled;
    pthread_mutex_unlock(&s->lock);
}
