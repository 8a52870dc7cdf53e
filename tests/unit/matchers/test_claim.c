/*
 * The claim condition and the claims lookup (claim.c, claims.c): equals, prefix, contains, regex,
 * in, present; dotted names; arrays that match when any element does; numbers and booleans as
 * their JSON text; objects that only `present` sees; no claims at all (the route-level rule is
 * routes/'s, tested in tests/unit/routes/test_auth.c); MG_NEEDS_CLAIMS through not/any/all.
 */
#include <criterion/criterion.h>

#include "matchers/matchers.h"
#include "flow.h"

TestSuite(claim, .fini = suite_fini);

/* A caller's claims, flattened as gateway/auth/claims.c flattens
 * {"sub":"u1","level":3,"admin":false,"roles":["a","b"],"empty":[],"realm_access":{"roles":["x"]},"note":null} */
static const mg_claim_t items[] = {
    {MG_STR("admin"), MG_STR("false"), MG_CLAIM_BOOL},
    {MG_STR("empty"), MG_STR(""), MG_CLAIM_ARRAY},
    {MG_STR("level"), MG_STR("3"), MG_CLAIM_NUMBER},
    {MG_STR("note"), MG_STR("null"), MG_CLAIM_NULL},
    {MG_STR("realm_access"), MG_STR(""), MG_CLAIM_OBJECT},
    {MG_STR("realm_access.roles"), MG_STR(""), MG_CLAIM_ARRAY},
    {MG_STR("realm_access.roles"), MG_STR("x"), MG_CLAIM_STRING},
    {MG_STR("roles"), MG_STR(""), MG_CLAIM_ARRAY},
    {MG_STR("roles"), MG_STR("a"), MG_CLAIM_STRING},
    {MG_STR("roles"), MG_STR("b"), MG_CLAIM_STRING},
    {MG_STR("sub"), MG_STR("u1"), MG_CLAIM_STRING},
};
static const mg_claims_t claims = {items, sizeof(items) / sizeof(items[0])};

static int match_claims(const char *cond, const mg_claims_t *with)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.alloc = test_arena;
    ctx.claims = with;
    mg_matcher_t *m = compile_ok(cond);
    int ret = mg_matcher_match(m, &ctx);
    mg_matcher_free(m);
    return ret;
}

Test(claim, equals_prefix_contains_regex)
{
    cr_expect_eq(match_claims("{claim: {name: sub, equals: u1}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: sub, equals: u2}}", &claims), 0);
    cr_expect_eq(match_claims("{claim: {name: sub, prefix: u}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: sub, contains: '1'}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: sub, regex: '^u[0-9]$'}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: nobody, equals: u1}}", &claims), 0);
}

Test(claim, arrays_match_when_any_element_does)
{
    cr_expect_eq(match_claims("{claim: {name: roles, equals: b}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: roles, equals: c}}", &claims), 0);
    cr_expect_eq(match_claims("{claim: {name: realm_access.roles, equals: x}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: roles, in: [c, a]}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: roles, in: [c, d]}}", &claims), 0);
    /* the array's own entry has no value: an empty string never matches it */
    cr_expect_eq(match_claims("{claim: {name: empty, equals: ''}}", &claims), 0);
}

Test(claim, numbers_booleans_and_null_compare_as_json_text)
{
    cr_expect_eq(match_claims("{claim: {name: level, equals: '3'}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: level, in: [1, 2, 3]}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: admin, equals: 'false'}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: note, equals: 'null'}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: level, equals: '3.0'}}", &claims), 0);
}

Test(claim, objects_and_arrays_only_present)
{
    cr_expect_eq(match_claims("{claim: {name: realm_access, present: true}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: realm_access, prefix: ''}}", &claims), 0);
    cr_expect_eq(match_claims("{claim: {name: empty, present: true}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: nobody, present: false}}", &claims), 1);
    cr_expect_eq(match_claims("{claim: {name: sub, present: false}}", &claims), 0);
}

Test(claim, no_claims_answers_no_even_to_present_false)
{
    cr_expect_eq(match_claims("{claim: {name: sub, present: false}}", NULL), 0);
    cr_expect_eq(match_claims("{claim: {name: sub, equals: u1}}", NULL), 0);
}

Test(claim, lookup)
{
    size_t count;
    cr_expect_eq(mg_claims_find(&claims, MG_STR("roles"), &count), 7);
    cr_expect_eq(count, 3);
    cr_expect_eq(mg_claims_find(&claims, MG_STR("role"), &count), claims.size);
    cr_expect_eq(count, 0);
    const mg_str_t *v = mg_claims_value(&claims, MG_STR("roles"));
    cr_assert_not_null(v);
    cr_expect_eq(v->len, 1);
    cr_expect_eq(v->base[0], 'a'); /* the first scalar: the array's own entry is skipped */
    cr_expect_null(mg_claims_value(&claims, MG_STR("realm_access")));
    cr_expect_null(mg_claims_value(NULL, MG_STR("sub")));
}

Test(claim, needs_claims_through_combinators)
{
    mg_matcher_t *m = compile_ok("{any: [{path: /a}, {not: {claim: {name: sub, equals: x}}}]}");
    cr_expect_eq(mg_matcher_needs(m), MG_NEEDS_CLAIMS);
    mg_matcher_free(m);
    m = compile_ok("{all: [{path: /a}, {method: GET}]}");
    cr_expect_eq(mg_matcher_needs(m), 0);
    mg_matcher_free(m);
    cr_expect_eq(mg_matcher_needs(NULL), 0);
}

Test(claim, compile_errors)
{
    EXPECT_ERRORS("{claim: {name: sub}}", "test.yaml:1:9: 'claim' takes 'name' and exactly one of 'equals', 'prefix', 'contains', "
                                          "'regex', 'in' or 'present'");
    EXPECT_ERRORS("{claim: {name: a..b, equals: x}}",
                  "test.yaml:1:16: invalid claim name 'a..b' (a name such as sub, or a dotted path such as realm_access.roles)");
    EXPECT_ERRORS("{claim: {name: .a, equals: x}}",
                  "test.yaml:1:16: invalid claim name '.a' (a name such as sub, or a dotted path such as realm_access.roles)");
    EXPECT_ERRORS("{claim: {name: a, in: [], equals: x}}", "test.yaml:1:27: unknown key 'equals'");
    EXPECT_ERRORS("{claim: {name: a, in: []}}", "test.yaml:1:23: 'value' needs at least one value");
}

Test(claim, describe)
{
    expect_describe("{claim: {name: sub, equals: u1}}", "{\"claim\":{\"name\":\"sub\",\"equals\":\"u1\"}}");
    expect_describe("{claim: {name: roles, in: [a, b]}}", "{\"claim\":{\"name\":\"roles\",\"in\":[\"a\",\"b\"]}}");
}
