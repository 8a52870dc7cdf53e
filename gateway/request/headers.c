/*
 * Which headers cross the proxy, and which are well-formed. RFC 9110 7.6.1: hop-by-hop fields,
 * and every field the Connection header names, apply to one connection only and are removed in
 * both directions. RFC 9110 5.1, 5.5 and RFC 9112 5, 6: what a field and a request's framing
 * must look like for the gateway to pass a message on; RFC 3986 3.2: what a Host may name.
 */
#include <arpa/inet.h>
#include <string.h>
#include <strings.h>
#include "gateway/request/headers.h"
#include "gateway/phr.h"

static int token_char_is_space(char c)
{
    return c == ' ' || c == '\t';
}

void mg_conn_tokens_add(mg_conn_tokens_t *tokens, const char *value, size_t len)
{
    size_t i = 0;
    while (i < len) {
        while (i < len && (token_char_is_space(value[i]) || value[i] == ','))
            i++;
        size_t start = i;
        while (i < len && value[i] != ',')
            i++;
        size_t end = i;
        while (end > start && token_char_is_space(value[end - 1]))
            end--;
        /* too long a token cannot be a header we would otherwise forward by mistake: names we
         * keep are compared in full, so a truncated one would match the wrong header */
        if (end == start || end - start >= sizeof(tokens->names[0]) || tokens->size == 16)
            continue;
        tokens->lens[tokens->size] = (unsigned char)(end - start);
        char *dst = tokens->names[tokens->size++];
        for (size_t k = start; k < end; k++)
            dst[k - start] = (char)(value[k] >= 'A' && value[k] <= 'Z' ? value[k] + 32 : value[k]);
        dst[end - start] = '\0';
    }
}

int mg_header_is_listed(const char *name, size_t len, const h2o_iovec_t *list)
{
    /* the length first: most names differ in it, and a list entry's is known without strlen */
    for (; list->base != NULL; list++)
        if (list->len == len && memcmp(list->base, name, len) == 0)
            return 1;
    return 0;
}

int mg_header_is_hop_by_hop(const char *name, size_t len, const mg_conn_tokens_t *tokens)
{
    static const h2o_iovec_t hop[] = {
        {H2O_STRLIT("connection")},        {H2O_STRLIT("keep-alive")}, {H2O_STRLIT("te")}, {H2O_STRLIT("trailer")},
        {H2O_STRLIT("transfer-encoding")}, {H2O_STRLIT("upgrade")},    {NULL, 0}};
    /* the lengths of `hop`, as bits: most fields' lengths are none of them */
    static const uint32_t hop_lengths = 1u << 2 | 1u << 7 | 1u << 10 | 1u << 17;
    if (len < 32 && (hop_lengths >> len & 1) && mg_header_is_listed(name, len, hop))
        return 1;
    if (len >= 6 && memcmp(name, "proxy-", 6) == 0)
        return 1;
    if (tokens != NULL)
        for (size_t i = 0; i < tokens->size; i++)
            if (tokens->lens[i] == len && memcmp(tokens->names[i], name, len) == 0)
                return 1;
    return 0;
}

int mg_header_value_is_safe(const char *value, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (value[i] == '\r' || value[i] == '\n' || value[i] == '\0')
            return 0;
    return 1;
}

void mg_headers_strip_hop_by_hop(h2o_headers_t *headers)
{
    mg_conn_tokens_t tokens = {.size = 0};
    for (size_t i = 0; i < headers->size; i++)
        if (h2o_memis(headers->entries[i].name->base, headers->entries[i].name->len, H2O_STRLIT("connection")))
            mg_conn_tokens_add(&tokens, headers->entries[i].value.base, headers->entries[i].value.len);
    size_t kept = 0;
    for (size_t i = 0; i < headers->size; i++)
        if (!mg_header_is_hop_by_hop(headers->entries[i].name->base, headers->entries[i].name->len, &tokens))
            headers->entries[kept++] = headers->entries[i];
    headers->size = kept;
}

static h2o_iovec_t trim_ows(const char *s, size_t len)
{
    while (len > 0 && token_char_is_space(*s)) {
        s++;
        len--;
    }
    while (len > 0 && token_char_is_space(s[len - 1]))
        len--;
    return h2o_iovec_init(s, len);
}

/* 1 when every element of the comma-separated Content-Length values seen so far (*length:
 * SIZE_MAX for none yet) and in `value` is the same decimal number (RFC 9110 8.6, RFC 9112 6.3). */
static int content_length_agrees(const char *value, size_t len, size_t *length)
{
    const char *end = value + len;
    for (const char *p = value; p <= end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        h2o_iovec_t element = trim_ows(p, (size_t)(stop - p));
        size_t n = h2o_strtosize(element.base, element.len);
        if (n == SIZE_MAX || (*length != SIZE_MAX && n != *length))
            return 0;
        *length = n;
        p = stop + 1;
    }
    return 1;
}

static int name_is(const struct phr_header *h, const char *name)
{
    return h->name != NULL && h2o_lcstris(h->name, h->name_len, name, strlen(name));
}

const char *mg_http1_framing_error(const struct phr_header *headers, size_t n, int minor_version)
{
    size_t hosts = 0, encodings = 0, lengths = 0, length = SIZE_MAX;
    int chunked = 0;
    for (size_t i = 0; i < n; i++) {
        const struct phr_header *h = &headers[i];
        if (h->name == NULL)
            return "a folded header line (obs-fold) is not accepted";
        if (name_is(h, "host"))
            hosts++;
        if (name_is(h, "transfer-encoding")) {
            h2o_iovec_t v = trim_ows(h->value, h->value_len);
            chunked = h2o_lcstris(v.base, v.len, H2O_STRLIT("chunked"));
            encodings++;
        }
        if (name_is(h, "content-length") && (lengths++, !content_length_agrees(h->value, h->value_len, &length)))
            return "the request has differing or invalid Content-Length values";
    }
    if (hosts > 1)
        return "the request has more than one Host header";
    if (encodings != 0 && minor_version == 0)
        return "Transfer-Encoding is not accepted in an HTTP/1.0 request";
    if (encodings != 0 && lengths != 0)
        return "the request has both Content-Length and Transfer-Encoding";
    /* h2o decodes chunked and nothing else, and takes the last Transfer-Encoding: any other coding
     * (or chunked twice) would reach the backend undecoded and unannounced */
    if (encodings > 1 || (encodings == 1 && !chunked))
        return "Transfer-Encoding other than a single chunked is not accepted";
    return NULL;
}

int mg_header_line_split(h2o_iovec_t line, h2o_iovec_t *name, h2o_iovec_t *value)
{
    char *colon = memchr(line.base, ':', line.len);
    if (colon == NULL)
        return -1;
    /* RFC 9112 5.1: a proxy removes white space between a response field's name and its colon;
     * a line that starts with it is a folded continuation (5.2), refused */
    h2o_iovec_t n = h2o_iovec_init(line.base, (size_t)(colon - line.base));
    while (n.len > 0 && token_char_is_space(n.base[n.len - 1]))
        n.len--;
    *value = trim_ows(colon + 1, (size_t)(line.base + line.len - colon - 1));
    if (!mg_is_token(n.base, n.len) || !mg_is_field_value(value->base, value->len))
        return -1;
    for (size_t i = 0; i < n.len; i++)
        n.base[i] = h2o_tolower(n.base[i]);
    *name = n;
    return 0;
}

const char *mg_request_field_error(const char *name, size_t nlen, const char *value, size_t vlen, int http2)
{
    if (!mg_is_token(name, nlen))
        return "a header name is not a token";
    if (!mg_is_field_value(value, vlen))
        return "a header value contains a control character";
    if (http2 && vlen != 0 && (token_char_is_space(value[0]) || token_char_is_space(value[vlen - 1])))
        return "an HTTP/2 header value starts or ends with white space";
    return NULL;
}

const char *mg_request_head_error(const h2o_req_t *req)
{
    /* h2o checks neither HTTP/2's :method nor all of HTTP/1's method: a space in it would make
     * another request line towards the backend */
    if (!mg_is_token(req->method.base, req->method.len))
        return "the method is not a token (RFC 9110 9.1)";
    /* nor white space or a control character in HTTP/2's :path: written into the request line
     * of an HTTP/1.1 backend, a space would end the target there (RFC 9112 3.2, RFC 3986 2) */
    for (size_t i = 0; i < req->input.path.len; i++) {
        unsigned char c = (unsigned char)req->input.path.base[i];
        if (c <= 0x20 || c == 0x7f)
            return "the request target contains white space or a control character";
    }
    /* HTTP/1's fields came through picohttpparser, which already refuses a name that is not a
     * token (its token_char_map is mg_tchar_table, byte for byte) and a value with a control
     * character but HTAB: checking them again cost about a tenth of a small request's
     * instructions */
    if (req->version < 0x200)
        return NULL;
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        const char *why = mg_request_field_error(h->name->base, h->name->len, h->value.base, h->value.len, 1);
        if (why != NULL)
            return why;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * The authority a request names
 */
/* RFC 3986 2.3 unreserved and 2.2 sub-delims: the characters of a reg-name besides pct-encoded. */
static int is_reg_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("-._~!$&'()*+,;=", c) != NULL);
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The length of the reg-name (or IPv4 address, a subset) at s, 0 when there is none. */
static size_t reg_name_len(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        if (s[i] == '%' && i + 2 < len && is_hex(s[i + 1]) && is_hex(s[i + 2]))
            i += 3;
        else if (is_reg_name_char(s[i]))
            i++;
        else
            break;
    }
    return i;
}

/* RFC 3986 IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ). */
static int is_ipv_future(const char *s, size_t n)
{
    size_t i = 1;
    if (n < 4 || (s[0] != 'v' && s[0] != 'V'))
        return 0;
    while (i < n && is_hex(s[i]))
        i++;
    if (i == 1 || i + 1 >= n || s[i] != '.')
        return 0;
    for (i++; i < n; i++)
        if (s[i] != ':' && !is_reg_name_char(s[i]))
            return 0;
    return 1;
}

static int is_ipv6(const char *s, size_t n)
{
    char addr[INET6_ADDRSTRLEN];
    struct in6_addr in6;
    if (n == 0 || n >= sizeof(addr))
        return 0;
    memcpy(addr, s, n);
    addr[n] = '\0';
    return inet_pton(AF_INET6, addr, &in6) == 1;
}

/* The length of the IP-literal ("[" IPv6address / IPvFuture "]") at s, 0 when it is not one. */
static size_t ip_literal_len(const char *s, size_t len)
{
    const char *close = len != 0 && s[0] == '[' ? memchr(s, ']', len) : NULL;
    if (close == NULL)
        return 0;
    size_t n = (size_t)(close - s - 1);
    return is_ipv_future(s + 1, n) || is_ipv6(s + 1, n) ? n + 2 : 0;
}

int mg_authority_is_valid(const char *s, size_t len)
{
    size_t host = len != 0 && s[0] == '[' ? ip_literal_len(s, len) : reg_name_len(s, len);
    if (host == 0)
        return 0;
    if (host == len)
        return 1;
    if (s[host] != ':' || len - host - 1 > 5)
        return 0;
    unsigned port = 0;
    for (size_t i = host + 1; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        port = port * 10 + (unsigned)(s[i] - '0');
    }
    return port <= 65535;
}
