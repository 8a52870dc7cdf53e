/*
 * The configuration file: read into nodes, checked all the way through (every error is
 * collected, not just the first) and copied into an mg_config_t, so that the YAML document
 * can be freed before the gateway starts.
 *
 * This file has the top level, process-wide settings, limits and routes; `listen:` is read in
 * listen.c, `backends:` in backends.c, `tenants:` in tenants.c, `admin:` in admin.c and the
 * connection bounds of `limits:` in limits.c; reload.c loads the file again for a reload.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gateway/config/internal.h"

#define MG_MAX_WORKERS 256

static const char *const top_keys[] = {"listen", "workers", "shutdown_timeout", "access_log", "limits", "backends", "tenants",
                                       "routes", "admin",   "websocket",        "reload",     "auth",   "compress", NULL};

/* ---------------------------------------------------------------------------------------
 * Small helpers
 */

char *mg__config_copy_str(mg_config_loader_t *cl, const mg_node_t *at, const char *s)
{
    char *copy = strdup(s);
    if (copy == NULL)
        mg_errors_add(cl->errs, at, "out of memory");
    return copy;
}

/* Relative paths are taken from the configuration file's directory, not the current one, so
 * that `matchgate -c /etc/matchgate/gw.yaml` works from anywhere. */
char *mg__config_resolve_path(mg_config_loader_t *cl, const mg_node_t *at, const char *path)
{
    char *full = NULL;

    if (path[0] == '/' || cl->dir[0] == '\0')
        return mg__config_copy_str(cl, at, path);
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
void mg__config_read_duration(mg_config_loader_t *cl, const mg_node_t *map, const char *key, int positive, uint64_t *out)
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

static void read_size(mg_config_loader_t *cl, const mg_node_t *map, const char *key, uint64_t *out)
{
    const mg_node_t *node = mg_node_get(map, key);
    if (node != NULL)
        mg_node_to_size(node, out, cl->errs);
}

void mg__config_read_uint(mg_config_loader_t *cl, const mg_node_t *map, const char *key, unsigned min, unsigned max, unsigned *out)
{
    const mg_node_t *node = mg_node_get(map, key);
    uint64_t v;

    if (node != NULL && mg_node_to_uint(node, min, max, &v, cl->errs) == 0)
        *out = (unsigned)v;
}

/* ---------------------------------------------------------------------------------------
 * Process-wide settings and limits
 */

static unsigned default_workers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MG_MAX_WORKERS ? MG_MAX_WORKERS : (unsigned)n;
}

/* access_log.fields: header names, at most MG_ACCESS_LOG_MAX_FIELDS, stored lower case. */
static void parse_access_log_fields(mg_config_loader_t *cl, const mg_node_t *seq)
{
    mg_config_t *conf = cl->conf;
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    if (seq->u.sequence.size > MG_ACCESS_LOG_MAX_FIELDS) {
        mg_errors_add(cl->errs, seq, "at most %d fields", MG_ACCESS_LOG_MAX_FIELDS);
        return;
    }
    conf->access_log_fields = calloc(seq->u.sequence.size + 1, sizeof(*conf->access_log_fields));
    for (size_t i = 0; conf->access_log_fields != NULL && i < seq->u.sequence.size; i++) {
        const char *name;
        const mg_node_t *item = seq->u.sequence.items[i];
        if (mg_node_to_str(item, &name, cl->errs) != 0)
            continue;
        if (!mg_is_token(name, strlen(name)) || strlen(name) > 64) {
            mg_errors_add(cl->errs, item, "invalid header name '%s' (a token of at most 64 characters)", name);
            continue;
        }
        char *copy = mg__config_copy_str(cl, item, name);
        for (char *p = copy; p != NULL && *p != '\0'; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        conf->access_log_fields[conf->num_access_log_fields++] = copy;
    }
}

/* access_log: "PATH" | "-" | {path, format: json | combined, fields: [Header, ...]}. */
static void parse_access_log_map(mg_config_loader_t *cl, const mg_node_t *map, const mg_node_t **path)
{
    static const char *const keys[] = {"path", "format", "fields", NULL};
    static const char *const formats[] = {"json", "combined", NULL};
    const mg_node_t *format = mg_node_get(map, "format"), *fields = mg_node_get(map, "fields");
    const char *s, *guess;

    mg_node_check_keys(map, keys, cl->errs);
    *path = mg_node_require(map, "path", cl->errs);
    if (fields != NULL)
        parse_access_log_fields(cl, fields);
    if (format == NULL || mg_node_to_str(format, &s, cl->errs) != 0)
        return;
    if (strcmp(s, "json") == 0 || strcmp(s, "combined") == 0)
        cl->conf->access_log_combined = strcmp(s, "combined") == 0;
    else if ((guess = mg_closest_word(s, formats)) != NULL)
        mg_errors_add(cl->errs, format, "unknown format '%s' (did you mean '%s'?)", s, guess);
    else
        mg_errors_add(cl->errs, format, "unknown format '%s' (expected json or combined)", s);
}

static void parse_access_log(mg_config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *node = mg_node_get(root, "access_log");
    const char *s;

    if (node != NULL && node->kind == MG_NODE_MAPPING)
        parse_access_log_map(cl, node, &node);
    if (node == NULL || mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    if (s[0] == '\0') {
        mg_errors_add(cl->errs, node, "access_log must be a file path or \"-\" (stdout)");
        return;
    }
    cl->conf->access_log = strcmp(s, "-") == 0 ? mg__config_copy_str(cl, node, s) : mg__config_resolve_path(cl, node, s);
}

/* limits.escaped_slashes: reject | keep (see docs/configuration.md, "Paths"). */
static void parse_escaped_slashes(mg_config_loader_t *cl, const mg_node_t *limits, mg_limits_conf_t *l)
{
    static const char *const names[] = {"reject", "keep", NULL};
    const mg_node_t *node = mg_node_get(limits, "escaped_slashes");
    const char *s, *guess;

    if (node == NULL || mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    if (strcmp(s, "reject") == 0 || strcmp(s, "keep") == 0) {
        l->keep_escaped_slashes = strcmp(s, "keep") == 0;
        return;
    }
    if ((guess = mg_closest_word(s, names)) != NULL)
        mg_errors_add(cl->errs, node, "unknown escaped_slashes '%s' (did you mean '%s'?)", s, guess);
    else
        mg_errors_add(cl->errs, node, "unknown escaped_slashes '%s' (expected reject or keep)", s);
}

/*
 * limits. max_http2_streams is our extension to the documented keys: it caps how many requests
 * of one HTTP/2 connection the gateway processes at once (h2o's
 * max_concurrent_requests_per_connection); further streams wait inside the gateway, so one
 * client cannot hold more in-flight backend requests than this. It does not change what is
 * advertised: h2o 2.2.5 always sends SETTINGS_MAX_CONCURRENT_STREAMS 100.
 */
static void parse_limits(mg_config_loader_t *cl, const mg_node_t *root)
{
    static const char *const keys[] = {"max_request_body",
                                       "max_header_size",
                                       "client_idle_timeout",
                                       "max_http2_streams",
                                       "max_requests_per_connection_per_second",
                                       "escaped_slashes",
                                       "tls_handshake_timeout",
                                       "max_connections",
                                       "max_connections_per_client",
                                       "client_header_timeout",
                                       "max_buffered_request_bytes",
                                       "auth_cache_entries",
                                       "max_requests_per_connection",
                                       NULL};
    const mg_node_t *limits = mg_node_get(root, "limits");
    mg_limits_conf_t *l = &cl->conf->limits;

    if (limits == NULL || mg_node_expect(limits, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(limits, keys, cl->errs);
    read_size(cl, limits, "max_request_body", &l->max_request_body);
    read_size(cl, limits, "max_header_size", &l->max_header_size);
    mg__config_read_duration(cl, limits, "client_idle_timeout", 1, &l->client_idle_timeout_ms);
    mg__config_read_duration(cl, limits, "tls_handshake_timeout", 1, &l->tls_handshake_timeout_ms);
    mg__config_read_uint(cl, limits, "max_http2_streams", 1, 256, &l->max_http2_streams);
    mg__config_read_uint(cl, limits, "max_requests_per_connection_per_second", 0, 10000000,
                         &l->max_requests_per_connection_per_second);
    parse_escaped_slashes(cl, limits, l);
    mg__config_read_uint(cl, limits, "auth_cache_entries", 0, 10000000, &l->auth_cache_entries);
    mg__config_read_uint(cl, limits, "max_requests_per_connection", 0, 100000000, &l->max_requests_per_connection);
    mg__config_parse_connection_limits(cl, limits); /* limits.c */
}

/* websocket: our extension (the contract names no keys for it); see docs/websocket.md. */
static void parse_websocket(mg_config_loader_t *cl, const mg_node_t *root)
{
    static const char *const keys[] = {
        "idle_timeout", "ping_interval", "close_timeout", "max_message_size", "max_queued_messages", "on_token_expiry", NULL};
    const mg_node_t *expiry;
    const mg_node_t *ws = mg_node_get(root, "websocket");
    mg_websocket_conf_t *c = &cl->conf->websocket;

    if (ws == NULL || mg_node_expect(ws, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(ws, keys, cl->errs);
    mg__config_read_duration(cl, ws, "idle_timeout", 1, &c->idle_timeout_ms);
    mg__config_read_duration(cl, ws, "ping_interval", 0, &c->ping_interval_ms);
    mg__config_read_duration(cl, ws, "close_timeout", 1, &c->close_timeout_ms);
    read_size(cl, ws, "max_message_size", &c->max_message_size);
    mg__config_read_uint(cl, ws, "max_queued_messages", 1, 1000000, &c->max_queued_messages);
    const char *s;
    if ((expiry = mg_node_get(ws, "on_token_expiry")) != NULL && mg_node_to_str(expiry, &s, cl->errs) == 0) {
        if (strcmp(s, "close") != 0 && strcmp(s, "keep") != 0)
            mg_errors_add(cl->errs, expiry, "on_token_expiry is close or keep, not '%s'", s);
        c->keep_expired_sessions = strcmp(s, "keep") == 0;
    }
}

static void parse_globals(mg_config_loader_t *cl, const mg_node_t *root)
{
    mg__config_read_uint(cl, root, "workers", 1, MG_MAX_WORKERS, &cl->conf->workers);
    mg__config_read_duration(cl, root, "shutdown_timeout", 0, &cl->conf->shutdown_timeout_ms);
    parse_access_log(cl, root);
    parse_limits(cl, root);
    parse_websocket(cl, root);
    const mg_node_t *compress = mg_node_get(root, "compress");
    if (compress != NULL)
        cl->conf->compress = mg_compress_read_top(compress, cl->errs);
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

static void parse_routes(mg_config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *seq = mg_node_require(root, "routes", cl->errs);
    size_t before = cl->errs->num_errors;

    if (seq == NULL)
        return;
    cl->conf->routes = mg_routes_compile(seq, resolve_backend, cl->conf, cl->errs);
    if (cl->conf->routes == NULL && cl->errs->num_errors == before)
        mg_errors_add(cl->errs, seq, "invalid routes");
    if (cl->conf->routes != NULL)
        mg__config_resolve_route_auth(cl, seq);
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
    conf->access_log_fd = -1;
    conf->generation = 1;
    atomic_init(&conf->refs, 1);
    conf->workers = default_workers();
    conf->shutdown_timeout_ms = 10000;
    conf->limits.max_request_body = UINT64_C(10) << 20;
    conf->limits.max_header_size = UINT64_C(64) << 10;
    conf->limits.client_idle_timeout_ms = 60000;
    conf->limits.max_http2_streams = 100;
    conf->limits.max_requests_per_connection_per_second = 10000;
    conf->limits.max_requests_per_connection = 1000;
    conf->limits.client_header_timeout_ms = 10000;
    conf->limits.max_buffered_request_bytes = UINT64_C(256) << 20;
    conf->reload = (mg_reload_conf_t){.memory_limit = UINT64_C(1) << 30, .timeout_ms = 30000};
    conf->tenants.max_keys = MG_TENANTS_MAX_KEYS_DEFAULT;
    conf->websocket = (mg_websocket_conf_t){.idle_timeout_ms = 120000,
                                            .ping_interval_ms = 30000,
                                            .close_timeout_ms = 5000,
                                            .max_message_size = UINT64_C(16) << 20,
                                            .max_queued_messages = 1024};
    return conf;
}

/* Every section is read even after an error, so one run of --check shows every problem. */
static void config_read(mg_config_loader_t *cl, const mg_node_t *root)
{
    size_t before = cl->errs->num_errors;
    if (mg_node_expect(root, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(root, top_keys, cl->errs);
    mg__config_parse_listen(cl, root);
    parse_globals(cl, root);
    mg__config_parse_backends(cl, root);
    mg__config_parse_auth(cl, root); /* before tenants (claim rules) and routes (auth names) */
    mg__config_parse_tenants(cl, root);
    parse_routes(cl, root);
    mg__config_parse_admin(cl, root);
    mg__config_parse_reload(cl, root);
    if (cl->errs->num_errors == before) {
        uint64_t soft, hard;
        mg__config_check_descriptors(cl, root, mg_config_nofile_target(&soft, &hard));
    }
}

/* The route hit counters (mg_route_hits_t): without memory for them the gateway runs uncounted. */
static void route_hits_init(mg_config_t *conf)
{
    mg_route_hits_t *h = &conf->route_hits;
    size_t per_line = 64 / sizeof(*h->counts), routes = conf->routes != NULL ? mg_routes_count(conf->routes) : 0;
    h->shards = conf->workers < MG_ROUTE_HIT_SHARDS ? conf->workers : MG_ROUTE_HIT_SHARDS;
    h->stride = (routes + per_line - 1) / per_line * per_line;
    if (h->stride != 0)
        h->counts = aligned_alloc(64, h->shards * h->stride * sizeof(*h->counts));
    for (size_t i = 0; h->counts != NULL && i < h->shards * h->stride; i++)
        atomic_init(&h->counts[i], 0);
    size_t n = (routes < MG_ROUTE_METRICS_MAX ? routes : MG_ROUTE_METRICS_MAX) * MG_ROUTE_STAT_FIELDS * h->shards;
    if (n != 0 && (h->stats = aligned_alloc(64, (n * sizeof(*h->stats) + 63) / 64 * 64)) != NULL)
        h->stats_routes = routes < MG_ROUTE_METRICS_MAX ? routes : MG_ROUTE_METRICS_MAX;
    for (size_t i = 0; h->stats != NULL && i < n; i++)
        atomic_init(&h->stats[i], 0);
}

void mg_config_route_response(mg_config_t *conf, const mg_route_t *route, unsigned worker, int status, uint64_t duration_us)
{
    static const uint64_t bounds_ms[MG_ROUTE_DURATION_BUCKETS] = MG_ROUTE_DURATION_BOUNDS_MS;
    mg_route_hits_t *h = &conf->route_hits;
    if (h->stats == NULL || route->id >= h->stats_routes)
        return;
    atomic_uint_fast64_t *f = &h->stats[((worker % h->shards) * h->stats_routes + route->id) * MG_ROUTE_STAT_FIELDS];
    int class = status / 100;
    atomic_fetch_add_explicit(&f[class >= 1 && class <= 5 ? class - 1 : 5], 1, memory_order_relaxed);
    size_t b = 0;
    while (b < MG_ROUTE_DURATION_BUCKETS && duration_us > bounds_ms[b] * 1000)
        b++;
    if (b < MG_ROUTE_DURATION_BUCKETS) /* beyond the last bound: +Inf, which is the count */
        atomic_fetch_add_explicit(&f[MG_ROUTE_STAT_CLASSES + b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&f[MG_ROUTE_STAT_SUM], duration_us, memory_order_relaxed);
}

uint64_t mg_config_route_stat(const mg_config_t *conf, const mg_route_t *route, unsigned field)
{
    const mg_route_hits_t *h = &conf->route_hits;
    uint64_t total = 0;
    for (unsigned s = 0; h->stats != NULL && route->id < h->stats_routes && s < h->shards; s++)
        total +=
            atomic_load_explicit(&h->stats[(s * h->stats_routes + route->id) * MG_ROUTE_STAT_FIELDS + field], memory_order_relaxed);
    return total;
}

uint64_t mg_config_route_hits(const mg_config_t *conf, const mg_route_t *route)
{
    const mg_route_hits_t *h = &conf->route_hits;
    uint64_t total = 0;
    for (unsigned s = 0; h->counts != NULL && s < h->shards; s++)
        total += atomic_load_explicit(&h->counts[s * h->stride + route->id], memory_order_relaxed);
    return total;
}

mg_config_t *mg__config_from_doc(const char *file, mg_doc_t *doc, mg_errors_t *errs)
{
    mg_config_loader_t cl = {.errs = errs, .conf = config_new(file), .dir = dir_of(file)};
    size_t before = errs->num_errors;

    if (cl.conf == NULL || cl.dir == NULL) {
        mg_errors_add(errs, NULL, "%s: out of memory", file);
        goto Exit;
    }
    config_read(&cl, mg_doc_root(doc));
    if (errs->num_errors == before)
        route_hits_init(cl.conf);
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
    conf = mg__config_from_doc(file, doc, errs);
    mg_doc_free(doc);
    return conf;
}

mg_config_t *mg_config_load_string(const char *name, const char *text, mg_errors_t *errs)
{
    return mg_config_load_text(name, text, strlen(text), errs);
}

mg_config_t *mg_config_load_text(const char *name, const char *text, size_t len, mg_errors_t *errs)
{
    mg_doc_t *doc = mg_doc_load_string(name, text, len, errs);
    mg_config_t *conf;

    if (doc == NULL)
        return NULL;
    conf = mg__config_from_doc(name, doc, errs);
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

    snprintf(buf, size, "%s: ok (%zu listener%s, %zu backend%s, %zu route%s, %u worker%s, %zu tenant%s)", conf->file,
             conf->num_listeners, plural(conf->num_listeners), conf->num_backends, plural(conf->num_backends), routes,
             plural(routes), conf->workers, plural(conf->workers), conf->tenants.num_quotas, plural(conf->tenants.num_quotas));
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
        mg__config_backend_free(&conf->backends[i]);
    free(conf->backends);
    mg__config_tenants_free(&conf->tenants);
    if (conf->routes != NULL)
        mg_routes_free(conf->routes);
    mg__config_admin_free(&conf->admin);
    mg_auth_conf_free(&conf->auth);
    mg_compress_free(conf->compress);
    free(conf->route_hits.counts);
    free(conf->route_hits.stats);
    if (conf->access_log_fd >= 0 && conf->access_log_fd != STDOUT_FILENO)
        close(conf->access_log_fd);
    free(conf->access_log);
    for (size_t i = 0; i < conf->num_access_log_fields; i++)
        free(conf->access_log_fields[i]);
    free(conf->access_log_fields);
    free(conf->file);
    free(conf);
}

mg_config_t *mg_config_retain(mg_config_t *conf)
{
    atomic_fetch_add_explicit(&conf->refs, 1, memory_order_relaxed);
    return conf;
}

void mg_config_release(mg_config_t *conf)
{
    /* acq_rel: whatever the other holders did with the configuration happens before the free */
    if (conf != NULL && atomic_fetch_sub_explicit(&conf->refs, 1, memory_order_acq_rel) == 1)
        mg_config_free(conf);
}

int mg_config_open_access_log(mg_config_t *conf, mg_errors_t *errs)
{
    if (conf->access_log == NULL)
        return 0;
    if (strcmp(conf->access_log, "-") == 0) {
        conf->access_log_fd = STDOUT_FILENO;
        return 0;
    }
    conf->access_log_fd = open(conf->access_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (conf->access_log_fd < 0) {
        mg_errors_add(errs, NULL, "%s: cannot open access log %s: %s", conf->file, conf->access_log, strerror(errno));
        return -1;
    }
    return 0;
}
