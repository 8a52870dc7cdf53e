/*
 * W3C Trace Context's traceparent (trace.h): parsed, and made for the gateway's hop.
 */
#include <string.h>
#include "gateway/request/trace.h"
#include "gateway/format.h"

static int is_lower_hex(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int all_zeros(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != '0')
            return 0;
    return 1;
}

int mg_traceparent_parse(mg_str_t v, char trace_id[MG_TRACE_ID_LEN], char flags[2])
{
    const char *s = v.base;
    if (v.len < MG_TRACEPARENT_LEN || !is_lower_hex(s, 2) || memcmp(s, "ff", 2) == 0)
        return 0;
    /* version 00 has exactly these fields; a later one may add some after a '-' */
    if (memcmp(s, "00", 2) == 0 ? v.len != MG_TRACEPARENT_LEN : (v.len > MG_TRACEPARENT_LEN && s[MG_TRACEPARENT_LEN] != '-'))
        return 0;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-' || !is_lower_hex(s + 3, 32) || !is_lower_hex(s + 36, 16) ||
        !is_lower_hex(s + 53, 2) || all_zeros(s + 3, 32) || all_zeros(s + 36, 16))
        return 0;
    memcpy(trace_id, s + 3, MG_TRACE_ID_LEN);
    memcpy(flags, s + 53, 2);
    return 1;
}

void mg_traceparent_format(char out[MG_TRACEPARENT_LEN + 1], const char trace_id[MG_TRACE_ID_LEN], uint64_t span,
                           const char flags[2])
{
    /* "00-<trace id>-<span, 16 hex>-<flags>" */
    memcpy(out, "00-", 3);
    memcpy(out + 3, trace_id, MG_TRACE_ID_LEN);
    out[35] = '-';
    mg_format_hex64(out + 36, span != 0 ? span : 1);
    out[52] = '-';
    memcpy(out + 53, flags, 2);
    out[MG_TRACEPARENT_LEN] = '\0';
}

void mg_trace_id_new(char out[MG_TRACE_ID_LEN], uint64_t a, uint64_t b)
{
    mg_format_hex64(out, a);
    mg_format_hex64(out + 16, a == 0 && b == 0 ? 1 : b);
}
