/*
 * `matchgate --check --print`: the configuration as it was understood, every default filled in
 * (nginx -T), as YAML in the file's own keys. Durations in milliseconds, sizes in bytes, conditions
 * as the route tree describes them (JSON, which is YAML), templates as written. The admin token is
 * not printed, and a bridge is summed up in a comment (its options are as the file says).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/config/internal.h"

void mg__config_print_str(FILE *out, const char *s, size_t len)
{
    fputc('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void put_cstr(FILE *out, const char *s)
{
    mg__config_print_str(out, s, strlen(s));
}

static void put_ms(FILE *out, const char *indent, const char *key, uint64_t ms)
{
    fprintf(out, "%s%s: %" PRIu64 "ms\n", indent, key, ms);
}

static void put_u64(FILE *out, const char *indent, const char *key, uint64_t v)
{
    fprintf(out, "%s%s: %" PRIu64 "\n", indent, key, v);
}

static void put_quota(FILE *out, mg_quota_t q)
{
    fprintf(out, "{requests: %" PRIu32 ", per: %" PRIu64 "ms}", q.requests, q.per_us / 1000);
}

static void put_globals(FILE *out, const mg_config_t *conf)
{
    const mg_limits_conf_t *l = &conf->limits;
    const mg_websocket_conf_t *w = &conf->websocket;
    fputs("listen:\n", out);
    for (size_t i = 0; i < conf->num_listeners; i++) {
        fputs("  - address: ", out);
        put_cstr(out, conf->listeners[i].address);
        if (conf->listeners[i].tls_certificate != NULL) {
            fputs("\n    tls: {certificate: ", out);
            put_cstr(out, conf->listeners[i].tls_certificate);
            fputs(", key: ", out);
            put_cstr(out, conf->listeners[i].tls_key);
            fputc('}', out);
        }
        fputc('\n', out);
    }
    put_u64(out, "", "workers", conf->workers);
    put_ms(out, "", "shutdown_timeout", conf->shutdown_timeout_ms);
    if (conf->access_log != NULL) {
        fputs("access_log:\n  path: ", out);
        put_cstr(out, conf->access_log);
        fprintf(out, "\n  format: %s\n  fields: [", conf->access_log_combined ? "combined" : "json");
        for (size_t i = 0; i < conf->num_access_log_fields; i++)
            fprintf(out, "%s%s", i != 0 ? ", " : "", conf->access_log_fields[i]);
        fputs("]\n", out);
    }
    fputs("limits:\n", out);
    put_u64(out, "  ", "max_request_body", l->max_request_body);
    put_u64(out, "  ", "max_header_size", l->max_header_size);
    put_ms(out, "  ", "client_idle_timeout", l->client_idle_timeout_ms);
    if (l->tls_handshake_timeout_ms != 0)
        put_ms(out, "  ", "tls_handshake_timeout", l->tls_handshake_timeout_ms);
    put_u64(out, "  ", "max_http2_streams", l->max_http2_streams);
    put_u64(out, "  ", "max_requests_per_connection_per_second", l->max_requests_per_connection_per_second);
    put_u64(out, "  ", "max_requests_per_connection", l->max_requests_per_connection);
    fprintf(out, "  escaped_slashes: %s\n", l->keep_escaped_slashes ? "keep" : "reject");
    if (l->max_connections != 0)
        put_u64(out, "  ", "max_connections", l->max_connections);
    else
        fputs("  max_connections: auto\n", out);
    put_u64(out, "  ", "max_connections_per_client", l->max_connections_per_client);
    put_ms(out, "  ", "client_header_timeout", l->client_header_timeout_ms);
    put_u64(out, "  ", "max_buffered_request_bytes", l->max_buffered_request_bytes);
    put_u64(out, "  ", "auth_cache_entries", l->auth_cache_entries != 0 ? l->auth_cache_entries : MG_AUTH_DEFAULT_CACHE_ENTRIES);
    fputs("websocket:\n", out);
    put_ms(out, "  ", "idle_timeout", w->idle_timeout_ms);
    put_ms(out, "  ", "ping_interval", w->ping_interval_ms);
    put_ms(out, "  ", "close_timeout", w->close_timeout_ms);
    put_u64(out, "  ", "max_message_size", w->max_message_size);
    put_u64(out, "  ", "max_queued_messages", w->max_queued_messages);
    fprintf(out, "  on_token_expiry: %s\n", w->keep_expired_sessions ? "keep" : "close");
}

static void put_template(FILE *out, const mg_template_t *t)
{
    mg_str_t s = mg_template_source(t);
    mg__config_print_str(out, s.base, s.len);
}

/* protocol, tls and the builtin client's keys of a backend. */
static void put_backend_transport(FILE *out, const mg_backend_conf_t *b)
{
    static const char *const protocols[] = {"http1", "h2", "h2c"};
    const mg_backend_tls_conf_t *tls = &b->tls;
    fprintf(out, "    protocol: %s\n", protocols[b->protocol]);
    if (tls->ca != NULL || tls->server_name != NULL || tls->certificate != NULL || !tls->verify) {
        fprintf(out, "    tls: {verify: %s", tls->verify ? "true" : "false");
        const char *keys[] = {"ca", "server_name", "certificate", "key"};
        const char *values[] = {tls->ca, tls->server_name, tls->certificate, tls->key};
        for (size_t i = 0; i < 4; i++) {
            if (values[i] == NULL)
                continue;
            fprintf(out, ", %s: ", keys[i]);
            put_cstr(out, values[i]);
        }
        fputs("}\n", out);
    }
    fprintf(out, "    http_client: %s\n", b->http_client == MG_HTTP_CLIENT_LIBCURL ? "libcurl" : "builtin");
    put_ms(out, "    ", "keepalive_timeout", b->keepalive_timeout_ms);
    put_u64(out, "    ", "max_idle_connections", b->max_idle_connections);
    put_ms(out, "    ", "dns_refresh", b->dns_refresh_ms);
}

/* hash_key, outlier, health, panic and the retry rules of a backend. */
static void put_backend_health(FILE *out, const mg_backend_conf_t *b)
{
    static const char *const retry_names[] = {"connect-failure", "reset", "502", "503", "504"};
    const mg_outlier_conf_t *o = &b->outlier;
    const mg_health_conf_t *h = &b->health;
    if (b->hash_key != NULL) {
        fputs("    hash_key: ", out);
        put_template(out, b->hash_key);
        fputc('\n', out);
    }
    if (o->consecutive_failures != 0 || o->consecutive_5xx != 0)
        fprintf(out,
                "    outlier: {consecutive_failures: %u, consecutive_5xx: %u, eject_for: %" PRIu64 "ms, max_eject_for: %" PRIu64
                "ms, max_ejected: %u%%}\n",
                o->consecutive_failures, o->consecutive_5xx, o->eject_for_ms, o->max_eject_for_ms, o->max_ejected_percent);
    if (h->path != NULL) {
        fputs("    health: {path: ", out);
        put_cstr(out, h->path);
        fprintf(out, ", interval: %" PRIu64 "ms, timeout: %" PRIu64 "ms, healthy: %u, unhealthy: %u, expect: \"%u-%u\"",
                h->interval_ms, h->timeout_ms, h->healthy, h->unhealthy, h->expect_min, h->expect_max);
        if (h->host != NULL) {
            fputs(", host: ", out);
            put_cstr(out, h->host);
        }
        if (h->num_headers != 0)
            fprintf(out, "}  # and %zu header(s), not shown\n", h->num_headers);
        else
            fputs("}\n", out);
    }
    fprintf(out, "    panic: %s\n    retry_on: [", b->panic ? "true" : "false");
    for (unsigned i = 0, n = 0; i < 5; i++)
        if (b->retry_on & (1u << i))
            fprintf(out, "%s%s", n++ != 0 ? ", " : "", retry_names[i]);
    fprintf(out, "]\n    retry_budget: %u%%\n", b->retry_budget_percent);
    put_ms(out, "    ", "retry_backoff", b->retry_backoff_ms);
    put_ms(out, "    ", "slow_start", b->slow_start_ms);
}

static void put_backend(FILE *out, const mg_backend_conf_t *b)
{
    fputs("  ", out);
    put_cstr(out, b->name);
    fputs(":\n    servers:\n", out);
    for (size_t i = 0; i < b->num_servers; i++) {
        fputs("      - {url: ", out);
        put_cstr(out, b->servers[i].url);
        fprintf(out, ", weight: %u}\n", b->servers[i].weight);
    }
    fprintf(out, "    balance: %s\n", mg_balance_name(b->balance));
    if (b->primary != NULL) {
        fputs("    primary: ", out);
        put_cstr(out, b->primary);
        fputc('\n', out);
    }
    put_ms(out, "    ", "connect_timeout", b->connect_timeout_ms);
    put_ms(out, "    ", "timeout", b->timeout_ms);
    put_u64(out, "    ", "retries", b->retries);
    put_u64(out, "    ", "max_in_flight", b->max_in_flight);
    put_ms(out, "    ", "queue_timeout", b->queue_timeout_ms);
    put_u64(out, "    ", "max_queued_per_key", b->max_queued_per_key);
    put_backend_transport(out, b);
    put_backend_health(out, b);
}

static void put_tenants(FILE *out, const mg_tenants_conf_t *tc)
{
    static const char *const kinds[] = {"header", "host", "path", "claim", "api_key"};
    if (tc->num_identify == 0) { /* no section: no request has a tenant (the section needs a rule) */
        fprintf(out, "# tenants: none (max_keys %" PRIu64 ")\n", tc->max_keys);
        return;
    }
    fputs("tenants:\n  identify:\n", out);
    for (size_t i = 0; i < tc->num_identify; i++) {
        const mg_identify_rule_t *r = &tc->identify[i];
        fprintf(out, "    - %s: ", kinds[r->kind]);
        if (r->kind == MG_IDENTIFY_HEADER || r->kind == MG_IDENTIFY_CLAIM)
            put_cstr(out, r->header);
        else if (r->kind == MG_IDENTIFY_API_KEY)
            fputs("tenant", out);
        else
            mg__config_print_str(out, mg_regex_pattern(r->regex).base, mg_regex_pattern(r->regex).len);
        fputc('\n', out);
    }
    fprintf(out, "  unidentified: %s\n", tc->reject_unidentified ? "reject" : "allow");
    if (tc->default_quota.requests != 0) {
        fputs("  default_quota: ", out);
        put_quota(out, tc->default_quota);
        fputc('\n', out);
    }
    fputs(tc->num_quotas != 0 ? "  quotas:\n" : "  quotas: {}\n", out);
    for (size_t i = 0; i < tc->num_quotas; i++) {
        fputs("    ", out);
        put_cstr(out, tc->quotas[i].tenant);
        fputs(": ", out);
        put_quota(out, tc->quotas[i].quota);
        fputc('\n', out);
    }
    put_u64(out, "  ", "max_keys", tc->max_keys);
    mg__config_print_trusted_proxies(tc, out);
    if (tc->store.store != NULL) {
        static const char *const policies[] = {"local", "allow", "reject"};
        /* a comment, not the key: the password is a secret (never printed, like the admin token),
         * and so the printed file checks again without it */
        fprintf(out, "  # store: redis %s, timeout %" PRIu64 "ms, on_failure %s, nodes %u (password and key_prefix not shown)\n",
                tc->store.redis, tc->store.timeout_ms, policies[tc->store.on_failure], tc->store.nodes);
    }
}

void mg__config_print_condition(FILE *out, const mg_matcher_t *m)
{
    char probe[1];
    size_t len = mg_matcher_describe(m, probe, sizeof(probe));
    char *buf = malloc(len + 1);
    if (buf == NULL)
        return;
    mg_matcher_describe(m, buf, len + 1);
    fputs(buf, out);
    free(buf);
}

void mg__config_print_actions(FILE *out, const char *key, const mg_action_t *actions, size_t num, const char *indent)
{
    static const char *const names[] = {"set_header", "add_header", "remove_header", "rewrite_path", "set_method", "set_query"};
    if (num == 0)
        return;
    fprintf(out, "%s%s:\n", indent, key);
    for (size_t i = 0; i < num; i++) {
        const mg_action_t *a = &actions[i];
        fprintf(out, "%s  - ", indent);
        if (a->always) /* beside the action, in the same item */
            fprintf(out, "always: true\n%s    ", indent);
        fprintf(out, "%s: ", names[a->kind]);
        if (a->kind == MG_ACTION_SET_HEADER || a->kind == MG_ACTION_ADD_HEADER) {
            fputc('{', out);
            mg__config_print_str(out, a->name.base, a->name.len);
            fputs(": ", out);
            put_template(out, a->value);
            fputc('}', out);
        } else if (a->kind == MG_ACTION_REMOVE_HEADER || a->kind == MG_ACTION_SET_METHOD) {
            mg__config_print_str(out, a->name.base, a->name.len);
        } else {
            put_template(out, a->value);
        }
        fputc('\n', out);
    }
}

/* `forward: {split: [...], sticky: T` (the caller closes the mapping): the weights of the file,
 * as --print shows what the file says (GET /routes shows those in force). */
static void put_split(FILE *out, const mg_route_split_t *s, const char *indent)
{
    fprintf(out, "%sforward: {split: [", indent);
    for (size_t i = 0; i < s->num_legs; i++) {
        fputs(i != 0 ? ", {backend: " : "{backend: ", out);
        put_cstr(out, s->legs[i].backend_name);
        fprintf(out, ", weight: %" PRIu32 "}", s->legs[i].file_weight);
    }
    fputs("]", out);
    if (s->sticky != NULL) {
        fputs(", sticky: ", out);
        put_template(out, s->sticky);
    }
    if (s->canary != NULL) {
        const mg_canary_t *c = s->canary;
        fputs(", canary: {to: ", out);
        put_cstr(out, s->legs[c->to].backend_name);
        for (size_t i = 0; i < c->num_steps; i++)
            fprintf(out, "%s%" PRIu32, i == 0 ? ", steps: [" : ", ", c->steps[i]);
        fprintf(out, "], interval: %" PRIu64 "ms, min_requests: %" PRIu64 ", max_error_ratio: %g", c->interval_ms, c->min_requests,
                c->max_error_ratio);
        if (c->max_p99_us != UINT64_MAX)
            fprintf(out, ", max_p99: %" PRIu64 "ms", c->max_p99_us / 1000);
        fputc('}', out);
    }
}

static void put_terminal(FILE *out, const mg_route_t *r, const char *indent)
{
    switch (r->kind) {
    case MG_ROUTE_FORWARD:
        if (r->forward.split != NULL) {
            put_split(out, r->forward.split, indent);
            if (r->forward.host != NULL) {
                fputs(", host: ", out);
                put_template(out, r->forward.host);
            }
            fputs("}\n", out);
            break;
        }
        fprintf(out, "%sforward: {backend: ", indent);
        put_cstr(out, r->forward.backend_name);
        if (r->forward.host != NULL) {
            fputs(", host: ", out);
            put_template(out, r->forward.host);
        }
        fputs("}\n", out);
        break;
    case MG_ROUTE_RESPOND:
        fprintf(out, "%srespond: {status: %d, body: ", indent, r->respond->status);
        mg__config_print_str(out, r->respond->body != NULL ? r->respond->body : "", r->respond->body_len);
        for (size_t i = 0; i < r->respond->num_headers; i++) {
            fputs(i == 0 ? ", headers: {" : ", ", out);
            mg__config_print_str(out, r->respond->headers[i].name.base, r->respond->headers[i].name.len);
            fputs(": ", out);
            mg__config_print_str(out, r->respond->headers[i].value.base, r->respond->headers[i].value.len);
        }
        fputs(r->respond->num_headers != 0 ? "}}\n" : "}\n", out);
        break;
    case MG_ROUTE_REDIRECT:
        fprintf(out, "%sredirect: {location: ", indent);
        put_template(out, r->redirect->location);
        fprintf(out, ", status: %d}\n", r->redirect->status);
        break;
    case MG_ROUTE_BRIDGE:
        /* the bridge's options are many; its backend and path say where messages go */
        fprintf(out, "%s# bridge: backend %s, path %.*s (see the file for the rest)\n", indent, r->bridge->backend_name,
                (int)mg_template_source(r->bridge->path).len, mg_template_source(r->bridge->path).base);
        break;
    default:
        break;
    }
}

static void put_mirrors(FILE *out, const mg_route_mirrors_t *ms, const char *indent)
{
    fprintf(out, "%smirror:\n", indent);
    for (size_t i = 0; i < ms->size; i++) {
        const mg_route_mirror_t *m = &ms->items[i];
        fprintf(out, "%s  - {backend: ", indent);
        put_cstr(out, m->backend_name);
        fprintf(out, ", percent: %" PRIu32 ", max_in_flight: %" PRIu32 ", timeout: %" PRIu64 "ms, max_body: %" PRIu64, m->percent,
                m->max_in_flight, m->timeout_ms, m->max_body);
        if (m->sticky != NULL) {
            fputs(", sticky: ", out);
            put_template(out, m->sticky);
        }
        fputs(m->compare_status ? ", compare: status}\n" : "}\n", out);
    }
}

static void put_routes(FILE *out, mg_route_t *const *list, size_t n, int depth);

static void put_route(FILE *out, const mg_route_t *r, int depth)
{
    char indent[128];
    snprintf(indent, sizeof(indent), "%*s", 2 * depth + 4, "");
    fprintf(out, "%*s- name: ", 2 * depth + 2, "");
    put_cstr(out, r->name);
    fputc('\n', out);
    if (r->match != NULL) {
        fprintf(out, "%smatch: ", indent);
        mg__config_print_condition(out, r->match);
        fputc('\n', out);
    }
    mg__config_print_route_auth(r, indent, out);
    mg__config_print_actions(out, "actions", r->actions, r->num_actions, indent);
    mg__config_print_route_response(r, indent, out);
    if (r->quota != NULL) {
        fprintf(out, "%squota: {requests: %" PRIu32 ", per: %" PRIu64 "ms", indent, r->quota->limit.requests,
                r->quota->limit.per_us / 1000);
        if (r->quota->key != NULL) {
            fputs(", key: ", out);
            put_template(out, r->quota->key);
        }
        fputs("}\n", out);
    }
    if (r->order != NULL) {
        fprintf(out, "%sorder: {key: ", indent);
        put_template(out, r->order->key);
        if (r->order->priority_header != NULL)
            fprintf(out, ", priority_header: %s", r->order->priority_header);
        fputs("}\n", out);
    }
    put_terminal(out, r, indent);
    if (r->mirrors != NULL)
        put_mirrors(out, r->mirrors, indent);
    if (r->kind == MG_ROUTE_BRANCH) {
        fprintf(out, "%sroutes:\n", indent);
        put_routes(out, r->children, r->num_children, depth + 1);
    }
}

static void put_routes(FILE *out, mg_route_t *const *list, size_t n, int depth)
{
    for (size_t i = 0; i < n; i++)
        put_route(out, list[i], depth);
}

void mg_config_print(const mg_config_t *conf, FILE *out)
{
    fprintf(out, "# %s as matchgate understood it, defaults filled in (matchgate --check --print)\n", conf->file);
    put_globals(out, conf);
    fputs(conf->num_backends != 0 ? "backends:\n" : "backends: {}\n", out);
    for (size_t i = 0; i < conf->num_backends; i++)
        put_backend(out, &conf->backends[i]);
    mg__config_print_auth(&conf->auth, out);
    put_tenants(out, &conf->tenants);
    if (conf->admin.address != NULL) {
        fputs("admin:\n  address: ", out);
        put_cstr(out, conf->admin.address);
        fputs(conf->admin.token != NULL ? "\n  # token: set, not printed\n" : "\n", out);
    }
    if (conf->compress != NULL)
        mg__config_print_compress(out, "", conf->compress, 1);
    fputs("reload:\n", out);
    put_u64(out, "  ", "memory_limit", conf->reload.memory_limit);
    put_ms(out, "  ", "timeout", conf->reload.timeout_ms);
    fputs(conf->routes != NULL && conf->routes->size != 0 ? "routes:\n" : "routes: []\n", out);
    if (conf->routes != NULL)
        put_routes(out, conf->routes->routes, conf->routes->size, 0);
}
