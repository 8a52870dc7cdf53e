/*
 * The access log (accesslog.c): one JSON object per request and line, written with one write(2).
 */
#ifndef MG_GATEWAY_ACCESSLOG_H
#define MG_GATEWAY_ACCESSLOG_H

#include <stdint.h>
#include <sys/time.h>
#include "matchers/matchers.h"

typedef struct mg_access_entry {
    struct timeval when;
    mg_str_t peer, method, path, route, tenant, server, request_id;
    int status;
    uint64_t bytes;
    double duration_ms;
} mg_access_entry_t;

/* Long enough for any entry: fields are capped (path at 1 KiB) and escaping grows them at most 6x. */
#define MG_ACCESS_LINE_MAX 12288
/* Formats `e` as one JSON line into buf (MG_ACCESS_LINE_MAX bytes); returns the length. */
size_t mg_access_format(const mg_access_entry_t *e, char *buf, size_t size);
void mg_access_write(int fd, const mg_access_entry_t *e);

#endif
