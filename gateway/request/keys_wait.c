/*
 * A request whose token names a kid its authenticator's keys lack (or that finds no keys at all)
 * while a fetch of them is on its way, one it asked for or an earlier one not yet ended, waits
 * for that fetch and is then authenticated again: a key the identity provider rotated in
 * verifies on its first request instead of costing that request a 401. The wait is bounded by
 * the fetch's timeout (and a second), and a request waits once: its second verification is
 * final. The worker polls the keyring's answered ticket (a load of an atomic) every few
 * milliseconds: only waiting requests cost anything, and an invented kid within min_refresh of
 * the last fetch asks for nothing, so it waits for nothing.
 */
#include "gateway/internal.h"

#define MG_KEYS_POLL_MS 5
#define MG_KEYS_WAIT_SLACK_MS 1000 /* past the fetch's timeout: the fetcher may be ending another fetch */

struct mg_keys_wait {
    mg_timer_t timer;
    mg_request_t *r;
    mg_keyring_t *keys;
    uint64_t ticket;
    uint64_t deadline_ms; /* the loop's clock (h2o_now) */
    void (*again)(mg_request_t *r);
};

static void on_poll(mg_timer_t *timer)
{
    mg_keys_wait_t *w = H2O_STRUCT_FROM_MEMBER(mg_keys_wait_t, timer, timer);
    if (!mg_keyring_answered(w->keys, w->ticket) && h2o_now(timer->timers->loop) < w->deadline_ms) {
        mg_timer_set(timer, MG_KEYS_POLL_MS);
        return;
    }
    mg_identity_release(w->r->auth.identity); /* the result authenticating again replaces */
    w->r->auth.identity = NULL;
    w->again(w->r);
}

int mg_request_wait_keys(mg_request_t *r, void (*again)(mg_request_t *r))
{
    mg_auth_result_t *res = &r->auth;
    if (res->keys_ticket == 0)
        return 0;
    if (r->keys_wait != NULL) {
        mg_auth_settle(res, r->worker->id);
        return 0;
    }
    mg_keys_wait_t *w = r->keys_wait = h2o_mem_alloc_pool(&r->req->pool, sizeof(*w));
    *w = (mg_keys_wait_t){.r = r, .keys = res->by->keys, .ticket = res->keys_ticket, .again = again};
    mg_timer_init(&w->timer, &r->worker->timers, on_poll);
    w->deadline_ms = h2o_now(r->worker->timers.loop) + res->by->timeout_ms + MG_KEYS_WAIT_SLACK_MS;
    mg_timer_set(&w->timer, MG_KEYS_POLL_MS);
    return 1;
}

void mg_request_wait_keys_cancel(mg_request_t *r)
{
    if (r->keys_wait != NULL)
        mg_timer_cancel(&r->keys_wait->timer);
}
