/*
 * gateway/admin/endpoints.c: which endpoint a call reaches (method and path, with "*" segments,
 * HEAD for GET), what a path that exists answers to another method (405 with Allow) or a path
 * that does not (404), and the bearer token check.
 */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/admin/internal.h"

static h2o_iovec_t iov(const char *s)
{
    return h2o_iovec_init(s, strlen(s));
}

/* The path pattern of the endpoint a call reaches, or "404" / "405 <Allow>". */
static const char *route(const char *method, const char *path)
{
    static char out[160];
    char allow[128];
    const mg_admin_endpoint_t *e = mg__admin_route(iov(method), iov(path), allow, sizeof(allow));
    if (e != NULL)
        snprintf(out, sizeof(out), "%s %s", e->method, e->path);
    else if (allow[0] == '\0')
        snprintf(out, sizeof(out), "404");
    else
        snprintf(out, sizeof(out), "405 %s", allow);
    return out;
}

Test(admin_routing, every_endpoint_by_method_and_path)
{
    static const struct {
        const char *method, *path, *expect;
    } rows[] = {
        {"GET", "/healthz", "GET /healthz"},
        {"GET", "/metrics", "GET /metrics"},
        {"POST", "/reload", "POST /reload"},
        {"GET", "/tenants", "GET /tenants"},
        {"GET", "/routes", "GET /routes"},
        {"GET", "/backends", "GET /backends"},
        {"GET", "/", "GET /"},
        {"GET", "/sessions", "GET /sessions"},
        {"POST", "/sessions/12/send", "POST /sessions/*/*"},
        {"POST", "/sessions/12/anything", "POST /sessions/*/*"}, /* the action is the endpoint's to judge */
        {"POST", "/routes/chat/broadcast", "POST /routes/*/broadcast"},
        /* GET endpoints answer HEAD; POST ones do not */
        {"HEAD", "/healthz", "GET /healthz"},
        {"HEAD", "/metrics", "GET /metrics"},
        {"HEAD", "/reload", "405 POST"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        cr_expect_str_eq(route(rows[i].method, rows[i].path), rows[i].expect, "%s %s", rows[i].method, rows[i].path);
}

Test(admin_routing, another_method_on_a_known_path_is_405_with_allow)
{
    cr_expect_str_eq(route("POST", "/healthz"), "405 GET, HEAD");
    cr_expect_str_eq(route("POST", "/"), "405 GET, HEAD");
    cr_expect_str_eq(route("GET", "/reload"), "405 POST");
    cr_expect_str_eq(route("DELETE", "/sessions"), "405 GET, HEAD");
    cr_expect_str_eq(route("GET", "/sessions/1/close"), "405 POST");
    cr_expect_str_eq(route("PUT", "/routes/a/broadcast"), "405 POST");
    /* methods are case-sensitive */
    cr_expect_str_eq(route("get", "/healthz"), "405 GET, HEAD");
}

Test(admin_routing, unknown_paths_are_404)
{
    static const char *const paths[] = {
        "//",
        "/healthz/",          /* a trailing slash is another path */
        "/healthzx",          /* no prefix match */
        "/metric",            /* ... either way */
        "/sessions/12",       /* a "*" segment is required */
        "/sessions//send",    /* ... and it is not empty */
        "/sessions/1/send/x", /* one segment each */
        "/routes/broadcast",
        "/routes/a/b/broadcast",
        "/HEALTHZ", /* paths are case-sensitive */
        "",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        cr_expect_str_eq(route("GET", paths[i]), "404", "GET '%s'", paths[i]);
        cr_expect_str_eq(route("POST", paths[i]), "404", "POST '%s'", paths[i]);
    }
}

static int authorized(const char *token, const char *authorization)
{
    h2o_iovec_t v = iov(authorization != NULL ? authorization : "");
    return mg__admin_authorized(token, authorization != NULL ? &v : NULL);
}

Test(admin_auth, no_token_lets_every_call_in)
{
    cr_expect(authorized(NULL, NULL));
    cr_expect(authorized(NULL, "Bearer whatever"));
    cr_expect(authorized(NULL, "garbage"));
}

Test(admin_auth, the_bearer_token_and_only_it)
{
    static const struct {
        const char *authorization;
        int ok;
    } rows[] = {
        {"Bearer s3cret", 1},
        {"bearer s3cret", 1}, /* the scheme is case-insensitive (RFC 9110 11.1) */
        {"BEARER s3cret", 1},
        {"Bearer   s3cret", 1}, /* spaces after the scheme */
        {NULL, 0},
        {"", 0},
        {"Bearer", 0},
        {"Bearer ", 0},
        {"Bearer s3cre", 0},   /* a prefix of the token */
        {"Bearer s3cretX", 0}, /* the token and more */
        {"Bearer S3CRET", 0},  /* the token is case-sensitive */
        {"Bearer s3cret ", 0}, /* trailing white space is part of the credentials */
        {"Bearers3cret", 0},
        {"Basic s3cret", 0},
        {"s3cret", 0},
        {"Token s3cret", 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        cr_expect_eq(authorized("s3cret", rows[i].authorization), rows[i].ok, "Authorization: %s",
                     rows[i].authorization != NULL ? rows[i].authorization : "(none)");
}

Test(admin_auth, a_token_with_a_nul_is_compared_in_full)
{
    /* the value is compared by its length, not as a C string */
    h2o_iovec_t v = h2o_iovec_init("Bearer s3cret\0more", 18);
    cr_expect(!mg__admin_authorized("s3cret", &v));
}
