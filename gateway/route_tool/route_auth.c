/*
 * `matchgate route`: the credential's part of an explanation. What the verification found ("auth":
 * the authenticator, the outcome and its reason, the claims), and the chosen route's verdict on it
 * (mg_auth_decide, as the request handler asks it). Claims given by a test file (`claims:`) stand
 * for a verified credential, so test files need no real tokens.
 */
#include <string.h>
#include "gateway/route_tool/route_tool.h"

static const char *outcome_name(mg_auth_outcome_t o)
{
    switch (o) {
    case MG_AUTH_VERIFIED:
        return "verified";
    case MG_AUTH_FAILED:
        return "failed";
    case MG_AUTH_UNAVAILABLE:
        return "unavailable";
    default:
        return "anonymous";
    }
}

/* A claim's value as JSON: strings as strings, the others as the JSON text they were. */
static json_t *claim_value_json(const mg_claim_t *c)
{
    if (c->type == MG_CLAIM_STRING)
        return json_stringn(c->value.base, c->value.len);
    json_t *j = json_loadb(c->value.base, c->value.len, JSON_DECODE_ANY, NULL);
    return j != NULL ? j : json_null();
}

/* The flattened claims as {"name": value} ({"name": [values]} for a name given several times);
 * objects and arrays are shown by their members and elements. */
json_t *mg__route_claims_json(const mg_claims_t *claims)
{
    json_t *out = json_object();
    for (size_t i = 0; claims != NULL && i < claims->size; i++) {
        const mg_claim_t *c = &claims->items[i];
        if (!mg_claim_is_scalar(c))
            continue;
        char *name = strndup(c->name.base, c->name.len);
        json_t *prev = json_object_get(out, name), *v = claim_value_json(c);
        /* a scalar is never an array: an array here is one this loop made for a repeated name */
        if (prev == NULL)
            json_object_set_new(out, name, v);
        else if (json_is_array(prev))
            json_array_append_new(prev, v);
        else
            json_object_set_new(out, name, json_pack("[O,o]", prev, v));
        free(name);
    }
    return out;
}

void mg__route_explain_auth(const mg_config_t *conf, const mg_request_head_t *head, const mg_ctx_t *ctx, json_t *out)
{
    json_t *auth = json_object();
    if (head->claims_given != NULL) {
        json_object_set_new(auth, "outcome", json_string("verified"));
        json_object_set_new(auth, "given", json_true());
    } else if (head->auth != NULL && conf->auth.num_authenticators != 0) {
        const mg_auth_result_t *res = head->auth;
        json_object_set_new(auth, "outcome", json_string(outcome_name(res->outcome)));
        if (res->by != NULL)
            json_object_set_new(auth, "authenticator", json_string(res->by->name));
        if (res->outcome == MG_AUTH_FAILED || res->outcome == MG_AUTH_UNAVAILABLE)
            json_object_set_new(auth, "reason", json_string(mg_auth_reason_text(res->reason)));
    } else {
        json_decref(auth);
        return;
    }
    if (ctx->claims != NULL)
        json_object_set_new(auth, "claims", mg__route_claims_json(ctx->claims));
    json_object_set_new(out, "auth", auth);
}

/* Claims given by a test stand for a credential of the route's first authenticator (any for a route
 * that names none), so that `auth: NAME` holds and its forward_claims apply. */
static void stand_in(const mg_config_t *conf, const mg_route_t *leaf, const mg_request_head_t *head, mg_auth_result_t *res)
{
    const mg_route_t *from;
    mg_route_auth_mode_t mode = mg_route_auth(leaf, &from);
    for (size_t i = 0; i < conf->auth.num_authenticators && res->by == NULL; i++)
        if (mode != MG_ROUTE_AUTH_REQUIRED || (from->auth->accept & (UINT64_C(1) << conf->auth.authenticators[i]->index)) != 0)
            res->by = conf->auth.authenticators[i];
    res->outcome = res->by != NULL ? MG_AUTH_VERIFIED : MG_AUTH_ANONYMOUS;
    res->identity = mg_identity_retain((mg_identity_t *)head->claims_given);
}

int mg__route_explain_verdict(const mg_config_t *conf, const mg_route_t *leaf, const mg_request_head_t *head, mg_ctx_t *ctx,
                              json_t *out)
{
    mg_auth_result_t *res = head->auth;
    mg_auth_decision_t d;
    if (head->claims_given != NULL)
        stand_in(conf, leaf, head, res);
    if (res == NULL || (conf->auth.num_authenticators == 0 && leaf->auth_from == NULL))
        return 0;
    mg_auth_decide(&conf->auth, res, leaf, ctx, &d);
    if (d.status == 0)
        return 0;
    json_object_set_new(out, "outcome", json_string("refused"));
    json_object_set_new(out, "status", json_integer(d.status));
    json_object_set_new(out, "error", json_string(d.code));
    json_object_set_new(out, "reason", json_string(d.reason));
    if (d.challenge != NULL) {
        char buf[512];
        size_t len = mg_auth_challenge(&d, buf, sizeof(buf));
        json_object_set_new(out, "www_authenticate", json_stringn(buf, len < sizeof(buf) ? len : sizeof(buf) - 1));
    }
    return -1;
}
