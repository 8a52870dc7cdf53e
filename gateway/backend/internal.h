/*
 * What gateway/backend's files share, and only they: the client seam (client.h), each worker's
 * backend state, the response fields the gateway writes itself, and URLs.
 */
#ifndef MG_GATEWAY_BACKEND_INTERNAL_H
#define MG_GATEWAY_BACKEND_INTERNAL_H

#include "gateway/backend/client.h"
#include "gateway/request/request.h"

/* A worker's backend side (mg_worker_t.backend). */
typedef struct mg_backend_worker {
    void **clients;            /* one instance per client, in the order of backend.c's table */
    h2o_linklist_t flush_list; /* forwards with body bytes waiting to be sent to the client */
} mg_backend_worker_t;

/* A client has run (responses may have advanced): what arrived goes on to the clients of the
 * gateway, once per run rather than once per piece (backend.c). */
void mg__backend_after_run(mg_worker_t *w);
/* The worker's instance of the client `ops` (backend.c); NULL before the worker's clients exist. */
void *mg__backend_client(mg_worker_t *w, const mg_backend_client_ops_t *ops);
/* Sends on what the worker's forwards have received (forward.c). */
void mg__forward_flush(mg_worker_t *w);

/* ---------------------------------------------------------------------------------------
 * The active checks' side of the health words (health.c), for the prober thread only
 */
typedef struct mg_server_health mg_server_health_t;

/* 1 when a check of `h` is due at `now_ms` (none running, `interval_ms` since the last start):
 * then the check counts as started. */
int mg__health_check_due(mg_server_health_t *h, uint64_t now_ms, uint64_t interval_ms);
/* A check of `h` ended (`ok`: it passed; `status`: the response's, 0 for none): `healthy` passes
 * in a row clear the unhealthy verdict, `unhealthy` failures in a row set it. 1 when the server
 * turned healthy, -1 unhealthy, 0 no change. */
int mg__health_check_done(mg_server_health_t *h, int ok, int status, unsigned healthy, unsigned unhealthy, uint64_t now_ms);
/* The backend name and server url of `h` (valid for the life of the process). */
void mg__health_names(const mg_server_health_t *h, const char **backend, const char **url);

/* ---------------------------------------------------------------------------------------
 * Header fields (headers.c)
 */

/* 1 when `name` (lower case) is a response header the gateway sets itself (date, server,
 * content-length, x-request-id). */
int mg_header_is_replaced_in_response(const char *name, size_t len);

/* ---------------------------------------------------------------------------------------
 * URLs (url.c)
 */

/*
 * Writes base + path + ("?" query when query is non-empty) into out (NUL-terminated). `base`
 * is a server url without trailing '/' ("http://h:p" or "http://h:p/prefix"); `path` starts
 * with '/'. Returns the length, or -1 when it does not fit.
 */
long mg_url_build(char *out, size_t size, const char *base, mg_str_t path, mg_str_t query);

#endif
