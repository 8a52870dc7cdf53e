/*
 * Forwarding a request to its backend through libcurl, and streaming the response back.
 *
 * Backpressure: curl's write callback appends to `recv`; at most one h2o_send is in flight
 * (from `sending`). When `recv` passes HIGH_WATER while a send is in flight, the transfer is
 * paused (CURL_WRITEFUNC_PAUSE) and resumed from the generator's proceed. So a slow client
 * holds at most about 2 x HIGH_WATER per request, whatever the response size.
 *
 * Timeouts: connect_timeout is curl's. `timeout` is ours: the backend must deliver the whole
 * response within it, not counting the time the transfer is paused because the client reads
 * slowly (a slow client is not a slow backend). It spans retries. The other way round, a
 * client that accepts none of a pending send for client_idle_timeout is dropped (`stall`): h2o
 * 2.2.5 has no write timeout, and a stalled reader (an HTTP/2 stream whose flow-control window
 * stays closed, a socket nobody reads) would otherwise hold its connection, the paused backend
 * transfer and its max_in_flight slot forever. HTTP/2 too loses the whole connection, as with
 * nginx's send_timeout: h2o 2.2.5 gives a handler no way to reset its own stream.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include "gateway/internal.h"

#define HIGH_WATER (256 * 1024)
#define MAX_RESPONSE_HEADERS 100

typedef struct mg_forward {
    mg_transfer_t transfer; /* first: the upstream's handle on it */
    mg_request_t *r;
    CURL *easy;
    mg_backend_conf_t *backend;
    h2o_generator_t generator;
    h2o_buffer_t *recv, *sending;
    h2o_linklist_t flush_link;
    mg_timer_t timeout;
    mg_timer_t stall;
    h2o_req_t *client_req; /* kept after the final send, for the stall guard */
    mg_client_watch_t client_watch;
    uint64_t timeout_left_ms;   /* while paused */
    struct curl_slist *headers; /* nodes live in the request's pool */
    size_t first_server;
    unsigned attempt;
    /* response head as received */
    int status;
    h2o_iovec_t reason;
    h2o_iovec_t lines[MAX_RESPONSE_HEADERS];
    size_t num_lines;
    int head_done, too_many_headers;
    int bad_head; /* a field or the reason phrase breaks RFC 9110's syntax: 502, nothing passed on */
    size_t content_length;
    /* state */
    int started;     /* h2o_start_response done */
    int send_active; /* an h2o_send is waiting for proceed */
    int paused;
    int finished; /* transfer over (result in `result`) */
    int final_sent;
    CURLcode result;
    int timed_out;
} mg_forward_t;

static h2o_req_t *req_of(mg_forward_t *f)
{
    return f->r->req;
}

static int is_head(mg_str_t method)
{
    return h2o_memis(method.base, method.len, H2O_STRLIT("HEAD"));
}

/* ---------------------------------------------------------------------------------------
 * Response head: curl hands us the status line, each header line, then an empty line.
 */
static void parse_status_line(mg_forward_t *f, const char *line, size_t len)
{
    /* "HTTP/1.1 200 OK\r\n": a new head starts (after a 1xx, curl shows the next one) */
    f->num_lines = 0;
    f->too_many_headers = 0;
    f->status = 0;
    f->reason = h2o_iovec_init(NULL, 0);
    const char *sp = memchr(line, ' ', len);
    if (sp == NULL || (size_t)(line + len - sp) < 4)
        return;
    if (!isdigit((unsigned char)sp[1]) || !isdigit((unsigned char)sp[2]) || !isdigit((unsigned char)sp[3]))
        return; /* status 0: never taken for a final head (curl refuses such a reply anyway) */
    f->status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
    const char *reason = sp + 4 < line + len ? sp + 5 : line + len;
    size_t rlen = (size_t)(line + len - reason);
    while (rlen > 0 && (reason[rlen - 1] == '\r' || reason[rlen - 1] == '\n'))
        rlen--;
    f->reason = h2o_strdup(&req_of(f)->pool, reason, rlen);
}

static void keep_header_line(mg_forward_t *f, const char *line, size_t len)
{
    if (f->num_lines == MAX_RESPONSE_HEADERS) {
        f->too_many_headers = 1;
        return;
    }
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    f->lines[f->num_lines++] = h2o_strdup(&req_of(f)->pool, line, len);
}

/* The head is complete: copies the end-to-end headers into the client's response. A malformed
 * field is not dropped but refuses the whole response (bad_head): a backend that sends one is
 * broken or hostile, the field could be a security header, and h2o would write a CR in a value
 * as it is, letting the backend add fields of its own to an HTTP/1 client's response. */
static void finish_head(mg_forward_t *f)
{
    h2o_req_t *req = req_of(f);
    h2o_iovec_t names[MAX_RESPONSE_HEADERS], values[MAX_RESPONSE_HEADERS];
    mg_conn_tokens_t tokens = {.size = 0};
    size_t n = 0;
    if (!mg_is_field_value(f->reason.base, f->reason.len)) {
        f->bad_head = 1;
        return;
    }
    for (size_t i = 0; i < f->num_lines; i++) {
        if (mg_header_line_split(f->lines[i], &names[n], &values[n]) != 0) {
            f->bad_head = 1;
            return;
        }
        if (h2o_memis(names[n].base, names[n].len, H2O_STRLIT("connection")))
            mg_conn_tokens_add(&tokens, values[n].base, values[n].len);
        n++;
    }
    f->content_length = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (h2o_memis(names[i].base, names[i].len, H2O_STRLIT("content-length")))
            f->content_length = h2o_strtosize(values[i].base, values[i].len);
        if (mg_header_is_hop_by_hop(names[i].base, names[i].len, &tokens) ||
            mg_header_is_replaced_in_response(names[i].base, names[i].len))
            continue;
        h2o_add_header_by_str(&req->pool, &req->res.headers, names[i].base, names[i].len, 1, NULL, values[i].base, values[i].len);
    }
    f->head_done = 1;
}

static size_t on_header(char *data, size_t size, size_t nitems, void *arg)
{
    mg_forward_t *f = arg;
    size_t len = size * nitems;
    if (f->r->req == NULL)
        return 0;
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0)
        parse_status_line(f, data, len);
    else if (len <= 2 && (len == 0 || data[0] == '\r' || data[0] == '\n'))
        if (f->status >= 200 || f->status == 101)
            finish_head(f);
        else
            f->num_lines = 0; /* end of an interim 1xx head: the real one follows */
    else
        keep_header_line(f, data, len);
    /* a head we cannot pass on whole is refused, never cut: 0 aborts the transfer */
    return f->too_many_headers || f->bad_head ? 0 : len;
}

/* ---------------------------------------------------------------------------------------
 * Response body
 */
static void start_response(mg_forward_t *f)
{
    h2o_req_t *req = req_of(f);
    req->res.status = f->status;
    req->res.reason = f->reason.base != NULL ? f->reason.base : "";
    req->res.content_length = f->content_length;
    /* set_method turned the client's request into a HEAD: the backend's length is that of a body
     * nobody sends, and the client, which did not ask for a HEAD, must not wait for it */
    if (is_head(f->r->send_method) && !is_head(f->r->method))
        req->res.content_length = 0;
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, f->r->request_id.base,
                          f->r->request_id.len);
    mg_limits_add_headers(f->r, req);
    f->r->status = f->status;
    f->started = 1;
    /* from here on h2o writes to the client and reports a departure itself */
    mg_client_watch_stop(&f->client_watch);
    h2o_start_response(req, &f->generator);
}

static void link_flush(mg_forward_t *f)
{
    if (!h2o_linklist_is_linked(&f->flush_link))
        h2o_linklist_insert(&f->r->worker->flush_list, &f->flush_link);
}

static size_t on_body(char *data, size_t size, size_t nitems, void *arg)
{
    mg_forward_t *f = arg;
    size_t len = size * nitems;
    if (f->r->req == NULL)
        return 0;
    if (is_head(f->r->method) && !is_head(f->r->send_method))
        return len; /* set_method turned the client's HEAD into another method: no body goes back */
    if (f->recv->size >= HIGH_WATER) {
        /* the client is slower than the backend: stop reading until proceed, and stop the
         * backend's clock meanwhile */
        f->paused = 1;
        uint64_t now = h2o_now(f->r->worker->ctx.loop);
        f->timeout_left_ms = f->timeout.deadline > now ? f->timeout.deadline - now : 0;
        mg_timer_cancel(&f->timeout);
        return CURL_WRITEFUNC_PAUSE;
    }
    h2o_iovec_t room = h2o_buffer_reserve(&f->recv, len);
    memcpy(room.base, data, len);
    f->recv->size += len;
    link_flush(f);
    return len;
}

static void try_send(mg_forward_t *f);
static void release_transfer(mg_forward_t *f);

static void on_proceed(h2o_generator_t *generator, h2o_req_t *req)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, generator, generator);
    f->send_active = 0;
    mg_timer_cancel(&f->stall);
    h2o_buffer_consume(&f->sending, f->sending->size);
    if (f->paused && !f->finished) {
        f->paused = 0;
        mg_timer_set(&f->timeout, f->timeout_left_ms);
        mg_upstream_resume(f->r->worker->upstream, f->easy);
    }
    try_send(f);
}

static void on_stop(h2o_generator_t *generator, h2o_req_t *req)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, generator, generator);
    mg_forward_cancel(f->r);
}

/* Sends what `recv` holds, and the end of the response once the transfer is over. */
static void try_send(mg_forward_t *f)
{
    if (f->final_sent || f->send_active || f->r->req == NULL)
        return;
    if (!f->finished && f->recv->size == 0)
        return;
    if (!f->started)
        start_response(f);
    h2o_buffer_t *t = f->sending;
    f->sending = f->recv;
    f->recv = t;
    h2o_iovec_t buf = h2o_iovec_init(f->sending->bytes, f->sending->size);
    h2o_send_state_t state = H2O_SEND_STATE_IN_PROGRESS;
    if (f->finished)
        state = f->result == CURLE_OK ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_ERROR;
    h2o_req_t *req = req_of(f);
    f->r->bytes_sent += buf.len;
    if (state != H2O_SEND_STATE_IN_PROGRESS) {
        f->final_sent = 1;
        f->r->req = NULL;    /* h2o owns the request from the final send on */
        release_transfer(f); /* the buffers stay until the request is disposed */
        mg_request_log(f->r);
    } else {
        f->send_active = 1;
    }
    mg_timer_set(&f->stall, f->r->conf->limits.client_idle_timeout_ms);
    h2o_send(req, &buf, buf.len != 0, state);
}

/* ---------------------------------------------------------------------------------------
 * Request to the backend
 */
/* The header list for curl, in the client's order; nodes and lines live in the request's pool. */
typedef struct header_list {
    h2o_mem_pool_t *pool;
    struct curl_slist *head, **tail;
    int has_accept, has_content_type; /* else curl's defaults are turned off */
} header_list_t;

static void list_append(header_list_t *l, char *line)
{
    struct curl_slist *node = h2o_mem_alloc_pool(l->pool, sizeof(*node));
    node->data = line;
    node->next = NULL;
    *l->tail = node;
    l->tail = &node->next;
}

static char *header_line(h2o_mem_pool_t *pool, const char *name, size_t nlen, const char *value, size_t vlen)
{
    char *line = h2o_mem_alloc_pool(pool, nlen + vlen + 3);
    memcpy(line, name, nlen);
    line[nlen] = ':';
    line[nlen + 1] = ' ';
    memcpy(line + nlen + 2, value, vlen);
    line[nlen + vlen + 2] = '\0';
    return line;
}

/* Headers the gateway writes itself, so the client's copies are not forwarded. */
static int is_rewritten_in_request(const h2o_iovec_t *name)
{
    return h2o_memis(name->base, name->len, H2O_STRLIT("host")) || h2o_memis(name->base, name->len, H2O_STRLIT("content-length")) ||
           h2o_memis(name->base, name->len, H2O_STRLIT("expect")) ||
           h2o_memis(name->base, name->len, H2O_STRLIT("x-forwarded-for")) ||
           h2o_memis(name->base, name->len, H2O_STRLIT("x-forwarded-proto")) ||
           h2o_memis(name->base, name->len, H2O_STRLIT("x-forwarded-host")) ||
           h2o_memis(name->base, name->len, H2O_STRLIT("x-request-id"));
}

/* X-Forwarded-For: the client's list (all its XFF headers) with the peer appended. */
static char *forwarded_for(h2o_req_t *req, mg_str_t peer)
{
    size_t len = peer.len + 1;
    for (size_t i = 0; i < req->headers.size; i++)
        if (req->headers.entries[i].name == &H2O_TOKEN_X_FORWARDED_FOR->buf)
            len += req->headers.entries[i].value.len + 2;
    char *buf = h2o_mem_alloc_pool(&req->pool, len), *p = buf;
    for (size_t i = 0; i < req->headers.size; i++) {
        if (req->headers.entries[i].name != &H2O_TOKEN_X_FORWARDED_FOR->buf)
            continue;
        memcpy(p, req->headers.entries[i].value.base, req->headers.entries[i].value.len);
        p += req->headers.entries[i].value.len;
        *p++ = ',';
        *p++ = ' ';
    }
    memcpy(p, peer.base, peer.len);
    p[peer.len] = '\0';
    return buf;
}

/* HTTP/2 clients may split Cookie into crumbs (RFC 9113 8.2.3); an HTTP/1.1 backend gets
 * them joined with "; ". NULL when the request has no cookie. */
static char *joined_cookies(h2o_req_t *req)
{
    size_t len = 0;
    for (size_t i = 0; i < req->headers.size; i++)
        if (req->headers.entries[i].name == &H2O_TOKEN_COOKIE->buf)
            len += req->headers.entries[i].value.len + 2;
    if (len == 0)
        return NULL;
    char *buf = h2o_mem_alloc_pool(&req->pool, len + 1), *p = buf;
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        if (h->name != &H2O_TOKEN_COOKIE->buf)
            continue;
        if (p != buf) {
            *p++ = ';';
            *p++ = ' ';
        }
        memcpy(p, h->value.base, h->value.len);
        p += h->value.len;
    }
    *p = '\0';
    return buf;
}

/* Host sent to the backend: forward.host (expanded), else the client's, else (an HTTP/1.0 client that
 * sent none) the server's own host:port. */
static h2o_iovec_t backend_host(mg_request_t *r, const char *server_url)
{
    if (r->send_host.len != 0)
        return h2o_iovec_init(r->send_host.base, r->send_host.len);
    if (r->host.len != 0)
        return r->req->authority;
    const char *hostport = strstr(server_url, "://") + 3, *slash = strchr(hostport, '/');
    return h2o_iovec_init(hostport, slash != NULL ? (size_t)(slash - hostport) : strlen(hostport));
}

/* 1 when every header value can be forwarded (no CR, LF or NUL). */
static int headers_are_safe(h2o_req_t *req)
{
    for (size_t i = 0; i < req->headers.size; i++)
        if (!mg_header_value_is_safe(req->headers.entries[i].value.base, req->headers.entries[i].value.len))
            return 0;
    return 1;
}

void mg_forward_headers(mg_request_t *r, const char *server_url, mg_header_emit_t emit, void *arg)
{
    h2o_req_t *req = r->req;
    char *cookies = joined_cookies(req);
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        /* the client's Connection and what it names left before routing (mg_request_check): a
         * hop-by-hop field here was set by the route, and still never crosses */
        if (mg_header_is_hop_by_hop(h->name->base, h->name->len, NULL) || is_rewritten_in_request(h->name))
            continue;
        if (h->name != &H2O_TOKEN_COOKIE->buf) {
            emit(arg, h->name->base, h->name->len, h->value.base, h->value.len);
        } else if (cookies != NULL) {
            /* all crumbs go out as one header, where the first one was */
            emit(arg, H2O_STRLIT("cookie"), cookies, strlen(cookies));
            cookies = NULL;
        }
    }
    h2o_iovec_t host = backend_host(r, server_url);
    emit(arg, H2O_STRLIT("Host"), host.base, host.len);
    char *xff = forwarded_for(req, r->peer);
    emit(arg, H2O_STRLIT("X-Forwarded-For"), xff, strlen(xff));
    emit(arg, H2O_STRLIT("X-Forwarded-Proto"), req->scheme->name.base, req->scheme->name.len);
    if (r->host.len != 0)
        emit(arg, H2O_STRLIT("X-Forwarded-Host"), req->authority.base, req->authority.len);
    emit(arg, H2O_STRLIT("X-Request-Id"), r->request_id.base, r->request_id.len);
}

static void emit_line(void *arg, const char *name, size_t nlen, const char *value, size_t vlen)
{
    header_list_t *l = arg;
    l->has_accept |= h2o_lcstris(name, nlen, H2O_STRLIT("accept"));
    l->has_content_type |= h2o_lcstris(name, nlen, H2O_STRLIT("content-type"));
    list_append(l, header_line(l->pool, name, nlen, value, vlen));
}

/* Builds the header list sent to `server` (per attempt: the Host of an HTTP/1.0 client
 * without one is the server's). */
static void build_request_headers(mg_forward_t *f, const mg_server_conf_t *server)
{
    h2o_req_t *req = req_of(f);
    header_list_t l = {&req->pool, NULL, &l.head, 0, 0};
    mg_forward_headers(f->r, server->url, emit_line, &l);
    /* "Name:" with nothing after it tells curl not to add its own default */
    list_append(&l, (char *)"Expect:");
    if (!l.has_accept)
        list_append(&l, (char *)"Accept:");
    if (!l.has_content_type)
        list_append(&l, (char *)"Content-Type:");
    f->headers = l.head;
}

/* primary_for_writes: POST/PUT/PATCH/DELETE go to the primary and nowhere else. */
static int pinned_to_primary(const mg_backend_conf_t *b, mg_str_t method)
{
    return b->balance == MG_BALANCE_PRIMARY_FOR_WRITES && mg_method_is_write(method);
}

size_t mg_backend_first_server(mg_backend_conf_t *b, mg_str_t method)
{
    if (pinned_to_primary(b, method))
        return b->primary_index;
    if (b->balance == MG_BALANCE_FIRST_AVAILABLE)
        return 0;
    return b->schedule[atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed) % b->schedule_len];
}

static const mg_server_conf_t *pick_server(mg_forward_t *f)
{
    mg_backend_conf_t *b = f->backend;
    if (f->attempt == 0)
        f->first_server = mg_backend_first_server(b, f->r->send_method);
    return &b->servers[(f->first_server + f->attempt) % b->num_servers];
}

int mg_backend_may_retry(const mg_backend_conf_t *b, unsigned attempt, mg_str_t method)
{
    return attempt < b->retries && attempt + 1 < b->num_servers && mg_method_is_idempotent(method) && !pinned_to_primary(b, method);
}

/* Picks the server for this attempt: retries walk on from the first choice. */

static int configure_attempt(mg_forward_t *f)
{
    h2o_req_t *req = req_of(f);
    const mg_server_conf_t *server = pick_server(f);
    size_t size = strlen(server->url) + f->r->send_path.len + f->r->send_query.len + 2;
    char *url = h2o_mem_alloc_pool(&req->pool, size);
    if (mg_url_build(url, size, server->url, f->r->send_path, f->r->send_query) < 0)
        return -1;
    f->r->server = server->url;
    f->status = 0;
    f->num_lines = 0;
    f->head_done = 0;
    curl_easy_setopt(f->easy, CURLOPT_URL, url);
    if (f->headers == NULL || f->r->host.len == 0)
        build_request_headers(f, server);
    curl_easy_setopt(f->easy, CURLOPT_HTTPHEADER, f->headers);
    return 0;
}

static void configure_transfer(mg_forward_t *f)
{
    h2o_req_t *req = req_of(f);
    CURL *e = f->easy;
    mg_str_t m = f->r->send_method; /* after set_method */
    char *method = h2o_mem_alloc_pool(&req->pool, m.len + 1);
    memcpy(method, m.base, m.len);
    method[m.len] = '\0';
    if (is_head(m))
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L); /* and no request body: POSTFIELDS would make it a POST */
    else
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (req->entity.base != NULL && !is_head(m)) {
        /* the body stays in the request's memory, so a retry sends it again in full */
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->entity.base);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->entity.len);
    }
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)f->backend->connect_timeout_ms);
}

/* ---------------------------------------------------------------------------------------
 * Life cycle
 */
static void fail(mg_forward_t *f, int status, const char *code, const char *reason)
{
    mg_request_t *r = f->r;
    mg_forward_cancel(r);
    mg_request_send_error(r, status, code, reason);
}

static void on_client_gone(mg_client_watch_t *cw)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, client_watch, cw);
    f->r->status = 499; /* nginx's code for "the client closed the request" */
    mg_request_log(f->r);
    /* the connection is shut down: this answer reaches nobody, writing it makes h2o close the
     * connection and free the request */
    fail(f, 502, "backend-unavailable", "the client closed the connection");
}

static int start_attempt(mg_forward_t *f)
{
    if (configure_attempt(f) != 0)
        return -1;
    return mg_upstream_start(f->r->worker->upstream, f->easy, &f->transfer);
}

/* A transfer ended before any byte of the response reached the client. */
static void on_failed_before_response(mg_forward_t *f, CURLcode result)
{
    if (f->too_many_headers) {
        fail(f, 502, "backend-unavailable", "the backend response has too many headers");
        return;
    }
    if (f->bad_head) {
        fail(f, 502, "bad-gateway-response", "the backend response head has a malformed field or reason phrase");
        return;
    }
    if (result == CURLE_WEIRD_SERVER_REPLY) { /* what curl refuses itself: a NUL, a line without a colon... */
        fail(f, 502, "bad-gateway-response", curl_easy_strerror(result));
        return;
    }
    if (f->timed_out) {
        fail(f, 504, "backend-timeout", "the backend did not respond within the timeout");
        return;
    }
    if (mg_upstream_never_connected(f->easy, result)) {
        if (mg_backend_may_retry(f->backend, f->attempt, f->r->send_method)) {
            f->attempt++;
            if (start_attempt(f) == 0)
                return;
        }
        fail(f, 502, "backend-unavailable", "no backend server accepted the connection");
        return;
    }
    fail(f, 502, "backend-unavailable", curl_easy_strerror(result));
}

/* Nothing more comes from the backend: its slot and the request's key turn pass on now, not
 * when the client has read the response (a slow reader would hold them as long as it likes). */
static void transfer_over(mg_forward_t *f)
{
    f->finished = 1;
    mg_dispatch_complete(f->r);
}

/* The transfer is over: what `recv` holds goes out with the end of the response (an error
 * ends it abnormally). */
static void finish(mg_forward_t *f, CURLcode result)
{
    transfer_over(f);
    f->result = result;
    try_send(f);
}

static void on_done(mg_transfer_t *transfer, CURL *easy, CURLcode result)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, transfer, transfer);
    mg_timer_cancel(&f->timeout);
    if (f->r->req == NULL) {
        transfer_over(f); /* the client is gone: nobody gets the response, the dispose frees it */
        return;
    }
    /* once the client has part of the response, an error can only cut it short */
    if (f->started || (result == CURLE_OK && f->head_done && !f->too_many_headers && !f->bad_head))
        finish(f, result);
    else
        on_failed_before_response(f, result == CURLE_OK ? CURLE_WEIRD_SERVER_REPLY : result);
}

static void on_timeout(mg_timer_t *timer)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, timeout, timer);
    f->timed_out = 1;
    release_transfer(f);
    if (!f->started)
        on_failed_before_response(f, CURLE_OPERATION_TIMEDOUT);
    else
        finish(f, CURLE_OPERATION_TIMEDOUT);
}

static void on_stall(mg_timer_t *timer)
{
    mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, stall, timer);
    release_transfer(f);
    transfer_over(f); /* nothing more is read from the backend */
    f->result = CURLE_WRITE_ERROR;
    mg_client_abort(f->client_req);
}

static void on_flush(void *arg)
{
    mg_worker_t *w = arg;
    while (!h2o_linklist_is_empty(&w->flush_list)) {
        mg_forward_t *f = H2O_STRUCT_FROM_MEMBER(mg_forward_t, flush_link, w->flush_list.next);
        h2o_linklist_unlink(&f->flush_link);
        /* bytes only go out once the head is complete: curl delivers the head first */
        if (f->head_done)
            try_send(f);
    }
}

const mg_upstream_callbacks_t mg_forward_upstream_callbacks = {on_flush};

static mg_forward_t *forward_new(mg_request_t *r)
{
    h2o_req_t *req = r->req;
    mg_forward_t *f = h2o_mem_alloc_pool(&req->pool, sizeof(*f));
    memset(f, 0, sizeof(*f));
    f->transfer.done = on_done;
    f->r = r;
    f->backend = r->route->forward.backend;
    f->generator.proceed = on_proceed;
    f->generator.stop = on_stop;
    mg_timer_init(&f->timeout, &r->worker->timers, on_timeout);
    mg_timer_init(&f->stall, &r->worker->timers, on_stall);
    f->client_req = req;
    h2o_buffer_init(&f->recv, &h2o_socket_buffer_prototype);
    h2o_buffer_init(&f->sending, &h2o_socket_buffer_prototype);
    r->forward = f;
    return f;
}

void mg_forward_start(mg_request_t *r)
{
    mg_forward_t *f = forward_new(r);
    if (!headers_are_safe(r->req)) {
        fail(f, 400, "bad-request", "a request header value contains CR, LF or NUL");
        return;
    }
    if ((f->easy = mg_upstream_acquire(r->worker->upstream)) == NULL) {
        fail(f, 500, "internal", "cannot allocate a backend transfer");
        return;
    }
    configure_transfer(f);
    mg_timer_set(&f->timeout, f->backend->timeout_ms);
    mg_client_watch_start(&f->client_watch, &r->worker->timers, r->req, on_client_gone);
    if (start_attempt(f) != 0)
        fail(f, 502, "backend-unavailable", "cannot start the backend transfer");
}

/* Gives the curl handle back; the connection stays in the worker's keep-alive pool. */
static void release_transfer(mg_forward_t *f)
{
    mg_timer_cancel(&f->timeout);
    mg_client_watch_stop(&f->client_watch);
    if (h2o_linklist_is_linked(&f->flush_link))
        h2o_linklist_unlink(&f->flush_link);
    if (f->easy != NULL)
        mg_upstream_release(f->r->worker->upstream, f->easy);
    f->easy = NULL;
}

void mg_forward_cancel(mg_request_t *r)
{
    mg_forward_t *f = r->forward;
    if (f == NULL)
        return;
    r->forward = NULL;
    release_transfer(f);
    transfer_over(f);
    mg_timer_cancel(&f->stall);
    h2o_buffer_dispose(&f->recv);
    h2o_buffer_dispose(&f->sending);
}
