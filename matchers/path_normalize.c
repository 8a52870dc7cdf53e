/*
 * Request path normalization (RFC 3986 6.2.2): percent-encoding normalization, then
 * remove_dot_segments, plus "//" collapsing. Routing on the normalized form means
 * "/api/%2e%2e/admin" cannot sneak past a `{prefix: /api}` condition into /admin.
 *
 * A segment whose name (the part before its first ';') is "." or ".." is a dot segment:
 * Tomcat and Spring drop ";params" before resolving dots, so "/public/..;x/admin" is
 * "/admin" to them and must be "/admin" to the routes too.
 *
 * One pass, segment by segment. Decoding only ever shrinks a segment, so the output never
 * runs ahead of the input: `out` needs no more than `len + 1` bytes, and every read is
 * bounded by `len` (the input need not be NUL-terminated).
 */
#include "matchers/matchers.h"

/* RFC 3986 2.3: the only characters whose escapes are equivalent to the character itself. */
static int mg_is_unreserved(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
}

/*
 * Decodes the segment in[0..len) (no '/' inside) to out. Returns the decoded length, -1 on a
 * malformed escape, MG_PATH_ESCAPED_SLASH on a backslash, %2F or %5C when `flags` refuse them.
 */
static long mg_decode_segment(const char *in, size_t len, char *out, int flags)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    int reject = (flags & MG_PATH_REJECT_ESCAPED_SLASHES) != 0;
    for (size_t i = 0; i != len; ++i) {
        if (in[i] != '%') {
            if (reject && in[i] == '\\')
                return MG_PATH_ESCAPED_SLASH;
            out[o++] = in[i];
            continue;
        }
        if (len - i < 3)
            return -1;
        int hi = mg_hex_value(in[i + 1]), lo = mg_hex_value(in[i + 2]);
        if (hi < 0 || lo < 0)
            return -1;
        int c = hi * 16 + lo;
        if (reject && (c == '/' || c == '\\'))
            return MG_PATH_ESCAPED_SLASH;
        if (mg_is_unreserved(c)) {
            out[o++] = (char)c;
        } else {
            /* Kept encoded (decoding "%2F" would invent a segment boundary), case normalized. */
            out[o++] = '%';
            out[o++] = hex[hi];
            out[o++] = hex[lo];
        }
        i += 2;
    }
    return (long)o;
}

/* Drops the last segment of out[0..o), which ends with '/'. Returns the new length, or 0 at the root. */
static size_t mg_pop_segment(const char *out, size_t o)
{
    if (o <= 1)
        return 0;
    size_t i = o - 1;
    while (out[i - 1] != '/')
        --i;
    return i;
}

int mg_path_dot_segment(const char *s, size_t len)
{
    int dots = 0;
    for (size_t i = 0; i != len && s[i] != ';' && dots <= 2;) {
        if (s[i] == '.') {
            i += 1;
        } else if (s[i] == '%' && len - i >= 3 && s[i + 1] == '2' && (s[i + 2] == 'e' || s[i + 2] == 'E')) {
            i += 3;
        } else {
            return 0;
        }
        ++dots;
    }
    return dots <= 2 ? dots : 0;
}

long mg_path_normalize(const char *in, size_t len, char *out)
{
    return mg_path_normalize_ex(in, len, out, 0);
}

long mg_path_normalize_ex(const char *in, size_t len, char *out, int flags)
{
    if (len == 0 || in[0] != '/')
        return -1;
    size_t o = 0, i = 1;
    out[o++] = '/';
    /* Invariant: out[0..o) ends with '/' and o <= i. */
    while (i < len) {
        size_t end = i;
        while (end < len && in[end] != '/')
            ++end;
        long n = mg_decode_segment(in + i, end - i, out + o, flags);
        if (n < 0)
            return n;
        int dots = mg_path_dot_segment(out + o, (size_t)n);
        if (dots == 2) {
            if ((o = mg_pop_segment(out, o)) == 0)
                return -1;
        } else if (n != 0 && dots == 0) {
            o += (size_t)n;
            if (end < len)
                out[o++] = '/';
        }
        i = end + 1;
    }
    out[o] = '\0';
    return (long)o;
}
