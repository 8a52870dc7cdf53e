/* stress_scheduler: the stress scenarios (stress.c) without Criterion, for sanitizer builds
 * (ThreadSanitizer: see docs/testing.md). Ends with "N passed, N failed"; exit status 1 on a
 * failure.
 *   stress_scheduler [scale]     scale 1 (default): 1,000 keys x 1,000 tasks for the first */
#include <stdio.h>
#include <stdlib.h>
#include "stress.h"

int main(int argc, char **argv)
{
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    stress_params_t p[8];
    size_t n = stress_scenarios(scale > 0 ? scale : 1.0, p, 8);
    int passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        stress_result_t r;
        int rc = stress_run(&p[i], &r);
        printf("%s %s: %llu tasks (%llu started, %llu timeouts, %llu cancelled, %llu withdrawn, %llu refused), %llu notices, "
               "at most %u in flight, %llu checks, %.2f s%s%s\n",
               rc ? "FAIL" : "ok", p[i].name, (unsigned long long)r.tasks, (unsigned long long)r.started,
               (unsigned long long)r.timeouts, (unsigned long long)r.cancelled, (unsigned long long)r.withdrawn,
               (unsigned long long)r.refused, (unsigned long long)r.notices, r.most_in_flight, (unsigned long long)r.checks,
               r.seconds, rc ? ": " : "", rc ? r.failure : "");
        rc ? failed++ : passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
