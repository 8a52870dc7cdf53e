/*
 * HTTP/1.1 to a backend without sockets: the request head by copying alone (no printf, no URL
 * parsing: the prefix was taken from the server's url once), the response head through
 * picohttpparser with every field checked, and the body's framing (RFC 9112 6.3) decided strictly.
 */
#include <string.h>
#include "gateway/backend/h1.h"
#include "gateway/format.h"
#include "gateway/request/request.h"

/* ---------------------------------------------------------------------------------------
 * The request head
 */
#define CL_NAME "content-length: "

size_t mg_h1_request_head_size(const mg_exchange_request_t *req, h2o_iovec_t prefix, size_t body_len)
{
    size_t size = req->method.len + 1 + prefix.len + req->path.len + (req->query.len != 0 ? 1 + req->query.len : 0) +
                  sizeof(" HTTP/1.1\r\n") - 1 + 2;
    for (size_t i = 0; i < req->num_headers; i++)
        size += req->headers[i].name.len + 2 + req->headers[i].value.len + 2;
    if (body_len != (size_t)-1)
        size += sizeof(CL_NAME) - 1 + 20 + 2;
    return size;
}

static char *put(char *p, const void *s, size_t len)
{
    memcpy(p, s, len);
    return p + len;
}

size_t mg_h1_request_head_write(char *out, const mg_exchange_request_t *req, h2o_iovec_t prefix, size_t body_len)
{
    char *p = put(out, req->method.base, req->method.len);
    *p++ = ' ';
    p = put(p, prefix.base, prefix.len);
    p = put(p, req->path.base, req->path.len);
    if (req->query.len != 0) {
        *p++ = '?';
        p = put(p, req->query.base, req->query.len);
    }
    p = put(p, H2O_STRLIT(" HTTP/1.1\r\n"));
    for (size_t i = 0; i < req->num_headers; i++) {
        const mg_backend_header_t *h = &req->headers[i];
        p = put(p, h->name.base, h->name.len);
        p = put(p, ": ", 2);
        p = put(p, h->value.base, h->value.len);
        p = put(p, "\r\n", 2);
    }
    if (body_len != (size_t)-1) {
        p = put(p, CL_NAME, sizeof(CL_NAME) - 1);
        p += mg_format_u64(p, body_len);
        p = put(p, "\r\n", 2);
    }
    p = put(p, "\r\n", 2);
    return (size_t)(p - out);
}

/* ---------------------------------------------------------------------------------------
 * The response head
 */

static void lower_case(h2o_iovec_t s)
{
    for (size_t i = 0; i < s.len; i++)
        if (s.base[i] >= 'A' && s.base[i] <= 'Z')
            s.base[i] = (char)(s.base[i] - 'A' + 'a');
}

static int is_name(const mg_backend_header_t *h, const char *lc, size_t len)
{
    return h->name.len == len && memcmp(h->name.base, lc, len) == 0;
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* One element of a comma-separated list: s[*pos..) up to the next comma, trimmed. */
static h2o_iovec_t next_element(h2o_iovec_t s, size_t *pos)
{
    size_t start = *pos, end;
    while (*pos < s.len && s.base[*pos] != ',')
        (*pos)++;
    end = *pos;
    if (*pos < s.len)
        (*pos)++;
    while (start < end && is_ows(s.base[start]))
        start++;
    while (end > start && is_ows(s.base[end - 1]))
        end--;
    return h2o_iovec_init(s.base + start, end - start);
}

/* Every Content-Length value, list elements included ("5, 5"), must be the same number
 * (RFC 9112 6.3 item 5). 0, or -1 when they are not (or not numbers). */
static int read_content_length(const mg_backend_header_t *h, int *seen, uint64_t *out)
{
    size_t pos = 0;
    do {
        h2o_iovec_t e = next_element(h->value, &pos);
        uint64_t v = 0;
        if (e.len == 0 || e.len > 18)
            return -1; /* 10^18 bytes is beyond any response; no overflow below */
        for (size_t i = 0; i < e.len; i++) {
            if (e.base[i] < '0' || e.base[i] > '9')
                return -1;
            v = v * 10 + (uint64_t)(e.base[i] - '0');
        }
        if (*seen && v != *out)
            return -1;
        *seen = 1;
        *out = v;
    } while (pos < h->value.len);
    return 0;
}

/* 1 when the Connection field's tokens include `token` (lower case). */
static int has_token(h2o_iovec_t value, const char *token, size_t len)
{
    size_t pos = 0;
    while (pos < value.len) {
        h2o_iovec_t e = next_element(value, &pos);
        if (h2o_lcstris(e.base, e.len, token, len))
            return 1;
    }
    return 0;
}

/* The framing of the body (RFC 9112 6.3), strictly: NULL, or why the head cannot be trusted. */
static const char *decide_framing(mg_h1_head_t *head, int head_request)
{
    int cl_seen = 0, te_seen = 0, close = head->minor_version == 0;
    for (size_t i = 0; i < head->num_fields; i++) {
        const mg_backend_header_t *h = &head->fields[i];
        if (is_name(h, H2O_STRLIT("content-length"))) {
            if (read_content_length(h, &cl_seen, &head->content_length) != 0)
                return "the backend response has an invalid or conflicting Content-Length";
        } else if (is_name(h, H2O_STRLIT("transfer-encoding"))) {
            /* only chunked alone can be decoded and framed again: anything else cannot be passed on */
            if (te_seen++ || !h2o_lcstris(h->value.base, h->value.len, H2O_STRLIT("chunked")))
                return "the backend response has a transfer coding other than chunked";
        } else if (is_name(h, H2O_STRLIT("connection"))) {
            close |= has_token(h->value, H2O_STRLIT("close"));
        }
    }
    if (cl_seen && te_seen)
        return "the backend response has both Content-Length and Transfer-Encoding";
    if (te_seen && head->minor_version == 0)
        return "an HTTP/1.0 backend response has a Transfer-Encoding";
    head->keep_alive = !close;
    if (head_request || head->status < 200 || head->status == 204 || head->status == 304) {
        head->framing = MG_H1_NO_BODY;
        if (head->status == 101) {
            head->framing = MG_H1_UNTIL_CLOSE; /* the connection is no longer HTTP */
            head->keep_alive = 0;
        }
    } else if (te_seen) {
        head->framing = MG_H1_CHUNKED;
    } else if (cl_seen) {
        head->framing = MG_H1_LENGTH;
    } else {
        head->framing = MG_H1_UNTIL_CLOSE;
        head->keep_alive = 0;
    }
    return NULL;
}

static ssize_t fail(mg_attempt_result_t result, const char *reason, mg_attempt_result_t *err, const char **why)
{
    *err = result;
    *why = reason;
    return -1;
}

/* The end of the head (the byte after its empty line) within buf[0..len), or NULL. */
static char *head_end(char *buf, size_t len)
{
    for (char *p = buf, *end = buf + len; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++) {
        if (p + 1 < end && p[1] == '\n')
            return p + 2;
        if (p + 2 < end && p[1] == '\r' && p[2] == '\n')
            return p + 3;
    }
    return NULL;
}

/* picohttpparser refused the head: parsed again line by line, for the exact reason, or to accept
 * what RFC 9112 lets a proxy repair (white space before a field's colon, removed). */
static ssize_t parse_lines(char *buf, size_t len, mg_h1_head_t *head, mg_attempt_result_t *err, const char **why)
{
    char *end = head_end(buf, len), *p = buf;
    if (end == NULL)
        return len > MG_H1_MAX_HEAD ? fail(MG_ATTEMPT_BAD_RESPONSE, "the backend response head is too large", err, why) : 0;
    char *eol = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)(eol - p);
    if (n > 0 && p[n - 1] == '\r')
        n--;
    if (n < 12 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ' || p[9] < '1' || p[9] > '9' ||
        p[10] < '0' || p[10] > '9' || p[11] < '0' || p[11] > '9' || (n > 12 && p[12] != ' '))
        return fail(MG_ATTEMPT_BAD_RESPONSE, "the backend response is not HTTP/1.x", err, why);
    head->minor_version = p[7] - '0';
    head->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    head->reason = n > 13 ? h2o_iovec_init(p + 13, n - 13) : h2o_iovec_init("", 0);
    head->num_fields = 0;
    for (p = eol + 1; p < end; p = eol + 1) {
        eol = memchr(p, '\n', (size_t)(end - p));
        n = (size_t)(eol - p);
        if (n > 0 && p[n - 1] == '\r')
            n--;
        if (n == 0)
            break;
        if (head->num_fields == MG_BACKEND_MAX_FIELDS)
            return fail(MG_ATTEMPT_TOO_MANY_HEADERS, "the backend response has too many headers", err, why);
        mg_backend_header_t *f = &head->fields[head->num_fields++];
        if (mg_header_line_split(h2o_iovec_init(p, n), &f->name, &f->value) != 0)
            return fail(MG_ATTEMPT_BAD_HEAD, "the backend response head has a malformed field", err, why);
    }
    return end - buf;
}

ssize_t mg_h1_parse_head(char *buf, size_t len, int head_request, mg_h1_head_t *head, mg_attempt_result_t *err, const char **why)
{
    struct phr_header hs[MG_BACKEND_MAX_FIELDS];
    size_t n = MG_BACKEND_MAX_FIELDS;
    const char *msg;
    size_t msg_len;
    ssize_t rc = phr_parse_response(buf, len, &head->minor_version, &head->status, &msg, &msg_len, hs, &n, 0);
    if (rc == -2)
        return len > MG_H1_MAX_HEAD ? fail(MG_ATTEMPT_BAD_RESPONSE, "the backend response head is too large", err, why) : 0;
    if (rc == -1) {
        if ((rc = parse_lines(buf, len, head, err, why)) <= 0)
            return rc;
    } else {
        head->reason = h2o_iovec_init(msg, msg_len);
        /* picohttpparser has refused a name that is not a token (its token_char_map is
         * mg_tchar_table, byte for byte) and a value with a control character but HTAB: only a
         * folded line (no name) is left to refuse here. fuzz_h1_response checks both rules. */
        for (size_t i = 0; i < n; i++) {
            if (hs[i].name == NULL)
                return fail(MG_ATTEMPT_BAD_HEAD, "the backend response head has a malformed field", err, why);
            head->fields[i].name = h2o_iovec_init(hs[i].name, hs[i].name_len);
            head->fields[i].value = h2o_iovec_init(hs[i].value, hs[i].value_len);
            lower_case(head->fields[i].name);
        }
        head->num_fields = n;
    }
    if (head->status < 100 || head->minor_version > 1)
        return fail(MG_ATTEMPT_BAD_RESPONSE, "the backend response has an invalid status line", err, why);
    if (!mg_is_field_value(head->reason.base, head->reason.len))
        return fail(MG_ATTEMPT_BAD_HEAD, "the backend response head has a malformed reason phrase", err, why);
    const char *bad = decide_framing(head, head_request);
    if (bad != NULL)
        return fail(MG_ATTEMPT_BAD_RESPONSE, bad, err, why);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * The response body
 */
void mg_h1_body_init(mg_h1_body_t *b, const mg_h1_head_t *head)
{
    memset(b, 0, sizeof(*b));
    b->framing = head->framing;
    b->left = head->content_length;
    b->chunked.consume_trailer = 1;
}

mg_h1_decoded_t mg_h1_body_decode(mg_h1_body_t *b, char *buf, size_t len, size_t *body, size_t *extra, const char **why)
{
    size_t n = len;
    ssize_t rc;
    *extra = 0;
    switch (b->framing) {
    case MG_H1_NO_BODY:
        *body = 0;
        *extra = len;
        return MG_H1_END;
    case MG_H1_LENGTH:
        *body = n = len < b->left ? len : (size_t)b->left;
        b->left -= n;
        *extra = len - n;
        return b->left == 0 ? MG_H1_END : MG_H1_MORE;
    case MG_H1_CHUNKED:
        rc = phr_decode_chunked(&b->chunked, buf, &n);
        *body = n;
        if (rc == -1) {
            *why = "the backend response has a malformed chunk";
            return MG_H1_ERROR;
        }
        if (rc == -2)
            return MG_H1_MORE;
        *extra = (size_t)rc;
        return MG_H1_END;
    default:
        *body = len;
        return MG_H1_MORE;
    }
}
