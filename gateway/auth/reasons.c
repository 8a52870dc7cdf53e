/*
 * Why a credential was refused, in words for the client (the 401's error_description) and as a
 * label for /metrics. The texts are fixed: nothing of the token ever goes into them, so a
 * client cannot make the gateway echo what it sent.
 */
#include "gateway/auth/auth.h"

static const struct {
    const char *text, *label;
} mg_auth_reasons[MG_AUTH_NUM_REASONS] = {
    [MG_AUTH_OK] = {"the credential is valid", "ok"},
    [MG_AUTH_MALFORMED] = {"the token is malformed", "malformed"},
    [MG_AUTH_TOO_LARGE] = {"the token is too large", "too_large"},
    [MG_AUTH_ALG_NOT_ALLOWED] = {"the token's signature algorithm is not allowed", "alg_not_allowed"},
    [MG_AUTH_CRIT] = {"the token requires an extension that is not supported", "crit"},
    [MG_AUTH_UNKNOWN_KEY] = {"the token's signing key is unknown", "unknown_key"},
    [MG_AUTH_BAD_SIGNATURE] = {"the token's signature is invalid", "bad_signature"},
    [MG_AUTH_BAD_CLAIM] = {"a claim of the token has the wrong type", "bad_claim"},
    [MG_AUTH_MISSING_EXP] = {"the token has no expiration time", "missing_exp"},
    [MG_AUTH_EXPIRED] = {"the token has expired", "expired"},
    [MG_AUTH_NOT_YET_VALID] = {"the token is not valid yet", "not_yet_valid"},
    [MG_AUTH_ISSUED_IN_FUTURE] = {"the token is issued in the future", "issued_in_future"},
    [MG_AUTH_WRONG_ISSUER] = {"the token's issuer is not accepted", "wrong_issuer"},
    [MG_AUTH_WRONG_AUDIENCE] = {"the token is not meant for this audience", "wrong_audience"},
    [MG_AUTH_UNKNOWN_API_KEY] = {"the API key is unknown", "unknown_api_key"},
    [MG_AUTH_NO_KEYS] = {"no key to verify credentials is available yet", "no_keys"},
};

const char *mg_auth_reason_text(mg_auth_reason_t reason)
{
    /* an out-of-range value is a bug of the caller's: say something true rather than crash */
    if ((unsigned)reason >= MG_AUTH_NUM_REASONS)
        return "the credential is invalid";
    return mg_auth_reasons[reason].text;
}

const char *mg_auth_reason_label(mg_auth_reason_t reason)
{
    if ((unsigned)reason >= MG_AUTH_NUM_REASONS)
        return "invalid";
    return mg_auth_reasons[reason].label;
}
