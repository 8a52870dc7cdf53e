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
 *
 * The pools and the addresses are in client_h1_pool.c; what the two files share, client_h1.h.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/backend/client_h1.h"

static void open_connection(h1_exchange_t *x);
static void process(h1_exchange_t *x);

/* ---------------------------------------------------------------------------------------
 * Ending an exchange
 */

/* Lets go of the connection (kept when `reuse`) and reports. Touches nothing of x after on_done. */
static void finish(h1_exchange_t *x, mg_attempt_result_t result, const char *detail, int reuse);

void mg__h1_fail(h1_exchange_t *x, mg_attempt_result_t result, const char *detail)
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
    mg__h1_fail(x, x->late_result, x->late_detail);
    mg__backend_after_run(w);
}

/* ---------------------------------------------------------------------------------------
 * The input buffer
 */

/* A backend connection's input starts at 32 KiB rather than h2o's 8 KiB: a response head with a
 * 16 KiB body came in one read that doubled the buffer twice, copying what it held each time
 * (3 to 4% of matchgate's CPU for 16 KiB responses, docs/performance.md). Kept per worker
 * thread like h2o's own (none under AddressSanitizer, which catches a use after release only
 * while buffers are really freed); an idle connection holds none (release_input). */
#define FIRST_BUFFER (32 * 1024)
#if defined(__SANITIZE_ADDRESS__)
#define FIRST_BUFFERS_KEPT 0
#else
#define FIRST_BUFFERS_KEPT 256 /* one per busy connection up to 256 at once: 8 MiB kept at most */
#endif
static __thread h2o_buffer_prototype_t input_prototype = {{FIRST_BUFFERS_KEPT}, {FIRST_BUFFER}, &h2o_socket_buffer_mmap_settings};

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
        conn->sock->input = &input_prototype._initial_buf;
        h2o_buffer__do_free(in);
    }
}

/* ---------------------------------------------------------------------------------------
 * An exchange's end: its connection back to the pool (client_h1_pool.c) or closed
 */
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
            mg__h1_pool_checkin(x->pool, conn);
        } else
            mg__h1_conn_close(conn);
    }
    x->cbs->on_done(x->arg, result, detail);
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
        mg__h1_conn_close(conn);
        if (x->tries < x->pool->num_addrs)
            mg__h1_connect_next(x); /* the name's next address */
        else
            mg__h1_fail(x, MG_ATTEMPT_NOT_CONNECTED, err);
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
void mg__h1_connect_next(h1_exchange_t *x)
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
    h2o_buffer_set_prototype(&conn->sock->input, &input_prototype);
    conn->pool = pool;
    conn->x = x;
    conn->sock->data = conn;
    x->conn = conn;
}

static void on_connect_timeout(mg_timer_t *timer)
{
    h1_exchange_t *x = H2O_STRUCT_FROM_MEMBER(h1_exchange_t, timer, timer);
    mg_worker_t *w = x->pool->hc->w;
    mg__h1_fail(x, MG_ATTEMPT_CONNECT_TIMEOUT, "connection timed out");
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
        mg__h1_pool_resolve(pool);
    if (pool->num_addrs == 0)
        h2o_linklist_insert(&pool->waiting, &x->wait_link);
    else
        mg__h1_connect_next(x);
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
        mg__h1_conn_close(conn);
        x->retried = 1;
        open_connection(x);
        return;
    }
    if (x->head_done && x->body.framing == MG_H1_UNTIL_CLOSE && x->eof)
        finish(x, MG_ATTEMPT_OK, "", 0);
    else
        mg__h1_fail(x, x->head_done || !x->got_bytes ? MG_ATTEMPT_FAILED : MG_ATTEMPT_BAD_RESPONSE, detail);
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
        mg__h1_fail(x, MG_ATTEMPT_ABORTED, "the response was refused");
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
            mg__h1_fail(x, err, why);
            return -1;
        }
        if (len == 0)
            return 1;
        if (head.status >= 200 || head.status == 101)
            return take_head(x, &head, (size_t)len);
        take_input(x->conn, (size_t)len); /* an interim 1xx */
    }
}

/* Room made at once for the body's next reads. h2o reads a socket until it would block, and when
 * the input fills it doubles it and copies what it holds: a 1 MiB body was copied about once more
 * that way (16% of matchgate's CPU for 1 MiB responses, docs/performance.md). The room is what is
 * left of a Content-Length body, or, for a chunked or close-delimited one, what a body that
 * already came in more than one first buffer is likely to need; at most BODY_ROOM. The buffer
 * goes with the response (forward.c takes it) or back at idle (release_input). */
#define BODY_ROOM (256 * 1024)

static void make_room_for_body(h1_exchange_t *x, size_t arrived)
{
    h2o_buffer_t **in = &x->conn->sock->input;
    uint64_t want = x->body.framing == MG_H1_LENGTH ? x->body.left : arrived > FIRST_BUFFER ? BODY_ROOM : 0;
    if (want > BODY_ROOM)
        want = BODY_ROOM;
    if (want <= FIRST_BUFFER || x->body_end)
        return;
    size_t room = (*in)->bytes == NULL ? 0 : (*in)->capacity - (*in)->size - (size_t)((*in)->bytes - (*in)->_buf);
    if (room < want)
        h2o_buffer_reserve(in, want); /* out of memory: h2o's next read reports it */
}

/* Decodes what the connection's input holds (when nothing decoded waits) and hands it over. 0 when
 * the input is used up or the exchange paused, -1 when it ended. */
static int read_body(h1_exchange_t *x)
{
    size_t arrived = x->conn->sock->input->size;
    for (;;) {
        h2o_buffer_t *in = x->conn->sock->input;
        if (x->pending == 0 && in->size != 0 && !x->body_end) {
            size_t body, extra;
            const char *why = NULL;
            mg_h1_decoded_t d = mg_h1_body_decode(&x->body, in->bytes, in->size, &body, &extra, &why);
            if (d == MG_H1_ERROR) {
                mg__h1_fail(x, MG_ATTEMPT_BAD_RESPONSE, why);
                return -1;
            }
            in->size = body + extra; /* chunks are decoded in place */
            x->pending = body;
            x->body_end = d == MG_H1_END;
        }
        if (x->pending != 0 && x->pending == in->size && x->cbs->take_body_buffer != NULL &&
            x->cbs->take_body_buffer(x->arg, &x->conn->sock->input)) {
            x->pending = 0; /* the whole input went, and an empty buffer took its place */
            h2o_buffer_set_prototype(&x->conn->sock->input, &input_prototype);
        } else if (x->pending != 0) {
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
                mg__h1_fail(x, MG_ATTEMPT_ABORTED, "the response was refused");
                return -1;
            }
        }
        if (x->body_end)
            return 0;
        if (x->conn->sock->input->size == 0) {
            make_room_for_body(x, arrived);
            return 0;
        }
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
            mg__h1_fail(x, MG_ATTEMPT_BAD_RESPONSE, "the backend sent bytes after the end of its response");
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
        mg__h1_conn_close(conn);
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
    h1_pool_t *pool = mg__h1_pool_get(hc, req->server);
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
    h1_conn_t *conn = mg__h1_pool_checkout(pool);
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
        mg__h1_conn_close(x->conn);
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
            mg__h1_pool_free(pool);
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

static const mg_exchange_callbacks_t raw_callbacks = {raw_on_head, raw_on_body, NULL, raw_on_done};

mg_backend_connect_t *mg_backend_connect(mg_worker_t *w, const mg_server_conf_t *server, uint64_t timeout_ms,
                                         mg_backend_connected_t done, void *arg)
{
    h1_client_t *hc = mg__backend_client(w, &mg_backend_client_h1);
    h1_pool_t *pool = hc != NULL ? mg__h1_pool_get(hc, server) : NULL;
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
