/* See store_support.h. Every wait here is bounded in time. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "store_support.h"

uint64_t tl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------------------
 * redis-server processes.
 */
static int in_path(const char *name)
{
    const char *path = getenv("PATH");
    char buf[4096];
    if (path == NULL)
        path = "/usr/bin:/bin";
    while (*path != '\0') {
        size_t len = strcspn(path, ":");
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, path, name);
        if (access(buf, X_OK) == 0)
            return 1;
        path += len + (path[len] == ':');
    }
    return 0;
}

int rs_available(const char **why)
{
    if (!in_path("redis-server")) {
        *why = "redis-server is not installed (scripts/deps installs it: apt-get install redis-server redis-tools)";
        return 0;
    }
    if (!in_path("redis-cli")) {
        *why = "redis-cli is not installed (apt-get install redis-tools)";
        return 0;
    }
    return 1;
}

static int port_free(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;
    if (fd < 0)
        return 0;
    ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* A port with its Cluster bus port (+10000) free too, below the ephemeral range. */
static uint16_t free_port(void)
{
    static unsigned seed;
    if (seed == 0)
        seed = (unsigned)getpid() ^ (unsigned)tl_now_us();
    for (int i = 0; i < 200; i++) {
        uint16_t p = (uint16_t)(15000 + rand_r(&seed) % 15000);
        if (port_free(p) && port_free((uint16_t)(p + 10000)))
            return p;
    }
    return 0;
}

static void spawn(rs_server_t *s, const char *const *extra)
{
    char port[8], log[96];
    const char *argv[64] = {"redis-server", "--port", port,        "--bind", "127.0.0.1",        "--dir", s->dir, "--save", "",
                            "--appendonly", "no",     "--logfile", log,      "--protected-mode", "no"};
    size_t n = 15;
    snprintf(port, sizeof(port), "%u", (unsigned)s->port);
    snprintf(log, sizeof(log), "%s/redis.log", s->dir);
    for (size_t i = 0; extra != NULL && extra[i] != NULL && n < 63; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    if ((s->pid = fork()) == 0) {
        /* the server dies with the test, whatever happens to the test */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0), dup2(null, 1), dup2(null, 2);
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
}

static void drop_sync(rs_server_t *s)
{
    if (s->sync != NULL)
        redisFree(s->sync);
    s->sync = NULL;
}

static int wait_ready(rs_server_t *s)
{
    for (uint64_t until = tl_now_us() + 5000000; tl_now_us() < until; sleep_us(10000)) {
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            return -1;
        }
        redisReply *r = rs_command(s, "PING");
        /* a server with a password answers NOAUTH: it is up */
        int ok =
            r != NULL && (r->type == REDIS_REPLY_STATUS || (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0));
        if (r != NULL)
            freeReplyObject(r);
        if (ok)
            return 0;
        drop_sync(s);
    }
    return -1;
}

int rs_restart(rs_server_t *s, const char *const *extra)
{
    drop_sync(s);
    spawn(s, extra);
    return s->pid > 0 ? wait_ready(s) : -1;
}

int rs_start(rs_server_t *s, const char *const *extra)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "/tmp/mg-redis.XXXXXX");
    if (mkdtemp(s->dir) == NULL)
        return -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        if ((s->port = free_port()) == 0)
            return -1;
        if (rs_restart(s, extra) == 0)
            return 0;
        rs_kill(s); /* another process took the port first: try another */
    }
    return -1;
}

static void reap(rs_server_t *s, int sig)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, sig);
    for (uint64_t until = tl_now_us() + 5000000; tl_now_us() < until; sleep_us(2000))
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = 0;
            return;
        }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

void rs_kill(rs_server_t *s)
{
    drop_sync(s);
    reap(s, SIGKILL);
}

void rs_stop(rs_server_t *s)
{
    char cmd[128];
    drop_sync(s);
    kill(s->pid, SIGCONT); /* a test may have stopped it */
    reap(s, SIGTERM);
    if (s->dir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", s->dir);
        s->dir[0] = '\0';
    }
}

static redisContext *sync_of(rs_server_t *s)
{
    if (s->sync == NULL) {
        struct timeval tv = {2, 0};
        s->sync = redisConnectWithTimeout("127.0.0.1", s->port, tv);
        if (s->sync == NULL || s->sync->err != 0 || redisSetTimeout(s->sync, tv) != REDIS_OK) {
            drop_sync(s);
            return NULL;
        }
    }
    return s->sync;
}

static redisReply *checked(rs_server_t *s, void *reply)
{
    if (reply == NULL)
        drop_sync(s); /* a broken connection is made again next time */
    return reply;
}

redisReply *rs_command(rs_server_t *s, const char *fmt, ...)
{
    redisContext *c = sync_of(s);
    va_list ap;
    void *reply;
    if (c == NULL)
        return NULL;
    va_start(ap, fmt);
    reply = redisvCommand(c, fmt, ap);
    va_end(ap);
    return checked(s, reply);
}

redisReply *rs_command_argv(rs_server_t *s, int argc, const char **argv, const size_t *lens)
{
    redisContext *c = sync_of(s);
    return c != NULL ? checked(s, redisCommandArgv(c, argc, argv, lens)) : NULL;
}

long long rs_integer(rs_server_t *s, const char *fmt, ...)
{
    redisContext *c = sync_of(s);
    va_list ap;
    redisReply *r;
    long long v = -1;
    if (c == NULL)
        return -1;
    va_start(ap, fmt);
    r = checked(s, redisvCommand(c, fmt, ap));
    va_end(ap);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

/* ---------------------------------------------------------------------------------------
 * The Cluster.
 */
static int node_id(rs_server_t *s)
{
    redisReply *r = rs_command(s, "CLUSTER MYID");
    int ok = r != NULL && r->type == REDIS_REPLY_STRING && r->len < sizeof(s->id);
    if (ok)
        snprintf(s->id, sizeof(s->id), "%s", r->str);
    if (r != NULL)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static int create_cluster(rs_cluster_t *cl)
{
    char cmd[256];
    int n = snprintf(cmd, sizeof(cmd), "redis-cli --cluster create");
    for (int i = 0; i < RS_CLUSTER_NODES; i++)
        n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " 127.0.0.1:%u", (unsigned)cl->node[i].port);
    snprintf(cmd + n, sizeof(cmd) - (size_t)n, " --cluster-replicas 0 --cluster-yes >%s/create.log 2>&1", cl->node[0].dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Slots owned by node i as node j sees them; -1 when it cannot say. */
static int slots_seen(rs_cluster_t *cl, int j, unsigned *owned)
{
    redisReply *r = rs_command(&cl->node[j], "CLUSTER SLOTS");
    int ok = r != NULL && r->type == REDIS_REPLY_ARRAY;
    memset(owned, 0, RS_CLUSTER_NODES * sizeof(*owned));
    for (size_t e = 0; ok && e < r->elements; e++) {
        redisReply *x = r->element[e];
        long long port = x->element[2]->element[1]->integer;
        for (int i = 0; i < RS_CLUSTER_NODES; i++)
            if (cl->node[i].port == port)
                owned[i] += (unsigned)(x->element[1]->integer - x->element[0]->integer + 1);
    }
    if (r != NULL)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static int cluster_settled(rs_cluster_t *cl)
{
    unsigned first[RS_CLUSTER_NODES], seen[RS_CLUSTER_NODES];
    for (int j = 0; j < RS_CLUSTER_NODES; j++) {
        redisReply *r = rs_command(&cl->node[j], "CLUSTER INFO");
        int ok = r != NULL && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") != NULL;
        if (r != NULL)
            freeReplyObject(r);
        if (!ok || slots_seen(cl, j, j == 0 ? first : seen) != 0)
            return 0;
        if (j > 0 && memcmp(first, seen, sizeof(seen)) != 0)
            return 0;
    }
    return first[0] + first[1] + first[2] == 16384;
}

int rs_cluster_start(rs_cluster_t *cl)
{
    static const char *const extra[] = {
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000", NULL};
    memset(cl, 0, sizeof(*cl));
    for (int i = 0; i < RS_CLUSTER_NODES; i++)
        if (rs_start(&cl->node[i], extra) != 0 || node_id(&cl->node[i]) != 0)
            return -1;
    if (create_cluster(cl) != 0)
        return -1;
    for (uint64_t until = tl_now_us() + 15000000; tl_now_us() < until; sleep_us(50000))
        if (cluster_settled(cl))
            return 0;
    return -1;
}

void rs_cluster_stop(rs_cluster_t *cl)
{
    for (int i = 0; i < RS_CLUSTER_NODES; i++)
        rs_stop(&cl->node[i]);
}

int rs_cluster_owner(rs_cluster_t *cl, unsigned slot)
{
    redisReply *r = rs_command(&cl->node[0], "CLUSTER SLOTS");
    int owner = -1;
    for (size_t e = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && e < r->elements; e++) {
        redisReply *x = r->element[e];
        if ((long long)slot < x->element[0]->integer || (long long)slot > x->element[1]->integer)
            continue;
        for (int i = 0; i < RS_CLUSTER_NODES; i++)
            if (cl->node[i].port == x->element[2]->element[1]->integer)
                owner = i;
    }
    if (r != NULL)
        freeReplyObject(r);
    return owner;
}

static int ok_reply(redisReply *r)
{
    int ok = r != NULL && r->type != REDIS_REPLY_ERROR;
    if (r != NULL && !ok)
        fprintf(stderr, "redis: %s\n", r->str);
    if (r != NULL)
        freeReplyObject(r);
    return ok;
}

/* Migrates the slot's keys one at a time; 0 when none is left. */
static int migrate_keys(rs_cluster_t *cl, unsigned slot, int from, int to, unsigned pause_us)
{
    for (int rounds = 0; rounds < 100000; rounds++) {
        redisReply *keys = rs_command(&cl->node[from], "CLUSTER GETKEYSINSLOT %u 1", slot);
        if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
            if (keys != NULL)
                freeReplyObject(keys);
            return -1;
        }
        if (keys->elements == 0) {
            freeReplyObject(keys);
            return 0;
        }
        const char *argv[] = {"MIGRATE", "127.0.0.1", NULL, "", "0", "5000", "KEYS", keys->element[0]->str};
        size_t lens[] = {7, 9, 0, 0, 1, 4, 4, keys->element[0]->len};
        char port[8];
        snprintf(port, sizeof(port), "%u", (unsigned)cl->node[to].port);
        argv[2] = port;
        lens[2] = strlen(port);
        int ok = ok_reply(rs_command_argv(&cl->node[from], 8, argv, lens));
        freeReplyObject(keys);
        if (!ok)
            return -1;
        sleep_us(pause_us);
    }
    return -1;
}

int rs_cluster_move_slot(rs_cluster_t *cl, unsigned slot, int from, int to, unsigned pause_us)
{
    rs_server_t *src = &cl->node[from], *dst = &cl->node[to];
    if (!ok_reply(rs_command(dst, "CLUSTER SETSLOT %u IMPORTING %s", slot, src->id)) ||
        !ok_reply(rs_command(src, "CLUSTER SETSLOT %u MIGRATING %s", slot, dst->id)))
        return -1;
    if (migrate_keys(cl, slot, from, to, pause_us) != 0)
        return -1;
    /* the owner learns first, then the source (which then answers MOVED), then the others */
    if (!ok_reply(rs_command(dst, "CLUSTER SETSLOT %u NODE %s", slot, dst->id)) ||
        !ok_reply(rs_command(src, "CLUSTER SETSLOT %u NODE %s", slot, dst->id)))
        return -1;
    for (int i = 0; i < RS_CLUSTER_NODES; i++)
        if (i != from && i != to && !ok_reply(rs_command(&cl->node[i], "CLUSTER SETSLOT %u NODE %s", slot, dst->id)))
            return -1;
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * The loop.
 */
typedef struct tl_watch {
    tl_loop_t *loop;
    int fd, rd, wr, dead;
    mg_store_io_t *io;
} tl_watch_t;

typedef struct tl_timer {
    uint64_t at;
    int armed, dead;
    void (*cb)(void *arg);
    void *arg;
} tl_timer_t;

struct tl_loop {
    mg_store_loop_t ops;
    tl_watch_t **w;
    size_t nw, capw;
    tl_timer_t **t;
    size_t nt, capt;
};

static int push(void ***arr, size_t *n, size_t *cap, void *item)
{
    if (*n == *cap) {
        size_t c = *cap != 0 ? 2 * *cap : 8;
        void **grown = realloc(*arr, c * sizeof(*grown));
        if (grown == NULL)
            return -1;
        *arr = grown;
        *cap = c;
    }
    (*arr)[(*n)++] = item;
    return 0;
}

static void *io_attach(void *data, int fd, mg_store_io_t *io)
{
    tl_loop_t *l = data;
    tl_watch_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    *w = (tl_watch_t){.loop = l, .fd = fd, .io = io};
    if (push((void ***)&l->w, &l->nw, &l->capw, w) != 0) {
        free(w);
        return NULL;
    }
    return w;
}

static void add_read(void *p)
{
    ((tl_watch_t *)p)->rd = 1;
}

static void del_read(void *p)
{
    ((tl_watch_t *)p)->rd = 0;
}

static void add_write(void *p)
{
    ((tl_watch_t *)p)->wr = 1;
}

static void del_write(void *p)
{
    ((tl_watch_t *)p)->wr = 0;
}

static void io_detach(void *p)
{
    tl_watch_t *w = p;
    close(w->fd);
    w->dead = 1; /* freed at the next turn: the current one may still hold it */
}

static void *timer_new(void *data, void (*cb)(void *arg), void *arg)
{
    tl_loop_t *l = data;
    tl_timer_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->cb = cb;
    t->arg = arg;
    if (push((void ***)&l->t, &l->nt, &l->capt, t) != 0) {
        free(t);
        return NULL;
    }
    return t;
}

static void timer_set(void *p, uint64_t delay_us)
{
    tl_timer_t *t = p;
    t->at = tl_now_us() + delay_us;
    t->armed = 1;
}

static void timer_stop(void *p)
{
    ((tl_timer_t *)p)->armed = 0;
}

static void timer_free(void *p)
{
    tl_timer_t *t = p;
    t->armed = 0;
    t->dead = 1;
}

tl_loop_t *tl_loop_new(void)
{
    tl_loop_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->ops = (mg_store_loop_t){l,         io_attach, add_read,  del_read,   add_write, del_write,
                               io_detach, timer_new, timer_set, timer_stop, timer_free};
    return l;
}

static void sweep(tl_loop_t *l)
{
    size_t k = 0;
    for (size_t i = 0; i < l->nw; i++)
        if (l->w[i]->dead)
            free(l->w[i]);
        else
            l->w[k++] = l->w[i];
    l->nw = k;
    k = 0;
    for (size_t i = 0; i < l->nt; i++)
        if (l->t[i]->dead)
            free(l->t[i]);
        else
            l->t[k++] = l->t[i];
    l->nt = k;
}

void tl_loop_free(tl_loop_t *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->nw; i++) {
        if (!l->w[i]->dead)
            close(l->w[i]->fd);
        free(l->w[i]);
    }
    for (size_t i = 0; i < l->nt; i++)
        free(l->t[i]);
    free(l->w);
    free(l->t);
    free(l);
}

const mg_store_loop_t *tl_loop_ops(tl_loop_t *l)
{
    return &l->ops;
}

size_t tl_watching(const tl_loop_t *l)
{
    size_t n = 0;
    for (size_t i = 0; i < l->nw; i++)
        n += !l->w[i]->dead;
    return n;
}

static int next_wait_ms(tl_loop_t *l, int max_wait_ms)
{
    uint64_t now = tl_now_us();
    int wait = max_wait_ms;
    for (size_t i = 0; i < l->nt; i++) {
        if (!l->t[i]->armed)
            continue;
        uint64_t d = l->t[i]->at > now ? (l->t[i]->at - now + 999) / 1000 : 0;
        if ((int64_t)d < wait)
            wait = (int)d;
    }
    return wait;
}

static void run_timers(tl_loop_t *l)
{
    uint64_t now = tl_now_us();
    /* by index: a callback may add timers */
    for (size_t i = 0; i < l->nt; i++) {
        tl_timer_t *t = l->t[i];
        if (t->armed && !t->dead && t->at <= now) {
            t->armed = 0;
            t->cb(t->arg);
        }
    }
}

void tl_run_once(tl_loop_t *l, int max_wait_ms)
{
    struct pollfd fds[64];
    tl_watch_t *of[64];
    nfds_t n = 0;
    sweep(l);
    for (size_t i = 0; i < l->nw && n < 64; i++) {
        tl_watch_t *w = l->w[i];
        if (w->rd || w->wr) {
            fds[n] = (struct pollfd){.fd = w->fd, .events = (short)((w->rd ? POLLIN : 0) | (w->wr ? POLLOUT : 0))};
            of[n++] = w;
        }
    }
    if (poll(fds, n, next_wait_ms(l, max_wait_ms)) > 0) {
        for (nfds_t i = 0; i < n; i++) {
            short ev = fds[i].revents;
            tl_watch_t *w = of[i];
            if (ev == 0 || w->dead)
                continue;
            int failed = (ev & (POLLERR | POLLHUP)) != 0;
            int readable = w->rd && ((ev & POLLIN) || failed), writable = w->wr && ((ev & POLLOUT) || failed);
            mg_store_io_ready(w->io, readable, writable);
        }
    }
    run_timers(l);
}

int tl_run_until(tl_loop_t *l, int (*done)(void *arg), void *arg, int timeout_ms)
{
    uint64_t until = tl_now_us() + (uint64_t)timeout_ms * 1000;
    while (!done(arg)) {
        uint64_t now = tl_now_us();
        if (now >= until)
            return 0;
        tl_run_once(l, (int)((until - now) / 1000) + 1 > 20 ? 20 : (int)((until - now) / 1000) + 1);
    }
    return 1;
}
