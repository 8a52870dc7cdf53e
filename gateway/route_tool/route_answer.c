/*
 * The answer's part of `matchgate route`: what the client's answer looks like once the chosen
 * route edited it (CORS fields, response actions: mg_route_answer_edit, the code the gateway runs),
 * and the gateway's own answer to a CORS preflight (as request/edits.c makes it). The backend's
 * answer is the test's `response:` (a 200 without fields when none is given).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/route_tool/route_tool.h"

static json_t *fields_json(const mg_header_t *fields, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            a, json_pack("[s%,s%]", fields[i].name.base, fields[i].name.len, fields[i].value.base, fields[i].value.len));
    return a;
}

/* "Name: value" -> a field with a lower-case name, in ctx->alloc memory; 0 when it is one. */
static int field_of_line(mg_ctx_t *ctx, const char *line, mg_header_t *out)
{
    const char *colon = strchr(line, ':');
    if (colon == NULL || colon == line)
        return -1;
    size_t nlen = (size_t)(colon - line);
    char *name = mg_alloc(&ctx->alloc, nlen + 1);
    for (size_t i = 0; i < nlen; i++)
        name[i] = line[i] >= 'A' && line[i] <= 'Z' ? (char)(line[i] - 'A' + 'a') : line[i];
    name[nlen] = '\0';
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    *out = (mg_header_t){mg_str(name, nlen), mg_str(v, strlen(v))};
    return 0;
}

/* The fields of the answer before the route edits it: Server, then the backend's (a forward) or the
 * route's own (respond) or the refusal's. */
static size_t base_fields(const mg_route_t *leaf, mg_ctx_t *ctx, const mg_route_query_t *q, int gateway_made, mg_header_t *out,
                          size_t max)
{
    size_t n = 0;
    out[n++] = (mg_header_t){MG_STR("server"), MG_STR("matchgate")};
    if (!gateway_made) {
        for (size_t i = 0; i < q->num_answer_headers && n < max; i++)
            n += field_of_line(ctx, q->answer_headers[i], &out[n]) == 0;
    } else if (leaf->kind == MG_ROUTE_RESPOND) {
        for (size_t i = 0; i < leaf->respond->num_headers && n < max; i++)
            out[n++] = leaf->respond->headers[i];
    }
    return n;
}

void mg__route_explain_answer(const mg_route_t *leaf, mg_ctx_t *ctx, mg_str_t origin, const mg_route_query_t *q, int status,
                              int gateway_made, json_t *out)
{
    mg_header_t base[65];
    mg_answer_edit_t edit;
    mg_fields_t fields = {base, 0, 65, ctx->alloc};
    mg_ctx_response_t res = {.status = status, .ops = &mg_fields_array_ops, .fields = &fields};
    snprintf(res.status_text, sizeof(res.status_text), "%u", (unsigned)status % 1000u);
    fields.size = base_fields(leaf, ctx, q, gateway_made, base, 65);
    mg_route_answer_edit(leaf, ctx, origin, gateway_made, &res, &edit);
    json_t *answer = json_pack("{s:i,s:o}", "status", status, "headers", fields_json(fields.items, fields.size));
    if (edit.failed != 0)
        json_object_set_new(answer, "actions_left_out", json_integer((json_int_t)edit.failed));
    if (edit.cors_refused)
        json_object_set_new(answer, "cors", json_string("the origin is not allowed"));
    json_object_set_new(out, "answer", answer);
}

int mg__route_explain_preflight(const mg_config_t *conf, mg_ctx_t *ctx, json_t *out)
{
    const mg_str_t *origin = mg_ctx_get_header(ctx, MG_STR("origin"));
    const mg_str_t *method = mg_ctx_get_header(ctx, MG_STR("access-control-request-method"));
    const mg_str_t *asked = mg_ctx_get_header(ctx, MG_STR("access-control-request-headers"));
    if (mg_str_compare(ctx->method, "OPTIONS") != 0 || origin == NULL || method == NULL || conf->routes == NULL)
        return 0;
    mg_str_t saved = ctx->method;
    size_t vars = ctx->num_vars;
    const mg_trace_t *trace = ctx->trace;
    ctx->method = *method;
    ctx->trace = NULL; /* the walk shown is the request's own, if the preflight goes on as one */
    const mg_route_t *leaf = mg_routes_match(conf->routes, ctx);
    const mg_cors_t *cors = leaf != NULL ? mg_route_cors(leaf) : NULL;
    ctx->method = saved;
    ctx->num_vars = vars;
    ctx->trace = trace;
    ctx->error = (mg_match_error_t){.reason = NULL};
    if (cors == NULL)
        return 0;
    mg_cors_answer_t a;
    mg_cors_preflight(cors, *origin, *method, asked != NULL ? *asked : MG_STR_NULL, &a);
    json_object_set_new(out, "route", json_string(leaf->name));
    json_object_set_new(out, "outcome", json_string("preflight"));
    json_object_set_new(out, "status", json_integer(a.refusal == NULL ? 204 : 403));
    if (a.refusal != NULL) {
        json_object_set_new(out, "error", json_string("cors-refused"));
        json_object_set_new(out, "reason", json_string(a.refusal));
    }
    json_object_set_new(
        out, "answer",
        json_pack("{s:i,s:o}", "status", a.refusal == NULL ? 204 : 403, "headers", fields_json(a.headers, a.num_headers)));
    return 1;
}
