/*
 * scheduler internals shared by its files and its tests (not a public door).
 *
 * Locks. The keys live in 32 shards (by hash); a shard's lock guards its key table, its
 * keys' queues and running tasks, and its list of waiting ordered tasks. The backend lock
 * (`lock`) guards the rings (entries waiting for a slot), the waiting unordered tasks and the
 * grant bookkeeping. The groups live in 8 group shards of their own, each lock guarding its
 * group table and its groups' counts; a group lock is a leaf: taken last, under whatever the
 * task's wait is guarded by (its key's shard, or the backend), and never two at once. Order: a
 * shard's lock, then the backend lock, then a group lock; never two shard locks (but for
 * check.c, mg_sched_stats and mg_sched_configure, which take all of them in index order, then
 * the backend's, and, for the first two, then the groups'). The atomics at the top are read
 * without a lock: see sched.c.
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
#define MG__SHARD_BITS                                                                                                             \
    5 /* 32 shards: with the backend's and the groups', 41 locks held by mg__lock_all, under ThreadSanitizer's 64 */
#define MG__SHARDS (1 << MG__SHARD_BITS)
#define MG__GROUP_SHARD_BITS 3
#define MG__GROUP_SHARDS (1 << MG__GROUP_SHARD_BITS)

enum { MG__NODE_TASK = 1, MG__NODE_KEY = 2 };

/* A task's life: INIT -> (submit) RUNNING | WAITING; WAITING -> POSTED (taken out by a
 * start, a timeout or a drain, handed to the executor) | DONE (mg_sched_cancel); POSTED ->
 * (deliver) RUNNING | DONE; RUNNING -> (complete) DONE. */
enum { MG__TASK_INIT = 0, MG__TASK_WAITING, MG__TASK_POSTED, MG__TASK_RUNNING, MG__TASK_DONE };

/* A key's place with respect to the rings (key->ring.state, read and written atomically):
 * NONE: it runs, or has just been created; IN_RING: nothing of it runs, tasks wait, it waits for
 * a slot in the ring of its next task's priority; GRANTED: the backend took it out of its ring
 * with a slot for it, and the thread that did so is about to start its next task (or, finding
 * none, to give the slot back and release the key). IN_RING -> GRANTED under the backend lock
 * only; GRANTED -> NONE under the key's shard lock only (by that thread); the other moves under
 * both. */
enum { MG__KEY_NONE = 0, MG__KEY_IN_RING, MG__KEY_GRANTED };

typedef struct mg__sched_key {
    mg__node_t ring;     /* kind KEY; state: NONE | IN_RING | GRANTED; priority: its ring */
    mg__link_t queue[2]; /* waiting tasks, by priority, oldest first */
    struct mg__sched_key *hnext;
    struct mg__sched_key *grant_next; /* in an outbox's grants */
    uint64_t hash;
    mg_sched_task_t *running;
    mg_sched_task_t *done; /* the drain's notice */
    uint32_t waiting;      /* tasks in both queues */
    uint32_t turns;        /* tasks started in a row while holding the slot */
    uint32_t high_streak;  /* high tasks started in a row while normal ones waited */
    uint8_t draining, shard;
    uint32_t len;
    char name[];
} mg__sched_key_t;

/* A group's state is a key state in a group table: only the table's fields (hnext, hash, len,
 * name), its shard and `waiting` (the group's waiting tasks) are used; check.c borrows `turns`. */
typedef mg__sched_key_t mg__sched_group_t;

/* A chained hash table of key (or group) states (keytab.c). */
typedef struct mg__keytab {
    mg__sched_key_t **buckets;
    uint32_t nbuckets, nkeys;
} mg__keytab_t;

typedef struct mg__shard {
    pthread_mutex_t lock;
    mg__keytab_t tab; /* the shard's keys */
    mg__link_t fifo;  /* waiting ordered tasks of its keys, by submission time */
    uint32_t waiting, waiting_high;
    uint64_t timeouts, cancelled, share_refused;
} __attribute__((aligned(64))) mg__shard_t;

typedef struct mg__group_shard {
    pthread_mutex_t lock;
    mg__keytab_t tab; /* groups with a waiting task */
} __attribute__((aligned(64))) mg__group_shard_t;

struct mg_sched {
    _Atomic uint32_t in_flight __attribute__((aligned(64))); /* counted running tasks: slots in use */
    _Atomic uint32_t nready;                                 /* ring entries, plus registrations about to become one */
    _Atomic uint32_t nready_high;                            /* entries of the high ring (a running normal key yields to them) */
    _Atomic uint32_t max_in_flight;                          /* cfg.max_in_flight, for the lock-free paths */
    _Atomic uint32_t waiting;                                /* every waiting task (queue_limit, queue_max) */
    pthread_mutex_t lock __attribute__((aligned(64)));
    mg_sched_config_t cfg; /* with defaults applied; written with every lock held */
    mg_sched_executor_t ex;
    mg__link_t ring[2]; /* entries waiting for a slot, by priority: keys and unordered tasks */
    uint32_t nring[2];
    uint32_t high_streak; /* grants in a row to the high ring while the normal one waited */
    mg__link_t fifo;      /* waiting unordered tasks by submission time */
    uint32_t uwaiting, uwaiting_high;
    uint64_t timeouts, cancelled, share_refused; /* of unordered tasks */
    uint64_t hash_seed[2];
    mg__shard_t shards[MG__SHARDS];
    mg__group_shard_t groups[MG__GROUP_SHARDS];
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

/* A task's state is read by mg_sched_cancel (under a lock, on the owner's thread) while
 * another thread may be completing the task (without a lock): neither sees the other's value
 * as WAITING, but the accesses are atomic (relaxed: nothing else is published through them). */
static inline uint8_t mg__task_state(const mg_sched_task_t *t)
{
    return __atomic_load_n(&t->mg__.node.state, __ATOMIC_RELAXED);
}

static inline void mg__task_set_state(mg_sched_task_t *t, uint8_t state)
{
    __atomic_store_n(&t->mg__.node.state, state, __ATOMIC_RELAXED);
}

static inline uint8_t mg__sched_key_ring_state(const mg__sched_key_t *k)
{
    return __atomic_load_n(&k->ring.state, __ATOMIC_RELAXED);
}

static inline void mg__sched_key_set_ring_state(mg__sched_key_t *k, uint8_t state)
{
    __atomic_store_n(&k->ring.state, state, __ATOMIC_RELAXED);
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

/* sched.c: the hand-over machinery, for control.c. */

/* What a locked section hands on once every lock is released: tasks for the executor, in the
 * order they were taken, and keys granted a slot, to be started (mg__flush). */
typedef struct mg__outbox {
    mg_sched_task_t *head, **tail;
    mg__sched_key_t *grants, **grants_tail;
} mg__outbox_t;

#define MG__OUTBOX_INIT(o)                                                                                                         \
    {                                                                                                                              \
        NULL, &(o).head, NULL, &(o).grants                                                                                         \
    }

/* Marks `t` posted with `status` and files it in the outbox. */
void mg__outbox_add(mg__outbox_t *o, mg_sched_task_t *t, mg_sched_status_t status);
/* With no lock held: starts the granted keys (each under its shard's lock), then posts. */
void mg__flush(mg_sched_t *s, mg__outbox_t *o);
/* Under the backend lock: gives free slots to ring entries while both exist. */
void mg__pump(mg_sched_t *s, mg__outbox_t *o);
/* Under the task's lock (its key's shard, or the backend's when unordered): takes a waiting
 * task out of wherever it waits. The shard's lock may take the backend's. */
void mg__withdraw(mg_sched_t *s, mg_sched_task_t *t, mg__outbox_t *o);
/* Under the shard's lock: takes a waiting task out of its key's queue and the shard's list,
 * without settling the key. */
void mg__sched_key_unqueue(mg_sched_t *s, mg__sched_key_t *k, mg_sched_task_t *t);
/* Under the shard's lock, after waiting tasks of `k` went away: releases a key left with
 * nothing, moves one whose next task changed priority to that ring. */
void mg__sched_key_settle(mg_sched_t *s, mg__sched_key_t *k, mg__outbox_t *o);
/* Under every lock: moves each waiting key to the ring of its next task's priority (after
 * high_burst changed, which decides it). */
void mg__sched_rering(mg_sched_t *s);

/* The machinery submit.c drives (sched.c): slots, places among the waiting, rings, waiting
 * lists, keys. */
/* A free slot taken without a lock (CAS on in_flight): 1, or 0 when all are taken. */
int mg__sched_slot_take(mg_sched_t *s);
/* Under the backend lock, for an entry with a task to start: 1 when it got a slot; 0 when it
 * must wait, registered in nready (the caller puts it in a ring or unregisters it). */
int mg__sched_slot_or_register(mg_sched_t *s);
/* Gives a slot back: to the next ring entry under the backend lock when entries wait, else
 * without a lock (an entry that came meanwhile gets it through the pump). */
void mg__sched_slot_release(mg_sched_t *s, mg__outbox_t *o);
/* 1 for the results that leave a task waiting (QUEUED, QUEUED_FULL). */
int mg__sched_is_queued(mg_sched_result_t r);
/* Reserves a place among the waiting for `t` of key `k` (NULL: unordered) and group `g`: QUEUED or
 * QUEUED_FULL, or the refusal with nothing kept. Under the lock that guards the task's wait. */
mg_sched_result_t mg__sched_place_reserve(mg_sched_t *s, const mg__sched_key_t *k, mg_sched_task_t *t, const mg_sched_names_t *g);
/* Under the backend lock: an entry already registered in nready joins the ring of `prio`; an
 * entry leaves its ring. */
void mg__sched_ring_push_registered(mg_sched_t *s, mg__node_t *n, int prio);
void mg__sched_ring_remove(mg_sched_t *s, mg__node_t *n);
/* Under the backend lock: an unordered task starts or stops waiting. */
void mg__sched_uwait_add(mg_sched_t *s, mg_sched_task_t *t);
void mg__sched_uwait_remove(mg_sched_t *s, mg_sched_task_t *t);
/* Under the shard's lock: `t` waits behind the tasks of `k`. */
void mg__sched_key_enqueue(mg_sched_t *s, mg__sched_key_t *k, mg_sched_task_t *t);
/* Under the shard's lock: the running task `t` of `k` completed. 1 when the caller must give the
 * task's slot back (mg__sched_slot_release, once the shard's lock is released). */
int mg__sched_key_done(mg_sched_t *s, mg__sched_key_t *k, mg_sched_task_t *t, mg__outbox_t *o);
/* Takes every shard's lock (in order) and the backend's, and gives them back: what guards the
 * keys, the rings, the waiting tasks and cfg (readers of cfg hold one of them). */
void mg__lock_all(mg_sched_t *s);
void mg__unlock_all(mg_sched_t *s);
/* Takes every group lock (in order), under mg__lock_all (check.c, stats), and gives them back.
 * Nothing that may end a wait can run meanwhile: group_leave would take one again. */
void mg__lock_groups(mg_sched_t *s);
void mg__unlock_groups(mg_sched_t *s);

/* keytab.c: the keys (and groups) with state, per shard. The caller holds the shard's lock
 * (except for mg__sched_key_hash). */
int mg__sched_keytab_init(mg__keytab_t *tab);
void mg__sched_keytab_dispose(mg__keytab_t *tab);
void mg__sched_keytab_seed(mg_sched_t *s);
uint64_t mg__sched_key_hash(const mg_sched_t *s, const char *key, size_t len);
static inline mg__shard_t *mg__shard_of(mg_sched_t *s, uint64_t hash)
{
    return &s->shards[hash >> (64 - MG__SHARD_BITS)]; /* the top bits; the tables use the low ones */
}
static inline uint8_t mg__group_shard_index(uint64_t hash)
{
    return (uint8_t)(hash >> (64 - MG__GROUP_SHARD_BITS));
}
mg__sched_key_t *mg__sched_keytab_find(const mg__keytab_t *tab, const char *key, size_t len, uint64_t hash);
/* A new key's state (not in the table yet); NULL when out of memory. */
mg__sched_key_t *mg__sched_key_new(const char *key, size_t len, uint64_t hash);
void mg__sched_keytab_insert(mg__keytab_t *tab, mg__sched_key_t *k);
/* Takes `k` out of the table and frees it. */
void mg__sched_keytab_delete(mg__keytab_t *tab, mg__sched_key_t *k);

/* check.c: verifies every invariant of a scheduler (tests, debugging), under all its locks.
 * 0 when all hold; -1 with the first broken one in `why`. `quiet`: no call is in progress in
 * another thread, so that "no slot stays free while an entry waits" must hold too. */
int mg__sched_check(mg_sched_t *s, int quiet, char *why, size_t len);

#endif
