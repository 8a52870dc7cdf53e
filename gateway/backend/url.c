/*
 * The URL of a request to a server: the server's url (scheme, host, port and an optional path
 * prefix, checked at load), the request's normalized path and its raw query.
 */
#include <string.h>
#include "gateway/backend/internal.h"

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
