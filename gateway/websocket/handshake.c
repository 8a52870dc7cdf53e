/*
 * The client's side of a WebSocket handshake (RFC 6455 4.2.1), for the tunnel and the bridge
 * alike. Over HTTP/1.1 only: h2o 2.2.5 has no WebSocket over HTTP/2 (RFC 8441).
 */
#include "gateway/websocket/internal.h"

const char *mg_ws_check_handshake(h2o_req_t *req, h2o_iovec_t *key)
{
    if (req->version != 0x101)
        return "a WebSocket upgrade needs HTTP/1.1";
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")))
        return "a WebSocket upgrade must be a GET";
    ssize_t k = h2o_find_header_by_str(&req->headers, H2O_STRLIT("sec-websocket-key"), -1);
    ssize_t v = h2o_find_header_by_str(&req->headers, H2O_STRLIT("sec-websocket-version"), -1);
    if (k < 0 || req->headers.entries[k].value.len != 24)
        return "missing or invalid Sec-WebSocket-Key";
    if (v < 0 || !h2o_memis(req->headers.entries[v].value.base, req->headers.entries[v].value.len, H2O_STRLIT("13")))
        return "unsupported Sec-WebSocket-Version (13 expected)";
    *key = req->headers.entries[k].value;
    return NULL;
}
