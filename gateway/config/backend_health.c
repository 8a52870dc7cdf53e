/*
 * What a backend does about its servers' health: `outlier` (passive checks), `health` (active
 * checks), `panic`, the retry rules (`retry_on`, `retry_budget`, `retry_backoff`) and
 * `slow_start`. What they do at run time is gateway/backend/health.c's and servers.c's.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/config/internal.h"

#define MG_MAX_COUNT 1000000

/* A share written "50%" (or a bare 50), 0 to 100: its percent in *out, else an error. */
static void read_percent(mg_config_loader_t *cl, const mg_node_t *map, const char *key, unsigned *out)
{
    const mg_node_t *node = mg_node_get(map, key);
    const char *s;
    char *end;

    if (node == NULL || mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    unsigned long v = strtoul(s, &end, 10);
    if (end == s || *s == '-' || *s == '+' || (*end == '%' && end[1] != '\0') || (*end != '%' && *end != '\0') || v > 100) {
        mg_errors_add(cl->errs, node, "%s must be a percentage from 0%% to 100%% (like 50%%)", key);
        return;
    }
    *out = (unsigned)v;
}

/* outlier: {consecutive_failures, consecutive_5xx, eject_for, max_eject_for, max_ejected}; the
 * key present (even as {}) turns passive checks on with Envoy-like defaults. */
static void parse_outlier(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    static const char *const keys[] = {"consecutive_failures", "consecutive_5xx", "eject_for",
                                       "max_eject_for",        "max_ejected",     NULL};
    const mg_node_t *node = mg_node_get(map, "outlier");
    mg_outlier_conf_t *o = &backend->outlier;

    if (node == NULL || mg_node_expect(node, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    *o = (mg_outlier_conf_t){
        .consecutive_failures = 5, .eject_for_ms = 30000, .max_eject_for_ms = 300000, .max_ejected_percent = 50};
    mg_node_check_keys(node, keys, cl->errs);
    mg__config_read_uint(cl, node, "consecutive_failures", 0, MG_MAX_COUNT, &o->consecutive_failures);
    mg__config_read_uint(cl, node, "consecutive_5xx", 0, MG_MAX_COUNT, &o->consecutive_5xx);
    mg__config_read_duration(cl, node, "eject_for", 1, &o->eject_for_ms);
    mg__config_read_duration(cl, node, "max_eject_for", 1, &o->max_eject_for_ms);
    read_percent(cl, node, "max_ejected", &o->max_ejected_percent);
    if (o->max_eject_for_ms < o->eject_for_ms) {
        const mg_node_t *at = mg_node_get(node, "max_eject_for");
        mg_errors_add(cl->errs, at != NULL ? at : node, "max_eject_for must not be shorter than eject_for");
    }
}

/* expect: "200-399", "200" or 200: the statuses a check accepts. */
static void read_expect(mg_config_loader_t *cl, const mg_node_t *map, mg_health_conf_t *h)
{
    const mg_node_t *node = mg_node_get(map, "expect");
    const char *s;
    char *end, *end2;

    if (node == NULL || mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    unsigned long lo = strtoul(s, &end, 10), hi = lo;
    if (end != s && *end == '-')
        hi = strtoul(end + 1, &end2, 10), end = end2 == end + 1 ? end : end2;
    if (end == s || *end != '\0' || *s < '0' || *s > '9' || lo < 100 || hi > 599 || lo > hi) {
        mg_errors_add(cl->errs, node, "expect must be a status or a range of statuses between 100 and 599 (like 200-399)");
        return;
    }
    h->expect_min = (unsigned)lo;
    h->expect_max = (unsigned)hi;
}

static void read_health_headers(mg_config_loader_t *cl, const mg_node_t *map, mg_health_conf_t *h)
{
    const mg_node_t *node = mg_node_get(map, "headers");
    if (node == NULL || mg_node_expect(node, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    if ((h->headers = calloc(node->u.mapping.size + 1, sizeof(*h->headers))) == NULL)
        return;
    for (size_t i = 0; i < node->u.mapping.size; i++) {
        const mg_node_t *k = node->u.mapping.pairs[i].key, *v = node->u.mapping.pairs[i].value;
        const char *value;
        if (mg_node_to_str(v, &value, cl->errs) != 0)
            continue;
        if (!mg_is_token(k->u.scalar.str, k->u.scalar.len) || !mg_is_field_value(value, strlen(value))) {
            mg_errors_add(cl->errs, k, "invalid header '%s' for the health check", k->u.scalar.str);
            continue;
        }
        if (asprintf(&h->headers[h->num_headers], "%s: %s", k->u.scalar.str, value) >= 0)
            h->num_headers++;
    }
}

/* health: {path, interval, timeout, healthy, unhealthy, expect, host, headers}: active checks. */
static void parse_health(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    static const char *const keys[] = {"path", "interval", "timeout", "healthy", "unhealthy", "expect", "host", "headers", NULL};
    const mg_node_t *node = mg_node_get(map, "health"), *path;
    mg_health_conf_t *h = &backend->health;
    const char *s;

    if (node == NULL || mg_node_expect(node, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(node, keys, cl->errs);
    h->interval_ms = 5000;
    h->timeout_ms = 1000;
    h->healthy = 2;
    h->unhealthy = 3;
    h->expect_min = 200;
    h->expect_max = 399;
    if ((path = mg_node_require(node, "path", cl->errs)) != NULL && mg_node_to_str(path, &s, cl->errs) == 0) {
        if (s[0] != '/' || strpbrk(s, " \t\r\n#") != NULL)
            mg_errors_add(cl->errs, path, "health path must start with '/' and hold no spaces or '#'");
        else
            h->path = mg__config_copy_str(cl, path, s);
    }
    mg__config_read_duration(cl, node, "interval", 1, &h->interval_ms);
    mg__config_read_duration(cl, node, "timeout", 1, &h->timeout_ms);
    mg__config_read_uint(cl, node, "healthy", 1, 1000, &h->healthy);
    mg__config_read_uint(cl, node, "unhealthy", 1, 1000, &h->unhealthy);
    read_expect(cl, node, h);
    const mg_node_t *host = mg_node_get(node, "host");
    if (host != NULL && mg_node_to_str(host, &s, cl->errs) == 0) {
        if (s[0] == '\0' || !mg_is_field_value(s, strlen(s)) || strpbrk(s, " \t/") != NULL)
            mg_errors_add(cl->errs, host, "health host must be a host name");
        else
            h->host = mg__config_copy_str(cl, host, s);
    }
    read_health_headers(cl, node, h);
}

/* retry_on: [connect-failure, reset, 502, 503, 504] */
static void parse_retry_on(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    static const char *const names[] = {"connect-failure", "reset", "502", "503", "504", NULL};
    const mg_node_t *node = mg_node_get(map, "retry_on");
    if (node == NULL || mg_node_expect(node, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    backend->retry_on = 0;
    for (size_t i = 0; i < node->u.sequence.size; i++) {
        const mg_node_t *item = node->u.sequence.items[i];
        const char *s, *guess;
        if (mg_node_to_str(item, &s, cl->errs) != 0)
            continue;
        size_t k = 0;
        while (names[k] != NULL && strcmp(names[k], s) != 0)
            k++;
        if (names[k] != NULL)
            backend->retry_on |= 1u << k;
        else if ((guess = mg_closest_word(s, names)) != NULL)
            mg_errors_add(cl->errs, item, "unknown retry_on '%s' (did you mean '%s'?)", s, guess);
        else
            mg_errors_add(cl->errs, item, "unknown retry_on '%s' (expected connect-failure, reset, 502, 503 or 504)", s);
    }
}

/* slow_start: the balances that weigh servers ramp a returning one up (gateway/backend/health.c);
 * hash and first_available do not choose by weight, so there it would mean nothing. */
static void parse_slow_start(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    const mg_node_t *node = mg_node_get(map, "slow_start");
    if (node == NULL)
        return;
    mg__config_read_duration(cl, map, "slow_start", 0, &backend->slow_start_ms);
    if (backend->slow_start_ms != 0 && (backend->balance == MG_BALANCE_HASH || backend->balance == MG_BALANCE_FIRST_AVAILABLE))
        mg_errors_add(cl->errs, node,
                      "slow_start is not used with balance: %s (it does not choose servers by weight; use round_robin, "
                      "least_request or primary_for_writes)",
                      mg_balance_name(backend->balance));
}

void mg__config_parse_backend_health(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    parse_outlier(cl, backend, map);
    parse_health(cl, backend, map);
    backend->retry_on = MG_RETRY_CONNECT_FAILURE;
    parse_retry_on(cl, backend, map);
    read_percent(cl, map, "retry_budget", &backend->retry_budget_percent);
    mg__config_read_duration(cl, map, "retry_backoff", 0, &backend->retry_backoff_ms);
    parse_slow_start(cl, backend, map);
    const mg_node_t *panic = mg_node_get(map, "panic");
    if (panic != NULL)
        mg_node_to_bool(panic, &backend->panic, cl->errs);
}
