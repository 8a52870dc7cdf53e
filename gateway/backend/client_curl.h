/*
 * What the libcurl client's files share, and only they: client_curl.c (the multi handle in the
 * loop, easy handles, the response head, exchanges) and client_curl_transport.c (what a server's
 * backend asks of the connection: HTTP/2, TLS, tls.server_name).
 */
#ifndef MG_GATEWAY_BACKEND_CLIENT_CURL_H
#define MG_GATEWAY_BACKEND_CLIENT_CURL_H

#include <curl/curl.h>
#include "gateway/backend/internal.h"

#define FREE_LIST_MAX 64

/* One per backend connection, from curl's first interest in it until curl closes it: the h2o
 * socket owns the fd, so keep-alive reuse costs no dup/epoll registration churn. */
typedef struct watch {
    struct curl_client *cc;
    h2o_socket_t *sock;
    curl_socket_t fd;
    int what;        /* CURL_POLL_* last asked for; 0 after CURL_POLL_REMOVE */
    int write_armed; /* h2o_socket_notify_write is one-shot and cannot be cancelled */
    int closed;      /* curl closed it while a write notification was armed */
} watch_t;

/* A worker's instance. */
typedef struct curl_client {
    mg_worker_t *w;
    CURLM *multi;
    mg_timer_t timer; /* curl's */
    CURL *free_list[FREE_LIST_MAX];
    size_t num_free;
    watch_t **by_fd; /* indexed by fd */
    size_t by_fd_size;
    CURLSH *share; /* TLS sessions, resumed by the worker's new connections to a server */
} curl_client_t;

/* Why the client itself stopped a transfer (the head it could not pass on), or the owner did. */
typedef enum stop_reason { STOP_NONE, STOP_TOO_MANY_HEADERS, STOP_BAD_HEAD, STOP_OWNER } stop_reason_t;

typedef struct curl_exchange {
    mg_exchange_t super;
    curl_client_t *cc;
    CURL *easy;
    const mg_exchange_callbacks_t *cbs;
    void *arg;
    h2o_mem_pool_t *pool;
    /* the response head as received */
    int status;
    h2o_iovec_t reason;
    h2o_iovec_t lines[MG_BACKEND_MAX_FIELDS];
    size_t num_lines;
    int head_done;
    stop_reason_t stopped;
    char *error; /* curl's own words on a failure (https:// servers: what the TLS library said) */
} curl_exchange_t;

/* client_curl_transport.c */
/* libcurl < 8.0.0 cannot reuse an h2c connection (set once by the client's process_init). */
extern int mg__curl_h2c_reuse_broken;
int mg__curl_is_https(const mg_server_conf_t *server);
/* tls.server_name: the url's base naming `name`, CONNECT_TO set to the server's own host and port;
 * NULL when the server's url has no port. */
const char *mg__curl_url_with_server_name(curl_exchange_t *x, const mg_server_conf_t *server, const char *name);
/* The protocol and TLS settings of the server's backend on x's easy handle; returns the url's
 * base (tls.server_name may change it). */
const char *mg__curl_configure_transport(curl_exchange_t *x, const mg_server_conf_t *server);

#endif
