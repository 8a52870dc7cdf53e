/*
 * Which server of a backend an attempt goes to, and whether a failed attempt may go on to the
 * next: the balance (round robin with weights, primary_for_writes, first_available, least_request,
 * hash; those that weigh servers with slow start) chooses the first server; connect failures walk
 * on from it round the list, for the requests a second server may see (idempotent ones, never a
 * write pinned to the primary), at most `retries` times.
 * The same rules for a forward, a bridge's call and a tunnel's upgrade.
 */
#include <stdint.h>
#include <string.h>
#include "gateway/backend/internal.h"

static int method_in(mg_str_t method, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strlen(*list) == method.len && memcmp(*list, method.base, method.len) == 0)
            return 1;
    return 0;
}

int mg_method_is_idempotent(mg_str_t method)
{
    static const char *const idempotent[] = {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE", NULL};
    return method_in(method, idempotent);
}

int mg_method_is_write(mg_str_t method)
{
    static const char *const writes[] = {"POST", "PUT", "PATCH", "DELETE", NULL};
    return method_in(method, writes);
}

/* primary_for_writes: POST/PUT/PATCH/DELETE go to the primary and nowhere else. */
static int pinned_to_primary(const mg_backend_conf_t *b, mg_str_t method)
{
    return b->balance == MG_BALANCE_PRIMARY_FOR_WRITES && mg_method_is_write(method);
}

/* A per-thread xorshift64*: the two choices need no shared state and no lock. */
static uint64_t next_random(void)
{
    static _Thread_local uint64_t state;
    if (state == 0)
        state = (uint64_t)(uintptr_t)&state ^ mg_health_clock() * 0x9e3779b97f4a7c15ull ^ 1;
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545f4914f6cdd1dull;
}

/* Slow start: a server ramping up takes a turn it drew with the chance of its weight factor (it
 * draws by its full weight), so its share follows weight x factor; turns it lets go fall to the
 * next draws, spread over the others by their weights. */
static int takes_turn(const mg_server_conf_t *s, uint64_t now)
{
    unsigned permille = mg_server_weight_permille(s, now, NULL);
    return permille >= 1000 || next_random() % 1000 < permille;
}

/* The next usable server on the round-robin schedule. A server out draws the next turn, so that
 * its share spreads over the others by their weights rather than falling on its successor. When
 * only ramping servers are left and each lets its turn go, the first of them still gets it. */
static size_t next_on_schedule(mg_backend_conf_t *b, uint64_t now, int panic)
{
    size_t fallback = MG_NO_SERVER;
    for (size_t k = 0; k < b->schedule_len; k++) {
        size_t i = b->schedule[atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed) % b->schedule_len];
        if (!mg_server_usable(&b->servers[i], now, panic))
            continue;
        if (takes_turn(&b->servers[i], now))
            return i;
        if (fallback == MG_NO_SERVER)
            fallback = i;
    }
    return fallback;
}

/* Power of two choices (least_request): two different servers drawn by weight (draws on the
 * weighted schedule), the one with fewer attempts in flight per unit of weight wins (a tie: the
 * first drawn). A server out is drawn again, a bounded number of times, then the schedule is
 * walked. Under slow start the weight is the effective one, in both the draw and the comparison. */
static size_t least_request(mg_backend_conf_t *b, uint64_t now, int panic)
{
    size_t pick[2], got = 0;
    for (size_t tries = 0; got < 2 && tries < 2 * b->schedule_len + 4; tries++) {
        size_t i = b->schedule[next_random() % b->schedule_len];
        /* two different servers: with two, drawing one twice would leave half the choices to chance */
        if ((got == 0 || i != pick[0]) && mg_server_usable(&b->servers[i], now, panic) && takes_turn(&b->servers[i], now))
            pick[got++] = i;
    }
    if (got == 0)
        return next_on_schedule(b, now, panic);
    if (got == 1)
        return pick[0];
    /* compare in_flight / weight without dividing */
    const mg_server_conf_t *s0 = &b->servers[pick[0]], *s1 = &b->servers[pick[1]];
    uint64_t a = mg_server_in_flight(s0) * s1->weight * mg_server_weight_permille(s1, now, NULL);
    uint64_t c = mg_server_in_flight(s1) * s0->weight * mg_server_weight_permille(s0, now, NULL);
    return c < a ? pick[1] : pick[0];
}

/* balance: hash: the server of the first point at or after the key's hash on the ring, round the
 * ring; a server out passes its keys on to the next server on the ring (and gets them back when
 * it returns, as the ring does not change). */
static size_t on_ring(const mg_backend_conf_t *b, uint64_t key, uint64_t now, int panic)
{
    size_t lo = 0, hi = b->ring_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->ring[mid].point < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = 0; k < b->ring_len; k++) {
        size_t i = b->ring[(lo + k) % b->ring_len].server;
        if (mg_server_usable(&b->servers[i], now, panic))
            return i;
    }
    return MG_NO_SERVER;
}

static size_t first_usable(mg_backend_conf_t *b, mg_str_t method, const uint64_t *key, uint64_t now, int panic)
{
    if (pinned_to_primary(b, method))
        return mg_server_usable(&b->servers[b->primary_index], now, panic) ? b->primary_index : MG_NO_SERVER;
    switch (b->balance) {
    case MG_BALANCE_FIRST_AVAILABLE:
        for (size_t i = 0; i < b->num_servers; i++)
            if (mg_server_usable(&b->servers[i], now, panic))
                return i;
        return MG_NO_SERVER;
    case MG_BALANCE_LEAST_REQUEST:
        return least_request(b, now, panic);
    case MG_BALANCE_HASH:
        if (key != NULL && b->ring_len != 0)
            return on_ring(b, *key, now, panic);
        return next_on_schedule(b, now, panic); /* no key (a bridge's call): round robin */
    default:
        return next_on_schedule(b, now, panic);
    }
}

size_t mg_backend_first_server_keyed(mg_backend_conf_t *b, mg_str_t method, const uint64_t *key)
{
    uint64_t now = mg_health_clock();
    size_t i = first_usable(b, method, key, now, 0);
    /* panic (Envoy's): when every server is out for its health, trust none of the checks */
    if (i == MG_NO_SERVER && b->panic)
        i = first_usable(b, method, key, now, 1);
    return i;
}

size_t mg_backend_first_server(mg_backend_conf_t *b, mg_str_t method)
{
    return mg_backend_first_server_keyed(b, method, NULL);
}

/* The `nth` usable server after `first`, round the list; MG_NO_SERVER when there are fewer. */
static size_t nth_usable_after(const mg_backend_conf_t *b, size_t first, unsigned nth, uint64_t now, int panic)
{
    for (size_t k = 1; k < b->num_servers; k++) {
        size_t i = (first + k) % b->num_servers;
        if (mg_server_usable(&b->servers[i], now, panic) && --nth == 0)
            return i;
    }
    return MG_NO_SERVER;
}

const mg_server_conf_t *mg_backend_server(const mg_backend_conf_t *b, size_t first, unsigned attempt)
{
    if (first >= b->num_servers)
        return NULL;
    if (attempt == 0)
        return &b->servers[first];
    uint64_t now = mg_health_clock();
    size_t i = nth_usable_after(b, first, attempt, now, 0);
    if (i == MG_NO_SERVER && b->panic)
        i = nth_usable_after(b, first, attempt, now, 1);
    return i != MG_NO_SERVER ? &b->servers[i] : NULL;
}

int mg_backend_may_retry(const mg_backend_conf_t *b, unsigned attempt, mg_str_t method)
{
    return attempt < b->retries && attempt + 1 < b->num_servers && mg_method_is_idempotent(method) && !pinned_to_primary(b, method);
}

/* The retry_on bit an attempt's outcome falls under; 0: never retried (a timeout: the backend's
 * `timeout` spans every attempt, so none is left for another). */
static unsigned retry_cause(mg_attempt_result_t result, int status)
{
    /* a failed TLS handshake sent nothing of the request either: retried as a refused connect */
    if (mg_attempt_never_connected(result) || result == MG_ATTEMPT_TLS_FAILED)
        return MG_RETRY_CONNECT_FAILURE;
    if (result == MG_ATTEMPT_FAILED)
        return MG_RETRY_RESET;
    if (result == MG_ATTEMPT_OK && status == 502)
        return MG_RETRY_502;
    if (result == MG_ATTEMPT_OK && status == 503)
        return MG_RETRY_503;
    if (result == MG_ATTEMPT_OK && status == 504)
        return MG_RETRY_504;
    return 0;
}

/* retry_budget (Envoy's): retries running stay under the share of the backend's attempts in
 * flight, but 3 may always run, so that a quiet backend still retries. */
static int within_budget(const mg_backend_conf_t *b)
{
    if (b->retry_budget_percent == 0)
        return 1;
    uint64_t in_flight = 0;
    for (size_t i = 0; i < b->num_servers; i++)
        in_flight += mg_server_in_flight(&b->servers[i]);
    uint64_t allowed = in_flight * b->retry_budget_percent / 100;
    long running = atomic_load_explicit(&((mg_backend_conf_t *)b)->retries_running, memory_order_relaxed);
    return running < 3 || (uint64_t)running < allowed;
}

int mg_backend_should_retry(const mg_backend_conf_t *b, unsigned attempt, mg_str_t method, mg_attempt_result_t result, int status)
{
    unsigned cause = retry_cause(result, status);
    return cause != 0 && (b->retry_on & cause) != 0 && mg_backend_may_retry(b, attempt, method) && within_budget(b);
}

uint64_t mg_backend_retry_backoff_ms(const mg_backend_conf_t *b, unsigned attempt)
{
    if (b->retry_backoff_ms == 0)
        return 0;
    unsigned doublings = attempt > 1 ? attempt - 1 : 0;
    uint64_t base = b->retry_backoff_ms << (doublings < 4 ? doublings : 4);
    /* full jitter around the base, from half to one and a half: retries of many requests that
     * failed together do not come back together */
    return base / 2 + next_random() % (base + 1);
}
