/*
 * Percent-decoding and query parameter lookup, shared by the query condition and templates
 * (${query.<name>}). Both work on borrowed slices; only decoding writes, into caller memory.
 */
#include <string.h>

#include "matchers/matchers.h"

int mg_hex_value(char c)
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
        if (c == '%' && i + 2 < enc.len && (hi = mg_hex_value(enc.base[i + 1])) >= 0 && (lo = mg_hex_value(enc.base[i + 2])) >= 0) {
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

int mg_query_param_next(mg_str_t query, mg_str_t name, size_t *pos, mg_str_t *value)
{
    /* Offsets rather than pointers: a pointer one past the '&'-less last parameter would lie
     * beyond the end of the query. */
    while (*pos < query.len) {
        const char *p = query.base + *pos;
        size_t left = query.len - *pos;
        const char *amp = memchr(p, '&', left);
        size_t len = amp != NULL ? (size_t)(amp - p) : left;
        const char *eq = memchr(p, '=', len);
        size_t name_len = eq != NULL ? (size_t)(eq - p) : len;
        *pos += len + 1;
        /* "a&&b" has no parameter between the '&'s, not one with an empty name. */
        if (len != 0 && mg_query_name_is(mg_str(p, name_len), name)) {
            *value = eq != NULL ? mg_str(eq + 1, len - name_len - 1) : mg_str(p + len, 0);
            return 1;
        }
    }
    return 0;
}

mg_str_t mg_query_param(mg_str_t query, mg_str_t name, int *found)
{
    size_t pos = 0;
    mg_str_t value = mg_str(NULL, 0);
    *found = mg_query_param_next(query, name, &pos, &value);
    return value;
}
