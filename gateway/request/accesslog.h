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
    mg_str_t peer, method, path, route, tenant, server, request_id, trace_id;
    mg_str_t sub; /* the verified credential's `sub` claim; empty when none */
    int status;
    uint64_t bytes;
    double duration_ms;
    /* access_log.format: combined (Apache's: peer, time, request line, status, bytes, Referer,
     * User-Agent), else JSON */
    int combined;
    mg_str_t query, protocol, referer, user_agent;
    /* access_log.fields: the request headers logged too (values: base NULL when absent) */
    char *const *field_names;
    const mg_str_t *field_values;
    size_t num_fields;
} mg_access_entry_t;

/* Long enough for any entry: fields are capped (path at 1 KiB, each of the 16 fields at 256 bytes)
 * and escaping grows them at most 6x. */
#define MG_ACCESS_LINE_MAX 40960
/* Formats `e` as one line (JSON, or Apache's combined format) into buf (MG_ACCESS_LINE_MAX bytes);
 * returns the length. */
size_t mg_access_format(const mg_access_entry_t *e, char *buf, size_t size);
void mg_access_write(int fd, const mg_access_entry_t *e);

#endif
