/*
 * Which server of a backend an attempt goes to, and whether a failed attempt may go on to the
 * next: the balance (round robin with weights, primary_for_writes, first_available) chooses the
 * first server; connect failures walk on from it round the list, for the requests a second
 * server may see (idempotent ones, never a write pinned to the primary), at most `retries` times.
 * The same rules for a forward, a bridge's call and a tunnel's upgrade.
 */
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

size_t mg_backend_first_server(mg_backend_conf_t *b, mg_str_t method)
{
    if (pinned_to_primary(b, method))
        return b->primary_index;
    if (b->balance == MG_BALANCE_FIRST_AVAILABLE)
        return 0;
    return b->schedule[atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed) % b->schedule_len];
}

const mg_server_conf_t *mg_backend_server(const mg_backend_conf_t *b, size_t first, unsigned attempt)
{
    return &b->servers[(first + attempt) % b->num_servers];
}

int mg_backend_may_retry(const mg_backend_conf_t *b, unsigned attempt, mg_str_t method)
{
    return attempt < b->retries && attempt + 1 < b->num_servers && mg_method_is_idempotent(method) && !pinned_to_primary(b, method);
}
