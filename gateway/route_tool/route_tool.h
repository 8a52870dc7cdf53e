/*
 * `matchgate route`: where a request would go, without sending it (Envoy's router_check_tool).
 * The request goes through what the request handler runs: mg_request_prepare, mg_routes_match
 * (with the explain hook, mg_ctx_t.trace), mg_route_quota_key, mg_route_apply; nothing is sent.
 * route_tool.c explains one request, route_expect.c checks a file of them.
 */
#ifndef MG_GATEWAY_ROUTE_TOOL_H
#define MG_GATEWAY_ROUTE_TOOL_H

#include <jansson.h>
#include "gateway/config/config.h"

/* One request to explain: METHOD URL and its header lines ("Name: value"). */
typedef struct mg_route_query {
    const char *method;
    const char *url; /* "https://host/path?q", or "/path?q" (then the Host comes from a header) */
    const char *const *headers;
    size_t num_headers;
    const char *peer;     /* the client address routes and templates see; NULL: 127.0.0.1 */
    const json_t *claims; /* a JSON object standing for a verified credential's claims (--expect `claims:`); NULL: none */
    /* the backend's answer the route's edits are shown on (--expect `response:`): its status (0:
     * 200) and field lines ("Name: value") */
    int answer_status;
    const char *const *answer_headers;
    size_t num_answer_headers;
} mg_route_query_t;

/*
 * Explains `q` under `conf`: a JSON object (docs/operating.md lists its keys) with the outcome
 * ("forward", "bridge", "respond", "redirect", "no-route", "refused"), the route chosen and its
 * branches, the routes tried and the conditions that failed, the variables bound, what the backend
 * would get, the quota keys. NULL after writing to *error (a static string) why the query itself is
 * unusable (a malformed URL, method or header line).
 */
json_t *mg_route_explain(const mg_config_t *conf, const mg_route_query_t *q, const char **error);

/* Writes the explanation for a person to `out`. */
void mg_route_print(const json_t *explained, FILE *out);

/*
 * `matchgate route -c FILE --expect TESTS`: every request of TESTS explained and compared with what
 * it expects; each mismatch printed as "TESTS:LINE:COL: ..." on `out`, then one summary line.
 * Returns the exit status: 0 all hold, 1 a mismatch (or an unusable request), 2 TESTS unreadable.
 */
int mg_route_expect(const mg_config_t *conf, const char *tests, FILE *out);

/* The credential's part of an explanation (route_auth.c): "auth" (authenticator, outcome, reason,
 * claims) into `out`, after mg_request_prepare. */
void mg__route_explain_auth(const mg_config_t *conf, const mg_request_head_t *head, const mg_ctx_t *ctx, json_t *out);
/* The chosen route's verdict on the credential (mg_auth_decide): 0 when the request goes on, -1
 * after writing the refusal (status, error, reason, www_authenticate) into `out`. */
int mg__route_explain_verdict(const mg_config_t *conf, const mg_route_t *leaf, const mg_request_head_t *head, mg_ctx_t *ctx,
                              json_t *out);
/* The answer's part of an explanation (route_answer.c): "answer" {status, headers, ...}, the fields
 * of the client's answer once `leaf` edited it (CORS, response actions), on the backend's answer
 * of `q` or (gateway_made) the gateway's own with `status`. `origin`: the client's Origin (base
 * NULL: none). */
void mg__route_explain_answer(const mg_route_t *leaf, mg_ctx_t *ctx, mg_str_t origin, const mg_route_query_t *q, int status,
                              int gateway_made, json_t *out);
/* A CORS preflight the gateway answers itself (outcome "preflight", its status and answer): 1 when
 * it is one, 0 when the request goes on as any other. */
int mg__route_explain_preflight(const mg_config_t *conf, mg_ctx_t *ctx, json_t *out);
/* Flattened claims as a JSON object (a name given several times: an array of its values). */
json_t *mg__route_claims_json(const mg_claims_t *claims);

/* The command line of `matchgate route` (after the word "route"); returns the exit status. */
int mg_route_main(int argc, char **argv);

#endif
