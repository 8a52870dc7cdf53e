/*
 * A worker with its connection state and no listener, for tests of conns.c and of what lives on
 * a connection's record (limits.c): real h2o sockets on one end of socketpairs, whose other end
 * shows what the gateway did (EOF once a connection is shut down), and h2o's connection object
 * faked by what conns.c reads of it (the context, the callbacks, the input buffer).
 */
#ifndef MG_TEST_CONN_FIXTURE_H
#define MG_TEST_CONN_FIXTURE_H

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "gateway/connections/internal.h"

typedef struct fixture_conn {
    h2o_conn_t conn; /* sock->data: what h2o's HTTP/1 connection starts with */
    h2o_socket_t *sock;
    mg_conn_t *rec;
    int peer; /* the client's end */
} fixture_conn_t;

static mg_gateway_t fx_gw;
static mg_worker_t fx_w;
static mg_overload_t fx_ov;
static mg_errors_t fx_errs;
static void *fx_not_a_conn[4]; /* what sock->data is during a TLS handshake: not the worker's context first */

static inline h2o_socket_t *fx_get_socket(h2o_conn_t *conn)
{
    return H2O_STRUCT_FROM_MEMBER(fixture_conn_t, conn, conn)->sock;
}

static const h2o_conn_callbacks_t fx_http1_callbacks = {.get_socket = fx_get_socket};

/* A worker whose configuration has `limits` (a YAML flow mapping). */
static inline void fx_setup(const char *limits)
{
    char text[512];
    snprintf(text, sizeof(text),
             "listen:\n  - address: \"127.0.0.1:8080\"\nroutes:\n  - name: r\n    respond: {status: 200}\nlimits: %s\n", limits);
    memset(&fx_w, 0, sizeof(fx_w));
    memset(&fx_gw, 0, sizeof(fx_gw));
    memset(&fx_ov, 0, sizeof(fx_ov));
    fx_w.conf = mg_config_load_string("gw.yaml", text, &fx_errs);
    cr_assert_not_null(fx_w.conf, "%s", fx_errs.size ? fx_errs.entries[0].text : "");
    fx_ov.clients = mg_clients_new();
    fx_ov.auto_max_connections = 1000;
    fx_gw.overload = &fx_ov;
    fx_w.gw = &fx_gw;
    fx_w.ctx.loop = h2o_evloop_create();
    mg_timers_init(&fx_w.timers, fx_w.ctx.loop);
    mg_conns_worker_init(&fx_w);
}

/* An accepted HTTP/1 connection with its record (as if accept.c had taken its slot). */
static inline void fx_accept(fixture_conn_t *c)
{
    int fds[2];
    memset(c, 0, sizeof(*c));
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    c->sock = h2o_evloop_socket_create(fx_w.ctx.loop, fds[0], 0);
    c->peer = fds[1];
    c->conn.ctx = &fx_w.ctx;
    c->conn.callbacks = &fx_http1_callbacks;
    c->sock->data = &c->conn;
    atomic_fetch_add(&fx_ov.open, 1);
    c->rec = mg_conn_attach(fx_w.conns, c->sock, NULL);
    cr_assert_not_null(c->rec);
}

/* The same, in a TLS handshake (sock->data is h2o's accept data). */
static inline void fx_accept_handshake(fixture_conn_t *c)
{
    fx_accept(c);
    c->sock->data = fx_not_a_conn;
}

/* Bytes of the client arrived in the input buffer. */
static inline void fx_input(fixture_conn_t *c, const char *bytes)
{
    size_t len = strlen(bytes);
    h2o_iovec_t buf = h2o_buffer_reserve(&c->sock->input, len);
    memcpy(buf.base, bytes, len);
    c->sock->input->size += len;
}

/* 1 when the gateway shut the connection down (the client reads EOF), 0 while it is open. */
static inline int fx_shut(fixture_conn_t *c)
{
    char byte;
    ssize_t n = recv(c->peer, &byte, 1, MSG_DONTWAIT);
    cr_assert(n == 0 || (n < 0 && errno == EAGAIN), "recv: %zd", n);
    return n == 0;
}

/* h2o closes the socket: the record goes with it. */
static inline void fx_close(fixture_conn_t *c)
{
    if (c->sock == NULL)
        return;
    h2o_socket_close(c->sock);
    h2o_evloop_run(fx_w.ctx.loop, 0); /* frees the disposed socket */
    close(c->peer);
    c->sock = NULL;
    c->rec = NULL;
}

/* Closes `n` connections, then the worker. */
static inline void fx_teardown(fixture_conn_t *conns, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fx_close(&conns[i]);
    mg_timer_cancel(&fx_w.conns->sweep);
    mg_timer_cancel(&fx_w.conns->resume);
    free(fx_w.conns);
    mg_timers_dispose(&fx_w.timers);
    h2o_evloop_destroy(fx_w.ctx.loop);
    mg_clients_free(fx_ov.clients);
    mg_config_free(fx_w.conf);
    mg_errors_clear(&fx_errs);
}

static inline uint64_t fx_now(void)
{
    return h2o_now(fx_w.ctx.loop);
}

#endif
