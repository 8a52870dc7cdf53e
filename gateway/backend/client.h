/*
 * The seam between what the gateway asks of a backend (forward.c, call.c) and the clients that
 * speak to its servers. A client is a const ops struct in a file of its own, like a matcher
 * kind: client_h1.c (matchgate's own HTTP/1.1, for http:// servers) and client_curl.c (libcurl's multi
 * interface on the worker's loop, what the backend's http_client: libcurl asks for). Each
 * worker has its own instance of every client (backend.c), and mg_exchange_start hands an
 * exchange to the client that speaks to its server.
 *
 * An exchange is one request to one server and its response: the client sends the request as
 * given (method, target, fields, body) and hands back the response's final head once (never an
 * interim 1xx; a 101 is final), parsed and checked (MG_ATTEMPT_TOO_MANY_HEADERS, _BAD_HEAD when
 * it cannot be passed on whole), then its body in pieces, then the outcome. Nothing of a
 * client's library crosses this header. Private to gateway/backend/.
 */
#ifndef MG_GATEWAY_BACKEND_CLIENT_H
#define MG_GATEWAY_BACKEND_CLIENT_H

#include "gateway/backend/backend.h"

/* A response head with more fields than this is refused (MG_ATTEMPT_TOO_MANY_HEADERS), never cut. */
#define MG_BACKEND_MAX_FIELDS 100

typedef struct mg_exchange_request {
    const mg_server_conf_t *server; /* the target is the server's url + path (+ "?" query) */
    mg_str_t method, path, query;
    const mg_backend_header_t *headers; /* in order, Host included; valid until the exchange ends */
    size_t num_headers;
    h2o_iovec_t body; /* base NULL: none (never sent with HEAD); valid until the exchange ends */
    uint64_t connect_timeout_ms;
    h2o_mem_pool_t *pool; /* what the client allocates for the exchange; outlives it */
} mg_exchange_request_t;

/* What on_body returns. */
typedef enum mg_body_taken {
    MG_BODY_TAKEN, /* all of it */
    MG_BODY_PAUSE, /* none of it: the exchange pauses, and delivers it again after mg_exchange_resume */
    MG_BODY_ABORT, /* the exchange ends with MG_ATTEMPT_ABORTED */
} mg_body_taken_t;

/* The owner's side. Callbacks run on the worker's loop, never from inside mg_exchange_start. */
typedef struct mg_exchange_callbacks {
    /* The final head: fields as in RFC 9110 (names lower-cased, values without surrounding white
     * space), in the pool. 0 to go on, -1 to abort (MG_ATTEMPT_ABORTED). */
    int (*on_head)(void *arg, int status, h2o_iovec_t reason, const mg_backend_header_t *fields, size_t num_fields);
    /* Body bytes, valid during the call. */
    mg_body_taken_t (*on_body)(void *arg, const char *data, size_t len);
    /* Optional (NULL: on_body only). A client whose input buffer holds body bytes and nothing else
     * may offer the whole buffer: the owner takes it by swapping it for an empty buffer of the same
     * prototype (1; the bytes are taken), or leaves it (0: they come through on_body), which saves
     * a copy of every byte of a large body. */
    int (*take_body_buffer)(void *arg, h2o_buffer_t **buf);
    /* The exchange is over (its client has let it go: the owner may start another from here).
     * `detail` says what happened in the client's words (never NULL). */
    void (*on_done)(void *arg, mg_attempt_result_t result, const char *detail);
} mg_exchange_callbacks_t;

typedef struct mg_backend_client_ops mg_backend_client_ops_t;

/* The start of every client's exchange. */
typedef struct mg_exchange {
    const mg_backend_client_ops_t *ops;
} mg_exchange_t;

struct mg_backend_client_ops {
    const char *name;
    /* Once per process, before any other thread; NULL: nothing to do. */
    void (*process_init)(void);
    /* The worker's instance, on its thread, once its loop and timers exist; NULL when out of memory. */
    void *(*create)(mg_worker_t *w);
    /* Closes its connections; no exchange is running. */
    void (*destroy)(void *client);
    /* Starts an exchange; on_done comes once, later, unless it is cancelled. NULL when it cannot
     * start (nothing is called back). */
    mg_exchange_t *(*start)(void *client, const mg_exchange_request_t *req, const mg_exchange_callbacks_t *cbs, void *arg);
    /* Delivers body bytes again after on_body said MG_BODY_PAUSE. */
    void (*resume)(mg_exchange_t *x);
    /* Stops an exchange whose on_done has not come: nothing is called back. Not from inside one of
     * its callbacks (return -1 or MG_BODY_ABORT there). */
    void (*cancel)(mg_exchange_t *x);
};

/* The clients (one line each). */
extern const mg_backend_client_ops_t mg_backend_client_curl;
extern const mg_backend_client_ops_t mg_backend_client_h1;

/* Starts an exchange with the worker's client for req->server. NULL when it cannot start. */
mg_exchange_t *mg_exchange_start(mg_worker_t *w, const mg_exchange_request_t *req, const mg_exchange_callbacks_t *cbs, void *arg);

static inline void mg_exchange_resume(mg_exchange_t *x)
{
    x->ops->resume(x);
}

static inline void mg_exchange_cancel(mg_exchange_t *x)
{
    x->ops->cancel(x);
}

#endif
