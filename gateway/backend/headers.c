/*
 * The header fields between the gateway and a backend: what a backend gets for a request (the
 * client's fields less those of its connection and those the gateway writes, then Host and the
 * X-Forwarded-* and X-Request-Id the gateway adds), and which fields of a backend's response the
 * gateway writes itself. The field syntax rules both directions share are gateway/request/headers.c's.
 */
#include <string.h>
#include "gateway/backend/internal.h"

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

typedef struct field_list {
    h2o_mem_pool_t *pool;
    H2O_VECTOR(mg_backend_header_t) v;
} field_list_t;

static void emit_field(void *arg, const char *name, size_t nlen, const char *value, size_t vlen)
{
    field_list_t *l = arg;
    h2o_vector_reserve(l->pool, &l->v, l->v.size + 1);
    l->v.entries[l->v.size++] = (mg_backend_header_t){h2o_iovec_init(name, nlen), h2o_iovec_init(value, vlen)};
}

mg_backend_header_t *mg_forward_header_list(mg_request_t *r, const char *server_url, size_t *num)
{
    field_list_t l = {&r->req->pool, {NULL, 0, 0}};
    /* the client's fields at most, and the five the gateway adds */
    h2o_vector_reserve(l.pool, &l.v, r->req->headers.size + 5);
    mg_forward_headers(r, server_url, emit_field, &l);
    *num = l.v.size;
    return l.v.entries;
}

int mg_header_is_replaced_in_response(const char *name, size_t len)
{
    /* h2o writes its own Date and Server, and frames the body itself (content-length is
     * passed as a number, not as a header); the request id is the one the gateway sent */
    static const h2o_iovec_t replaced[] = {
        {H2O_STRLIT("date")}, {H2O_STRLIT("server")}, {H2O_STRLIT("content-length")}, {H2O_STRLIT("x-request-id")}, {NULL, 0}};
    static const uint32_t replaced_lengths = 1u << 4 | 1u << 6 | 1u << 12 | 1u << 14; /* as bits */
    return len < 32 && (replaced_lengths >> len & 1) && mg_header_is_listed(name, len, replaced);
}
