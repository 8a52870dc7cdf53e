/* gateway/backend/h1.c: the request head, the response head and the framing of a backend's response. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include "gateway/backend/h1.h"

/* ---------------------------------------------------------------------------------------
 * The request head
 */
static mg_backend_header_t fields[] = {{{"Host", 4}, {"example.com", 11}}, {{"x-a", 3}, {"1 2", 3}}};

static char *head_of(const char *method, const char *prefix, const char *path, const char *query, size_t body_len)
{
    mg_exchange_request_t req = {.method = mg_str(method, strlen(method)),
                                 .path = mg_str(path, strlen(path)),
                                 .query = mg_str(query, strlen(query)),
                                 .headers = fields,
                                 .num_headers = 2};
    h2o_iovec_t pre = h2o_iovec_init(prefix, strlen(prefix));
    size_t size = mg_h1_request_head_size(&req, pre, body_len);
    static char out[1024];
    memset(out, '#', sizeof(out));
    size_t len = mg_h1_request_head_write(out, &req, pre, body_len);
    cr_assert(len <= size, "wrote %zu of %zu", len, size);
    cr_assert(size - len <= 20, "the size is a bound, not a guess");
    out[len] = '\0';
    return out;
}

Test(h1_request, head_is_the_request_line_fields_and_empty_line)
{
    cr_expect_str_eq(head_of("GET", "", "/a/b", "", (size_t)-1), "GET /a/b HTTP/1.1\r\nHost: example.com\r\nx-a: 1 2\r\n\r\n");
    cr_expect_str_eq(head_of("DELETE", "/prefix", "/x", "q=1&r", (size_t)-1),
                     "DELETE /prefix/x?q=1&r HTTP/1.1\r\nHost: example.com\r\nx-a: 1 2\r\n\r\n");
}

Test(h1_request, content_length_when_there_is_a_body)
{
    cr_expect_str_eq(head_of("POST", "", "/", "", 0),
                     "POST / HTTP/1.1\r\nHost: example.com\r\nx-a: 1 2\r\ncontent-length: 0\r\n\r\n");
    cr_expect_str_eq(head_of("PUT", "", "/", "", 1048576),
                     "PUT / HTTP/1.1\r\nHost: example.com\r\nx-a: 1 2\r\ncontent-length: 1048576\r\n\r\n");
    char expect[128];
    snprintf(expect, sizeof(expect), "PUT / HTTP/1.1\r\nHost: example.com\r\nx-a: 1 2\r\ncontent-length: %zu\r\n\r\n",
             SIZE_MAX - 1);
    cr_expect_str_eq(head_of("PUT", "", "/", "", SIZE_MAX - 1), expect);
}

/* ---------------------------------------------------------------------------------------
 * The response head
 */
typedef struct head_case {
    const char *bytes;
    int head_request;
    ssize_t expect; /* > 0: parses (to the end of the head), 0: incomplete, -1: refused */
    mg_attempt_result_t err;
    mg_h1_framing_t framing;
    uint64_t content_length;
    int keep_alive;
} head_case_t;

#define OK_(s, f, cl, ka)                                                                                                          \
    {                                                                                                                              \
        s, 0, 1, 0, f, cl, ka                                                                                                      \
    }
#define BAD(s, e)                                                                                                                  \
    {                                                                                                                              \
        s, 0, -1, e, 0, 0, 0                                                                                                       \
    }

static const head_case_t cases[] = {
    OK_("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", MG_H1_LENGTH, 5, 1),
    OK_("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", MG_H1_LENGTH, 5, 1),
    OK_("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n", MG_H1_LENGTH, 7, 1),
    OK_("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", MG_H1_CHUNKED, 0, 1),
    OK_("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n", MG_H1_CHUNKED, 0, 1),
    OK_("HTTP/1.1 200 OK\r\n\r\n", MG_H1_UNTIL_CLOSE, 0, 0),
    OK_("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive, close\r\n\r\n", MG_H1_LENGTH, 5, 0),
    OK_("HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", MG_H1_LENGTH, 5, 0),
    OK_("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", MG_H1_NO_BODY, 5, 1),
    OK_("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", MG_H1_NO_BODY, 0, 1),
    OK_("HTTP/1.1 100 Continue\r\n\r\n", MG_H1_NO_BODY, 0, 1),
    OK_("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", MG_H1_UNTIL_CLOSE, 0, 0),
    OK_("HTTP/1.1 200 OK\nContent-Length: 1\n\n", MG_H1_LENGTH, 1, 1),
    /* RFC 9112 5.1: white space before the colon is removed by a proxy, not passed on */
    OK_("HTTP/1.1 200 OK\r\nX-Space : v\r\nContent-Length: 1\r\n\r\n", MG_H1_LENGTH, 1, 1),
    {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", 1, 1, 0, MG_H1_NO_BODY, 5, 1},
    /* framing a backend could use to smuggle a second response */
    BAD("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    /* not HTTP/1.x */
    BAD("SSH-2.0-OpenSSH_9.2\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 2x0 Weird\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/2.0 200 OK\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    BAD("HTTP/1.1 099 Low\r\n\r\n", MG_ATTEMPT_BAD_RESPONSE),
    /* fields and reasons an HTTP/1 client would read differently */
    BAD("HTTP/1.1 200 OK\r\nX-Evil: a\rSet-Cookie: x=1\r\n\r\n", MG_ATTEMPT_BAD_HEAD),
    BAD("HTTP/1.1 200 OK\r\nX-Evil: a\x01z\r\n\r\n", MG_ATTEMPT_BAD_HEAD),
    BAD("HTTP/1.1 200 OK\r\nX Bad: v\r\n\r\n", MG_ATTEMPT_BAD_HEAD),
    BAD("HTTP/1.1 200 OK\r\nX(Bad): v\r\n\r\n", MG_ATTEMPT_BAD_HEAD),
    BAD("HTTP/1.1 200 OK\r\n: v\r\n\r\n", MG_ATTEMPT_BAD_HEAD),
    BAD("HTTP/1.1 200 OK\r\nno colon\r\n\r\n", MG_ATTEMPT_BAD_HEAD),
    BAD("HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n", MG_ATTEMPT_BAD_HEAD),
    BAD("HTTP/1.1 200 O\x1bK\r\n\r\n", MG_ATTEMPT_BAD_HEAD),
    BAD("HTTP/1.1 200 OK\rSet-Cookie: x=1\r\n\r\n", MG_ATTEMPT_BAD_HEAD),
    /* not complete yet */
    {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", 0, 0, 0, 0, 0, 0},
    {"HTTP/1.1 200", 0, 0, 0, 0, 0, 0},
    {"", 0, 0, 0, 0, 0, 0},
};

Test(h1_response, head_table)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const head_case_t *c = &cases[i];
        char buf[512];
        size_t len = strlen(c->bytes);
        memcpy(buf, c->bytes, len);
        mg_h1_head_t head;
        mg_attempt_result_t err = MG_ATTEMPT_OK;
        const char *why = NULL;
        ssize_t rc = mg_h1_parse_head(buf, len, c->head_request, &head, &err, &why);
        if (c->expect > 0) {
            cr_expect_eq(rc, (ssize_t)len, "case %zu: %zd (%s)", i, rc, why != NULL ? why : "");
            if (rc <= 0)
                continue;
            cr_expect_eq(head.framing, c->framing, "case %zu: framing %d", i, head.framing);
            cr_expect_eq(head.keep_alive, c->keep_alive, "case %zu: keep_alive", i);
            if (c->framing == MG_H1_LENGTH)
                cr_expect_eq(head.content_length, c->content_length, "case %zu", i);
        } else if (c->expect == 0) {
            cr_expect_eq(rc, 0, "case %zu: %zd", i, rc);
        } else {
            cr_expect_eq(rc, -1, "case %zu: %zd", i, rc);
            cr_expect_eq(err, c->err, "case %zu: result %d, want %d (%s)", i, err, c->err, why != NULL ? why : "");
            cr_expect(why != NULL, "case %zu: a reason", i);
        }
    }
}

Test(h1_response, fields_lower_cased_and_trimmed_reason_kept)
{
    char buf[] = "HTTP/1.1 404 Not Here\r\nX-Mixed-Case:  v 1 \r\nX-Space : w\r\nContent-Length: 0\r\n\r\n";
    mg_h1_head_t head;
    mg_attempt_result_t err;
    const char *why;
    cr_assert_gt(mg_h1_parse_head(buf, strlen(buf), 0, &head, &err, &why), 0);
    cr_expect_eq(head.status, 404);
    cr_expect_eq(head.reason.len, 8);
    cr_expect_eq(memcmp(head.reason.base, "Not Here", 8), 0);
    cr_assert_eq(head.num_fields, 3);
    cr_expect_eq(memcmp(head.fields[0].name.base, "x-mixed-case", 12), 0);
    cr_expect_eq(head.fields[0].value.len, 3);
    cr_expect_eq(memcmp(head.fields[1].name.base, "x-space", head.fields[1].name.len), 0);
    cr_expect_eq(head.fields[1].name.len, 7);
}

Test(h1_response, too_many_fields_and_too_large_heads)
{
    char buf[8192];
    size_t len = (size_t)snprintf(buf, sizeof(buf), "HTTP/1.1 200 OK\r\n");
    for (int i = 0; i < MG_BACKEND_MAX_FIELDS; i++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "X-%d: v\r\n", i);
    mg_h1_head_t head;
    mg_attempt_result_t err = MG_ATTEMPT_OK;
    const char *why;
    char copy[8192];
    memcpy(copy, buf, len);
    memcpy(copy + len, "\r\n", 2);
    cr_expect_eq(mg_h1_parse_head(copy, len + 2, 0, &head, &err, &why), (ssize_t)len + 2, "exactly the limit");
    len += (size_t)snprintf(buf + len, sizeof(buf) - len, "X-last: v\r\n\r\n");
    cr_expect_eq(mg_h1_parse_head(buf, len, 0, &head, &err, &why), -1);
    cr_expect_eq(err, MG_ATTEMPT_TOO_MANY_HEADERS);

    static char big[MG_H1_MAX_HEAD + 64];
    memcpy(big, "HTTP/1.1 200 OK\r\nX-Long: ", 25);
    memset(big + 25, 'a', sizeof(big) - 25);
    cr_expect_eq(mg_h1_parse_head(big, MG_H1_MAX_HEAD, 0, &head, &err, &why), 0, "incomplete, within the limit");
    cr_expect_eq(mg_h1_parse_head(big, sizeof(big), 0, &head, &err, &why), -1);
    cr_expect_eq(err, MG_ATTEMPT_BAD_RESPONSE);
}

/* ---------------------------------------------------------------------------------------
 * The body
 */
static mg_h1_body_t body_of(mg_h1_framing_t framing, uint64_t length)
{
    mg_h1_head_t head = {.framing = framing, .content_length = length};
    mg_h1_body_t b;
    mg_h1_body_init(&b, &head);
    return b;
}

/* Feeds `raw` in pieces of `step` bytes, as reads would; what came out goes to `out`. */
static mg_h1_decoded_t feed(mg_h1_body_t *b, const char *raw, size_t step, char *out, size_t *out_len, size_t *extra)
{
    char buf[512];
    size_t have = 0, pos = 0, len = strlen(raw);
    const char *why = NULL;
    *out_len = 0;
    *extra = 0;
    while (pos < len || have != 0) {
        size_t n = len - pos < step ? len - pos : step;
        memcpy(buf + have, raw + pos, n);
        pos += n;
        have += n;
        size_t body;
        mg_h1_decoded_t d = mg_h1_body_decode(b, buf, have, &body, extra, &why);
        if (d == MG_H1_ERROR) {
            cr_expect(why != NULL);
            return d;
        }
        memcpy(out + *out_len, buf, body);
        *out_len += body;
        have = 0;
        if (d == MG_H1_END)
            return d;
        if (pos == len)
            return d;
    }
    return MG_H1_MORE;
}

Test(h1_body, content_length_ends_and_counts_what_follows)
{
    char out[512];
    size_t n, extra;
    for (size_t step = 1; step <= 8; step++) {
        mg_h1_body_t b = body_of(MG_H1_LENGTH, 5);
        cr_expect_eq(feed(&b, "hello", step, out, &n, &extra), MG_H1_END);
        cr_expect_eq(n, 5);
        cr_expect_eq(memcmp(out, "hello", 5), 0);
    }
    mg_h1_body_t b = body_of(MG_H1_LENGTH, 5);
    cr_expect_eq(feed(&b, "helloHTTP/1.1 200 OK", 64, out, &n, &extra), MG_H1_END);
    cr_expect_eq(n, 5);
    cr_expect_eq(extra, 15, "bytes after the response are reported, never taken as body");
    b = body_of(MG_H1_LENGTH, 10);
    cr_expect_eq(feed(&b, "hello", 64, out, &n, &extra), MG_H1_MORE);
}

Test(h1_body, chunked_in_any_pieces)
{
    const char *raw = "5\r\nhello\r\n1;ext=1\r\n \r\na\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n";
    char out[512];
    size_t n, extra;
    for (size_t step = 1; step <= strlen(raw); step++) {
        mg_h1_body_t b = body_of(MG_H1_CHUNKED, 0);
        cr_expect_eq(feed(&b, raw, step, out, &n, &extra), MG_H1_END, "step %zu", step);
        cr_expect_eq(n, 16, "step %zu: %zu", step, n);
        cr_expect_eq(memcmp(out, "hello 0123456789", 16), 0);
        cr_expect_eq(extra, 0);
    }
}

Test(h1_body, chunked_hostile)
{
    static const char *const bad[] = {"zz\r\nhello\r\n0\r\n\r\n", "5\r\nhelloXX0\r\n\r\n", "ffffffffffffffffff\r\n",
                                      "-5\r\nhello\r\n", " 5\r\nhello\r\n"};
    char out[512];
    size_t n, extra;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mg_h1_body_t b = body_of(MG_H1_CHUNKED, 0);
        cr_expect_eq(feed(&b, bad[i], 64, out, &n, &extra), MG_H1_ERROR, "case %zu", i);
    }
    mg_h1_body_t b = body_of(MG_H1_CHUNKED, 0);
    cr_expect_eq(feed(&b, "2\r\nhi\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n", 64, out, &n, &extra), MG_H1_END);
    cr_expect_eq(n, 2);
    cr_expect_eq(extra, 17);
}

Test(h1_body, no_body_and_until_close)
{
    char out[512];
    size_t n, extra;
    mg_h1_body_t b = body_of(MG_H1_NO_BODY, 0);
    cr_expect_eq(feed(&b, "x", 64, out, &n, &extra), MG_H1_END);
    cr_expect_eq(n, 0);
    cr_expect_eq(extra, 1);
    b = body_of(MG_H1_UNTIL_CLOSE, 0);
    cr_expect_eq(feed(&b, "anything at all", 4, out, &n, &extra), MG_H1_MORE);
    cr_expect_eq(n, 15);
}
