/*
 * One connection to one Redis node: hiredis's async context on the caller's loop, its
 * handshake, its health, and reconnection.
 *
 *   IDLE --(next_at: connect)--> CONNECTING --(handshake answered)--> READY
 *     ^                              |                                   |
 *     +------(context closed: backoff 10 ms .. 400 ms, jittered)---------+
 *
 * The handshake is pipelined: AUTH (when a password is set), SELECT (db other than 0), SCRIPT
 * LOAD (so the first EVALSHA finds the script, also after a restart), then CLUSTER SLOTS in
 * Cluster mode. Decisions may be queued behind it. A handshake error (a wrong password) closes
 * the connection; it is retried with the backoff, and the event says why.
 *
 * Health: a node is "healthy" while decisions are sent to it. It is not after its connection
 * closed (until the next handshake is answered) or after a decision on it went past its
 * timeout: then a PING goes out (behind whatever is still queued), and the node is healthy
 * again when that PING comes back within the timeout; a late answer sends another PING after
 * the backoff, and a connection that answers nothing (handshake or PING) for max(1 s, 4
 * timeouts) is closed and made again (a peer gone without a reset, a black hole).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hiredis/sds.h>
#include "throttle/store_internal.h"

static uint64_t stall_us(const mg_store_client_t *c)
{
    uint64_t t = 4 * c->store->timeout_us;
    return t > MG__STORE_STALL_MIN_US ? t : MG__STORE_STALL_MIN_US;
}

uint64_t mg__backoff(mg_store_client_t *c, unsigned failures)
{
    if (failures == 0)
        return 0;
    uint64_t d = (uint64_t)MG__STORE_RETRY_MIN_US << (failures > 7 ? 6 : failures - 1);
    if (d > MG__STORE_RETRY_MAX_US)
        d = MG__STORE_RETRY_MAX_US;
    /* +-25 %: workers and gateways that lost Redis together do not come back in step */
    c->rand ^= c->rand << 13, c->rand ^= c->rand >> 7, c->rand ^= c->rand << 17;
    return d * (75 + c->rand % 51) / 100;
}

void mg__client_recount(mg_store_client_t *c)
{
    uint32_t serving = 0, up = 0;
    for (size_t i = 0; i < c->num_nodes; i++) {
        serving += c->nodes[i]->serving != 0;
        up += c->nodes[i]->serving && c->nodes[i]->healthy;
    }
    __atomic_store_n(&c->stats.nodes, serving, __ATOMIC_RELAXED);
    __atomic_store_n(&c->stats.nodes_up, up, __ATOMIC_RELAXED);
}

static void set_healthy(mg_store_node_t *node, int healthy, const char *event)
{
    if (node->healthy == healthy)
        return;
    node->healthy = healthy;
    mg__client_recount(node->client);
    if (event != NULL)
        mg__event(node->client, node, event);
}

void mg__node_lost(mg_store_node_t *node)
{
    set_healthy(node, 0, NULL);
}

static void set_reason(mg_store_node_t *node, const char *what, const char *detail)
{
    snprintf(node->reason, sizeof(node->reason), "%s%s%s", what, detail != NULL ? ": " : "", detail != NULL ? detail : "");
}

/* ---------------------------------------------------------------------------------------
 * hiredis's event hooks, forwarded to the caller's loop.
 */
static const mg_store_loop_t *loop_of(const mg_store_node_t *node)
{
    return node->client->conf.loop;
}

static void ev_add_read(void *p)
{
    mg_store_node_t *node = p;
    loop_of(node)->add_read(node->watch);
}

static void ev_del_read(void *p)
{
    mg_store_node_t *node = p;
    loop_of(node)->del_read(node->watch);
}

static void ev_add_write(void *p)
{
    mg_store_node_t *node = p;
    loop_of(node)->add_write(node->watch);
}

static void ev_del_write(void *p)
{
    mg_store_node_t *node = p;
    loop_of(node)->del_write(node->watch);
}

/* The context is being freed (after its pending callbacks got NULL replies): hiredis closed it
 * on an error, or we did. The loop's watch closes the descriptor, hiredis must not. */
static void ev_cleanup(void *p)
{
    mg_store_node_t *node = p;
    mg_store_client_t *c = node->client;
    redisAsyncContext *ac = node->ac;
    uint64_t now = mg_throttle_now();
    loop_of(node)->io_detach(node->watch);
    node->watch = NULL;
    ac->c.fd = -1;
    if (node->reason[0] == '\0')
        set_reason(node, "connection lost", ac->err != 0 ? ac->errstr : NULL);
    node->ac = NULL;
    node->state = MG__NODE_IDLE;
    node->probing = 0;
    mg__stat_add(&c->stats.disconnects, 1);
    set_healthy(node, 0, NULL);
    if (c->closing)
        return;
    mg__event(c, node, node->reason);
    /* a node that serves no slot any more is not called again until a redirect names it */
    node->next_at = node->serving ? now + mg__backoff(c, ++node->failures) : 0;
    if (c->cluster)
        mg__cluster_refresh(c, NULL); /* a failover moves its slots: learn where */
    mg__client_arm(c);
}

void mg_store_io_ready(mg_store_io_t *io, int readable, int writable)
{
    mg_store_node_t *node = io->node;
    /* reading may close the context (cleanup then clears node->ac) */
    if (readable && node->ac != NULL)
        redisAsyncHandleRead(node->ac);
    if (writable && node->ac != NULL) {
        if (sdslen(node->ac->c.obuf) != 0)
            mg__stat_add(&node->client->stats.flushes, 1);
        redisAsyncHandleWrite(node->ac);
    }
}

/* ---------------------------------------------------------------------------------------
 * Commands, the handshake and probes.
 */
int mg__node_command(mg_store_node_t *node, redisCallbackFn *fn, void *privdata, int argc, const char **argv, const size_t *lens)
{
    if (node->ac == NULL || redisAsyncCommandArgv(node->ac, fn, privdata, argc, argv, lens) != REDIS_OK)
        return -1;
    mg__stat_add(&node->client->stats.commands, 1);
    return 0;
}

static int command(mg_store_node_t *node, redisCallbackFn *fn, void *privdata, int argc, const char **argv)
{
    size_t lens[3];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return mg__node_command(node, fn, privdata, argc, argv, lens);
}

static void node_ready(mg_store_node_t *node)
{
    mg_store_client_t *c = node->client;
    int again = node->failures != 0;
    node->state = MG__NODE_READY;
    node->failures = 0;
    node->next_at = 0;
    node->reason[0] = '\0';
    mg__stat_add(&c->stats.connects, 1);
    if (node->healthy)
        mg__event(c, node, "connected");
    set_healthy(node, 1, again ? "connected again: shared mode" : "connected");
    if (c->cluster && (!c->map_known || c->refresh_wanted))
        mg__cluster_refresh(c, node);
    mg__client_arm(c);
}

/* Each handshake step's reply: an error closes the connection; the last step makes it ready. */
static char step_auth, step_select, step_script;

static void on_handshake(redisAsyncContext *ac, void *reply, void *privdata)
{
    mg_store_node_t *node = ac->data;
    const redisReply *r = reply;
    if (r == NULL)
        return; /* closing: ev_cleanup says why */
    if (r->type == REDIS_REPLY_ERROR) {
        char why[160];
        snprintf(why, sizeof(why), "%s refused: %s",
                 privdata == &step_auth     ? "AUTH"
                 : privdata == &step_select ? "SELECT"
                                            : "SCRIPT LOAD",
                 r->str);
        mg__node_drop(node, why);
        return;
    }
    if (privdata == &step_script) {
        if (r->type != REDIS_REPLY_STRING || strcmp(r->str, node->client->store->sha) != 0) {
            mg__node_drop(node, "SCRIPT LOAD answered another SHA1");
            return;
        }
        node_ready(node);
    }
}

static int handshake(mg_store_node_t *node)
{
    mg_store_t *s = node->client->store;
    char db[16];
    const char *script[] = {"SCRIPT", "LOAD", mg__store_script(0)};
    snprintf(db, sizeof(db), "%u", s->db);
    if (s->password != NULL) {
        const char *user[] = {"AUTH", s->username, s->password}, *plain[] = {"AUTH", s->password};
        if (s->username != NULL ? command(node, on_handshake, &step_auth, 3, user)
                                : command(node, on_handshake, &step_auth, 2, plain))
            return -1;
    }
    if (s->db != 0 && !node->client->cluster && command(node, on_handshake, &step_select, 2, (const char *[]){"SELECT", db}) != 0)
        return -1;
    return command(node, on_handshake, &step_script, 3, script);
}

static void on_probe(redisAsyncContext *ac, void *reply, void *privdata)
{
    mg_store_node_t *node = ac->data;
    mg_store_client_t *c = node->client;
    uint64_t now = mg_throttle_now();
    if (reply == NULL)
        return;
    node->probing = 0;
    if (((redisReply *)reply)->type != REDIS_REPLY_ERROR && now - node->probe_at <= c->store->timeout_us) {
        node->failures = 0;
        node->next_at = 0;
        set_healthy(node, 1, "answering in time again: shared mode");
    } else {
        node->next_at = now + mg__backoff(c, ++node->failures);
    }
    mg__client_arm(c);
}

static void send_probe(mg_store_node_t *node, uint64_t now)
{
    if (command(node, on_probe, NULL, 1, (const char *[]){"PING"}) != 0)
        return;
    node->probing = 1;
    node->probe_at = now;
    node->next_at = now + stall_us(node->client);
}

void mg__node_suspect(mg_store_node_t *node, uint64_t now)
{
    if (!node->healthy)
        return;
    set_healthy(node, 0, "slow: a decision got no answer within the timeout");
    if (node->state == MG__NODE_READY && !node->probing)
        send_probe(node, now);
    mg__client_arm(node->client);
}

/* ---------------------------------------------------------------------------------------
 * Connecting and closing.
 */
static void connect_failed(mg_store_node_t *node, const char *why, uint64_t now)
{
    set_reason(node, "connect failed", why);
    set_healthy(node, 0, NULL);
    mg__event(node->client, node, node->reason);
    node->next_at = now + mg__backoff(node->client, ++node->failures);
}

static void node_connect(mg_store_node_t *node, uint64_t now)
{
    mg_store_client_t *c = node->client;
    redisAsyncContext *ac = redisAsyncConnect(node->addr.host, node->addr.port);
    node->reason[0] = '\0';
    if (ac == NULL || ac->err != 0) {
        char why[128];
        snprintf(why, sizeof(why), "%s", ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        connect_failed(node, why, now);
        return;
    }
    if ((node->watch = c->conf.loop->io_attach(c->conf.loop->data, ac->c.fd, &node->io)) == NULL) {
        redisAsyncFree(ac);
        connect_failed(node, "out of memory", now);
        return;
    }
    ac->data = node;
    ac->ev.data = node;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    node->ac = ac;
    node->state = MG__NODE_CONNECTING;
    node->next_at = now + stall_us(c);
    if (handshake(node) != 0)
        mg__node_drop(node, "out of memory");
}

void mg__node_tick(mg_store_node_t *node, uint64_t now)
{
    node->next_at = 0;
    switch (node->state) {
    case MG__NODE_IDLE:
        node_connect(node, now);
        break;
    case MG__NODE_CONNECTING:
        mg__node_drop(node, "no answer to the handshake");
        break;
    case MG__NODE_READY:
        if (node->probing)
            mg__node_drop(node, "no answer to a probe");
        else if (!node->healthy)
            send_probe(node, now);
        break;
    }
}

void mg__node_drop(mg_store_node_t *node, const char *reason)
{
    if (node->ac == NULL)
        return;
    if (reason != NULL)
        set_reason(node, reason, NULL);
    set_healthy(node, 0, NULL);
    /* now, or once the callback running on it returns: ev_cleanup follows either way */
    redisAsyncFree(node->ac);
}

mg_store_node_t *mg__node_new(mg_store_client_t *c, const mg_store_addr_t *addr)
{
    mg_store_node_t *node = calloc(1, sizeof(*node));
    if (node == NULL)
        return NULL;
    node->client = c;
    node->io.node = node;
    node->addr = *addr;
    snprintf(node->name, sizeof(node->name), strchr(addr->host, ':') != NULL ? "[%s]:%u" : "%s:%u", addr->host,
             (unsigned)addr->port);
    /* a node never tried is trusted: the first decisions wait for its handshake */
    node->healthy = 1;
    return node;
}

/* Connects a new node now. */
void mg__node_start(mg_store_node_t *node)
{
    node_connect(node, mg_throttle_now());
    mg__client_arm(node->client);
}

void mg__node_close(mg_store_node_t *node)
{
    if (node->ac != NULL)
        redisAsyncFree(node->ac);
}
