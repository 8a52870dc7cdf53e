/*
 * A route's `auth:` and `require:` (routes/auth.c), and the rule that a route whose condition tests
 * a claim never matches a request without a verified credential, whatever `not` or `any` stand
 * around the test (routes.c, mg__route_try), with the route index or without.
 */
#include "support.h"

TestSuite(auth, .fini = support_fini);

static int backend;

static void *resolve(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "api") == 0 ? &backend : NULL;
}

#define EXPECT_ERRORS(yaml, ...) expect_errors_with(yaml, resolve, (const char *const[]){__VA_ARGS__, NULL})

static const mg_claim_t admin_items[] = {{MG_STR("scope"), MG_STR("a"), MG_CLAIM_STRING},
                                         {MG_STR("scope"), MG_STR("orders:write"), MG_CLAIM_STRING},
                                         {MG_STR("usertype"), MG_STR("admin"), MG_CLAIM_STRING}};
static const mg_claims_t admin = {admin_items, 3};
static const mg_claim_t staff_items[] = {{MG_STR("usertype"), MG_STR("staff"), MG_CLAIM_STRING}};
static const mg_claims_t staff = {staff_items, 1};

static mg_ctx_t ctx_for(const char *path, const mg_claims_t *claims)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.method = MG_STR("GET");
    ctx.path = mg_str(path, strlen(path));
    ctx.alloc = (mg_alloc_t){arena_alloc, NULL};
    ctx.claims = claims;
    return ctx;
}

static const char *chosen(const mg_routes_t *routes, const char *path, const mg_claims_t *claims, int indexed)
{
    mg_ctx_t ctx = ctx_for(path, claims);
    const mg_route_t *r = indexed ? mg_routes_match(routes, &ctx) : mg_routes_match_linear(routes, &ctx);
    cr_expect_eq(ctx.num_vars, r != NULL ? ctx.num_vars : 0);
    return r != NULL ? r->name : "(none)";
}

Test(auth, a_claim_test_never_matches_an_anonymous_request)
{
    mg_routes_t *routes = load_with("routes:\n"
                                    "  - {name: v2, match: {not: {claim: {name: usertype, equals: admin}}}, forward: api}\n"
                                    "  - {name: v1, forward: api}\n",
                                    resolve);
    cr_assert_not_null(routes);
    cr_expect_str_eq(chosen(routes, "/", NULL, 1), "v1");
    cr_expect_str_eq(chosen(routes, "/", &staff, 1), "v2");
    cr_expect_str_eq(chosen(routes, "/", &admin, 1), "v1");
    mg_routes_free(routes);
}

/* Enough routes for an index: the rule holds on the index's path too. */
Test(auth, with_the_route_index_too)
{
    char yaml[4096];
    size_t off = (size_t)snprintf(yaml, sizeof(yaml), "routes:\n");
    for (int i = 0; i < 12; i++)
        off += (size_t)snprintf(
            yaml + off, sizeof(yaml) - off,
            "  - {name: r%d, match: {path: /p%d, any: [{claim: {name: usertype, present: false}}]}, forward: api}\n", i, i);
    snprintf(yaml + off, sizeof(yaml) - off, "  - {name: last, forward: api}\n");
    mg_routes_t *routes = load_with(yaml, resolve);
    cr_assert_not_null(routes);
    cr_assert_not_null(routes->index);
    cr_expect_str_eq(chosen(routes, "/p3", NULL, 1), "last");
    cr_expect_str_eq(chosen(routes, "/p3", NULL, 0), "last");
    static const mg_claims_t none = {NULL, 0};
    cr_expect_str_eq(chosen(routes, "/p3", &none, 1), "r3");
    mg_routes_free(routes);
}

Test(auth, modes_and_inheritance)
{
    mg_routes_t *routes = load_with("routes:\n"
                                    "  - name: b\n"
                                    "    auth: [corp, partners]\n"
                                    "    routes:\n"
                                    "      - {name: inherits, match: {path: /i}, forward: api}\n"
                                    "      - {name: public, match: {path: /p}, auth: none, forward: api}\n"
                                    "      - {name: opt, match: {path: /o}, auth: optional, forward: api}\n"
                                    "  - {name: top, forward: api}\n",
                                    resolve);
    cr_assert_not_null(routes);
    const mg_route_t *from;
    cr_expect_eq(mg_route_auth(mg_routes_find(routes, "inherits"), &from), MG_ROUTE_AUTH_REQUIRED);
    cr_expect_str_eq(from->name, "b");
    cr_expect_eq(from->auth->num_names, 2);
    cr_expect_str_eq(from->auth->names[1], "partners");
    cr_expect_eq(mg_route_auth(mg_routes_find(routes, "public"), &from), MG_ROUTE_AUTH_NONE);
    cr_expect_eq(mg_route_auth(mg_routes_find(routes, "opt"), &from), MG_ROUTE_AUTH_OPTIONAL);
    cr_expect_eq(mg_route_auth(mg_routes_find(routes, "top"), &from), MG_ROUTE_AUTH_NONE);
    cr_expect_null(from);
    mg_routes_free(routes);
}

Test(auth, requirements_root_first_and_none_stops_them)
{
    mg_routes_t *routes = load_with(
        "routes:\n"
        "  - name: b\n"
        "    auth: corp\n"
        "    require: [{claim: {name: scope, equals: a}}]\n"
        "    routes:\n"
        "      - {name: w, require: [{claim: {name: scope, in: ['orders:write']}}], forward: api}\n"
        "      - name: p\n"
        "        auth: none\n"
        "        routes: [{name: pp, auth: optional, require: [{claim: {name: usertype, equals: staff}}], forward: api}]\n",
        resolve);
    cr_assert_not_null(routes);
    const mg_route_t *w = mg_routes_find(routes, "w"), *pp = mg_routes_find(routes, "pp");
    const mg_matcher_t *failed;
    mg_ctx_t ctx = ctx_for("/", &admin);
    cr_expect_eq(mg_route_requires(w, &ctx, &failed), 1);
    cr_expect_null(failed);
    ctx = ctx_for("/", &staff);
    cr_expect_eq(mg_route_requires(w, &ctx, &failed), 0);
    cr_expect_eq(failed, mg_routes_find(routes, "b")->auth->require[0]); /* the parent's, first */
    cr_expect(mg_route_has_requires(w));
    /* below an auth: none, the branch's requirement does not apply; pp's own does */
    cr_expect_eq(mg_route_requires(pp, &ctx, &failed), 1);
    ctx = ctx_for("/", &admin);
    cr_expect_eq(mg_route_requires(pp, &ctx, &failed), 0);
    cr_expect_eq(failed, pp->auth->require[0]);
    mg_routes_free(routes);
}

Test(auth, errors)
{
    EXPECT_ERRORS("routes:\n  - {name: a, auth: [], forward: api}\n",
                  "routes.yaml:2:21: 'auth' needs at least one authenticator (or none, optional)");
    EXPECT_ERRORS(
        "routes:\n  - {name: a, auth: 'bad name', forward: api}\n",
        "routes.yaml:2:21: invalid 'auth' value 'bad name' (expected an authenticator's name, a list of them, none or optional)");
    EXPECT_ERRORS("routes:\n  - {name: a, auth: [corp, none], forward: api}\n",
                  "routes.yaml:2:28: invalid authenticator name 'none' in a list (a name under the top-level 'auth:')");
    EXPECT_ERRORS("routes:\n  - {name: a, require: [{claim: {name: s, equals: x}}], forward: api}\n",
                  "routes.yaml:2:24: 'require' needs a credential: give this route (or a parent) 'auth: NAME' or 'auth: optional'");
    EXPECT_ERRORS("routes:\n  - {name: a, auth: none, require: [{claim: {name: s, equals: x}}], forward: api}\n",
                  "routes.yaml:2:36: 'require' needs a credential: give this route (or a parent) 'auth: NAME' or 'auth: optional'");
    EXPECT_ERRORS("routes:\n  - {name: a, auth: corp, require: [], forward: api}\n",
                  "routes.yaml:2:36: 'require' needs at least one condition");
}

Test(auth, claim_templates)
{
    mg_routes_t *routes =
        load_with("routes:\n"
                  "  - {name: a, actions: [{set_header: {X-User: '${claim.usertype}', X-None: '<${claim.missing}>'}}], "
                  "forward: api}\n",
                  resolve);
    cr_assert_not_null(routes);
    mg_ctx_t ctx = ctx_for("/", &staff);
    mg_route_result_t res;
    cr_assert_eq(mg_route_apply(mg_routes_find(routes, "a"), &ctx, &res), 0);
    cr_expect_str_eq(mg_ctx_get_header(&ctx, MG_STR("x-user"))->base, "staff");
    cr_expect_str_eq(mg_ctx_get_header(&ctx, MG_STR("x-none"))->base, "<>");
    mg_routes_free(routes);
    EXPECT_ERRORS("routes:\n  - {name: a, actions: [{set_header: {X-U: '${claim.}'}}], forward: api}\n",
                  "routes.yaml:2:44: invalid claim name in '${claim.}' (expected ${claim.<name>}, such as ${claim.sub} or "
                  "${claim.realm_access.roles})");
}
