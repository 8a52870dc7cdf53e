/*
 * The `bridge:` terminal (routes/bridge.c): what a bridge route compiles to, the per-message
 * lookups the gateway uses (mg_bridge_method, mg_bridge_is_high), ${msg.<field>} in
 * bridge.path only, and the errors, each at its position.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "support.h"

static int backend_api;

static void *resolve(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "api") == 0 ? &backend_api : NULL;
}

TestSuite(bridge, .fini = support_fini);
TestSuite(bridge_errors, .fini = support_fini);

static mg_routes_t *load_ok(const char *yaml)
{
    mg_routes_t *routes = load_with(yaml, resolve);
    if (routes == NULL)
        mg_errors_print(&errs, stderr);
    cr_assert_not_null(routes);
    cr_assert_eq(errs.num_errors, 0);
    return routes;
}

#define EXPECT_ERRORS(yaml, ...) expect_errors_with(yaml, resolve, (const char *const[]){__VA_ARGS__, NULL})

static const char *method_of(const mg_route_t *r, const char *value)
{
    const char *m = mg_bridge_method(r, mg_str(value, strlen(value)));
    return m != NULL ? m : "(none)";
}

/* Expands bridge.path with the message fields `fields` (name, value pairs, NULL-terminated). */
static void expect_path(const mg_route_t *r, const char *const *fields, const char *expected)
{
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.alloc = (mg_alloc_t){arena_alloc, NULL};
    ctx.path = MG_STR("/sockets/customer");
    ctx.tenant = MG_STR("acme");
    for (size_t i = 0; fields[i] != NULL; i += 2)
        mg_ctx_set_var(&ctx, mg_str(fields[i], strlen(fields[i])), mg_str(fields[i + 1], strlen(fields[i + 1])));
    mg_str_t out;
    cr_assert_eq(mg_template_expand(r->bridge->path, &ctx, &out), 0);
    cr_expect_str_eq(out.base, expected);
}

/* ---------------------------------------------------------------------------------------
 * Reading
 */
Test(bridge, config_md_example)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: customer-socket\n"
                                  "    match: {all: [{path: /sockets/customer}, {websocket: true}]}\n"
                                  "    bridge:\n"
                                  "      backend: api\n"
                                  "      path: \"/${tenant}/api/customer\"\n"
                                  "      method: {from: type, map: {add: POST, update: PUT, delete: DELETE, get: GET}, default: "
                                  "POST}\n"
                                  "      body: payload\n"
                                  "      priority: {from: priority, high: [urgent]}\n");
    const mg_route_t *r = routes->routes[0];
    cr_expect_eq(r->kind, MG_ROUTE_BRIDGE);
    cr_expect_str_eq(r->bridge->backend_name, "api");
    cr_expect_eq(r->bridge->backend, &backend_api);
    cr_expect_str_eq(mg_template_source(r->bridge->path).base, "/${tenant}/api/customer");
    cr_expect_str_eq(r->bridge->method_from, "type");
    cr_expect_str_eq(r->bridge->method_default, "POST");
    cr_expect_str_eq(r->bridge->body_field, "payload");
    cr_expect_str_eq(r->bridge->priority_from, "priority");
    cr_expect_eq(r->bridge->num_msg_vars, 0);

    static const char *const sorted[][2] = {{"add", "POST"}, {"delete", "DELETE"}, {"get", "GET"}, {"update", "PUT"}};
    cr_assert_eq(r->bridge->num_methods, 4);
    for (size_t i = 0; i != 4; ++i) {
        cr_expect_str_eq(r->bridge->methods[i].value, sorted[i][0]);
        cr_expect_str_eq(r->bridge->methods[i].method, sorted[i][1]);
    }
    cr_expect_str_eq(method_of(r, "update"), "PUT");
    cr_expect_str_eq(method_of(r, "delete"), "DELETE");
    cr_expect_str_eq(method_of(r, "get"), "GET");
    cr_expect_str_eq(method_of(r, "add"), "POST");
    cr_expect_str_eq(method_of(r, "purge"), "POST", "not in the map: the default");
    cr_expect_str_eq(method_of(r, ""), "POST", "no field: the default");
    cr_expect_str_eq(method_of(r, "UPDATE"), "POST", "values are case-sensitive");
    cr_expect_str_eq(mg_bridge_method(r, mg_str("get\0x", 5)), "POST", "a NUL inside is part of the value");

    cr_assert_eq(r->bridge->num_priority_high, 1);
    cr_expect(mg_bridge_is_high(r, MG_STR("urgent")));
    cr_expect_not(mg_bridge_is_high(r, MG_STR("urgen")));
    cr_expect_not(mg_bridge_is_high(r, MG_STR("urgently")));
    cr_expect_not(mg_bridge_is_high(r, MG_STR("")));
    cr_expect_not(mg_bridge_is_high(r, MG_STR_NULL));

    expect_path(r, (const char *const[]){NULL}, "/acme/api/customer");
    mg_routes_free(routes);
}

Test(bridge, defaults_and_scalar_method)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: s\n"
                                  "    actions: [{rewrite_path: \"/v2${path}\"}]\n"
                                  "    bridge: {backend: api, method: PATCH}\n");
    const mg_route_t *r = routes->routes[0];
    cr_expect_eq(r->kind, MG_ROUTE_BRIDGE);
    cr_expect_str_eq(mg_template_source(r->bridge->path).base, "${path}", "default: the request's path");
    cr_expect_null(r->bridge->method_from);
    cr_expect_eq(r->bridge->num_methods, 0);
    cr_expect_str_eq(method_of(r, "anything"), "PATCH");
    cr_expect_str_eq(method_of(r, ""), "PATCH");
    cr_expect_null(r->bridge->body_field);
    cr_expect_null(r->bridge->priority_from);
    cr_expect_not(mg_bridge_is_high(r, MG_STR("high")));

    /* Applying the route runs its actions and leaves bridge.path to the gateway. */
    mg_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.alloc = (mg_alloc_t){arena_alloc, NULL};
    ctx.method = MG_STR("GET");
    ctx.path = MG_STR("/ws");
    mg_route_result_t res;
    cr_assert_eq(mg_route_apply(r, &ctx, &res), 0);
    cr_expect_eq(ctx.path.len, 6);
    cr_expect_eq(memcmp(ctx.path.base, "/v2/ws", 6), 0);
    cr_expect_eq(res.host.len, 0);
    cr_expect_eq(res.location.len, 0);
    mg_routes_free(routes);
}

Test(bridge, map_without_default_and_single_high_value)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: m\n"
                                  "    bridge:\n"
                                  "      backend: api\n"
                                  "      method: {from: op, map: {z: DELETE, a: PUT}}\n"
                                  "      priority: {from: p, high: now}\n");
    const mg_route_t *r = routes->routes[0];
    cr_expect_str_eq(r->bridge->methods[0].value, "a");
    cr_expect_str_eq(method_of(r, "z"), "DELETE");
    cr_expect_null(mg_bridge_method(r, MG_STR("b")), "no default: the message is bad");
    cr_expect_null(r->bridge->method_default);
    cr_expect(mg_bridge_is_high(r, MG_STR("now")));
    mg_routes_free(routes);
}

Test(bridge, default_only_and_several_high_values)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: d\n"
                                  "    bridge:\n"
                                  "      backend: api\n"
                                  "      method: {from: op, default: PUT}\n"
                                  "      priority: {from: p, high: [urgent, critical, asap]}\n");
    const mg_route_t *r = routes->routes[0];
    cr_expect_str_eq(method_of(r, "add"), "PUT");
    cr_assert_eq(r->bridge->num_priority_high, 3);
    cr_expect(mg_bridge_is_high(r, MG_STR("urgent")));
    cr_expect(mg_bridge_is_high(r, MG_STR("critical")));
    cr_expect(mg_bridge_is_high(r, MG_STR("asap")));
    cr_expect_not(mg_bridge_is_high(r, MG_STR("normal")));
    mg_routes_free(routes);
}

Test(bridge, msg_fields_collected_once)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: f\n"
                                  "    match: {path: {regex: '^/ws/(?<room>[a-z]+)$'}}\n"
                                  "    bridge:\n"
                                  "      backend: api\n"
                                  "      path: \"/${tenant}/${room}/${msg.kind}/${msg.id}/${msg.kind}\"\n"
                                  "      method: POST\n");
    const mg_route_t *r = routes->routes[0];
    cr_assert_eq(r->bridge->num_msg_vars, 2);
    cr_expect_str_eq(r->bridge->msg_vars[0], "msg.kind");
    cr_expect_str_eq(r->bridge->msg_vars[1], "msg.id");
    /* The gateway binds each field as the variable "msg.<field>", a plain value. */
    expect_path(r, (const char *const[]){"room", "lobby", "msg.kind", "note", "msg.id", "7", NULL}, "/acme/lobby/note/7/note");
    mg_routes_free(routes);
}

Test(bridge, path_with_message_fields_expands)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: p\n"
                                  "    bridge: {backend: api, method: POST, path: \"/${tenant}/items/${msg.id}\"}\n");
    const mg_route_t *r = routes->routes[0];
    cr_assert_eq(r->bridge->num_msg_vars, 1);
    cr_expect_str_eq(r->bridge->msg_vars[0], "msg.id");
    expect_path(r, (const char *const[]){"msg.id", "a b?", NULL}, "/acme/items/a%20b%3F");
    expect_path(r, (const char *const[]){NULL}, "/acme/items/");
    mg_routes_free(routes);
}

/* A message field is one segment: it cannot climb out of the template to another tenant's
 * path (issue 13: "../../../bob/api/customer/1" reached /bob/api/customer/1). */
Test(bridge, message_fields_cannot_climb)
{
    mg_routes_t *routes = load_ok("routes:\n"
                                  "  - name: p\n"
                                  "    bridge: {backend: api, method: GET, path: \"/${tenant}/api/customer/${msg.id}\"}\n");
    const mg_route_t *r = routes->routes[0];
    expect_path(r, (const char *const[]){"msg.id", "../../../bob/api/customer/1", NULL},
                "/acme/api/customer/..%2F..%2F..%2Fbob%2Fapi%2Fcustomer%2F1");
    expect_path(r, (const char *const[]){"msg.id", "..\\..\\bob", NULL}, "/acme/api/customer/..%5C..%5Cbob");
    static const char *const dots[] = {"..", ".", "..;x", ".;", NULL};
    for (size_t i = 0; dots[i] != NULL; ++i) {
        mg_ctx_t ctx;
        memset(&ctx, 0, sizeof(ctx));
        ctx.alloc = (mg_alloc_t){arena_alloc, NULL};
        ctx.tenant = MG_STR("acme");
        mg_ctx_set_var(&ctx, MG_STR("msg.id"), mg_str(dots[i], strlen(dots[i])));
        mg_str_t out;
        cr_expect_eq(mg_template_expand(r->bridge->path, &ctx, &out), MG_TEMPLATE_DOT_SEGMENT, "%s", dots[i]);
    }
    mg_routes_free(routes);
}

/* ---------------------------------------------------------------------------------------
 * Errors
 */
Test(bridge_errors, msg_fields_only_in_bridge_path)
{
    EXPECT_ERRORS(
        "routes:\n"
        "  - name: a\n"
        "    actions: [{rewrite_path: \"/x/${msg.id}\"}]\n"
        "    bridge: {backend: api, method: POST, path: \"/${msg.id}\"}\n"
        "  - name: b\n"
        "    actions: [{set_header: {X-Id: \"${msg.id}\"}}]\n"
        "    forward: api\n",
        "routes.yaml:3:30: unknown variable '${msg.id}' (message fields are only known in bridge.path; known here: "
        "tenant, host, path, query, method, header.<Name>, query.<name>, claim.<name>, and named groups of the conditions of "
        "this route and its parents)",
        "routes.yaml:6:35: unknown variable '${msg.id}' (message fields are only known in bridge.path; known here: "
        "tenant, host, path, query, method, header.<Name>, query.<name>, claim.<name>, and named groups of the conditions of "
        "this route and its parents)");
}

Test(bridge_errors, bridge_path_variables)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    bridge: {backend: api, method: POST, path: \"/${usr}\"}\n"
                  "  - name: b\n"
                  "    bridge: {backend: api, method: POST, path: \"/${msg.}\"}\n"
                  "  - name: c\n"
                  "    bridge: {backend: api, method: POST, path: \"items\"}\n"
                  "  - name: d\n"
                  "    bridge: {backend: api, method: POST, path: \"\"}\n",
                  "routes.yaml:3:48: unknown variable '${usr}' (known here: tenant, host, path, query, method, header.<Name>, "
                  "query.<name>, claim.<name>, msg.<field>, and named groups of the conditions of this route and its parents)",
                  "routes.yaml:5:48: empty field name in '${msg.}' (expected ${msg.<field>})",
                  "routes.yaml:7:48: a path must start with '/'", "routes.yaml:9:48: empty path (bridge.path needs at least '/')");
}

Test(bridge_errors, backend)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    bridge: {method: POST}\n"
                  "  - name: b\n"
                  "    bridge: {backend: crn, method: POST}\n"
                  "  - name: c\n"
                  "    bridge: api\n",
                  "routes.yaml:3:13: missing key 'backend'", "routes.yaml:5:23: undefined backend 'crn'",
                  "routes.yaml:7:13: expected a mapping such as {backend: api, method: POST}, got a scalar");
}

Test(bridge_errors, methods)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    bridge: {backend: api}\n"
                  "  - name: b\n"
                  "    bridge: {backend: api, method: post}\n"
                  "  - name: c\n"
                  "    bridge: {backend: api, method: {from: type, map: {add: POST, del: \"DE LETE\"}, default: get}}\n"
                  "  - name: d\n"
                  "    bridge: {backend: api, method: {from: type}}\n"
                  "  - name: e\n"
                  "    bridge: {backend: api, method: {map: {add: POST}, defualt: PUT}}\n"
                  "  - name: f\n"
                  "    bridge: {backend: api, method: [POST]}\n"
                  "  - name: g\n"
                  "    bridge: {backend: api, method: {from: \"\", map: {}}}\n",
                  "routes.yaml:3:13: missing key 'method'",
                  "routes.yaml:5:36: method 'post' must be upper case, methods are case-sensitive (did you mean 'POST'?)",
                  "routes.yaml:7:71: invalid method 'DE LETE' (a method is a token such as GET or PURGE)",
                  "routes.yaml:7:92: method 'get' must be upper case, methods are case-sensitive (did you mean 'GET'?)",
                  "routes.yaml:9:36: method needs 'map', 'default' or both",
                  "routes.yaml:11:55: unknown key 'defualt' (did you mean 'default'?)",
                  "routes.yaml:13:36: expected a method such as POST or a mapping {from, map, default}, got a sequence",
                  "routes.yaml:15:43: empty message field name",
                  "routes.yaml:15:52: empty method map (expected operation values and their methods, such as {add: POST})");
}

Test(bridge_errors, body_and_priority)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    bridge: {backend: api, method: POST, body: [x]}\n"
                  "  - name: b\n"
                  "    bridge: {backend: api, method: POST, priority: {from: p}}\n"
                  "  - name: c\n"
                  "    bridge: {backend: api, method: POST, priority: {high: [a, {b: c}], form: p}}\n"
                  "  - name: d\n"
                  "    bridge: {backend: api, method: POST, priority: {from: p, high: []}}\n",
                  "routes.yaml:3:48: expected a string, got a sequence", "routes.yaml:5:52: missing key 'high'",
                  "routes.yaml:7:72: unknown key 'form' (did you mean 'from'?)",
                  "routes.yaml:9:68: empty 'high' list (expected the values that mean high priority)");
}

Test(bridge_errors, both_forward_and_bridge)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: two\n"
                  "    forward: api\n"
                  "    bridge: {backend: api, method: POST}\n"
                  "  - name: three\n"
                  "    bridge: {backend: api, method: POST}\n"
                  "    respond: {status: 200}\n",
                  "routes.yaml:2:5: route 'two' has both forward and bridge",
                  "routes.yaml:5:5: route 'three' has both bridge and respond");
}

Test(bridge_errors, unknown_keys)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: a\n"
                  "    brigde: {backend: api, method: POST}\n"
                  "  - name: b\n"
                  "    bridge: {backend: api, method: POST, bdy: payload}\n",
                  "routes.yaml:3:5: unknown key 'brigde' (did you mean 'bridge'?)",
                  "routes.yaml:2:5: route 'a' has no terminal (forward, bridge, respond, redirect or routes)",
                  "routes.yaml:5:42: unknown key 'bdy' (did you mean 'body'?)");
}
