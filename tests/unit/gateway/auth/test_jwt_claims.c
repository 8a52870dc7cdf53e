/*
 * gateway/auth/jwt.c: the claims of a token whose signature verified. exp, nbf and iat at the
 * edges of the clock skew (whole seconds and fractions), their types and range, iss and aud.
 * Tokens are HS256 with the policy's secret (signed by cjose, or by hand where the payload is
 * text jansson would not write back); the now is NOW and the skew 30 s.
 */
#include "fixture.h"

static void claims_setup(void)
{
    setup();
    policy.secret = (const uint8_t *)SECRET;
    policy.secret_len = strlen(SECRET);
}

TestSuite(claims, .init = claims_setup, .fini = teardown);

/* A token of the payload written as is. */
static const char *tok(const char *payload)
{
    return hs256_raw(SECRET, "{\"alg\":\"HS256\"}", payload);
}

#define EXP_OK "\"exp\":1700000100"

Test(claims, exp_is_checked_with_the_skew)
{
    expect_reason(tok("{\"exp\":1699999970}"), MG_AUTH_OK); /* now == exp + skew */
    expect_reason(tok("{\"exp\":1699999969}"), MG_AUTH_EXPIRED);
    expect_reason(tok("{\"exp\":1699999969.5}"), MG_AUTH_EXPIRED);
    expect_reason(tok("{\"exp\":1699999970.5}"), MG_AUTH_OK);
    expect_reason(tok("{\"exp\":0}"), MG_AUTH_EXPIRED);
    policy.clock_skew = 0;
    expect_reason(tok("{\"exp\":1700000000}"), MG_AUTH_OK);
    expect_reason(tok("{\"exp\":1699999999.999}"), MG_AUTH_EXPIRED);
}

Test(claims, nbf_is_checked_with_the_skew)
{
    expect_reason(tok("{" EXP_OK ",\"nbf\":1700000030}"), MG_AUTH_OK); /* now + skew == nbf */
    expect_reason(tok("{" EXP_OK ",\"nbf\":1700000031}"), MG_AUTH_NOT_YET_VALID);
    expect_reason(tok("{" EXP_OK ",\"nbf\":1700000030.25}"), MG_AUTH_NOT_YET_VALID);
    expect_reason(tok("{" EXP_OK ",\"nbf\":1700000029.75}"), MG_AUTH_OK);
    expect_reason(tok("{" EXP_OK ",\"nbf\":0}"), MG_AUTH_OK);
}

Test(claims, iat_in_the_future_is_refused_past_the_skew)
{
    expect_reason(tok("{" EXP_OK ",\"iat\":1700000030}"), MG_AUTH_OK);
    expect_reason(tok("{" EXP_OK ",\"iat\":1700000031}"), MG_AUTH_ISSUED_IN_FUTURE);
    expect_reason(tok("{" EXP_OK ",\"iat\":1700000030.5}"), MG_AUTH_ISSUED_IN_FUTURE);
    expect_reason(tok("{" EXP_OK ",\"iat\":1600000000}"), MG_AUTH_OK);
}

Test(claims, a_huge_skew_saturates_instead_of_wrapping)
{
    policy.clock_skew = INT64_MAX;
    expect_reason(tok("{\"exp\":0,\"nbf\":9000000000000000000,\"iat\":9000000000000000000}"), MG_AUTH_OK);
}

Test(claims, missing_exp_depends_on_require_exp)
{
    expect_reason(tok("{\"sub\":\"alice\"}"), MG_AUTH_MISSING_EXP);
    policy.require_exp = 0;
    expect_reason(tok("{\"sub\":\"alice\"}"), MG_AUTH_OK);
    cr_expect_eq(res.identity->exp, INT64_MAX);
    expect_reason(tok("{}"), MG_AUTH_OK);
}

Test(claims, a_numeric_date_is_a_number_below_2_63)
{
    static const char *const bad[] = {"\"1700000100\"", "true", "null",   "[1700000100]",         "{}", "-1",
                                      "-0.5",           "1e19", "9.3e18", "9223372036854775807.0"};
    for (size_t i = 0; i != sizeof(bad) / sizeof(bad[0]); ++i) {
        expect_reason(tok(fmt("{\"exp\":%s}", bad[i])), MG_AUTH_BAD_CLAIM);
        expect_reason(tok(fmt("{" EXP_OK ",\"nbf\":%s}", bad[i])), MG_AUTH_BAD_CLAIM);
        expect_reason(tok(fmt("{" EXP_OK ",\"iat\":%s}", bad[i])), MG_AUTH_BAD_CLAIM);
    }
    /* 2^63 as an integer is past jansson's json_int_t: the payload does not parse */
    expect_reason(tok("{\"exp\":9223372036854775808}"), MG_AUTH_MALFORMED);
    /* the largest integer is a valid (far) date; a fraction too */
    expect_reason(tok("{\"exp\":9223372036854775807}"), MG_AUTH_OK);
    cr_expect_eq(res.identity->exp, INT64_MAX);
    expect_reason(tok("{\"exp\":1700000100.75}"), MG_AUTH_OK);
    cr_expect_eq(res.identity->exp, 1700000100);
    expect_reason(tok("{\"exp\":1.7000001e9}"), MG_AUTH_OK);
    cr_expect_eq(res.identity->exp, 1700000100);
}

Test(claims, bad_types_are_found_before_the_times)
{
    /* an expired token with a malformed nbf is a bad claim, not expired */
    expect_reason(tok("{\"exp\":1,\"nbf\":\"x\"}"), MG_AUTH_BAD_CLAIM);
}

Test(claims, iss_must_be_the_issuer)
{
    expect_reason(tok("{" EXP_OK ",\"iss\":7}"), MG_AUTH_OK); /* not checked without an issuer */
    policy.issuer = "https://idp.example";
    expect_reason(tok("{" EXP_OK ",\"iss\":\"https://idp.example\"}"), MG_AUTH_OK);
    expect_reason(tok("{" EXP_OK "}"), MG_AUTH_WRONG_ISSUER);
    expect_reason(tok("{" EXP_OK ",\"iss\":\"https://idp.example.evil\"}"), MG_AUTH_WRONG_ISSUER);
    expect_reason(tok("{" EXP_OK ",\"iss\":\"https://idp.exampl\"}"), MG_AUTH_WRONG_ISSUER);
    expect_reason(tok("{" EXP_OK ",\"iss\":\"HTTPS://IDP.EXAMPLE\"}"), MG_AUTH_WRONG_ISSUER);
    expect_reason(tok("{" EXP_OK ",\"iss\":[\"https://idp.example\"]}"), MG_AUTH_BAD_CLAIM);
    expect_reason(tok("{" EXP_OK ",\"iss\":null}"), MG_AUTH_BAD_CLAIM);
}

Test(claims, aud_must_hold_an_audience)
{
    char *const audiences[] = {"api", "web"};
    expect_reason(tok("{" EXP_OK ",\"aud\":7}"), MG_AUTH_OK); /* not checked without audiences */
    policy.audiences = audiences;
    policy.num_audiences = 2;
    expect_reason(tok("{" EXP_OK ",\"aud\":\"web\"}"), MG_AUTH_OK);
    expect_reason(tok("{" EXP_OK ",\"aud\":[\"other\",\"api\"]}"), MG_AUTH_OK);
    expect_reason(tok("{" EXP_OK "}"), MG_AUTH_WRONG_AUDIENCE);
    expect_reason(tok("{" EXP_OK ",\"aud\":\"webs\"}"), MG_AUTH_WRONG_AUDIENCE);
    expect_reason(tok("{" EXP_OK ",\"aud\":[\"other\"]}"), MG_AUTH_WRONG_AUDIENCE);
    expect_reason(tok("{" EXP_OK ",\"aud\":[]}"), MG_AUTH_WRONG_AUDIENCE);
    expect_reason(tok("{" EXP_OK ",\"aud\":[\"api\",1]}"), MG_AUTH_BAD_CLAIM);
    expect_reason(tok("{" EXP_OK ",\"aud\":{\"api\":1}}"), MG_AUTH_BAD_CLAIM);
    expect_reason(tok("{" EXP_OK ",\"aud\":true}"), MG_AUTH_BAD_CLAIM);
}

Test(claims, the_signature_is_checked_before_the_claims)
{
    /* a bad signature on an expired token is a bad signature */
    const char *t = tok("{\"exp\":1}");
    char *forged = (char *)fmt("%s", t);
    forged[strlen(forged) - 3] = forged[strlen(forged) - 3] == 'A' ? 'B' : 'A';
    expect_reason(t, MG_AUTH_EXPIRED);
    expect_reason(forged, MG_AUTH_BAD_SIGNATURE);
}

Test(claims, the_identity_holds_the_flattened_payload)
{
    cr_assert_eq(verify(sign_secret(SECRET, strlen(SECRET), "HS256",
                                    "{\"sub\":\"bob\"," EXP_OK ",\"realm\":{\"roles\":[\"admin\",\"dev\"]},\"n\":1.5}")),
                 MG_AUTH_OK);
    const mg_claims_t *c = &res.identity->claims;
    const mg_str_t *v = mg_claims_value(c, MG_STR("realm.roles"));
    cr_assert_not_null(v);
    cr_expect_eq(v->len, 5);
    cr_expect_eq(memcmp(v->base, "admin", 5), 0);
    v = mg_claims_value(c, MG_STR("n"));
    cr_assert_not_null(v);
    cr_expect_eq(v->len, 3);
    cr_expect_eq(memcmp(v->base, "1.5", 3), 0);
    cr_expect_eq(res.identity->sub.len, 3);
    cr_expect_gt(res.identity->bytes, sizeof(mg_identity_t));
}
