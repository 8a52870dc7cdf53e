/*
 * matchgate-demo-backend: a small HTTP/1.1 server to put behind the gateway in demos and
 * tests. It answers what it was asked, so a reader can see what the gateway forwarded.
 *
 *   matchgate-demo-backend --listen 127.0.0.1:9001 [--name NAME]
 *
 *   .../status/NNN  answers with status NNN (and the echo body)
 *   .../slow?ms=N   waits N ms on an event-loop timer, then echoes
 *   .../bytes?n=N   N bytes, byte i = 'a' + i % 26, streamed with a content-length
 *   anything else   200 application/json: {"backend", "method", "path", "query",
 *                   "headers": {lower-name: value}, "body_bytes", "body": first 1 KiB}
 *
 * ("..." is any prefix, so /api/slow works behind a gateway route for /api.)
 *
 * Single-threaded; SIGTERM or SIGINT ends it with status 0.
 */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <h2o.h>

#define ECHO_BODY_MAX 1024
#define CHUNK_SIZE 65536

static const char *backend_name;
static h2o_globalconf_t config;
static h2o_context_t ctx;
static h2o_accept_ctx_t accept_ctx;
static int stopping;

/* ---- echo ------------------------------------------------------------------------------ */

/* The bytes of a JSON string, without the quotes. */
static void json_chars(FILE *out, const char *s, size_t len)
{
    for (size_t i = 0; i != len; ++i) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f) /* keeps the output valid JSON whatever the bytes */
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
}

static void json_string(FILE *out, const char *s, size_t len)
{
    fputc('"', out);
    json_chars(out, s, len);
    fputc('"', out);
}

/* One key per header name; repeated headers are joined with ", " as HTTP allows. h2o keeps
 * Host (or :authority) apart from the other headers; it is shown as "host". */
static void json_headers(FILE *out, const h2o_req_t *req)
{
    const h2o_headers_t *headers = &req->headers;
    fputs("{\"host\": ", out);
    json_string(out, req->authority.base, req->authority.len);
    for (size_t i = 0; i != headers->size; ++i) {
        const h2o_iovec_t *name = headers->entries[i].name;
        ssize_t j = h2o_find_header_by_str(headers, name->base, name->len, -1);
        if ((size_t)j != i)
            continue; /* already written with its first occurrence */
        fputs(", ", out);
        json_string(out, name->base, name->len);
        fputs(": \"", out);
        for (; j != -1; j = h2o_find_header_by_str(headers, name->base, name->len, j)) {
            fprintf(out, "%s", (size_t)j != i ? ", " : "");
            json_chars(out, headers->entries[j].value.base, headers->entries[j].value.len);
        }
        fputc('"', out);
    }
    fputc('}', out);
}

static h2o_iovec_t req_path(h2o_req_t *req)
{
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    return h2o_iovec_init(req->path.base, len);
}

static h2o_iovec_t req_query(h2o_req_t *req)
{
    if (req->query_at == SIZE_MAX)
        return h2o_iovec_init("", 0);
    return h2o_iovec_init(req->path.base + req->query_at + 1, req->path.len - req->query_at - 1);
}

static const char *reason_phrase(int status)
{
    static const struct {
        int status;
        const char *reason;
    } reasons[] = {{200, "OK"},
                   {201, "Created"},
                   {204, "No Content"},
                   {304, "Not Modified"},
                   {400, "Bad Request"},
                   {404, "Not Found"},
                   {500, "Internal Server Error"},
                   {502, "Bad Gateway"},
                   {503, "Service Unavailable"},
                   {504, "Gateway Timeout"}};
    for (size_t i = 0; i != sizeof(reasons) / sizeof(reasons[0]); ++i)
        if (reasons[i].status == status)
            return reasons[i].reason;
    return "Status"; /* any phrase will do: clients go by the code */
}

static void send_echo(h2o_req_t *req, int status)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    h2o_iovec_t path = req_path(req), query = req_query(req);
    size_t body_len = req->entity.base != NULL ? req->entity.len : 0;

    fputs("{\"backend\": ", out);
    json_string(out, backend_name, strlen(backend_name));
    fputs(", \"method\": ", out);
    json_string(out, req->method.base, req->method.len);
    fputs(", \"path\": ", out);
    json_string(out, path.base, path.len);
    fputs(", \"query\": ", out);
    json_string(out, query.base, query.len);
    fputs(", \"headers\": ", out);
    json_headers(out, req);
    fprintf(out, ", \"body_bytes\": %zu, \"body\": ", body_len);
    json_string(out, req->entity.base, body_len < ECHO_BODY_MAX ? body_len : ECHO_BODY_MAX);
    fputs("}\n", out);
    fclose(out);

    req->res.status = status;
    req->res.reason = reason_phrase(status);
    if (status == 204 || status == 304) {
        /* these never carry a body (RFC 9110 15.3.5, 15.4.5) */
        static h2o_generator_t none;
        h2o_start_response(req, &none);
        h2o_send(req, NULL, 0, H2O_SEND_STATE_FINAL);
    } else {
        /* h2o_send_inline copies the body into the request's pool, so ours can go now. */
        req->res.content_length = len;
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
        h2o_send_inline(req, text, len);
    }
    free(text);
}

/* ---- query parameters ------------------------------------------------------------------ */

/* The value of `name` in the query string as a number, or `def` when absent. */
static unsigned long long query_number(h2o_req_t *req, const char *name, unsigned long long def)
{
    h2o_iovec_t q = req_query(req);
    size_t nlen = strlen(name);
    for (const char *p = q.base, *end = q.base + q.len; p < end;) {
        const char *amp = memchr(p, '&', end - p);
        if (amp == NULL)
            amp = end;
        if ((size_t)(amp - p) > nlen && memcmp(p, name, nlen) == 0 && p[nlen] == '=') {
            /* not strtoull: the path is not NUL-terminated */
            unsigned long long n = 0;
            for (p += nlen + 1; p < amp && *p >= '0' && *p <= '9'; ++p)
                n = n * 10 + (*p - '0');
            return n;
        }
        p = amp + 1;
    }
    return def;
}

/* ---- /slow ----------------------------------------------------------------------------- */

/* h2o timers are fixed-length buckets, so keep one per distinct delay asked for. */
typedef struct delay_bucket {
    h2o_timeout_t timeout;
    uint64_t ms;
    struct delay_bucket *next;
} delay_bucket_t;

static delay_bucket_t *delay_buckets;

typedef struct slow_req {
    h2o_timeout_entry_t entry; /* first, so the timer callback can cast back */
    h2o_req_t *req;
} slow_req_t;

static h2o_timeout_t *delay_timeout(uint64_t ms)
{
    delay_bucket_t *b;
    for (b = delay_buckets; b != NULL; b = b->next)
        if (b->ms == ms)
            return &b->timeout;
    b = calloc(1, sizeof(*b));
    b->ms = ms;
    h2o_timeout_init(ctx.loop, &b->timeout, ms);
    b->next = delay_buckets;
    delay_buckets = b;
    return &b->timeout;
}

static void on_slow_timer(h2o_timeout_entry_t *entry)
{
    slow_req_t *slow = (slow_req_t *)entry;
    send_echo(slow->req, 200);
}

/* The pool is freed when the client leaves early: the timer must not fire on a dead req. */
static void dispose_slow(void *p)
{
    slow_req_t *slow = p;
    if (h2o_timeout_is_linked(&slow->entry))
        h2o_timeout_unlink(&slow->entry);
}

static void handle_slow(h2o_req_t *req)
{
    slow_req_t *slow = h2o_mem_alloc_shared(&req->pool, sizeof(*slow), dispose_slow);
    memset(slow, 0, sizeof(*slow));
    slow->req = req;
    slow->entry.cb = on_slow_timer;
    h2o_timeout_link(ctx.loop, delay_timeout(query_number(req, "ms", 1000)), &slow->entry);
}

/* ---- /bytes ---------------------------------------------------------------------------- */

/* CHUNK_SIZE bytes of the pattern can start at any phase of the alphabet from here. */
static char pattern[CHUNK_SIZE + 26];

typedef struct bytes_gen {
    h2o_generator_t super;
    uint64_t offset, total;
    h2o_iovec_t chunk; /* must stay valid until proceed: it points into `pattern` */
} bytes_gen_t;

static void bytes_proceed(h2o_generator_t *self, h2o_req_t *req)
{
    bytes_gen_t *gen = (bytes_gen_t *)self;
    uint64_t left = gen->total - gen->offset;
    size_t n = left < CHUNK_SIZE ? left : CHUNK_SIZE;
    gen->chunk = h2o_iovec_init(pattern + gen->offset % 26, n);
    gen->offset += n;
    h2o_send(req, &gen->chunk, n != 0, gen->offset == gen->total ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void bytes_stop(h2o_generator_t *self, h2o_req_t *req) {}

static void handle_bytes(h2o_req_t *req)
{
    bytes_gen_t *gen = h2o_mem_alloc_pool(&req->pool, sizeof(*gen));
    *gen = (bytes_gen_t){{bytes_proceed, bytes_stop}, 0, query_number(req, "n", 0)};
    req->res.status = 200;
    req->res.reason = reason_phrase(200);
    req->res.content_length = gen->total;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/octet-stream"));
    h2o_start_response(req, &gen->super);
    bytes_proceed(&gen->super, req);
}

/* ---- dispatch and main loop ------------------------------------------------------------ */

/* Endpoints match on the end of the path, so they work behind a gateway's prefix route
 * (/api/slow, /api/bytes, /api/status/503). */
static int path_ends_with(h2o_iovec_t path, const char *s)
{
    size_t n = strlen(s);
    return path.len >= n && memcmp(path.base + path.len - n, s, n) == 0;
}

/* NNN from a path ending in "/status/NNN", or 0. */
static int status_in_path(h2o_iovec_t path)
{
    const char *p = path.base + path.len - 3;
    if (path.len < sizeof("/status/NNN") - 1 || memcmp(p - 8, "/status/", 8) != 0)
        return 0;
    for (int i = 0; i != 3; ++i)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    h2o_iovec_t path = req_path(req);
    int status = status_in_path(path);
    if (status != 0)
        send_echo(req, status >= 200 && status <= 599 ? status : 400);
    else if (path_ends_with(path, "/slow"))
        handle_slow(req);
    else if (path_ends_with(path, "/bytes"))
        handle_bytes(req);
    else
        send_echo(req, 200);
    return 0;
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    h2o_socket_t *sock;
    if (err == NULL && (sock = h2o_evloop_socket_accept(listener)) != NULL)
        h2o_accept(&accept_ctx, sock);
}

static void on_signal(h2o_socket_t *sock, const char *err)
{
    struct signalfd_siginfo info;
    if (read(h2o_socket_get_fd(sock), &info, sizeof(info)) == sizeof(info))
        stopping = 1;
}

/* A signalfd read by the loop: no race between a signal and the next wait. */
static h2o_socket_t *watch_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    h2o_socket_t *sock = h2o_evloop_socket_create(ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    h2o_socket_read_start(sock, on_signal);
    return sock;
}

/* "host:port" or "[v6]:port"; returns a listening, non-blocking socket or -1. */
static int open_listener(const char *address)
{
    char host[256];
    const char *colon = strrchr(address, ':');
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    if (colon == NULL || (size_t)(colon - address) >= sizeof(host))
        return -1;
    snprintf(host, sizeof(host), "%.*s", (int)(colon - address), address);
    char *h = host;
    if (h[0] == '[' && h[strlen(h) - 1] == ']')
        h[strlen(h) - 1] = '\0', ++h;
    if (getaddrinfo(*h ? h : NULL, colon + 1, &hints, &ai) != 0)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), on = 1;
    if (fd == -1 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        listen(fd, SOMAXCONN) != 0) {
        if (fd != -1)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static void usage(FILE *out)
{
    fputs("usage: matchgate-demo-backend --listen HOST:PORT [--name NAME]\n", out);
}

int main(int argc, char **argv)
{
    const char *listen_at = NULL;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc)
            listen_at = argv[++i];
        else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            backend_name = argv[++i];
        else if (strcmp(argv[i], "--help") == 0)
            return usage(stdout), 0;
        else
            return usage(stderr), 2;
    }
    if (listen_at == NULL)
        return usage(stderr), 2;
    if (backend_name == NULL)
        backend_name = listen_at;
    for (size_t i = 0; i != sizeof(pattern); ++i)
        pattern[i] = 'a' + i % 26;

    signal(SIGPIPE, SIG_IGN);
    h2o_config_init(&config);
    h2o_hostconf_t *host = h2o_config_register_host(&config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *pathconf = h2o_config_register_path(host, "/", 0);
    h2o_create_handler(pathconf, sizeof(h2o_handler_t))->on_req = on_req;
    h2o_context_init(&ctx, h2o_evloop_create(), &config);
    accept_ctx = (h2o_accept_ctx_t){.ctx = &ctx, .hosts = config.hosts};

    int fd = open_listener(listen_at);
    if (fd == -1) {
        fprintf(stderr, "matchgate-demo-backend: cannot listen on %s: %s\n", listen_at, strerror(errno));
        return 1;
    }
    h2o_socket_t *listener = h2o_evloop_socket_create(ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    h2o_socket_read_start(listener, on_accept);
    h2o_socket_t *signals = watch_signals();
    printf("listening on %s as %s\n", listen_at, backend_name);
    fflush(stdout);

    /* h2o_evloop_run returns -1 on EINTR; only the signalfd decides when to stop. */
    while (!stopping)
        h2o_evloop_run(ctx.loop, INT32_MAX);

    /* Sockets are freed by the loop after closing: one more turn, so leak checkers stay quiet. */
    h2o_socket_close(listener);
    h2o_socket_close(signals);
    h2o_evloop_run(ctx.loop, 0);
    return 0;
}
