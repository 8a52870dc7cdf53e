"""Paths a hostile client shapes (issue 13, items 1, 7 and 9b), against the real binary and a
backend that records the path it got:

- a template value that does not come from the request path is one segment: a bridge message
  field, a query parameter in rewrite_path or a header value cannot climb out of the template,
  and a value that would make a "." or ".." segment is a 400;
- a tenant named from a header or a path that could name another path ('/', '\\', "..") is a
  400, so it can neither reach another tenant's backend path nor get a fresh quota;
- the client's path: "%2F", "%5C" and '\\' are refused (limits.escaped_slashes: reject, the
  default) or kept as sent (keep); ";params" do not hide a path from the route that blocks it,
  and "..;" is a dot segment;
- a header made by a template holds no control character but tab.
"""

import json

import pytest

from support import free_port, gateway_config, request
from wsbackend import connect, run


def start(start_gateway, routes, backend, **top):
    return start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=routes, **top))


def assert_refused(status, headers, body, why=None):
    assert status == 400, body
    assert headers["X-Matchgate-Error"] == "bad-request"
    if why is not None:
        assert why in body.decode(), body
    return body.decode()


def paths(backend):
    return [r.path for r in backend.received()]


# --------------------------------------------------------------------------------------
# Item 1: template values never make path segments


def test_a_bridge_message_field_cannot_reach_another_tenants_path(start_gateway, backend):
    """The issue's attack: alice's session, message id "../../../bob/api/customer/1"."""
    port = free_port()
    route = {
        "name": "customer-socket",
        "match": {"all": [{"path": "/sockets/customer"}, {"websocket": True}]},
        "bridge": {"backend": "b", "path": "/${tenant}/api/customer/${msg.id}", "method": "GET"},
    }
    start_gateway(gateway_config(port, backends={"b": [backend.url]}, routes=[route],
                                 tenants={"identify": [{"header": "X-Tenant-Id"}]}))
    ids = ["../../../bob/api/customer/1", "..\\..\\bob", "..", ".", "..;x", ".;", "%2E%2E", "1"]

    async def main():
        async with connect(f"ws://127.0.0.1:{port}/sockets/customer", extra_headers={"X-Tenant-Id": "alice"}) as ws:
            answers = []
            for i in ids:  # one at a time: each answer names its message
                await ws.send(json.dumps({"id": i}))
                answers.append(json.loads(await ws.recv()))
            return answers

    got = run(main())
    by_id = {a["id"]: a for a in got}
    assert by_id["../../../bob/api/customer/1"]["status"] == 200
    assert by_id["../../../bob/api/customer/1"]["body"]["path"] == "/alice/api/customer/..%2F..%2F..%2Fbob%2Fapi%2Fcustomer%2F1"
    assert by_id["..\\..\\bob"]["body"]["path"] == "/alice/api/customer/..%5C..%5Cbob"
    assert by_id["%2E%2E"]["body"]["path"] == "/alice/api/customer/%252E%252E"
    assert by_id["1"]["body"]["path"] == "/alice/api/customer/1"
    for dots in ("..", ".", "..;x", ".;"):
        assert by_id[dots]["status"] == 400, by_id[dots]
        assert "'.' or '..' segment" in by_id[dots]["error"]
    assert all(p.startswith("/alice/api/customer/") for p in paths(backend)), paths(backend)
    assert len(paths(backend)) == 4


def test_a_query_value_in_rewrite_path_cannot_climb(start_gateway, backend):
    routes = [
        {"name": "search", "match": {"path": {"prefix": "/search"}},
         "actions": [{"rewrite_path": "/v1/search/${query.q}"}], "forward": "b"},
        {"name": "by-header", "match": {"path": "/h"},
         "actions": [{"rewrite_path": "/v1/h/${header.X-Dest}/end"}], "forward": "b"},
    ]
    gw = start(start_gateway, routes, backend)

    assert request(gw.port, "GET", "/search?q=..%2F..%2Fadmin%2Fdelete")[0] == 200
    assert request(gw.port, "GET", "/search?q=../../admin/delete")[0] == 200
    assert request(gw.port, "GET", "/h", {"X-Dest": "../../admin"})[0] == 200
    assert paths(backend) == ["/v1/search/..%2F..%2Fadmin%2Fdelete", "/v1/search/..%2F..%2Fadmin%2Fdelete",
                              "/v1/h/..%2F..%2Fadmin/end"]
    for q in ("..", ".", "%2E%2E", "%2e.", "..;x", "..%3Bx", ".%3B"):
        body = assert_refused(*request(gw.port, "GET", f"/search?q={q}"))
        assert "rewrite_path: a variable would make a '.' or '..' path segment" in body
    assert_refused(*request(gw.port, "GET", "/h", {"X-Dest": ".."}))
    assert len(backend.received()) == 3


TENANT_ROUTES = [{"name": "data", "match": {"path": {"prefix": "/t"}}, "actions": [{"rewrite_path": "/${tenant}/data"}],
                  "forward": "b"}]
PATH_TENANTS = {"identify": [{"header": "X-Tenant-Id"}, {"path": "^/t/(?<tenant>[^/]+)/"}],
                "default_quota": {"requests": 5, "per": "1h"}}


@pytest.mark.parametrize("escaped_slashes", [None, "keep"])
def test_a_tenant_from_the_path_cannot_name_another_tenants_path(start_gateway, backend, escaped_slashes):
    """The issue's "a%2F..%2Fglobex": refused as an escaped '/' by default, and as a tenant name
    with '/' once decoded when escaped slashes are kept."""
    limits = {"limits": {"escaped_slashes": escaped_slashes}} if escaped_slashes else {}
    gw = start(start_gateway, TENANT_ROUTES, backend, tenants=PATH_TENANTS, **limits)

    assert request(gw.port, "GET", "/t/acme/x")[0] == 200
    why = "invalid tenant name" if escaped_slashes == "keep" else "escaped '/'"
    for target in ("/t/a%2F..%2Fglobex/x", "/t/a%2f..%2fglobex/x", "/t/..%5Cglobex/x"):
        assert_refused(*request(gw.port, "GET", target), why)
    assert paths(backend) == ["/acme/data"]


def test_a_tenant_header_that_could_climb_is_refused(start_gateway, backend):
    gw = start(start_gateway, TENANT_ROUTES, backend, tenants=PATH_TENANTS)

    for name in ("../globex", "a/b", "..", ".", "a\\b"):
        assert_refused(*request(gw.port, "GET", "/t/acme/x", {"X-Tenant-Id": name}), "invalid tenant name")
    assert request(gw.port, "GET", "/t/acme/x", {"X-Tenant-Id": "a.b"})[0] == 200
    assert paths(backend) == ["/a.b/data"]


# --------------------------------------------------------------------------------------
# Item 7: escaped separators and ";" parameters in the client's path

GUARD_ROUTES = [
    {"name": "block-public-admin", "match": {"path": {"prefix": "/public/admin"}}, "respond": {"status": 403, "body": "no\n"}},
    {"name": "admin", "match": {"path": {"prefix": "/admin"}}, "actions": [{"set_header": {"X-Route": "admin"}}],
     "forward": "b"},
    {"name": "public", "match": {"path": {"prefix": "/public"}}, "actions": [{"set_header": {"X-Route": "public"}}],
     "forward": "b"},
]


def test_the_four_paths_of_the_issue(start_gateway, backend):
    gw = start(start_gateway, GUARD_ROUTES, backend)

    # ";x" does not hide /public/admin from the route that blocks it
    assert request(gw.port, "GET", "/public/admin;x")[0] == 403
    # "..;" is a dot segment: matched and forwarded as the backend resolves it
    status, _, body = request(gw.port, "GET", "/public/..;/admin")
    assert status == 200
    assert json.loads(body)["path"] == "/admin" and json.loads(body)["headers"]["x-route"] == "admin"
    # escaped separators are refused
    assert_refused(*request(gw.port, "GET", "/public/..%2Fadmin"), "escaped '/' or '\\'")
    assert_refused(*request(gw.port, "GET", "/public/..\\admin"), "limits.escaped_slashes")
    assert paths(backend) == ["/admin"]


@pytest.mark.parametrize("target", ["/public/admin;jsessionid=1", "/public/admin;x/y", "/public;x/admin", "/public/;x/admin",
                                    "/;x/public/admin", "/public/.;x/admin", "/public/x/..;y/admin;z", "/public/admin/;"])
def test_params_do_not_hide_a_blocked_path(start_gateway, backend, target):
    gw = start(start_gateway, GUARD_ROUTES, backend)
    assert request(gw.port, "GET", target)[0] == 403
    assert backend.received() == []


@pytest.mark.parametrize("target", ["/public/a%2fb", "/public/a%5Cb", "/public/a%5cb", "/public/%2e%2e%2fadmin", "/a\\b",
                                    "/public/x/%2F"])
def test_escaped_slashes_are_refused_by_default(start_gateway, backend, target):
    gw = start(start_gateway, GUARD_ROUTES, backend)
    assert_refused(*request(gw.port, "GET", target), "limits.escaped_slashes")
    assert backend.received() == []


def test_params_are_forwarded_as_sent(start_gateway, backend):
    gw = start(start_gateway, GUARD_ROUTES, backend)
    status, _, body = request(gw.port, "GET", "/public/page;jsessionid=ABC?x=1")
    assert status == 200
    assert json.loads(body)["headers"]["x-route"] == "public"
    assert paths(backend) == ["/public/page;jsessionid=ABC"]
    assert backend.received()[0].query == "x=1"


def test_escaped_slashes_keep_forwards_them_as_sent(start_gateway, backend):
    gw = start(start_gateway, GUARD_ROUTES, backend, limits={"escaped_slashes": "keep"})

    for target in ("/public/..%2Fadmin", "/public/a%5Cb", "/public/..\\admin"):
        status, _, body = request(gw.port, "GET", target)
        assert status == 200, body
        assert json.loads(body)["headers"]["x-route"] == "public"  # matched as sent: not /admin
    # the path is normalized (hex in upper case), escapes and backslashes are not decoded
    assert request(gw.port, "GET", "/public/a%2fb")[0] == 200
    assert paths(backend) == ["/public/..%2Fadmin", "/public/a%5Cb", "/public/..\\admin", "/public/a%2Fb"]


# --------------------------------------------------------------------------------------
# Item 9b: a header made by a template holds no control character but tab


def test_template_headers_with_control_characters_are_refused(start_gateway, backend):
    routes = [
        {"name": "q", "match": {"path": "/q"}, "actions": [{"set_header": {"X-From-Query": "v=${query.v}"}}], "forward": "b"},
        {"name": "rest", "match": {"path": {"prefix": "/rest"}}, "actions": [{"add_header": {"X-Rest": "${remainder}"}}],
         "forward": "b"},
    ]
    gw = start(start_gateway, routes, backend)

    for v in ("%0b", "%0B", "%1b", "%7f", "%01", "%1F", "a%0Bb"):
        body = assert_refused(*request(gw.port, "GET", f"/q?v={v}"))
        assert "set_header 'x-from-query': the value would contain a control character" in body
    for rest in ("/a%0Bb", "/%1B[31m", "/%7F"):
        assert_refused(*request(gw.port, "GET", f"/rest{rest}"), "add_header 'x-rest'")
    assert backend.received() == []
    assert request(gw.port, "GET", "/q?v=a%09b")[0] == 200
    assert request(gw.port, "GET", "/rest/caf%C3%A9")[0] == 200
    got = backend.received()
    assert got[0].headers["x-from-query"] == "v=a\tb"
    assert got[1].headers["x-rest"].encode("latin-1") == "/café".encode()
