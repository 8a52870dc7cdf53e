/*
 * The process: listeners, worker threads and shutdown.
 *
 * Each worker owns an h2o loop, its own SO_REUSEPORT socket per listener (the kernel spreads
 * connections), its own libcurl multi handle, and every connection it accepts for the
 * connection's whole life. The main thread only waits for signals (and reloads on SIGHUP); the
 * admin API has a thread of its own (admin.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <openssl/err.h>
#include "gateway/internal.h"
#include "gateway/quota/quota.h"
#include "gateway/request/request.h"
#include "gateway/process.h"
#include "gateway/admin/admin.h"
#include "gateway/backend/backend.h"
#include "gateway/connections/connections.h"
#include "gateway/websocket/websocket.h"
#include "gateway/thread_name.h"

#define LISTEN_BACKLOG 1024
#define EVICT_INTERVAL_MS 1000

/* The process's one gateway (mg_gateway_run runs once per process). A static rather than the
 * caller's: the workers and the admin thread park holding it until the process exits, and what it
 * points to must stay reachable to the end (no false leak reports). */
static mg_gateway_t gateway;

/* Worker 0 forgets idle throttle keys: any thread may, one is enough, and a worker's timer
 * costs no thread of its own. */
static void on_evict_timer(mg_timer_t *timer)
{
    mg_worker_t *w = H2O_STRUCT_FROM_MEMBER(mg_worker_t, evict_timer, timer);
    /* the totals of listed tenants outlive their keys (GET /tenants) */
    mg_tenant_totals_evict(w->gw->tenant_totals, w->gw->throttle, w->conf, mg_throttle_now());
    mg_timer_set(timer, EVICT_INTERVAL_MS);
}

static void close_listeners(mg_worker_t *w)
{
    for (size_t i = 0; i < w->gw->num_listeners; i++) {
        if (w->listeners[i] == NULL)
            continue;
        h2o_socket_read_stop(w->listeners[i]);
        h2o_socket_close(w->listeners[i]);
        w->listeners[i] = NULL;
    }
}

/* Runs on the worker when the main thread asks it to stop. */
static void on_stop_message(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    mg_worker_t *w = H2O_STRUCT_FROM_MEMBER(mg_worker_t, stop_receiver, receiver);
    mg_messages_free(messages);
    if (w->stopping)
        return;
    w->stopping = 1;
    mg_timer_cancel(&w->evict_timer);
    close_listeners(w);
    mg_conns_worker_stop(w);
    /* HTTP/1 connections close after their current response, HTTP/2 ones get GOAWAY */
    h2o_context_request_shutdown(&w->ctx);
    mg_ws_worker_shutdown(w);
}

static void worker_init(mg_worker_t *w)
{
    size_t num_listeners = w->gw->num_listeners;
    h2o_loop_t *loop = w->ctx.loop;
    mg_timers_init(&w->timers, loop);
    if (mg_backend_worker_init(w) != 0) {
        fprintf(stderr, "matchgate: worker %u: out of memory for its backend clients\n", w->id);
        abort();
    }
    if ((w->auth_cache = mg_auth_cache_new(w->gw->conf->limits.auth_cache_entries)) == NULL) {
        fprintf(stderr, "matchgate: worker %u: out of memory for its verified tokens\n", w->id);
        abort();
    }
    mg_timer_init(&w->evict_timer, &w->timers, on_evict_timer);
    if (w->id == 0)
        mg_timer_set(&w->evict_timer, EVICT_INTERVAL_MS);
    w->accept_ctxs = calloc(num_listeners, sizeof(*w->accept_ctxs));
    w->listeners = calloc(num_listeners, sizeof(*w->listeners));
    mg_conns_worker_init(w);
    for (size_t i = 0; i < num_listeners; i++) {
        w->accept_ctxs[i].ctx = &w->ctx;
        w->accept_ctxs[i].hosts = w->gw->globalconf.hosts;
        w->accept_ctxs[i].ssl_ctx = w->gw->ssl_ctxs[i];
        w->listeners[i] = h2o_evloop_socket_create(loop, w->listen_fds[i], H2O_SOCKET_FLAG_DONT_READ);
        w->listeners[i]->data = &w->accept_ctxs[i];
        h2o_socket_read_start(w->listeners[i], mg_conns_on_accept);
    }
}

/* A worker's progress, for the main thread: ready to receive a stop message, or finished. */
static void worker_report(mg_gateway_t *gw, unsigned *counter)
{
    pthread_mutex_lock(&gw->workers_lock);
    (*counter)++;
    pthread_cond_broadcast(&gw->workers_cond);
    pthread_mutex_unlock(&gw->workers_lock);
}

/* A finished worker reports and then parks until the process exits: h2o keeps per-thread free
 * lists (memory pools, socket buffers) that no API releases, and a returning thread would take
 * the only references to them with it. */
static void worker_park(mg_gateway_t *gw)
{
    worker_report(gw, &gw->workers_done);
    pthread_mutex_lock(&gw->workers_lock);
    for (;;)
        pthread_cond_wait(&gw->workers_cond, &gw->workers_lock);
}

/* Stopping, nothing in flight, no WebSocket session left, and every HTTP/2 connection closed after its GOAWAY (h2o does
 * that within about a second). Idle HTTP/1 keep-alive connections are not waited for: h2o 2.2.5
 * has no way to close them early, and a client sending on one now gets the connection closed. */
static int worker_done(mg_worker_t *w)
{
    return w->stopping && mg_stat_read(&w->stats.in_flight) == 0 && w->turns == 0 && mg_ws_worker_sessions(w) == 0 &&
           h2o_linklist_is_empty(&w->ctx.http2._conns);
}

/* Socket buffers (8 KiB) a worker keeps for reuse instead of h2o's 16: each request empties
 * and refills a few of them (client and backend input, the response relay), and with more than
 * a handful of connections busy at once 16 kept meant a malloc and a free for most of them
 * (docs/performance.md, cost-per-request). 512 bounds what is kept idle at 4 MiB per worker.
 * h2o's own count under AddressSanitizer, which finds a buffer used after its release only
 * while it is really freed. */
#if defined(__SANITIZE_ADDRESS__)
#define MG_SOCKET_BUFFERS_KEPT 16
#else
#define MG_SOCKET_BUFFERS_KEPT 512
#endif

/* Small shared allocations (every request's state, gateway/request/handler.c) a worker keeps for reuse:
 * h2o 2.2.5 mallocs and frees each, deps/h2o patch 0007 lets a thread recycle them. 1024 covers
 * the requests of 1,000 connections at once (1 MiB kept at most). None under AddressSanitizer. */
#if defined(H2O_HAS_SHARED_RECYCLER) && !defined(__SANITIZE_ADDRESS__)
#define MG_SHARED_ENTRIES_KEPT 1024
/* The same for request pools' 4 KiB chunks (one or two per request): 512 kept, 2 MiB at most. */
#define MG_POOL_CHUNKS_KEPT 512
#endif

static void *worker_main(void *arg)
{
    mg_worker_t *w = arg;
    mg_thread_name("mg-worker-%u", w->id);
    /* everything h2o is created on the worker's own thread: h2o sockets take their buffers
     * from thread-local free lists, which must not be shared between threads */
    h2o_socket_buffer_prototype.allocator.max = MG_SOCKET_BUFFERS_KEPT; /* thread-local */
#ifdef MG_SHARED_ENTRIES_KEPT
    h2o_mem_shared_recycler.max = MG_SHARED_ENTRIES_KEPT; /* thread-local */
    h2o_mem_set_pool_chunks_kept(MG_POOL_CHUNKS_KEPT);
#endif
    h2o_context_init(&w->ctx, h2o_evloop_create(), &w->gw->globalconf);
    w->queue = h2o_multithread_create_queue(w->ctx.loop);
    h2o_multithread_register_receiver(w->queue, &w->stop_receiver, on_stop_message);
    mg_dispatch_worker_init(w);
    if (mg_ws_worker_init(w) != 0) {
        fprintf(stderr, "matchgate: worker %u: out of memory for its WebSocket sessions\n", w->id);
        abort();
    }
    mg_worker_conf_init(w);
    worker_init(w);
    mg_store_worker_init(w); /* after the timers: the store client's timer is one of them */
    worker_report(w->gw, &w->gw->workers_ready);
    /* h2o_evloop_run returns -1 on EINTR: keep looping, or a signal would stop the worker */
    while (!worker_done(w)) {
        h2o_evloop_run(w->ctx.loop, INT32_MAX);
        mg_loop_turn_ended(w);
    }
    mg_backend_worker_dispose(w);
    mg_dispatch_worker_dispose(w);
    mg_store_worker_dispose(w);
    mg_worker_conf_dispose(w);
    mg_auth_cache_free(w->auth_cache);
    worker_park(w->gw);
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * Setup (main thread)
 */

static SSL_CTX *open_tls(const mg_listen_conf_t *l)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(ctx, l->tls_certificate) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, l->tls_key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        char err[256];
        ERR_error_string_n(ERR_get_error(), err, sizeof(err));
        fprintf(stderr, "matchgate: %s: cannot load certificate %s / key %s: %s\n", l->address, l->tls_certificate, l->tls_key,
                err);
        SSL_CTX_free(ctx);
        return NULL;
    }
    /* ALPN: h2 first, then http/1.1 */
    h2o_ssl_register_alpn_protocols(ctx, h2o_http2_alpn_protocols);
    return ctx;
}

static void setup_globalconf(mg_gateway_t *gw)
{
    mg_config_t *conf = gw->conf;
    h2o_config_init(&gw->globalconf);
    /* the gateway writes Server itself (response.c), as a field the route's response actions may
     * replace or remove */
    gw->globalconf.server_name = h2o_iovec_init(H2O_STRLIT(""));
    /* one byte more than the limit: h2o's chunked reader refuses at the limit itself, its
     * content-length check only beyond it; handler.c enforces the exact limit */
    gw->globalconf.max_request_entity_size = conf->limits.max_request_body + 1;
#ifdef H2O_HAS_ON_REQUEST_BODY_START /* deps/h2o patch 0005; not in Debian's h2o (-Dh2o=system) */
    gw->globalconf.on_request_body_start = mg_bodies_on_start;
#endif
    gw->globalconf.http1.req_timeout = conf->limits.client_idle_timeout_ms;
    gw->globalconf.http2.idle_timeout = conf->limits.client_idle_timeout_ms;
    /* limits.tls_handshake_timeout, else the smaller of h2o's default (10 s) and
     * client_idle_timeout: a client that never ends its handshake is an idle client too */
    gw->globalconf.handshake_timeout = conf->limits.tls_handshake_timeout_ms != 0    ? conf->limits.tls_handshake_timeout_ms
                                       : conf->limits.client_idle_timeout_ms < 10000 ? conf->limits.client_idle_timeout_ms
                                                                                     : 10000;
    gw->globalconf.http2.max_concurrent_requests_per_connection = conf->limits.max_http2_streams;
#ifdef H2O_HAS_HTTP2_MAX_REQUESTS_PER_CONNECTION /* deps/h2o patch 0011; HTTP/1 is request/handler.c's */
    gw->globalconf.http2.max_requests_per_connection = conf->limits.max_requests_per_connection;
#endif
    h2o_hostconf_t *host = h2o_config_register_host(&gw->globalconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    /* one "/" handler: h2o matches paths in registration order, the route tree does the rest */
    gw->pathconf = h2o_config_register_path(host, "/", 0);
    mg_handler_register(gw, host, gw->pathconf);
}

static int open_access_log(mg_config_t *conf)
{
    mg_errors_t errs = {0};
    int ret = mg_config_open_access_log(conf, &errs);
    mg_errors_print(&errs, stderr);
    mg_errors_clear(&errs);
    return ret;
}

static int setup_listeners(mg_gateway_t *gw)
{
    mg_config_t *conf = gw->conf;
    gw->ssl_ctxs = calloc(conf->num_listeners, sizeof(*gw->ssl_ctxs));
    for (size_t i = 0; i < conf->num_listeners; i++)
        if (conf->listeners[i].tls_certificate != NULL && (gw->ssl_ctxs[i] = open_tls(&conf->listeners[i])) == NULL)
            return -1;
    for (unsigned n = 0; n < conf->workers; n++) {
        mg_worker_t *w = &gw->workers[n];
        w->listen_fds = calloc(conf->num_listeners, sizeof(*w->listen_fds));
        for (size_t i = 0; i < conf->num_listeners; i++) {
            if ((w->listen_fds[i] = mg_listen_socket(&conf->listeners[i].addr, conf->listeners[i].addrlen, LISTEN_BACKLOG, 1)) <
                0) {
                fprintf(stderr, "matchgate: cannot listen on %s: %s\n", conf->listeners[i].address, strerror(errno));
                return -1;
            }
        }
    }
    return 0;
}

static void prepare_worker(mg_gateway_t *gw, mg_worker_t *w, unsigned id)
{
    w->id = id;
    w->gw = gw;
    if (getrandom(w->rng, sizeof(w->rng), 0) != sizeof(w->rng)) {
        w->rng[0] = (uint64_t)time(NULL) ^ ((uint64_t)id << 32);
        w->rng[1] = (uint64_t)getpid() | 1;
    }
}

static void stop_workers(mg_gateway_t *gw)
{
    for (unsigned i = 0; i < gw->num_workers; i++) {
        h2o_multithread_message_t *m = calloc(1, sizeof(*m));
        h2o_multithread_send_message(&gw->workers[i].stop_receiver, m);
    }
}

/* Waits until `*counter` reaches the number of workers; 0, or -1 when `timeout_ms` (if not
 * UINT64_MAX) passed first. */
static int wait_workers(mg_gateway_t *gw, unsigned *counter, uint64_t timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    if (timeout_ms != UINT64_MAX) {
        deadline.tv_sec += (time_t)(timeout_ms / 1000);
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (deadline.tv_nsec >= 1000000000) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000;
        }
    }
    int timed_out = 0;
    pthread_mutex_lock(&gw->workers_lock);
    while (*counter < gw->num_workers && !timed_out) {
        if (timeout_ms == UINT64_MAX)
            pthread_cond_wait(&gw->workers_cond, &gw->workers_lock);
        else
            timed_out = pthread_cond_timedwait(&gw->workers_cond, &gw->workers_lock, &deadline) == ETIMEDOUT;
    }
    int all = *counter == gw->num_workers;
    pthread_mutex_unlock(&gw->workers_lock);
    return all ? 0 : -1;
}

/* The main thread's life once the workers run: reload on SIGHUP until SIGTERM/SIGINT, and give
 * freed memory back when a worker asked. */
static int serve_signals(mg_gateway_t *gw)
{
    for (;;) {
        int sig = mg_signals_wait(1000);
        if (sig == 0) {
            mg_memory_trim_if_asked();
            continue;
        }
        if (sig != SIGHUP)
            return sig;
        mg_errors_t errs = {0};
        mg_gateway_reload(gw, &errs);
        mg_errors_clear(&errs);
    }
}

static int gateway_init(mg_gateway_t *gw, mg_config_t *conf)
{
    gw->conf = conf;
    pthread_mutex_init(&gw->conf_lock, NULL);
    pthread_mutex_init(&gw->reload_lock, NULL);
    pthread_mutex_init(&gw->workers_lock, NULL);
    pthread_cond_init(&gw->workers_cond, NULL);
    atomic_init(&gw->generation, conf->generation);
    gw->num_workers = conf->workers;
    gw->num_listeners = conf->num_listeners;
    gw->workers = calloc(conf->workers, sizeof(*gw->workers));
    /* before any other thread: the backend clients' global state (never cleaned up: parked
     * threads use it until the process exits) */
    mg_backend_process_init();
    /* first: whatever opens descriptors from here on does so under the raised limit */
    if (mg_overload_init(gw) != 0)
        return -1;
    if ((gw->throttle = mg_throttle_new()) == NULL || (gw->sessions = mg_ws_registry_new()) == NULL ||
        (gw->tenant_totals = mg_tenant_totals_new()) == NULL) {
        fprintf(stderr, "matchgate: out of memory\n");
        return -1;
    }
    if (mg_dispatch_bind(gw, conf) != 0) {
        fprintf(stderr, "matchgate: out of memory\n");
        return -1;
    }
    setup_globalconf(gw);
    /* the admin socket first: once the data listeners accept, so does the admin address */
    if (open_access_log(conf) != 0 || mg_admin_open(gw) != 0 || setup_listeners(gw) != 0)
        return -1;
    return 0;
}

static mg_config_t *acquire_conf(void *arg)
{
    return mg_gateway_conf_acquire(arg);
}

int mg_gateway_run(mg_config_t *conf)
{
    mg_gateway_t *gw = &gateway;
    /* before anything can start a thread (liburcu's, the admin thread): every thread inherits the
     * mask, so only the main thread's sigwait ever takes SIGTERM, SIGINT or SIGHUP */
    mg_signals_block();
    /* the parsed file is freed: without this the process would keep the load's peak for good */
    mg_memory_trim();
    if (gateway_init(gw, conf) != 0)
        return 1;
    /* the first keys of every JWKS url before the first request (each fetch bounded by its timeout) */
    if ((gw->fetcher = mg_auth_fetcher_start(acquire_conf, gw)) == NULL)
        fprintf(stderr, "matchgate: cannot start the JWKS fetcher's thread: keys from urls are not fetched\n");
    for (unsigned i = 0; i < conf->workers; i++) {
        prepare_worker(gw, &gw->workers[i], i);
        pthread_create(&gw->workers[i].thread, NULL, worker_main, &gw->workers[i]);
    }
    /* a stop message needs its receiver: signals stay pending (blocked) until then */
    wait_workers(gw, &gw->workers_ready, UINT64_MAX);
    mg_admin_start(gw);
    if ((gw->prober = mg_prober_start(acquire_conf, gw)) == NULL)
        fprintf(stderr, "matchgate: cannot start the health checks' thread: no active checks\n");
    fprintf(stderr, "matchgate: serving %s with %u workers (pid %d)\n", conf->file, conf->workers, (int)getpid());
    int sig = serve_signals(gw);
    atomic_store(&gw->stopping, 1);
    mg_config_t *current = mg_gateway_conf_acquire(gw);
    uint64_t timeout_ms = current->shutdown_timeout_ms;
    mg_config_release(current);
    fprintf(stderr, "matchgate: %s received, finishing in-flight requests (up to %llu ms)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            (unsigned long long)timeout_ms);
    stop_workers(gw);
    if (wait_workers(gw, &gw->workers_done, timeout_ms) != 0) {
        fprintf(stderr, "matchgate: shutdown_timeout reached, exiting with requests still in flight\n");
        /* workers are still running: skip exit handlers that would free what they use */
        fflush(NULL);
        _exit(0);
    }
    mg_prober_stop(gw->prober);
    mg_auth_fetcher_stop(gw->fetcher);
    mg_admin_stop(gw);
    fprintf(stderr, "matchgate: stopped\n");
    return 0;
}
