/*
 * `tenants.store`: the Redis that keeps every quota's count for a fleet of gateways
 * (docs/configuration.md, "tenants.store"). The settings become an mg_store_t (throttle/store.h),
 * immutable and owned by the configuration; each worker's client serves the store of the
 * configuration it runs (gateway/quota/store.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/config/internal.h"
#include "throttle/store.h"

static const char *const store_keys[] = {"redis", "password", "timeout", "on_failure", "nodes", "key_prefix", NULL};

#define MAX_SERVERS 64

/* What the URLs gave: the servers, and the first password, user and db a URL carried. */
typedef struct store_urls {
    mg_store_addr_t servers[MAX_SERVERS];
    size_t num;
    char *allocs[MAX_SERVERS]; /* mg_store_parse_url's copies, holding the strings below */
    const char *password, *username;
    unsigned db;
    const mg_node_t *db_at; /* the URL that named a db other than 0 */
} store_urls_t;

static void read_url(mg_config_loader_t *cl, const mg_node_t *node, store_urls_t *u)
{
    const char *s, *err, *password, *username;
    unsigned db;

    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    if (u->num == MAX_SERVERS) {
        mg_errors_add(cl->errs, node, "at most %d Redis servers", MAX_SERVERS);
        return;
    }
    if (mg_store_parse_url(s, &u->servers[u->num], &u->allocs[u->num], &password, &username, &db, &err) != 0) {
        mg_errors_add(cl->errs, node, "%s", err);
        return;
    }
    if (u->password == NULL)
        u->password = password;
    if (u->username == NULL)
        u->username = username;
    if (db != 0 && u->db_at == NULL) {
        u->db = db;
        u->db_at = node;
    }
    u->num++;
}

static void read_urls(mg_config_loader_t *cl, const mg_node_t *node, store_urls_t *u)
{
    if (node->kind == MG_NODE_SCALAR) {
        read_url(cl, node, u);
        return;
    }
    if (mg_node_expect(node, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    if (node->u.sequence.size == 0)
        mg_errors_add(cl->errs, node, "redis needs a URL or a list of Redis Cluster nodes");
    for (size_t i = 0; i < node->u.sequence.size; i++)
        read_url(cl, node->u.sequence.items[i], u);
}

/* "host:port, host:port" for /tenants and the log: never the password. */
static char *describe(const store_urls_t *u)
{
    size_t cap = u->num * (sizeof(u->servers[0].host) + 16) + 1, len = 0;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    out[0] = '\0';
    for (size_t i = 0; i < u->num; i++) {
        int colon = strchr(u->servers[i].host, ':') != NULL; /* an IPv6 address gets its brackets back */
        len += (size_t)snprintf(out + len, cap - len, "%sredis://%s%s%s:%u", i != 0 ? ", " : "", colon ? "[" : "",
                                u->servers[i].host, colon ? "]" : "", (unsigned)u->servers[i].port);
    }
    return out;
}

static void read_policy(mg_config_loader_t *cl, const mg_node_t *node, mg_tenants_store_t *ts)
{
    static const char *const names[] = {"local", "allow", "reject"};
    const char *s;

    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    for (int i = 0; i < 3; i++) {
        if (strcmp(s, names[i]) == 0) {
            ts->on_failure = (mg_store_policy_t)i;
            return;
        }
    }
    mg_errors_add(cl->errs, node, "on_failure must be local, allow or reject, not '%s'", s);
}

/* The optional string `key` of `map`, or `*out` unchanged. -1 after an error. */
static int read_str(mg_config_loader_t *cl, const mg_node_t *map, const char *key, const char **out)
{
    const mg_node_t *node = mg_node_get(map, key);
    return node == NULL ? 0 : mg_node_to_str(node, out, cl->errs);
}

/* Builds the store from what was read; its error (a key prefix with a brace, a db in Cluster
 * mode) goes to the node it comes from. */
static void make_store(mg_config_loader_t *cl, const mg_node_t *map, const store_urls_t *u, const char *password,
                       const char *prefix, mg_tenants_store_t *ts)
{
    const char *err;
    mg_store_conf_t sc = {.servers = u->servers,
                          .num_servers = u->num,
                          .cluster = u->num > 1,
                          .password = password != NULL ? password : u->password,
                          .username = u->username,
                          .db = u->db,
                          .timeout_us = ts->timeout_ms * 1000,
                          .key_prefix = prefix};
    if ((ts->store = mg_store_new(&sc, &err)) != NULL && (ts->redis = describe(u)) != NULL)
        return;
    const mg_node_t *at = mg_node_get(map, "redis");
    if (ts->store != NULL)
        err = "out of memory";
    else if (strchr(err, '{') != NULL || strstr(err, "key_prefix") != NULL)
        at = mg_node_get(map, "key_prefix");
    else if (u->db_at != NULL && strstr(err, "database") != NULL)
        at = u->db_at;
    mg_errors_add(cl->errs, at, "%s", err);
    mg__config_store_free(ts);
}

void mg__config_parse_store(mg_config_loader_t *cl, const mg_node_t *map, mg_tenants_store_t *ts)
{
    store_urls_t u = {.num = 0};
    const char *password = NULL, *prefix = "mg:";
    const mg_node_t *node;
    size_t errors = cl->errs->num_errors;

    ts->timeout_ms = MG_STORE_TIMEOUT_DEFAULT_MS;
    ts->nodes = 1;
    if (mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, store_keys, cl->errs);
    if ((node = mg_node_require(map, "redis", cl->errs)) != NULL)
        read_urls(cl, node, &u);
    read_str(cl, map, "password", &password);
    read_str(cl, map, "key_prefix", &prefix);
    mg__config_read_duration(cl, map, "timeout", 1, &ts->timeout_ms);
    if ((node = mg_node_get(map, "timeout")) != NULL && ts->timeout_ms > MG_STORE_TIMEOUT_MAX_MS)
        mg_errors_add(cl->errs, node, "timeout must be at most 10s");
    if ((node = mg_node_get(map, "on_failure")) != NULL)
        read_policy(cl, node, ts);
    mg__config_read_uint(cl, map, "nodes", 1, MG_STORE_NODES_MAX, &ts->nodes);
    if (cl->errs->num_errors == errors && u.num != 0)
        make_store(cl, map, &u, password, prefix, ts);
    for (size_t i = 0; i < u.num; i++)
        free(u.allocs[i]);
}

void mg__config_store_free(mg_tenants_store_t *ts)
{
    mg_store_free(ts->store);
    free(ts->redis);
    ts->store = NULL;
    ts->redis = NULL;
}
