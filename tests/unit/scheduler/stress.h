/* The scheduler's stress test, without a test framework: test_stress (Criterion) and
 * stress_scheduler (a plain program, for ThreadSanitizer builds) both run it. */
#ifndef MG_TEST_SCHEDULER_STRESS_H
#define MG_TEST_SCHEDULER_STRESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct stress_params {
    const char *name;
    uint32_t keys, tasks_per_key; /* keys x tasks_per_key tasks in all */
    uint32_t workers;             /* threads that submit, own and run tasks (keys span them) */
    uint32_t completers;          /* threads that complete tasks after a random delay */
    uint32_t max_in_flight;       /* 0: unlimited */
    uint32_t unordered_pct, high_pct;
    uint32_t max_delay_us;                   /* completion delay: 0..max, for the tasks handed to completers */
    uint64_t queue_timeout_us;               /* > 0: an expiry thread drives mg_sched_expire */
    uint32_t cancel_pct;                     /* owners withdraw this share of their queued tasks */
    int drains;                              /* a thread drains random keys (run or cancel) meanwhile */
    uint32_t window;                         /* a worker waits while this many of its tasks have not ended; 0 = never */
    uint32_t groups;                         /* tasks count against one of this many groups (at random); 0 = none */
    uint32_t key_queue_max, group_queue_max; /* the shares (mg_sched_config_t) */
    int checks;                              /* a thread checks the invariants (mg__sched_check, not quiet) meanwhile */
    uint32_t seconds;                        /* give up (a stall: lost wake-up) after this long */
    uint64_t seed;
} stress_params_t;

/* What one run saw. Every count but the outcome totals must be 0 for a pass. */
typedef struct stress_result {
    uint64_t tasks, started, timeouts, cancelled, withdrawn, refused, notices, checks;
    uint64_t out_of_order, overlaps, not_exactly_once, over_capacity, lost;
    uint32_t most_in_flight;
    double seconds;
    char failure[256]; /* empty on a pass */
} stress_result_t;

/* Runs one scenario; 0 on a pass, -1 with res->failure saying why. */
int stress_run(const stress_params_t *p, stress_result_t *res);

/* The scenarios, scaled by `scale` (1 = full size: 1,000 keys x 1,000 tasks for the first). */
size_t stress_scenarios(double scale, stress_params_t *out, size_t max);

#endif
