/*
 * The builtin client: HTTP/1.1 to http:// servers on the worker's h2o loop, with no library in
 * between and no malloc per request (an exchange lives in the request's pool; a connection is
 * malloc'd once for its life).
 *
 * Pools: per worker and per server url (a small hash table), idle connections in a list, the most
 * recently used first (checkout takes the head: O(1)); they expire from the tail after the
 * backend's keepalive_timeout, and at most max_idle_connections are kept. An idle connection
 * keeps reading: a backend that closes it is seen at once and the connection dropped, and no
 * epoll_ctl is made per request (reading is never switched off but under backpressure).
 *
 * Addresses: an IP address in the url is parsed once per pool; a name is looked up by h2o's
 * resolver threads (h2o_hostinfo_getaddr), never on the worker, every address kept and new
 * connections made round them; looked up again after dns_refresh (a failed lookup keeps the last
 * good addresses).
 *
 * A request that fails on a reused connection before any byte of a response came (the backend
 * closed it while idle, as the request went out) is sent again once on a fresh connection.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/backend/h1.h"
#include "gateway/backend/internal.h"

#define NUM_BUCKETS 64

typedef struct h1_client h1_client_t;
typedef struct h1_pool h1_pool_t;
typedef struct h1_exchange h1_exchange_t;

typedef struct h1_conn {
    h1_pool_t *pool;
    h2o_socket_t *sock;
    h2o_linklist_t idle_link; /* in pool->idle while idle */
    uint64_t idle_since;
    h1_exchange_t *x; /* the exchange on it, NULL while idle or connecting for nobody */
} h1_conn_t;

struct h1_pool {
    h1_client_t *hc;
    h1_pool_t *next; /* in its bucket */
    char *url;
    h2o_iovec_t prefix; /* the url's path, "" for none */
    char host[256], port[8];
    int is_name;
    struct sockaddr_storage *addrs;
    size_t num_addrs, next_addr;
    uint64_t resolved_at;
    h2o_hostinfo_getaddr_req_t *getaddr;
    h2o_linklist_t waiting; /* exchanges waiting for the addresses */
    h2o_linklist_t idle;    /* most recently used first */
    size_t num_idle;
    mg_timer_t expiry;
    /* the backend's settings, as of the latest exchange */
    uint64_t keepalive_ms, dns_refresh_ms;
    size_t max_idle;
};

struct h1_client {
    mg_worker_t *w;
    h1_pool_t *buckets[NUM_BUCKETS];
};

struct h1_exchange {
    mg_exchange_t super;
    h1_pool_t *pool;
    h1_conn_t *conn;
    const mg_exchange_callbacks_t *cbs;
    void *arg;
    h2o_mem_pool_t *mem;
    mg_str_t method;
    h2o_iovec_t bufs[2];
    size_t num_bufs;
    uint64_t connect_timeout_ms;
    mg_timer_t timer;         /* connect_timeout; at 0 to report a failure from outside start */
    h2o_linklist_t wait_link; /* in pool->waiting */
    mg_h1_body_t body;
    size_t pending; /* decoded body bytes at the start of the connection's input, not taken yet */
    size_t tries;   /* addresses tried for this connect */
    mg_attempt_result_t late_result;
    const char *late_detail;
    unsigned head_request : 1, head_done : 1, body_end : 1, write_done : 1, paused : 1, eof : 1, reused : 1, retried : 1,
        got_bytes : 1, keep_alive : 1, raw : 1;
};

static void conn_close(h1_conn_t *conn);
static void open_connection(h1_exchange_t *x);
static void process(h1_exchange_t *x);

/* ---------------------------------------------------------------------------------------
 * Ending an exchange
 */

/* Lets go of the connection (kept when `reuse`) and reports. Touches nothing of x after on_done. */
static void finish(h1_exchange_t *x, mg_attempt_result_t result, const char *detail, int reuse);

static void fail(h1_exchange_t *x, mg_attempt_result_t result, const char *detail)
{
    finish(x, result, detail, 0);
}

static void on_late(mg_timer_t *timer);

/* A failure found inside start (or while the exchange is set up) is reported from the loop. */
static void fail_later(h1_exchange_t *x, mg_attempt_result_t result, const char *detail)
{
    x->late_result = result;
    x->late_detail = detail;
    mg_timer_cancel(&x->timer);
    mg_timer_init(&x->timer, &x->pool->hc->w->timers, on_late);
    mg_timer_set(&x->timer, 0);
}

static void on_late(mg_timer_t *timer)
{
    h1_exchange_t *x = H2O_STRUCT_FROM_MEMBER(h1_exchange_t, timer, timer);
    mg_worker_t *w = x->pool->hc->w;
    fail(x, x->late_result, x->late_detail);
    mg__backend_after_run(w);
}

/* ---------------------------------------------------------------------------------------
 * The input buffer
 */

/* Takes n bytes off the front of the connection's input. All of it: the buffer is kept, emptied,
 * for the rest of the response (h2o frees an emptied buffer, and its next read grows a new one
 * from 8 KiB by doubling and copying: a 1 MiB body cost a second copy of itself that way). */
static void take_input(h1_conn_t *conn, size_t n)
{
    h2o_buffer_t *in = conn->sock->input;
    if (n != 0 && n == in->size) {
        in->size = 0;
        in->bytes = in->_buf;
    } else {
        h2o_buffer_consume(&conn->sock->input, n);
    }
}

/* Gives back an emptied input buffer: an idle connection holds none. */
static void release_input(h1_conn_t *conn)
{
    h2o_buffer_t *in = conn->sock->input;
    if (in->bytes != NULL && in->size == 0) {
        conn->sock->input = &in->_prototype->_initial_buf;
        h2o_buffer__do_free(in);
    }
}

/* ---------------------------------------------------------------------------------------
 * Pools
 */
static void pool_checkin(h1_pool_t *pool, h1_conn_t *conn);

static void finish(h1_exchange_t *x, mg_attempt_result_t result, const char *detail, int reuse)
{
    h1_conn_t *conn = x->conn;
    mg_timer_cancel(&x->timer);
    if (h2o_linklist_is_linked(&x->wait_link))
        h2o_linklist_unlink(&x->wait_link);
    x->conn = NULL;
    if (conn != NULL) {
        conn->x = NULL;
        if (reuse) {
            release_input(conn);
            pool_checkin(x->pool, conn);
        } else
            conn_close(conn);
    }
    x->cbs->on_done(x->arg, result, detail);
}

static void conn_close(h1_conn_t *conn)
{
    if (h2o_linklist_is_linked(&conn->idle_link)) {
        h2o_linklist_unlink(&conn->idle_link);
        conn->pool->num_idle--;
    }
    h2o_socket_close(conn->sock);
    free(conn);
}

static h1_conn_t *oldest_idle(h1_pool_t *pool)
{
    return H2O_STRUCT_FROM_MEMBER(h1_conn_t, idle_link, pool->idle.prev);
}

/* Closes the idle connections older than keepalive_timeout, and wakes up for the next one. */
static void on_expiry(mg_timer_t *timer)
{
    h1_pool_t *pool = H2O_STRUCT_FROM_MEMBER(h1_pool_t, expiry, timer);
    uint64_t now = h2o_now(pool->hc->w->ctx.loop);
    while (!h2o_linklist_is_empty(&pool->idle) && oldest_idle(pool)->idle_since + pool->keepalive_ms <= now)
        conn_close(oldest_idle(pool));
    if (!h2o_linklist_is_empty(&pool->idle))
        mg_timer_set(&pool->expiry, oldest_idle(pool)->idle_since + pool->keepalive_ms - now);
}

static void pool_checkin(h1_pool_t *pool, h1_conn_t *conn)
{
    if (pool->max_idle == 0) {
        conn_close(conn);
        return;
    }
    if (pool->num_idle >= pool->max_idle)
        conn_close(oldest_idle(pool));
    conn->idle_since = h2o_now(pool->hc->w->ctx.loop);
    h2o_linklist_insert(pool->idle.next, &conn->idle_link);
    pool->num_idle++;
    if (!mg_timer_is_set(&pool->expiry))
        mg_timer_set(&pool->expiry, pool->keepalive_ms);
}

/* The most recently used idle connection still within keepalive_timeout, or NULL. */
static h1_conn_t *pool_checkout(h1_pool_t *pool)
{
    uint64_t now = h2o_now(pool->hc->w->ctx.loop);
    while (!h2o_linklist_is_empty(&pool->idle)) {
        h1_conn_t *conn = H2O_STRUCT_FROM_MEMBER(h1_conn_t, idle_link, pool->idle.next);
        h2o_linklist_unlink(&conn->idle_link);
        pool->num_idle--;
        if (conn->idle_since + pool->keepalive_ms > now)
            return conn;
        h2o_socket_close(conn->sock); /* expired, its timer has not run yet */
        free(conn);
    }
    return NULL;
}

/* "http://host:port/prefix" into host, port and prefix; an IP address becomes the only address. */
static int pool_parse_url(h1_pool_t *pool)
{
    const char *hp = strstr(pool->url, "://"), *slash, *colon;
    if (hp == NULL)
        return -1;
    hp += 3;
    slash = strchr(hp, '/');
    if (slash == NULL)
        slash = hp + strlen(hp);
    pool->prefix = h2o_iovec_init(slash, strlen(slash));
    colon = slash;
    while (colon > hp && colon[-1] != ':')
        colon--;
    if (colon == hp || (size_t)(slash - colon) >= sizeof(pool->port))
        return -1;
    memcpy(pool->port, colon, (size_t)(slash - colon));
    const char *host = hp, *host_end = colon - 1;
    if (*host == '[' && host_end > host && host_end[-1] == ']')
        host++, host_end--;
    if ((size_t)(host_end - host) >= sizeof(pool->host))
        return -1;
    memcpy(pool->host, host, (size_t)(host_end - host));
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(pool->port))};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = v4.sin_port};
    int is_v4 = inet_pton(AF_INET, pool->host, &v4.sin_addr) == 1;
    if (!is_v4 && inet_pton(AF_INET6, pool->host, &v6.sin6_addr) != 1) {
        pool->is_name = 1;
        return 0;
    }
    if ((pool->addrs = calloc(1, sizeof(*pool->addrs))) == NULL)
        return -1;
    if (is_v4)
        memcpy(pool->addrs, &v4, sizeof(v4));
    else
        memcpy(pool->addrs, &v6, sizeof(v6));
    pool->num_addrs = 1;
    return 0;
}

static uint32_t hash_url(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static void pool_free(h1_pool_t *pool)
{
    mg_timer_cancel(&pool->expiry);
    while (!h2o_linklist_is_empty(&pool->idle))
        conn_close(oldest_idle(pool));
    if (pool->getaddr != NULL)
        h2o_hostinfo_getaddr_cancel(pool->getaddr);
    free(pool->addrs);
    free(pool->url);
    free(pool);
}

/* The worker's pool for `server`, made on first use; NULL when out of memory. */
static h1_pool_t *pool_get(h1_client_t *hc, const mg_server_conf_t *server)
{
    h1_pool_t **slot = &hc->buckets[hash_url(server->url) % NUM_BUCKETS], *pool;
    for (pool = *slot; pool != NULL; pool = pool->next)
        if (strcmp(pool->url, server->url) == 0)
            break;
    if (pool == NULL) {
        if ((pool = calloc(1, sizeof(*pool))) == NULL || (pool->url = strdup(server->url)) == NULL || pool_parse_url(pool) != 0) {
            if (pool != NULL)
                free(pool->url);
            free(pool);
            return NULL;
        }
        pool->hc = hc;
        h2o_linklist_init_anchor(&pool->waiting);
        h2o_linklist_init_anchor(&pool->idle);
        mg_timer_init(&pool->expiry, &hc->w->timers, on_expiry);
        pool->next = *slot;
        *slot = pool;
    }
    if (server->backend != NULL) {
        pool->keepalive_ms = server->backend->keepalive_timeout_ms;
        pool->max_idle = server->backend->max_idle_connections;
        pool->dns_refresh_ms = server->backend->dns_refresh_ms;
    }
    return pool;
}

/* ---------------------------------------------------------------------------------------
 * Names
 */
static void connect_next(h1_exchange_t *x);

static void on_getaddr(h2o_hostinfo_getaddr_req_t *req, const char *errstr, struct addrinfo *res, void *arg)
{
    h1_pool_t *pool = arg;
    size_t n = 0;
    pool->getaddr = NULL;
    pool->resolved_at = h2o_now(pool->hc->w->ctx.loop);
    for (struct addrinfo *ai = errstr == NULL ? res : NULL; ai != NULL; ai = ai->ai_next)
        n += ai->ai_addrlen <= sizeof(struct sockaddr_storage);
    struct sockaddr_storage *addrs = n != 0 ? calloc(n, sizeof(*addrs)) : NULL;
    if (addrs != NULL) {
        /* a failed lookup keeps the last good addresses */
        n = 0;
        for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
            if (ai->ai_addrlen <= sizeof(struct sockaddr_storage))
                memcpy(&addrs[n++], ai->ai_addr, ai->ai_addrlen);
        free(pool->addrs);
        pool->addrs = addrs;
        pool->num_addrs = n;
    }
    while (!h2o_linklist_is_empty(&pool->waiting)) {
        h1_exchange_t *x = H2O_STRUCT_FROM_MEMBER(h1_exchange_t, wait_link, pool->waiting.next);
        h2o_linklist_unlink(&x->wait_link);
        if (pool->num_addrs != 0)
            connect_next(x);
        else
            fail(x, MG_ATTEMPT_NOT_CONNECTED, "the server's name did not resolve");
    }
    mg__backend_after_run(pool->hc->w);
}

static void pool_resolve(h1_pool_t *pool)
{
    if (pool->getaddr != NULL)
        return;
    pool->getaddr =
        h2o_hostinfo_getaddr(&pool->hc->w->ctx.receivers.hostinfo_getaddr, h2o_iovec_init(pool->host, strlen(pool->host)),
                             h2o_iovec_init(pool->port, strlen(pool->port)), AF_UNSPEC, SOCK_STREAM, IPPROTO_TCP,
                             AI_ADDRCONFIG | AI_NUMERICSERV, on_getaddr, pool);
}

/* ---------------------------------------------------------------------------------------
 * Connections
 */
static void on_read(h2o_socket_t *sock, const char *err);
static void on_write(h2o_socket_t *sock, const char *err);

static void send_request(h1_exchange_t *x)
{
    x->write_done = 0;
    h2o_socket_write(x->conn->sock, x->bufs, x->num_bufs, on_write);
}

static void hand_over(h1_exchange_t *x, h1_conn_t *conn);

static void on_connect(h2o_socket_t *sock, const char *err)
{
    h1_conn_t *conn = sock->data;
    h1_exchange_t *x = conn->x;
    mg_worker_t *w = x->pool->hc->w;
    if (err != NULL) {
        x->conn = NULL;
        conn_close(conn);
        if (x->tries < x->pool->num_addrs)
            connect_next(x); /* the name's next address */
        else
            fail(x, MG_ATTEMPT_NOT_CONNECTED, err);
        mg__backend_after_run(w);
        return;
    }
    mg_timer_cancel(&x->timer);
    if (x->raw) {
        hand_over(x, conn);
        return;
    }
    h2o_socket_read_start(sock, on_read);
    send_request(x);
}

/* Connects to the pool's next address (round them all). */
static void connect_next(h1_exchange_t *x)
{
    h1_pool_t *pool = x->pool;
    struct sockaddr_storage *ss = &pool->addrs[pool->next_addr++ % pool->num_addrs];
    socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    h1_conn_t *conn = calloc(1, sizeof(*conn));
    x->tries++;
    if (conn == NULL || (conn->sock = h2o_socket_connect(pool->hc->w->ctx.loop, (struct sockaddr *)ss, len, on_connect)) == NULL) {
        free(conn);
        fail_later(x, MG_ATTEMPT_NOT_CONNECTED, "cannot make a socket to the server");
        return;
    }
    conn->pool = pool;
    conn->x = x;
    conn->sock->data = conn;
    x->conn = conn;
}

static void on_connect_timeout(mg_timer_t *timer)
{
    h1_exchange_t *x = H2O_STRUCT_FROM_MEMBER(h1_exchange_t, timer, timer);
    mg_worker_t *w = x->pool->hc->w;
    fail(x, MG_ATTEMPT_CONNECT_TIMEOUT, "connection timed out");
    mg__backend_after_run(w);
}

/* A fresh connection for x: at once to a known address, after the lookup otherwise. */
static void open_connection(h1_exchange_t *x)
{
    h1_pool_t *pool = x->pool;
    uint64_t now = h2o_now(pool->hc->w->ctx.loop);
    mg_timer_cancel(&x->timer);
    mg_timer_init(&x->timer, &pool->hc->w->timers, on_connect_timeout);
    mg_timer_set(&x->timer, x->connect_timeout_ms);
    x->reused = 0;
    x->tries = 0;
    if (pool->is_name && (pool->num_addrs == 0 || now - pool->resolved_at >= pool->dns_refresh_ms))
        pool_resolve(pool);
    if (pool->num_addrs == 0)
        h2o_linklist_insert(&pool->waiting, &x->wait_link);
    else
        connect_next(x);
}

/* ---------------------------------------------------------------------------------------
 * The response
 */

/* The connection ended or failed before the response was whole. */
static void on_broken(h1_exchange_t *x, const char *detail)
{
    if (!x->head_done && !x->got_bytes && x->reused && !x->retried) {
        /* the backend closed a pooled connection as the request went out: once more, on a new
         * one. Whatever the method, as libcurl did before (a backend that drops idle connections
         * would otherwise fail writes at random): nothing came back, and the connection was one
         * the backend was closing as idle, so the request was almost surely never processed */
        h1_conn_t *conn = x->conn;
        x->conn = NULL;
        conn->x = NULL;
        conn_close(conn);
        x->retried = 1;
        open_connection(x);
        return;
    }
    if (x->head_done && x->body.framing == MG_H1_UNTIL_CLOSE && x->eof)
        finish(x, MG_ATTEMPT_OK, "", 0);
    else
        fail(x, x->head_done || !x->got_bytes ? MG_ATTEMPT_FAILED : MG_ATTEMPT_BAD_RESPONSE, detail);
}

static void on_write(h2o_socket_t *sock, const char *err)
{
    h1_conn_t *conn = sock->data;
    h1_exchange_t *x = conn->x;
    if (x == NULL)
        return;
    if (err != NULL) {
        mg_worker_t *w = x->pool->hc->w;
        x->eof = 1;
        on_broken(x, "the backend closed the connection while the request was sent");
        mg__backend_after_run(w);
        return;
    }
    x->write_done = 1;
}

/* The head is whole (`len` bytes): copied into the exchange's pool, handed over, consumed. -1 when
 * the exchange ended. */
static int take_head(h1_exchange_t *x, mg_h1_head_t *head, size_t len)
{
    h2o_buffer_t *in = x->conn->sock->input;
    char *copy = h2o_mem_alloc_pool(x->mem, len);
    memcpy(copy, in->bytes, len);
#define REBASE(v)                                                                                                                  \
    ((v).base = (v).base != NULL && (v).base >= in->bytes && (v).base <= in->bytes + len ? copy + ((v).base - in->bytes) : (v).base)
    for (size_t i = 0; i < head->num_fields; i++) {
        REBASE(head->fields[i].name);
        REBASE(head->fields[i].value);
    }
#undef REBASE
    /* the reason goes out as a C string (h2o's res.reason) */
    head->reason = h2o_strdup(x->mem, head->reason.base, head->reason.len);
    take_input(x->conn, len);
    x->head_done = 1;
    x->keep_alive = head->keep_alive;
    mg_h1_body_init(&x->body, head);
    x->body_end = head->framing == MG_H1_NO_BODY || (head->framing == MG_H1_LENGTH && head->content_length == 0);
    if (x->cbs->on_head(x->arg, head->status, head->reason, head->fields, head->num_fields) != 0) {
        fail(x, MG_ATTEMPT_ABORTED, "the response was refused");
        return -1;
    }
    return 0;
}

/* Parses heads until the final one. 0 once it is taken, 1 when more bytes are needed, -1 when the
 * exchange ended. */
static int read_head(h1_exchange_t *x)
{
    for (;;) {
        h2o_buffer_t *in = x->conn->sock->input;
        mg_h1_head_t head;
        mg_attempt_result_t err;
        const char *why = NULL;
        ssize_t len = mg_h1_parse_head(in->bytes, in->size, x->head_request, &head, &err, &why);
        if (len < 0) {
            fail(x, err, why);
            return -1;
        }
        if (len == 0)
            return 1;
        if (head.status >= 200 || head.status == 101)
            return take_head(x, &head, (size_t)len);
        take_input(x->conn, (size_t)len); /* an interim 1xx */
    }
}

/* Decodes what the connection's input holds (when nothing decoded waits) and hands it over. 0 when
 * the input is used up or the exchange paused, -1 when it ended. */
static int read_body(h1_exchange_t *x)
{
    for (;;) {
        h2o_buffer_t *in = x->conn->sock->input;
        if (x->pending == 0 && in->size != 0 && !x->body_end) {
            size_t body, extra;
            const char *why = NULL;
            mg_h1_decoded_t d = mg_h1_body_decode(&x->body, in->bytes, in->size, &body, &extra, &why);
            if (d == MG_H1_ERROR) {
                fail(x, MG_ATTEMPT_BAD_RESPONSE, why);
                return -1;
            }
            in->size = body + extra; /* chunks are decoded in place */
            x->pending = body;
            x->body_end = d == MG_H1_END;
        }
        if (x->pending != 0) {
            switch (x->cbs->on_body(x->arg, in->bytes, x->pending)) {
            case MG_BODY_TAKEN:
                take_input(x->conn, x->pending);
                x->pending = 0;
                break;
            case MG_BODY_PAUSE:
                x->paused = 1;
                h2o_socket_read_stop(x->conn->sock);
                return 0;
            default:
                fail(x, MG_ATTEMPT_ABORTED, "the response was refused");
                return -1;
            }
        }
        if (x->body_end || x->conn->sock->input->size == 0)
            return 0;
    }
}

/* Everything the connection's input holds, for x. */
static void process(h1_exchange_t *x)
{
    if (!x->head_done) {
        int rc = read_head(x);
        if (rc < 0)
            return;
        if (rc > 0) {
            if (x->eof)
                on_broken(x, "the backend closed the connection without a complete response head");
            return;
        }
    }
    if (read_body(x) < 0 || x->paused)
        return;
    if (x->body_end) {
        if (x->conn->sock->input->size != 0)
            fail(x, MG_ATTEMPT_BAD_RESPONSE, "the backend sent bytes after the end of its response");
        else
            finish(x, MG_ATTEMPT_OK, "", x->keep_alive && x->write_done && !x->eof);
        return;
    }
    if (x->eof)
        on_broken(x, "the backend closed the connection before the end of the response");
}

static void on_read(h2o_socket_t *sock, const char *err)
{
    h1_conn_t *conn = sock->data;
    h1_exchange_t *x = conn->x;
    if (x == NULL) {
        /* an idle connection: the backend closed it, or sent what nobody asked for */
        conn_close(conn);
        return;
    }
    mg_worker_t *w = x->pool->hc->w;
    if (sock->input->size != 0)
        x->got_bytes = 1;
    if (err != NULL) {
        x->eof = 1;
        h2o_socket_read_stop(sock);
    }
    process(x);
    mg__backend_after_run(w);
}

/* ---------------------------------------------------------------------------------------
 * The client
 */
static int is_head(mg_str_t method)
{
    return h2o_memis(method.base, method.len, H2O_STRLIT("HEAD"));
}

static mg_exchange_t *exchange_start(void *client, const mg_exchange_request_t *req, const mg_exchange_callbacks_t *cbs, void *arg)
{
    h1_client_t *hc = client;
    h1_pool_t *pool = pool_get(hc, req->server);
    if (pool == NULL)
        return NULL;
    h1_exchange_t *x = h2o_mem_alloc_pool(req->pool, sizeof(*x));
    *x = (h1_exchange_t){.super = {&mg_backend_client_h1},
                         .pool = pool,
                         .cbs = cbs,
                         .arg = arg,
                         .mem = req->pool,
                         .method = req->method,
                         .connect_timeout_ms = req->connect_timeout_ms,
                         .head_request = is_head(req->method)};
    mg_timer_init(&x->timer, &hc->w->timers, on_connect_timeout);
    int with_body = req->body.base != NULL && !x->head_request;
    size_t body_len = with_body ? req->body.len : (size_t)-1;
    char *head = h2o_mem_alloc_pool(req->pool, mg_h1_request_head_size(req, pool->prefix, body_len));
    x->bufs[0] = h2o_iovec_init(head, mg_h1_request_head_write(head, req, pool->prefix, body_len));
    x->num_bufs = 1;
    if (with_body && req->body.len != 0)
        x->bufs[x->num_bufs++] = req->body; /* the same writev: one write for head and body */
    h1_conn_t *conn = pool_checkout(pool);
    if (conn == NULL) {
        open_connection(x);
        return &x->super;
    }
    conn->x = x;
    x->conn = conn;
    x->reused = 1;
    send_request(x);
    return &x->super;
}

static void exchange_resume(mg_exchange_t *xp)
{
    h1_exchange_t *x = (h1_exchange_t *)xp;
    mg_worker_t *w = x->pool->hc->w;
    if (!x->paused)
        return;
    x->paused = 0;
    if (!x->eof)
        h2o_socket_read_start(x->conn->sock, on_read);
    process(x);
    mg__backend_after_run(w);
}

static void exchange_cancel(mg_exchange_t *xp)
{
    h1_exchange_t *x = (h1_exchange_t *)xp;
    mg_timer_cancel(&x->timer);
    if (h2o_linklist_is_linked(&x->wait_link))
        h2o_linklist_unlink(&x->wait_link);
    if (x->conn != NULL) {
        /* mid-exchange: what the backend still sends cannot be told from the next response */
        x->conn->x = NULL;
        conn_close(x->conn);
        x->conn = NULL;
    }
}

static void *client_create(mg_worker_t *w)
{
    h1_client_t *hc = calloc(1, sizeof(*hc));
    if (hc != NULL)
        hc->w = w;
    return hc;
}

static void client_destroy(void *client)
{
    h1_client_t *hc = client;
    for (size_t i = 0; i < NUM_BUCKETS; i++) {
        while (hc->buckets[i] != NULL) {
            h1_pool_t *pool = hc->buckets[i];
            hc->buckets[i] = pool->next;
            pool_free(pool);
        }
    }
    free(hc);
}

/* ---------------------------------------------------------------------------------------
 * A bare connection (the WebSocket tunnel's upgrade, backend.h): an exchange that ends once
 * connected, through the same pool addresses, lookups and connect_timeout, the socket handed over.
 */
struct mg_backend_connect {
    h1_exchange_t x;
    const mg_server_conf_t *server; /* for the health rules: a connection is all this side sees */
    mg_backend_connected_t done;
    void *arg;
};

static void hand_over(h1_exchange_t *x, h1_conn_t *conn)
{
    mg_backend_connect_t *c = H2O_STRUCT_FROM_MEMBER(mg_backend_connect_t, x, x);
    h2o_socket_t *sock = conn->sock;
    mg_backend_connected_t done = c->done;
    void *arg = c->arg;
    sock->data = NULL;
    mg_server_report(c->server, MG_ATTEMPT_OK, 0);
    mg_server_attempt_ended(c->server);
    free(conn);
    free(c);
    done(arg, sock, MG_ATTEMPT_OK);
}

static int raw_on_head(void *arg, int status, h2o_iovec_t reason, const mg_backend_header_t *fields, size_t num_fields)
{
    return -1; /* never called: nothing is sent */
}

static mg_body_taken_t raw_on_body(void *arg, const char *data, size_t len)
{
    return MG_BODY_ABORT;
}

static void raw_on_done(void *arg, mg_attempt_result_t result, const char *detail)
{
    mg_backend_connect_t *c = arg;
    mg_backend_connected_t done = c->done;
    void *done_arg = c->arg;
    mg_server_report(c->server, result, 0);
    mg_server_attempt_ended(c->server);
    free(c);
    done(done_arg, NULL, result);
}

static const mg_exchange_callbacks_t raw_callbacks = {raw_on_head, raw_on_body, raw_on_done};

mg_backend_connect_t *mg_backend_connect(mg_worker_t *w, const mg_server_conf_t *server, uint64_t timeout_ms,
                                         mg_backend_connected_t done, void *arg)
{
    h1_client_t *hc = mg__backend_client(w, &mg_backend_client_h1);
    h1_pool_t *pool = hc != NULL ? pool_get(hc, server) : NULL;
    mg_backend_connect_t *c = pool != NULL ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL)
        return NULL;
    c->server = server;
    c->done = done;
    c->arg = arg;
    mg_server_attempt_started(server);
    c->x = (h1_exchange_t){.super = {&mg_backend_client_h1},
                           .pool = pool,
                           .cbs = &raw_callbacks,
                           .arg = c,
                           .connect_timeout_ms = timeout_ms,
                           .raw = 1};
    mg_timer_init(&c->x.timer, &hc->w->timers, on_connect_timeout);
    open_connection(&c->x);
    return c;
}

void mg_backend_connect_cancel(mg_backend_connect_t *c)
{
    exchange_cancel(&c->x.super);
    mg_server_attempt_ended(c->server);
    free(c);
}

const mg_backend_client_ops_t mg_backend_client_h1 = {
    .name = "builtin",
    .create = client_create,
    .destroy = client_destroy,
    .start = exchange_start,
    .resume = exchange_resume,
    .cancel = exchange_cancel,
};
