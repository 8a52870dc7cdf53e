/*
 * Header fields (headers.c): which cross the proxy (RFC 9110 7.6.1) and which are well-formed
 * (RFC 9110 5, RFC 9112 5, 6; a Host per RFC 3986 3.2). Pure functions over h2o's structures and
 * picohttpparser's, unit-tested, for the request's checks and the backend side alike.
 */
#ifndef MG_GATEWAY_HEADERS_H
#define MG_GATEWAY_HEADERS_H

#include <h2o.h>
#include "matchers/matchers.h"

/* The header names listed in Connection (RFC 9110 7.6.1), lower-cased, at most 16 kept. */
typedef struct mg_conn_tokens {
    char names[16][32];
    unsigned char lens[16];
    size_t size;
} mg_conn_tokens_t;

/* Adds the comma-separated tokens of one Connection header value. */
void mg_conn_tokens_add(mg_conn_tokens_t *tokens, const char *value, size_t len);
/* 1 when `name` is one of `list` (entries with their lengths, ended by {NULL, 0}): exact bytes. */
int mg_header_is_listed(const char *name, size_t len, const h2o_iovec_t *list);
/* 1 when the header must not cross the proxy: hop-by-hop, or named in Connection. `name` is lower case. */
int mg_header_is_hop_by_hop(const char *name, size_t len, const mg_conn_tokens_t *tokens);
/* 1 when the value can be forwarded as is: no CR, LF or NUL. */
int mg_header_value_is_safe(const char *value, size_t len);
/* Removes, in place and keeping the order of the rest, the hop-by-hop fields of a request as the
 * client sent it, and every field its Connection headers name (Connection included). */
void mg_headers_strip_hop_by_hop(h2o_headers_t *headers);
/* The RFC 9112 framing rules h2o 2.2.5 does not apply to an HTTP/1 request head, on its fields as
 * picohttpparser read them: no folded line, at most one Host, Content-Length values that agree,
 * Transfer-Encoding only as a single `chunked`, never with Content-Length, never in HTTP/1.0.
 * NULL when the head keeps them, else what is wrong. */
struct phr_header;
const char *mg_http1_framing_error(const struct phr_header *headers, size_t n, int minor_version);
/* RFC 9110 5.1, 5.5 for one field of a client's request: a token for a name, no control character
 * but HTAB in the value; over HTTP/2 (`http2`) no white space at either end of the value either
 * (RFC 9113 8.2.1). NULL when valid, else what is wrong. */
const char *mg_request_field_error(const char *name, size_t nlen, const char *value, size_t vlen, int http2);
/* Why the request's method, target and header fields cannot be passed on, NULL when they can:
 * the method must be a token (RFC 9110 9.1; h2o checks neither HTTP/2's :method nor all of an
 * HTTP/1 method), the target hold no white space or control character (h2o does not check
 * HTTP/2's :path), every field of an HTTP/2 request pass mg_request_field_error (h2o's HTTP/1
 * parser applies the same rules itself, so HTTP/1 fields are not checked twice; its HPACK decoder
 * does not apply all of them). Checked once per request, before
 * routing, whatever the route does with it (forward, tunnel, bridge). */
const char *mg_request_head_error(const h2o_req_t *req);
/* Splits a header line of a backend's response ("Name: value", without CR LF) into its name
 * (lower-cased in place; white space before the colon dropped, RFC 9112 5.1) and its value
 * (surrounding white space trimmed). -1 when it is not a valid field: no colon, a name that is not
 * a token (a folded line starts with white space), a value with a control character (RFC 9110 5.5). */
int mg_header_line_split(h2o_iovec_t line, h2o_iovec_t *name, h2o_iovec_t *value);

/* 1 when s[0..len) is an authority as Host and :authority carry it (RFC 9110 7.2, RFC 3986 3.2.2,
 * 3.2.3): a non-empty host (a reg-name or IPv4 address: unreserved, sub-delims and pct-encoded
 * characters; or an IP-literal in brackets) and an optional ":" port (at most 65535). No userinfo,
 * no white space, '/', '?', '#', '@', '\\' or control character. */
int mg_authority_is_valid(const char *s, size_t len);

#endif
