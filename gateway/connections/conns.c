/*
 * One record per client connection, made at accept: what the connection caps, the idle reclaim
 * and the head deadline share (see internal.h for its fields).
 *
 * A connection is *waiting* while no request of it is in progress and it is not a WebSocket:
 * between two requests, or before its first one (TLS handshake included). The worker keeps its
 * waiting connections in one list, in the order they started waiting, and looks at them from a
 * timer (at most once a second, more often when client_header_timeout is short):
 *
 * - a request head that takes longer than client_header_timeout closes the connection: the
 *   first head of a connection is timed from accept (as nginx does), a further HTTP/1 head from
 *   its first byte (seen by the next look: within a second). h2o 2.2.5 has one timer for both the
 *   keep-alive wait and the head (http1.req_timeout, = client_idle_timeout), which lets a client
 *   drip a head for a whole minute.
 * - under pressure (accept.c), idle connections are closed oldest first to make room: at the cap
 *   any idle one but those accepted in the loop turn that reclaims (h2o has not read them yet),
 *   above the low-water mark only those idle for a second at least (MG_RECLAIM_*).
 *
 * Closing is done under h2o, never around it: h2o 2.2.5 has no call to close a connection it
 * owns, so the socket is shut down (shutdown(2), both ways) and h2o, reading or writing it,
 * gets EOF or EPIPE and closes it through its own path, freeing what it holds; the record goes
 * with the socket's close hook. Only connections with nothing in progress are closed so:
 * - HTTP/1 (plain or TLS): no request in the handler or being answered (`active`), and nothing
 *   of a next request in the input buffer. h2o keeps a request's head at the start of that buffer
 *   until its response is written, and reads a body into it after the head, so an empty buffer
 *   means no head, no body and no response of h2o's own (400, 413, 417, 503) on its way; a head
 *   being received is left to the head deadline, a body to h2o's own timer.
 * - a TLS handshake: never as idle (the next bytes may be the request, and h2o's TLS state is
 *   private); like a head arriving, it has until the head deadline.
 * - HTTP/2: no stream open (none receiving a head or a body, none waiting or answered), and no
 *   GOAWAY sent yet. It gets a GOAWAY naming the last stream it opened, as h2o's own idle timeout
 *   does, and h2o closes it once that is written. h2o_http2_conn_t is in h2o's
 *   http2_internal.h, which the h2o build of deps/h2o installs (Debian's package lacks the khash.h
 *   it needs): these are the fields h2o's own enqueue_goaway (static) uses.
 * - WebSockets: never (`upgraded`).
 */
#include <string.h>
#include <sys/socket.h>
#include "gateway/connections/internal.h"
#include <h2o/http2.h>
/* the h2o of deps/h2o (docs/h2o.md); a build against Debian's unpatched package (-Dh2o=system,
 * for comparisons) leaves HTTP/2 connections alone */
#if __has_include(<khash.h>)
#include <h2o/http2_internal.h>
#define HAVE_HTTP2_INTERNALS 1
#endif

#define SWEEP_MAX_MS 1000
#define SWEEP_MIN_MS 50
#define SWEEP_PRESSURE_MS 250
#define RECLAIM_VISITS 4096 /* waiting connections looked at per reclaim at most */
#define NO_DEADLINE UINT64_MAX

_Static_assert(sizeof(mg_conn_t) <= 80, "the per-connection record stays small (docs/configuration.md says 80 bytes)");

typedef enum conn_kind { KIND_HANDSHAKE, KIND_HTTP1, KIND_HTTP2 } conn_kind_t;

typedef enum conn_state {
    STATE_IDLE, /* nothing in progress: may be closed */
    STATE_HEAD, /* a request head is arriving */
    STATE_BUSY, /* a body is arriving, h2o answers by itself, or a protocol it cannot judge */
} conn_state_t;

static void on_sweep(mg_timer_t *timer);

static void on_socket_close(void *data)
{
    mg_conn_t *c = data;
    if (h2o_linklist_is_linked(&c->link))
        h2o_linklist_unlink(&c->link);
    mg__conns_closed(c->owner, c);
    free(c);
}

mg_conn_t *mg_conn_of(h2o_conn_t *conn)
{
    h2o_socket_t *sock = conn->callbacks->get_socket != NULL ? conn->callbacks->get_socket(conn) : NULL;
    return sock != NULL && sock->on_close.cb == on_socket_close ? sock->on_close.data : NULL;
}

static uint64_t sweep_interval(mg_worker_conns_t *wc)
{
    int over = atomic_load_explicit(&wc->ov->overloaded, memory_order_relaxed);
    uint64_t ms = mg_conns_header_timeout(&wc->w->conf->limits, over) / 4;
    if (over && ms > SWEEP_PRESSURE_MS)
        ms = SWEEP_PRESSURE_MS;
    return ms < SWEEP_MIN_MS ? SWEEP_MIN_MS : ms > SWEEP_MAX_MS ? SWEEP_MAX_MS : ms;
}

static void start_waiting(mg_conn_t *c, uint64_t now)
{
    mg_worker_conns_t *wc = c->owner;
    c->since = now;
    c->head_since = 0;
    c->scanned = 0;
    c->head_done = 0;
    h2o_linklist_insert(&wc->waiting, &c->link);
    if (!mg_timer_is_set(&wc->sweep))
        mg_timer_set(&wc->sweep, sweep_interval(wc));
}

mg_conn_t *mg_conn_attach(mg_worker_conns_t *wc, h2o_socket_t *sock, mg_client_t *client)
{
    mg_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->sock = sock;
    c->owner = wc;
    c->client = client;
    sock->on_close.cb = on_socket_close;
    sock->on_close.data = c;
    start_waiting(c, h2o_now(wc->w->ctx.loop));
    return c;
}

void mg_conn_request_start(mg_conn_t *c)
{
    if (c == NULL)
        return;
    if (c->active++ == 0 && h2o_linklist_is_linked(&c->link))
        h2o_linklist_unlink(&c->link);
    c->served = 1;
    c->requests += c->requests != UINT32_MAX;
}

uint32_t mg_conn_requests(const mg_conn_t *c)
{
    return c != NULL ? c->requests : 0;
}

void mg_conn_request_end(mg_conn_t *c, int upgraded)
{
    if (c == NULL)
        return;
    c->upgraded |= upgraded != 0;
    if (--c->active != 0 || c->upgraded)
        return;
    start_waiting(c, h2o_now(c->owner->w->ctx.loop));
}

uint64_t mg_conns_header_timeout(const mg_limits_conf_t *l, int overloaded)
{
    uint64_t t = l->client_header_timeout_ms;
    if (overloaded && t > 1000)
        t = t / 4 > 1000 ? t / 4 : 1000;
    return t;
}

/*
 * What sock->data is: during a TLS handshake h2o's accept data, whose first member is the
 * listener's accept context; afterwards the h2o_conn_t of the HTTP/1 or HTTP/2 connection, whose
 * first member is the worker's h2o context (h2o.h). HTTP/2 connections are the ones that can push
 * (h2o 2.2.5 sets push_path for HTTP/2 only).
 */
static conn_kind_t kind_of(const mg_conn_t *c)
{
    void *first = NULL;
    if (c->sock->data != NULL)
        memcpy(&first, c->sock->data, sizeof(first));
    if (first != &c->owner->w->ctx)
        return KIND_HANDSHAKE;
    const h2o_conn_t *conn = c->sock->data;
    return conn->callbacks->get_debug_state != NULL ? KIND_HTTP2 : KIND_HTTP1;
}

/* 1 when the input holds the end of a head: an empty line (LF, an optional CR, LF, as
 * picohttpparser reads one) after the request line; the empty lines a client may send before a
 * request line are skipped, as the parser does. Searches only what it has not searched before. */
static int head_complete(mg_conn_t *c, const h2o_buffer_t *in)
{
    const char *start = in->bytes, *end = in->bytes + in->size;
    while (start < end && (*start == '\r' || *start == '\n'))
        start++;
    const char *p = in->bytes + (c->scanned > 2 ? c->scanned - 2 : 0);
    if (p < start)
        p = start;
    for (; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++) {
        if ((p + 1 < end && p[1] == '\n') || (p + 2 < end && p[1] == '\r' && p[2] == '\n'))
            return c->head_done = 1;
    }
    c->scanned = start == end ? 0 : in->size > UINT32_MAX ? UINT32_MAX : (uint32_t)in->size;
    return 0;
}

/* An HTTP/2 connection is idle with no stream open; its first head is timed from accept until it
 * opens a stream (later heads are frames of open streams: h2o's business). */
static conn_state_t examine_http2(const mg_conn_t *c, uint64_t *head_start)
{
#ifndef HAVE_HTTP2_INTERNALS
    return STATE_BUSY;
#else
    const h2o_http2_conn_t *h2 = c->sock->data;
    if (h2->state != H2O_HTTP2_CONN_STATE_OPEN || h2->num_streams.pull.open + h2->num_streams.push.open != 0)
        return STATE_BUSY;
    if (h2->pull_stream_ids.max_open == 0)
        *head_start = c->since;
    return STATE_IDLE;
#endif
}

/* The connection's state, and since when its current head has been awaited (NO_DEADLINE: no
 * head deadline runs). */
static conn_state_t examine(mg_conn_t *c, conn_kind_t kind, uint64_t now, uint64_t *head_start)
{
    const h2o_buffer_t *in = c->sock->input;
    *head_start = NO_DEADLINE;
    if (kind == KIND_HTTP2)
        return examine_http2(c, head_start);
    if (kind == KIND_HANDSHAKE) { /* its client may be about to send a request: not idle */
        *head_start = c->since;
        return STATE_HEAD;
    }
    if (in->size == 0) {
        if (!c->served)
            *head_start = c->since; /* the first head: from accept */
        return STATE_IDLE;
    }
    if (c->head_done || in->size >= H2O_MAX_REQLEN || head_complete(c, in))
        return STATE_BUSY; /* a body (h2o's own timer), or h2o answers a head too long */
    if (c->served && c->head_since == 0)
        c->head_since = now;
    *head_start = c->served ? c->head_since : c->since;
    return STATE_HEAD;
}

/* An idle HTTP/2 connection: a GOAWAY (what enqueue_goaway in h2o's connection.c does), after
 * which h2o closes it; 0 when a write of it is still in flight (a client that does not read):
 * the GOAWAY would wait behind it. */
static int goaway(mg_conn_t *c)
{
#ifndef HAVE_HTTP2_INTERNALS
    return 0;
#else
    h2o_http2_conn_t *h2 = c->sock->data;
    if (h2->_write.buf_in_flight != NULL)
        return 0;
    h2o_http2_encode_goaway_frame(&h2->_write.buf, h2->pull_stream_ids.max_open, H2O_HTTP2_ERROR_NONE,
                                  h2o_iovec_init(H2O_STRLIT("idle connection closed")));
    h2o_http2_conn_request_write(h2);
    h2->state = H2O_HTTP2_CONN_STATE_HALF_CLOSED;
    return 1;
#endif
}

/* Closes an idle connection under h2o: a GOAWAY for HTTP/2, else the socket is shut down, so
 * whatever h2o waits for fails and it closes the connection. */
static void close_under_h2o(mg_conn_t *c, conn_kind_t kind)
{
    c->reclaimed = 1;
    atomic_fetch_add(&c->owner->ov->reclaiming, 1);
    if (kind != KIND_HTTP2 || !goaway(c))
        shutdown(h2o_socket_get_fd(c->sock), SHUT_RDWR);
}

static mg_conn_t *conn_of_link(h2o_linklist_t *node)
{
    return H2O_STRUCT_FROM_MEMBER(mg_conn_t, link, node);
}

/* The next connection from `node` on (oldest first) idle for `min_idle` ms at least, within
 * `*visits`, and its kind; NULL when none. The list is in the order connections started
 * waiting, so the first one too young ends the search. */
static mg_conn_t *next_idle(mg_worker_conns_t *wc, h2o_linklist_t *node, uint64_t now, uint64_t min_idle, size_t *visits,
                            conn_kind_t *kind)
{
    for (; node != &wc->waiting && *visits != 0; node = node->next, --*visits) {
        mg_conn_t *c = conn_of_link(node);
        uint64_t head_start;
        if (now < c->since + min_idle)
            return NULL;
        if (!c->reclaimed && examine(c, *kind = kind_of(c), now, &head_start) == STATE_IDLE)
            return c;
    }
    return NULL;
}

int mg__conns_has_idle(mg_worker_conns_t *wc, uint64_t min_idle)
{
    size_t visits = RECLAIM_VISITS;
    conn_kind_t kind;
    return next_idle(wc, wc->waiting.next, h2o_now(wc->w->ctx.loop), min_idle, &visits, &kind) != NULL;
}

/* Closes up to `max` connections idle for `min_idle` ms, oldest first, looking at `visits` at most. */
static size_t close_idle(mg_worker_conns_t *wc, size_t max, uint64_t min_idle, size_t visits)
{
    uint64_t now = h2o_now(wc->w->ctx.loop);
    h2o_linklist_t *node = wc->waiting.next;
    size_t n = 0;
    conn_kind_t kind;
    mg_conn_t *c;
    while (n < max && (c = next_idle(wc, node, now, min_idle, &visits, &kind)) != NULL) {
        node = c->link.next; /* the record stays linked until h2o closes the socket */
        close_under_h2o(c, kind);
        n++;
    }
    return n;
}

size_t mg_conns_reclaim(mg_worker_conns_t *wc, size_t max, uint64_t min_idle)
{
    size_t n = close_idle(wc, max, min_idle, RECLAIM_VISITS);
    for (size_t i = 0; i < n; i++)
        mg_stat_inc(&wc->stats.reclaimed);
    return n;
}

uint64_t mg_conns_sweep(mg_worker_conns_t *wc, uint64_t now)
{
    int over = atomic_load(&wc->ov->overloaded);
    uint64_t timeout = mg_conns_header_timeout(&wc->w->conf->limits, over);
    for (h2o_linklist_t *node = wc->waiting.next; node != &wc->waiting; node = node->next) {
        mg_conn_t *c = conn_of_link(node);
        conn_kind_t kind = KIND_HTTP1;
        uint64_t head_start;
        if (c->reclaimed || examine(c, kind = kind_of(c), now, &head_start) == STATE_BUSY || head_start == NO_DEADLINE)
            continue;
        if (now - head_start >= timeout) {
            close_under_h2o(c, kind);
            mg_stat_inc(&wc->stats.header_timeouts);
        }
    }
    if (wc->w->stopping) /* connections whose last request ran across the stop */
        close_idle(wc, SIZE_MAX, 0, SIZE_MAX);
    else if (over)
        mg__conns_relieve(wc);
    return h2o_linklist_is_empty(&wc->waiting) ? 0 : sweep_interval(wc);
}

static void on_sweep(mg_timer_t *timer)
{
    mg_worker_conns_t *wc = H2O_STRUCT_FROM_MEMBER(mg_worker_conns_t, sweep, timer);
    uint64_t next = mg_conns_sweep(wc, h2o_now(wc->w->ctx.loop));
    if (next != 0)
        mg_timer_set(timer, next);
}

void mg_conns_worker_init(mg_worker_t *w)
{
    mg_worker_conns_t *wc = calloc(1, sizeof(*wc));
    if (wc == NULL)
        h2o_fatal("no memory");
    wc->w = w;
    wc->ov = w->gw->overload;
    h2o_linklist_init_anchor(&wc->waiting);
    mg_timer_init(&wc->sweep, &w->timers, on_sweep);
    mg__conns_accept_init(wc);
    w->conns = wc;
}

void mg_conns_worker_stop(mg_worker_t *w)
{
    mg_worker_conns_t *wc = w->conns;
    mg__conns_accept_stop(wc);
    /* what a client would send on an idle connection now gets no answer anyway; the sweep goes
     * on closing those whose last request ends later (h2o keeps them alive after it) */
    close_idle(wc, SIZE_MAX, 0, SIZE_MAX);
}

/* ---------------------------------------------------------------------------------------
 * Per-connection request rate: a fixed one-second window per connection, counted on the
 * connection's own record, so no two connections can ever share a count (limits.c decides).
 */
int mg_conn_rate_count(h2o_conn_t *conn, uint64_t now_ms, unsigned cap)
{
    mg_conn_t *c = mg_conn_of(conn);
    /* a connection the gateway did not accept has no record: never refused */
    if (c == NULL)
        return 0;
    if (c->rate_second != (uint32_t)(now_ms / 1000)) {
        c->rate_second = (uint32_t)(now_ms / 1000);
        c->rate_count = 0;
    }
    if (c->rate_count < cap) {
        c->rate_count++;
        return 0;
    }
    if (c->rate_closed)
        return 2;
    c->rate_closed = 1;
    return 1;
}
