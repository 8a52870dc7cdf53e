/*
 * libFuzzer target: an HTTP/2 request's header block through h2o's HPACK decoder (the patched
 * static libh2o-evloop, deps/h2o/patches) and then the gateway's request check
 * (mg_request_head_error), as a request reaches the handler. The first byte picks the decoder's
 * budget, the rest is the block. Properties checked on every input:
 *   - the decoder never decodes more header list than its budget (patch 0002), and says so
 *     (ENHANCE_YOUR_CALM) when it stops;
 *   - a request it hands over carries no connection-specific field (keep-alive,
 *     proxy-connection, connection, transfer-encoding, upgrade, te other than "trailers") and
 *     no content-length (patch 0003 and h2o's own list);
 *   - a request the check accepts makes exactly one HTTP/1.1 request head towards a backend:
 *     "METHOD /p HTTP/1.1" and its fields, read back by picohttpparser, give the same method,
 *     the same number of fields, the same names and values (no request-line or header
 *     injection through :method or a field).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/request/headers.h"
#include "gateway/phr.h"
#include "h2o/http2.h"
#include "h2o/http2_internal.h"

static int is_name(const h2o_header_t *h, const char *name)
{
    return h2o_memis(h->name->base, h->name->len, name, strlen(name));
}

static void check_no_connection_field(const h2o_req_t *req)
{
    static const char *const names[] = {"keep-alive", "proxy-connection", "connection", "transfer-encoding",
                                        "upgrade",    "content-length",   NULL};
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        for (size_t k = 0; names[k] != NULL; k++)
            if (is_name(h, names[k]))
                abort();
        if (is_name(h, "te") && !h2o_lcstris(h->value.base, h->value.len, H2O_STRLIT("trailers")))
            abort();
    }
}

/* The request head the gateway would send for `req`, to a path of its own making. */
static size_t serialize(const h2o_req_t *req, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "%.*s /p HTTP/1.1\r\n", (int)req->method.len, req->method.base);
    for (size_t i = 0; i < req->headers.size && n < cap; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        n += (size_t)snprintf(buf + n, cap - n, "%.*s: %.*s\r\n", (int)h->name->len, h->name->base, (int)h->value.len,
                              h->value.base);
    }
    if (n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "\r\n");
    return n;
}

static void check_one_request(const h2o_req_t *req)
{
    static char buf[1 << 20];
    struct phr_header headers[H2O_MAX_HEADERS];
    size_t n = serialize(req, buf, sizeof(buf)), num = H2O_MAX_HEADERS, mlen, plen;
    const char *method, *path;
    int minor;
    if (n >= sizeof(buf) || req->headers.size > H2O_MAX_HEADERS)
        return; /* beyond what picohttpparser reads at once: nothing to compare */
    if (phr_parse_request(buf, n, &method, &mlen, &path, &plen, &minor, headers, &num, 0) != (int)n)
        abort();
    if (!h2o_memis(method, mlen, req->method.base, req->method.len) || !h2o_memis(path, plen, H2O_STRLIT("/p")) ||
        num != req->headers.size)
        abort();
    for (size_t i = 0; i < num; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        if (!h2o_memis(headers[i].name, headers[i].name_len, h->name->base, h->name->len) ||
            !h2o_memis(headers[i].value, headers[i].value_len, h->value.base, h->value.len))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t budget = data[0] == 0xff ? H2O_HTTP2_MAX_HEADER_LIST_SIZE : (size_t)data[0] * 64, used = 0, content_length;
    h2o_hpack_header_table_t table;
    memset(&table, 0, sizeof(table));
    table.hpack_capacity = table.hpack_max_capacity = 4096;
    h2o_req_t req;
    memset(&req, 0, sizeof(req));
    req.version = 0x200;
    h2o_mem_init_pool(&req.pool);
    int exists = 0;
    const char *err = NULL;

    int ret = h2o_hpack_parse_headers(&req, &table, data + 1, size - 1, &exists, &content_length, NULL, budget, &used, &err);
    if (used > budget)
        abort();
    if (ret == 0 || ret == H2O_HTTP2_ERROR_INVALID_HEADER_CHAR)
        check_no_connection_field(&req);
    if (ret == 0 && (exists & H2O_HPACK_PARSE_HEADERS_METHOD_EXISTS) != 0) {
        req.method = req.input.method;
        if (mg_request_head_error(&req) == NULL)
            check_one_request(&req);
    }
    h2o_mem_clear_pool(&req.pool);
    h2o_hpack_dispose_header_table(&table);
    return 0;
}
