/*
 * Access log: one JSON object per request, written with a single write(2) so that lines from
 * several workers never interleave (O_APPEND writes up to PIPE_BUF are atomic; longer lines
 * are cut to fit the buffer below).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gateway/request/accesslog.h"

typedef struct out {
    char *p, *end;
} out_t;

static void put_raw(out_t *o, const char *s, size_t len)
{
    size_t room = (size_t)(o->end - o->p);
    if (len > room)
        len = room;
    memcpy(o->p, s, len);
    o->p += len;
}

/* Escapes at most `max` bytes of a string for JSON; control bytes become \u00XX so a hostile
 * path cannot forge log lines. */
static void put_json_str(out_t *o, mg_str_t s, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    put_raw(o, "\"", 1);
    for (size_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.base[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            put_raw(o, esc, 2);
        } else if (c < 0x20 || c == 0x7f) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put_raw(o, esc, 6);
        } else {
            *o->p++ = (char)c;
        }
    }
    put_raw(o, "\"", 1);
}

static void put_field(out_t *o, const char *name, mg_str_t value, size_t max)
{
    put_raw(o, ",\"", 2);
    put_raw(o, name, strlen(name));
    put_raw(o, "\":", 2);
    if (value.base == NULL)
        put_raw(o, "null", 4);
    else
        put_json_str(o, value, max);
}

static void put_fmt(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_fmt(out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p, (size_t)(o->end - o->p), fmt, ap);
    va_end(ap);
    if (n > 0)
        o->p += (size_t)n < (size_t)(o->end - o->p) ? (size_t)n : (size_t)(o->end - o->p);
}

static void put_fields_json(out_t *o, const mg_access_entry_t *e)
{
    if (e->num_fields == 0)
        return;
    put_raw(o, ",\"fields\":{", 11);
    for (size_t i = 0; i < e->num_fields; i++) {
        put_raw(o, i == 0 ? "\"" : ",\"", i == 0 ? 1 : 2);
        put_raw(o, e->field_names[i], strlen(e->field_names[i]));
        put_raw(o, "\":", 2);
        if (e->field_values[i].base == NULL)
            put_raw(o, "null", 4);
        else
            put_json_str(o, e->field_values[i], 256);
    }
    put_raw(o, "}", 1);
}

/* A value of the combined format: quoted, `"` and `\` and control bytes escaped as Apache does
 * (\" \\ \xhh); "-" when absent or empty. */
static void put_combined_str(out_t *o, mg_str_t s, size_t max, int quoted)
{
    static const char hex[] = "0123456789abcdef";
    if (quoted)
        put_raw(o, "\"", 1);
    if (s.base == NULL || s.len == 0)
        put_raw(o, "-", 1);
    for (size_t i = 0; s.base != NULL && i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.base[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            put_raw(o, esc, 2);
        } else if (c < 0x20 || c >= 0x7f) {
            char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
            put_raw(o, esc, 4);
        } else {
            put_raw(o, (const char *)&c, 1);
        }
    }
    if (quoted)
        put_raw(o, "\"", 1);
}

/* peer - - [10/Oct/2000:13:55:36 +0000] "GET /a?b HTTP/1.1" 200 2326 "referer" "agent" ["field"...] */
static size_t format_combined(const mg_access_entry_t *e, char *buf, size_t size)
{
    out_t o = {buf, buf + size};
    struct tm tm;
    char when[40];
    gmtime_r(&e->when.tv_sec, &tm);
    strftime(when, sizeof(when), "%d/%b/%Y:%H:%M:%S +0000", &tm);
    put_combined_str(&o, e->peer, 64, 0);
    put_fmt(&o, " - - [%s] \"", when);
    put_combined_str(&o, e->method, 32, 0);
    put_raw(&o, " ", 1);
    put_combined_str(&o, e->path, 1024, 0);
    if (e->query.len != 0) {
        put_raw(&o, "?", 1);
        put_combined_str(&o, e->query, 1024, 0);
    }
    put_raw(&o, " ", 1);
    put_combined_str(&o, e->protocol, 16, 0);
    put_fmt(&o, "\" %d ", e->status);
    if (e->bytes != 0)
        put_fmt(&o, "%llu ", (unsigned long long)e->bytes);
    else
        put_raw(&o, "- ", 2);
    put_combined_str(&o, e->referer, 512, 1);
    put_raw(&o, " ", 1);
    put_combined_str(&o, e->user_agent, 512, 1);
    for (size_t i = 0; i < e->num_fields; i++) {
        put_raw(&o, " ", 1);
        put_combined_str(&o, e->field_values[i], 256, 1);
    }
    put_raw(&o, "\n", 1);
    return (size_t)(o.p - buf);
}

size_t mg_access_format(const mg_access_entry_t *e, char *buf, size_t size)
{
    if (e->combined)
        return format_combined(e, buf, size);
    out_t o = {buf, buf + size};
    struct tm tm;
    gmtime_r(&e->when.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    put_fmt(&o, "{\"time\":\"%s.%03ldZ\"", when, (long)(e->when.tv_usec / 1000));
    /* each field is capped so the worst case (every byte escaped 6x) fits MG_ACCESS_LINE_MAX */
    put_field(&o, "peer", e->peer, 64);
    put_field(&o, "method", e->method, 32);
    put_field(&o, "path", e->path, 1024);
    put_fmt(&o, ",\"status\":%d,\"bytes\":%llu,\"duration_ms\":%.3f", e->status, (unsigned long long)e->bytes, e->duration_ms);
    put_field(&o, "route", e->route, 128);
    put_field(&o, "tenant", e->tenant, 128);
    if (e->sub.len != 0)
        put_field(&o, "sub", e->sub, 256);
    put_field(&o, "server", e->server, 256);
    put_field(&o, "request_id", e->request_id, 128);
    if (e->trace_id.len != 0)
        put_field(&o, "trace_id", e->trace_id, 32);
    put_fields_json(&o, e);
    put_raw(&o, "}\n", 2);
    return (size_t)(o.p - buf);
}

void mg_access_write(int fd, const mg_access_entry_t *e)
{
    char buf[MG_ACCESS_LINE_MAX];
    size_t len = mg_access_format(e, buf, sizeof(buf));
    /* a log that cannot be written must not stop the traffic: the result is ignored */
    ssize_t r = write(fd, buf, len);
    (void)r;
}
