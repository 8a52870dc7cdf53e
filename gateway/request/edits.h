/*
 * The route's edits of its answer (edits.c): CORS fields, response actions, and the gateway's
 * answer to a CORS preflight.
 */
#ifndef MG_GATEWAY_EDITS_H
#define MG_GATEWAY_EDITS_H

#include "gateway/internal.h"

/* The route is chosen and its request actions applied (ctx as they left it): keeps what the
 * answer's edits will need, the client's Origin and, when the route's response templates read
 * the request, a copy of `ctx` in the request's pool (r->ctx). */
void mg_edits_prepare(mg_request_t *r, mg_ctx_t *ctx);
/* Edits the head in req->res before it goes out: the CORS fields of the route's policy (the
 * backend's own Access-Control-* dropped), then its response actions (only the `always` ones when
 * `gateway_made`). Nothing for a request without a route or a route that edits no answer. */
void mg_edits_apply(mg_request_t *r, h2o_req_t *req, int gateway_made);
/* Adds the fields of a CORS answer to req->res (Vary merged into the one there). */
void mg_edits_put(mg_request_t *r, h2o_req_t *req, const mg_cors_answer_t *a);
/* 1 for a CORS preflight: OPTIONS with Origin and Access-Control-Request-Method. */
int mg_edits_is_preflight(h2o_req_t *req);
/* Answers the preflight `r` when the route of the request it asks about (matched with the method
 * it names) has a CORS policy: 1 after the answer, 0 when the preflight goes on as any request. */
int mg_edits_preflight(mg_request_t *r, mg_ctx_t *ctx);

#endif
