/*
 * The `backends:` section of the configuration file: each backend's servers (URLs and
 * weights, expanded into a smooth weighted round-robin schedule), balance (the hash ring),
 * primary, timeouts and retries, and what its scheduler gets: max_in_flight, queue_timeout and
 * max_queued_per_key. Health, retry rules and slow start: backend_health.c; transport: backend_tls.c.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/config/internal.h"

#define MG_MAX_WEIGHT 100
#define MG_MAX_RETRIES 10
#define MG_MAX_IN_FLIGHT 1000000
/* The client a backend gets without http_client (the builtin one once it passes everything). */
#define MG_HTTP_CLIENT_DEFAULT MG_HTTP_CLIENT_BUILTIN

/* ---------------------------------------------------------------------------------------
 * Backend servers
 */

static int is_host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

/* Skips the host of a server URL (after "://"); NULL with `*why` set when there is none. */
static const char *skip_host(const char *p, const char **why)
{
    const char *start = p;

    if (*p == '[') {
        p = strchr(p, ']');
        if (p == NULL) {
            *why = "unterminated IPv6 address";
            return NULL;
        }
        return p + 1;
    }
    while (is_host_char(*p))
        p++;
    *why = p == start ? "missing host" : NULL;
    return p == start ? NULL : p;
}

/* NULL when `url` is "http[s]://host:port[/prefix]", else what is wrong with it. */
static const char *check_server_url(const char *url)
{
    const char *why = NULL, *p = skip_host(strstr(url, "://") + 3, &why);
    uint16_t port;
    char digits[6];
    size_t n;

    if (p == NULL)
        return why;
    if (*p != ':')
        return *p == '\0' || *p == '/' ? "missing port" : "invalid character in host";
    n = strspn(++p, "0123456789");
    if (n == 0 || n >= sizeof(digits))
        return "invalid port";
    memcpy(digits, p, n);
    digits[n] = '\0';
    if (mg__config_parse_port(digits, &port) != 0 || (p[n] != '\0' && p[n] != '/'))
        return "invalid port";
    if (strpbrk(p + n, "?# \t\r\n") != NULL)
        return "query strings, fragments and spaces are not allowed";
    return NULL;
}

/* The prefix is joined to request paths, which start with '/': a trailing '/' would double it. */
static char *normalize_url(mg_config_loader_t *cl, const mg_node_t *at, const char *url)
{
    char *copy = mg__config_copy_str(cl, at, url);
    size_t len = copy != NULL ? strlen(copy) : 0;

    while (len > 0 && copy[len - 1] == '/')
        copy[--len] = '\0';
    return copy;
}

/* Returns the normalized URL (caller frees) or NULL after recording an error. */
static char *read_server_url(mg_config_loader_t *cl, const mg_node_t *node)
{
    const char *url, *why;

    if (mg_node_to_str(node, &url, cl->errs) != 0)
        return NULL;
    if (strncmp(url, "ws://", 5) == 0) {
        /* a WebSocket server is an HTTP server that accepts upgrades: one spelling inside */
        char *http = NULL;
        if (asprintf(&http, "http://%s", url + 5) < 0)
            return NULL;
        if ((why = check_server_url(http)) != NULL)
            mg_errors_add(cl->errs, node, "invalid server url '%s': %s", url, why);
        char *normalized = why == NULL ? normalize_url(cl, node, http) : NULL;
        free(http);
        return normalized;
    }
    if (strncmp(url, "wss://", 6) == 0) {
        /* the tunnel speaks plain TCP to its servers (docs/websocket.md) */
        mg_errors_add(cl->errs, node,
                      "wss:// servers are not supported: WebSocket tunnels to backends do not speak TLS (use ws://)");
        return NULL;
    }
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        mg_errors_add(cl->errs, node, "invalid server url '%s' (expected http://, https:// or ws://host:port[/prefix])", url);
        return NULL;
    }
    if ((why = check_server_url(url)) != NULL) {
        mg_errors_add(cl->errs, node, "invalid server url '%s': %s", url, why);
        return NULL;
    }
    return normalize_url(cl, node, url);
}

static int find_server(const mg_backend_conf_t *backend, const char *url)
{
    for (size_t i = 0; i < backend->num_servers; i++)
        if (strcmp(backend->servers[i].url, url) == 0)
            return (int)i;
    return -1;
}

static void parse_server(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *item)
{
    static const char *const keys[] = {"url", "weight", NULL};
    const mg_node_t *url = item;
    unsigned weight = 1;
    char *normalized;

    if (item->kind == MG_NODE_MAPPING) {
        mg_node_check_keys(item, keys, cl->errs);
        mg__config_read_uint(cl, item, "weight", 1, MG_MAX_WEIGHT, &weight);
        if ((url = mg_node_require(item, "url", cl->errs)) == NULL)
            return;
    }
    if ((normalized = read_server_url(cl, url)) == NULL)
        return;
    if (find_server(backend, normalized) >= 0) {
        mg_errors_add(cl->errs, url, "duplicate server '%s' (use weight to send it more traffic)", normalized);
        free(normalized);
        return;
    }
    backend->servers[backend->num_servers++] = (mg_server_conf_t){.url = normalized, .weight = weight, .backend = backend};
}

/*
 * Smooth weighted round robin (nginx's): every step each server gains its weight, the richest
 * is picked and pays the total. Weights 5,1,1 give a a b a c a a rather than a a a a a b c,
 * so a heavy server never gets a burst.
 */
static int build_schedule(mg_backend_conf_t *backend)
{
    size_t total = 0;
    long *current = calloc(backend->num_servers, sizeof(*current));

    for (size_t i = 0; i < backend->num_servers; i++)
        total += backend->servers[i].weight;
    if (current == NULL || (backend->schedule = calloc(total, sizeof(*backend->schedule))) == NULL) {
        free(current);
        return -1;
    }
    for (size_t step = 0; step < total; step++) {
        size_t best = 0;
        for (size_t i = 0; i < backend->num_servers; i++) {
            current[i] += backend->servers[i].weight;
            if (current[i] > current[best])
                best = i;
        }
        current[best] -= (long)total;
        backend->schedule[step] = best;
    }
    backend->schedule_len = total;
    free(current);
    return 0;
}

static void parse_servers(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    const mg_node_t *seq = mg_node_require(map, "servers", cl->errs);

    if (seq == NULL || mg_node_expect(seq, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    if (seq->u.sequence.size == 0) {
        mg_errors_add(cl->errs, seq, "a backend needs at least one server");
        return;
    }
    if ((backend->servers = calloc(seq->u.sequence.size, sizeof(*backend->servers))) == NULL) {
        mg_errors_add(cl->errs, seq, "out of memory");
        return;
    }
    for (size_t i = 0; i < seq->u.sequence.size; i++)
        parse_server(cl, backend, seq->u.sequence.items[i]);
    if (backend->num_servers != 0 && build_schedule(backend) != 0)
        mg_errors_add(cl->errs, seq, "out of memory");
}

/* ---------------------------------------------------------------------------------------
 * Backends
 */

/* In the order of mg_balance_t. */
static const char *const balance_names[] = {"round_robin", "primary_for_writes", "first_available", "least_request", "hash", NULL};

/* FNV-1a, then splitmix64's finalizer: FNV alone leaves neighbouring keys ("t1", "t2") close. */
uint64_t mg_ring_hash(const char *data, size_t len, uint64_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)data[i]) * 1099511628211ull;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

static int ring_cmp(const void *a, const void *b)
{
    const mg_ring_point_t *x = a, *y = b;
    return x->point < y->point ? -1 : x->point > y->point;
}

/* A server's points depend on its URL only, not on its place in the list or on the others: so
 * adding or removing a server moves only the keys that land on its points. */
int mg_backend_build_ring(mg_backend_conf_t *b)
{
    size_t n = 0;
    for (size_t i = 0; i < b->num_servers; i++)
        n += (size_t)MG_RING_VNODES * b->servers[i].weight;
    mg_ring_point_t *ring = calloc(n != 0 ? n : 1, sizeof(*ring));
    if (ring == NULL)
        return -1;
    n = 0;
    for (size_t i = 0; i < b->num_servers; i++)
        for (size_t v = 0; v < (size_t)MG_RING_VNODES * b->servers[i].weight; v++)
            ring[n++] = (mg_ring_point_t){mg_ring_hash(b->servers[i].url, strlen(b->servers[i].url), v), i};
    qsort(ring, n, sizeof(*ring), ring_cmp);
    free(b->ring);
    b->ring = ring;
    b->ring_len = n;
    return 0;
}

/* Captures are the route's: a backend's key may only use what every request has. */
static int knows_no_capture(void *arg, mg_str_t name)
{
    return 0;
}

static void parse_hash_key(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    const mg_node_t *node = mg_node_get(map, "hash_key");
    if (backend->balance != MG_BALANCE_HASH) {
        if (node != NULL)
            mg_errors_add(cl->errs, node, "hash_key is only used with balance: hash");
        return;
    }
    if (node == NULL) {
        mg_errors_add(cl->errs, map, "missing key 'hash_key' (required by balance: hash)");
        return;
    }
    if (node->kind != MG_NODE_SCALAR) {
        mg_node_expect(node, MG_NODE_SCALAR, cl->errs);
        return;
    }
    backend->hash_key = mg_template_compile(node, MG_TARGET_HEADER, knows_no_capture, NULL, cl->errs);
    if (backend->hash_key != NULL && backend->num_servers != 0 && mg_backend_build_ring(backend) != 0)
        mg_errors_add(cl->errs, node, "out of memory");
}

const char *mg_balance_name(mg_balance_t balance)
{
    return balance_names[balance];
}

static void parse_balance(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    const mg_node_t *node = mg_node_get(map, "balance");
    const char *s, *guess;

    if (node == NULL || mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    for (size_t i = 0; balance_names[i] != NULL; i++) {
        if (strcmp(s, balance_names[i]) == 0) {
            backend->balance = (mg_balance_t)i;
            return;
        }
    }
    if ((guess = mg_closest_word(s, balance_names)) != NULL)
        mg_errors_add(cl->errs, node, "unknown balance '%s' (did you mean '%s'?)", s, guess);
    else
        mg_errors_add(cl->errs, node,
                      "unknown balance '%s' (expected round_robin, primary_for_writes, first_available, least_request or hash)", s);
}

/* The primary is named by URL, so it must match one of the servers after normalization. */
static void parse_primary(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    const mg_node_t *node = mg_node_get(map, "primary");
    const char *s;

    if (backend->balance != MG_BALANCE_PRIMARY_FOR_WRITES) {
        if (node != NULL)
            mg_errors_add(cl->errs, node, "primary is only used with balance: primary_for_writes");
        return;
    }
    if (node == NULL) {
        mg_errors_add(cl->errs, map, "missing key 'primary' (required by balance: primary_for_writes)");
        return;
    }
    if (mg_node_to_str(node, &s, cl->errs) != 0 || (backend->primary = normalize_url(cl, node, s)) == NULL)
        return;
    int index = backend->num_servers != 0 ? find_server(backend, backend->primary) : -1;
    if (index < 0)
        mg_errors_add(cl->errs, node, "primary '%s' is not one of the backend's servers", s);
    else
        backend->primary_index = (size_t)index;
}

/* In the order of mg_http_client_t. */
static const char *const http_client_names[] = {"builtin", "libcurl", NULL};

static void parse_http_client(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    const mg_node_t *node = mg_node_get(map, "http_client");
    const char *s;

    if (node == NULL || mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    for (size_t i = 0; http_client_names[i] != NULL; i++) {
        if (strcmp(s, http_client_names[i]) == 0) {
            backend->http_client = (mg_http_client_t)i;
            return;
        }
    }
    mg_errors_add(cl->errs, node, "unknown http_client '%s' (expected builtin or libcurl)", s);
}

static void parse_backend(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *key, const mg_node_t *map)
{
    static const char *const keys[] = {"servers",
                                       "balance",
                                       "primary",
                                       "connect_timeout",
                                       "timeout",
                                       "retries",
                                       "max_in_flight",
                                       "queue_timeout",
                                       "max_queued_per_key",
                                       "protocol",
                                       "tls",
                                       "http_client",
                                       "keepalive_timeout",
                                       "max_idle_connections",
                                       "dns_refresh",
                                       "outlier",
                                       "panic",
                                       "health",
                                       "hash_key",
                                       "retry_on",
                                       "retry_budget",
                                       "retry_backoff",
                                       "slow_start",
                                       NULL};

    /* Named even when invalid, so that routes using it do not add "unknown backend" noise. */
    backend->name = mg__config_copy_str(cl, key, key->u.scalar.str);
    backend->connect_timeout_ms = 2000;
    backend->timeout_ms = 30000;
    backend->retries = 1;
    backend->max_in_flight = 0;
    backend->queue_timeout_ms = 5000;
    backend->max_queued_per_key = 100;
    backend->http_client = MG_HTTP_CLIENT_DEFAULT;
    backend->keepalive_timeout_ms = 50000;
    backend->max_idle_connections = 1024;
    backend->dns_refresh_ms = 30000;
    if (key->u.scalar.len == 0)
        mg_errors_add(cl->errs, key, "backend names must not be empty");
    if (mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, keys, cl->errs);
    parse_servers(cl, backend, map);
    mg__config_parse_backend_transport(cl, backend, map);
    parse_balance(cl, backend, map);
    parse_primary(cl, backend, map);
    parse_hash_key(cl, backend, map);
    mg__config_read_duration(cl, map, "connect_timeout", 1, &backend->connect_timeout_ms);
    mg__config_read_duration(cl, map, "timeout", 1, &backend->timeout_ms);
    mg__config_read_uint(cl, map, "retries", 0, MG_MAX_RETRIES, &backend->retries);
    mg__config_read_uint(cl, map, "max_in_flight", 0, MG_MAX_IN_FLIGHT, &backend->max_in_flight);
    mg__config_read_duration(cl, map, "queue_timeout", 1, &backend->queue_timeout_ms);
    mg__config_read_uint(cl, map, "max_queued_per_key", 0, MG_MAX_IN_FLIGHT, &backend->max_queued_per_key);
    parse_http_client(cl, backend, map);
    mg__config_read_duration(cl, map, "keepalive_timeout", 1, &backend->keepalive_timeout_ms);
    mg__config_read_uint(cl, map, "max_idle_connections", 0, MG_MAX_IN_FLIGHT, &backend->max_idle_connections);
    mg__config_read_duration(cl, map, "dns_refresh", 1, &backend->dns_refresh_ms);
    mg__config_parse_backend_health(cl, backend, map);
}

void mg__config_parse_backends(mg_config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *map = mg_node_get(root, "backends");
    mg_config_t *conf = cl->conf;

    if (map == NULL || mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0 || map->u.mapping.size == 0)
        return;
    mg_node_check_keys(map, NULL, cl->errs);
    if ((conf->backends = calloc(map->u.mapping.size, sizeof(*conf->backends))) == NULL) {
        mg_errors_add(cl->errs, map, "out of memory");
        return;
    }
    for (size_t i = 0; i < map->u.mapping.size; i++) {
        mg_backend_conf_t *backend = &conf->backends[conf->num_backends++];
        atomic_init(&backend->next, 0);
        parse_backend(cl, backend, map->u.mapping.pairs[i].key, map->u.mapping.pairs[i].value);
    }
}

void mg__config_backend_free(mg_backend_conf_t *backend)
{
    for (size_t i = 0; i < backend->num_servers; i++)
        free(backend->servers[i].url);
    free(backend->servers);
    free(backend->schedule);
    free(backend->primary);
    free(backend->name);
    mg__config_backend_tls_free(&backend->tls);
    free(backend->health.path);
    free(backend->health.host);
    for (size_t i = 0; i < backend->health.num_headers; i++)
        free(backend->health.headers[i]);
    free(backend->health.headers);
    mg_template_free(backend->hash_key);
    free(backend->ring);
}
