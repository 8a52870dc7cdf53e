/*
 * Number and address formatting for the request path, without printf: the request id, the
 * trace context and the client's address are made for every request, and vfprintf's parsing
 * of a format string was 2% of a proxied request's CPU (docs/performance.md, proxy-vs-peers
 * profiles). Each writes exactly the bytes it returns (no terminating NUL).
 */
#ifndef MG_GATEWAY_FORMAT_H
#define MG_GATEWAY_FORMAT_H

#include <stddef.h>
#include <stdint.h>

/* 16 lower-case hex digits, zero-padded (printf's "%016llx"). */
static inline void mg_format_hex64(char out[16], uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, v >>= 4)
        out[i] = digits[v & 0xf];
}

/* Decimal digits of v (printf's "%llu"); out has room for 20. The length written. */
static inline size_t mg_format_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

/* Dotted decimal of an IPv4 address in network order (inet_ntop's form); out has room for 15.
 * The length written. */
static inline size_t mg_format_ipv4(char *out, const uint8_t a[4])
{
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        if (i != 0)
            out[n++] = '.';
        n += mg_format_u64(out + n, a[i]);
    }
    return n;
}

#endif
