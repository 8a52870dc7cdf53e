/*
 * gateway/config/ (config.c and its section readers): good files with every setting and with defaults, listen addresses, the
 * weighted schedule, and a table of bad files each with the exact first error the user sees.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gateway/config/config.h"

static mg_errors_t errs;
static mg_config_t *conf;

static void teardown(void)
{
    mg_config_free(conf);
    conf = NULL;
    mg_errors_clear(&errs);
}

TestSuite(config, .fini = teardown);
TestSuite(address);

/* A valid listen section and routes section, appended to the bad parts of the table below. */
#define LISTEN "listen:\n  - address: \"127.0.0.1:8080\"\n"
#define ROUTES "routes:\n  - name: r\n    respond: {status: 200}\n"
#define BASE LISTEN ROUTES

static mg_config_t *load(const char *text)
{
    conf = mg_config_load_string("gw.yaml", text, &errs);
    cr_assert_not_null(conf, "refused: %s", errs.size ? errs.entries[0].text : "(no error)");
    cr_assert_eq(errs.num_errors, 0);
    return conf;
}

static size_t pos(const mg_backend_conf_t *b, const char *url)
{
    for (size_t i = 0; i < b->num_servers; i++)
        if (strcmp(b->servers[i].url, url) == 0)
            return i;
    cr_assert_fail("no server %s", url);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Good files
 */
Test(config, defaults)
{
    load(BASE);
    cr_assert_eq(conf->num_listeners, 1);
    cr_assert_str_eq(conf->listeners[0].address, "127.0.0.1:8080");
    cr_assert_null(conf->listeners[0].tls_certificate);
    cr_assert_null(conf->listeners[0].tls_key);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_eq(conf->workers, (unsigned)(cpus < 1 ? 1 : cpus > 256 ? 256 : cpus));
    cr_assert_eq(conf->shutdown_timeout_ms, 10000);
    cr_assert_null(conf->access_log);
    cr_assert_eq(conf->limits.max_request_body, 10 * 1024 * 1024);
    cr_assert_eq(conf->limits.max_header_size, 64 * 1024);
    cr_assert_eq(conf->limits.client_idle_timeout_ms, 60000);
    cr_assert_eq(conf->limits.tls_handshake_timeout_ms, 0, "not set: derived from client_idle_timeout");
    cr_assert_eq(conf->limits.max_http2_streams, 100);
    cr_assert_eq(conf->limits.keep_escaped_slashes, 0, "escaped slashes are rejected by default");
    cr_assert_eq(conf->num_backends, 0);
    cr_assert_eq(mg_routes_count(conf->routes), 1);
    cr_assert_str_eq(conf->file, "gw.yaml");
    cr_assert_null(conf->admin.address);
    cr_assert_null(conf->admin.token);
    cr_assert_eq(conf->generation, 1);
    cr_assert_eq(atomic_load(&conf->refs), 1);
    cr_assert_eq(conf->access_log_fd, -1, "loading opens nothing");
}

Test(config, websocket_defaults_and_settings)
{
    load(BASE);
    cr_assert_eq(conf->websocket.idle_timeout_ms, 120000);
    cr_assert_eq(conf->websocket.ping_interval_ms, 30000);
    cr_assert_eq(conf->websocket.close_timeout_ms, 5000);
    cr_assert_eq(conf->websocket.max_message_size, 16 << 20);
    cr_assert_eq(conf->websocket.max_queued_messages, 1024);
    mg_config_free(conf);
    load(BASE "websocket: {idle_timeout: 2m, ping_interval: 0s, close_timeout: 1s, max_message_size: 64KiB, "
              "max_queued_messages: 8}\n");
    cr_assert_eq(conf->websocket.idle_timeout_ms, 120000);
    cr_assert_eq(conf->websocket.ping_interval_ms, 0, "0s turns pings off");
    cr_assert_eq(conf->websocket.close_timeout_ms, 1000);
    cr_assert_eq(conf->websocket.max_message_size, 64 << 10);
    cr_assert_eq(conf->websocket.max_queued_messages, 8);
}

Test(config, ws_urls_are_http_urls_inside)
{
    load("backends:\n  live: {servers: [\"ws://127.0.0.1:9001/\", \"http://127.0.0.1:9002\"]}\n" BASE);
    cr_assert_str_eq(conf->backends[0].servers[0].url, "http://127.0.0.1:9001");
    cr_assert_str_eq(conf->backends[0].servers[1].url, "http://127.0.0.1:9002");
}

Test(config, admin)
{
    load(BASE "admin:\n  address: \"127.0.0.1:9901\"\n  token: \"s3cr3t-T0ken_~+/=\"\n");
    cr_assert_str_eq(conf->admin.address, "127.0.0.1:9901");
    const struct sockaddr_in *sin = (const struct sockaddr_in *)&conf->admin.addr;
    cr_assert_eq(sin->sin_family, AF_INET);
    cr_assert_eq(ntohs(sin->sin_port), 9901);
    cr_assert_eq(conf->admin.addrlen, sizeof(*sin));
    cr_assert_str_eq(conf->admin.token, "s3cr3t-T0ken_~+/=");
    mg_config_free(conf);
    load(BASE "admin: {address: \"[::1]:9901\"}\n");
    cr_assert_eq(conf->admin.addr.ss_family, AF_INET6);
    cr_assert_null(conf->admin.token, "no token: no authentication");
}

Test(config, reload_defaults_and_settings)
{
    load(BASE);
    cr_assert_eq(conf->reload.memory_limit, UINT64_C(1) << 30);
    cr_assert_eq(conf->reload.timeout_ms, 30000);
    mg_config_free(conf);
    load(BASE "reload: {memory_limit: 64MiB, timeout: 250ms}\n");
    cr_assert_eq(conf->reload.memory_limit, UINT64_C(64) << 20);
    cr_assert_eq(conf->reload.timeout_ms, 250);
}

/* An admin API any host can reach, without a token: allowed, but --check (and a reload) warns. */
Test(config, an_admin_api_off_loopback_without_a_token_is_warned_about)
{
    static const struct {
        const char *admin;
        int warns;
    } table[] = {
        {"{address: \":9901\"}", 1},
        {"{address: \"0.0.0.0:9901\"}", 1},
        {"{address: \"10.0.0.7:9901\"}", 1},
        {"{address: \"[::]:9901\"}", 1},
        {"{address: \"[::ffff:10.0.0.7]:9901\"}", 1},
        {"{address: \"127.0.0.1:9901\"}", 0},
        {"{address: \"127.3.2.1:9901\"}", 0},
        {"{address: \"[::1]:9901\"}", 0},
        {"{address: \"[::ffff:127.0.0.1]:9901\"}", 0},
        {"{address: \":9901\", token: t0k}", 0},
        {"{address: \"[::]:9901\", token: t0k}", 0},
    };
    for (size_t i = 0; i != sizeof(table) / sizeof(table[0]); ++i) {
        char text[512];
        snprintf(text, sizeof(text), BASE "admin: %s\n", table[i].admin);
        load(text);
        cr_expect_eq(errs.num_warnings, (size_t)table[i].warns, "%s", table[i].admin);
        if (table[i].warns && errs.size == 1) {
            char expected[512];
            snprintf(expected, sizeof(expected),
                     "gw.yaml:6:18: warning: admin.address '%s' is not a loopback address and no admin.token is set: whoever "
                     "can reach it can reload the configuration and send to, close or drain WebSocket sessions",
                     conf->admin.address);
            cr_expect_str_eq(errs.entries[0].text, expected);
        }
        teardown();
    }
}

Test(config, backend_defaults)
{
    load(BASE "backends:\n  crm:\n    servers: [\"http://127.0.0.1:9001/\"]\n");
    const mg_backend_conf_t *b = &conf->backends[0];
    cr_assert_eq(conf->num_backends, 1);
    cr_assert_str_eq(b->name, "crm");
    cr_assert_eq(b->num_servers, 1);
    cr_assert_str_eq(b->servers[0].url, "http://127.0.0.1:9001", "trailing '/' is stripped");
    cr_assert_eq(b->servers[0].weight, 1);
    cr_assert_eq(b->balance, MG_BALANCE_ROUND_ROBIN);
    cr_assert_null(b->primary);
    cr_assert_eq(b->connect_timeout_ms, 2000);
    cr_assert_eq(b->timeout_ms, 30000);
    cr_assert_eq(b->retries, 1);
    cr_assert_eq(b->max_in_flight, 0, "unlimited by default, as nginx's max_conns");
    cr_assert_eq(b->queue_timeout_ms, 5000);
    cr_assert_eq(b->max_queued_per_key, 100, "a fair share of the 10,000 waiting requests: one HTTP/2 connection's streams");
    cr_assert_eq(b->schedule_len, 1);
    cr_assert_eq(b->schedule[0], 0);
    cr_assert_eq(atomic_load(&b->next), 0);
    cr_assert_eq(b->http_client, MG_HTTP_CLIENT_BUILTIN);
    cr_assert_eq(b->keepalive_timeout_ms, 50000, "below common backend idle timeouts (nginx 75s)");
    cr_assert_eq(b->max_idle_connections, 1024);
    cr_assert_eq(b->dns_refresh_ms, 30000);
    cr_assert_eq(b->servers[0].backend, b, "a server knows its backend's client settings");
    cr_assert_eq(b->outlier.consecutive_failures, 0, "passive checks are off without outlier:");
    cr_assert_eq(b->outlier.consecutive_5xx, 0);
    cr_assert_eq(b->panic, 0);
}

Test(config, backend_client_settings)
{
    load(BASE "backends:\n  crm:\n    servers: [\"http://127.0.0.1:9001\"]\n    http_client: libcurl\n"
              "    keepalive_timeout: 4s\n    max_idle_connections: 0\n    dns_refresh: 2m\n");
    const mg_backend_conf_t *b = &conf->backends[0];
    cr_assert_eq(b->http_client, MG_HTTP_CLIENT_LIBCURL);
    cr_assert_eq(b->keepalive_timeout_ms, 4000);
    cr_assert_eq(b->max_idle_connections, 0);
    cr_assert_eq(b->dns_refresh_ms, 120000);
}

Test(config, outlier_defaults_and_values)
{
    load(BASE "backends:\n  crm:\n    servers: [\"http://127.0.0.1:9001\"]\n    outlier: {}\n"
              "  api:\n    servers: [\"http://127.0.0.1:9002\"]\n    panic: true\n"
              "    outlier: {consecutive_failures: 0, consecutive_5xx: 3, eject_for: 5s, max_eject_for: 1m, max_ejected: 100%}\n");
    const mg_outlier_conf_t *o = &conf->backends[0].outlier;
    cr_assert_eq(o->consecutive_failures, 5);
    cr_assert_eq(o->consecutive_5xx, 0);
    cr_assert_eq(o->eject_for_ms, 30000);
    cr_assert_eq(o->max_eject_for_ms, 300000);
    cr_assert_eq(o->max_ejected_percent, 50);
    cr_assert_eq(conf->backends[0].panic, 0);
    o = &conf->backends[1].outlier;
    cr_assert_eq(o->consecutive_failures, 0);
    cr_assert_eq(o->consecutive_5xx, 3);
    cr_assert_eq(o->eject_for_ms, 5000);
    cr_assert_eq(o->max_eject_for_ms, 60000);
    cr_assert_eq(o->max_ejected_percent, 100);
    cr_assert_eq(conf->backends[1].panic, 1);
    cr_assert_null(conf->backends[0].health.path, "no active checks without health:");
}

Test(config, hash_and_least_request)
{
    load(BASE "backends:\n  crm:\n    servers: [\"http://127.0.0.1:9001\", {url: \"http://127.0.0.1:9002\", weight: 3}]\n"
              "    balance: hash\n    hash_key: \"${tenant}-${header.X-Region}\"\n"
              "  api:\n    servers: [\"http://127.0.0.1:9002\"]\n    balance: least_request\n");
    const mg_backend_conf_t *b = &conf->backends[0];
    cr_assert_eq(b->balance, MG_BALANCE_HASH);
    cr_assert_not_null(b->hash_key);
    cr_assert_eq(b->ring_len, 4 * MG_RING_VNODES, "virtual nodes by weight");
    for (size_t i = 1; i < b->ring_len; i++)
        cr_assert_leq(b->ring[i - 1].point, b->ring[i].point);
    cr_assert_eq(conf->backends[1].balance, MG_BALANCE_LEAST_REQUEST);
    cr_assert_null(conf->backends[1].ring);
}

Test(config, retry_keys)
{
    load(BASE "backends:\n  crm:\n    servers: [\"http://127.0.0.1:9001\"]\n"
              "  api:\n    servers: [\"http://127.0.0.1:9002\"]\n    retry_on: [reset, 502, 503, 504]\n"
              "    retry_budget: 20%\n    retry_backoff: 25ms\n    slow_start: 30s\n");
    cr_assert_eq(conf->backends[0].retry_on, MG_RETRY_CONNECT_FAILURE, "today's rule by default");
    cr_assert_eq(conf->backends[0].retry_budget_percent, 0, "no budget by default");
    cr_assert_eq(conf->backends[0].retry_backoff_ms, 0);
    cr_assert_eq(conf->backends[1].retry_on, MG_RETRY_RESET | MG_RETRY_502 | MG_RETRY_503 | MG_RETRY_504);
    cr_assert_eq(conf->backends[1].retry_budget_percent, 20);
    cr_assert_eq(conf->backends[1].retry_backoff_ms, 25);
    cr_assert_eq(conf->backends[0].slow_start_ms, 0, "no slow start by default");
    cr_assert_eq(conf->backends[1].slow_start_ms, 30000);
}

Test(config, health_defaults_and_values)
{
    load(BASE "backends:\n  crm:\n    servers: [\"http://127.0.0.1:9001\"]\n    health: {path: /healthz}\n"
              "  api:\n    servers: [\"http://127.0.0.1:9002\"]\n"
              "    health: {path: /up, interval: 2s, timeout: 300ms, healthy: 1, unhealthy: 5, expect: 204, host: api.internal,"
              " headers: {X-Check: \"1\"}}\n");
    const mg_health_conf_t *h = &conf->backends[0].health;
    cr_assert_str_eq(h->path, "/healthz");
    cr_assert_eq(h->interval_ms, 5000);
    cr_assert_eq(h->timeout_ms, 1000);
    cr_assert_eq(h->healthy, 2);
    cr_assert_eq(h->unhealthy, 3);
    cr_assert_eq(h->expect_min, 200);
    cr_assert_eq(h->expect_max, 399);
    cr_assert_null(h->host);
    cr_assert_eq(h->num_headers, 0);
    h = &conf->backends[1].health;
    cr_assert_str_eq(h->path, "/up");
    cr_assert_eq(h->interval_ms, 2000);
    cr_assert_eq(h->timeout_ms, 300);
    cr_assert_eq(h->healthy, 1);
    cr_assert_eq(h->unhealthy, 5);
    cr_assert_eq(h->expect_min, 204);
    cr_assert_eq(h->expect_max, 204);
    cr_assert_str_eq(h->host, "api.internal");
    cr_assert_eq(h->num_headers, 1);
    cr_assert_str_eq(h->headers[0], "X-Check: 1");
}

static const char full[] = "listen:\n"
                           "  - address: \"127.0.0.1:8080\"\n"
                           "  - address: \"[::1]:8443\"\n"
                           "    tls: {certificate: cert.pem, key: /KEY}\n"
                           "workers: 3\n"
                           "shutdown_timeout: 1500ms\n"
                           "access_log: logs/access.log\n"
                           "limits:\n"
                           "  max_request_body: 1MB\n"
                           "  max_header_size: 8KiB\n"
                           "  client_idle_timeout: 2m\n"
                           "  tls_handshake_timeout: 3s\n"
                           "  max_http2_streams: 16\n"
                           "  escaped_slashes: keep\n"
                           "backends:\n"
                           "  crm:\n"
                           "    servers:\n"
                           "      - \"http://127.0.0.1:9001\"\n"
                           "      - {url: \"http://127.0.0.1:9002/app/\", weight: 2}\n"
                           "    balance: primary_for_writes\n"
                           "    primary: \"http://127.0.0.1:9002/app/\"\n"
                           "    connect_timeout: 250ms\n"
                           "    timeout: 1h\n"
                           "    retries: 0\n"
                           "    max_in_flight: 512\n"
                           "    queue_timeout: 250ms\n"
                           "    max_queued_per_key: 0\n"
                           "  api:\n"
                           "    servers: [\"http://[::1]:7000\", \"http://api.internal:80\"]\n"
                           "    balance: first_available\n"
                           "routes:\n"
                           "  - name: crm\n"
                           "    match: {path: {prefix: /crm}}\n"
                           "    forward: crm\n"
                           "  - name: api\n"
                           "    routes:\n"
                           "      - name: api-v1\n"
                           "        forward: {backend: api, host: api.example.com}\n"
                           "  - name: fallback\n"
                           "    respond: {status: 404, body: \"no route\\n\"}\n";

/* Writes the full configuration into a fresh directory with its TLS files; returns the path. */
static char *write_full_config(char *dir)
{
    char path[512], key[512], *text, *conf_path;
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/cert.pem", dir);
    fclose(fopen(path, "w"));
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    fclose(fopen(key, "w"));
    cr_assert_geq(asprintf(&conf_path, "%s/gw.yaml", dir), 0);
    text = strdup(full);
    char *slot = strstr(text, "/KEY");
    FILE *fp = fopen(conf_path, "w");
    fprintf(fp, "%.*s%s%s", (int)(slot - text), text, key, slot + 4);
    fclose(fp);
    free(text);
    return conf_path;
}

static void remove_full_config(const char *dir)
{
    char path[512];
    static const char *const names[] = {"cert.pem", "key.pem", "gw.yaml", NULL};
    for (size_t i = 0; names[i] != NULL; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

Test(config, every_setting_from_a_file)
{
    char dir[] = "/tmp/mg-test-config-XXXXXX", expected[512];
    char *path = write_full_config(dir);
    conf = mg_config_load(path, &errs);
    cr_assert_not_null(conf, "refused: %s", errs.size ? errs.entries[0].text : "");
    cr_assert_eq(errs.num_errors, 0);
    cr_assert_str_eq(conf->file, path);

    cr_assert_eq(conf->num_listeners, 2);
    cr_assert_str_eq(conf->listeners[1].address, "[::1]:8443");
    cr_assert_eq(conf->listeners[1].addr.ss_family, AF_INET6);
    snprintf(expected, sizeof(expected), "%s/cert.pem", dir);
    cr_assert_str_eq(conf->listeners[1].tls_certificate, expected, "relative to the config file");
    snprintf(expected, sizeof(expected), "%s/key.pem", dir);
    cr_assert_str_eq(conf->listeners[1].tls_key, expected, "absolute path kept");
    cr_assert_eq(conf->workers, 3);
    cr_assert_eq(conf->shutdown_timeout_ms, 1500);
    snprintf(expected, sizeof(expected), "%s/logs/access.log", dir);
    cr_assert_str_eq(conf->access_log, expected);
    cr_assert_eq(conf->limits.max_request_body, 1000000);
    cr_assert_eq(conf->limits.max_header_size, 8192);
    cr_assert_eq(conf->limits.client_idle_timeout_ms, 120000);
    cr_assert_eq(conf->limits.tls_handshake_timeout_ms, 3000);
    cr_assert_eq(conf->limits.max_http2_streams, 16);
    cr_assert_eq(conf->limits.keep_escaped_slashes, 1);
    remove_full_config(dir);
    free(path);
}

Test(config, backends_and_routes_from_the_full_example)
{
    char dir[] = "/tmp/mg-test-config-XXXXXX";
    char *path = write_full_config(dir);
    conf = mg_config_load(path, &errs);
    remove_full_config(dir);
    free(path);
    cr_assert_not_null(conf);

    cr_assert_eq(conf->num_backends, 2);
    const mg_backend_conf_t *crm = &conf->backends[0], *api = &conf->backends[1];
    cr_assert_str_eq(crm->name, "crm");
    cr_assert_eq(crm->num_servers, 2);
    cr_assert_str_eq(crm->servers[1].url, "http://127.0.0.1:9002/app");
    cr_assert_eq(crm->servers[1].weight, 2);
    cr_assert_eq(crm->balance, MG_BALANCE_PRIMARY_FOR_WRITES);
    cr_assert_str_eq(crm->primary, "http://127.0.0.1:9002/app");
    cr_assert_eq(crm->primary_index, 1);
    cr_assert_eq(crm->connect_timeout_ms, 250);
    cr_assert_eq(crm->timeout_ms, 3600000);
    cr_assert_eq(crm->retries, 0);
    cr_assert_eq(crm->max_in_flight, 512);
    cr_assert_eq(crm->queue_timeout_ms, 250);
    cr_assert_eq(crm->max_queued_per_key, 0, "0: no share");
    cr_assert_eq(api->max_queued_per_key, 100);
    cr_assert_str_eq(api->servers[0].url, "http://[::1]:7000");
    cr_assert_eq(api->balance, MG_BALANCE_FIRST_AVAILABLE);

    cr_assert_eq(mg_routes_count(conf->routes), 4);
    cr_assert_eq(conf->routes->routes[0]->forward.backend, crm, "the resolver hands out the backend itself");
    cr_assert_eq(conf->routes->routes[1]->children[0]->forward.backend, api);

    char summary[256];
    mg_config_summary(conf, summary, sizeof(summary));
    char expected[512];
    snprintf(expected, sizeof(expected), "%s: ok (2 listeners, 2 backends, 4 routes, 3 workers, 0 tenants)", conf->file);
    cr_assert_str_eq(summary, expected);
}

Test(config, summary_uses_the_singular_for_one)
{
    load("workers: 1\n" BASE);
    char summary[128];
    mg_config_summary(conf, summary, sizeof(summary));
    cr_assert_str_eq(summary, "gw.yaml: ok (1 listener, 0 backends, 1 route, 1 worker, 0 tenants)");
}

Test(config, relative_paths_follow_the_config_directory)
{
    conf = mg_config_load_string("conf/gw.yaml", "access_log: access.log\n" BASE, &errs);
    cr_assert_not_null(conf);
    cr_assert_str_eq(conf->access_log, "conf/access.log");
    mg_config_free(conf);
    conf = mg_config_load_string("gw.yaml", "access_log: \"-\"\n" BASE, &errs);
    cr_assert_str_eq(conf->access_log, "-");
    mg_config_free(conf);
    conf = mg_config_load_string("gw.yaml", "access_log: access.log\n" BASE, &errs);
    cr_assert_str_eq(conf->access_log, "access.log");
}

Test(config, listen_any_address)
{
    load("listen:\n  - address: \":8080\"\n  - address: \"[::]:8080\"\n" ROUTES);
    const struct sockaddr_in *sin = (const struct sockaddr_in *)&conf->listeners[0].addr;
    cr_assert_eq(sin->sin_family, AF_INET);
    cr_assert_eq(sin->sin_addr.s_addr, htonl(INADDR_ANY));
    cr_assert_eq(ntohs(sin->sin_port), 8080);
    cr_assert_eq(conf->listeners[1].addr.ss_family, AF_INET6, "[::] and 0.0.0.0 are different sockets");
}

/* ---------------------------------------------------------------------------------------
 * Weighted schedules
 */
static const mg_backend_conf_t *schedule_of(const char *servers)
{
    static char text[1024];
    snprintf(text, sizeof(text), BASE "backends:\n  b:\n    servers: %s\n", servers);
    return &load(text)->backends[0];
}

static void assert_schedule(const mg_backend_conf_t *b, const size_t *expected, size_t n)
{
    cr_assert_eq(b->schedule_len, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(b->schedule[i], expected[i], "step %zu: %zu, expected %zu", i, b->schedule[i], expected[i]);
}

Test(config, equal_weights_take_turns)
{
    static const size_t expected[] = {0, 1, 2};
    assert_schedule(schedule_of("[\"http://a:1\", \"http://b:1\", \"http://c:1\"]"), expected, 3);
}

Test(config, weights_are_interleaved)
{
    static const size_t expected[] = {1, 0, 1};
    const mg_backend_conf_t *b = schedule_of("[\"http://a:1\", {url: \"http://b:1\", weight: 2}]");
    assert_schedule(b, expected, 3);
    cr_assert_eq(pos(b, "http://b:1"), 1);
}

Test(config, a_heavy_server_gets_no_burst)
{
    static const size_t expected[] = {0, 0, 1, 0, 2, 0, 0};
    assert_schedule(schedule_of("[{url: \"http://a:1\", weight: 5}, \"http://b:1\", \"http://c:1\"]"), expected, 7);
}

Test(config, schedule_counts_match_the_weights)
{
    const mg_backend_conf_t *b = schedule_of("[{url: \"http://a:1\", weight: 100}, {url: \"http://b:1\", weight: 37}, "
                                             "{url: \"http://c:1\", weight: 1}]");
    size_t counts[3] = {0, 0, 0}, longest = 0, run = 0;
    cr_assert_eq(b->schedule_len, 138);
    for (size_t i = 0; i < b->schedule_len; i++) {
        counts[b->schedule[i]]++;
        run = i > 0 && b->schedule[i] == b->schedule[i - 1] ? run + 1 : 1;
        longest = run > longest ? run : longest;
    }
    cr_assert_eq(counts[0], 100);
    cr_assert_eq(counts[1], 37);
    cr_assert_eq(counts[2], 1);
    cr_assert_leq(longest, 3, "server a ran %zu times in a row", longest);
}

/* ---------------------------------------------------------------------------------------
 * Addresses
 */
Test(address, ipv4_and_any)
{
    struct sockaddr_storage ss;
    socklen_t len;
    cr_assert_eq(mg_config_parse_address("10.1.2.3:65535", &ss, &len), 0);
    const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
    cr_assert_eq(len, sizeof(*sin));
    cr_assert_eq(sin->sin_family, AF_INET);
    cr_assert_eq(ntohl(sin->sin_addr.s_addr), 0x0a010203);
    cr_assert_eq(ntohs(sin->sin_port), 65535);
    cr_assert_eq(mg_config_parse_address(":1", &ss, &len), 0);
    cr_assert_eq(sin->sin_addr.s_addr, htonl(INADDR_ANY));
    cr_assert_eq(ntohs(sin->sin_port), 1);
}

Test(address, ipv6)
{
    struct sockaddr_storage ss;
    socklen_t len;
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
    struct in6_addr loopback = IN6ADDR_LOOPBACK_INIT;
    cr_assert_eq(mg_config_parse_address("[::1]:8080", &ss, &len), 0);
    cr_assert_eq(len, sizeof(*sin6));
    cr_assert_eq(sin6->sin6_family, AF_INET6);
    cr_assert_eq(memcmp(&sin6->sin6_addr, &loopback, sizeof(loopback)), 0);
    cr_assert_eq(ntohs(sin6->sin6_port), 8080);
    cr_assert_eq(mg_config_parse_address("[2001:db8::a:b]:443", &ss, &len), 0);
    cr_assert_eq(sin6->sin6_addr.s6_addr[0], 0x20);
    cr_assert_eq(sin6->sin6_addr.s6_addr[15], 0x0b);
    cr_assert_eq(mg_config_parse_address("[::ffff:1.2.3.4]:80", &ss, &len), 0);
}

Test(address, bad_addresses)
{
    static const char *const bad[] = {
        "",      "8080",      ":",         ":0",         ":65536",         ":99999999",    ":-1",
        ":+80",  ":80x",      "127.0.0.1", "127.0.0.1:", "127.0.0.256:80", "localhost:80", "::1:8080",
        "[::1]", "[::1:8080", "::1]:8080", "[]:80",      "[1.2.3.4]:80",   "[::1]x:80",    " 1.2.3.4:80",
        NULL};
    struct sockaddr_storage ss;
    socklen_t len;
    for (size_t i = 0; bad[i] != NULL; i++)
        cr_assert_eq(mg_config_parse_address(bad[i], &ss, &len), -1, "'%s' accepted", bad[i]);
}

/* ---------------------------------------------------------------------------------------
 * Bad files: the first error, exactly as --check prints it.
 */
typedef struct bad_config {
    const char *yaml;
    const char *error;
} bad_config_t;

#define BACKEND(body) "backends:\n  crm: " body "\n" BASE
#define SERVER(url) BACKEND("{servers: [\"" url "\"]}")

static const bad_config_t bad_configs[] = {
    /* the file as a whole */
    {"", "gw.yaml:1:1: missing key 'listen'"},
    {"- listen\n", "gw.yaml:1:1: expected a mapping, got a sequence"},
    {"a: [1\n", "gw.yaml:2:1: syntax error: did not find expected ',' or ']' (while parsing a flow sequence that starts at line 1, "
                "column 4)"},
    {"wokers: 2\n" BASE, "gw.yaml:1:1: unknown key 'wokers' (did you mean 'workers'?)"},
    {LISTEN, "gw.yaml:1:1: missing key 'routes'"},
    {BASE "workers: 2\nworkers: 3\n", "gw.yaml:7:1: duplicate key 'workers'"},
    /* listen */
    {ROUTES, "gw.yaml:1:1: missing key 'listen'"},
    {"listen: []\n" ROUTES, "gw.yaml:1:9: at least one listener is required"},
    {"listen: {address: \":80\"}\n" ROUTES, "gw.yaml:1:9: expected a sequence, got a mapping"},
    {"listen: [\":80\"]\n" ROUTES, "gw.yaml:1:10: expected a mapping, got a scalar"},
    {"listen:\n  - address: \"localhost:8080\"\n" ROUTES,
     "gw.yaml:2:14: invalid address 'localhost:8080' (expected e.g. 127.0.0.1:8080, [::1]:8080, :8080)"},
    {"listen:\n  - address: \"127.0.0.1:0\"\n" ROUTES,
     "gw.yaml:2:14: invalid address '127.0.0.1:0' (expected e.g. 127.0.0.1:8080, [::1]:8080, :8080)"},
    {"listen:\n  - address: \"::1:8080\"\n" ROUTES,
     "gw.yaml:2:14: invalid address '::1:8080' (expected e.g. 127.0.0.1:8080, [::1]:8080, :8080)"},
    {"listen:\n  - address: 8080\n" ROUTES,
     "gw.yaml:2:14: invalid address '8080' (expected e.g. 127.0.0.1:8080, [::1]:8080, :8080)"},
    {"listen:\n  - address: \":8080\"\n  - address: \"0.0.0.0:8080\"\n" ROUTES,
     "gw.yaml:3:14: duplicate listen address '0.0.0.0:8080' (same as ':8080')"},
    {"listen:\n  - adress: \":8080\"\n" ROUTES, "gw.yaml:2:5: unknown key 'adress' (did you mean 'address'?)"},
    {"listen:\n  - tls: {certificate: a, key: b}\n" ROUTES, "gw.yaml:2:5: missing key 'address'"},
    {"listen:\n  - address: \":8443\"\n    tls: {certificate: missing.pem, key: missing.key}\n" ROUTES,
     "gw.yaml:3:24: cannot read certificate 'missing.pem': No such file or directory"},
    {"listen:\n  - address: \":8443\"\n    tls: {certificate: /etc/passwd}\n" ROUTES, "gw.yaml:3:10: missing key 'key'"},
    {"listen:\n  - address: \":8443\"\n    tls: {certificate: /etc/passwd, key: /tmp}\n" ROUTES,
     "gw.yaml:3:42: cannot read key '/tmp': not a regular file"},
    /* process settings */
    {"workers: 0\n" BASE, "gw.yaml:1:10: expected an integer between 1 and 256, got '0'"},
    {"workers: 257\n" BASE, "gw.yaml:1:10: expected an integer between 1 and 256, got '257'"},
    {"workers: [1]\n" BASE, "gw.yaml:1:10: expected an integer between 1 and 256, got a sequence"},
    {"shutdown_timeout: 10\n" BASE, "gw.yaml:1:19: invalid duration '10' (expected e.g. 250ms, 5s, 2m, 1h)"},
    {"access_log: ''\n" BASE, "gw.yaml:1:13: access_log must be a file path or \"-\" (stdout)"},
    {"access_log:\n" BASE, "gw.yaml:1:12: expected a string, got null"},
    {"limits: 10MiB\n" BASE, "gw.yaml:1:9: expected a mapping, got a scalar"},
    {"limits: {max_request_body: 10mb}\n" BASE, "gw.yaml:1:28: invalid size '10mb' (expected e.g. 512, 64KiB, 10MiB)"},
    {"limits: {max_header_sise: 1KiB}\n" BASE, "gw.yaml:1:10: unknown key 'max_header_sise' (did you mean 'max_header_size'?)"},
    {"limits: {client_idle_timeout: 0s}\n" BASE, "gw.yaml:1:31: client_idle_timeout must be greater than 0"},
    {"limits: {tls_handshake_timeout: 0s}\n" BASE, "gw.yaml:1:33: tls_handshake_timeout must be greater than 0"},
    {"limits: {tls_handshake_timeout: soon}\n" BASE, "gw.yaml:1:33: invalid duration 'soon' (expected e.g. 250ms, 5s, 2m, 1h)"},
    {"limits: {max_http2_streams: 1000}\n" BASE, "gw.yaml:1:29: expected an integer between 1 and 256, got '1000'"},
    {"limits: {escaped_slashes: rejekt}\n" BASE, "gw.yaml:1:27: unknown escaped_slashes 'rejekt' (did you mean 'reject'?)"},
    {"limits: {escaped_slashes: decode}\n" BASE, "gw.yaml:1:27: unknown escaped_slashes 'decode' (expected reject or keep)"},
    {"limits: {escaped_slashes: [keep]}\n" BASE, "gw.yaml:1:27: expected a string, got a sequence"},
    {"limits: {escaped_slash: keep}\n" BASE, "gw.yaml:1:10: unknown key 'escaped_slash' (did you mean 'escaped_slashes'?)"},
    /* backends */
    {"backends: [crm]\n" BASE, "gw.yaml:1:11: expected a mapping, got a sequence"},
    {BACKEND("\"http://a:1\""), "gw.yaml:2:8: expected a mapping, got a scalar"},
    {BACKEND("{}"), "gw.yaml:2:8: missing key 'servers'"},
    {BACKEND("{servers: []}"), "gw.yaml:2:18: a backend needs at least one server"},
    {BACKEND("{servers: \"http://a:1\"}"), "gw.yaml:2:18: expected a sequence, got a scalar"},
    {"backends:\n  crm: {servers: [\"http://a:1\"]}\n  crm: {servers: [\"http://b:1\"]}\n" BASE,
     "gw.yaml:3:3: duplicate key 'crm'"},
    {SERVER("https://a"), "gw.yaml:2:19: invalid server url 'https://a': missing port"},
    {SERVER("wss://a:1"),
     "gw.yaml:2:19: wss:// servers are not supported: WebSocket tunnels to backends do not speak TLS (use ws://)"},
    {SERVER("ws://a"), "gw.yaml:2:19: invalid server url 'ws://a': missing port"},
    {"websocket: {idle_timeout: 0s}\n" BASE, "gw.yaml:1:27: idle_timeout must be greater than 0"},
    {"websocket: {max_queued_messages: 0}\n" BASE, "gw.yaml:1:34: expected an integer between 1 and 1000000, got '0'"},
    {"websocket: {ping_intervall: 1s}\n" BASE, "gw.yaml:1:13: unknown key 'ping_intervall' (did you mean 'ping_interval'?)"},
    {SERVER("ftp://a:1"), "gw.yaml:2:19: invalid server url 'ftp://a:1' (expected http://, https:// or ws://host:port[/prefix])"},
    {SERVER("http://a"), "gw.yaml:2:19: invalid server url 'http://a': missing port"},
    {SERVER("http://a/x"), "gw.yaml:2:19: invalid server url 'http://a/x': missing port"},
    {SERVER("http://:80"), "gw.yaml:2:19: invalid server url 'http://:80': missing host"},
    {SERVER("http://a:99999"), "gw.yaml:2:19: invalid server url 'http://a:99999': invalid port"},
    {SERVER("http://a:0"), "gw.yaml:2:19: invalid server url 'http://a:0': invalid port"},
    {SERVER("http://u@a:80"), "gw.yaml:2:19: invalid server url 'http://u@a:80': invalid character in host"},
    {SERVER("http://[::1:80"), "gw.yaml:2:19: invalid server url 'http://[::1:80': unterminated IPv6 address"},
    {SERVER("http://a:80/x?y=1"),
     "gw.yaml:2:19: invalid server url 'http://a:80/x?y=1': query strings, fragments and spaces are not "
     "allowed"},
    {BACKEND("{servers: [\"http://a:1\", \"http://a:1/\"]}"),
     "gw.yaml:2:33: duplicate server 'http://a:1' (use weight to send it more traffic)"},
    {BACKEND("{servers: [{url: \"http://a:1\", weight: 0}]}"), "gw.yaml:2:47: expected an integer between 1 and 100, got '0'"},
    {BACKEND("{servers: [{url: \"http://a:1\", wieght: 2}]}"), "gw.yaml:2:39: unknown key 'wieght' (did you mean 'weight'?)"},
    {BACKEND("{servers: [{weight: 2}]}"), "gw.yaml:2:19: missing key 'url'"},
    {BACKEND("{servers: [\"http://a:1\"], balance: round_robbin}"),
     "gw.yaml:2:43: unknown balance 'round_robbin' (did you mean 'round_robin'?)"},
    {BACKEND("{servers: [\"http://a:1\"], balance: random}"),
     "gw.yaml:2:43: unknown balance 'random' (expected round_robin, primary_for_writes, first_available, least_request or hash)"},
    {BACKEND("{servers: [\"http://a:1\"], retry_on: [connect-failure, 500]}"),
     "gw.yaml:2:62: unknown retry_on '500' (did you mean '502'?)"},
    {BACKEND("{servers: [\"http://a:1\"], retry_on: [timeout]}"),
     "gw.yaml:2:45: unknown retry_on 'timeout' (expected connect-failure, reset, 502, 503 or 504)"},
    {BACKEND("{servers: [\"http://a:1\"], retry_on: [rest]}"), "gw.yaml:2:45: unknown retry_on 'rest' (did you mean 'reset'?)"},
    {BACKEND("{servers: [\"http://a:1\"], retry_on: reset}"), "gw.yaml:2:44: expected a sequence, got a scalar"},
    {BACKEND("{servers: [\"http://a:1\"], retry_budget: 120%}"),
     "gw.yaml:2:48: retry_budget must be a percentage from 0% to 100% (like 50%)"},
    {BACKEND("{servers: [\"http://a:1\"], retry_backoff: soon}"),
     "gw.yaml:2:49: invalid duration 'soon' (expected e.g. 250ms, 5s, 2m, 1h)"},
    {BACKEND("{servers: [\"http://a:1\"], slow_start: -1s}"),
     "gw.yaml:2:46: invalid duration '-1s' (expected e.g. 250ms, 5s, 2m, 1h)"},
    {BACKEND("{servers: [\"http://a:1\"], balance: hash, hash_key: k, slow_start: 30s}"),
     "gw.yaml:2:74: slow_start is not used with balance: hash (it does not choose servers by weight; use round_robin, "
     "least_request or primary_for_writes)"},
    {BACKEND("{servers: [\"http://a:1\"], balance: first_available, slow_start: 1s}"),
     "gw.yaml:2:72: slow_start is not used with balance: first_available (it does not choose servers by weight; use "
     "round_robin, least_request or primary_for_writes)"},
    {BACKEND("{servers: [\"http://a:1\"], balance: hash}"), "gw.yaml:2:8: missing key 'hash_key' (required by balance: hash)"},
    {BACKEND("{servers: [\"http://a:1\"], hash_key: \"${tenant}\"}"), "gw.yaml:2:44: hash_key is only used with balance: hash"},
    {BACKEND("{servers: [\"http://a:1\"], balance: hash, hash_key: [a]}"), "gw.yaml:2:59: expected a scalar, got a sequence"},
    {BACKEND("{servers: [\"http://a:1\"], balance: primary_for_writes}"),
     "gw.yaml:2:8: missing key 'primary' (required by balance: primary_for_writes)"},
    {BACKEND("{servers: [\"http://a:1\"], balance: primary_for_writes, primary: \"http://b:1\"}"),
     "gw.yaml:2:72: primary 'http://b:1' is not one of the backend's servers"},
    {BACKEND("{servers: [\"http://a:1\"], primary: \"http://a:1\"}"),
     "gw.yaml:2:43: primary is only used with balance: primary_for_writes"},
    {BACKEND("{servers: [\"http://a:1\"], max_in_flight: 1000001}"),
     "gw.yaml:2:49: expected an integer between 0 and 1000000, got '1000001'"},
    {BACKEND("{servers: [\"http://a:1\"], max_in_flight: -1}"),
     "gw.yaml:2:49: expected an integer between 0 and 1000000, got '-1'"},
    {BACKEND("{servers: [\"http://a:1\"], queue_timeout: 0s}"), "gw.yaml:2:49: queue_timeout must be greater than 0"},
    {BACKEND("{servers: [\"http://a:1\"], queue_timeout: soon}"),
     "gw.yaml:2:49: invalid duration 'soon' (expected e.g. 250ms, 5s, 2m, 1h)"},
    {BACKEND("{servers: [\"http://a:1\"], max_queued_per_key: 1000001}"),
     "gw.yaml:2:54: expected an integer between 0 and 1000000, got '1000001'"},
    {BACKEND("{servers: [\"http://a:1\"], max_queued_per_key: -5}"),
     "gw.yaml:2:54: expected an integer between 0 and 1000000, got '-5'"},
    {BACKEND("{servers: [\"http://a:1\"], max_queued_per_key: [100]}"),
     "gw.yaml:2:54: expected an integer between 0 and 1000000, got a sequence"},
    {BACKEND("{servers: [\"http://a:1\"], max_queue_per_key: 5}"),
     "gw.yaml:2:34: unknown key 'max_queue_per_key' (did you mean 'max_queued_per_key'?)"},
    {BACKEND("{servers: [\"http://a:1\"], max_inflight: 5}"),
     "gw.yaml:2:34: unknown key 'max_inflight' (did you mean 'max_in_flight'?)"},
    {BACKEND("{servers: [\"http://a:1\"], retries: 11}"), "gw.yaml:2:43: expected an integer between 0 and 10, got '11'"},
    {BACKEND("{servers: [\"http://a:1\"], http_client: curl}"),
     "gw.yaml:2:47: unknown http_client 'curl' (expected builtin or libcurl)"},
    {BACKEND("{servers: [\"http://a:1\"], keepalive_timeout: 0s}"), "gw.yaml:2:53: keepalive_timeout must be greater than 0"},
    {BACKEND("{servers: [\"http://a:1\"], dns_refresh: never}"),
     "gw.yaml:2:47: invalid duration 'never' (expected e.g. 250ms, 5s, 2m, 1h)"},
    {BACKEND("{servers: [\"http://a:1\"], max_idle_connections: -1}"),
     "gw.yaml:2:56: expected an integer between 0 and 1000000, got '-1'"},
    {BACKEND("{servers: [\"http://a:1\"], connect_timeout: 0s}"), "gw.yaml:2:51: connect_timeout must be greater than 0"},
    {BACKEND("{servers: [\"http://a:1\"], timeout: fast}"),
     "gw.yaml:2:43: invalid duration 'fast' (expected e.g. 250ms, 5s, 2m, 1h)"},
    {BACKEND("{servers: [\"http://a:1\"], timeuot: 1s}"), "gw.yaml:2:34: unknown key 'timeuot' (did you mean 'timeout'?)"},
    {BACKEND("{servers: [\"http://a:1\"], outlier: 5}"), "gw.yaml:2:43: expected a mapping, got a scalar"},
    {BACKEND("{servers: [\"http://a:1\"], outlier: {consecutive_failure: 5}}"),
     "gw.yaml:2:44: unknown key 'consecutive_failure' (did you mean 'consecutive_failures'?)"},
    {BACKEND("{servers: [\"http://a:1\"], outlier: {consecutive_failures: -1}}"),
     "gw.yaml:2:66: expected an integer between 0 and 1000000, got '-1'"},
    {BACKEND("{servers: [\"http://a:1\"], outlier: {eject_for: 0s}}"), "gw.yaml:2:55: eject_for must be greater than 0"},
    {BACKEND("{servers: [\"http://a:1\"], outlier: {eject_for: 1m, max_eject_for: 30s}}"),
     "gw.yaml:2:74: max_eject_for must not be shorter than eject_for"},
    {BACKEND("{servers: [\"http://a:1\"], outlier: {max_ejected: 101%}}"),
     "gw.yaml:2:57: max_ejected must be a percentage from 0% to 100% (like 50%)"},
    {BACKEND("{servers: [\"http://a:1\"], outlier: {max_ejected: half}}"),
     "gw.yaml:2:57: max_ejected must be a percentage from 0% to 100% (like 50%)"},
    {BACKEND("{servers: [\"http://a:1\"], outlier: {max_ejected: 5%%}}"),
     "gw.yaml:2:57: max_ejected must be a percentage from 0% to 100% (like 50%)"},
    {BACKEND("{servers: [\"http://a:1\"], panic: maybe}"), "gw.yaml:2:41: expected true or false, got 'maybe'"},
    {BACKEND("{servers: [\"http://a:1\"], health: {interval: 1s}}"), "gw.yaml:2:42: missing key 'path'"},
    {BACKEND("{servers: [\"http://a:1\"], health: {path: healthz}}"),
     "gw.yaml:2:49: health path must start with '/' and hold no spaces or '#'"},
    {BACKEND("{servers: [\"http://a:1\"], health: {path: /h, interval: 0s}}"), "gw.yaml:2:63: interval must be greater than 0"},
    {BACKEND("{servers: [\"http://a:1\"], health: {path: /h, healthy: 0}}"),
     "gw.yaml:2:62: expected an integer between 1 and 1000, got '0'"},
    {BACKEND("{servers: [\"http://a:1\"], health: {path: /h, expect: 200-99}}"),
     "gw.yaml:2:61: expect must be a status or a range of statuses between 100 and 599 (like 200-399)"},
    {BACKEND("{servers: [\"http://a:1\"], health: {path: /h, expect: 2xx}}"),
     "gw.yaml:2:61: expect must be a status or a range of statuses between 100 and 599 (like 200-399)"},
    {BACKEND("{servers: [\"http://a:1\"], health: {path: /h, host: \"a b\"}}"), "gw.yaml:2:59: health host must be a host name"},
    {BACKEND("{servers: [\"http://a:1\"], health: {path: /h, headers: {\"a b\": c}}}"),
     "gw.yaml:2:63: invalid header 'a b' for the health check"},
    {BACKEND("{servers: [\"http://a:1\"], health: {path: /h, intervall: 1s}}"),
     "gw.yaml:2:53: unknown key 'intervall' (did you mean 'interval'?)"},
    {"backends:\n  \"\": {servers: [\"http://a:1\"]}\n" BASE, "gw.yaml:2:3: backend names must not be empty"},
    /* admin */
    {"admin: \":9901\"\n" BASE, "gw.yaml:1:8: expected a mapping, got a scalar"},
    {"admin: {}\n" BASE, "gw.yaml:1:8: missing key 'address'"},
    {"admin: {address: \"localhost:9901\"}\n" BASE,
     "gw.yaml:1:18: invalid address 'localhost:9901' (expected e.g. 127.0.0.1:9901, [::1]:9901, :9901)"},
    {"admin: {address: \"127.0.0.1:8080\"}\n" BASE,
     "gw.yaml:1:18: admin address '127.0.0.1:8080' is also a listen address ('127.0.0.1:8080')"},
    {"admin: {address: \":9901\", tokn: x}\n" BASE, "gw.yaml:1:27: unknown key 'tokn' (did you mean 'token'?)"},
    {"admin: {address: \":9901\", token: \"\"}\n" BASE,
     "gw.yaml:1:34: the admin token must not be empty (leave the key out for no token)"},
    {"admin: {address: \":9901\", token: \"a b\"}\n" BASE, "gw.yaml:1:34: the admin token must be printable ASCII without spaces"},
    {"admin: {address: \":9901\", token: [a]}\n" BASE, "gw.yaml:1:34: expected a string, got a sequence"},
    /* reload */
    {"reload: 1GiB\n" BASE, "gw.yaml:1:9: expected a mapping, got a scalar"},
    {"reload: {memory_limit: 63MiB}\n" BASE,
     "gw.yaml:1:24: reload.memory_limit must be at least 64MiB (the process that checks a file needs that much)"},
    {"reload: {memory_limit: lots}\n" BASE, "gw.yaml:1:24: invalid size 'lots' (expected e.g. 512, 64KiB, 10MiB)"},
    {"reload: {timeout: 0s}\n" BASE, "gw.yaml:1:19: timeout must be greater than 0"},
    {"reload: {timeuot: 1s}\n" BASE, "gw.yaml:1:10: unknown key 'timeuot' (did you mean 'timeout'?)"},
};

Test(config, bad_files_report_their_first_error_exactly)
{
    size_t n = sizeof(bad_configs) / sizeof(bad_configs[0]);
    cr_assert_geq(n, 20);
    for (size_t i = 0; i < n; i++) {
        mg_config_t *c = mg_config_load_string("gw.yaml", bad_configs[i].yaml, &errs);
        cr_expect_null(c, "#%zu accepted:\n%s", i, bad_configs[i].yaml);
        mg_config_free(c);
        if (errs.size == 0) {
            cr_expect_fail("#%zu: no error for:\n%s", i, bad_configs[i].yaml);
            continue;
        }
        cr_expect_str_eq(errs.entries[0].text, bad_configs[i].error, "#%zu: got\n  %s\nexpected\n  %s", i, errs.entries[0].text,
                         bad_configs[i].error);
        mg_errors_clear(&errs);
    }
}

Test(config, every_error_is_collected)
{
    conf = mg_config_load_string("gw.yaml",
                                 "listen:\n"
                                 "  - address: \"nowhere\"\n"
                                 "workers: 0\n"
                                 "limits: {max_request_body: lots}\n"
                                 "backends:\n"
                                 "  crm: {servers: [\"http://a\"], retries: -1}\n"
                                 "routes:\n"
                                 "  - name: r\n"
                                 "    respond: {status: 200}\n"
                                 "extra: 1\n",
                                 &errs);
    cr_assert_null(conf);
    static const char *const expected[] = {
        "gw.yaml:10:1: unknown key 'extra'",
        "gw.yaml:2:14: invalid address 'nowhere' (expected e.g. 127.0.0.1:8080, [::1]:8080, :8080)",
        "gw.yaml:3:10: expected an integer between 1 and 256, got '0'",
        "gw.yaml:4:28: invalid size 'lots' (expected e.g. 512, 64KiB, 10MiB)",
        "gw.yaml:6:19: invalid server url 'http://a': missing port",
        "gw.yaml:6:41: expected an integer between 0 and 10, got '-1'",
    };
    cr_assert_eq(errs.size, sizeof(expected) / sizeof(expected[0]));
    for (size_t i = 0; i < errs.size; i++)
        cr_assert_str_eq(errs.entries[i].text, expected[i]);
}

Test(config, routes_use_the_backends)
{
    conf = mg_config_load_string("gw.yaml", LISTEN "routes:\n  - name: r\n    forward: nope\n", &errs);
    cr_assert_null(conf);
    cr_assert_eq(errs.num_errors, 1);
    cr_assert_not_null(strstr(errs.entries[0].text, "gw.yaml:5:14: "), "%s", errs.entries[0].text);
    cr_assert_not_null(strstr(errs.entries[0].text, "'nope'"), "%s", errs.entries[0].text);
}

Test(config, an_invalid_backend_is_still_known_to_routes)
{
    conf = mg_config_load_string("gw.yaml", "backends:\n  crm: {servers: []}\n" LISTEN "routes:\n  - name: r\n    forward: crm\n",
                                 &errs);
    cr_assert_null(conf);
    cr_assert_eq(errs.num_errors, 1, "no 'undefined backend' on top of the real problem");
    cr_assert_str_eq(errs.entries[0].text, "gw.yaml:2:18: a backend needs at least one server");
}

Test(config, unreadable_file)
{
    conf = mg_config_load("/nonexistent/gw.yaml", &errs);
    cr_assert_null(conf);
    cr_assert_eq(errs.num_errors, 1);
    cr_assert_str_eq(errs.entries[0].text, "/nonexistent/gw.yaml: cannot open: No such file or directory");
}

/* ---------------------------------------------------------------------------------------
 * Reload, references, access log
 */
TestSuite(reload, .fini = teardown);

#define SETTINGS                                                                                                                   \
    "listen:\n  - address: \"127.0.0.1:8080\"\nworkers: 2\nadmin: {address: \"127.0.0.1:9901\", token: old}\n"                     \
    "limits: {max_request_body: 1MiB, max_header_size: 8KiB, client_idle_timeout: 5s, max_http2_streams: 10}\n"                    \
    "shutdown_timeout: 3s\n"
#define RUNNING SETTINGS ROUTES

/* two routes (RUNNING has one) */
#define ROUTES2 "routes:\n  - name: s\n    match: {path: /s}\n    respond: {status: 204}\n  - name: r\n    respond: {status: 200}\n"

static mg_config_t *running;

static void reload_teardown(void)
{
    mg_config_free(running);
    running = NULL;
    teardown();
}

TestSuite(reload_of, .fini = reload_teardown);

static mg_config_t *reload(const char *text)
{
    if (running == NULL) {
        running = mg_config_load_string("gw.yaml", RUNNING, &errs);
        cr_assert_not_null(running);
        mg_errors_clear(&errs);
    }
    conf = mg_config_reload_string(running, text, &errs);
    return conf;
}

Test(reload_of, the_same_file_is_the_next_generation_without_warnings)
{
    cr_assert_not_null(reload(RUNNING));
    cr_assert_eq(errs.size, 0, "%s", errs.size ? errs.entries[0].text : "");
    cr_assert_eq(conf->generation, 2);
    cr_assert_eq(atomic_load(&conf->refs), 1);
    cr_assert_str_eq(conf->file, "gw.yaml");
    running->generation = 41;
    mg_config_free(conf);
    cr_assert_eq(reload(RUNNING)->generation, 42);
}

/* A reload keeps the running admin address; it is what the warning must be about. */
Test(reload_of, an_exposed_admin_api_is_warned_about_as_it_will_run)
{
    running = mg_config_load_string("gw.yaml", BASE "admin: {address: \":9901\", token: t0k}\n", &errs);
    cr_assert_not_null(running);
    mg_errors_clear(&errs);
    /* the file moves the admin API to loopback (not applied before a restart) and drops the token */
    cr_assert_not_null(reload(BASE "admin: {address: \"127.0.0.1:9901\"}\n"));
    cr_assert_eq(errs.num_warnings, 2);
    cr_expect_str_eq(errs.entries[0].text,
                     "gw.yaml:6:18: warning: admin.address only changes with a restart: the running value is kept");
    cr_expect_str_eq(errs.entries[1].text,
                     "gw.yaml:6:18: warning: admin.address ':9901' is not a loopback address and no admin.token is set: whoever "
                     "can reach it can reload the configuration and send to, close or drain WebSocket sessions");
    mg_config_free(conf);
    mg_errors_clear(&errs);
    /* the same address without a token: one warning, from the file itself */
    cr_assert_not_null(reload(BASE "admin: {address: \":9901\"}\n"));
    cr_assert_eq(errs.num_warnings, 1);
    cr_expect(strstr(errs.entries[0].text, "no admin.token is set") != NULL, "%s", errs.entries[0].text);
}

Test(reload_of, new_values_of_reloadable_settings_are_taken)
{
    cr_assert_not_null(
        reload("listen:\n  - address: \"127.0.0.1:8080\"\nworkers: 2\n"
               "admin: {address: \"127.0.0.1:9901\"}\n"
               "limits: {max_request_body: 1MiB, max_header_size: 1KiB, client_idle_timeout: 5s, max_http2_streams: 10}\n"
               "access_log: \"-\"\n" ROUTES2));
    cr_assert_eq(errs.size, 0, "%s", errs.size ? errs.entries[0].text : "");
    cr_assert_eq(conf->limits.max_header_size, 1024);
    cr_assert_eq(conf->shutdown_timeout_ms, 10000, "back to the default");
    cr_assert_null(conf->admin.token, "the token can be removed");
    cr_assert_str_eq(conf->access_log, "-");
    cr_assert_eq(mg_routes_count(conf->routes), 2);
}

Test(reload_of, restart_only_settings_keep_their_running_values_with_a_warning)
{
    cr_assert_not_null(reload("listen:\n"                                          /* 1 */
                              "  - address: \"127.0.0.1:8081\"\n"                  /* 2 */
                              "workers: 7\n"                                       /* 3 */
                              "admin: {address: \"127.0.0.1:9902\", token: new}\n" /* 4 */
                              "limits:\n"                                          /* 5 */
                              "  max_request_body: 2MiB\n"                         /* 6 */
                              "  client_idle_timeout: 6s\n"                        /* 7 */
                              "  max_http2_streams: 11\n" ROUTES));
    static const char *const expected[] = {
        "gw.yaml:2:3: warning: listen only changes with a restart: the running value is kept",
        "gw.yaml:3:10: warning: workers only changes with a restart: the running value is kept",
        "gw.yaml:6:21: warning: limits.max_request_body only changes with a restart: the running value is kept",
        "gw.yaml:7:24: warning: limits.client_idle_timeout only changes with a restart: the running value is kept",
        "gw.yaml:8:22: warning: limits.max_http2_streams only changes with a restart: the running value is kept",
        "gw.yaml:4:18: warning: admin.address only changes with a restart: the running value is kept",
    };
    cr_assert_eq(errs.num_errors, 0);
    cr_assert_eq(errs.size, sizeof(expected) / sizeof(expected[0]));
    for (size_t i = 0; i < errs.size; i++)
        cr_assert_str_eq(errs.entries[i].text, expected[i]);
    cr_assert_eq(conf->num_listeners, 1);
    cr_assert_str_eq(conf->listeners[0].address, "127.0.0.1:8080");
    cr_assert_eq(ntohs(((const struct sockaddr_in *)&conf->listeners[0].addr)->sin_port), 8080);
    cr_assert_eq(conf->workers, 2);
    cr_assert_str_eq(conf->admin.address, "127.0.0.1:9901");
    cr_assert_eq(ntohs(((const struct sockaddr_in *)&conf->admin.addr)->sin_port), 9901);
    cr_assert_str_eq(conf->admin.token, "new", "the token is not restart-only");
    cr_assert_eq(conf->limits.max_request_body, 1 << 20);
    cr_assert_eq(conf->limits.client_idle_timeout_ms, 5000);
    cr_assert_eq(conf->limits.max_http2_streams, 10);
}

Test(reload_of, a_removed_section_is_warned_about_at_the_top)
{
    cr_assert_not_null(reload(LISTEN "workers: 2\n"
                                     "limits: {max_request_body: 1MiB, client_idle_timeout: 5s, max_http2_streams: 10}\n" ROUTES));
    cr_assert_eq(errs.size, 1);
    cr_assert_str_eq(errs.entries[0].text,
                     "gw.yaml:1:1: warning: admin.address only changes with a restart: the running value is kept");
    cr_assert_str_eq(conf->admin.address, "127.0.0.1:9901");
    cr_assert_null(conf->admin.token);
}

Test(reload_of, a_bad_file_reports_its_errors_and_leaves_the_running_one)
{
    cr_assert_null(reload(LISTEN "workers: 0\n" ROUTES "  - name: r\n    respond: {status: 200}\n"));
    cr_assert_eq(errs.num_errors, 2);
    cr_assert_str_eq(errs.entries[0].text, "gw.yaml:3:10: expected an integer between 1 and 256, got '0'");
    cr_assert_not_null(strstr(errs.entries[1].text, "gw.yaml:7:11: duplicate route name 'r'"), "%s", errs.entries[1].text);
    cr_assert_eq(running->generation, 1);
    cr_assert_eq(running->workers, 2);
    mg_errors_clear(&errs);
    cr_assert_null(reload("listen: [\n"));
    cr_assert_not_null(strstr(errs.entries[0].text, "gw.yaml:2:1: syntax error"), "%s", errs.entries[0].text);
}

Test(reload_of, the_file_itself)
{
    char dir[] = "/tmp/mg-test-reload-XXXXXX", path[512];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/gw.yaml", dir);
    FILE *fp = fopen(path, "w");
    fputs(RUNNING, fp);
    fclose(fp);
    running = mg_config_load(path, &errs);
    cr_assert_not_null(running);
    fp = fopen(path, "w");
    fputs(SETTINGS ROUTES2, fp);
    fclose(fp);
    conf = mg_config_reload(running, &errs);
    unlink(path);
    cr_assert_not_null(conf, "%s", errs.size ? errs.entries[0].text : "");
    cr_assert_eq(mg_routes_count(conf->routes), 2);
    cr_assert_eq(errs.size, 0);
    mg_config_free(conf);
    conf = mg_config_reload(running, &errs);
    rmdir(dir);
    cr_assert_null(conf);
    cr_assert_str_eq(errs.entries[0].text + strlen(path), ": cannot open: No such file or directory");
}

Test(reload, the_last_reference_frees)
{
    conf = mg_config_load_string("gw.yaml", BASE, &errs);
    cr_assert_eq(mg_config_retain(conf), conf);
    cr_assert_eq(atomic_load(&conf->refs), 2);
    mg_config_release(conf);
    cr_assert_eq(atomic_load(&conf->refs), 1);
    mg_config_release(conf); /* freed: LeakSanitizer and ASan tell if not, or twice */
    conf = NULL;
    mg_config_release(NULL);
}

Test(reload, access_log)
{
    char dir[] = "/tmp/mg-test-log-XXXXXX", text[512];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(text, sizeof(text), "access_log: %s/a.log\n" BASE, dir);
    load(text);
    cr_assert_eq(mg_config_open_access_log(conf, &errs), 0);
    cr_assert_geq(conf->access_log_fd, 3);
    cr_assert_eq(write(conf->access_log_fd, "x\n", 2), 2);
    mg_config_free(conf); /* closes it */
    snprintf(text, sizeof(text), "%s/a.log", dir);
    struct stat st;
    cr_assert_eq(stat(text, &st), 0);
    cr_assert_eq(st.st_size, 2);
    unlink(text);

    snprintf(text, sizeof(text), "access_log: %s/missing/a.log\n" BASE, dir);
    load(text);
    cr_assert_eq(mg_config_open_access_log(conf, &errs), -1);
    cr_assert_eq(conf->access_log_fd, -1);
    char expected[512];
    snprintf(expected, sizeof(expected), "gw.yaml: cannot open access log %s/missing/a.log: No such file or directory", dir);
    cr_assert_str_eq(errs.entries[0].text, expected);
    rmdir(dir);
    mg_config_free(conf);
    mg_errors_clear(&errs);

    load("access_log: \"-\"\n" BASE);
    cr_assert_eq(mg_config_open_access_log(conf, &errs), 0);
    cr_assert_eq(conf->access_log_fd, STDOUT_FILENO);
    mg_config_free(conf); /* does not close stdout */
    conf = NULL;
    cr_assert_neq(fcntl(STDOUT_FILENO, F_GETFD), -1);
}
