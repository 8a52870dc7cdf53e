/*
 * Deadline timers on top of h2o 2.2.5's timeouts, which are lists of one fixed length each:
 * a timer sits in the largest bucket that does not overshoot its deadline and moves on to
 * a smaller one when that bucket fires early, so any delay costs a handful of list moves.
 */
#include "gateway/internal.h"

static const uint64_t bucket_ms[MG_TIMER_BUCKETS] = {0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};

static void link_for(mg_timer_t *timer, uint64_t remaining)
{
    size_t i = MG_TIMER_BUCKETS - 1;
    while (i > 0 && bucket_ms[i] > remaining)
        i--;
    h2o_timeout_link(timer->timers->loop, &timer->timers->buckets[i], &timer->entry);
}

static void on_bucket(h2o_timeout_entry_t *entry)
{
    mg_timer_t *timer = H2O_STRUCT_FROM_MEMBER(mg_timer_t, entry, entry);
    uint64_t now = h2o_now(timer->timers->loop);
    if (now < timer->deadline) {
        link_for(timer, timer->deadline - now);
        return;
    }
    timer->cb(timer);
}

void mg_timers_init(mg_timers_t *timers, h2o_loop_t *loop)
{
    timers->loop = loop;
    for (size_t i = 0; i < MG_TIMER_BUCKETS; i++)
        h2o_timeout_init(loop, &timers->buckets[i], bucket_ms[i]);
}

void mg_timers_dispose(mg_timers_t *timers)
{
    for (size_t i = 0; i < MG_TIMER_BUCKETS; i++)
        h2o_timeout_dispose(timers->loop, &timers->buckets[i]);
}

void mg_timer_init(mg_timer_t *timer, mg_timers_t *timers, void (*cb)(mg_timer_t *))
{
    *timer = (mg_timer_t){.timers = timers, .cb = cb};
    timer->entry.cb = on_bucket;
}

void mg_timer_set(mg_timer_t *timer, uint64_t delay_ms)
{
    mg_timer_cancel(timer);
    timer->deadline = h2o_now(timer->timers->loop) + delay_ms;
    link_for(timer, delay_ms);
}

void mg_timer_cancel(mg_timer_t *timer)
{
    if (h2o_timeout_is_linked(&timer->entry))
        h2o_timeout_unlink(&timer->entry);
}

int mg_timer_is_set(const mg_timer_t *timer)
{
    return h2o_timeout_is_linked((h2o_timeout_entry_t *)&timer->entry);
}
