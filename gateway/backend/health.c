/*
 * Server health, shared by every worker: one atomic word per server says whether it may get new
 * requests (ejected until when, unhealthy for the active checks, draining, disabled), so that a
 * worker stops sending to a server as soon as any worker finds it dead.
 *
 * The words live in a table of the process keyed by backend name and server url, not in the
 * configuration: a reload that keeps a server keeps its state (an ejection running, a drain, a
 * disable). A server a reload drops is unbound; if a later reload brings it back, it starts
 * afresh. Entries are never freed (a handful of bytes per server ever configured): a request of
 * an old configuration may still report on its server after the reload.
 *
 * Passive checks (outlier ejection, Envoy's): attempts report their outcome; `consecutive_failures`
 * connect failures, resets or timeouts in a row (or `consecutive_5xx` 5xx responses) eject the
 * server for eject_for x 2^(ejections in a row), at most max_eject_for. When that time is over
 * the server is half-open: its next failure ejects it again at once (for twice as long), its
 * next success closes the streak. Ejections are decided under one lock (they are rare) so that
 * max_ejected holds across workers. A successful active check does not end an ejection (see
 * docs/configuration.md, "Server health"): the ejection runs its time, then the half-open request,
 * or the active checks' verdict if they found the server unhealthy meanwhile, decides.
 *
 * Slow start: the moment a server comes back into service (its ejection ends, the active checks
 * find it healthy again, an operator enables it, a reload adds it) is part of its shared state, so
 * that every worker ramps it up alike; the balances that weigh servers read its weight factor.
 *
 * Response times: a histogram per server of plain atomic counters (no lock on the request path).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gateway/backend/internal.h"

#define ADMIN_MASK 3ull
#define UNHEALTHY_BIT 4ull
#define UNTIL_SHIFT 8
#define MAX_STREAK 20

struct mg_server_health {
    char *backend, *url;
    uint64_t bound_gen;      /* the bind that last found the server in the configuration */
    _Atomic uint64_t word;   /* admin state | unhealthy bit | ejected-until (ms) << UNTIL_SHIFT */
    atomic_uint failures;    /* connect failures, resets, timeouts in a row */
    atomic_uint fives;       /* 5xx responses in a row */
    atomic_uint streak;      /* ejections in a row (each one doubles the next) */
    atomic_ullong ejections; /* ever */
    /* the active checks: written by the prober thread only */
    uint64_t next_check_ms;
    unsigned ok_run, fail_run; /* checks in a row */
    int probing;
    atomic_ullong last_check_ms; /* 0: never */
    atomic_int last_status;      /* of the last check; 0: no response */
    atomic_ullong transitions;   /* changes of the active verdict */
    /* traffic, for GET /backends and /metrics */
    atomic_llong in_flight;
    atomic_ullong attempts, responses[5], connect_failures, other_failures;
    /* when the server last came back: enabled, found healthy, added by a reload (mg_health_clock's;
     * 0: never). The end of an ejection is the word's. */
    atomic_ullong back_ms;
    atomic_ullong head_buckets[MG_SERVER_HEAD_BUCKETS], head_sum_us, head_count;
    struct mg_server_health *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the table, the binds and the ejections */
static mg_server_health_t *table;
static uint64_t bind_gen;

static uint64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    /* +1: 0 means "not ejected" in the word */
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + 1;
}

uint64_t (*mg_health_clock)(void) = monotonic_ms;

/* ---------------------------------------------------------------------------------------
 * The word
 */

static uint64_t word_of(const mg_server_conf_t *s)
{
    return s->health != NULL ? atomic_load_explicit(&s->health->word, memory_order_acquire) : 0;
}

static uint64_t until_of(uint64_t word)
{
    return word >> UNTIL_SHIFT;
}

mg_server_state_t mg_server_state(const mg_server_conf_t *s, uint64_t now_ms, uint64_t *until_ms)
{
    uint64_t word = word_of(s);
    if (until_ms != NULL)
        *until_ms = until_of(word);
    switch ((mg_server_admin_t)(word & ADMIN_MASK)) {
    case MG_SERVER_ADMIN_DISABLED:
        return MG_SERVER_DISABLED;
    case MG_SERVER_ADMIN_DRAINING:
        return MG_SERVER_DRAINING;
    default:
        break;
    }
    if (until_of(word) > now_ms)
        return MG_SERVER_EJECTED;
    if (word & UNHEALTHY_BIT)
        return MG_SERVER_UNHEALTHY;
    return MG_SERVER_HEALTHY;
}

int mg_server_usable(const mg_server_conf_t *s, uint64_t now_ms, int panic)
{
    mg_server_state_t state = mg_server_state(s, now_ms, NULL);
    if (state == MG_SERVER_HEALTHY)
        return 1;
    return panic && (state == MG_SERVER_EJECTED || state == MG_SERVER_UNHEALTHY);
}

/* Sets the bits of `mask` to `bits` in the word, whatever else changes meanwhile. */
static uint64_t word_set(mg_server_health_t *h, uint64_t mask, uint64_t bits)
{
    uint64_t old = atomic_load_explicit(&h->word, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&h->word, &old, (old & ~mask) | bits, memory_order_acq_rel, memory_order_relaxed))
        ;
    return old;
}

void mg_server_set_admin(const mg_server_conf_t *s, mg_server_admin_t admin)
{
    if (s->health == NULL)
        return;
    uint64_t old = word_set(s->health, ADMIN_MASK, (uint64_t)admin);
    if (admin == MG_SERVER_ADMIN_ENABLED && (old & ADMIN_MASK) != MG_SERVER_ADMIN_ENABLED)
        atomic_store_explicit(&s->health->back_ms, mg_health_clock(), memory_order_relaxed);
}

void mg_server_set_unhealthy(const mg_server_conf_t *s, int unhealthy)
{
    if (s->health != NULL)
        word_set(s->health, UNHEALTHY_BIT, unhealthy ? UNHEALTHY_BIT : 0);
}

uint64_t mg_server_ejections(const mg_server_conf_t *s)
{
    return s->health != NULL ? atomic_load_explicit(&s->health->ejections, memory_order_relaxed) : 0;
}

/* ---------------------------------------------------------------------------------------
 * Slow start
 */

unsigned mg_server_weight_permille(const mg_server_conf_t *s, uint64_t now_ms, uint64_t *left_ms)
{
    const mg_backend_conf_t *b = s->backend;
    if (left_ms != NULL)
        *left_ms = 0;
    if (s->health == NULL || b == NULL || b->slow_start_ms == 0)
        return 1000;
    uint64_t back = atomic_load_explicit(&s->health->back_ms, memory_order_relaxed), until = until_of(word_of(s));
    if (until > back)
        back = until; /* the ejection ended then (or ends then: no weight matters meanwhile) */
    if (back == 0 || back > now_ms || now_ms - back >= b->slow_start_ms)
        return 1000;
    if (left_ms != NULL)
        *left_ms = b->slow_start_ms - (now_ms - back);
    return (unsigned)(100 + 900 * (now_ms - back) / b->slow_start_ms);
}

/* ---------------------------------------------------------------------------------------
 * Response times
 */

uint64_t mg_server_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void mg_server_observe_head(const mg_server_conf_t *s, uint64_t elapsed_us)
{
    static const uint64_t bounds[MG_SERVER_HEAD_BUCKETS] = MG_SERVER_HEAD_BOUNDS_US;
    mg_server_health_t *h = s != NULL ? s->health : NULL;
    if (h == NULL)
        return;
    size_t i = 0;
    while (i < MG_SERVER_HEAD_BUCKETS && elapsed_us > bounds[i])
        i++;
    if (i < MG_SERVER_HEAD_BUCKETS) /* above the last bound: only in the count (+Inf) */
        atomic_fetch_add_explicit(&h->head_buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->head_sum_us, elapsed_us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->head_count, 1, memory_order_relaxed);
}

/* ---------------------------------------------------------------------------------------
 * Outlier ejection
 */

/* How many servers of `b` may be ejected at once: max_ejected of them, rounded down, at least one
 * (a backend whose only server is dead answers 503 at once rather than after a connect timeout
 * per request); none when max_ejected is 0%. */
static size_t max_ejected(const mg_backend_conf_t *b)
{
    size_t n = b->num_servers * b->outlier.max_ejected_percent / 100;
    return n == 0 && b->outlier.max_ejected_percent != 0 ? 1 : n;
}

static size_t count_ejected(const mg_backend_conf_t *b, uint64_t now_ms)
{
    size_t n = 0;
    for (size_t i = 0; i < b->num_servers; i++)
        if (until_of(word_of(&b->servers[i])) > now_ms)
            n++;
    return n;
}

/* Ejects `s` unless it is ejected already or max_ejected forbids it. 1 when it did. */
static int eject(const mg_server_conf_t *s, uint64_t now_ms)
{
    const mg_backend_conf_t *b = s->backend;
    mg_server_health_t *h = s->health;
    int done = 0;
    pthread_mutex_lock(&lock);
    if (until_of(word_of(s)) <= now_ms && count_ejected(b, now_ms) < max_ejected(b)) {
        unsigned streak = atomic_load_explicit(&h->streak, memory_order_relaxed);
        uint64_t ms = b->outlier.eject_for_ms << (streak < MAX_STREAK ? streak : MAX_STREAK);
        if (ms > b->outlier.max_eject_for_ms)
            ms = b->outlier.max_eject_for_ms;
        word_set(h, ~(ADMIN_MASK | UNHEALTHY_BIT), (now_ms + ms) << UNTIL_SHIFT);
        atomic_store_explicit(&h->streak, streak + 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&h->ejections, 1, memory_order_relaxed);
        /* half-open on return: one more failure of either kind ejects again */
        if (b->outlier.consecutive_failures != 0)
            atomic_store_explicit(&h->failures, b->outlier.consecutive_failures - 1, memory_order_relaxed);
        if (b->outlier.consecutive_5xx != 0)
            atomic_store_explicit(&h->fives, b->outlier.consecutive_5xx - 1, memory_order_relaxed);
        done = 1;
    }
    pthread_mutex_unlock(&lock);
    return done;
}

/* Counts one more in a row on `counter`; 1 when that reaches `threshold` (0: off). */
static int count_in_a_row(atomic_uint *counter, unsigned threshold)
{
    unsigned n = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed) + 1;
    return threshold != 0 && n >= threshold;
}

static void count_outcome(mg_server_health_t *h, mg_attempt_result_t result, int status)
{
    if (result == MG_ATTEMPT_OK && status >= 100 && status <= 599)
        atomic_fetch_add_explicit(&h->responses[status / 100 - 1], 1, memory_order_relaxed);
    else if (mg_attempt_never_connected(result))
        atomic_fetch_add_explicit(&h->connect_failures, 1, memory_order_relaxed);
    else if (result != MG_ATTEMPT_OK)
        atomic_fetch_add_explicit(&h->other_failures, 1, memory_order_relaxed);
}

void mg_server_attempt_started(const mg_server_conf_t *s)
{
    if (s != NULL && s->health != NULL) {
        atomic_fetch_add_explicit(&s->health->in_flight, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->health->attempts, 1, memory_order_relaxed);
    }
}

uint64_t mg_server_in_flight(const mg_server_conf_t *s)
{
    long long n = s->health != NULL ? atomic_load_explicit(&s->health->in_flight, memory_order_relaxed) : 0;
    return n > 0 ? (uint64_t)n : 0;
}

void mg_server_attempt_ended(const mg_server_conf_t *s)
{
    if (s != NULL && s->health != NULL)
        atomic_fetch_sub_explicit(&s->health->in_flight, 1, memory_order_relaxed);
}

void mg_server_stats(const mg_server_conf_t *s, mg_server_stats_t *out)
{
    mg_server_health_t *h = s->health;
    memset(out, 0, sizeof(*out));
    if (h == NULL)
        return;
    long long in_flight = atomic_load_explicit(&h->in_flight, memory_order_relaxed);
    out->in_flight = in_flight > 0 ? (uint64_t)in_flight : 0;
    out->attempts = atomic_load_explicit(&h->attempts, memory_order_relaxed);
    for (size_t i = 0; i < 5; i++)
        out->responses[i] = atomic_load_explicit(&h->responses[i], memory_order_relaxed);
    out->connect_failures = atomic_load_explicit(&h->connect_failures, memory_order_relaxed);
    out->failures = atomic_load_explicit(&h->other_failures, memory_order_relaxed);
    out->ejections = atomic_load_explicit(&h->ejections, memory_order_relaxed);
    out->check_transitions = atomic_load_explicit(&h->transitions, memory_order_relaxed);
    out->last_check_ms = atomic_load_explicit(&h->last_check_ms, memory_order_relaxed);
    out->last_check_status = atomic_load_explicit(&h->last_status, memory_order_relaxed);
    for (size_t i = 0; i < MG_SERVER_HEAD_BUCKETS; i++)
        out->head_buckets[i] = atomic_load_explicit(&h->head_buckets[i], memory_order_relaxed);
    out->head_sum_us = atomic_load_explicit(&h->head_sum_us, memory_order_relaxed);
    out->head_count = atomic_load_explicit(&h->head_count, memory_order_relaxed);
}

int mg_server_report(const mg_server_conf_t *s, mg_attempt_result_t result, int status)
{
    mg_server_health_t *h = s->health;
    const mg_backend_conf_t *b = s->backend;
    int trip = 0;
    if (h == NULL || b == NULL || result == MG_ATTEMPT_ABORTED)
        return 0;
    count_outcome(h, result, status);
    uint64_t now = mg_health_clock();
    if (until_of(word_of(s)) > now)
        return 0; /* attempts started before the ejection: it is decided already */
    switch (result) {
    case MG_ATTEMPT_NOT_CONNECTED:
    case MG_ATTEMPT_CONNECT_TIMEOUT:
    case MG_ATTEMPT_TIMED_OUT:
    case MG_ATTEMPT_FAILED:
        trip = count_in_a_row(&h->failures, b->outlier.consecutive_failures);
        break;
    case MG_ATTEMPT_OK:
        atomic_store_explicit(&h->failures, 0, memory_order_relaxed);
        if (status >= 500 && status <= 599) {
            trip = count_in_a_row(&h->fives, b->outlier.consecutive_5xx);
        } else {
            atomic_store_explicit(&h->fives, 0, memory_order_relaxed);
            atomic_store_explicit(&h->streak, 0, memory_order_relaxed);
        }
        break;
    default: /* a malformed response: the server answers, it is not an outage */
        atomic_store_explicit(&h->failures, 0, memory_order_relaxed);
        break;
    }
    return trip && eject(s, now);
}

uint64_t mg_backend_retry_after_ms(const mg_backend_conf_t *b, uint64_t now_ms)
{
    uint64_t soonest = UINT64_MAX;
    for (size_t i = 0; i < b->num_servers; i++) {
        uint64_t until = 0;
        if (mg_server_state(&b->servers[i], now_ms, &until) == MG_SERVER_EJECTED && until - now_ms < soonest)
            soonest = until - now_ms;
    }
    return soonest != UINT64_MAX ? soonest : 1000; /* unhealthy, draining or disabled: ask again soon */
}

/* ---------------------------------------------------------------------------------------
 * The table
 */

static mg_server_health_t *find(const char *backend, const char *url)
{
    for (mg_server_health_t *h = table; h != NULL; h = h->next)
        if (strcmp(h->backend, backend) == 0 && strcmp(h->url, url) == 0)
            return h;
    return NULL;
}

static mg_server_health_t *entry_new(const char *backend, const char *url)
{
    mg_server_health_t *h = calloc(1, sizeof(*h));
    if (h == NULL || (h->backend = strdup(backend)) == NULL || (h->url = strdup(url)) == NULL) {
        if (h != NULL)
            free(h->backend);
        free(h);
        return NULL;
    }
    h->next = table;
    table = h;
    return h;
}

/* A server that was not in the last bound configuration starts afresh; added to a running gateway
 * (not at its start), it comes into service now, for slow start. */
static void entry_reset(mg_server_health_t *h, int running)
{
    atomic_store(&h->word, 0);
    atomic_store(&h->failures, 0);
    atomic_store(&h->fives, 0);
    atomic_store(&h->streak, 0);
    atomic_store(&h->back_ms, running ? mg_health_clock() : 0);
}

int mg_backend_bind_health(mg_config_t *conf)
{
    int rc = 0;
    pthread_mutex_lock(&lock);
    /* every missing entry first: a failure leaves the bound configuration as it was */
    for (size_t i = 0; i < conf->num_backends && rc == 0; i++)
        for (size_t j = 0; j < conf->backends[i].num_servers && rc == 0; j++)
            if (find(conf->backends[i].name, conf->backends[i].servers[j].url) == NULL &&
                entry_new(conf->backends[i].name, conf->backends[i].servers[j].url) == NULL)
                rc = -1;
    if (rc == 0) {
        bind_gen++;
        for (size_t i = 0; i < conf->num_backends; i++) {
            mg_backend_conf_t *b = &conf->backends[i];
            for (size_t j = 0; j < b->num_servers; j++) {
                mg_server_health_t *h = find(b->name, b->servers[j].url);
                if (h->bound_gen != bind_gen - 1)
                    entry_reset(h, bind_gen > 1);
                if (b->health.path == NULL) /* no active checks (any more): their verdict goes */
                    word_set(h, UNHEALTHY_BIT, 0);
                h->bound_gen = bind_gen;
                b->servers[j].health = h;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * The active checks' side (prober.c, its own thread)
 */

int mg__health_check_due(mg_server_health_t *h, uint64_t now_ms, uint64_t interval_ms)
{
    if (h->probing || h->next_check_ms > now_ms)
        return 0;
    h->probing = 1;
    h->next_check_ms = now_ms + interval_ms;
    return 1;
}

int mg__health_check_done(mg_server_health_t *h, int ok, int status, unsigned healthy, unsigned unhealthy, uint64_t now_ms)
{
    h->probing = 0;
    atomic_store_explicit(&h->last_check_ms, now_ms, memory_order_relaxed);
    atomic_store_explicit(&h->last_status, status, memory_order_relaxed);
    h->ok_run = ok ? h->ok_run + 1 : 0;
    h->fail_run = ok ? 0 : h->fail_run + 1;
    int down = (atomic_load_explicit(&h->word, memory_order_relaxed) & UNHEALTHY_BIT) != 0;
    if (down && h->ok_run >= healthy) {
        atomic_store_explicit(&h->back_ms, now_ms, memory_order_relaxed);
        word_set(h, UNHEALTHY_BIT, 0);
        atomic_fetch_add_explicit(&h->transitions, 1, memory_order_relaxed);
        return 1;
    }
    if (!down && h->fail_run >= unhealthy) {
        word_set(h, UNHEALTHY_BIT, UNHEALTHY_BIT);
        atomic_fetch_add_explicit(&h->transitions, 1, memory_order_relaxed);
        return -1;
    }
    return 0;
}

void mg__health_names(const mg_server_health_t *h, const char **backend, const char **url)
{
    *backend = h->backend;
    *url = h->url;
}
