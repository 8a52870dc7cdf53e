/*
 * Building the backend URL, checking the authority a client names, and classifying methods.
 */
#include <arpa/inet.h>
#include <string.h>
#include "gateway/internal.h"

long mg_url_build(char *out, size_t size, const char *base, mg_str_t path, mg_str_t query)
{
    size_t blen = strlen(base);
    size_t need = blen + path.len + (query.len != 0 ? 1 + query.len : 0) + 1;
    if (need > size)
        return -1;
    char *p = out;
    memcpy(p, base, blen);
    p += blen;
    memcpy(p, path.base, path.len);
    p += path.len;
    if (query.len != 0) {
        *p++ = '?';
        memcpy(p, query.base, query.len);
        p += query.len;
    }
    *p = '\0';
    return (long)(p - out);
}

static int method_in(mg_str_t method, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strlen(*list) == method.len && memcmp(*list, method.base, method.len) == 0)
            return 1;
    return 0;
}

int mg_method_is_idempotent(mg_str_t method)
{
    static const char *const idempotent[] = {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE", NULL};
    return method_in(method, idempotent);
}

int mg_method_is_write(mg_str_t method)
{
    static const char *const writes[] = {"POST", "PUT", "PATCH", "DELETE", NULL};
    return method_in(method, writes);
}

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
