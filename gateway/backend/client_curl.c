/*
 * libcurl's multi interface driven by a worker's h2o event loop: no thread per request and
 * no extra thread per worker. curl tells us which sockets to watch (socket callback) and
 * when to call it back (timer callback); we map both onto h2o sockets and timeouts.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gateway/internal.h"

#define FREE_LIST_MAX 64

/* One per backend connection, from curl's first interest in it until curl closes it: the h2o
 * socket owns the fd, so keep-alive reuse costs no dup/epoll registration churn. */
typedef struct watch {
    mg_upstream_t *up;
    h2o_socket_t *sock;
    curl_socket_t fd;
    int what;        /* CURL_POLL_* last asked for; 0 after CURL_POLL_REMOVE */
    int write_armed; /* h2o_socket_notify_write is one-shot and cannot be cancelled */
    int closed;      /* curl closed it while a write notification was armed */
} watch_t;

struct mg_upstream {
    h2o_loop_t *loop;
    mg_upstream_callbacks_t cbs;
    void *cb_arg;
    CURLM *multi;
    mg_timer_t timer; /* curl's */
    CURL *free_list[FREE_LIST_MAX];
    size_t num_free;
    watch_t **by_fd; /* indexed by fd */
    size_t by_fd_size;
};

static void check_done(mg_upstream_t *up)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(up->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *easy = msg->easy_handle;
        CURLcode result = msg->data.result;
        mg_transfer_t *transfer = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&transfer);
        /* out of the multi first: the callback may release or restart the handle */
        curl_multi_remove_handle(up->multi, easy);
        transfer->done(transfer, easy, result);
    }
}

/* After curl ran: report finished transfers, then let the owner flush what arrived. */
static void after_curl(mg_upstream_t *up)
{
    check_done(up);
    up->cbs.flush(up->cb_arg);
}

static void socket_action(mg_upstream_t *up, curl_socket_t fd, int ev)
{
    int running;
    curl_multi_socket_action(up->multi, fd, ev, &running);
    after_curl(up);
}

static void on_timer(mg_timer_t *timer)
{
    mg_upstream_t *up = H2O_STRUCT_FROM_MEMBER(mg_upstream_t, timer, timer);
    socket_action(up, CURL_SOCKET_TIMEOUT, 0);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    mg_upstream_t *up = userp;
    if (timeout_ms < 0)
        mg_timer_cancel(&up->timer);
    else
        mg_timer_set(&up->timer, (uint64_t)timeout_ms);
    return 0;
}

static void on_writable(h2o_socket_t *sock, const char *err);

static void arm_write(watch_t *w)
{
    if (w->write_armed)
        return;
    w->write_armed = 1;
    h2o_socket_notify_write(w->sock, on_writable);
}

static void on_readable(h2o_socket_t *sock, const char *err)
{
    watch_t *w = sock->data;
    if ((w->what & CURL_POLL_IN) == 0) {
        /* an idle pooled connection became readable (the backend closed it): stop watching;
         * curl notices the dead connection when it next tries to reuse it */
        h2o_socket_read_stop(sock);
        return;
    }
    socket_action(w->up, w->fd, err != NULL ? CURL_CSELECT_ERR : CURL_CSELECT_IN);
}

static void on_writable(h2o_socket_t *sock, const char *err)
{
    watch_t *w = sock->data;
    w->write_armed = 0;
    if (w->closed) {
        /* curl closed the connection while this notification was pending: finish it now */
        h2o_socket_close(sock);
        free(w);
        return;
    }
    if ((w->what & CURL_POLL_OUT) == 0)
        return;
    /* re-arm before calling into curl: curl only calls the socket callback on changes, so a
     * socket that stays interested in writing would otherwise never be watched again */
    arm_write(w);
    socket_action(w->up, w->fd, err != NULL ? CURL_CSELECT_ERR : CURL_CSELECT_OUT);
}

static watch_t *watch_get(mg_upstream_t *up, curl_socket_t fd)
{
    if ((size_t)fd >= up->by_fd_size) {
        size_t size = (size_t)fd * 2 + 16;
        watch_t **by_fd = realloc(up->by_fd, size * sizeof(*by_fd));
        if (by_fd == NULL)
            return NULL;
        memset(by_fd + up->by_fd_size, 0, (size - up->by_fd_size) * sizeof(*by_fd));
        up->by_fd = by_fd;
        up->by_fd_size = size;
    }
    if (up->by_fd[fd] != NULL)
        return up->by_fd[fd];
    watch_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->up = up;
    w->fd = fd;
    w->sock = h2o_evloop_socket_create((h2o_evloop_t *)up->loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    w->sock->data = w;
    return up->by_fd[fd] = w;
}

/* curl's CLOSESOCKETFUNCTION: the connection is gone (not merely idle in the pool). */
static int on_curl_close(void *clientp, curl_socket_t fd)
{
    mg_upstream_t *up = clientp;
    watch_t *w = (size_t)fd < up->by_fd_size ? up->by_fd[fd] : NULL;
    if (w == NULL)
        return close(fd);
    up->by_fd[fd] = NULL;
    if (h2o_socket_is_reading(w->sock))
        h2o_socket_read_stop(w->sock);
    if (w->write_armed) {
        /* closing now could run the pending callback on freed memory; the fd stays open
         * until the notification fires, which is never long for a socket being closed */
        w->closed = 1;
        return 0;
    }
    h2o_socket_close(w->sock);
    free(w);
    return 0;
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    mg_upstream_t *up = userp;
    watch_t *w = watch_get(up, fd);
    if (w == NULL)
        return -1;
    w->what = what == CURL_POLL_REMOVE ? 0 : what;
    /* reading stays enabled when curl loses interest (CURL_POLL_REMOVE when the connection goes
     * back to the pool, or CURL_POLL_OUT alone); on_readable stops it only if an event actually comes. A keep-alive
     * connection is usually reused first, which saves two epoll_ctl calls per request. */
    if ((w->what & CURL_POLL_IN) != 0 && !h2o_socket_is_reading(w->sock))
        h2o_socket_read_start(w->sock, on_readable);
    if (w->what & CURL_POLL_OUT)
        arm_write(w);
    return 0;
}

mg_upstream_t *mg_upstream_create(h2o_loop_t *loop, mg_timers_t *timers, const mg_upstream_callbacks_t *cbs, void *cb_arg)
{
    mg_upstream_t *up = calloc(1, sizeof(*up));
    if (up == NULL)
        return NULL;
    up->loop = loop;
    up->cbs = *cbs;
    up->cb_arg = cb_arg;
    if ((up->multi = curl_multi_init()) == NULL) {
        free(up);
        return NULL;
    }
    mg_timer_init(&up->timer, timers, on_timer);
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETDATA, up);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERDATA, up);
    /* the keep-alive pool to backends: idle connections kept per worker. It must hold what the
     * worker has in flight at once, or every transfer beyond it opens a new connection: at
     * 256, 1,000 bridged sessions ran at half the rate (tests/bench/websocket) */
    curl_multi_setopt(up->multi, CURLMOPT_MAXCONNECTS, 1024L);
    return up;
}

void mg_upstream_destroy(mg_upstream_t *up)
{
    mg_timer_cancel(&up->timer);
    for (size_t i = 0; i < up->num_free; i++)
        curl_easy_cleanup(up->free_list[i]);
    /* closes the pooled connections through on_curl_close, which needs by_fd */
    curl_multi_cleanup(up->multi);
    free(up->by_fd);
    free(up);
}

static void set_common_options(mg_upstream_t *up, CURL *easy)
{
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, up);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    /* the path was normalized by the gateway; curl must send it byte for byte */
    curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
    /* backends are reached directly: an explicit empty proxy also spares curl the proxy
     * environment variable lookups it would otherwise do on every request */
    curl_easy_setopt(easy, CURLOPT_PROXY, "");
}

CURL *mg_upstream_acquire(mg_upstream_t *up)
{
    CURL *easy;
    if (up->num_free != 0) {
        easy = up->free_list[--up->num_free];
        curl_easy_reset(easy);
    } else if ((easy = curl_easy_init()) == NULL) {
        return NULL;
    }
    set_common_options(up, easy);
    return easy;
}

int mg_upstream_start(mg_upstream_t *up, CURL *easy, mg_transfer_t *transfer)
{
    curl_easy_setopt(easy, CURLOPT_PRIVATE, transfer);
    return curl_multi_add_handle(up->multi, easy) == CURLM_OK ? 0 : -1;
}

void mg_upstream_release(mg_upstream_t *up, CURL *easy)
{
    /* removing a handle that is not in the multi is a harmless no-op */
    curl_multi_remove_handle(up->multi, easy);
    if (up->num_free < FREE_LIST_MAX)
        up->free_list[up->num_free++] = easy;
    else
        curl_easy_cleanup(easy);
}

int mg_upstream_never_connected(CURL *easy, CURLcode result)
{
    curl_off_t connect_time = 0;
    if (result == CURLE_COULDNT_CONNECT || result == CURLE_COULDNT_RESOLVE_HOST)
        return 1;
    /* curl reports connect_timeout as a timeout, with no connect time */
    curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connect_time);
    return result == CURLE_OPERATION_TIMEDOUT && connect_time == 0;
}

void mg_upstream_resume(mg_upstream_t *up, CURL *easy)
{
    curl_easy_pause(easy, CURLPAUSE_CONT);
    /* unpausing may have delivered data or finished the transfer without any socket event */
    after_curl(up);
}
