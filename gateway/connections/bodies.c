/*
 * limits.max_buffered_request_bytes: the bytes of request bodies the process holds at once.
 *
 * h2o 2.2.5 reads a whole request body before the handler runs and keeps it until the request is
 * disposed (HTTP/1 in the connection's input buffer, HTTP/2 in the stream's; in memory, past 32 MiB
 * in an unlinked temporary file under /tmp that h2o maps), so counting bodies when the handler
 * sees them bounds nothing while uploads are arriving. The hook of deps/h2o patch 0005 runs when
 * the head of a request with a body is complete, before any of the body is read: the body's
 * announced length (max_request_body when it announces none: chunked, HTTP/2 without
 * content-length) is taken from the budget then, or h2o refuses the request with a 503 (marked
 * `overloaded`, with Retry-After, by handler.c's filter of h2o's own responses). The bytes are
 * given back when h2o disposes the request, through a dispose callback in the request's pool:
 * after its response, or when its client leaves in the middle of the upload.
 */
#include "gateway/connections/internal.h"

typedef struct body_charge {
    mg_overload_t *ov;
    uint64_t bytes;
} body_charge_t;

static void give_back(void *p)
{
    body_charge_t *charge = p;
    atomic_fetch_sub(&charge->ov->buffered, charge->bytes);
}

/* Takes `n` bytes from the budget; 0 when they do not fit. */
static int take(mg_overload_t *ov, uint64_t n, uint64_t budget)
{
    uint_fast64_t held = atomic_load(&ov->buffered);
    do {
        if (n > budget || held > budget - n)
            return 0;
    } while (!atomic_compare_exchange_weak(&ov->buffered, &held, held + n));
    return 1;
}

int mg_bodies_on_start(h2o_req_t *req, size_t content_length)
{
    mg_worker_t *w = mg_worker_of(req->conn->ctx);
    const mg_limits_conf_t *l = &w->conf->limits;
    uint64_t n = content_length != SIZE_MAX ? content_length : l->max_request_body;

    if (l->max_buffered_request_bytes == 0 || n == 0)
        return 0;
    if (!take(w->gw->overload, n, l->max_buffered_request_bytes)) {
        mg_stat_inc(&w->conns->stats.bodies_refused);
        return -1;
    }
    body_charge_t *charge = h2o_mem_alloc_shared(&req->pool, sizeof(*charge), give_back);
    *charge = (body_charge_t){w->gw->overload, n};
    return 0;
}
