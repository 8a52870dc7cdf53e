/* No lost wake-ups (sched.c, "No lost wake-ups"), driven deterministically with two threads.
 *
 * One slot, held by an unordered task. A waiter thread submits a task that cannot get the
 * slot; the releaser thread completes the holder, which frees the slot without the lock.
 * The test stops the waiter at a chosen point of its locked section (sched.c's
 * MG__SCHED_HOOK), lets the releaser run its decrement (D) and its look at nready (R), then
 * lets the waiter go on. Whatever the point, the waiting task must end up running (started
 * by its own submit or delivered by the releaser's pump) and no slot may stay free while an
 * entry waits. Breaking the protocol (registering after the last look at the slots, or a ring
 * move that lets nready dip to 0) makes these tests fail.
 *
 * Includes the scheduler's sources to place the hooks. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <semaphore.h>

static void hook(int point);
#define MG__SCHED_HOOK(point) hook(point)
#include "scheduler/sched.c"
#include "scheduler/control.c"
#include "scheduler/keytab.c"
#include "scheduler/check.c"

enum { WAITER = 1, RELEASER = 2 };

static struct {
    int stop_at;           /* the waiter's hook point where the releaser runs */
    sem_t go, past_r;      /* releaser may run; releaser has passed R */
    sem_t granted, resume; /* the releaser stopped before starting a granted key; it may go on */
    int releaser_locks;    /* R saw an entry: the releaser went for the lock */
    int go_posted;
    int completed;      /* what the releaser's mg_sched_complete returned */
    pthread_mutex_t mu; /* the executor's inbox */
    mg_sched_task_t *inbox[8];
    int ninbox;
    mg_sched_t *s;
    mg_sched_task_t holder, waiter, prelude;
    int waiter_ran;
} W;

static _Thread_local int role;

static void hook(int point)
{
    if (role == WAITER && point == W.stop_at) {
        W.go_posted = 1;
        sem_post(&W.go);
        sem_wait(&W.past_r);
    } else if (role == RELEASER && point == 6 && W.stop_at == 6) {
        sem_post(&W.granted); /* the key is GRANTED: let the owner withdraw its task now */
        sem_wait(&W.resume);  /* ... and go on once it has */
    } else if (role == RELEASER && point == 4) {
        W.releaser_locks = 1;
        sem_post(&W.past_r); /* it now blocks on the lock the waiter holds, if it does */
    }
}

static void post(void *ctx, mg_sched_task_t *t)
{
    pthread_mutex_lock(&W.mu);
    W.inbox[W.ninbox++] = t;
    pthread_mutex_unlock(&W.mu);
}

static void on_run(mg_sched_task_t *t, mg_sched_status_t status)
{
    cr_assert_eq(status, MG_SCHED_RUN);
    W.waiter_ran++;
}

static void *releaser(void *arg)
{
    role = RELEASER;
    sem_wait(&W.go);
    W.completed = mg_sched_complete(W.s, &W.holder); /* asserted on the main thread */
    if (!W.releaser_locks)
        sem_post(&W.past_r); /* R saw nothing: the waiter must then find the slot itself */
    return NULL;
}

/* The waiter submits `key` (NULL: unordered) at `priority` while the releaser frees the only
 * slot at the waiter's hook `stop_at`. `prelude_key`: a task of that key is queued first (to
 * make the waiter's submit move a READY key between rings). */
/* A scheduler of one slot, held by an unordered task that the releaser will complete. */
static void setup(int stop_at)
{
    memset(&W, 0, sizeof(W));
    W.stop_at = stop_at;
    sem_init(&W.go, 0, 0);
    sem_init(&W.past_r, 0, 0);
    sem_init(&W.granted, 0, 0);
    sem_init(&W.resume, 0, 0);
    pthread_mutex_init(&W.mu, NULL);
    mg_sched_config_t cfg = {.max_in_flight = 1};
    mg_sched_executor_t ex = {post, NULL};
    W.s = mg_sched_new(&cfg, &ex);
    mg_sched_task_init(&W.holder, on_run, NULL);
    mg_sched_task_init(&W.waiter, on_run, NULL);
    mg_sched_task_init(&W.prelude, on_run, NULL);
    cr_assert_eq(mg_sched_submit(W.s, &W.holder, NULL, 0, MG_SCHED_NORMAL, 0), MG_SCHED_STARTED);
}

static void teardown(void)
{
    mg_sched_free(W.s); /* tasks may be left running: the scheduler frees key states regardless */
    sem_destroy(&W.go);
    sem_destroy(&W.past_r);
    sem_destroy(&W.granted);
    sem_destroy(&W.resume);
    pthread_mutex_destroy(&W.mu);
}

static void race(int stop_at, const char *key, mg_sched_priority_t priority, const char *prelude_key)
{
    setup(stop_at);
    if (prelude_key)
        cr_assert_eq(mg_sched_submit(W.s, &W.prelude, prelude_key, strlen(prelude_key), MG_SCHED_NORMAL, 0), MG_SCHED_QUEUED);

    pthread_t th;
    pthread_create(&th, NULL, releaser, NULL);
    role = WAITER;
    mg_sched_result_t r = mg_sched_submit(W.s, &W.waiter, key, key ? strlen(key) : 0, priority, 0);
    role = 0;
    if (!W.go_posted) { /* no stop: the releaser runs after the submit */
        sem_post(&W.go);
        sem_wait(&W.past_r);
    }
    pthread_join(th, NULL);
    cr_assert_eq(W.completed, 0);

    char why[256];
    cr_assert_eq(mg__sched_check(W.s, 1, why, sizeof(why)), 0, "stop at %d: %s", stop_at, why);
    int started = r == MG_SCHED_STARTED;
    for (int i = 0; i < W.ninbox; i++)
        mg_sched_deliver(W.inbox[i]);
    cr_assert_eq(started + W.waiter_ran, 1, "stop at %d: the waiting task %s", stop_at,
                 started + W.waiter_ran ? "started twice" : "was never started: a lost wake-up");
    cr_assert_eq(atomic_load(&W.s->in_flight), 1);
    teardown();
}

Test(wakeup, unordered_waiter_release_before_its_last_look)
{
    race(1, NULL, MG_SCHED_NORMAL, NULL); /* D lands between W and C: C takes the freed slot */
    cr_assert(W.releaser_locks, "R saw the registration");
}

Test(wakeup, unordered_waiter_release_after_its_last_look)
{
    race(2, NULL, MG_SCHED_NORMAL, NULL); /* D lands between C and E: the releaser's pump serves it */
    cr_assert(W.releaser_locks);
}

Test(wakeup, new_key_waiter_release_before_its_last_look)
{
    race(1, "k", MG_SCHED_NORMAL, NULL);
}

Test(wakeup, new_key_waiter_release_after_its_last_look)
{
    race(2, "k", MG_SCHED_NORMAL, NULL);
}

Test(wakeup, release_while_a_ready_key_moves_to_the_high_ring)
{
    /* key k waits in the normal ring; a high task of k moves it to the high ring while the
     * slot is freed: nready must not dip to 0 in between */
    race(5, "k", MG_SCHED_HIGH, "k");
    cr_assert(W.releaser_locks);
}

Test(wakeup, release_with_nothing_waiting_takes_no_lock)
{
    race(0, NULL, MG_SCHED_NORMAL, NULL); /* releaser runs after the waiter got in line */
}

/* The backend grants key k a slot (the holder completed on the releaser thread), and before the
 * releaser starts k's task its owner withdraws it: the releaser finds nothing to run and must
 * give the slot back and release the key, or the backend loses a slot for good. */
Test(wakeup, a_granted_key_whose_task_went_away_gives_its_slot_back)
{
    setup(6);
    cr_assert_eq(mg_sched_submit(W.s, &W.waiter, "k", 1, MG_SCHED_NORMAL, 0), MG_SCHED_QUEUED);
    pthread_t th;
    pthread_create(&th, NULL, releaser, NULL);
    sem_post(&W.go); /* the releaser completes the holder; the pump grants k; it stops at 6 */
    sem_wait(&W.granted);
    cr_assert_eq(mg_sched_cancel(W.s, &W.waiter), 1, "still waiting: the grant has not started it");
    sem_post(&W.resume);
    pthread_join(th, NULL);
    cr_assert_eq(W.completed, 0);
    char why[256];
    cr_assert_eq(mg__sched_check(W.s, 1, why, sizeof(why)), 0, "%s", why);
    mg_sched_stats_t st;
    mg_sched_stats(W.s, &st);
    cr_assert_eq(st.keys, 0, "the key is released");
    cr_assert_eq(st.in_flight, 0, "the slot came back");
    cr_assert_eq(W.ninbox, 0, "nothing was started");
    cr_assert_eq(mg_sched_submit(W.s, &W.prelude, NULL, 0, MG_SCHED_NORMAL, 0), MG_SCHED_STARTED);
    teardown();
}
