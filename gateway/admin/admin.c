/*
 * The admin API's thread: its own h2o loop (HTTP/1.1) and listener on admin.address, with limits
 * of its own so that it stays reachable when the data plane runs out of descriptors. What a
 * call does is endpoints.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gateway/admin/internal.h"
#include "gateway/connections/connections.h"
#include "gateway/thread_name.h"

#define ADMIN_MAX_BODY (1024 * 1024)
#define ADMIN_IDLE_TIMEOUT_MS 10000
#define ADMIN_STOP_WAIT_S 2
#define ADMIN_MAX_CONNECTIONS 32 /* beyond, the admin listener waits for one to close */
#define ADMIN_RESERVE_FDS 4      /* descriptors held for admin connections when the process has none left */
#define ADMIN_PAUSE_MS 100       /* after accept failed for want of descriptors or memory */

struct mg_admin {
    mg_gateway_t *gw;
    int fd; /* the listening socket, until the thread takes it */
    pthread_t thread;
    h2o_globalconf_t globalconf;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_socket_t *listener;
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t stop_receiver;
    int stopping;
    /* the listener's limits (admin thread only): connections open, held descriptors (-1: given
     * up to accept a connection), and a pause after a failed accept */
    unsigned connections;
    int reserve[ADMIN_RESERVE_FDS];
    int paused;
    h2o_timeout_t pause;
    h2o_timeout_entry_t pause_entry;
    /* the thread's progress, watched by mg_admin_stop */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready, stopped;
};

typedef struct mg_admin_handler_entry {
    h2o_handler_t super;
    mg_admin_t *admin;
} mg_admin_handler_entry_t;

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    mg__admin_handle(((mg_admin_handler_entry_t *)self)->admin->gw, req);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * The thread
 */
/*
 * The admin listener must answer /healthz and /metrics when the data plane is out of descriptors,
 * and never spin (a level-triggered listener that is not accepted from wakes the loop again at
 * once). It holds a few descriptors (open /dev/null) and gives one up when accept fails with
 * EMFILE or ENFILE, so that the accept after it gets that number (libuv's answer to EMFILE, but
 * the connection is served rather than closed); another thread may take the number first, and a
 * failed accept then takes the listener out of the loop for ADMIN_PAUSE_MS. Closed connections
 * give the descriptors back when they can.
 */
static void on_accept(h2o_socket_t *listener, const char *err);

static void refill_reserve(mg_admin_t *admin)
{
    for (size_t i = 0; i < ADMIN_RESERVE_FDS; i++)
        if (admin->reserve[i] < 0)
            admin->reserve[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static int release_reserve(mg_admin_t *admin)
{
    for (size_t i = 0; i < ADMIN_RESERVE_FDS; i++) {
        if (admin->reserve[i] >= 0) {
            close(admin->reserve[i]);
            admin->reserve[i] = -1;
            return 1;
        }
    }
    return 0;
}

static void pause_listener(mg_admin_t *admin, int timed)
{
    if (!admin->paused)
        h2o_socket_read_stop(admin->listener);
    admin->paused = 1;
    if (timed && !h2o_timeout_is_linked(&admin->pause_entry))
        h2o_timeout_link(admin->ctx.loop, &admin->pause, &admin->pause_entry);
}

static void resume_listener(mg_admin_t *admin)
{
    if (!admin->paused || admin->stopping)
        return;
    admin->paused = 0;
    if (h2o_timeout_is_linked(&admin->pause_entry))
        h2o_timeout_unlink(&admin->pause_entry);
    h2o_socket_read_start(admin->listener, on_accept);
}

static void on_pause_end(h2o_timeout_entry_t *entry)
{
    resume_listener(H2O_STRUCT_FROM_MEMBER(mg_admin_t, pause_entry, entry));
}

static void on_connection_close(void *data)
{
    mg_admin_t *admin = data;
    admin->connections--;
    refill_reserve(admin);
    if (!h2o_timeout_is_linked(&admin->pause_entry))
        resume_listener(admin);
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    mg_admin_t *admin = listener->data;
    h2o_socket_t *sock;

    if (err != NULL)
        return;
    if (admin->connections >= ADMIN_MAX_CONNECTIONS) {
        pause_listener(admin, 0); /* until one closes */
        return;
    }
    if ((sock = h2o_evloop_socket_accept(listener)) == NULL && (errno == EMFILE || errno == ENFILE) && release_reserve(admin))
        sock = h2o_evloop_socket_accept(listener);
    if (sock == NULL) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED && errno != EINTR)
            pause_listener(admin, 1);
        return;
    }
    admin->connections++;
    sock->on_close.cb = on_connection_close;
    sock->on_close.data = admin;
    h2o_accept(&admin->accept_ctx, sock);
}

static void on_stop_message(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    mg_admin_t *admin = H2O_STRUCT_FROM_MEMBER(mg_admin_t, stop_receiver, receiver);
    mg_messages_free(messages);
    admin->stopping = 1;
}

/* Like a worker, the thread parks instead of returning: h2o's thread-local free lists must stay
 * reachable until the process exits. */
static void *admin_main(void *arg)
{
    mg_admin_t *admin = arg;

    mg_thread_name("mg-admin");
    h2o_context_init(&admin->ctx, h2o_evloop_create(), &admin->globalconf);
    admin->queue = h2o_multithread_create_queue(admin->ctx.loop);
    h2o_multithread_register_receiver(admin->queue, &admin->stop_receiver, on_stop_message);
    admin->accept_ctx.ctx = &admin->ctx;
    admin->accept_ctx.hosts = admin->globalconf.hosts;
    admin->listener = h2o_evloop_socket_create(admin->ctx.loop, admin->fd, H2O_SOCKET_FLAG_DONT_READ);
    admin->listener->data = admin;
    h2o_timeout_init(admin->ctx.loop, &admin->pause, ADMIN_PAUSE_MS);
    admin->pause_entry.cb = on_pause_end;
    h2o_socket_read_start(admin->listener, on_accept);
    pthread_mutex_lock(&admin->lock);
    admin->ready = 1; /* the stop receiver exists */
    pthread_cond_broadcast(&admin->cond);
    pthread_mutex_unlock(&admin->lock);
    /* h2o_evloop_run returns -1 on EINTR: keep looping */
    while (!admin->stopping)
        h2o_evloop_run(admin->ctx.loop, INT32_MAX);
    if (h2o_timeout_is_linked(&admin->pause_entry))
        h2o_timeout_unlink(&admin->pause_entry);
    h2o_socket_read_stop(admin->listener);
    h2o_socket_close(admin->listener);
    pthread_mutex_lock(&admin->lock);
    admin->stopped = 1;
    pthread_cond_broadcast(&admin->cond);
    for (;;)
        pthread_cond_wait(&admin->cond, &admin->lock);
    return NULL;
}

static void setup_globalconf(mg_admin_t *admin)
{
    h2o_config_init(&admin->globalconf);
    admin->globalconf.server_name = h2o_iovec_init(H2O_STRLIT("matchgate"));
    admin->globalconf.max_request_entity_size = ADMIN_MAX_BODY;
    admin->globalconf.http1.req_timeout = ADMIN_IDLE_TIMEOUT_MS;
    admin->globalconf.http1.upgrade_to_http2 = 0; /* HTTP/1.1 only */
    h2o_hostconf_t *host = h2o_config_register_host(&admin->globalconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    mg_admin_handler_entry_t *h = (mg_admin_handler_entry_t *)h2o_create_handler(path, sizeof(*h));
    h->super.on_req = on_req;
    h->admin = admin;
}

int mg_admin_open(mg_gateway_t *gw)
{
    const mg_admin_conf_t *conf = &gw->conf->admin;
    mg_admin_t *admin;

    if (conf->address == NULL)
        return 0;
    /* the gateway's for the life of the process (a field of the gateway, which stays reachable
     * until the process exits, like the parked thread) */
    if ((admin = calloc(1, sizeof(*admin))) == NULL) {
        fprintf(stderr, "matchgate: out of memory\n");
        return -1;
    }
    if ((admin->fd = mg_listen_socket(&conf->addr, conf->addrlen, 128, 0)) < 0) {
        fprintf(stderr, "matchgate: cannot listen on admin address %s: %s\n", conf->address, strerror(errno));
        free(admin);
        return -1;
    }
    admin->gw = gw;
    for (size_t i = 0; i < ADMIN_RESERVE_FDS; i++)
        admin->reserve[i] = -1;
    refill_reserve(admin);
    pthread_mutex_init(&admin->lock, NULL);
    pthread_cond_init(&admin->cond, NULL);
    setup_globalconf(admin);
    gw->admin = admin;
    return 0;
}

void mg_admin_start(mg_gateway_t *gw)
{
    mg_admin_t *admin = gw->admin;

    if (admin == NULL)
        return;
    pthread_mutex_lock(&admin->lock);
    pthread_create(&admin->thread, NULL, admin_main, admin);
    while (!admin->ready)
        pthread_cond_wait(&admin->cond, &admin->lock);
    pthread_mutex_unlock(&admin->lock);
}

void mg_admin_stop(mg_gateway_t *gw)
{
    mg_admin_t *admin = gw->admin;
    struct timespec deadline;

    if (admin == NULL)
        return;
    h2o_multithread_send_message(&admin->stop_receiver, calloc(1, sizeof(h2o_multithread_message_t)));
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ADMIN_STOP_WAIT_S;
    pthread_mutex_lock(&admin->lock);
    while (!admin->stopped && pthread_cond_timedwait(&admin->cond, &admin->lock, &deadline) == 0)
        ;
    pthread_mutex_unlock(&admin->lock);
}
