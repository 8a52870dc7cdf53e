/*
 * The store's internals, shared by its files (not part of the module's door):
 *   store_conf.c     settings, URLs, the "local" failure policy
 *   store_script.c   the Lua script, keys and hash slots, the script's answer
 *   store_client.c   a worker's client: decisions, their deadlines, answers, the timer
 *   store_node.c     one connection to one Redis node: hiredis on the caller's loop, handshake,
 *                    health, probes, reconnection with backoff
 *   store_cluster.c  the slot map, CLUSTER SLOTS, MOVED and ASK
 */
#ifndef MG_THROTTLE_STORE_INTERNAL_H
#define MG_THROTTLE_STORE_INTERNAL_H

#include <hiredis/async.h>
#include "throttle/store.h"

#define MG__STORE_SLOTS 16384
#define MG__STORE_MAX_REDIRECTS 5
/* reconnection and probes: 10 ms after the first failure, doubling, at most 400 ms (so a Redis
 * back up is found within half a second, jitter included) */
#define MG__STORE_RETRY_MIN_US 10000u
#define MG__STORE_RETRY_MAX_US 400000u
/* a connection whose handshake or probe has had no answer for this long is dropped (at least
 * this, at least 4 timeouts) */
#define MG__STORE_STALL_MIN_US 1000000u

struct mg_store {
    mg_store_addr_t *servers;
    size_t num_servers;
    int cluster;
    char *password, *username;
    unsigned db;
    uint64_t timeout_us;
    char *key_prefix;
    size_t prefix_len;
    char sha[41];
};

typedef struct mg_store_node mg_store_node_t;

struct mg_store_io {
    mg_store_node_t *node;
};

typedef enum node_state {
    MG__NODE_IDLE,       /* no connection; `next_at`: when to connect */
    MG__NODE_CONNECTING, /* connecting and handshaking; `next_at`: when to give up */
    MG__NODE_READY,      /* handshake answered */
} mg__node_state_t;

struct mg_store_node {
    mg_store_client_t *client;
    mg_store_io_t io;
    mg_store_addr_t addr;
    char name[272]; /* host:port */
    redisAsyncContext *ac;
    void *watch;
    mg__node_state_t state;
    int healthy;       /* decisions are sent here (else on_failure decides at once) */
    int probing;       /* a PING is out: answered within the timeout, the node is healthy again */
    unsigned failures; /* consecutive, for the backoff */
    uint64_t next_at;  /* mg_throttle_now() of the node's next timed step, 0: none */
    uint64_t probe_at; /* when the PING went out */
    uint32_t index;    /* in the client's node array */
    int serving;       /* owns slots (or is a server of the settings while the slot map is unknown) */
    char reason[160];  /* why the node went down, for the event */
    char said[160];    /* the last event told: a node failing the same way again says nothing */
};

struct mg_store_call {
    mg_store_client_t *client;
    mg_store_call_t *prev, *next; /* the client's deadline list, while unanswered */
    mg_store_node_t *node;        /* the connection that owes it a reply; NULL: none */
    mg_store_done_t done;
    void *arg;
    uint64_t started, deadline;
    mg_quota_t quota;
    uint16_t slot;
    uint8_t redirects;
    uint8_t answered; /* done was called (or cancelled): only the reply is still awaited */
    uint8_t eval;     /* NOSCRIPT came: send the script itself */
    uint8_t asking;   /* ASK came: precede it with ASKING */
    char n[12], per[24];
    size_t key_len;
    char key[];
};

typedef struct call_list {
    mg_store_call_t *head, *tail;
} mg__call_list_t;

struct mg_store_client {
    mg_store_t *store;
    mg_store_client_conf_t conf;
    void *timer;
    uint64_t armed_at;     /* when the timer fires, 0: not armed */
    mg__call_list_t calls; /* unanswered, by deadline */
    mg_store_node_t **nodes;
    size_t num_nodes, cap_nodes;
    uint16_t *slot_node; /* Cluster: node index + 1 per slot, 0: unknown */
    int cluster;         /* the store's mode, or a MOVED came */
    int map_known;       /* a CLUSTER SLOTS answer was applied */
    int refreshing;      /* a CLUSTER SLOTS is out */
    int refresh_wanted;  /* another one, when that one is back */
    int closing;
    uint64_t rand;
    mg_store_stats_t stats;
};

/* store_script.c */
const char *mg__store_script(int test_clock);
void mg__store_script_sha(int test_clock, char out[41]);
size_t mg__store_key_len(size_t prefix_len, const char *tag, size_t tag_len, size_t rest_len);
size_t mg__store_key(char *out, const char *prefix, size_t prefix_len, const char *tag, size_t tag_len, const char *rest,
                     size_t rest_len);
uint16_t mg__store_slot(const char *key, size_t len);
/* The script's reply into `d`; -1 when it is not the script's answer. */
int mg__store_parse_decision(const redisReply *r, mg_quota_t quota, mg_decision_t *d);

/* store_client.c */
void mg__stat_add(uint64_t *counter, uint64_t n);
void mg__client_arm(mg_store_client_t *c);
/* Answers `call` (shared when `d` is not NULL, else by on_failure for `why`). */
void mg__call_answer(mg_store_call_t *call, const mg_decision_t *d, mg_store_failure_t why);
/* Sends `call` on `node`, or answers it at once when the node cannot take it. */
void mg__call_send(mg_store_call_t *call, mg_store_node_t *node);
void mg__event(mg_store_client_t *c, mg_store_node_t *node, const char *event);

/* store_node.c */
mg_store_node_t *mg__node_new(mg_store_client_t *c, const mg_store_addr_t *addr);
/* Connects it now (a new node, or one a redirect names again). */
void mg__node_start(mg_store_node_t *node);
/* Closes its connection for good (the client is being freed; the node's memory stays). */
void mg__node_close(mg_store_node_t *node);
/* A decision on this node got no answer in time: stop sending until a probe is answered. */
void mg__node_suspect(mg_store_node_t *node, uint64_t now);
/* The node's timed step, when its `next_at` has come. */
void mg__node_tick(mg_store_node_t *node, uint64_t now);
/* Its connection is being closed: take no more decisions. */
void mg__node_lost(mg_store_node_t *node);
/* Counts the nodes that serve slots, and those of them that answer (the client's mode). */
void mg__client_recount(mg_store_client_t *c);
/* Closes the node's connection (its pending replies come back empty); it reconnects later. */
void mg__node_drop(mg_store_node_t *node, const char *reason);
/* Appends a command (hiredis argv) to the node's connection; -1 when it cannot take one. */
int mg__node_command(mg_store_node_t *node, redisCallbackFn *fn, void *privdata, int argc, const char **argv, const size_t *lens);
uint64_t mg__backoff(mg_store_client_t *c, unsigned failures);

/* store_cluster.c */
mg_store_node_t *mg__cluster_route(mg_store_client_t *c, uint16_t slot);
/* A MOVED or ASK reply for `call`: 1 when it was one (and was followed), else 0. */
int mg__cluster_redirect(mg_store_call_t *call, mg_store_node_t *from, const redisReply *r);
/* Asks `node` for the slot map, unless a request is out already. */
void mg__cluster_refresh(mg_store_client_t *c, mg_store_node_t *node);
mg_store_node_t *mg__cluster_node(mg_store_client_t *c, const char *host, size_t host_len, uint16_t port);

#endif
