/* No lost wake-ups (sched.c, "No lost wake-ups"), driven deterministically with two threads.
 *
 * One slot, held by an unordered task. The releaser thread completes it, which gives the slot
 * back: under the backend lock when its first look at nready sees waiting entries, otherwise
 * by a decrement (D) and a second look (R) without the lock. The waiter (the test's thread)
 * submits a task that cannot take the slot while it is held. The test stops each thread at a
 * chosen hook in the code (MG__SCHED_HOOK): the releaser at 7 (before its first look) or 8
 * (after a first look that saw nothing, before D); then the waiter runs to its own stop (1:
 * registered, before its last look at the slots; 2: after that look, before entering its
 * ring; 5: in the middle of moving a key between rings) and the releaser goes on until it has
 * passed its last look. Whatever the stops, the waiting task must end up running (started by
 * its own submit, or handed the slot) and no slot may stay free while an entry waits.
 * Registering after the last look, letting nready dip in a ring move, or a granted key that
 * finds nothing to run keeping its slot, each fail a test here.
 *
 * Includes the scheduler's sources to place the hooks. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <semaphore.h>

static void hook(int point);
#define MG__SCHED_HOOK(point) hook(point)
#include "scheduler/sched.c"
#include "scheduler/submit.c"
#include "scheduler/control.c"
#include "scheduler/keytab.c"
#include "scheduler/check.c"

enum { WAITER = 1, RELEASER = 2 };

static struct {
    int waiter_stop, releaser_stop; /* hook points; 0: no stop */
    sem_t at_stop, go, past_r;      /* releaser stopped; it may go on; it has passed its last look */
    sem_t granted, resume;          /* releaser about to start a granted key; it may go on */
    int grant_stop;
    int go_posted, releaser_locks, completed;
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
    if (role == WAITER && point == W.waiter_stop) {
        W.go_posted = 1;
        sem_post(&W.go);
        sem_wait(&W.past_r);
    } else if (role == RELEASER && point == W.releaser_stop) {
        sem_post(&W.at_stop);
        sem_wait(&W.go);
    } else if (role == RELEASER && point == 4) {
        W.releaser_locks = 1;
        sem_post(&W.past_r); /* it now goes for the lock, which the waiter may hold */
    } else if (role == RELEASER && point == 6 && W.grant_stop) {
        sem_post(&W.granted);
        sem_wait(&W.resume);
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
    W.completed = mg_sched_complete(W.s, &W.holder); /* asserted on the main thread */
    if (!W.releaser_locks)
        sem_post(&W.past_r); /* no look saw an entry: the waiter must find the slot itself */
    return NULL;
}

/* A scheduler of one slot, held by an unordered task that the releaser will complete. */
static void setup(int waiter_stop, int releaser_stop)
{
    memset(&W, 0, sizeof(W));
    W.waiter_stop = waiter_stop;
    W.releaser_stop = releaser_stop;
    sem_t *sems[] = {&W.at_stop, &W.go, &W.past_r, &W.granted, &W.resume};
    for (size_t i = 0; i < sizeof(sems) / sizeof(sems[0]); i++)
        sem_init(sems[i], 0, 0);
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
    sem_t *sems[] = {&W.at_stop, &W.go, &W.past_r, &W.granted, &W.resume};
    for (size_t i = 0; i < sizeof(sems) / sizeof(sems[0]); i++)
        sem_destroy(sems[i]);
    pthread_mutex_destroy(&W.mu);
}

/* The waiter submits `key` (NULL: unordered) at `priority` while the releaser frees the only
 * slot. `prelude_key`: a task of that key is queued first (so that the waiter's high task moves
 * the key between rings). */
static void race(int waiter_stop, int releaser_stop, const char *key, mg_sched_priority_t priority, const char *prelude_key)
{
    setup(waiter_stop, releaser_stop);
    if (prelude_key)
        cr_assert_eq(mg_sched_submit(W.s, &W.prelude, prelude_key, strlen(prelude_key), MG_SCHED_NORMAL, 0), MG_SCHED_QUEUED);
    pthread_t th;
    pthread_create(&th, NULL, releaser, NULL);
    sem_wait(&W.at_stop);
    role = WAITER;
    mg_sched_result_t r = mg_sched_submit(W.s, &W.waiter, key, key ? strlen(key) : 0, priority, 0);
    role = 0;
    if (!W.go_posted) { /* the waiter did not stop: the releaser goes on after its submit */
        sem_post(&W.go);
        sem_wait(&W.past_r);
    }
    pthread_join(th, NULL);
    cr_assert_eq(W.completed, 0);

    char why[256];
    cr_assert_eq(mg__sched_check(W.s, 1, why, sizeof(why)), 0, "stops %d/%d: %s", waiter_stop, releaser_stop, why);
    int started = r == MG_SCHED_STARTED;
    for (int i = 0; i < W.ninbox; i++)
        mg_sched_deliver(W.inbox[i]);
    cr_assert_eq(started + W.waiter_ran, 1, "stops %d/%d: the waiting task %s", waiter_stop, releaser_stop,
                 started + W.waiter_ran ? "started twice" : "was never started: a lost wake-up");
    cr_assert_eq(atomic_load(&W.s->in_flight), 1);
    teardown();
}

Test(wakeup, the_release_sees_the_registration_and_hands_the_slot_over)
{
    race(1, 7, NULL, MG_SCHED_NORMAL, NULL); /* registered, not yet looked: the releaser locks */
    cr_assert(W.releaser_locks);
}

Test(wakeup, the_release_sees_the_registration_after_the_waiters_last_look)
{
    race(2, 7, NULL, MG_SCHED_NORMAL, NULL);
    cr_assert(W.releaser_locks);
}

Test(wakeup, the_decrement_lands_between_registration_and_last_look)
{
    race(1, 8, NULL, MG_SCHED_NORMAL, NULL); /* D before C: the waiter's look takes the slot */
}

Test(wakeup, the_decrement_lands_between_last_look_and_ring)
{
    race(2, 8, NULL, MG_SCHED_NORMAL, NULL); /* D after C: R sees the registration, the pump serves */
    cr_assert(W.releaser_locks, "R saw the registration");
}

Test(wakeup, a_new_key_waiter_in_each_interleaving)
{
    int stops[][2] = {{1, 7}, {2, 7}, {1, 8}, {2, 8}, {0, 7}, {0, 8}};
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++)
        race(stops[i][0], stops[i][1], "k", MG_SCHED_NORMAL, NULL);
}

Test(wakeup, release_while_a_waiting_key_moves_to_the_high_ring)
{
    /* key k waits in the normal ring; a high task of k moves it to the high ring while the
     * releaser takes its first look: nready must not dip to 0 in between */
    race(5, 7, "k", MG_SCHED_HIGH, "k");
    cr_assert(W.releaser_locks);
}

Test(wakeup, release_after_the_waiter_is_in_its_ring)
{
    race(0, 7, NULL, MG_SCHED_NORMAL, NULL);
    race(0, 8, NULL, MG_SCHED_NORMAL, NULL);
}

/* The backend grants key k a slot (the holder completed on the releaser thread), and before the
 * releaser starts k's task its owner withdraws it: the releaser finds nothing to run and must
 * give the slot back and release the key, or the backend loses a slot for good. */
Test(wakeup, a_granted_key_whose_task_went_away_gives_its_slot_back)
{
    setup(0, 0);
    W.grant_stop = 1;
    cr_assert_eq(mg_sched_submit(W.s, &W.waiter, "k", 1, MG_SCHED_NORMAL, 0), MG_SCHED_QUEUED);
    pthread_t th;
    pthread_create(&th, NULL, releaser, NULL); /* completes the holder; the backend grants k */
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
