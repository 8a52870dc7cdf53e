/*
 * The store's settings (shared by every worker, immutable), the redis:// URL, and the "local"
 * failure policy.
 */
#include <stdlib.h>
#include <string.h>
#include "throttle/store_internal.h"

static char *dup_or_null(const char *s)
{
    return s != NULL && s[0] != '\0' ? strdup(s) : NULL;
}

/* "host[:port]" or "[v6]:port" into addr; 0 or -1. */
static int parse_hostport(const char *s, size_t len, mg_store_addr_t *addr)
{
    const char *host = s, *colon = NULL;
    size_t host_len = len;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL)
            return -1;
        host = s + 1;
        host_len = (size_t)(close - host);
        colon = close + 1 < s + len ? close + 1 : NULL;
        if (colon != NULL && *colon != ':')
            return -1;
    } else if ((colon = memchr(s, ':', len)) != NULL) {
        host_len = (size_t)(colon - s);
    }
    if (host_len == 0 || host_len >= sizeof(addr->host))
        return -1;
    memcpy(addr->host, host, host_len);
    addr->host[host_len] = '\0';
    addr->port = 6379;
    if (colon != NULL) {
        unsigned long port = 0;
        size_t i = (size_t)(colon + 1 - s);
        if (i == len)
            return -1;
        for (; i < len; i++) {
            if (s[i] < '0' || s[i] > '9' || (port = port * 10 + (unsigned long)(s[i] - '0')) > 65535)
                return -1;
        }
        if (port == 0)
            return -1;
        addr->port = (uint16_t)port;
    }
    return 0;
}

static int parse_db(const char *s, unsigned *db)
{
    unsigned long v = 0;
    if (*s == '\0')
        return 0;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9' || (v = v * 10 + (unsigned long)(*s - '0')) > 1000000)
            return -1;
    *db = (unsigned)v;
    return 0;
}

/* The userinfo of the URL ("user:password" or ":password" or "password"), in place. */
static void parse_userinfo(char *info, const char **password, const char **username)
{
    char *colon = strchr(info, ':');
    if (colon == NULL) {
        *password = info;
        return;
    }
    *colon = '\0';
    if (info[0] != '\0')
        *username = info;
    *password = colon + 1;
}

int mg_store_parse_url(const char *url, mg_store_addr_t *addr, char **alloc, const char **password, const char **username,
                       unsigned *db, const char **err)
{
    static const char scheme[] = "redis://";
    *alloc = NULL;
    *password = *username = NULL;
    *db = 0;
    if (strncmp(url, scheme, sizeof(scheme) - 1) != 0) {
        *err = strncmp(url, "rediss://", 9) == 0 ? "rediss:// (TLS) is not supported: use redis:// on a trusted network"
                                                 : "a store URL starts with redis://";
        return -1;
    }
    char *copy = strdup(url + sizeof(scheme) - 1), *at, *slash;
    if (copy == NULL) {
        *err = "out of memory";
        return -1;
    }
    char *hostport = copy;
    /* the password may hold '@' and '/': the host starts after the last '@' */
    if ((at = strrchr(hostport, '@')) != NULL) {
        *at = '\0';
        parse_userinfo(hostport, password, username);
        hostport = at + 1;
    }
    if ((slash = strchr(hostport, '/')) != NULL)
        *slash = '\0';
    if (parse_hostport(hostport, strlen(hostport), addr) != 0) {
        *err = "a store URL is redis://[[user]:password@]host[:port][/db] with a port from 1 to 65535";
        goto Error;
    }
    if (slash != NULL && parse_db(slash + 1, db) != 0) {
        *err = "the database of a store URL is a number";
        goto Error;
    }
    *alloc = copy;
    return 0;
Error:
    free(copy);
    *password = *username = NULL;
    return -1;
}

static const char *conf_check(const mg_store_conf_t *conf)
{
    if (conf->num_servers == 0)
        return "the store needs a Redis server";
    for (size_t i = 0; i < conf->num_servers; i++)
        if (conf->servers[i].port == 0 || conf->servers[i].host[0] == '\0')
            return "a store server needs a host and a port";
    if (conf->timeout_us == 0)
        return "the store's timeout must be more than 0";
    if (conf->key_prefix != NULL && strpbrk(conf->key_prefix, "{}") != NULL)
        return "the store's key_prefix may not hold '{' or '}' (the store puts the hash tag there)";
    if ((conf->cluster || conf->num_servers > 1) && conf->db != 0)
        return "a Redis Cluster has database 0 only";
    return NULL;
}

mg_store_t *mg_store_new(const mg_store_conf_t *conf, const char **err)
{
    mg_store_t *s;
    if ((*err = conf_check(conf)) != NULL)
        return NULL;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        goto NoMemory;
    s->num_servers = conf->num_servers;
    s->cluster = conf->cluster || conf->num_servers > 1;
    s->db = conf->db;
    s->timeout_us = conf->timeout_us;
    s->servers = malloc(conf->num_servers * sizeof(*s->servers));
    s->key_prefix = strdup(conf->key_prefix != NULL ? conf->key_prefix : "");
    s->password = dup_or_null(conf->password);
    s->username = dup_or_null(conf->username);
    if (s->servers == NULL || s->key_prefix == NULL || (conf->password != NULL && conf->password[0] != '\0' && !s->password) ||
        (conf->username != NULL && conf->username[0] != '\0' && !s->username))
        goto NoMemory;
    memcpy(s->servers, conf->servers, conf->num_servers * sizeof(*s->servers));
    s->prefix_len = strlen(s->key_prefix);
    mg__store_script_sha(0, s->sha);
    return s;
NoMemory:
    mg_store_free(s);
    *err = "out of memory";
    return NULL;
}

void mg_store_free(mg_store_t *s)
{
    if (s == NULL)
        return;
    free(s->servers);
    free(s->key_prefix);
    free(s->password);
    free(s->username);
    free(s);
}

static int same_string(const char *a, const char *b)
{
    return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

int mg_store_same_servers(const mg_store_t *a, const mg_store_t *b)
{
    if (a->num_servers != b->num_servers || a->cluster != b->cluster || a->db != b->db)
        return 0;
    for (size_t i = 0; i < a->num_servers; i++)
        if (a->servers[i].port != b->servers[i].port || strcmp(a->servers[i].host, b->servers[i].host) != 0)
            return 0;
    return same_string(a->password, b->password) && same_string(a->username, b->username);
}

/* ---------------------------------------------------------------------------------------
 * The "local" policy.
 */
mg_quota_t mg_store_node_quota(mg_quota_t quota, unsigned nodes)
{
    if (nodes > 1)
        quota.requests /= nodes;
    return quota;
}

int mg_store_fallback_local(mg_throttle_t *local, const char *key, size_t len, mg_quota_t quota, unsigned nodes, uint64_t gen,
                            size_t max_keys, uint64_t now_us, mg_decision_t *d)
{
    mg_quota_t share = mg_store_node_quota(quota, nodes);
    if (share.requests == 0) {
        /* N < nodes: no share of N is safe; the fleet's promise comes before availability */
        memset(d, 0, sizeof(*d));
        d->retry_after_us = d->reset_us = 1000000;
        return 0;
    }
    return mg_throttle_acquire(local, key, len, share, gen, max_keys, now_us, d);
}
