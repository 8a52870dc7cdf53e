/*
 * What a request must be before anything reads it: RFC 9112 framing of an HTTP/1 head (the rules
 * h2o 2.2.5 does not apply), header fields of valid syntax, an authority that is a host[:port];
 * then what the client's connection alone was meant to carry is taken out of its headers, before
 * routing, so that neither conditions, templates nor the route's actions see it, and a client's
 * Connection header can never remove what a route adds.
 */
#include <sys/socket.h>
#include "gateway/internal.h"
#include "gateway/request/headers.h"
#include "gateway/phr.h"

/*
 * h2o consumes Host, Content-Length and Transfer-Encoding while it parses an HTTP/1 head (the last
 * Host wins, the first Content-Length, the last Transfer-Encoding) and keeps none of them in
 * req->headers, but the head itself is still at the start of the connection's input buffer while
 * the request runs (h2o consumes it when the response is done; chunked bodies are decoded in place
 * after it). So it is read again here, as h2o read it.
 */
static const char *http1_framing_error(h2o_req_t *req)
{
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    struct phr_header headers[H2O_MAX_HEADERS];
    size_t num_headers = H2O_MAX_HEADERS, method_len, path_len;
    const char *method, *path;
    int minor_version;
    if (sock == NULL || sock->input == NULL)
        return "the request head cannot be read again";
    if (phr_parse_request(sock->input->bytes, sock->input->size, &method, &method_len, &path, &path_len, &minor_version, headers,
                          &num_headers, 0) < 0)
        return "the request head cannot be read again";
    return mg_http1_framing_error(headers, num_headers, minor_version);
}

/* Host (HTTP/1) or :authority (HTTP/2), when the client sent one that is not empty: h2o fills in
 * its own host's name otherwise. */
static int authority_is_valid(h2o_req_t *req)
{
    h2o_iovec_t a = req->authority;
    return a.base == req->hostconf->authority.hostport.base || a.len == 0 || mg_authority_is_valid(a.base, a.len);
}

int mg_request_check(mg_request_t *r)
{
    h2o_req_t *req = r->req;
    const char *why;
    if (req->version < 0x200 && (why = http1_framing_error(req)) != NULL) {
        /* what follows on the connection cannot be told apart from this request's body */
        mg_request_send_error_and_close(r, 400, "bad-request", why);
        return -1;
    }
    if ((why = mg_request_head_error(req)) != NULL) {
        mg_request_send_error(r, 400, "bad-request", why);
        return -1;
    }
    if (!authority_is_valid(req)) {
        mg_request_send_error(r, 400, "bad-request", "the Host (or :authority) is not a valid host[:port]");
        return -1;
    }
    mg_headers_strip_hop_by_hop(&req->headers);
    return 0;
}
