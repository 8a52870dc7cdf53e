/*
 * Redis Cluster: which node holds a key's slot, and what to do when a node says another does.
 *
 * The client keeps a slot map (16,384 entries: node index + 1, 0 = unknown; 32 KB per worker)
 * from CLUSTER SLOTS, asked after the first handshake and again after a MOVED or a lost
 * connection (one request out at a time; another is asked for when it is back if something
 * happened meanwhile). Keys carry a hash tag, so one tenant's keys are on one node.
 *   - MOVED slot host:port: the slot has a new owner for good. The map's entry is changed at
 *     once (so the next decisions go there even before the new map arrives), the decision is
 *     sent there, and the whole map is asked for again.
 *   - ASK slot host:port: the slot is being migrated and this key already lives on the target:
 *     the decision is sent there once, preceded by ASKING; the map is not changed.
 * A decision follows at most 5 redirects (MOVED, ASK, NOSCRIPT together); past that it is the
 * caller's on_failure's (MG_STORE_REFUSED). A MOVED to a single Redis (a seed of a cluster named
 * as if it were alone) turns the client into a Cluster client.
 * Exactness holds through a migration because a key is in one place at any moment: MIGRATE
 * moves it atomically, the source runs the script while it still has the key and answers ASK
 * once it does not, and the target only runs it for an ASKING client until the slot is its own.
 */
#include <stdlib.h>
#include <string.h>
#include "throttle/store_internal.h"

static mg_store_node_t *find_node(mg_store_client_t *c, const char *host, size_t host_len, uint16_t port)
{
    for (size_t i = 0; i < c->num_nodes; i++) {
        mg_store_node_t *n = c->nodes[i];
        if (n->addr.port == port && strlen(n->addr.host) == host_len && memcmp(n->addr.host, host, host_len) == 0)
            return n;
    }
    return NULL;
}

static mg_store_node_t *add_node(mg_store_client_t *c, const char *host, size_t host_len, uint16_t port)
{
    mg_store_addr_t addr = {.port = port};
    mg_store_node_t *node;
    if (host_len == 0 || host_len >= sizeof(addr.host) || c->num_nodes >= UINT16_MAX - 1)
        return NULL;
    memcpy(addr.host, host, host_len);
    if (c->num_nodes == c->cap_nodes) {
        size_t cap = c->cap_nodes != 0 ? 2 * c->cap_nodes : 4;
        mg_store_node_t **grown = realloc(c->nodes, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        c->nodes = grown;
        c->cap_nodes = cap;
    }
    if ((node = mg__node_new(c, &addr)) == NULL)
        return NULL;
    node->index = (uint32_t)c->num_nodes;
    node->serving = 1;
    c->nodes[c->num_nodes++] = node;
    mg__client_recount(c);
    mg__node_start(node);
    return node;
}

mg_store_node_t *mg__cluster_node(mg_store_client_t *c, const char *host, size_t host_len, uint16_t port)
{
    mg_store_node_t *node = find_node(c, host, host_len, port);
    if (node == NULL)
        return add_node(c, host, host_len, port);
    /* a node left dormant (it lost its slots while down) is named again: try it now */
    if (node->state == MG__NODE_IDLE && node->next_at == 0 && !c->closing)
        mg__node_start(node);
    return node;
}

mg_store_node_t *mg__cluster_route(mg_store_client_t *c, uint16_t slot)
{
    if (c->slot_node != NULL && c->slot_node[slot] != 0)
        return c->nodes[c->slot_node[slot] - 1];
    /* not known yet: any node that answers redirects it */
    for (size_t i = 0; i < c->num_nodes; i++)
        if (c->nodes[i]->serving && c->nodes[i]->healthy && c->nodes[i]->ac != NULL)
            return c->nodes[i];
    return c->num_nodes != 0 ? c->nodes[0] : NULL;
}

/* ---------------------------------------------------------------------------------------
 * Redirects.
 */
typedef struct redirect {
    int ask;
    uint16_t slot, port;
    const char *host;
    size_t host_len;
} redirect_t;

/* "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" (the host may be empty: the node
 * that answered). 0 or -1. */
static int parse_redirect(const char *s, redirect_t *rd)
{
    char *end;
    if (strncmp(s, "MOVED ", 6) == 0)
        rd->ask = 0, s += 6;
    else if (strncmp(s, "ASK ", 4) == 0)
        rd->ask = 1, s += 4;
    else
        return -1;
    unsigned long slot = strtoul(s, &end, 10);
    if (end == s || *end != ' ' || slot >= MG__STORE_SLOTS)
        return -1;
    const char *ep = end + 1, *colon = strrchr(ep, ':');
    if (colon == NULL)
        return -1;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (end == colon + 1 || (*end != '\0' && *end != '@') || port == 0 || port > 65535)
        return -1;
    rd->slot = (uint16_t)slot;
    rd->port = (uint16_t)port;
    rd->host = ep;
    rd->host_len = (size_t)(colon - ep);
    return 0;
}

static int map_slot(mg_store_client_t *c, uint16_t slot, mg_store_node_t *node)
{
    if (c->slot_node == NULL && (c->slot_node = calloc(MG__STORE_SLOTS, sizeof(*c->slot_node))) == NULL)
        return -1;
    c->cluster = 1;
    c->slot_node[slot] = (uint16_t)(node->index + 1);
    if (!node->serving) {
        node->serving = 1;
        mg__client_recount(c);
    }
    return 0;
}

int mg__cluster_redirect(mg_store_call_t *call, mg_store_node_t *from, const redisReply *r)
{
    mg_store_client_t *c = call->client;
    redirect_t rd;
    mg_store_node_t *node;
    if (parse_redirect(r->str, &rd) != 0)
        return 0;
    if (rd.host_len == 0)
        rd.host = from->addr.host, rd.host_len = strlen(from->addr.host);
    if ((node = mg__cluster_node(c, rd.host, rd.host_len, rd.port)) == NULL) {
        mg__call_answer(call, NULL, MG_STORE_REFUSED);
        return 1;
    }
    if (rd.ask) {
        mg__stat_add(&c->stats.ask, 1);
        call->asking = 1;
    } else {
        mg__stat_add(&c->stats.moved, 1);
        call->asking = 0;
        if (map_slot(c, rd.slot, node) == 0)
            mg__cluster_refresh(c, node);
    }
    mg__call_send(call, node);
    return 1;
}

/* ---------------------------------------------------------------------------------------
 * The slot map.
 */
static void on_slots(redisAsyncContext *ac, void *reply, void *privdata);

static int node_answers(const mg_store_node_t *n)
{
    return n != NULL && n->state == MG__NODE_READY && n->healthy && n->ac != NULL;
}

void mg__cluster_refresh(mg_store_client_t *c, mg_store_node_t *hint)
{
    static const char *argv[] = {"CLUSTER", "SLOTS"};
    static const size_t lens[] = {7, 5};
    mg_store_node_t *node = node_answers(hint) ? hint : NULL;
    if (!c->cluster || c->closing)
        return;
    if (c->refreshing) {
        c->refresh_wanted = 1;
        return;
    }
    for (size_t i = 0; node == NULL && i < c->num_nodes; i++)
        node = node_answers(c->nodes[i]) ? c->nodes[i] : NULL;
    if (node == NULL || mg__node_command(node, on_slots, NULL, 2, argv, lens) != 0) {
        c->refresh_wanted = 1; /* asked for when a node is ready */
        return;
    }
    c->refreshing = 1;
    c->refresh_wanted = 0;
}

/* One entry of CLUSTER SLOTS: [start, end, [host, port, id...], replicas...]. */
static mg_store_node_t *slots_entry(mg_store_client_t *c, const mg_store_node_t *from, const redisReply *e, long long *start,
                                    long long *end)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
        return NULL;
    const redisReply *host = e->element[2]->element[0], *port = e->element[2]->element[1];
    *start = e->element[0]->integer;
    *end = e->element[1]->integer;
    if (host->type != REDIS_REPLY_STRING || port->type != REDIS_REPLY_INTEGER || port->integer <= 0 || port->integer > 65535 ||
        *start < 0 || *end >= MG__STORE_SLOTS || *start > *end)
        return NULL;
    if (host->len == 0)
        return mg__cluster_node(c, from->addr.host, strlen(from->addr.host), (uint16_t)port->integer);
    return mg__cluster_node(c, host->str, host->len, (uint16_t)port->integer);
}

static void apply_slots(mg_store_client_t *c, const mg_store_node_t *from, const redisReply *r)
{
    for (size_t i = 0; i < c->num_nodes; i++)
        c->nodes[i]->serving = 0;
    memset(c->slot_node, 0, MG__STORE_SLOTS * sizeof(*c->slot_node));
    for (size_t i = 0; i < r->elements; i++) {
        long long start, end;
        mg_store_node_t *node = slots_entry(c, from, r->element[i], &start, &end);
        if (node == NULL)
            continue;
        node->serving = 1;
        for (long long s = start; s <= end; s++)
            c->slot_node[s] = (uint16_t)(node->index + 1);
    }
    /* nodes that serve nothing now are not reconnected (a redirect to one brings it back) */
    for (size_t i = 0; i < c->num_nodes; i++)
        if (!c->nodes[i]->serving && c->nodes[i]->state == MG__NODE_IDLE)
            c->nodes[i]->next_at = 0;
    c->map_known = 1;
    mg__stat_add(&c->stats.slot_maps, 1);
    mg__client_recount(c);
}

static void on_slots(redisAsyncContext *ac, void *reply, void *privdata)
{
    mg_store_node_t *node = ac->data;
    mg_store_client_t *c = node->client;
    const redisReply *r = reply;
    c->refreshing = 0;
    if (r == NULL || c->closing) {
        c->refresh_wanted = 1;
        return;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && c->slot_node != NULL)
        apply_slots(c, node, r);
    else
        mg__event(c, node,
                  r->type == REDIS_REPLY_ERROR ? "CLUSTER SLOTS refused: decisions go where MOVED says"
                                               : "CLUSTER SLOTS gave no slots: decisions go where MOVED says");
    if (c->refresh_wanted)
        mg__cluster_refresh(c, NULL);
    mg__client_arm(c);
}
