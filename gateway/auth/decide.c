/*
 * The route's verdict on a verification. The credential was verified before routing (its claims
 * take part in matching); the route then says which outcomes it accepts:
 *   auth: none      anything; a credential that failed is ignored (the request goes on anonymous)
 *   auth: optional  no credential, or one verified by any authenticator; a failed one is 401
 *   auth: NAMES     one verified by one of NAMES, else 401
 * and `require:` (its own and its ancestors') must hold of the claims, else 403.
 */
#include <stdio.h>
#include "gateway/auth/auth.h"
#include "routes/routes.h"

static void mg_refuse(mg_auth_decision_t *d, int status, const char *code, const char *reason, const char *error,
                      const mg_authenticator_t *challenge)
{
    *d = (mg_auth_decision_t){status, code, reason, error, challenge, 0};
}

/* The authenticator a request without a credential is told to use: the route's first one. */
static const mg_authenticator_t *mg_first_accepted(const mg_auth_conf_t *ac, uint64_t accept)
{
    for (size_t i = 0; i < ac->num_authenticators; i++)
        if (accept == 0 || (accept & (UINT64_C(1) << ac->authenticators[i]->index)) != 0)
            return ac->authenticators[i];
    return NULL;
}

static void mg_decide_anonymous(const mg_auth_conf_t *ac, mg_route_auth_mode_t mode, const mg_route_t *from,
                                const mg_route_t *route, mg_auth_decision_t *d)
{
    if (mode == MG_ROUTE_AUTH_REQUIRED || (mode == MG_ROUTE_AUTH_OPTIONAL && mg_route_has_requires(route)))
        mg_refuse(d, 401, "unauthenticated", "the route needs a credential", NULL,
                  mg_first_accepted(ac, mode == MG_ROUTE_AUTH_REQUIRED ? from->auth->accept : 0));
}

static void mg_decide_verified(const mg_auth_result_t *res, mg_route_auth_mode_t mode, const mg_route_t *from,
                               const mg_route_t *route, mg_ctx_t *ctx, mg_auth_decision_t *d)
{
    const mg_matcher_t *failed;
    if (mode == MG_ROUTE_AUTH_REQUIRED && (from->auth->accept & (UINT64_C(1) << res->by->index)) == 0) {
        mg_refuse(d, 401, "unauthenticated", "the credential is not accepted on this route", "invalid_token", res->by);
        return;
    }
    if (mode == MG_ROUTE_AUTH_NONE)
        return;
    int held = mg_route_requires(route, ctx, &failed);
    if (held == MG_MATCH_ERROR)
        mg_refuse(d, 400, "bad-request", "a requirement of the route could not be decided", NULL, NULL);
    else if (held != 1)
        mg_refuse(d, 403, "forbidden", "the credential's claims do not meet the route's requirements", "insufficient_scope",
                  res->by);
}

int mg_auth_refusal(const mg_auth_result_t *res, mg_auth_decision_t *d)
{
    if (res->outcome == MG_AUTH_FAILED)
        mg_refuse(d, 401, "unauthenticated", mg_auth_reason_text(res->reason), "invalid_token", res->by);
    else if (res->outcome == MG_AUTH_UNAVAILABLE) /* no usable key: not the client's fault, and it may pass once fetched */
        mg_refuse(d, 503, "auth-unavailable", "the keys to verify the credential are not available", NULL, NULL);
    else
        return 0;
    return 1;
}

void mg_auth_decide(const mg_auth_conf_t *ac, const mg_auth_result_t *res, const mg_route_t *route, mg_ctx_t *ctx,
                    mg_auth_decision_t *d)
{
    const mg_route_t *from;
    mg_route_auth_mode_t mode = mg_route_auth(route, &from);
    *d = (mg_auth_decision_t){0};
    switch (res->outcome) {
    case MG_AUTH_ANONYMOUS:
        mg_decide_anonymous(ac, mode, from, route, d);
        return;
    case MG_AUTH_VERIFIED:
        mg_decide_verified(res, mode, from, route, ctx, d);
        return;
    default: /* failed, or could not be checked: only a route that needs no credential goes on */
        if (mode != MG_ROUTE_AUTH_NONE)
            mg_auth_refusal(res, d);
        d->anonymous = d->status == 0;
        break;
    }
}

size_t mg_auth_challenge(const mg_auth_decision_t *d, char *buf, size_t size)
{
    const mg_authenticator_t *a = d->challenge;
    const char *scheme = a->kind == MG_AUTH_KIND_API_KEY ? "ApiKey" : "Bearer";
    int n;
    /* realm and reason texts hold no '"' or '\' (the configuration refuses them in a realm) */
    if (d->error == NULL)
        n = snprintf(buf, size, "%s realm=\"%s\"", scheme, a->realm);
    else
        n = snprintf(buf, size, "%s realm=\"%s\", error=\"%s\", error_description=\"%s\"", scheme, a->realm, d->error, d->reason);
    return n < 0 ? 0 : (size_t)n;
}
