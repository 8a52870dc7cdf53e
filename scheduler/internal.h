/*
 * scheduler internals shared by its files and its tests (not a public door).
 *
 * Everything below `lock` in struct mg_sched is guarded by it. The three atomics before it
 * are also read (and in_flight written) without the lock, by unordered tasks: see sched.c,
 * "No lost wake-ups".
 */
#ifndef MG_SCHEDULER_INTERNAL_H
#define MG_SCHEDULER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "scheduler/scheduler.h"

typedef struct mg__sched_link mg__link_t;
typedef struct mg__sched_node mg__node_t;

#define MG__CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

enum { MG__NODE_TASK = 1, MG__NODE_KEY = 2 };

/* A task's life: INIT -> (submit) RUNNING | WAITING; WAITING -> POSTED (taken out by a
 * start, a timeout or a drain, handed to the executor) | DONE (mg_sched_cancel); POSTED ->
 * (deliver) RUNNING | DONE; RUNNING -> (complete) DONE. */
enum { MG__TASK_INIT = 0, MG__TASK_WAITING, MG__TASK_POSTED, MG__TASK_RUNNING, MG__TASK_DONE };

/* A key with state is RUNNING (one of its tasks runs and holds a slot) or READY (nothing
 * runs, tasks wait, and it stands in the ring of its next task's priority). A key with
 * neither has no state. */
enum { MG__KEY_RUNNING = 1, MG__KEY_READY };

typedef struct mg__sched_key {
    mg__node_t ring;     /* kind KEY; state; priority: the ring it is in when READY */
    mg__link_t queue[2]; /* waiting tasks, by priority, oldest first */
    struct mg__sched_key *hnext;
    uint64_t hash;
    mg_sched_task_t *running;
    mg_sched_task_t *done; /* the drain's notice */
    uint32_t waiting;      /* tasks in both queues */
    uint32_t turns;        /* tasks started in a row while holding the slot */
    uint32_t high_streak;  /* high tasks started in a row while normal ones waited */
    uint8_t draining;
    uint32_t len;
    char name[];
} mg__key_t;

struct mg_sched {
    _Atomic uint32_t in_flight;     /* counted running tasks: the slots in use */
    _Atomic uint32_t nready;        /* ring entries, plus registrations about to become one */
    _Atomic uint32_t max_in_flight; /* cfg.max_in_flight, for the lock-free path */
    pthread_mutex_t lock;
    mg_sched_config_t cfg; /* with defaults applied */
    mg_sched_executor_t ex;
    mg__link_t ring[2]; /* entries waiting for a slot, by priority: keys and unordered tasks */
    uint32_t nring[2];
    uint32_t high_streak; /* grants in a row to the high ring while the normal one waited */
    mg__link_t fifo;      /* waiting tasks by submission time */
    uint32_t waiting, waiting_high;
    uint64_t timeouts, cancelled;
    mg__key_t **buckets; /* the keys with state: chained hash table */
    uint32_t nbuckets, nkeys;
    uint64_t hash_seed[2];
};

static inline void mg__link_init(mg__link_t *head)
{
    head->prev = head->next = head;
}

static inline int mg__link_empty(const mg__link_t *head)
{
    return head->next == head;
}

/* Puts `l` before `at` (at the tail when `at` is the list's head). */
static inline void mg__link_insert_before(mg__link_t *at, mg__link_t *l)
{
    l->next = at;
    l->prev = at->prev;
    at->prev->next = l;
    at->prev = l;
}

static inline void mg__link_remove(mg__link_t *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = NULL;
}

/* A task's state is read by mg_sched_cancel (under the lock, on the owner's thread) while
 * another thread may be completing the task (without the lock): neither sees the other's value
 * as WAITING, but the accesses are atomic (relaxed: nothing else is published through them). */
static inline uint8_t mg__task_state(const mg_sched_task_t *t)
{
    return __atomic_load_n(&t->mg__.node.state, __ATOMIC_RELAXED);
}

static inline void mg__task_set_state(mg_sched_task_t *t, uint8_t state)
{
    __atomic_store_n(&t->mg__.node.state, state, __ATOMIC_RELAXED);
}

static inline mg_sched_task_t *mg__task_of_link(mg__link_t *l)
{
    return MG__CONTAINER(l, mg_sched_task_t, mg__.node.link);
}

static inline mg_sched_task_t *mg__task_of_fifo(mg__link_t *l)
{
    return MG__CONTAINER(l, mg_sched_task_t, mg__.fifo);
}

static inline uint32_t mg__nring(const mg_sched_t *s)
{
    return s->nring[MG_SCHED_HIGH] + s->nring[MG_SCHED_NORMAL];
}

/* sched.c: the hand-over machinery, for control.c. The caller holds the lock. */

/* Tasks handed to the executor once the lock is released, in the order they were taken. */
typedef struct mg__outbox {
    mg_sched_task_t *head, **tail;
} mg__outbox_t;

#define MG__OUTBOX_INIT(o)                                                                                                         \
    {                                                                                                                              \
        NULL, &(o).head                                                                                                            \
    }

/* Marks `t` posted with `status` and files it in the outbox. */
void mg__outbox_add(mg__outbox_t *o, mg_sched_task_t *t, mg_sched_status_t status);
/* Releases the lock, then posts the outbox's tasks. */
void mg__unlock_and_post(mg_sched_t *s, mg__outbox_t *o);
/* Gives free slots to ring entries while both exist. */
void mg__pump(mg_sched_t *s, mg__outbox_t *o);
/* Takes a waiting task out of wherever it waits (its key's queue or a ring, and the list). */
void mg__withdraw(mg_sched_t *s, mg_sched_task_t *t, mg__outbox_t *o);
/* Takes a waiting task out of its key's queue and of the list, without settling the key. */
void mg__key_unqueue(mg_sched_t *s, mg__key_t *k, mg_sched_task_t *t);
/* After waiting tasks of `k` went away: releases a READY key left with nothing, moves one whose
 * next task changed priority (I1, I2). */
void mg__key_settle(mg_sched_t *s, mg__key_t *k, mg__outbox_t *o);

/* keytab.c: the keys with state. The caller holds the lock (except for mg__key_hash). */
int mg__keytab_init(mg_sched_t *s);
void mg__keytab_dispose(mg_sched_t *s);
uint64_t mg__key_hash(const mg_sched_t *s, const char *key, size_t len);
mg__key_t *mg__keytab_find(const mg_sched_t *s, const char *key, size_t len, uint64_t hash);
/* A new key's state (not in the table yet); NULL when out of memory. */
mg__key_t *mg__key_new(const char *key, size_t len, uint64_t hash);
void mg__keytab_insert(mg_sched_t *s, mg__key_t *k);
/* Takes `k` out of the table and frees it. */
void mg__keytab_delete(mg_sched_t *s, mg__key_t *k);

/* check.c: verifies every invariant of a scheduler nobody else is using (tests, debugging).
 * 0 when all hold; -1 with the first broken one in `why`. `quiet`: no lock-free release is
 * in progress, so that "no slot stays free while an entry waits" must hold too. */
int mg__sched_check(mg_sched_t *s, int quiet, char *why, size_t len);

#endif
