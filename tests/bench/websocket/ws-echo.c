/*
 * ws-echo: a WebSocket echo server for tests/bench/websocket (a benchmark tool, not a test).
 *
 * One thread, epoll (level-triggered), non-blocking sockets, loopback. It answers the HTTP/1.1
 * upgrade (Sec-WebSocket-Accept = base64(SHA-1(key + GUID)), OpenSSL EVP via the gateway's frame
 * codec, gateway/websocket/frame.c), then echoes every data frame with the same opcode and FIN bit,
 * unmasked; a ping gets a pong, a close gets a close and the connection ends once it is written.
 *
 *   ws-echo -p PORT [-a ADDR] [-t MAX_SECONDS]
 *
 * Prints "ready" on stdout once it listens. Exits after MAX_SECONDS [3600] or on SIGTERM/SIGINT.
 * Bounded: frames up to 1 MiB, at most 65536 connections, 4 MiB of unsent output per connection
 * (beyond 1 MiB it stops reading that client until the output drains).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gateway/websocket/frame.h"
#include "ws-io.h"

#define MAX_FRAME (1u << 20)
#define RBUF_MAX (MAX_FRAME + MG_WS_HEADER_MAX)
#define WBUF_HIGH (1u << 20)
#define WBUF_MAX (4u << 20)
#define MAX_CONNS 65536

typedef struct conn {
    int fd;
    int upgraded;
    int closing; /* a close frame was queued: end once written */
    uint8_t *rbuf;
    size_t rlen;
    uint8_t *wbuf;
    size_t wlen, wcap;
    uint32_t events;
} conn_t;

static volatile sig_atomic_t stop_flag;
static int ep;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void conn_free(conn_t *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->rbuf);
    free(c->wbuf);
    free(c);
}

static int wbuf_add(conn_t *c, const void *p, size_t n)
{
    return ws_buf_add(&c->wbuf, &c->wlen, &c->wcap, WBUF_MAX, p, n);
}

/* Writes what it can: 0, or -1 when the connection is gone. */
static int flush(conn_t *c)
{
    return ws_buf_flush(c->fd, c->wbuf, &c->wlen);
}

static void update_events(conn_t *c)
{
    uint32_t ev = 0;
    if (c->wlen < WBUF_HIGH && !c->closing)
        ev |= EPOLLIN;
    if (c->wlen > 0)
        ev |= EPOLLOUT;
    if (ev != c->events) {
        struct epoll_event e = {.events = ev, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
        c->events = ev;
    }
}

/* The HTTP upgrade: 1 done, 0 more bytes needed, -1 bad request (answered with 400). */
static int handshake(conn_t *c)
{
    uint8_t *end = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
    if (end == NULL)
        return c->rlen >= 16384 ? -1 : 0;
    size_t hlen = (size_t)(end - c->rbuf) + 4;
    const char *key = NULL;
    size_t keylen = 0;
    char *line = (char *)c->rbuf;
    char *stop = (char *)end;
    while (line < stop) {
        char *eol = memmem(line, (size_t)(stop - line) + 2, "\r\n", 2);
        if (eol == NULL)
            break;
        if ((size_t)(eol - line) > 18 && strncasecmp(line, "Sec-WebSocket-Key:", 18) == 0) {
            key = line + 18;
            while (key < eol && (*key == ' ' || *key == '\t'))
                key++;
            const char *ke = eol;
            while (ke > key && (ke[-1] == ' ' || ke[-1] == '\t'))
                ke--;
            keylen = (size_t)(ke - key);
        }
        line = eol + 2;
    }
    if (key == NULL || keylen == 0) {
        static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        wbuf_add(c, bad, sizeof(bad) - 1);
        c->closing = 1;
        return -1;
    }
    char accept[MG_WS_ACCEPT_LEN + 1];
    mg_ws_accept_key(accept, key, keylen);
    char resp[256];
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Accept: %s\r\n\r\n",
                     accept);
    wbuf_add(c, resp, (size_t)n);
    memmove(c->rbuf, c->rbuf + hlen, c->rlen - hlen);
    c->rlen -= hlen;
    c->upgraded = 1;
    return 1;
}

/* Echoes the complete frames in rbuf: 0, or -1 to drop the connection. */
static int frames(conn_t *c)
{
    size_t off = 0;
    while (off < c->rlen && !c->closing && c->wlen < WBUF_HIGH) {
        mg_ws_frame_t f;
        const char *why = NULL;
        int h = mg_ws_frame_parse(c->rbuf + off, c->rlen - off, &f, &why);
        if (h < 0)
            return -1;
        if (h == 0)
            break;
        if (f.len > MAX_FRAME)
            return -1;
        if (c->rlen - off < (size_t)h + f.len)
            break;
        uint8_t *payload = c->rbuf + off + h;
        if (f.masked)
            mg_ws_mask(payload, (size_t)f.len, f.mask, 0);
        uint8_t hdr[MG_WS_HEADER_MAX];
        unsigned op = f.opcode;
        if (op == MG_WS_PONG) {
            off += (size_t)h + f.len;
            continue;
        }
        if (op == MG_WS_PING)
            op = MG_WS_PONG;
        size_t hn = mg_ws_frame_header(hdr, (int)f.fin, op, f.len, NULL);
        if (wbuf_add(c, hdr, hn) < 0 || wbuf_add(c, payload, (size_t)f.len) < 0)
            return -1;
        if (op == MG_WS_CLOSE)
            c->closing = 1;
        off += (size_t)h + f.len;
    }
    memmove(c->rbuf, c->rbuf + off, c->rlen - off);
    c->rlen -= off;
    return 0;
}

/* 0, or -1 to drop the connection. */
static int on_readable(conn_t *c)
{
    for (int i = 0; i < 16; i++) { /* bounded: level-triggered epoll brings us back */
        if (c->rlen >= RBUF_MAX)
            break;
        ssize_t r = read(c->fd, c->rbuf + c->rlen, RBUF_MAX - c->rlen);
        if (r == 0)
            return -1;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -1;
        }
        c->rlen += (size_t)r;
        if ((size_t)r < 65536)
            break;
    }
    if (!c->upgraded) {
        int h = handshake(c);
        if (h == 0)
            return c->rlen >= RBUF_MAX ? -1 : 0;
        if (h < 0)
            return 0; /* the 400 goes out, then the connection ends */
    }
    if (frames(c) < 0)
        return -1;
    if (c->rlen >= RBUF_MAX && c->wlen < WBUF_HIGH)
        return -1; /* a frame larger than we accept */
    return 0;
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1";
    int port = 0;
    double max_s = 3600;
    int o;
    while ((o = getopt(argc, argv, "a:p:t:")) != -1) {
        switch (o) {
        case 'a':
            addr = optarg;
            break;
        case 'p':
            port = atoi(optarg);
            break;
        case 't':
            max_s = atof(optarg);
            break;
        default:
            fprintf(stderr, "usage: ws-echo -p PORT [-a ADDR] [-t MAX_SECONDS]\n");
            return 2;
        }
    }
    if (port <= 0 || port > 65535 || max_s <= 0) {
        fprintf(stderr, "ws-echo: -p PORT is required (and -t > 0)\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "ws-echo: bad address %s\n", addr);
        return 2;
    }
    if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 4096) < 0) {
        perror("ws-echo: bind/listen");
        return 1;
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &le);
    printf("ready\n");
    fflush(stdout);

    int nconns = 0;
    double deadline = now_s() + max_s;
    struct epoll_event evs[256];
    while (!stop_flag && now_s() < deadline) {
        int n = epoll_wait(ep, evs, 256, 200);
        if (n < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if (c == NULL) {
                for (int k = 0; k < 256; k++) { /* bounded accept burst */
                    int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd < 0)
                        break;
                    if (nconns >= MAX_CONNS) {
                        close(fd);
                        continue;
                    }
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    c = calloc(1, sizeof(*c));
                    c->fd = fd;
                    c->rbuf = malloc(RBUF_MAX);
                    c->events = EPOLLIN;
                    struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
                    nconns++;
                }
                continue;
            }
            int drop = 0;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                drop = !(evs[i].events & EPOLLIN);
            if (!drop && (evs[i].events & EPOLLIN))
                drop = on_readable(c) < 0;
            if (!drop && c->wlen > 0)
                drop = flush(c) < 0;
            if (!drop && c->upgraded && c->rlen > 0 && c->wlen < WBUF_HIGH && !c->closing)
                drop = frames(c) < 0 || flush(c) < 0; /* input held back while output was high */
            if (!drop && c->closing && c->wlen == 0)
                drop = 1;
            if (drop) {
                conn_free(c);
                nconns--;
                continue;
            }
            update_events(c);
        }
    }
    return 0;
}
