/* The write side both benchmark tools share: a growing output buffer, flushed to a
 * non-blocking socket as far as it takes it. */
#ifndef MG_BENCH_WS_IO_H
#define MG_BENCH_WS_IO_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Appends n bytes; -1 when the buffer would pass `max` bytes or memory runs out. */
static inline int ws_buf_add(uint8_t **buf, size_t *len, size_t *cap, size_t max, const void *p, size_t n)
{
    if (*len + n > max)
        return -1;
    if (*len + n > *cap) {
        size_t grown = *cap ? *cap : 4096;
        while (grown < *len + n)
            grown *= 2;
        uint8_t *b = realloc(*buf, grown);
        if (b == NULL)
            return -1;
        *buf = b;
        *cap = grown;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    return 0;
}

/* Writes what the socket takes and keeps the rest at the front: 0, or -1 when the connection
 * is gone. */
static inline int ws_buf_flush(int fd, uint8_t *buf, size_t *len)
{
    size_t off = 0;
    while (off < *len) {
        ssize_t w = write(fd, buf + off, *len - off);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        return -1;
    }
    memmove(buf, buf + off, *len - off);
    *len -= off;
    return 0;
}

#endif
