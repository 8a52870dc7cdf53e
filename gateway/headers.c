/*
 * Which headers cross the proxy. RFC 9110 7.6.1: hop-by-hop fields, and every field the
 * Connection header names, apply to one connection only and are removed in both directions.
 */
#include <string.h>
#include <strings.h>
#include "gateway/internal.h"

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
        char *dst = tokens->names[tokens->size++];
        for (size_t k = start; k < end; k++)
            dst[k - start] = (char)(value[k] >= 'A' && value[k] <= 'Z' ? value[k] + 32 : value[k]);
        dst[end - start] = '\0';
    }
}

static int is_listed(const char *name, size_t len, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strlen(*list) == len && memcmp(*list, name, len) == 0)
            return 1;
    return 0;
}

int mg_header_is_hop_by_hop(const char *name, size_t len, const mg_conn_tokens_t *tokens)
{
    static const char *const hop[] = {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", NULL};
    if (is_listed(name, len, hop))
        return 1;
    if (len >= 6 && memcmp(name, "proxy-", 6) == 0)
        return 1;
    if (tokens != NULL)
        for (size_t i = 0; i < tokens->size; i++)
            if (strlen(tokens->names[i]) == len && memcmp(tokens->names[i], name, len) == 0)
                return 1;
    return 0;
}

int mg_header_is_replaced_in_response(const char *name, size_t len)
{
    /* h2o writes its own Date and Server, and frames the body itself (content-length is
     * passed as a number, not as a header); the request id is the one the gateway sent */
    static const char *const replaced[] = {"date", "server", "content-length", "x-request-id", NULL};
    return is_listed(name, len, replaced);
}

int mg_header_value_is_safe(const char *value, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (value[i] == '\r' || value[i] == '\n' || value[i] == '\0')
            return 0;
    return 1;
}
