/*
 * scheduler: ordered, fair dispatch of tasks to one backend (the sequential leveled
 * scheduler). Knows nothing of HTTP, h2o or libcurl: a task is an opaque piece of work
 * that the caller starts when told to and reports finished later, from any thread.
 *
 * One mg_sched_t per backend (its capacity domain). It holds:
 *   - the backend's capacity, max_in_flight slots: a running task holds one;
 *   - ordering keys: per key a high and a normal queue; at most one task of a key runs at
 *     a time; the next one starts when the running one completes; a high task jumps ahead
 *     of the waiting tasks of its key but never interrupts the running one; tasks of one
 *     priority run in arrival order (the order in which mg_sched_submit took them). Key
 *     names are scoped to the scheduler, so to the backend;
 *   - fairness: keys (and waiting unordered tasks) that wait for a slot stand in two rings
 *     (high, normal) and are granted slots round-robin; a key that holds a slot keeps it for
 *     at most `quantum` consecutive tasks while others wait; high entries are granted first,
 *     but at most `high_burst` grants in a row while normal entries wait (bounds below);
 *   - waiting: a task that cannot start (its key busy, or no slot) waits at most
 *     `queue_timeout` and then ends with MG_SCHED_TIMEOUT; the caller's timer drives this
 *     through mg_sched_expire, there is no polling and no thread inside;
 *   - bounded waiting: at `queue_limit` waiting tasks submissions report
 *     MG_SCHED_QUEUED_FULL (the producer should stop reading until that task's callback); at
 *     `queue_max` they are refused;
 *   - fair shares of the waiting: a task that must wait is refused when `key_queue_max` tasks
 *     of its key wait already (MG_SCHED_KEY_FULL), or `group_queue_max` tasks of its group
 *     (MG_SCHED_GROUP_FULL). A group is whoever the task is for (a client, a tenant), named at
 *     submission (mg_sched_submit_group) and counted across keys and unordered tasks alike, so
 *     that one producer cannot take the whole queue by spreading over keys. A task that starts
 *     at once is never refused by a share, and nothing is counted for it.
 * An idle key (nothing running, nothing waiting) has no state: it costs no memory.
 *
 * Fairness and starvation bounds (C = max_in_flight, Q = quantum, H = high_burst):
 *   - a key holds at most one slot, and gives it up after Q consecutive tasks when any other
 *     entry waits (at once, for a normal task, when a high entry waits); an entry that reaches
 *     the head of its ring is granted a slot within H + 1 grants; so it starts within
 *     (H + 1) * Q task completions of a single slot (fewer when C > 1, since every slot
 *     grants);
 *   - within a key, a normal task is overtaken by at most H high tasks in a row (then one
 *     normal task runs, then high ones may jump again);
 *   - a task submitted with nothing waiting on its key and nothing waiting for a slot starts
 *     at once if a slot is free.
 *
 * Threads. A scheduler is shared by every worker thread. Every entry point may be called
 * from any thread, except mg_sched_cancel and mg_sched_deliver (on the task's owner thread,
 * see below). Tasks are started on their owner thread: the caller names the owner (an
 * opaque pointer, e.g. the worker) in the task, and the scheduler hands tasks that become
 * startable during some other call (the completion of the task ahead, a timeout, a drain)
 * to an executor, which must call mg_sched_deliver on the owner's thread. The executor is
 * called without any scheduler lock held and must not call back into the scheduler itself.
 *
 * Cost. Ordered tasks take the lock of their key's shard (one of 32) on submit and on
 * complete, and the backend's lock only when they wait for a slot or hand theirs over to one
 * that waits. Unordered tasks (no key) take no lock while a slot is free: they touch only the
 * backend's atomic slot counter, and nothing shared at all when max_in_flight is 0
 * (unlimited). Nothing is allocated per task; a key's state is allocated when the key gets
 * its first task and freed when it has none left. The fair shares cost nothing to a task that
 * starts at once; one that waits with a group takes that group's lock (one of 8) twice, and
 * its group's state lives while a task of the group waits.
 *
 * Wiring into h2o (the intended use; the module does not include h2o):
 *   - one mg_sched_t per backend; each worker has an h2o_multithread_receiver_t for
 *     deliveries; the per-request state embeds an h2o_multithread_message_t beside its
 *     mg_sched_task_t. post = h2o_multithread_send_message(&worker_of(task->owner)->recv,
 *     &msg); the receiver callback calls mg_sched_deliver for each message. (A worker may
 *     post to itself; the delivery never comes recursively, from inside post. Posted from
 *     inside the receiver callback, it comes in the same loop turn: h2o 2.2.5 calls the
 *     receivers again until none has messages; posted from elsewhere, on a later turn.)
 *   - submit: STARTED -> send the backend request now; QUEUED -> wait for the callback;
 *     QUEUED_FULL -> also stop reading from the connection (or bridge session) until the
 *     callback; FULL, KEY_FULL, GROUP_FULL -> 503 + Retry-After; DRAINING -> 503; NOMEM -> 503.
 *   - run callback: MG_SCHED_RUN -> send the backend request, or, if the client has gone,
 *     call mg_sched_complete at once; MG_SCHED_TIMEOUT -> 503 queue-timeout + Retry-After;
 *     MG_SCHED_CANCELLED -> 503.
 *   - the response finished (or failed, or the client left mid-flight): mg_sched_complete.
 *   - the client left while the task waits: mg_sched_cancel; 0 means a callback is on its
 *     way (or the task runs): keep the task's memory until then (so not in the request pool
 *     unless its dispose callback defers the free).
 *   - queue timeouts: each worker keeps one timer per backend; when submit says QUEUED and
 *     that timer is not armed, arm it at now + queue_timeout; when it fires, call
 *     mg_sched_expire and re-arm at the deadline it returns, if any. Any worker's expire
 *     times out every due task, whoever owns it (the owners get their callbacks).
 */
#ifndef MG_SCHEDULER_H
#define MG_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

typedef struct mg_sched mg_sched_t;
typedef struct mg_sched_task mg_sched_task_t;

typedef enum mg_sched_priority {
    MG_SCHED_NORMAL = 0,
    MG_SCHED_HIGH = 1,
} mg_sched_priority_t;

/* What a task's run callback is told. Exactly one of these comes per queued task (never for a
 * task that mg_sched_submit started or refused, nor after mg_sched_cancel returned 1). */
typedef enum mg_sched_status {
    MG_SCHED_RUN = 0,   /* start the task now; call mg_sched_complete once it is finished */
    MG_SCHED_TIMEOUT,   /* it waited queue_timeout without starting: never started, nothing to complete */
    MG_SCHED_CANCELLED, /* its key was drained with MG_SCHED_DRAIN_CANCEL: never started, nothing to complete */
    MG_SCHED_DRAINED,   /* only for the `done` notice of mg_sched_drain: the key is gone */
} mg_sched_status_t;

/* What mg_sched_submit did with a task. */
typedef enum mg_sched_result {
    MG_SCHED_STARTED,     /* it runs now: the caller starts it itself (no callback) and completes it */
    MG_SCHED_QUEUED,      /* it waits: its run callback will come through the executor */
    MG_SCHED_QUEUED_FULL, /* as QUEUED, and queue_limit tasks wait: stop reading from its producer until its callback */
    MG_SCHED_FULL,        /* refused: queue_max tasks wait already */
    MG_SCHED_KEY_FULL,    /* refused: key_queue_max tasks of its key wait already */
    MG_SCHED_GROUP_FULL,  /* refused: group_queue_max tasks of its group wait already */
    MG_SCHED_DRAINING,    /* refused: its key is being drained */
    MG_SCHED_NOMEM,       /* refused: no memory for the key's state */
} mg_sched_result_t;

typedef enum mg_sched_drain_mode {
    MG_SCHED_DRAIN_RUN,    /* the waiting tasks of the key run, in order, as usual */
    MG_SCHED_DRAIN_CANCEL, /* the waiting tasks of the key end with MG_SCHED_CANCELLED */
} mg_sched_drain_mode_t;

typedef void (*mg_sched_run_cb)(mg_sched_task_t *task, mg_sched_status_t status);

/* A task, embedded in the caller's per-request state; the scheduler allocates nothing per
 * task. It must stay valid and in place from mg_sched_submit until the scheduler is done with
 * it: STARTED or MG_SCHED_RUN -> until mg_sched_complete returned; a callback with another
 * status -> until the callback is called; mg_sched_cancel returned 1 or submit refused it ->
 * at once. */
struct mg_sched_task {
    mg_sched_run_cb run;         /* caller: called by mg_sched_deliver, on the owner's thread */
    void *owner;                 /* caller: the thread (worker) that runs it; read by the executor only */
    mg_sched_task_t *exec_next;  /* the executor's, while the task is posted (e.g. an intrusive list) */
    struct mg__sched_task_priv { /* the scheduler's: do not touch */
        struct mg__sched_node {
            struct mg__sched_link {
                struct mg__sched_link *prev, *next;
            } link; /* in its key's queue, or (unordered, waiting for a slot) in a ring */
            uint8_t kind, state, status, priority, counted, shard;
        } node;
        struct mg__sched_link fifo; /* in the backend's list of waiting tasks, oldest first */
        void *key;                  /* its key's state, NULL when unordered */
        void *group;                /* its group's state while it waits counted in one, else NULL */
        uint64_t submitted_us;
    } mg__;
};

/* Configuration of one backend's scheduler. */
typedef struct mg_sched_config {
    uint32_t max_in_flight;    /* slots; 0 = unlimited */
    uint64_t queue_timeout_us; /* longest wait between submit and start; 0 = none */
    uint32_t queue_limit;      /* QUEUED_FULL from this many waiting tasks on; 0 = never */
    uint32_t queue_max;        /* FULL (refused) from this many waiting tasks on; 0 = never */
    uint32_t key_queue_max;    /* KEY_FULL (refused) from this many waiting tasks of one key on; 0 = never */
    uint32_t group_queue_max;  /* GROUP_FULL (refused) from this many waiting tasks of one group on; 0 = never */
    uint32_t quantum;          /* consecutive tasks of one key while others wait; 0 = default */
    uint32_t high_burst;       /* grants in a row to high work while normal work waits; 0 = default */
} mg_sched_config_t;

#define MG_SCHED_DEFAULT_QUANTUM 10
#define MG_SCHED_DEFAULT_HIGH_BURST 8
#define MG_SCHED_MAX_QUANTUM 1000
#define MG_SCHED_MAX_HIGH_BURST 1000
#define MG_SCHED_MAX_KEY_LEN 1024
#define MG_SCHED_NO_DEADLINE UINT64_MAX

/* The executor: hands a task to its owner's thread. `post` is called from any thread, with
 * no scheduler lock held, once per task that becomes startable (or ends) outside its owner's
 * own mg_sched_submit; it must not fail and must, later and on the thread of task->owner,
 * call mg_sched_deliver(task) exactly once (never from inside post). It must not call into
 * the scheduler. Handing over must publish the task's memory to that thread (a queue with a
 * mutex, or release/acquire, does). */
typedef struct mg_sched_executor {
    void (*post)(void *ctx, mg_sched_task_t *task);
    void *ctx;
} mg_sched_executor_t;

/* Figures of one scheduler, for metrics. Taken under every lock, so the counts agree with each
 * other, except in_flight: the lock-free slot paths move it meanwhile, so it may be a moment
 * older or newer than the rest (e.g. briefly above max_in_flight after a reload lowered it). */
typedef struct mg_sched_stats {
    uint32_t in_flight;     /* running tasks that hold a slot (tasks started while the backend was unlimited hold none) */
    uint32_t waiting;       /* submitted, not started, not ended */
    uint32_t waiting_high;  /* of which high priority */
    uint32_t keys;          /* key states alive: keys with a running or waiting task */
    uint32_t groups;        /* group states alive: groups with a waiting task */
    uint32_t ready;         /* keys and unordered tasks waiting for a slot */
    uint64_t timeouts;      /* tasks ended with MG_SCHED_TIMEOUT */
    uint64_t cancelled;     /* tasks ended with MG_SCHED_CANCELLED or by mg_sched_cancel */
    uint64_t share_refused; /* submissions refused with MG_SCHED_KEY_FULL or MG_SCHED_GROUP_FULL */
} mg_sched_stats_t;

/* CLOCK_MONOTONIC in microseconds: a clock for `now_us` (any monotonic microsecond clock
 * will do, as long as one scheduler always gets the same one). */
uint64_t mg_sched_now_us(void);

/* 0 when `cfg` is valid; -1 with a static reason in *why otherwise (quantum and high_burst
 * 0 or 1..1000; queue_max, if set, at least queue_limit). */
int mg_sched_config_check(const mg_sched_config_t *cfg, const char **why);

/* A scheduler for one backend. The executor is copied. NULL when `cfg` is invalid or out
 * of memory. */
mg_sched_t *mg_sched_new(const mg_sched_config_t *cfg, const mg_sched_executor_t *executor);

/* Frees the scheduler. No task may be running, waiting or posted, and no other thread may use
 * it any more. */
void mg_sched_free(mg_sched_t *s);

/* Applies a new configuration (a reload) to a live scheduler: waiting tasks stay, in order.
 * More slots start waiting tasks at once (through the executor); fewer slots let the running
 * tasks finish, and nothing starts until fewer than the new limit run. A new queue_timeout
 * applies to the waiting tasks too (counted from their submission). Unordered tasks started
 * while the backend was unlimited stay uncounted. -1 when `cfg` is invalid (nothing changed). */
int mg_sched_configure(mg_sched_t *s, const mg_sched_config_t *cfg);

/* Prepares a task for mg_sched_submit (each time: a task can be submitted again once the
 * scheduler is done with it). */
void mg_sched_task_init(mg_sched_task_t *task, mg_sched_run_cb run, void *owner);

/* Submits a task: ordered under `key` (len bytes, 1..MG_SCHED_MAX_KEY_LEN, any bytes; the
 * scheduler copies them), or unordered when key is NULL or len is 0 (a longer key is
 * truncated). `now_us` is when it arrives (for queue_timeout). See mg_sched_result_t. */
mg_sched_result_t mg_sched_submit(mg_sched_t *s, mg_sched_task_t *task, const char *key, size_t len, mg_sched_priority_t priority,
                                  uint64_t now_us);

/* A task's names for mg_sched_submit_group: its ordering key, and the group it counts against
 * while it waits (any bytes, copied, truncated as keys are; none when NULL or len 0). Group
 * names are scoped to the scheduler and apart from key names. */
typedef struct mg_sched_names {
    const char *key;
    size_t key_len;
    const char *group;
    size_t group_len;
} mg_sched_names_t;

/* As mg_sched_submit, and while the task waits it counts against its group's share
 * (group_queue_max): a task that must wait while that many of its group wait is refused with
 * MG_SCHED_GROUP_FULL. The group's count goes down as the task stops waiting, whatever ends the
 * wait (a start, a timeout, mg_sched_cancel, a drain); a group with nothing waiting has no state. */
mg_sched_result_t mg_sched_submit_group(mg_sched_t *s, mg_sched_task_t *task, const mg_sched_names_t *names,
                                        mg_sched_priority_t priority, uint64_t now_us);

/* The task (STARTED, or delivered with MG_SCHED_RUN) is finished: its slot and its key's turn
 * go to the next task. Any thread, once per start, also from inside the run callback. -1 when
 * the task is not running (nothing changed). */
int mg_sched_complete(mg_sched_t *s, mg_sched_task_t *task);

/* Withdraws a waiting task (its client left): 1 when it was waiting and is now gone (no
 * callback will come); 0 when it is not waiting (running, or its callback is on its way: wait
 * for it). Call on the task's owner thread, so that the answer cannot cross a delivery. */
int mg_sched_cancel(mg_sched_t *s, mg_sched_task_t *task);

/* Drains a key: its waiting tasks run (MG_SCHED_DRAIN_RUN) or are cancelled, the running task
 * is never interrupted; from now on submissions to the key are refused (MG_SCHED_DRAINING)
 * until its state is freed, which happens once nothing of it runs or waits. Then, if `done`
 * is not NULL, `done` (a task used as a notice: its run and owner fields) is posted with
 * MG_SCHED_DRAINED. Returns 0 when the key has no state (nothing to drain; `done` is not
 * used), 1 when draining (done will come, if given), -1 when `done` is not NULL and an earlier
 * drain of the key already gave one (that one stays; the mode still applies: CANCEL cancels
 * what waits). */
int mg_sched_drain(mg_sched_t *s, const char *key, size_t len, mg_sched_drain_mode_t mode, mg_sched_task_t *done);

/* Ends with MG_SCHED_TIMEOUT every task that has waited queue_timeout or longer at `now_us`
 * (through the executor, whoever owns them). Returns the next deadline (the earliest time at
 * which a waiting task will have waited queue_timeout), or MG_SCHED_NO_DEADLINE. */
uint64_t mg_sched_expire(mg_sched_t *s, uint64_t now_us);

/* The next deadline, as mg_sched_expire returns it, without expiring anything. */
uint64_t mg_sched_next_deadline(mg_sched_t *s);

/* Runs on the owner's thread, called by the executor: calls task->run with the task's
 * status. The task may be reused or freed from inside the callback when the status is not
 * MG_SCHED_RUN, and after mg_sched_complete when it is. */
void mg_sched_deliver(mg_sched_task_t *task);

void mg_sched_stats(mg_sched_t *s, mg_sched_stats_t *st);

#endif
