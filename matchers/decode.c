/*
 * Percent-decoding and query parameter lookup, shared by the query condition and templates
 * (${query.<name>}). Both work on borrowed slices; only decoding writes, into caller memory.
 */
#include <string.h>

#include "matchers/matchers.h"

static int mg_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t mg_percent_decode(const char *in, size_t len, char *out, int plus)
{
    size_t n = 0;
    for (size_t i = 0; i != len; ++i) {
        int hi, lo;
        if (in[i] == '%' && i + 2 < len && (hi = mg_hex_value(in[i + 1])) >= 0 && (lo = mg_hex_value(in[i + 2])) >= 0) {
            out[n++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            out[n++] = plus && in[i] == '+' ? ' ' : in[i];
        }
    }
    return n;
}

/* 1 when the encoded parameter name `enc` decodes to `name`, compared without a buffer. */
static int mg_query_name_is(mg_str_t enc, mg_str_t name)
{
    size_t j = 0;
    for (size_t i = 0; i != enc.len; ++i, ++j) {
        char c = enc.base[i];
        int hi, lo;
        if (c == '%' && i + 2 < enc.len && (hi = mg_hex_value(enc.base[i + 1])) >= 0 &&
            (lo = mg_hex_value(enc.base[i + 2])) >= 0) {
            c = (char)(hi << 4 | lo);
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (j == name.len || name.base[j] != c)
            return 0;
    }
    return j == name.len;
}

mg_str_t mg_query_param(mg_str_t query, mg_str_t name, int *found)
{
    const char *p = query.base, *end = query.base + query.len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp != NULL ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *name_end = eq != NULL ? eq : stop;
        if (mg_query_name_is(mg_str(p, (size_t)(name_end - p)), name)) {
            *found = 1;
            return eq != NULL ? mg_str(eq + 1, (size_t)(stop - eq - 1)) : mg_str(stop, 0);
        }
        p = stop + 1;
    }
    *found = 0;
    return mg_str(NULL, 0);
}
