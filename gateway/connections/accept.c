/*
 * The listening sockets and their accept loop, limits.max_connections and
 * max_connections_per_client, and the overload state.
 *
 * Listeners are level-triggered h2o sockets: one that is readable and not accepted from wakes
 * the loop again at once. So a worker never leaves a listener in its loop when it will not
 * accept: at the cap it takes its listeners out (HAProxy's maxconn, nginx's worker_connections)
 * and the kernel's backlog holds the clients; when accept fails for want of descriptors or
 * memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) it takes them out for 100 ms. Either way there is no
 * busy loop, whatever the clients do.
 *
 * The cap counts every client connection of the process (one atomic shared by the workers):
 * - from 90% of it (the low-water mark) the process is overloaded: idle connections are closed,
 *   oldest first, to keep it there (nginx's reuse of keep-alive connections when
 *   worker_connections run out), and the head deadline is shortened (conns.c); it stops being
 *   overloaded below 80%. One line on stderr at each change.
 * - at the cap, a worker with idle connections shuts some down and takes its listeners out until
 *   they have closed; one with none takes them out until the process is below the low-water mark
 *   or one of its connections becomes idle, and looks again every 100 ms (the other workers'
 *   closes are not signalled to it).
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "gateway/connections/internal.h"

#define ACCEPTS_PER_WAKEUP 16
/* At the cap, idle connections closed per turn for the clients waiting in the backlog: a few, so
 * that one client does not cost many idle ones (the cycle repeats as long as clients wait). */
#define RECLAIM_AT_CAP 4
#define LOOK_MS 100
#define ERROR_LOG_INTERVAL_MS 10000

unsigned mg_max_connections(const mg_overload_t *ov, const mg_config_t *conf)
{
    return conf->limits.max_connections != 0 ? conf->limits.max_connections : ov->auto_max_connections;
}

/* 90% of the cap: overloaded from there; a full worker accepts again below it. */
static uint64_t low_water(unsigned cap)
{
    return cap - (cap / 10 > 0 ? cap / 10 : 1);
}

/* 80%: overloaded until below it (two marks, so the state does not flap). */
static uint64_t calm_water(unsigned cap)
{
    return cap - (cap / 5 > 0 ? cap / 5 : 1);
}

static unsigned cap_of(mg_worker_conns_t *wc)
{
    return mg_max_connections(wc->ov, wc->w->conf);
}

/* ---------------------------------------------------------------------------------------
 * Overload state: one line when it starts and when it ends, by whichever worker sees it first.
 */
static void note_level(mg_worker_conns_t *wc, uint64_t open, unsigned cap)
{
    mg_overload_t *ov = wc->ov;
    int over = atomic_load(&ov->overloaded);
    int want = over ? open >= calm_water(cap) : open >= low_water(cap);
    if (want == over || !atomic_compare_exchange_strong(&ov->overloaded, &over, want))
        return;
    if (want)
        fprintf(stderr,
                "matchgate: overloaded: %" PRIu64 " of %u client connections (limits.max_connections): idle connections are "
                "closed oldest first, client_header_timeout is %" PRIu64 " ms\n",
                open, cap, mg_conns_header_timeout(&wc->w->conf->limits, 1));
    else
        fprintf(stderr, "matchgate: no longer overloaded: %" PRIu64 " of %u client connections\n", open, cap);
}

/* ---------------------------------------------------------------------------------------
 * Pausing and resuming a worker's listeners
 */
static void resume(mg_worker_conns_t *wc)
{
    mg_worker_t *w = wc->w;
    if (wc->paused == MG_PAUSE_NONE)
        return;
    wc->paused = MG_PAUSE_NONE;
    atomic_fetch_sub(&wc->ov->paused, 1);
    mg_timer_cancel(&wc->resume);
    for (size_t i = 0; i < w->gw->num_listeners && !w->stopping; i++)
        if (w->listeners[i] != NULL)
            h2o_socket_read_start(w->listeners[i], mg_conns_on_accept);
}

static void pause_listeners(mg_worker_conns_t *wc, mg_pause_t why)
{
    mg_worker_t *w = wc->w;
    if (wc->paused == MG_PAUSE_NONE) {
        atomic_fetch_add(&wc->ov->paused, 1);
        for (size_t i = 0; i < w->gw->num_listeners; i++)
            if (w->listeners[i] != NULL)
                h2o_socket_read_stop(w->listeners[i]);
    }
    wc->paused = why;
    mg_stat_inc(why == MG_PAUSE_ERROR ? &wc->stats.pauses_error : &wc->stats.pauses_full);
    mg_timer_set(&wc->resume, LOOK_MS);
}

static void on_resume_timer(mg_timer_t *timer)
{
    mg_worker_conns_t *wc = H2O_STRUCT_FROM_MEMBER(mg_worker_conns_t, resume, timer);
    if (wc->paused == MG_PAUSE_FULL && atomic_load(&wc->ov->open) >= low_water(cap_of(wc)) &&
        !mg__conns_has_idle(wc, MG_RECLAIM_AT_CAP_MS)) {
        mg_timer_set(timer, LOOK_MS);
        return;
    }
    resume(wc);
}

void mg__conns_accept_init(mg_worker_conns_t *wc)
{
    mg_timer_init(&wc->resume, &wc->w->timers, on_resume_timer);
}

void mg__conns_accept_stop(mg_worker_conns_t *wc)
{
    mg_timer_cancel(&wc->resume);
    if (wc->paused != MG_PAUSE_NONE) {
        wc->paused = MG_PAUSE_NONE;
        atomic_fetch_sub(&wc->ov->paused, 1);
    }
}

void mg__conns_closed(mg_worker_conns_t *wc, mg_conn_t *c)
{
    mg_overload_t *ov = wc->ov;
    unsigned cap = cap_of(wc);
    if (c->reclaimed)
        atomic_fetch_sub(&ov->reclaiming, 1);
    mg_clients_release(ov->clients, c->client);
    uint64_t open = atomic_fetch_sub(&ov->open, 1) - 1;
    note_level(wc, open, cap);
    if ((wc->paused == MG_PAUSE_RECLAIM && open < cap) || (wc->paused == MG_PAUSE_FULL && open < low_water(cap)))
        resume(wc);
}

/* Reclaims what takes the process back to its low-water mark. The number is reserved in
 * `reclaiming` first, so that workers relieving at once do not each close the same excess. */
void mg__conns_relieve(mg_worker_conns_t *wc)
{
    mg_overload_t *ov = wc->ov;
    uint64_t mark = low_water(cap_of(wc)), closing = atomic_load(&ov->reclaiming), want;
    do {
        uint64_t open = atomic_load(&ov->open);
        if (open <= closing + mark)
            return;
        want = open - closing - mark < ACCEPTS_PER_WAKEUP ? open - closing - mark : ACCEPTS_PER_WAKEUP;
    } while (!atomic_compare_exchange_weak(&ov->reclaiming, &closing, closing + want));
    mg_conns_reclaim(wc, want, MG_RECLAIM_PRESSURE_MS); /* counts each one it closes in `reclaiming` itself */
    atomic_fetch_sub(&ov->reclaiming, want);
}

/* ---------------------------------------------------------------------------------------
 * Accepting
 */

/* One slot of the cap, taken before accept(2) so that workers accepting at once cannot pass it. */
static int take_slot(mg_overload_t *ov, unsigned cap)
{
    uint_fast64_t n = atomic_load(&ov->open);
    do {
        if (n >= cap)
            return 0;
    } while (!atomic_compare_exchange_weak(&ov->open, &n, n + 1));
    return 1;
}

static void give_slot(mg_overload_t *ov)
{
    atomic_fetch_sub(&ov->open, 1);
}

/* At the cap: shut idle connections down and wait for them to close, or wait for room. */
static void make_room(mg_worker_conns_t *wc)
{
    pause_listeners(wc, mg_conns_reclaim(wc, RECLAIM_AT_CAP, MG_RECLAIM_AT_CAP_MS) != 0 ? MG_PAUSE_RECLAIM : MG_PAUSE_FULL);
}

static const char *const error_names[MG_ACCEPT_ERRORS] = {"EMFILE", "ENFILE", "ENOMEM", "other"};

/* accept(2) failed with `err`: 1 to go on accepting, 0 to stop for this wakeup. */
static int accept_failed(mg_worker_conns_t *wc, int err)
{
    int kind = err == EMFILE                     ? MG_ACCEPT_EMFILE
               : err == ENFILE                   ? MG_ACCEPT_ENFILE
               : err == ENOMEM || err == ENOBUFS ? MG_ACCEPT_ENOMEM
                                                 : MG_ACCEPT_OTHER;
    if (err == EAGAIN || err == EWOULDBLOCK)
        return 0;
    mg_stat_inc(&wc->stats.accept_errors[kind]);
    if (kind == MG_ACCEPT_OTHER) /* the client left (ECONNABORTED, EPROTO...): the next one may be fine */
        return 1;
    uint64_t now = h2o_now(wc->w->ctx.loop);
    if (wc->last_error_log == 0 || now - wc->last_error_log >= ERROR_LOG_INTERVAL_MS) {
        wc->last_error_log = now;
        fprintf(stderr, "matchgate: worker %u: accept failed: %s (%s): its listeners pause for %d ms\n", wc->w->id, strerror(err),
                error_names[kind], LOOK_MS);
    }
    /* out of descriptors, whatever max_connections says: idle connections hold some */
    if (kind != MG_ACCEPT_ENOMEM)
        mg_conns_reclaim(wc, ACCEPTS_PER_WAKEUP, MG_RECLAIM_AT_CAP_MS);
    pause_listeners(wc, MG_PAUSE_ERROR);
    return 0;
}

/* A socket just accepted, holding a slot: refused at once, or given its record and to h2o. */
static void admit(mg_worker_conns_t *wc, h2o_accept_ctx_t *actx, h2o_socket_t *sock)
{
    mg_overload_t *ov = wc->ov;
    struct sockaddr_storage ss;
    socklen_t len = h2o_socket_getpeername(sock, (struct sockaddr *)&ss); /* cached: the handler reads it too */
    int refused;
    mg_client_t *client =
        mg_clients_acquire(ov->clients, (struct sockaddr *)&ss, len, wc->w->conf->limits.max_connections_per_client, &refused);
    mg_conn_t *c = refused ? NULL : mg_conn_attach(wc, sock, client);
    if (c == NULL) {
        mg_stat_inc(refused ? &wc->stats.refused_per_client : &wc->stats.refused_memory);
        mg_clients_release(ov->clients, client);
        give_slot(ov);
        h2o_socket_close(sock);
        return;
    }
    mg_stat_inc(&wc->stats.accepted);
    note_level(wc, atomic_load(&ov->open), cap_of(wc));
    h2o_accept(actx, sock);
}

void mg_conns_on_accept(h2o_socket_t *listener, const char *err)
{
    h2o_accept_ctx_t *actx = listener->data;
    mg_worker_conns_t *wc = mg_worker_of(actx->ctx)->conns;
    size_t accepted = 0;
    if (err != NULL)
        return;
    for (int i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
        if (!take_slot(wc->ov, cap_of(wc))) {
            make_room(wc);
            break;
        }
        h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
        if (sock == NULL) {
            int e = errno;
            give_slot(wc->ov);
            if (accept_failed(wc, e))
                continue;
            break;
        }
        admit(wc, actx, sock);
        accepted++;
    }
    if (accepted != 0 && atomic_load(&wc->ov->overloaded))
        mg__conns_relieve(wc);
}

/* ---------------------------------------------------------------------------------------
 * Start: the descriptor limit
 */

/* ---------------------------------------------------------------------------------------
 * Listening sockets and descriptors (main thread)
 */
int mg_listen_socket(const struct sockaddr_storage *addr, socklen_t len, int backlog, int reuseport)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), on = 1;
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (reuseport)
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    if (addr->ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
    if (bind(fd, (const struct sockaddr *)addr, len) != 0 || listen(fd, backlog) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

uint64_t mg_nofile_raise(uint64_t *soft_before, uint64_t *hard)
{
    uint64_t target = mg_config_nofile_target(soft_before, hard);
    struct rlimit rl = {.rlim_cur = target, .rlim_max = *hard == UINT64_MAX ? RLIM_INFINITY : *hard};
    if (*soft_before >= target || setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return *soft_before;
    return target;
}

int mg_overload_init(mg_gateway_t *gw)
{
    static mg_overload_t overload; /* static: reachable until the process exits, like the parked workers */
    mg_overload_t *ov = &overload;
    uint64_t before, hard;
    const mg_config_t *conf = gw->conf;

    ov->nofile = mg_nofile_raise(&before, &hard);
    ov->auto_max_connections = mg_config_auto_max_connections(ov->nofile, conf->workers, conf->num_listeners);
    if ((ov->clients = mg_clients_new()) == NULL) {
        fprintf(stderr, "matchgate: out of memory\n");
        return -1;
    }
    char hard_text[24] = "unlimited";
    if (hard != UINT64_MAX)
        snprintf(hard_text, sizeof(hard_text), "%" PRIu64, hard);
    fprintf(stderr, "matchgate: open files limit %" PRIu64 " (soft limit was %" PRIu64 ", hard limit %s); max_connections %u%s\n",
            ov->nofile, before, hard_text, mg_max_connections(ov, conf), conf->limits.max_connections == 0 ? " (auto)" : "");
    gw->overload = ov;
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * GET /metrics
 */
typedef struct conn_metric {
    const char *name, *type, *labels, *help;
    size_t offset; /* of its mg_stat_t in mg_conns_stats_t */
} conn_metric_t;

#define STAT(field) offsetof(mg_conns_stats_t, field)
#define ERROR_STAT(kind) (STAT(accept_errors) + (kind) * sizeof(mg_stat_t))

static const conn_metric_t conn_metrics[] = {
    {"matchgate_connections_accepted_total", "counter", "", "Client connections accepted (not those refused at once).",
     STAT(accepted)},
    {"matchgate_connections_refused_total", "counter", "{reason=\"per_client\"}",
     "Client connections closed at once: their address had limits.max_connections_per_client (per_client), or no memory "
     "for their record (memory).",
     STAT(refused_per_client)},
    {"matchgate_connections_refused_total", "counter", "{reason=\"memory\"}", NULL, STAT(refused_memory)},
    {"matchgate_connections_closed_total", "counter", "{reason=\"idle_reclaimed\"}",
     "Client connections the gateway closed: idle ones to make room under pressure (idle_reclaimed), and those whose "
     "request head took longer than limits.client_header_timeout (header_timeout).",
     STAT(reclaimed)},
    {"matchgate_connections_closed_total", "counter", "{reason=\"header_timeout\"}", NULL, STAT(header_timeouts)},
    {"matchgate_listener_pauses_total", "counter", "{reason=\"max_connections\"}",
     "Times a worker took its listeners out of its loop: at limits.max_connections, or after accept failed for want of "
     "descriptors or memory (accept_error).",
     STAT(pauses_full)},
    {"matchgate_listener_pauses_total", "counter", "{reason=\"accept_error\"}", NULL, STAT(pauses_error)},
    {"matchgate_accept_errors_total", "counter", "{error=\"EMFILE\"}",
     "accept(2) failures: EMFILE, ENFILE, ENOMEM (with ENOBUFS), other (a client gone before it was accepted).",
     ERROR_STAT(MG_ACCEPT_EMFILE)},
    {"matchgate_accept_errors_total", "counter", "{error=\"ENFILE\"}", NULL, ERROR_STAT(MG_ACCEPT_ENFILE)},
    {"matchgate_accept_errors_total", "counter", "{error=\"ENOMEM\"}", NULL, ERROR_STAT(MG_ACCEPT_ENOMEM)},
    {"matchgate_accept_errors_total", "counter", "{error=\"other\"}", NULL, ERROR_STAT(MG_ACCEPT_OTHER)},
    {"matchgate_request_bodies_refused_total", "counter", "",
     "Requests refused with 503 overloaded before their body was read: limits.max_buffered_request_bytes was held.",
     STAT(bodies_refused)},
};

static uint64_t sum_workers(mg_gateway_t *gw, size_t offset)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < gw->num_workers; i++)
        if (gw->workers[i].conns != NULL)
            total += mg_stat_read((mg_stat_t *)((char *)&gw->workers[i].conns->stats + offset));
    return total;
}

static void put_gauge(FILE *out, const char *name, const char *help, uint64_t value)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n%s %" PRIu64 "\n", name, help, name, name, value);
}

void mg_conns_put_metrics(FILE *out, mg_gateway_t *gw, const mg_config_t *conf)
{
    mg_overload_t *ov = gw->overload;
    put_gauge(out, "matchgate_connections", "Client connections open (WebSockets included).", atomic_load(&ov->open));
    put_gauge(out, "matchgate_connections_max", "limits.max_connections in force.", mg_max_connections(ov, conf));
    put_gauge(out, "matchgate_client_addresses", "Client addresses with a connection open.", mg_clients_size(ov->clients));
    put_gauge(out, "matchgate_overloaded", "1 from 90% of limits.max_connections until below 80%, else 0.",
              (uint64_t)atomic_load(&ov->overloaded));
    put_gauge(out, "matchgate_listeners_paused", "Workers whose listeners are out of their loop now.", atomic_load(&ov->paused));
    put_gauge(out, "matchgate_open_files_limit", "RLIMIT_NOFILE of the process (raised to the hard limit at start).", ov->nofile);
    put_gauge(out, "matchgate_buffered_request_bytes", "Request body bytes held (announced, or max_request_body when not).",
              atomic_load(&ov->buffered));
    put_gauge(out, "matchgate_buffered_request_bytes_max", "limits.max_buffered_request_bytes in force (0: no bound).",
              conf->limits.max_buffered_request_bytes);
    for (size_t i = 0; i < sizeof(conn_metrics) / sizeof(conn_metrics[0]); i++) {
        const conn_metric_t *m = &conn_metrics[i];
        if (m->help != NULL)
            fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
        fprintf(out, "%s%s %" PRIu64 "\n", m->name, m->labels, sum_workers(gw, m->offset));
    }
}
