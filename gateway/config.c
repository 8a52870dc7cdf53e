/*
 * The configuration file: read into nodes, checked all the way through (every error is
 * collected, not just the first) and copied into an mg_config_t, so that the YAML document
 * can be freed before the gateway starts.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gateway/gateway.h"

#define MG_MAX_WORKERS 256
#define MG_MAX_WEIGHT 100
#define MG_MAX_RETRIES 10

typedef struct config_loader {
    mg_config_t *conf;
    mg_errors_t *errs;
    char *dir; /* the configuration file's directory with a trailing '/', or "" */
} config_loader_t;

static const char *const top_keys[] = {"listen", "workers", "shutdown_timeout", "access_log", "limits", "backends", "routes", NULL};

/* ---------------------------------------------------------------------------------------
 * Small helpers
 */

static char *copy_str(config_loader_t *cl, const mg_node_t *at, const char *s)
{
    char *copy = strdup(s);
    if (copy == NULL)
        mg_errors_add(cl->errs, at, "out of memory");
    return copy;
}

/* Relative paths are taken from the configuration file's directory, not the current one, so
 * that `matchgate -c /etc/matchgate/gw.yaml` works from anywhere. */
static char *resolve_path(config_loader_t *cl, const mg_node_t *at, const char *path)
{
    char *full = NULL;

    if (path[0] == '/' || cl->dir[0] == '\0')
        return copy_str(cl, at, path);
    if (asprintf(&full, "%s%s", cl->dir, path) < 0) {
        mg_errors_add(cl->errs, at, "out of memory");
        return NULL;
    }
    return full;
}

static char *dir_of(const char *file)
{
    const char *slash = strrchr(file, '/');
    return strndup(file, slash != NULL ? (size_t)(slash - file) + 1 : 0);
}

/* Optional keys: the reader leaves the default in place when the key is absent or invalid. */
static void read_duration(config_loader_t *cl, const mg_node_t *map, const char *key, int positive, uint64_t *out)
{
    const mg_node_t *node = mg_node_get(map, key);
    uint64_t ms;

    if (node == NULL || mg_node_to_duration(node, &ms, cl->errs) != 0)
        return;
    if (positive && ms == 0) {
        mg_errors_add(cl->errs, node, "%s must be greater than 0", key);
        return;
    }
    *out = ms;
}

static void read_size(config_loader_t *cl, const mg_node_t *map, const char *key, uint64_t *out)
{
    const mg_node_t *node = mg_node_get(map, key);
    if (node != NULL)
        mg_node_to_size(node, out, cl->errs);
}

static void read_uint(config_loader_t *cl, const mg_node_t *map, const char *key, unsigned min, unsigned max, unsigned *out)
{
    const mg_node_t *node = mg_node_get(map, key);
    uint64_t v;

    if (node != NULL && mg_node_to_uint(node, min, max, &v, cl->errs) == 0)
        *out = (unsigned)v;
}

/* ---------------------------------------------------------------------------------------
 * Addresses
 */

static int parse_port(const char *s, uint16_t *port)
{
    unsigned long v = 0;
    size_t i = 0;

    for (; s[i] >= '0' && s[i] <= '9' && i < 5; i++)
        v = v * 10 + (unsigned long)(s[i] - '0');
    if (i == 0 || s[i] != '\0' || v < 1 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

static int parse_ipv6(const char *host, size_t len, uint16_t port, struct sockaddr_storage *ss, socklen_t *sslen)
{
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    char buf[INET6_ADDRSTRLEN];

    if (len < 2 || host[len - 1] != ']' || len - 2 >= sizeof(buf))
        return -1;
    memcpy(buf, host + 1, len - 2);
    buf[len - 2] = '\0';
    if (inet_pton(AF_INET6, buf, &sin6->sin6_addr) != 1)
        return -1;
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    *sslen = sizeof(*sin6);
    return 0;
}

static int parse_ipv4(const char *host, size_t len, uint16_t port, struct sockaddr_storage *ss, socklen_t *sslen)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    char buf[INET_ADDRSTRLEN];

    if (len == 0) {
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
    } else {
        if (len >= sizeof(buf))
            return -1;
        memcpy(buf, host, len);
        buf[len] = '\0';
        if (inet_pton(AF_INET, buf, &sin->sin_addr) != 1)
            return -1;
    }
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    *sslen = sizeof(*sin);
    return 0;
}

int mg_config_parse_address(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    const char *colon = strrchr(s, ':');
    uint16_t port;

    if (colon == NULL || parse_port(colon + 1, &port) != 0)
        return -1;
    memset(ss, 0, sizeof(*ss));
    if (s[0] == '[')
        return parse_ipv6(s, (size_t)(colon - s), port, ss, len);
    return parse_ipv4(s, (size_t)(colon - s), port, ss, len);
}

/* ---------------------------------------------------------------------------------------
 * listen
 */

static int check_readable(config_loader_t *cl, const mg_node_t *node, const char *what, char **out)
{
    const char *path;
    struct stat st;

    if (mg_node_to_str(node, &path, cl->errs) != 0 || (*out = resolve_path(cl, node, path)) == NULL)
        return -1;
    if (access(*out, R_OK) != 0 || stat(*out, &st) != 0) {
        mg_errors_add(cl->errs, node, "cannot read %s '%s': %s", what, *out, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        mg_errors_add(cl->errs, node, "cannot read %s '%s': not a regular file", what, *out);
        return -1;
    }
    return 0;
}

static void parse_tls(config_loader_t *cl, const mg_node_t *tls, mg_listen_conf_t *listener)
{
    static const char *const keys[] = {"certificate", "key", NULL};
    const mg_node_t *cert, *key;

    if (mg_node_expect(tls, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(tls, keys, cl->errs);
    if ((cert = mg_node_require(tls, "certificate", cl->errs)) != NULL)
        check_readable(cl, cert, "certificate", &listener->tls_certificate);
    if ((key = mg_node_require(tls, "key", cl->errs)) != NULL)
        check_readable(cl, key, "key", &listener->tls_key);
}

static int same_address(const mg_listen_conf_t *a, const mg_listen_conf_t *b)
{
    return a->addrlen == b->addrlen && memcmp(&a->addr, &b->addr, a->addrlen) == 0;
}

static void check_duplicate_listener(config_loader_t *cl, const mg_node_t *at, const mg_listen_conf_t *listener)
{
    for (size_t i = 0; i < cl->conf->num_listeners; i++) {
        if (same_address(&cl->conf->listeners[i], listener)) {
            mg_errors_add(cl->errs, at, "duplicate listen address '%s' (same as '%s')", listener->address,
                          cl->conf->listeners[i].address);
            return;
        }
    }
}

/* 0 when the address is valid (the listener is then kept even if its TLS files are not, so
 * that duplicates are still found); -1 otherwise. */
static int read_listener(config_loader_t *cl, const mg_node_t *item, mg_listen_conf_t *listener)
{
    static const char *const keys[] = {"address", "tls", NULL};
    const mg_node_t *address, *tls;
    const char *s;
    int ret = -1;

    if (mg_node_expect(item, MG_NODE_MAPPING, cl->errs) != 0)
        return -1;
    mg_node_check_keys(item, keys, cl->errs);
    if ((address = mg_node_require(item, "address", cl->errs)) != NULL && mg_node_to_str(address, &s, cl->errs) == 0) {
        if (mg_config_parse_address(s, &listener->addr, &listener->addrlen) != 0)
            mg_errors_add(cl->errs, address, "invalid address '%s' (expected e.g. 127.0.0.1:8080, [::1]:8080, :8080)", s);
        else if ((listener->address = copy_str(cl, address, s)) != NULL)
            ret = 0;
    }
    if ((tls = mg_node_get(item, "tls")) != NULL)
        parse_tls(cl, tls, listener);
    return ret;
}

static void parse_listener(config_loader_t *cl, const mg_node_t *item)
{
    mg_listen_conf_t listener = {0};

    if (read_listener(cl, item, &listener) != 0) {
        free(listener.tls_certificate);
        free(listener.tls_key);
        return;
    }
    check_duplicate_listener(cl, mg_node_get(item, "address"), &listener);
    cl->conf->listeners[cl->conf->num_listeners++] = listener;
}

static void parse_listen(config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *seq = mg_node_require(root, "listen", cl->errs);

    if (seq == NULL || mg_node_expect(seq, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    if (seq->u.sequence.size == 0) {
        mg_errors_add(cl->errs, seq, "at least one listener is required");
        return;
    }
    if ((cl->conf->listeners = calloc(seq->u.sequence.size, sizeof(*cl->conf->listeners))) == NULL) {
        mg_errors_add(cl->errs, seq, "out of memory");
        return;
    }
    for (size_t i = 0; i < seq->u.sequence.size; i++)
        parse_listener(cl, seq->u.sequence.items[i]);
}

/* ---------------------------------------------------------------------------------------
 * Process-wide settings and limits
 */

static unsigned default_workers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MG_MAX_WORKERS ? MG_MAX_WORKERS : (unsigned)n;
}

static void parse_access_log(config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *node = mg_node_get(root, "access_log");
    const char *s;

    if (node == NULL || mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    if (s[0] == '\0') {
        mg_errors_add(cl->errs, node, "access_log must be a file path or \"-\" (stdout)");
        return;
    }
    cl->conf->access_log = strcmp(s, "-") == 0 ? copy_str(cl, node, s) : resolve_path(cl, node, s);
}

/*
 * limits. max_http2_streams is our extension to the documented keys: it caps the concurrent
 * streams of one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS), so that one client
 * cannot hold more in-flight backend requests than this.
 */
static void parse_limits(config_loader_t *cl, const mg_node_t *root)
{
    static const char *const keys[] = {"max_request_body", "max_header_size", "client_idle_timeout", "max_http2_streams", NULL};
    const mg_node_t *limits = mg_node_get(root, "limits");
    mg_limits_conf_t *l = &cl->conf->limits;

    if (limits == NULL || mg_node_expect(limits, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(limits, keys, cl->errs);
    read_size(cl, limits, "max_request_body", &l->max_request_body);
    read_size(cl, limits, "max_header_size", &l->max_header_size);
    read_duration(cl, limits, "client_idle_timeout", 1, &l->client_idle_timeout_ms);
    read_uint(cl, limits, "max_http2_streams", 1, 256, &l->max_http2_streams);
}

static void parse_globals(config_loader_t *cl, const mg_node_t *root)
{
    read_uint(cl, root, "workers", 1, MG_MAX_WORKERS, &cl->conf->workers);
    read_duration(cl, root, "shutdown_timeout", 0, &cl->conf->shutdown_timeout_ms);
    parse_access_log(cl, root);
    parse_limits(cl, root);
}

/* ---------------------------------------------------------------------------------------
 * Backend servers
 */

static int is_host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

/* Skips the host of an "http://" URL; NULL with `*why` set when there is none. */
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

/* NULL when `url` is "http://host:port[/prefix]", else what is wrong with it. */
static const char *check_server_url(const char *url)
{
    const char *why = NULL, *p = skip_host(url + strlen("http://"), &why);
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
    if (parse_port(digits, &port) != 0 || (p[n] != '\0' && p[n] != '/'))
        return "invalid port";
    if (strpbrk(p + n, "?# \t\r\n") != NULL)
        return "query strings, fragments and spaces are not allowed";
    return NULL;
}

/* The prefix is joined to request paths, which start with '/': a trailing '/' would double it. */
static char *normalize_url(config_loader_t *cl, const mg_node_t *at, const char *url)
{
    char *copy = copy_str(cl, at, url);
    size_t len = copy != NULL ? strlen(copy) : 0;

    while (len > 0 && copy[len - 1] == '/')
        copy[--len] = '\0';
    return copy;
}

/* Returns the normalized URL (caller frees) or NULL after recording an error. */
static char *read_server_url(config_loader_t *cl, const mg_node_t *node)
{
    const char *url, *why;

    if (mg_node_to_str(node, &url, cl->errs) != 0)
        return NULL;
    if (strncmp(url, "https://", 8) == 0) {
        mg_errors_add(cl->errs, node, "https backends are not supported yet");
        return NULL;
    }
    if (strncmp(url, "http://", 7) != 0) {
        mg_errors_add(cl->errs, node, "invalid server url '%s' (expected http://host:port[/prefix])", url);
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

static void parse_server(config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *item)
{
    static const char *const keys[] = {"url", "weight", NULL};
    const mg_node_t *url = item;
    unsigned weight = 1;
    char *normalized;

    if (item->kind == MG_NODE_MAPPING) {
        mg_node_check_keys(item, keys, cl->errs);
        read_uint(cl, item, "weight", 1, MG_MAX_WEIGHT, &weight);
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
    backend->servers[backend->num_servers++] = (mg_server_conf_t){normalized, weight};
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

static void parse_servers(config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
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
static const char *const balance_names[] = {"round_robin", "primary_for_writes", "first_available", NULL};

static void parse_balance(config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
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
        mg_errors_add(cl->errs, node, "unknown balance '%s' (expected round_robin, primary_for_writes or first_available)", s);
}

/* The primary is named by URL, so it must match one of the servers after normalization. */
static void parse_primary(config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
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
    if (backend->num_servers != 0 && find_server(backend, backend->primary) < 0)
        mg_errors_add(cl->errs, node, "primary '%s' is not one of the backend's servers", s);
}

static void parse_backend(config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *key, const mg_node_t *map)
{
    static const char *const keys[] = {"servers", "balance", "primary", "connect_timeout", "timeout", "retries", NULL};

    /* Named even when invalid, so that routes using it do not add "unknown backend" noise. */
    backend->name = copy_str(cl, key, key->u.scalar.str);
    backend->connect_timeout_ms = 2000;
    backend->timeout_ms = 30000;
    backend->retries = 1;
    if (key->u.scalar.len == 0)
        mg_errors_add(cl->errs, key, "backend names must not be empty");
    if (mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, keys, cl->errs);
    parse_servers(cl, backend, map);
    parse_balance(cl, backend, map);
    parse_primary(cl, backend, map);
    read_duration(cl, map, "connect_timeout", 1, &backend->connect_timeout_ms);
    read_duration(cl, map, "timeout", 1, &backend->timeout_ms);
    read_uint(cl, map, "retries", 0, MG_MAX_RETRIES, &backend->retries);
}

static void parse_backends(config_loader_t *cl, const mg_node_t *root)
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

/* ---------------------------------------------------------------------------------------
 * Routes
 */

/* The first backend of that name: a duplicate name is already an error of its own. */
static void *resolve_backend(void *arg, const char *name)
{
    mg_config_t *conf = arg;

    for (size_t i = 0; i < conf->num_backends; i++)
        if (conf->backends[i].name != NULL && strcmp(conf->backends[i].name, name) == 0)
            return &conf->backends[i];
    return NULL;
}

static void parse_routes(config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *seq = mg_node_require(root, "routes", cl->errs);
    size_t before = cl->errs->num_errors;

    if (seq == NULL)
        return;
    cl->conf->routes = mg_routes_compile(seq, resolve_backend, cl->conf, cl->errs);
    if (cl->conf->routes == NULL && cl->errs->num_errors == before)
        mg_errors_add(cl->errs, seq, "invalid routes");
}

/* ---------------------------------------------------------------------------------------
 * Loading
 */

static mg_config_t *config_new(const char *file)
{
    mg_config_t *conf = calloc(1, sizeof(*conf));

    if (conf == NULL || (conf->file = strdup(file)) == NULL) {
        free(conf);
        return NULL;
    }
    conf->workers = default_workers();
    conf->shutdown_timeout_ms = 10000;
    conf->limits.max_request_body = UINT64_C(10) << 20;
    conf->limits.max_header_size = UINT64_C(64) << 10;
    conf->limits.client_idle_timeout_ms = 60000;
    conf->limits.max_http2_streams = 100;
    return conf;
}

/* Every section is read even after an error, so one run of --check shows every problem. */
static void config_read(config_loader_t *cl, const mg_node_t *root)
{
    if (mg_node_expect(root, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(root, top_keys, cl->errs);
    parse_listen(cl, root);
    parse_globals(cl, root);
    parse_backends(cl, root);
    parse_routes(cl, root);
}

static mg_config_t *config_from_doc(const char *file, mg_doc_t *doc, mg_errors_t *errs)
{
    config_loader_t cl = {.errs = errs, .conf = config_new(file), .dir = dir_of(file)};
    size_t before = errs->num_errors;

    if (cl.conf == NULL || cl.dir == NULL) {
        mg_errors_add(errs, NULL, "%s: out of memory", file);
        goto Exit;
    }
    config_read(&cl, mg_doc_root(doc));
Exit:
    if (errs->num_errors != before) {
        mg_config_free(cl.conf);
        cl.conf = NULL;
    }
    free(cl.dir);
    return cl.conf;
}

mg_config_t *mg_config_load(const char *file, mg_errors_t *errs)
{
    mg_doc_t *doc = mg_doc_load_file(file, errs);
    mg_config_t *conf;

    if (doc == NULL)
        return NULL;
    conf = config_from_doc(file, doc, errs);
    mg_doc_free(doc);
    return conf;
}

mg_config_t *mg_config_load_string(const char *name, const char *text, mg_errors_t *errs)
{
    mg_doc_t *doc = mg_doc_load_string(name, text, strlen(text), errs);
    mg_config_t *conf;

    if (doc == NULL)
        return NULL;
    conf = config_from_doc(name, doc, errs);
    mg_doc_free(doc);
    return conf;
}

static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

void mg_config_summary(const mg_config_t *conf, char *buf, size_t size)
{
    size_t routes = conf->routes != NULL ? mg_routes_count(conf->routes) : 0;

    snprintf(buf, size, "%s: ok (%zu listener%s, %zu backend%s, %zu route%s, %u worker%s)", conf->file, conf->num_listeners,
             plural(conf->num_listeners), conf->num_backends, plural(conf->num_backends), routes, plural(routes), conf->workers,
             plural(conf->workers));
}

static void backend_free(mg_backend_conf_t *backend)
{
    for (size_t i = 0; i < backend->num_servers; i++)
        free(backend->servers[i].url);
    free(backend->servers);
    free(backend->schedule);
    free(backend->primary);
    free(backend->name);
}

void mg_config_free(mg_config_t *conf)
{
    if (conf == NULL)
        return;
    for (size_t i = 0; i < conf->num_listeners; i++) {
        free(conf->listeners[i].address);
        free(conf->listeners[i].tls_certificate);
        free(conf->listeners[i].tls_key);
    }
    free(conf->listeners);
    for (size_t i = 0; i < conf->num_backends; i++)
        backend_free(&conf->backends[i]);
    free(conf->backends);
    if (conf->routes != NULL)
        mg_routes_free(conf->routes);
    free(conf->access_log);
    free(conf->file);
    free(conf);
}
