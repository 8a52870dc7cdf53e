/*
 * The libcurl client: curl's multi interface driven by a worker's h2o event loop, with no thread
 * per request and no extra thread per worker. curl tells us which sockets to watch (socket
 * callback) and when to call it back (timer callback); we map both onto h2o sockets and timers.
 * An exchange is one easy handle (from a free list) configured from the exchange request; curl
 * hands us the response head line by line, which is gathered, checked and handed on whole.
 * It speaks to https:// servers (verification on unless the backend's tls.verify is false, a
 * client certificate for mTLS) and HTTP/2 ones (h2 by ALPN, h2c by prior knowledge), several
 * exchanges multiplexed on one connection.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <curl/curl.h>
#include "gateway/backend/client_curl.h"

/* ---------------------------------------------------------------------------------------
 * The multi handle in the loop
 */
static void check_done(curl_client_t *cc);

/* After curl ran: report finished transfers, then let the owners send on what arrived. */
static void after_curl(curl_client_t *cc)
{
    check_done(cc);
    mg__backend_after_run(cc->w);
}

static void socket_action(curl_client_t *cc, curl_socket_t fd, int ev)
{
    int running;
    curl_multi_socket_action(cc->multi, fd, ev, &running);
    after_curl(cc);
}

static void on_timer(mg_timer_t *timer)
{
    curl_client_t *cc = H2O_STRUCT_FROM_MEMBER(curl_client_t, timer, timer);
    socket_action(cc, CURL_SOCKET_TIMEOUT, 0);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    curl_client_t *cc = userp;
    if (timeout_ms < 0)
        mg_timer_cancel(&cc->timer);
    else
        mg_timer_set(&cc->timer, (uint64_t)timeout_ms);
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
    socket_action(w->cc, w->fd, err != NULL ? CURL_CSELECT_ERR : CURL_CSELECT_IN);
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
    socket_action(w->cc, w->fd, err != NULL ? CURL_CSELECT_ERR : CURL_CSELECT_OUT);
}

static watch_t *watch_get(curl_client_t *cc, curl_socket_t fd)
{
    if ((size_t)fd >= cc->by_fd_size) {
        size_t size = (size_t)fd * 2 + 16;
        watch_t **by_fd = realloc(cc->by_fd, size * sizeof(*by_fd));
        if (by_fd == NULL)
            return NULL;
        memset(by_fd + cc->by_fd_size, 0, (size - cc->by_fd_size) * sizeof(*by_fd));
        cc->by_fd = by_fd;
        cc->by_fd_size = size;
    }
    if (cc->by_fd[fd] != NULL)
        return cc->by_fd[fd];
    watch_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->cc = cc;
    w->fd = fd;
    w->sock = h2o_evloop_socket_create((h2o_evloop_t *)cc->w->ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    w->sock->data = w;
    return cc->by_fd[fd] = w;
}

/* curl's CLOSESOCKETFUNCTION: the connection is gone (not merely idle in the pool). */
static int on_curl_close(void *clientp, curl_socket_t fd)
{
    curl_client_t *cc = clientp;
    watch_t *w = (size_t)fd < cc->by_fd_size ? cc->by_fd[fd] : NULL;
    if (w == NULL)
        return close(fd);
    cc->by_fd[fd] = NULL;
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
    curl_client_t *cc = userp;
    watch_t *w = watch_get(cc, fd);
    if (w == NULL)
        return -1;
    w->what = what == CURL_POLL_REMOVE ? 0 : what;
    /* reading stays enabled when curl loses interest (CURL_POLL_REMOVE when the connection goes
     * back to the pool, or CURL_POLL_OUT alone); on_readable stops it only if an event actually
     * comes. A keep-alive connection is usually reused first, which saves two epoll_ctl calls
     * per request. */
    if ((w->what & CURL_POLL_IN) != 0 && !h2o_socket_is_reading(w->sock))
        h2o_socket_read_start(w->sock, on_readable);
    if (w->what & CURL_POLL_OUT)
        arm_write(w);
    return 0;
}

static void *client_create(mg_worker_t *w)
{
    curl_client_t *cc = calloc(1, sizeof(*cc));
    if (cc == NULL)
        return NULL;
    cc->w = w;
    if ((cc->multi = curl_multi_init()) == NULL) {
        free(cc);
        return NULL;
    }
    mg_timer_init(&cc->timer, &w->timers, on_timer);
    curl_multi_setopt(cc->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(cc->multi, CURLMOPT_SOCKETDATA, cc);
    curl_multi_setopt(cc->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(cc->multi, CURLMOPT_TIMERDATA, cc);
    /* the keep-alive pool to backends: idle connections kept per worker. It must hold what the
     * worker has in flight at once, or every transfer beyond it opens a new connection: at
     * 256, 1,000 bridged sessions ran at half the rate (tests/bench/websocket) */
    curl_multi_setopt(cc->multi, CURLMOPT_MAXCONNECTS, 1024L);
    /* HTTP/2 servers: exchanges share a connection as streams (curl's default, said once here) */
    curl_multi_setopt(cc->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
    /* one worker's thread uses it: no lock functions needed */
    if ((cc->share = curl_share_init()) != NULL)
        curl_share_setopt(cc->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    return cc;
}

static void client_destroy(void *client)
{
    curl_client_t *cc = client;
    mg_timer_cancel(&cc->timer);
    for (size_t i = 0; i < cc->num_free; i++)
        curl_easy_cleanup(cc->free_list[i]);
    /* closes the pooled connections through on_curl_close, which needs by_fd */
    curl_multi_cleanup(cc->multi);
    curl_share_cleanup(cc->share);
    free(cc->by_fd);
    free(cc);
}

/* ---------------------------------------------------------------------------------------
 * Easy handles
 */
static void set_common_options(curl_client_t *cc, CURL *easy)
{
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, cc);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    /* the path was normalized by the gateway; curl must send it byte for byte */
    curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
    /* backends are reached directly: an explicit empty proxy also spares curl the proxy
     * environment variable lookups it would otherwise do on every request */
    curl_easy_setopt(easy, CURLOPT_PROXY, "");
}

/* A reset easy handle from the free list, with the options every exchange shares already set. */
static CURL *acquire(curl_client_t *cc)
{
    CURL *easy;
    if (cc->num_free != 0) {
        easy = cc->free_list[--cc->num_free];
        curl_easy_reset(easy);
    } else if ((easy = curl_easy_init()) == NULL) {
        return NULL;
    } else if (cc->share != NULL) {
        /* once, before its first transfer (curl_easy_reset keeps it): a handle that ran an http://
         * exchange before being given the share would lose its own session cache (libcurl 7.88
         * drops the pointer without freeing it) */
        curl_easy_setopt(easy, CURLOPT_SHARE, cc->share);
    }
    set_common_options(cc, easy);
    return easy;
}

/* Stops the handle's transfer (no callback follows) and keeps it for the next exchange. */
static void release(curl_client_t *cc, CURL *easy)
{
    /* removing a handle that is not in the multi is a harmless no-op */
    curl_multi_remove_handle(cc->multi, easy);
    if (cc->num_free < FREE_LIST_MAX)
        cc->free_list[cc->num_free++] = easy;
    else
        curl_easy_cleanup(easy);
}

/* ---------------------------------------------------------------------------------------
 * The response head: curl hands over the status line, each header line, then an empty line.
 */
static void parse_status_line(curl_exchange_t *x, const char *line, size_t len)
{
    /* "HTTP/1.1 200 OK\r\n": a new head starts (after a 1xx, curl shows the next one) */
    x->num_lines = 0;
    x->status = 0;
    x->reason = h2o_iovec_init(NULL, 0);
    const char *sp = memchr(line, ' ', len);
    if (sp == NULL || (size_t)(line + len - sp) < 4)
        return;
    if (!isdigit((unsigned char)sp[1]) || !isdigit((unsigned char)sp[2]) || !isdigit((unsigned char)sp[3]))
        return; /* status 0: never taken for a final head (curl refuses such a reply anyway) */
    x->status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
    const char *reason = sp + 4 < line + len ? sp + 5 : line + len;
    size_t rlen = (size_t)(line + len - reason);
    while (rlen > 0 && (reason[rlen - 1] == '\r' || reason[rlen - 1] == '\n'))
        rlen--;
    x->reason = h2o_strdup(x->pool, reason, rlen);
}

static int keep_header_line(curl_exchange_t *x, const char *line, size_t len)
{
    if (x->num_lines == MG_BACKEND_MAX_FIELDS) {
        x->stopped = STOP_TOO_MANY_HEADERS;
        return -1;
    }
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    x->lines[x->num_lines++] = h2o_strdup(x->pool, line, len);
    return 0;
}

/* The final head is complete: checked as a whole and handed to the owner. A malformed field is not
 * dropped but refuses the whole response: a backend that sends one is broken or hostile, the
 * field could be a security header, and h2o would write a CR in a value as it is, letting the
 * backend add fields of its own to an HTTP/1 client's response. */
static int finish_head(curl_exchange_t *x)
{
    mg_backend_header_t fields[MG_BACKEND_MAX_FIELDS];
    x->head_done = 1;
    if (!mg_is_field_value(x->reason.base, x->reason.len)) {
        x->stopped = STOP_BAD_HEAD;
        return -1;
    }
    for (size_t i = 0; i < x->num_lines; i++) {
        if (mg_header_line_split(x->lines[i], &fields[i].name, &fields[i].value) != 0) {
            x->stopped = STOP_BAD_HEAD;
            return -1;
        }
    }
    if (x->cbs->on_head(x->arg, x->status, x->reason, fields, x->num_lines) != 0) {
        x->stopped = STOP_OWNER;
        return -1;
    }
    return 0;
}

static size_t on_header(char *data, size_t size, size_t nitems, void *arg)
{
    curl_exchange_t *x = arg;
    size_t len = size * nitems;
    int rc = 0;
    if (x->head_done)
        return len; /* trailer fields: not passed on */
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0)
        parse_status_line(x, data, len);
    else if (len <= 2 && (len == 0 || data[0] == '\r' || data[0] == '\n'))
        if (x->status >= 200 || x->status == 101)
            rc = finish_head(x);
        else
            x->num_lines = 0; /* end of an interim 1xx head: the real one follows */
    else
        rc = keep_header_line(x, data, len);
    /* a head that cannot be passed on whole is refused, never cut: 0 aborts the transfer */
    return rc == 0 ? len : 0;
}

static size_t on_body(char *data, size_t size, size_t nitems, void *arg)
{
    curl_exchange_t *x = arg;
    size_t len = size * nitems;
    switch (x->cbs->on_body(x->arg, data, len)) {
    case MG_BODY_TAKEN:
        return len;
    case MG_BODY_PAUSE:
        return CURL_WRITEFUNC_PAUSE;
    default:
        x->stopped = STOP_OWNER;
        return 0; /* curl fails the transfer with CURLE_WRITE_ERROR */
    }
}

/* ---------------------------------------------------------------------------------------
 * Exchanges
 */

/*
 * Under TLS 1.3 a server checks our certificate (or sees there is none) after curl's side of the
 * handshake is done, so its refusal comes as a failed read or write on the new connection: an alert
 * ("tlsv13 alert certificate required"), or only the connection closed. A connection made for this
 * exchange that ends so before any response is taken for such a refusal, never a reused one.
 */
static int refused_after_handshake(curl_exchange_t *x)
{
    long connects = 0;
    if (x->error == NULL || x->head_done || x->status != 0)
        return 0; /* not https://, or the server answered */
    curl_easy_getinfo(x->easy, CURLINFO_NUM_CONNECTS, &connects);
    if (connects == 0)
        return 0;
    if (strstr(x->error, " alert ") == NULL)
        snprintf(x->error, CURL_ERROR_SIZE,
                 "the server closed the new TLS connection before answering (did it want a client "
                 "certificate?)");
    return 1;
}

/* What a finished transfer came to, in the gateway's words. */
static mg_attempt_result_t result_of(curl_exchange_t *x, CURLcode code)
{
    curl_off_t connect_time = 0;
    static const mg_attempt_result_t stopped[] = {MG_ATTEMPT_FAILED, MG_ATTEMPT_TOO_MANY_HEADERS, MG_ATTEMPT_BAD_HEAD,
                                                  MG_ATTEMPT_ABORTED};
    if (x->stopped != STOP_NONE)
        return stopped[x->stopped];
    switch (code) {
    case CURLE_OK:
        /* a transfer curl calls done whose final head never came is no HTTP response */
        return x->head_done ? MG_ATTEMPT_OK : MG_ATTEMPT_BAD_RESPONSE;
    case CURLE_WEIRD_SERVER_REPLY: /* what curl refuses itself: a NUL, a line without a colon... */
        return MG_ATTEMPT_BAD_RESPONSE;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
        return MG_ATTEMPT_NOT_CONNECTED;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_INVALIDCERTSTATUS:
        return MG_ATTEMPT_TLS_FAILED;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
        return refused_after_handshake(x) ? MG_ATTEMPT_TLS_FAILED : MG_ATTEMPT_FAILED;
    case CURLE_OPERATION_TIMEDOUT:
        /* curl reports connect_timeout as a timeout, with no connect time */
        curl_easy_getinfo(x->easy, CURLINFO_CONNECT_TIME_T, &connect_time);
        return connect_time == 0 ? MG_ATTEMPT_CONNECT_TIMEOUT : MG_ATTEMPT_TIMED_OUT;
    default:
        return MG_ATTEMPT_FAILED;
    }
}

static void exchange_done(curl_exchange_t *x, CURLcode code)
{
    mg_attempt_result_t result = result_of(x, code);
    /* an OK transfer without a head is a reply curl should have refused */
    const char *detail = curl_easy_strerror(code == CURLE_OK && result != MG_ATTEMPT_OK ? CURLE_WEIRD_SERVER_REPLY : code);
    if (result == MG_ATTEMPT_TLS_FAILED && x->error != NULL && x->error[0] != '\0')
        detail = x->error; /* what the TLS library said: which certificate, which name */
    release(x->cc, x->easy);
    x->easy = NULL;
    x->cbs->on_done(x->arg, result, detail);
}

static void check_done(curl_client_t *cc)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(cc->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_exchange_t *x = NULL;
        CURLcode code = msg->data.result;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        /* out of the multi first: the owner may start another exchange from on_done */
        curl_multi_remove_handle(cc->multi, msg->easy_handle);
        exchange_done(x, code);
    }
}

/* The header list in the request's order, nodes and lines in the pool. "Name:" with nothing after
 * it keeps curl from adding a default of its own: Expect (100-continue), and Accept and
 * Content-Type when the request has none. */
static struct curl_slist *header_list(const mg_exchange_request_t *req)
{
    struct curl_slist *nodes = h2o_mem_alloc_pool(req->pool, sizeof(*nodes) * (req->num_headers + 3));
    int has_accept = 0, has_content_type = 0;
    size_t n = 0;
    for (size_t i = 0; i < req->num_headers; i++) {
        const mg_backend_header_t *h = &req->headers[i];
        char *line = h2o_mem_alloc_pool(req->pool, h->name.len + h->value.len + 3);
        memcpy(line, h->name.base, h->name.len);
        memcpy(line + h->name.len, ": ", 2);
        memcpy(line + h->name.len + 2, h->value.base, h->value.len);
        line[h->name.len + h->value.len + 2] = '\0';
        has_accept |= h2o_lcstris(h->name.base, h->name.len, H2O_STRLIT("accept"));
        has_content_type |= h2o_lcstris(h->name.base, h->name.len, H2O_STRLIT("content-type"));
        nodes[n++].data = line;
    }
    nodes[n++].data = (char *)"Expect:";
    if (!has_accept)
        nodes[n++].data = (char *)"Accept:";
    if (!has_content_type)
        nodes[n++].data = (char *)"Content-Type:";
    for (size_t i = 0; i < n; i++)
        nodes[i].next = i + 1 < n ? &nodes[i + 1] : NULL;
    return nodes;
}

static int is_head(mg_str_t method)
{
    return h2o_memis(method.base, method.len, H2O_STRLIT("HEAD"));
}

/* 0, or -1 when the url does not fit (a path too long for memory). */
static int configure(curl_exchange_t *x, const mg_exchange_request_t *req)
{
    CURL *e = x->easy;
    const char *base = mg__curl_configure_transport(x, req->server);
    size_t size = strlen(base) + req->path.len + req->query.len + 2;
    char *url = h2o_mem_alloc_pool(req->pool, size);
    if (mg_url_build(url, size, base, req->path, req->query) < 0)
        return -1;
    curl_easy_setopt(e, CURLOPT_URL, url);
    if (is_head(req->method)) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L); /* and no request body: POSTFIELDS would make it a POST */
    } else {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, h2o_strdup(req->pool, req->method.base, req->method.len).base);
        if (req->body.base != NULL) {
            /* the body stays the owner's, so a retry sends it again in full */
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body.base);
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body.len);
        }
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, header_list(req));
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)req->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    return 0;
}

static mg_exchange_t *exchange_start(void *client, const mg_exchange_request_t *req, const mg_exchange_callbacks_t *cbs, void *arg)
{
    curl_client_t *cc = client;
    curl_exchange_t *x = h2o_mem_alloc_pool(req->pool, sizeof(*x));
    *x = (curl_exchange_t){.super = {&mg_backend_client_curl}, .cc = cc, .cbs = cbs, .arg = arg, .pool = req->pool};
    if ((x->easy = acquire(cc)) == NULL)
        return NULL;
    if (configure(x, req) != 0 || curl_multi_add_handle(cc->multi, x->easy) != CURLM_OK) {
        release(cc, x->easy);
        return NULL;
    }
    return &x->super;
}

static void exchange_resume(mg_exchange_t *xp)
{
    curl_exchange_t *x = (curl_exchange_t *)xp;
    curl_client_t *cc = x->cc;
    curl_easy_pause(x->easy, CURLPAUSE_CONT);
    /* unpausing may have delivered data or finished the transfer without any socket event */
    after_curl(cc);
}

static void exchange_cancel(mg_exchange_t *xp)
{
    curl_exchange_t *x = (curl_exchange_t *)xp;
    release(x->cc, x->easy);
    x->easy = NULL;
}

/* libcurl's global state, once, before threads (curl_global_init is not thread-safe). */
static void process_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    mg__curl_h2c_reuse_broken = curl_version_info(CURLVERSION_NOW)->version_num < 0x080000;
}

const mg_backend_client_ops_t mg_backend_client_curl = {
    .name = "curl",
    .process_init = process_init,
    .create = client_create,
    .destroy = client_destroy,
    .start = exchange_start,
    .resume = exchange_resume,
    .cancel = exchange_cancel,
};
