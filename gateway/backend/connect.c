/*
 * A TCP connection to a server of a backend, on the worker's loop, for what speaks its own
 * protocol on it (the WebSocket tunnel's upgrade). An address in the server's url is connected
 * to at once; a name is looked up first by h2o's resolver threads (its first address is taken).
 * connect_timeout runs from the moment the connect starts.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/backend/internal.h"

struct mg_backend_connect {
    mg_worker_t *w;
    const mg_server_conf_t *server;
    mg_backend_connected_t done;
    void *arg;
    uint64_t timeout_ms;
    h2o_hostinfo_getaddr_req_t *getaddr;
    h2o_socket_t *sock; /* while connecting */
    mg_timer_t timer;
};

static void connect_free(mg_backend_connect_t *c)
{
    mg_server_attempt_ended(c->server);
    mg_timer_cancel(&c->timer);
    if (c->getaddr != NULL)
        h2o_hostinfo_getaddr_cancel(c->getaddr);
    if (c->sock != NULL)
        h2o_socket_close(c->sock);
    free(c);
}

/* Hands the outcome (and the socket, on success) to the caller. */
static void finish(mg_backend_connect_t *c, mg_attempt_result_t result)
{
    mg_backend_connected_t done = c->done;
    void *arg = c->arg;
    h2o_socket_t *sock = result == MG_ATTEMPT_OK ? c->sock : NULL;
    /* a connection is all this side sees: a success is one for the outlier rules too */
    mg_server_report(c->server, result, 0);
    if (sock != NULL) {
        sock->data = NULL;
        c->sock = NULL;
    }
    connect_free(c);
    done(arg, sock, result);
}

static void on_timeout(mg_timer_t *timer)
{
    finish(H2O_STRUCT_FROM_MEMBER(mg_backend_connect_t, timer, timer), MG_ATTEMPT_CONNECT_TIMEOUT);
}

static void on_connect(h2o_socket_t *sock, const char *err)
{
    mg_backend_connect_t *c = sock->data;
    finish(c, err == NULL ? MG_ATTEMPT_OK : MG_ATTEMPT_NOT_CONNECTED);
}

/* 0, or -1 when no socket could be made. */
static int connect_to(mg_backend_connect_t *c, struct sockaddr *addr, socklen_t len)
{
    if ((c->sock = h2o_socket_connect(c->w->ctx.loop, addr, len, on_connect)) == NULL)
        return -1;
    c->sock->data = c;
    mg_timer_set(&c->timer, c->timeout_ms);
    return 0;
}

static void on_getaddr(h2o_hostinfo_getaddr_req_t *req, const char *errstr, struct addrinfo *res, void *arg)
{
    mg_backend_connect_t *c = arg;
    c->getaddr = NULL;
    if (errstr != NULL) {
        finish(c, MG_ATTEMPT_NOT_CONNECTED);
        return;
    }
    struct addrinfo *ai = h2o_hostinfo_select_one(res);
    if (connect_to(c, ai->ai_addr, ai->ai_addrlen) != 0)
        finish(c, MG_ATTEMPT_NOT_CONNECTED);
}

/* Connects at once to an address; looks a name up. 0, or -1 when it failed at once. */
static int start(mg_backend_connect_t *c, const char *url)
{
    h2o_url_t u;
    if (h2o_url_parse(url, SIZE_MAX, &u) != 0)
        return -1; /* the configuration lets no such url in */
    char host[256], port[8];
    snprintf(host, sizeof(host), "%.*s", (int)u.host.len, u.host.base);
    snprintf(port, sizeof(port), "%u", (unsigned)h2o_url_get_port(&u));
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(h2o_url_get_port(&u));
        return connect_to(c, (struct sockaddr *)v4, sizeof(*v4));
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(h2o_url_get_port(&u));
        return connect_to(c, (struct sockaddr *)v6, sizeof(*v6));
    }
    c->getaddr = h2o_hostinfo_getaddr(&c->w->ctx.receivers.hostinfo_getaddr, h2o_iovec_init(host, strlen(host)),
                                      h2o_iovec_init(port, strlen(port)), AF_UNSPEC, SOCK_STREAM, IPPROTO_TCP,
                                      AI_ADDRCONFIG | AI_NUMERICSERV, on_getaddr, c);
    return 0;
}

mg_backend_connect_t *mg_backend_connect(mg_worker_t *w, const mg_server_conf_t *server, uint64_t timeout_ms,
                                         mg_backend_connected_t done, void *arg)
{
    mg_backend_connect_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    *c = (mg_backend_connect_t){.w = w, .server = server, .done = done, .arg = arg, .timeout_ms = timeout_ms};
    mg_server_attempt_started(server);
    mg_timer_init(&c->timer, &w->timers, on_timeout);
    if (start(c, server->url) != 0) {
        connect_free(c);
        return NULL;
    }
    return c;
}

void mg_backend_connect_cancel(mg_backend_connect_t *c)
{
    connect_free(c);
}
