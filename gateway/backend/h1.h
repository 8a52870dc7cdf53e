/*
 * HTTP/1.1 to a backend, without sockets (h1.c): the request head as one buffer, the response head
 * parsed and checked, and the framing of the response body decided and decoded. The builtin client
 * (client_h1.c) drives these on its connections; the unit tests and the fuzz target drive them on
 * bytes. The backend is not trusted: whatever could let two parties disagree on where a response
 * ends (both Content-Length and Transfer-Encoding, differing lengths, a bad chunk, bytes after the
 * end) fails the response, and its connection is never used again.
 */
#ifndef MG_GATEWAY_BACKEND_H1_H
#define MG_GATEWAY_BACKEND_H1_H

#include <sys/types.h>
#include "gateway/backend/client.h"
#include "gateway/phr.h"

/* A response head longer than this is refused (MG_ATTEMPT_BAD_RESPONSE): libcurl's limit too. */
#define MG_H1_MAX_HEAD (100 * 1024)

/* ---------------------------------------------------------------------------------------
 * The request head
 */

/* The bytes of "METHOD prefix+path[?query] HTTP/1.1", the fields, a Content-Length when `body_len`
 * is not (size_t)-1, and the empty line. */
size_t mg_h1_request_head_size(const mg_exchange_request_t *req, h2o_iovec_t prefix, size_t body_len);
/* Writes them into `out` (mg_h1_request_head_size bytes) by copying alone; returns the length. */
size_t mg_h1_request_head_write(char *out, const mg_exchange_request_t *req, h2o_iovec_t prefix, size_t body_len);

/* ---------------------------------------------------------------------------------------
 * The response head
 */
typedef enum mg_h1_framing {
    MG_H1_NO_BODY,     /* HEAD, 1xx, 204, 304 */
    MG_H1_LENGTH,      /* Content-Length */
    MG_H1_CHUNKED,     /* Transfer-Encoding: chunked */
    MG_H1_UNTIL_CLOSE, /* neither: the body ends when the backend closes (and so does the connection) */
} mg_h1_framing_t;

typedef struct mg_h1_head {
    int status, minor_version;
    h2o_iovec_t reason;
    mg_backend_header_t fields[MG_BACKEND_MAX_FIELDS]; /* names lower-cased, values trimmed */
    size_t num_fields;
    mg_h1_framing_t framing;
    uint64_t content_length; /* MG_H1_LENGTH */
    int keep_alive;          /* the connection may carry another request after this response */
} mg_h1_head_t;

/*
 * Parses the response head at buf[0..len) (names are lower-cased in place). Returns its length,
 * 0 when it is not complete yet, or -1 with *err (MG_ATTEMPT_BAD_RESPONSE, _BAD_HEAD,
 * _TOO_MANY_HEADERS) and *why set. An interim 1xx head (not 101) parses like any other: the caller
 * skips it. `head_request`: the request was a HEAD (no body follows whatever the fields say).
 */
ssize_t mg_h1_parse_head(char *buf, size_t len, int head_request, mg_h1_head_t *head, mg_attempt_result_t *err, const char **why);

/* ---------------------------------------------------------------------------------------
 * The response body
 */
typedef struct mg_h1_body {
    mg_h1_framing_t framing;
    uint64_t left; /* MG_H1_LENGTH: bytes still to come */
    struct phr_chunked_decoder chunked;
} mg_h1_body_t;

void mg_h1_body_init(mg_h1_body_t *b, const mg_h1_head_t *head);

typedef enum mg_h1_decoded {
    MG_H1_MORE,  /* buf[0..*body) is body; the rest of the bytes given were used: more is to come */
    MG_H1_END,   /* buf[0..*body) is body and ends it; buf[*body..*body + *extra) came after the end */
    MG_H1_ERROR, /* not valid framing (*why) */
} mg_h1_decoded_t;

/* Decodes the raw bytes buf[0..len) in place. MG_H1_UNTIL_CLOSE never ends here: the close does. */
mg_h1_decoded_t mg_h1_body_decode(mg_h1_body_t *b, char *buf, size_t len, size_t *body, size_t *extra, const char **why);

#endif
