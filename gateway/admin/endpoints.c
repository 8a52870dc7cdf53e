/*
 * The admin API's calls: every call takes a reference on the current configuration for its
 * duration, checks the bearer token (when admin.token is set) and goes to its endpoint in
 * `endpoints` below: adding an endpoint is adding a row. Unknown path: 404; known path, other
 * method: 405 with Allow. The built-in endpoints (/healthz, /reload) and the answers every
 * endpoint sends are here too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include "gateway/admin/internal.h"
#include "gateway/process.h"

/* ---------------------------------------------------------------------------------------
 * Answers
 */
static const char *reason_of(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 422:
        return "Unprocessable Entity";
    case 503:
        return "Service Unavailable";
    default:
        return status < 500 ? "Client Error" : "Server Error";
    }
}

void mg_admin_send(h2o_req_t *req, int status, const char *content_type, const char *body, size_t len)
{
    req->res.status = status;
    req->res.reason = reason_of(status);
    req->res.content_length = len;
    if (content_type != NULL)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type, strlen(content_type));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    h2o_send_inline(req, body, len);
}

void mg_admin_send_json(h2o_req_t *req, int status, json_t *body)
{
    char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (text == NULL) {
        mg_admin_send(req, 500, "text/plain; charset=utf-8", H2O_STRLIT("cannot encode the response\n"));
        return;
    }
    size_t len = strlen(text);
    char *buf = h2o_mem_alloc_pool(&req->pool, len + 1);
    memcpy(buf, text, len);
    buf[len] = '\n';
    free(text);
    mg_admin_send(req, status, "application/json", buf, len + 1);
}

void mg_admin_send_error(h2o_req_t *req, int status, const char *message)
{
    mg_admin_send_json(req, status, json_pack("{s:s}", "error", message));
}

/* ---------------------------------------------------------------------------------------
 * The built-in endpoints
 */
static void admin_healthz(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    if (atomic_load(&gw->stopping))
        mg_admin_send(req, 503, "text/plain; charset=utf-8", H2O_STRLIT("stopping\n"));
    else
        mg_admin_send(req, 200, "text/plain; charset=utf-8", H2O_STRLIT("ok\n"));
}

static json_t *messages_of(const mg_errors_t *errs, int warnings)
{
    json_t *list = json_array();
    for (size_t i = 0; i < errs->size; i++)
        if (errs->entries[i].warning == warnings)
            json_array_append_new(list, json_string(errs->entries[i].text));
    return list;
}

/* 200 {"result":"ok","generation":N,"errors":[],"warnings":[...]} or, the running configuration
 * kept, 422 {"result":"failed","generation":<running>,"errors":["FILE:LINE:COL: ...",...],...}. */
static void admin_reload(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    mg_errors_t errs = {0};

    if (atomic_load(&gw->stopping)) {
        mg_admin_send_error(req, 503, "the gateway is stopping");
        return;
    }
    int ok = mg_gateway_reload(gw, &errs) == 0;
    json_t *body =
        json_pack("{s:s, s:I, s:o, s:o}", "result", ok ? "ok" : "failed", "generation", (json_int_t)atomic_load(&gw->generation),
                  "errors", messages_of(&errs, 0), "warnings", messages_of(&errs, 1));
    mg_errors_clear(&errs);
    mg_admin_send_json(req, ok ? 200 : 422, body);
}

/* ---------------------------------------------------------------------------------------
 * Calls
 */
static const mg_admin_endpoint_t endpoints[] = {
    {"GET", "/healthz", admin_healthz},
    {"GET", "/metrics", mg_admin_metrics},
    {"POST", "/reload", admin_reload},
    {"GET", "/tenants", mg_admin_tenants},
    {"GET", "/routes", mg_admin_routes},
    {"GET", "/backends", mg_admin_backends},
    {"GET", "/", mg_admin_dashboard, 1},
    {"GET", "/sessions", mg_admin_sessions},
    {"POST", "/sessions/*/*", mg_admin_session_action},
    {"POST", "/routes/*/broadcast", mg_admin_broadcast},
    {"POST", "/routes/*/split", mg_admin_split},
    {"GET", "/routes/*/canary", mg_admin_canary},
    {"POST", "/routes/*/canary/*", mg_admin_canary_action},
    {"POST", "/backends/*/servers/*/*", mg_admin_server_action},
};

static int path_matches(const char *pattern, h2o_iovec_t path)
{
    const char *p = path.base, *end = path.base + path.len;

    for (; *pattern != '\0'; pattern++) {
        if (*pattern == '*') {
            const char *seg = p;
            while (p < end && *p != '/')
                p++;
            if (p == seg)
                return 0;
        } else if (p == end || *p++ != *pattern) {
            return 0;
        }
    }
    return p == end;
}

static int method_matches(const mg_admin_endpoint_t *e, h2o_iovec_t method)
{
    return h2o_memis(method.base, method.len, e->method, strlen(e->method)) ||
           (strcmp(e->method, "GET") == 0 && h2o_memis(method.base, method.len, H2O_STRLIT("HEAD")));
}

const mg_admin_endpoint_t *mg__admin_route(h2o_iovec_t method, h2o_iovec_t path, char *allow, size_t size)
{
    size_t used = 0;
    allow[0] = '\0';
    for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
        if (!path_matches(endpoints[i].path, path))
            continue;
        if (method_matches(&endpoints[i], method))
            return &endpoints[i];
        snprintf(allow + used, size - used, "%s%s%s", used != 0 ? ", " : "", endpoints[i].method,
                 strcmp(endpoints[i].method, "GET") == 0 ? ", HEAD" : "");
        used = strlen(allow);
    }
    return NULL;
}

/* Both hashed first, so that the comparison takes the same time whatever the token's length
 * and whichever byte differs. */
int mg__admin_authorized(const char *token, const h2o_iovec_t *authorization)
{
    unsigned char given[SHA256_DIGEST_LENGTH], expected[SHA256_DIGEST_LENGTH];

    if (token == NULL)
        return 1;
    if (authorization == NULL)
        return 0;
    h2o_iovec_t v = *authorization;
    if (v.len < 7 || !h2o_lcstris(v.base, 7, H2O_STRLIT("bearer ")))
        return 0;
    size_t skip = 7;
    while (skip < v.len && v.base[skip] == ' ')
        skip++;
    SHA256((const unsigned char *)v.base + skip, v.len - skip, given);
    SHA256((const unsigned char *)token, strlen(token), expected);
    return CRYPTO_memcmp(given, expected, sizeof(given)) == 0;
}

/* Goes to the call's endpoint, or answers 404, or 405 with every method the path takes. */
static void route_call(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    char allow[128];
    const mg_admin_endpoint_t *e = mg__admin_route(req->method, req->path_normalized, allow, sizeof(allow));

    if (e != NULL) {
        e->handler(gw, conf, req);
    } else if (allow[0] == '\0') {
        mg_admin_send_error(req, 404, "no such endpoint");
    } else {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, h2o_strdup(&req->pool, allow, SIZE_MAX).base,
                       strlen(allow));
        mg_admin_send_error(req, 405, "method not allowed");
    }
}

void mg__admin_handle(mg_gateway_t *gw, h2o_req_t *req)
{
    mg_config_t *conf = mg_gateway_conf_acquire(gw);
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    char allow[128];
    const mg_admin_endpoint_t *e = mg__admin_route(req->method, req->path_normalized, allow, sizeof(allow));

    if ((e == NULL || !e->open) && !mg__admin_authorized(conf->admin.token, i >= 0 ? &req->headers.entries[i].value : NULL)) {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer realm=\"matchgate\""));
        mg_admin_send_error(req, 401, "a valid Authorization: Bearer token is required");
    } else {
        route_call(gw, conf, req);
    }
    mg_config_release(conf);
}
