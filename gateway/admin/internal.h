/*
 * What gateway/admin's files share, and only they: how an endpoint answers, the endpoints, and
 * how a call finds its endpoint (endpoints.c).
 */
#ifndef MG_GATEWAY_ADMIN_INTERNAL_H
#define MG_GATEWAY_ADMIN_INTERNAL_H

#include <jansson.h>
#include "gateway/admin/admin.h"

/* An endpoint: answers `req` before returning (with mg_admin_send*). `conf` is the current
 * configuration, valid until the handler returns (mg_config_retain it to keep it longer). */
typedef void (*mg_admin_handler_t)(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);

/* ---------------------------------------------------------------------------------------
 * Answers (endpoints.c)
 */

/* A complete response: status, Content-Type (NULL: none), the body (copied). */
void mg_admin_send(h2o_req_t *req, int status, const char *content_type, const char *body, size_t len);
/* A JSON response (application/json); takes ownership of `body`. */
void mg_admin_send_json(h2o_req_t *req, int status, json_t *body);
/* An error: {"error": message} with `status`. */
void mg_admin_send_error(h2o_req_t *req, int status, const char *message);

/* ---------------------------------------------------------------------------------------
 * Endpoints: GET /healthz and POST /reload (endpoints.c), GET /metrics (metrics.c), GET /tenants
 * (tenants.c), GET /sessions, POST /sessions/{id}/{send,close,abort,drain} and POST
 * /routes/{name}/broadcast (sessions.c).
 */
void mg_admin_metrics(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
void mg_admin_tenants(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
/* GET /routes (routes.c): the route tree with hit counts. */
void mg_admin_routes(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
/* The per-route series of GET /metrics (route_metrics.c). */
void mg_admin_route_metrics(FILE *out, const mg_config_t *conf);
/* The authenticators' outcomes and JWKS keys (auth_metrics.c). */
void mg_admin_auth_metrics(FILE *out, const mg_config_t *conf);
/* GET /backends (backends.c): the backends in use, their scheduler figures, their servers with health. */
void mg_admin_backends(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
/* GET / (dashboard.c): the dashboard page, served without the token (it holds no data). */
void mg_admin_dashboard(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
void mg_admin_sessions(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
void mg_admin_session_action(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
void mg_admin_broadcast(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
/* GET /routes/{name}/canary and POST /routes/{name}/canary/{pause,resume,promote,abort} (canary.c). */
void mg_admin_canary(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
void mg_admin_canary_action(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
/* POST /routes/{name}/split (splits.c): the route's split weights set at run time. */
void mg_admin_split(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
/* A split's legs with the weights in force and the file's, and its sticky template (routes.c). */
json_t *mg__admin_split_json(const mg_route_split_t *s);
/* POST /backends/{name}/servers/{index}/{drain,disable,enable} (backends.c). */
void mg_admin_server_action(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req);
/* Per server of every backend: traffic, ejections, state (backends.c). */
void mg_admin_put_server_metrics(FILE *out, const mg_config_t *conf);
/* The n-th segment (0-based) of the request's normalized path, in its pool; NULL past the end. */
const char *mg__admin_segment(h2o_req_t *req, int n);
/* A Prometheus label value: backslash, double quote and newline escaped (metrics.c). */
void mg__admin_put_label(FILE *out, const char *value);

/* ---------------------------------------------------------------------------------------
 * Calls (endpoints.c)
 */

/* A row of the endpoint table. `path` is matched against the normalized path without the query;
 * a segment "*" in it matches any one non-empty segment. GET endpoints answer HEAD too. */
typedef struct mg_admin_endpoint {
    const char *method;
    const char *path;
    mg_admin_handler_t handler;
    int open; /* served without admin.token: only what holds no data (the dashboard page) */
} mg_admin_endpoint_t;

/* The endpoint of a call, or NULL: then `allow` (`size` bytes) lists the methods its path takes,
 * "GET, HEAD, POST" style: empty for a path no endpoint has (404), else a 405 with Allow. */
const mg_admin_endpoint_t *mg__admin_route(h2o_iovec_t method, h2o_iovec_t path, char *allow, size_t size);
/* 1 when a call may go on: admin.token is not set (`token` NULL), or `authorization` (NULL: the
 * call has none) is "Bearer <token>" (scheme in any case, spaces after it). Compared in time that
 * does not depend on where the values differ. */
int mg__admin_authorized(const char *token, const h2o_iovec_t *authorization);
/* Answers one call on the admin listener: the token, then its endpoint, on the configuration
 * current when it came. */
void mg__admin_handle(mg_gateway_t *gw, h2o_req_t *req);

#endif
