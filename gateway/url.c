/*
 * Building the backend URL and classifying methods.
 */
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
