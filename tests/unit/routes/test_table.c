/*
 * The routing table: (configuration, request) -> (chosen route, final method, path, query,
 * headers, host, location) or the status the gateway answers (400, 404). Each row is one
 * test. The request goes through what the gateway does before and after matching: path
 * normalization (400 when the path escapes the root), mg_routes_match, mg_route_apply (400
 * when a value would carry CR, LF or NUL). Every row is also matched by linear evaluation,
 * which must agree with the index.
 *
 * The configurations include the route tree of ../shared/CONFIG.md (the parts that belong to
 * this module), every condition kind and every action.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "routes/routes.h"

/* ---------------------------------------------------------------------------------------
 * Configurations
 */

/* CONFIG.md's routes, without `bridge` and `order` (their own modules). */
static const char config_md[] = "routes:\n"
                                "  - name: crm-by-tenant\n"
                                "    match:\n"
                                "      all:\n"
                                "        - host: {regex: '^(?<tenant>[a-z0-9-]+)\\.example\\.com$'}\n"
                                "        - path: {prefix: /crm}\n"
                                "    actions:\n"
                                "      - set_header: {X-Tenant: \"${tenant}\", Authorization: \"Bearer internal\"}\n"
                                "      - remove_header: Cookie\n"
                                "      - rewrite_path: \"/${tenant}/crmapp${remainder}\"\n"
                                "    forward: crm\n"
                                "  - name: api-customer\n"
                                "    match: {path: {prefix: /api/customer}}\n"
                                "    routes:\n"
                                "      - name: customer-v2\n"
                                "        match:\n"
                                "          any:\n"
                                "            - header: {name: X-User-Group, equals: default}\n"
                                "            - not: {header: {name: X-User-Type, equals: admin}}\n"
                                "        actions: [{rewrite_path: \"/api-v2/customer${remainder}\"}]\n"
                                "        forward: api\n"
                                "      - name: customer-v1\n"
                                "        forward: api\n"
                                "  - name: accounts\n"
                                "    match: {path: {prefix: /accounts}}\n"
                                "    forward: crm\n"
                                "  - name: fallback\n"
                                "    respond: {status: 404, body: \"no route\\n\"}\n";

/* One route per condition kind, most specific first. */
static const char conditions[] =
    "routes:\n"
    "  - {name: host-exact, match: {host: api.example.com}, respond: {status: 200}}\n"
    "  - {name: host-wild, match: {host: '*.example.com'}, respond: {status: 200}}\n"
    "  - {name: host-regex, match: {host: {regex: '^(?<svc>[a-z]+)\\.internal$'}},\n"
    "     actions: [{set_header: {x-svc: '${svc}'}}], respond: {status: 200}}\n"
    "  - {name: path-exact, match: {path: /exact}, respond: {status: 200}}\n"
    "  - {name: path-regex, match: {path: {regex: '^/users/(?<id>[0-9]+)$'}},\n"
    "     actions: [{set_header: {x-id: '${id}'}}], respond: {status: 200}}\n"
    "  - {name: method-list, match: {method: [POST, PUT]}, respond: {status: 200}}\n"
    "  - {name: header-equals, match: {header: {name: X-Env, equals: prod}}, respond: {status: 200}}\n"
    "  - {name: header-prefix, match: {header: {name: X-Env, prefix: stag}}, respond: {status: 200}}\n"
    "  - {name: header-contains, match: {header: {name: X-Env, contains: dev}}, respond: {status: 200}}\n"
    "  - {name: header-regex, match: {header: {name: X-Ver, regex: '^v(?<major>[0-9]+)'}},\n"
    "     actions: [{set_header: {x-major: '${major}'}}], respond: {status: 200}}\n"
    "  - {name: header-present, match: {header: {name: X-Debug, present: true}}, respond: {status: 200}}\n"
    "  - {name: query-equals, match: {query: {name: mode, equals: fast}}, respond: {status: 200}}\n"
    "  - {name: query-prefix, match: {query: {name: mode, prefix: sl}}, respond: {status: 200}}\n"
    "  - {name: query-contains, match: {query: {name: mode, contains: ' '}}, respond: {status: 200}}\n"
    "  - {name: query-regex, match: {query: {name: page, regex: '^(?<page>[0-9]+)$'}},\n"
    "     actions: [{set_header: {x-page: '${page}'}}], respond: {status: 200}}\n"
    "  - {name: query-present, match: {query: {name: flag, present: true}}, respond: {status: 200}}\n"
    "  - {name: websocket, match: {websocket: true}, respond: {status: 200}}\n"
    "  - {name: tenant, match: {tenant: [acme, globex]}, respond: {status: 200}}\n"
    "  - {name: header-absent, match: {header: {name: X-Probe, present: false}}, respond: {status: 200}}\n"
    "  - {name: last, respond: {status: 200}}\n";

static const char combinators[] =
    "routes:\n"
    "  - name: all-of\n"
    "    match: {all: [{path: {prefix: /a}}, {method: GET}, {header: {name: X-K, present: true}}]}\n"
    "    respond: {status: 200}\n"
    "  - name: implicit-all\n"
    "    match: {path: {prefix: /a}, method: DELETE}\n"
    "    respond: {status: 200}\n"
    "  - name: any-of\n"
    "    match: {any: [{path: /b}, {path: /c}]}\n"
    "    respond: {status: 200}\n"
    "  - name: not-get\n"
    "    match: {all: [{path: /d}, {not: {method: GET}}]}\n"
    "    respond: {status: 200}\n"
    "  - name: nested\n"
    "    match: {any: [{all: [{path: /e}, {query: {name: x, equals: '1'}}]}, {not: {any: [{path: /e}, "
    "{path: {prefix: /a}}, {path: /b}, {path: /c}, {path: /d}]}}]}\n"
    "    respond: {status: 200}\n";

/* Failed branches must leave nothing behind: neither their captures nor their actions. */
static const char branches[] = "routes:\n"
                               "  - name: tenant-branch\n"
                               "    match: {host: {regex: '^(?<tenant>[a-z]+)\\.shop\\.test$'}}\n"
                               "    actions: [{set_header: {x-from-branch: '1'}}]\n"
                               "    routes:\n"
                               "      - name: shop-cart\n"
                               "        match: {path: {prefix: /cart}}\n"
                               "        actions: [{set_header: {x-leaf: cart}}]\n"
                               "        forward: api\n"
                               "      - name: shop-admin\n"
                               "        match: {all: [{path: {prefix: /admin}}, {header: {name: X-Admin, equals: yes}}]}\n"
                               "        forward: api\n"
                               "  - name: after-branch\n"
                               "    actions: [{set_header: {x-tenant: '${tenant}'}}]\n"
                               "    forward: crm\n";

static const char actions[] = "routes:\n"
                              "  - name: replace\n"
                              "    match: {path: /replace}\n"
                              "    actions: [{set_header: {X-Dup: one}}]\n"
                              "    forward: api\n"
                              "  - name: add\n"
                              "    match: {path: /add}\n"
                              "    actions: [{add_header: {X-Dup: three}}]\n"
                              "    forward: api\n"
                              "  - name: remove\n"
                              "    match: {path: /remove}\n"
                              "    actions: [{remove_header: [X-Dup, X-Other]}]\n"
                              "    forward: api\n"
                              "  - name: method\n"
                              "    match: {path: /method}\n"
                              "    actions: [{set_method: PATCH}, {set_header: {x-was: '${method}'}}]\n"
                              "    forward: api\n"
                              "  - name: query\n"
                              "    match: {path: /query}\n"
                              "    actions: [{set_query: 'q=${query.q}&v=2'}]\n"
                              "    forward: api\n"
                              "  - name: order\n"
                              "    match: {path: {prefix: /order}}\n"
                              "    actions: [{rewrite_path: '/new${remainder}'}, {set_header: {x-path: '${path}'}}, {set_header: "
                              "{x-copy: '${header.x-path}'}}]\n"
                              "    forward: api\n"
                              "  - name: from-query\n"
                              "    match: {path: /hq}\n"
                              "    actions: [{set_header: {x-q: '${query.q}'}}]\n"
                              "    forward: api\n"
                              "  - name: from-header\n"
                              "    match: {path: /hh}\n"
                              "    actions: [{rewrite_path: '/to/${header.X-Dest}'}]\n"
                              "    forward: api\n"
                              "  - name: escape\n"
                              "    match: {path: /esc}\n"
                              "    actions: [{rewrite_path: '/${header.X-Dest}/x'}]\n"
                              "    forward: api\n"
                              "  - name: host\n"
                              "    match: {path: /host}\n"
                              "    forward: {backend: api, host: '${query.h}.internal'}\n"
                              "  - name: redirect\n"
                              "    match: {path: {prefix: /old}}\n"
                              "    redirect: {location: 'https://${host}/new${remainder}', status: 301}\n"
                              "  - name: redirect-default\n"
                              "    match: {path: /r}\n"
                              "    redirect: {location: '/elsewhere?from=${query.from}'}\n"
                              "  - name: builtins\n"
                              "    match: {path: {prefix: /b}}\n"
                              "    actions: [{set_header: {x-all: '${method} ${host} ${path} ${query} ${tenant}'}}]\n"
                              "    forward: api\n";

/* Guarding a path against ";params" and dot segments (issue 13, items 1 and 7): 9 routes, so
 * the top level has an index, which must see the paths as the conditions do. */
static const char guard[] = "routes:\n"
                            "  - {name: block-admin, match: {path: /public/admin}, respond: {status: 403}}\n"
                            "  - {name: block-admin-tree, match: {path: {prefix: /public/admin}}, respond: {status: 403}}\n"
                            "  - name: api-v1\n"
                            "    match: {path: {prefix: /api/v1}}\n"
                            "    actions: [{rewrite_path: '/v2${remainder}'}]\n"
                            "    forward: api\n"
                            "  - {name: exact-a, match: {path: /a/b}, forward: api}\n"
                            "  - {name: admin, match: {path: {prefix: /admin}}, forward: api}\n"
                            "  - name: search\n"
                            "    match: {path: /search}\n"
                            "    actions: [{rewrite_path: '/v1/search/${query.q}'}]\n"
                            "    forward: api\n"
                            "  - name: by-name\n"
                            "    match: {path: {regex: '^/n/(?<n>[^/]*)'}}\n"
                            "    actions: [{rewrite_path: '/names/${n}/x'}]\n"
                            "    forward: api\n"
                            "  - {name: public, match: {path: {prefix: /public}}, forward: api}\n"
                            "  - {name: fallback, respond: {status: 404}}\n";

/* ---------------------------------------------------------------------------------------
 * Rows
 */
typedef struct row {
    const char *title;
    const char *config;
    const char *method, *host, *target; /* target: path and query as sent */
    const char *headers;                /* "name: value\n" lines */
    int websocket;
    const char *tenant;
    const char *route; /* expected route name; NULL with status 404 */
    int status;        /* 0: chosen and applied; 400; 404 */
    const char *path;  /* expected final path (NULL: not checked) */
    const char *query; /* expected final query */
    const char *method_out;
    const char *expect; /* "name: value" must be among the final headers; "-name" must be absent */
    const char *host_out, *location;
} row_t;

#define GET(host, target) "GET", host, target
#define R(...) ((row_t){__VA_ARGS__})

/* clang-format off */
static row_t rows[] = {
    /* CONFIG.md */
    R("cfg: tenant from host, headers set, cookie removed, path rewritten, query kept", config_md, GET("acme.example.com", "/crm/contacts?x=1"),
      "cookie: a=b\nx-keep: 1\n", .route = "crm-by-tenant", .path = "/acme/crmapp/contacts", .query = "x=1",
      .expect = "x-tenant: acme\nauthorization: Bearer internal\n-cookie\nx-keep: 1\n"),
    R("cfg: prefix itself, empty remainder", config_md, GET("acme.example.com", "/crm"), .route = "crm-by-tenant", .path = "/acme/crmapp"),
    R("cfg: prefix with trailing slash", config_md, GET("beta-2.example.com", "/crm/"), .route = "crm-by-tenant", .path = "/beta-2/crmapp/"),
    R("cfg: prefix is on a segment boundary", config_md, GET("acme.example.com", "/crmx"), .route = "fallback"),
    R("cfg: host outside the regex", config_md, GET("acme.example.org", "/crm/a"), .route = "fallback"),
    R("cfg: host regex is anchored", config_md, GET("x.acme.example.com", "/crm/a"), .route = "fallback"),
    R("cfg: user group default -> v2", config_md, GET("h", "/api/customer/1"), "x-user-group: default\nx-user-type: admin\n",
      .route = "customer-v2", .path = "/api-v2/customer/1"),
    R("cfg: admin -> v1", config_md, GET("h", "/api/customer/1"), "x-user-type: admin\n", .route = "customer-v1", .path = "/api/customer/1"),
    R("cfg: no headers -> not admin -> v2", config_md, GET("h", "/api/customer"), .route = "customer-v2", .path = "/api-v2/customer"),
    R("cfg: other user type -> v2", config_md, GET("h", "/api/customer/9?a=b"), "x-user-type: staff\n", .route = "customer-v2",
      .path = "/api-v2/customer/9", .query = "a=b"),
    R("cfg: branch prefix boundary", config_md, GET("h", "/api/customers"), .route = "fallback"),
    R("cfg: accounts", config_md, GET("h", "/accounts/7"), .route = "accounts", .path = "/accounts/7"),
    R("cfg: fallback for the root", config_md, GET("h", "/"), .route = "fallback"),
    R("cfg: dot segments resolved before matching", config_md, GET("acme.example.com", "/crm/../accounts/1"), .route = "accounts",
      .path = "/accounts/1"),
    R("cfg: encoded dots resolved before matching", config_md, GET("acme.example.com", "/x/%2e%2e/crm/a"), .route = "crm-by-tenant",
      .path = "/acme/crmapp/a"),
    R("cfg: a path escaping the root is a 400", config_md, GET("acme.example.com", "/crm/../../etc"), .status = 400),
    R("cfg: CR LF hidden in a captured path is a 400", config_md, GET("acme.example.com", "/crm/a%0d%0aX-Evil:%201"), .status = 400),
    R("cfg: double slashes collapse", config_md, GET("acme.example.com", "//crm//a"), .route = "crm-by-tenant", .path = "/acme/crmapp/a"),
    R("cfg: other escapes kept in the rewritten path", config_md, GET("acme.example.com", "/crm/a%20b%2Fc"), .route = "crm-by-tenant",
      .path = "/acme/crmapp/a%20b%2Fc"),

    /* condition kinds */
    R("host exact", conditions, GET("api.example.com", "/"), .route = "host-exact"),
    R("host wildcard, one label", conditions, GET("www.example.com", "/"), .route = "host-wild"),
    R("host wildcard, two labels", conditions, GET("a.b.example.com", "/"), .route = "host-wild"),
    R("host wildcard needs a label", conditions, GET("example.com", "/"), .route = "header-absent"),
    R("host regex capture", conditions, GET("billing.internal", "/"), .route = "host-regex", .expect = "x-svc: billing\n"),
    R("path exact", conditions, GET("h", "/exact"), .route = "path-exact"),
    R("path exact is not a prefix", conditions, GET("h", "/exact/more"), .route = "header-absent"),
    R("path regex capture", conditions, GET("h", "/users/42"), .route = "path-regex", .expect = "x-id: 42\n"),
    R("path regex anchored", conditions, GET("h", "/users/42/x"), .route = "header-absent"),
    R("method in list", conditions, "PUT", "h", "/", .route = "method-list"),
    R("method not in list", conditions, "PATCH", "h", "/", .route = "header-absent"),
    R("header equals", conditions, GET("h", "/"), "x-env: prod\n", .route = "header-equals"),
    R("header equals is case-sensitive", conditions, GET("h", "/"), "x-env: PROD\n", .route = "header-absent"),
    R("header prefix", conditions, GET("h", "/"), "x-env: staging\n", .route = "header-prefix"),
    R("header contains", conditions, GET("h", "/"), "x-env: my-dev-box\n", .route = "header-contains"),
    R("header repeated: any instance", conditions, GET("h", "/"), "x-env: qa\nx-env: prod\n", .route = "header-equals"),
    R("header regex capture", conditions, GET("h", "/"), "x-ver: v12.3\n", .route = "header-regex", .expect = "x-major: 12\n"),
    R("header present", conditions, GET("h", "/"), "x-debug: \n", .route = "header-present"),
    R("query equals", conditions, GET("h", "/?a=1&mode=fast"), .route = "query-equals"),
    R("query prefix", conditions, GET("h", "/?mode=slow"), .route = "query-prefix"),
    R("query value decoded", conditions, GET("h", "/?mode=f%61st"), .route = "query-equals"),
    R("query plus is a space", conditions, GET("h", "/?mode=a+b"), .route = "query-contains"),
    R("query regex capture", conditions, GET("h", "/?page=7"), .route = "query-regex", .expect = "x-page: 7\n"),
    R("query present without value", conditions, GET("h", "/?flag"), .route = "query-present"),
    R("query name must match whole", conditions, GET("h", "/?flagx=1"), .route = "header-absent"),
    R("websocket", conditions, GET("h", "/"), .websocket = 1, .route = "websocket"),
    R("tenant in list", conditions, GET("h", "/"), .tenant = "globex", .route = "tenant"),
    R("tenant not in list", conditions, GET("h", "/"), "x-probe: 1\n", .tenant = "initech", .route = "last"),
    R("header absent", conditions, GET("h", "/"), .route = "header-absent"),

    /* combinators */
    R("all holds", combinators, GET("h", "/a/1"), "x-k: 1\n", .route = "all-of"),
    R("all fails on one", combinators, GET("h", "/a/1"), .status = 404),
    R("implicit all", combinators, "DELETE", "h", "/a", .route = "implicit-all"),
    R("any first", combinators, GET("h", "/b"), .route = "any-of"),
    R("any second", combinators, GET("h", "/c"), .route = "any-of"),
    R("not holds", combinators, "POST", "h", "/d", .route = "not-get"),
    R("not fails", combinators, GET("h", "/d"), .status = 404),
    R("nested all inside any", combinators, GET("h", "/e?x=1"), .route = "nested"),
    R("nested not any", combinators, GET("h", "/z"), .route = "nested"),
    R("nested nothing", combinators, GET("h", "/e?x=2"), .status = 404),

    /* failed branches leave no trace */
    R("branch child chosen, branch actions first", branches, GET("acme.shop.test", "/cart/1"), .route = "shop-cart",
      .expect = "x-from-branch: 1\nx-leaf: cart\n"),
    R("branch failed: its capture does not leak", branches, GET("acme.shop.test", "/admin"), .tenant = "", .route = "after-branch",
      .expect = "x-tenant: \n-x-from-branch\n-x-leaf\n"),
    R("branch failed: identified tenant, not the capture", branches, GET("acme.shop.test", "/other"), .tenant = "real",
      .route = "after-branch", .expect = "x-tenant: real\n-x-from-branch\n"),
    R("branch not entered", branches, GET("acme.example.com", "/cart"), .route = "after-branch", .expect = "x-tenant: \n"),
    R("branch second child", branches, GET("acme.shop.test", "/admin/x"), "x-admin: yes\n", .route = "shop-admin",
      .expect = "x-from-branch: 1\n-x-leaf\n"),

    /* actions and terminals */
    R("set_header replaces every instance", actions, GET("h", "/replace"), "x-dup: a\nx-dup: b\n", .route = "replace",
      .expect = "x-dup: one\n-x-dup: a\n-x-dup: b\n"),
    R("add_header appends", actions, GET("h", "/add"), "x-dup: a\n", .route = "add", .expect = "x-dup: a\nx-dup: three\n"),
    R("remove_header list", actions, GET("h", "/remove"), "x-dup: a\nx-other: b\nx-keep: c\n", .route = "remove",
      .expect = "-x-dup\n-x-other\nx-keep: c\n"),
    R("set_method; later actions see it", actions, GET("h", "/method"), .route = "method", .method_out = "PATCH", .expect = "x-was: PATCH\n"),
    R("set_query from a query value, encoded", actions, GET("h", "/query?q=a%26b"), .route = "query", .query = "q=a%26b&v=2"),
    R("actions run in order and see earlier edits", actions, GET("h", "/order/x"), .route = "order", .path = "/new/x",
      .expect = "x-path: /new/x\nx-copy: /new/x\n"),
    R("query value decoded into a header", actions, GET("h", "/hq?q=hello%20world"), .route = "from-query", .expect = "x-q: hello world\n"),
    R("CR LF in a query value is a 400", actions, GET("h", "/hq?q=a%0d%0aInjected:%201"), .status = 400),
    R("NUL in a query value is a 400", actions, GET("h", "/hq?q=a%00b"), .status = 400),
    R("header value encoded into a path", actions, GET("h", "/hh"), "x-dest: a b?c\n", .route = "from-header", .path = "/to/a%20b%3Fc"),
    R("a header value in a path is one segment", actions, GET("h", "/esc"), "x-dest: ../..\n", .route = "escape", .path = "/..%2F../x"),
    R("a header value that is a dot segment is a 400", actions, GET("h", "/esc"), "x-dest: ..\n", .status = 400),
    R("a header value cannot make segments", actions, GET("h", "/esc"), "x-dest: a/../b\n", .route = "escape", .path = "/a%2F..%2Fb/x"),
    R("forward host template", actions, GET("h", "/host?h=billing"), .route = "host", .host_out = "billing.internal"),
    R("forward host with CR LF is a 400", actions, GET("h", "/host?h=a%0d%0ab"), .status = 400),
    R("redirect with remainder", actions, GET("example.org", "/old/page?x=1"), .route = "redirect",
      .location = "https://example.org/new/page"),
    R("redirect query value encoded", actions, GET("h", "/r?from=a%20b"), .route = "redirect-default", .location = "/elsewhere?from=a%20b"),
    R("builtin variables", actions, "PUT", "h.test", "/b/1?k=v", .tenant = "acme", .route = "builtins",
      .expect = "x-all: PUT h.test /b/1 k=v acme\n"),

    /* ";params" are ignored by exact and prefix paths, kept in what is forwarded */
    R("guard: the blocked path", guard, GET("h", "/public/admin"), .route = "block-admin"),
    R("guard: params on the last segment", guard, GET("h", "/public/admin;x"), .route = "block-admin"),
    R("guard: a session id", guard, GET("h", "/public/admin;jsessionid=1"), .route = "block-admin"),
    R("guard: params then a segment", guard, GET("h", "/public/admin;x/y"), .route = "block-admin-tree"),
    R("guard: params deeper", guard, GET("h", "/public/admin/y;x"), .route = "block-admin-tree"),
    R("guard: params on an earlier segment", guard, GET("h", "/public;x/admin"), .route = "block-admin"),
    R("guard: a segment of params only", guard, GET("h", "/public/;x/admin"), .route = "block-admin"),
    R("guard: a first segment of params only", guard, GET("h", "/;x/public/admin"), .route = "block-admin"),
    R("guard: two segments of params only", guard, GET("h", "/public/;a/;b/admin;c"), .route = "block-admin"),
    R("guard: a dot segment with params", guard, GET("h", "/public/.;x/admin"), .route = "block-admin"),
    R("guard: a dot-dot segment with params is resolved", guard, GET("h", "/public/..;/admin"), .route = "admin", .path = "/admin"),
    R("guard: params do not join segments", guard, GET("h", "/public/admi;n"), .route = "public", .path = "/public/admi;n"),
    R("guard: a longer segment is another path", guard, GET("h", "/public/adminx;y"), .route = "public"),
    R("guard: an escaped ';' is no param", guard, GET("h", "/public/admin%3Bx"), .route = "public", .path = "/public/admin%3Bx"),
    R("guard: exact with params, forwarded with them", guard, GET("h", "/a/b;x"), .route = "exact-a", .path = "/a/b;x"),
    R("guard: a trailing params-only segment is a trailing slash", guard, GET("h", "/a/b/;x"), .route = "fallback"),
    R("guard: remainder keeps later params", guard, GET("h", "/api/v1/users;jsessionid=1"), .route = "api-v1",
      .path = "/v2/users;jsessionid=1"),
    R("guard: remainder after the prefix's params", guard, GET("h", "/api/v1;x/users"), .route = "api-v1", .path = "/v2/users"),
    /* template values in a path are one segment, and never a dot segment */
    R("guard: a query value cannot climb", guard, GET("h", "/search?q=..%2F..%2Fadmin%2Fdelete"), .route = "search",
      .path = "/v1/search/..%2F..%2Fadmin%2Fdelete"),
    R("guard: a query value that is '..' is a 400", guard, GET("h", "/search?q=.."), .status = 400),
    R("guard: a query value '..;x' is a 400", guard, GET("h", "/search?q=..;x"), .status = 400),
    R("guard: a query value '%2E%2E' is a 400", guard, GET("h", "/search?q=%2E%2E"), .status = 400),
    R("guard: a query value '.' is a 400", guard, GET("h", "/search?q=."), .status = 400),
    R("guard: an empty query value", guard, GET("h", "/search?q="), .route = "search", .path = "/v1/search/"),
    R("guard: a path capture keeps its escapes", guard, GET("h", "/n/x%2F..%2F..%2Fadmin"), .route = "by-name",
      .path = "/names/x%2F..%2F..%2Fadmin/x"),
    R("guard: a path capture that is part of a segment", guard, GET("h", "/n/..x"), .route = "by-name", .path = "/names/..x/x"),
};
/* clang-format on */

/* ---------------------------------------------------------------------------------------
 * Running a row
 */
static int backend_api, backend_crm;

static void *resolve(void *arg, const char *name)
{
    (void)arg;
    if (strcmp(name, "api") == 0)
        return &backend_api;
    if (strcmp(name, "crm") == 0)
        return &backend_crm;
    return NULL;
}

static char arena[1 << 16];
static size_t arena_used;

static void *arena_alloc(void *arg, size_t size)
{
    (void)arg;
    size = (size + 15) & ~(size_t)15;
    cr_assert_leq(arena_used + size, sizeof(arena));
    void *p = arena + arena_used;
    arena_used += size;
    return p;
}

static size_t parse_headers(const char *text, mg_header_t *out, size_t max, char *buf)
{
    size_t n = 0;
    strcpy(buf, text != NULL ? text : "");
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *colon = strchr(line, ':');
        cr_assert_not_null(colon, "bad header line in row: %s", line);
        cr_assert_lt(n, max);
        *colon = '\0';
        const char *value = colon[1] == ' ' ? colon + 2 : colon + 1;
        out[n++] = (mg_header_t){mg_str(line, strlen(line)), mg_str(value, strlen(value))};
    }
    return n;
}

static int has_header(const mg_ctx_t *ctx, const char *name, const char *value)
{
    for (size_t i = 0; i != ctx->num_headers; ++i) {
        const mg_header_t *h = &ctx->headers[i];
        if (h->name.len == strlen(name) && memcmp(h->name.base, name, h->name.len) == 0 &&
            (value == NULL || (h->value.len == strlen(value) && memcmp(h->value.base, value, h->value.len) == 0)))
            return 1;
    }
    return 0;
}

/* Each line of `expect`: "name: value" present, "-name" absent, "-name: value" absent. */
static void check_headers(const row_t *row, const mg_ctx_t *ctx)
{
    char buf[1024];
    strcpy(buf, row->expect);
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        int absent = line[0] == '-';
        char *name = line + absent, *colon = strchr(name, ':');
        const char *value = NULL;
        if (colon != NULL) {
            *colon = '\0';
            value = colon[1] == ' ' ? colon + 2 : colon + 1;
        }
        cr_expect_eq(has_header(ctx, name, value), !absent, "%s: header %s%s%s should %sbe there", row->title, name,
                     value ? ": " : "", value ? value : "", absent ? "not " : "");
    }
}

static void expect_str(const row_t *row, const char *what, mg_str_t got, const char *want)
{
    if (want == NULL)
        return;
    cr_expect(got.len == strlen(want) && memcmp(got.base, want, got.len) == 0, "%s: %s is '%.*s', expected '%s'", row->title, what,
              (int)got.len, got.base, want);
}

static mg_routes_t *load(const char *yaml, mg_errors_t *errs)
{
    mg_doc_t *doc = mg_doc_load_string("table.yaml", yaml, strlen(yaml), errs);
    cr_assert_not_null(doc);
    mg_routes_t *routes = mg_routes_compile(mg_node_get(mg_doc_root(doc), "routes"), resolve, NULL, errs);
    mg_doc_free(doc);
    if (routes == NULL)
        mg_errors_print(errs, stderr);
    cr_assert_not_null(routes, "the row's configuration does not compile");
    return routes;
}

static void run_row(const row_t *row)
{
    mg_errors_t errs = {0};
    mg_routes_t *routes = load(row->config, &errs);
    char header_buf[512], path[512];
    mg_header_t headers[8];
    const char *q = strchr(row->target, '?');
    size_t raw_len = q != NULL ? (size_t)(q - row->target) : strlen(row->target);
    long plen = mg_path_normalize(row->target, raw_len, path);
    arena_used = 0;
    mg_ctx_t ctx = {.method = mg_str(row->method, strlen(row->method)),
                    .scheme = MG_STR("http"),
                    .host = mg_str(row->host, strlen(row->host)),
                    .path = mg_str(path, plen > 0 ? (size_t)plen : 0),
                    .query = q != NULL ? mg_str(q + 1, strlen(q + 1)) : MG_STR(""),
                    .peer = MG_STR("192.0.2.1"),
                    .headers = headers,
                    .num_headers = parse_headers(row->headers, headers, 8, header_buf),
                    .websocket = row->websocket,
                    .tenant = row->tenant != NULL ? mg_str(row->tenant, strlen(row->tenant)) : MG_STR(""),
                    .alloc = {arena_alloc, NULL}};
    int status = 0;
    const mg_route_t *route = NULL;
    mg_route_result_t res = {0};
    if (plen < 0) {
        status = 400;
    } else {
        mg_ctx_t linear = ctx;
        route = mg_routes_match(routes, &ctx);
        cr_expect_eq(mg_routes_match_linear(routes, &linear), route, "%s: the index and linear evaluation disagree", row->title);
        if (route == NULL)
            status = 404;
        else if (mg_route_apply(route, &ctx, &res) != 0)
            status = 400;
    }
    cr_expect_eq(status, row->status, "%s: status %d, expected %d%s%s", row->title, status, row->status, res.error ? ": " : "",
                 res.error ? res.error : "");
    if (status == 0 && row->status == 0) {
        cr_expect_str_eq(route->name, row->route, "%s: route %s, expected %s", row->title, route->name, row->route);
        expect_str(row, "path", ctx.path, row->path);
        expect_str(row, "query", ctx.query, row->query);
        expect_str(row, "method", ctx.method, row->method_out);
        expect_str(row, "host", res.host, row->host_out);
        expect_str(row, "location", res.location, row->location);
        if (row->location != NULL)
            cr_expect_eq(route->kind, MG_ROUTE_REDIRECT);
        if (row->expect != NULL)
            check_headers(row, &ctx);
    }
    mg_routes_free(routes);
    mg_errors_clear(&errs);
}

#define NUM_ROWS (sizeof(rows) / sizeof(rows[0]))
_Static_assert(NUM_ROWS >= 60, "the routing table is the issue's acceptance suite: at least 60 rows");

/* Criterion runs each parameter in a fresh process, where the pointers inside a copied row
 * would not be valid: the parameter is the row's index. */
ParameterizedTestParameters(table, row)
{
    static size_t indexes[NUM_ROWS];
    for (size_t i = 0; i != NUM_ROWS; ++i)
        indexes[i] = i;
    return cr_make_param_array(size_t, indexes, NUM_ROWS);
}

ParameterizedTest(size_t *i, table, row)
{
    run_row(&rows[*i]);
}
