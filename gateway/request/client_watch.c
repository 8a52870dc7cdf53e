/*
 * Noticing that an HTTP/1 client left while its request waits for the backend.
 *
 * h2o 2.2.5 stops reading a connection while a request is in progress, so a client that
 * closes is not seen until the response is written. Requests that wait long enough (the
 * arming delay) get a watch on a duplicate of the client's fd: EOF or an error means the
 * client is gone (the connection is shut down, nothing more is written to it); bytes (a pipelined request) mean it is still there,
 * and the watch ends. Short requests never pay for it.
 */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>
#include "gateway/request/client_watch.h"

#define ARM_DELAY_MS 200

static void close_socket(mg_client_watch_t *cw)
{
    if (cw->sock == NULL)
        return;
    h2o_socket_read_stop(cw->sock);
    h2o_socket_close(cw->sock); /* closes the duplicate only */
    cw->sock = NULL;
}

static void on_client_readable(h2o_socket_t *sock, const char *err)
{
    mg_client_watch_t *cw = sock->data;
    char c;
    ssize_t n = recv(h2o_socket_get_fd(sock), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        /* the client is gone (or half-closed, which HTTP/1.1 does not use while waiting for a
         * response): shut the connection so whatever is written next fails instead of
         * reaching a client that half-closed, as nginx does */
        shutdown(h2o_socket_get_fd(sock), SHUT_RDWR);
        close_socket(cw);
        cw->on_gone(cw);
        return;
    }
    close_socket(cw); /* bytes: a pipelined request, the client is still there */
}

static void on_arm(mg_timer_t *timer)
{
    mg_client_watch_t *cw = H2O_STRUCT_FROM_MEMBER(mg_client_watch_t, arm, timer);
    h2o_socket_t *client = cw->req->conn->callbacks->get_socket(cw->req->conn);
    int fd = client != NULL ? dup(h2o_socket_get_fd(client)) : -1;
    if (fd < 0)
        return;
    cw->sock = h2o_evloop_socket_create(cw->req->conn->ctx->loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    cw->sock->data = cw;
    h2o_socket_read_start(cw->sock, on_client_readable);
}

void mg_client_watch_start(mg_client_watch_t *cw, mg_timers_t *timers, h2o_req_t *req, void (*on_gone)(mg_client_watch_t *))
{
    cw->req = req;
    cw->on_gone = on_gone;
    cw->sock = NULL;
    mg_timer_init(&cw->arm, timers, on_arm);
    /* HTTP/2 streams are reset by the client and reported by h2o already */
    if (req->version < 0x200)
        mg_timer_set(&cw->arm, ARM_DELAY_MS);
}

int mg_client_abort(h2o_req_t *req)
{
    h2o_socket_t *client = req->conn->callbacks->get_socket(req->conn);
    if (client == NULL)
        return -1;
    /* the pending write fails, and h2o closes the connection and frees the request (HTTP/2:
     * every stream of the connection) */
    shutdown(h2o_socket_get_fd(client), SHUT_RDWR);
    return 0;
}

void mg_client_watch_stop(mg_client_watch_t *cw)
{
    mg_timer_cancel(&cw->arm);
    close_socket(cw);
}
