/*
 * ws-load: a WebSocket load generator for tests/bench/websocket (a benchmark tool, not a test).
 *
 * One thread, epoll, non-blocking sockets. Opens C connections (HTTP/1.1 upgrade, checks
 * Sec-WebSocket-Accept), and once every one is open, each keeps D text messages in flight:
 * send, wait for the answer, send the next (D = 1: request/response, so latency means
 * something; D > 1: pipelined). Client frames are masked (RFC 6455 5.3). Answers come back in
 * order on a connection, so a message's latency is the time from writing it to reading the
 * answer at the head of the connection's queue.
 *
 *   ws-load -p PORT [-a ADDR] [-u PATH] [-c CONNS] [-D DEPTH] [-d SECONDS] [-s BYTES]
 *           [-m echo|bridge] [-T CONNECT_TIMEOUT]
 *
 * Modes:
 *   echo    messages of BYTES [64] bytes of text; the answer must be a text frame of the same
 *           length (an echo).
 *   bridge  messages {"id":N} (N counts up per connection), for matchgate's WebSocket bridge;
 *           the answer must be a text frame with "id":N and "status":200. Answers with another
 *           status count as errors ("bad") but still complete the message.
 *
 * Prints one line of key=value pairs:
 *   conns=C open=O msgs=N secs=S rate=R p50_ms= p90_ms= p99_ms= max_ms= bad=B errors=E
 * rate is answers per second over the measured interval, which starts once every connection
 * is open (or CONNECT_TIMEOUT [10s] has passed, with the ones that are) and lasts SECONDS [5].
 * Exits 1 when no connection opened or no answer came back.
 *
 * Bounded: at most 100000 connections, depth at most 1024, messages at most 1 MiB, the run
 * lasts at most CONNECT_TIMEOUT + SECONDS (+ 1 s to close).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
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

#define MAX_CONNS 100000
#define MAX_DEPTH 1024
#define MAX_MSG (1u << 20)
#define RBUF (MAX_MSG + 64)

enum { CONNECTING, HANDSHAKE, OPEN, DEAD };
enum { MODE_ECHO, MODE_BRIDGE };

typedef struct conn {
    int fd;
    int state;
    char key[25];
    uint8_t *rbuf;
    size_t rlen;
    uint8_t *wbuf;
    size_t wlen, wcap;
    uint64_t *sent; /* ring of send times (ns) of the messages in flight */
    unsigned head, inflight;
    uint64_t next_id, expect_id;
    uint32_t events;
} conn_t;

static int ep;
static int mode = MODE_ECHO;
static size_t msg_bytes = 64;
static unsigned depth = 1;
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int measuring;
static uint64_t t_start, t_end;
static uint64_t msgs, bad, errors;
static int open_conns;

/* Latency histogram: 1 us buckets below 100 ms, then 1 ms buckets up to 100 s. */
#define FINE 100000
#define COARSE 100000
static uint32_t hist_fine[FINE];
static uint32_t hist_coarse[COARSE + 1];
static uint64_t lat_max;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t xrand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void record(uint64_t ns)
{
    uint64_t us = ns / 1000;
    if (ns > lat_max)
        lat_max = ns;
    if (us < FINE)
        hist_fine[us]++;
    else {
        uint64_t ms = us / 1000;
        hist_coarse[ms < COARSE ? ms : COARSE]++;
    }
}

/* The latency (ms) under which a fraction q of the answers came. */
static double quantile(double q)
{
    if (msgs == 0)
        return 0;
    uint64_t want = (uint64_t)(q * (double)msgs);
    if (want >= msgs)
        want = msgs - 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < FINE; i++) {
        seen += hist_fine[i];
        if (seen > want)
            return (i + 0.5) / 1000.0;
    }
    for (unsigned i = 0; i <= COARSE; i++) {
        seen += hist_coarse[i];
        if (seen > want)
            return i + 0.5;
    }
    return lat_max / 1e6;
}

static int wbuf_add(conn_t *c, const void *p, size_t n)
{
    return ws_buf_add(&c->wbuf, &c->wlen, &c->wcap, (size_t)64 << 20, p, n);
}

static void set_events(conn_t *c, uint32_t ev)
{
    if (ev != c->events) {
        struct epoll_event e = {.events = ev, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
        c->events = ev;
    }
}

static void kill_conn(conn_t *c, int is_error)
{
    if (c->state == DEAD)
        return;
    if (c->state == OPEN)
        open_conns--;
    if (is_error)
        errors++;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->state = DEAD;
}

static int flush(conn_t *c)
{
    if (ws_buf_flush(c->fd, c->wbuf, &c->wlen) < 0)
        return -1;
    set_events(c, EPOLLIN | (c->wlen ? EPOLLOUT : 0));
    return 0;
}

/* Queues one masked text message. */
static int send_msg(conn_t *c)
{
    static uint8_t payload[MAX_MSG];
    size_t n;
    if (mode == MODE_BRIDGE) {
        n = (size_t)snprintf((char *)payload, sizeof(payload), "{\"id\":%llu}", (unsigned long long)c->next_id);
    } else {
        n = msg_bytes;
        memset(payload, 'x', n);
    }
    c->next_id++;
    uint8_t mask[4];
    uint64_t r = xrand();
    memcpy(mask, &r, 4);
    uint8_t hdr[MG_WS_HEADER_MAX];
    size_t hn = mg_ws_frame_header(hdr, 1, MG_WS_TEXT, n, mask);
    mg_ws_mask(payload, n, mask, 0);
    if (wbuf_add(c, hdr, hn) < 0 || wbuf_add(c, payload, n) < 0)
        return -1;
    c->sent[(c->head + c->inflight) % depth] = now_ns();
    c->inflight++;
    return 0;
}

static void start_conn(conn_t *c)
{
    for (unsigned i = 0; i < depth; i++)
        if (send_msg(c) < 0) {
            kill_conn(c, 1);
            return;
        }
    if (flush(c) < 0)
        kill_conn(c, 1);
}

/* Reads an integer after "name": in a JSON text (compact or not); -1 when absent. */
static long long json_int(const char *p, size_t n, const char *name)
{
    char pat[32];
    int pl = snprintf(pat, sizeof(pat), "\"%s\"", name);
    const char *q = memmem(p, n, pat, (size_t)pl);
    if (q == NULL)
        return -1;
    q += pl;
    const char *e = p + n;
    while (q < e && (*q == ' ' || *q == ':'))
        q++;
    if (q >= e || *q < '0' || *q > '9')
        return -1;
    long long v = 0;
    while (q < e && *q >= '0' && *q <= '9')
        v = v * 10 + (*q++ - '0');
    return v;
}

/* One answer at the head of the queue: 0, or -1 for a protocol error. */
static int on_answer(conn_t *c, const mg_ws_frame_t *f, const uint8_t *p)
{
    if (c->inflight == 0 || f->opcode != MG_WS_TEXT || !f->fin)
        return -1;
    uint64_t t = now_ns();
    uint64_t sent = c->sent[c->head];
    c->head = (c->head + 1) % depth;
    c->inflight--;
    int ok = 1;
    if (mode == MODE_ECHO) {
        if (f->len != msg_bytes)
            return -1;
    } else {
        long long id = json_int((const char *)p, (size_t)f->len, "id");
        long long st = json_int((const char *)p, (size_t)f->len, "status");
        if (id != (long long)c->expect_id) {
            if (bad < 3)
                fprintf(stderr, "ws-load: answer out of order, wanted id %llu: %.*s\n", (unsigned long long)c->expect_id,
                        (int)(f->len > 200 ? 200 : f->len), p);
            return -1;
        }
        if (st != 200) {
            if (bad < 3)
                fprintf(stderr, "ws-load: answer %.*s\n", (int)(f->len > 200 ? 200 : f->len), p);
            ok = 0;
        }
    }
    c->expect_id++;
    if (measuring && sent >= t_start) {
        msgs++;
        if (!ok)
            bad++;
        record(t - sent);
    }
    return 0;
}

static int handshake_done(conn_t *c)
{
    uint8_t *end = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
    if (end == NULL)
        return c->rlen > 16384 ? -1 : 0;
    size_t hlen = (size_t)(end - c->rbuf) + 4;
    if (c->rlen < 12 || memcmp(c->rbuf, "HTTP/1.1 101", 12) != 0) {
        if (errors < 3)
            fprintf(stderr, "ws-load: upgrade refused: %.*s\n", (int)(c->rlen > 120 ? 120 : c->rlen), c->rbuf);
        return -1;
    }
    char want[MG_WS_ACCEPT_LEN + 1];
    mg_ws_accept_key(want, c->key, 24);
    char *a = memmem(c->rbuf, hlen, want, MG_WS_ACCEPT_LEN);
    if (a == NULL) {
        fprintf(stderr, "ws-load: wrong Sec-WebSocket-Accept\n");
        return -1;
    }
    memmove(c->rbuf, c->rbuf + hlen, c->rlen - hlen);
    c->rlen -= hlen;
    return 1;
}

static int frames(conn_t *c)
{
    size_t off = 0;
    int answered = 0;
    while (off < c->rlen) {
        mg_ws_frame_t f;
        const char *why = NULL;
        int h = mg_ws_frame_parse(c->rbuf + off, c->rlen - off, &f, &why);
        if (h < 0) {
            fprintf(stderr, "ws-load: bad frame: %s\n", why ? why : "?");
            return -1;
        }
        if (h == 0 || c->rlen - off < (size_t)h + f.len)
            break;
        if (f.masked)
            return -1;
        const uint8_t *p = c->rbuf + off + h;
        if (f.opcode == MG_WS_CLOSE) {
            if (errors < 3)
                fprintf(stderr, "ws-load: server closed (%u)\n", f.len >= 2 ? (unsigned)(p[0] << 8 | p[1]) : 0u);
            return -1;
        } else if (f.opcode == MG_WS_PING) {
            uint8_t hdr[MG_WS_HEADER_MAX], mask[4] = {1, 2, 3, 4}, pl[125];
            memcpy(pl, p, (size_t)f.len);
            mg_ws_mask(pl, (size_t)f.len, mask, 0);
            size_t hn = mg_ws_frame_header(hdr, 1, MG_WS_PONG, f.len, mask);
            if (wbuf_add(c, hdr, hn) < 0 || wbuf_add(c, pl, (size_t)f.len) < 0)
                return -1;
        } else if (f.opcode != MG_WS_PONG) {
            if (on_answer(c, &f, p) < 0)
                return -1;
            answered++;
        }
        off += (size_t)h + f.len;
    }
    memmove(c->rbuf, c->rbuf + off, c->rlen - off);
    c->rlen -= off;
    return answered;
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1", *path = "/";
    int port = 0, nconns = 32;
    double secs = 5, connect_timeout = 10;
    int o;
    while ((o = getopt(argc, argv, "a:p:u:c:D:d:s:m:T:")) != -1) {
        switch (o) {
        case 'a':
            addr = optarg;
            break;
        case 'p':
            port = atoi(optarg);
            break;
        case 'u':
            path = optarg;
            break;
        case 'c':
            nconns = atoi(optarg);
            break;
        case 'D':
            depth = (unsigned)atoi(optarg);
            break;
        case 'd':
            secs = atof(optarg);
            break;
        case 's':
            msg_bytes = (size_t)atol(optarg);
            break;
        case 'T':
            connect_timeout = atof(optarg);
            break;
        case 'm':
            if (strcmp(optarg, "echo") == 0)
                mode = MODE_ECHO;
            else if (strcmp(optarg, "bridge") == 0)
                mode = MODE_BRIDGE;
            else
                goto usage;
            break;
        default:
            goto usage;
        }
    }
    if (port <= 0 || port > 65535 || nconns < 1 || nconns > MAX_CONNS || depth < 1 || depth > MAX_DEPTH || msg_bytes < 1 ||
        msg_bytes > MAX_MSG || secs <= 0 || secs > 3600 || connect_timeout <= 0 || connect_timeout > 600)
        goto usage;
    signal(SIGPIPE, SIG_IGN);
    rng ^= now_ns();

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        goto usage;
    ep = epoll_create1(EPOLL_CLOEXEC);
    conn_t *conns = calloc((size_t)nconns, sizeof(conn_t));
    int one = 1;
    int pending = 0; /* connections not yet open nor dead */
    for (int i = 0; i < nconns; i++) {
        conn_t *c = &conns[i];
        c->rbuf = malloc(RBUF);
        c->sent = calloc(depth, sizeof(uint64_t));
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0) {
            perror("ws-load: socket");
            c->state = DEAD;
            errors++;
            continue;
        }
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
            close(c->fd);
            c->state = DEAD;
            errors++;
            continue;
        }
        c->state = CONNECTING;
        c->events = EPOLLOUT;
        struct epoll_event e = {.events = EPOLLOUT, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
        pending++;
    }

    uint64_t t0 = now_ns();
    uint64_t connect_deadline = t0 + (uint64_t)(connect_timeout * 1e9);
    struct epoll_event evs[512];
    for (;;) {
        uint64_t t = now_ns();
        if (!measuring && (pending == 0 || t >= connect_deadline)) {
            if (open_conns == 0)
                break;
            measuring = 1;
            t_start = now_ns();
            t_end = t_start + (uint64_t)(secs * 1e9);
            for (int i = 0; i < nconns; i++)
                if (conns[i].state == OPEN)
                    start_conn(&conns[i]);
        }
        if (measuring && t >= t_end)
            break;
        if (measuring && open_conns == 0)
            break;
        int n = epoll_wait(ep, evs, 512, 50);
        if (n < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if (c->state == DEAD)
                continue;
            uint32_t ev = evs[i].events;
            if (c->state == CONNECTING) {
                int err = 0;
                socklen_t el = sizeof(err);
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err != 0 || (ev & (EPOLLERR | EPOLLHUP))) {
                    if (errors < 3)
                        fprintf(stderr, "ws-load: connect: %s\n", strerror(err ? err : ECONNREFUSED));
                    kill_conn(c, 1);
                    pending--;
                    continue;
                }
                static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
                for (int k = 0; k < 21; k++)
                    c->key[k] = b64[xrand() % 64];
                c->key[21] = b64[(xrand() % 4) * 16]; /* 16 bytes: the last char holds 2 bits */
                c->key[22] = c->key[23] = '=';
                c->key[24] = 0;
                char req[1024];
                int rn = snprintf(req, sizeof(req),
                                  "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                  "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
                                  path, addr, port, c->key);
                c->state = HANDSHAKE;
                if (wbuf_add(c, req, (size_t)rn) < 0 || flush(c) < 0) {
                    kill_conn(c, 1);
                    pending--;
                }
                continue;
            }
            if ((ev & EPOLLOUT) && c->wlen > 0 && flush(c) < 0) {
                if (c->state == HANDSHAKE)
                    pending--;
                kill_conn(c, 1);
                continue;
            }
            if (!(ev & (EPOLLIN | EPOLLERR | EPOLLHUP)))
                continue;
            int fail = 0, got = 0;
            for (int k = 0; k < 8 && c->rlen < RBUF; k++) {
                ssize_t r = read(c->fd, c->rbuf + c->rlen, RBUF - c->rlen);
                if (r > 0) {
                    c->rlen += (size_t)r;
                    got = 1;
                    if (r < 16384)
                        break;
                    continue;
                }
                if (r < 0 && errno == EINTR)
                    continue;
                if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                    break;
                fail = 1; /* EOF or error */
                break;
            }
            if (c->state == HANDSHAKE && got) {
                int h = handshake_done(c);
                if (h < 0) {
                    kill_conn(c, 1);
                    pending--;
                    continue;
                }
                if (h > 0) {
                    c->state = OPEN;
                    open_conns++;
                    pending--;
                    if (measuring)
                        start_conn(c); /* a late one, after the connect timeout */
                }
            }
            if (c->state == OPEN && c->rlen > 0) {
                int a = frames(c);
                if (a < 0) {
                    kill_conn(c, 1);
                    continue;
                }
                if (measuring && t < t_end) {
                    for (int k = 0; k < a; k++)
                        if (send_msg(c) < 0)
                            fail = 1;
                }
                if (!fail && c->wlen > 0 && flush(c) < 0)
                    fail = 1;
            }
            if (fail || (c->rlen >= RBUF)) {
                if (c->state == HANDSHAKE)
                    pending--;
                kill_conn(c, 1);
            }
        }
    }
    uint64_t t_stop = now_ns();
    double measured = measuring ? (double)((t_stop < t_end ? t_stop : t_end) - t_start) / 1e9 : 0;
    int opened = open_conns;
    /* Close politely: a masked close frame, then the sockets. */
    for (int i = 0; i < nconns; i++) {
        conn_t *c = &conns[i];
        if (c->state != OPEN)
            continue;
        uint8_t hdr[MG_WS_HEADER_MAX], mask[4] = {9, 8, 7, 6}, pl[2] = {0x03, 0xe8};
        mg_ws_mask(pl, 2, mask, 0);
        size_t hn = mg_ws_frame_header(hdr, 1, MG_WS_CLOSE, 2, mask);
        c->wlen = 0;
        wbuf_add(c, hdr, hn);
        wbuf_add(c, pl, 2);
        if (write(c->fd, c->wbuf, c->wlen) < 0) {
        }
        close(c->fd);
    }
    printf("conns=%d open=%d msgs=%llu secs=%.3f rate=%.1f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f "
           "bad=%llu errors=%llu\n",
           nconns, opened, (unsigned long long)msgs, measured, measured > 0 ? msgs / measured : 0.0, quantile(0.50), quantile(0.90),
           quantile(0.99), lat_max / 1e6, (unsigned long long)bad, (unsigned long long)errors);
    return (opened > 0 && msgs > 0) ? 0 : 1;

usage:
    fprintf(stderr, "usage: ws-load -p PORT [-a ADDR] [-u PATH] [-c CONNS] [-D DEPTH] [-d SECONDS] [-s BYTES] "
                    "[-m echo|bridge] [-T CONNECT_TIMEOUT]\n");
    return 2;
}
