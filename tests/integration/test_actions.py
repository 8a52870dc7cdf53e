"""Actions, templates, redirect and forward.host against the real binary: what the backend
receives after the route's edits, what the client gets, and the 400 for a value that would
carry CR, LF or NUL (nothing reaches the backend then)."""

import json

from rawhttp import RawClient, serve_keepalive
from support import free_port, gateway_config, request, wait_until

# --------------------------------------------------------------------------------------
# Helpers


def log_entries(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start(start_gateway, routes, *urls, **top):
    backends = {"b": list(urls)} if urls else None
    return start_gateway(gateway_config(free_port(), backends=backends, routes=routes, **top))


def assert_bad_request(status, headers, body):
    assert status == 400, body
    assert headers["X-Matchgate-Error"] == "bad-request"
    return body.decode()


# --------------------------------------------------------------------------------------
# The contract's examples

CRM_BY_TENANT = {
    "name": "crm-by-tenant",
    "match": {"all": [{"host": {"regex": "^(?<tenant>[a-z0-9-]+)\\.example\\.com$"}}, {"path": {"prefix": "/crm"}}]},
    "actions": [
        {"set_header": {"X-Tenant": "${tenant}", "Authorization": "Bearer internal"}},
        {"remove_header": "Cookie"},
        {"rewrite_path": "/${tenant}/crmapp${remainder}"},
    ],
    "forward": "b",
}


def test_crm_by_tenant(start_gateway, backend):
    gw = start(start_gateway, [CRM_BY_TENANT], backend.url)
    headers = {"Host": "acme.example.com", "Authorization": "Basic dTpw", "Cookie": "sid=1", "X-Keep": "yes"}

    status, _, _ = request(gw.port, "GET", "/crm/x?a=1&b=two", headers)

    seen = backend.wait_for("/acme/crmapp/x")
    assert status == 200
    assert seen.query == "a=1&b=two"
    assert seen.headers["x-tenant"] == "acme"
    assert seen.headers["authorization"] == "Bearer internal"
    assert "cookie" not in seen.headers
    assert seen.headers["x-keep"] == "yes"
    assert seen.headers["host"] == "acme.example.com"
    assert seen.headers["x-forwarded-host"] == "acme.example.com"
    assert [k.lower() for k, _ in seen.raw_headers].count("authorization") == 1


def test_crm_by_tenant_other_hosts_do_not_match(start_gateway, backend):
    gw = start(start_gateway, [CRM_BY_TENANT], backend.url)

    assert request(gw.port, "GET", "/crm/x", {"Host": "a.b.example.com"})[0] == 404
    assert request(gw.port, "GET", "/crmx", {"Host": "acme.example.com"})[0] == 404
    assert backend.received() == []


API_CUSTOMER = {
    "name": "api-customer",
    "match": {"path": {"prefix": "/api/customer"}},
    "routes": [
        {
            "name": "customer-v2",
            "match": {"any": [
                {"header": {"name": "X-User-Group", "equals": "default"}},
                {"not": {"header": {"name": "X-User-Type", "equals": "admin"}}},
            ]},
            "actions": [{"rewrite_path": "/api-v2/customer${remainder}"}],
            "forward": "b",
        },
        {"name": "customer-v1", "forward": "b"},
    ],
}


def test_api_customer_branch(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    gw = start(start_gateway, [API_CUSTOMER], backend.url, access_log=str(log))

    assert request(gw.port, "GET", "/api/customer/7?full=1")[0] == 200
    assert request(gw.port, "GET", "/api/customer/8", {"X-User-Type": "admin"})[0] == 200
    assert request(gw.port, "GET", "/api/customer/9", {"X-User-Type": "admin", "X-User-Group": "default"})[0] == 200
    assert request(gw.port, "GET", "/api/customer", {"X-User-Type": "admin"})[0] == 200

    v2 = backend.wait_for("/api-v2/customer/7")
    assert v2.query == "full=1"
    backend.wait_for("/api/customer/8")
    backend.wait_for("/api-v2/customer/9")
    backend.wait_for("/api/customer")
    entries = wait_until(lambda: log_entries(log) if len(log_entries(log)) == 4 else None, 3)
    # one connection per request, so lines of different workers: compare without order
    assert sorted((e["path"], e["route"]) for e in entries) == [
        ("/api/customer", "customer-v1"),
        ("/api/customer/7", "customer-v2"),
        ("/api/customer/8", "customer-v1"),
        ("/api/customer/9", "customer-v2"),
    ]


# --------------------------------------------------------------------------------------
# Redirect


def test_redirect(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    routes = [
        {"name": "moved", "match": {"path": {"prefix": "/old"}},
         "redirect": {"location": "https://new.example.com/new${remainder}?from=${query.from}", "status": 301}},
        {"name": "temp", "match": {"path": "/login"}, "redirect": {"location": "/signin?${query}"}},
    ]
    gw = start(start_gateway, routes, backend.url, access_log=str(log))

    status, headers, body = request(gw.port, "GET", "/old/a%20b/c?from=x%26y+z")
    assert status == 301
    assert headers["Location"] == "https://new.example.com/new/a%20b/c?from=x%26y%20z"
    assert headers["X-Matchgate-Error"] is None
    assert headers["X-Request-Id"]
    assert body == b"Redirecting to https://new.example.com/new/a%20b/c?from=x%26y%20z\n"

    status, headers, body = request(gw.port, "POST", "/login?next=/home", body=b"x")
    assert status == 302
    assert headers["Location"] == "/signin?next=/home"

    status, headers, body = request(gw.port, "HEAD", "/login")
    assert (status, headers["Location"], body) == (302, "/signin?", b"")

    assert backend.received() == []
    entries = wait_until(lambda: log_entries(log) if len(log_entries(log)) == 3 else None, 3)
    # each request came on its own connection, possibly to another worker: lines of different
    # workers are not ordered
    assert sorted((e["method"], e["path"], e["route"], e["status"]) for e in entries) == [
        ("GET", "/old/a%20b/c", "moved", 301),
        ("HEAD", "/login", "temp", 302),
        ("POST", "/login", "temp", 302),
    ]


def test_redirect_with_crlf_is_400(start_gateway):
    routes = [{"name": "r", "redirect": {"location": "/to/${query.next}"}}]
    gw = start(start_gateway, routes)

    reason = assert_bad_request(*request(gw.port, "GET", "/x?next=a%0d%0aSet-Cookie:%20evil=1"))

    assert "redirect location: the value would contain CR, LF or NUL" in reason
    assert "(route r)" in reason


# --------------------------------------------------------------------------------------
# CR, LF and NUL: refused with 400, never sent


def test_crlf_in_a_value_is_400_and_nothing_is_sent(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    routes = [
        {"name": "by-path", "match": {"path": {"prefix": "/p"}},
         "actions": [{"set_header": {"X-Rest": "${remainder}"}}], "forward": "b"},
        {"name": "by-query", "match": {"path": {"prefix": "/q"}},
         "actions": [{"add_header": {"X-Next": "${query.next}"}}], "forward": "b"},
        {"name": "by-query-path", "match": {"path": {"prefix": "/r"}},
         "actions": [{"rewrite_path": "/r/${query.to}"}], "forward": "b"},
        {"name": "nul-byte", "match": {"path": {"prefix": "/n"}},
         "actions": [{"set_query": "v=${query.v}"}], "forward": "b"},
    ]
    gw = start(start_gateway, routes, backend.url, access_log=str(log))

    reason = assert_bad_request(*request(gw.port, "GET", "/p/a%0d%0aX-Injected:%20yes"))
    assert "set_header 'x-rest': the value would contain CR, LF or NUL (route by-path)" in reason
    reason = assert_bad_request(*request(gw.port, "GET", "/q?next=a%0AX-Injected:%201"))
    assert "add_header 'x-next'" in reason
    reason = assert_bad_request(*request(gw.port, "GET", "/r?to=a%0Db"))
    assert "rewrite_path" in reason
    reason = assert_bad_request(*request(gw.port, "GET", "/n?v=%00"))
    assert "set_query" in reason

    # the same routes with clean values do forward
    assert request(gw.port, "GET", "/p/a%20b")[0] == 200
    assert backend.wait_for("/p/a%20b").headers["x-rest"] == "/a b"
    assert [r.path for r in backend.received()] == ["/p/a%20b"]
    entries = wait_until(lambda: log_entries(log) if len(log_entries(log)) == 5 else None, 3)
    assert sorted(e["status"] for e in entries) == [200, 400, 400, 400, 400]


def test_rewrite_leaving_the_root_is_400(start_gateway, backend):
    routes = [{"name": "up", "match": {"path": "/up"}, "actions": [{"rewrite_path": "/../${query.dir}"}], "forward": "b"},
              {"name": "base", "actions": [{"rewrite_path": "/base/${query.dir}/x"}], "forward": "b"}]
    gw = start(start_gateway, routes, backend.url)

    # the template's own ".." climbs above the root
    reason = assert_bad_request(*request(gw.port, "GET", "/up?dir=x"))
    assert "rewrite_path: the new path is invalid" in reason
    # a value cannot climb: it is one segment, and never a dot segment
    reason = assert_bad_request(*request(gw.port, "GET", "/any?dir=.."))
    assert "rewrite_path: a variable would make a '.' or '..' path segment" in reason
    assert request(gw.port, "GET", "/any?dir=../../etc")[0] == 200
    assert backend.wait_for("/base/..%2F..%2Fetc/x").query == "dir=../../etc"
    assert len(backend.received()) == 1


# --------------------------------------------------------------------------------------
# set_method, set_query, headers


def test_set_method_and_access_log_keeps_the_original(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    routes = [{"name": "patch", "match": {"path": {"prefix": "/cache"}},
               "actions": [{"set_method": "PATCH"}, {"rewrite_path": "/patched${remainder}"},
                           {"set_header": {"X-Was": "${method}"}}], "forward": "b"}]
    gw = start(start_gateway, routes, backend.url, access_log=str(log))

    status, _, body = request(gw.port, "POST", "/cache/item?v=1", body=b"payload")

    assert status == 200
    seen = backend.wait_for("/patched/item")
    assert (seen.method, seen.query, seen.body) == ("PATCH", "v=1", b"payload")
    assert seen.headers["x-was"] == "PATCH"
    entries = wait_until(lambda: log_entries(log), 3)
    assert (entries[0]["method"], entries[0]["path"], entries[0]["route"]) == ("POST", "/cache/item", "patch")


def test_set_method_head_gets_no_body(start_gateway, raw_backend_factory):
    def backend(req):
        body = b"x" * 100
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-Method: " + req.method.encode() + b"\r\n\r\n"
        return head if req.method == "HEAD" else head + body

    be = raw_backend_factory(serve_keepalive(backend))
    routes = [
        {"name": "to-head", "match": {"path": {"prefix": "/head"}}, "actions": [{"set_method": "HEAD"}], "forward": "b"},
        {"name": "to-get", "match": {"path": {"prefix": "/get"}}, "actions": [{"set_method": "GET"}], "forward": "b"},
    ]
    gw = start(start_gateway, routes, be.url)

    with RawClient(gw.port) as c:
        resp = c.request("GET", "/head/x")
        assert (resp.status, resp.get("x-method"), resp.body) == (200, "HEAD", b"")
        # a client's HEAD made a GET: the backend sends a body, the client gets none
        resp = c.request("HEAD", "/get/x")
        assert (resp.status, resp.get("x-method")) == (200, "GET")
        assert c.stream.pending(0.3) == b"", "bytes followed the head of a HEAD response"
        # the connection is still in sync
        resp = c.request("GET", "/get/y")
        assert (resp.status, resp.body) == (200, b"x" * 100)
    assert [r.method for r in be.requests] == ["HEAD", "GET", "GET"]


def test_final_method_decides_primary_and_retries(start_gateway, backend_factory):
    primary, other = backend_factory("primary"), backend_factory("other")
    dead = f"http://127.0.0.1:{free_port()}"
    backends = {
        "pfw": {"servers": [primary.url, other.url], "balance": "primary_for_writes", "primary": primary.url},
        "fa": {"servers": [dead, other.url], "balance": "first_available", "retries": 1, "connect_timeout": "1s"},
    }
    routes = [
        {"name": "write", "match": {"path": {"prefix": "/w"}}, "actions": [{"set_method": "POST"}], "forward": "pfw"},
        {"name": "read", "match": {"path": {"prefix": "/r"}}, "forward": "pfw"},
        {"name": "no-retry", "match": {"path": {"prefix": "/nr"}}, "actions": [{"set_method": "POST"}], "forward": "fa"},
        {"name": "retry", "match": {"path": {"prefix": "/rt"}}, "actions": [{"set_method": "GET"}], "forward": "fa"},
    ]
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=routes))

    for i in range(4):
        assert request(gw.port, "GET", f"/w/{i}")[0] == 200
        assert request(gw.port, "GET", f"/r/{i}")[0] == 200
    assert sorted(r.path for r in primary.received() if r.path.startswith("/w")) == [f"/w/{i}" for i in range(4)]
    assert {r.method for r in primary.received(None) if r.path.startswith("/w")} == {"POST"}
    assert other.received() and all(r.path.startswith("/r") for r in other.received())

    # a GET made a POST is not retried on another server; a POST made a GET is
    assert request(gw.port, "GET", "/nr/x")[0] == 502
    assert request(gw.port, "POST", "/rt/x", body=b"b")[0] == 200
    assert other.wait_for("/rt/x").method == "GET"
    assert not other.received("/nr/x")


def test_set_query(start_gateway, backend):
    routes = [
        {"name": "q", "match": {"path": {"prefix": "/q"}},
         "actions": [{"set_query": "term=${query.s}&page=1&from=${header.X-From}"}], "forward": "b"},
        {"name": "none", "match": {"path": {"prefix": "/none"}}, "actions": [{"set_query": ""}], "forward": "b"},
    ]
    gw = start(start_gateway, routes, backend.url)

    assert request(gw.port, "GET", "/q/x?s=a+b%26c&other=1", {"X-From": "me&you"})[0] == 200
    assert request(gw.port, "GET", "/none/y?drop=me")[0] == 200

    assert backend.wait_for("/q/x").query == "term=a%20b%26c&page=1&from=me%26you"
    assert backend.wait_for("/none/y").query == ""


def test_header_actions_reach_the_backend(start_gateway, backend):
    routes = [{"name": "h", "actions": [
        {"remove_header": ["Cookie", "X-Drop"]},
        {"add_header": {"Cookie": "internal=1", "X-Multi": "two"}},
        {"set_header": {"X-Forwarded-For": "10.9.8.7", "Accept": "application/json"}},
        {"set_header": {"X-Copy": "${header.accept}|${host}|${path}"}},
    ], "forward": "b"}]
    gw = start(start_gateway, routes, backend.url)
    headers = [("Cookie", "a=1"), ("X-Drop", "x"), ("X-Multi", "one"), ("X-Forwarded-For", "1.2.3.4")]

    with RawClient(gw.port) as c:
        resp = c.request("GET", "/some/where", headers=headers, host="Shop.Test:80")
    assert resp.status == 200

    seen = backend.wait_for("/some/where")
    names = [k.lower() for k, _ in seen.raw_headers]
    assert seen.headers["cookie"] == "internal=1" and names.count("cookie") == 1
    assert "x-drop" not in seen.headers
    assert [v for k, v in seen.raw_headers if k.lower() == "x-multi"] == ["one", "two"]
    assert seen.headers["x-forwarded-for"] == "10.9.8.7, 127.0.0.1"
    assert seen.headers["accept"] == "application/json" and names.count("accept") == 1
    assert seen.headers["x-copy"] == "application/json|shop.test|/some/where"
    assert seen.headers["host"] == "Shop.Test:80"


# --------------------------------------------------------------------------------------
# forward.host


def test_forward_host_template(start_gateway, backend):
    routes = [{"name": "h", "forward": {"backend": "b", "host": "${header.X-Backend-Host}"}}]
    gw = start(start_gateway, routes, backend.url)

    assert request(gw.port, "GET", "/a", {"Host": "public.test", "X-Backend-Host": "svc-1.internal:8080"})[0] == 200
    assert request(gw.port, "GET", "/b", {"Host": "public.test"})[0] == 200
    reason = assert_bad_request(*request(gw.port, "GET", "/c", {"Host": "public.test", "X-Backend-Host": "evil/x"}))

    assert "forward.host" in reason
    a, b = backend.wait_for("/a"), backend.wait_for("/b")
    assert (a.headers["host"], a.headers["x-forwarded-host"]) == ("svc-1.internal:8080", "public.test")
    assert b.headers["host"] == "public.test", "an empty expansion keeps the client's Host"
    assert not backend.received("/c")


def test_check_reports_action_errors(start_gateway, tmp_path):
    from support import run_matchgate

    path = tmp_path / "bad.yaml"
    path.write_text(
        "listen:\n"
        "  - address: \"127.0.0.1:1\"\n"
        "backends:\n"
        "  b: {servers: [\"http://127.0.0.1:2\"]}\n"
        "routes:\n"
        "  - name: r\n"
        "    match: {path: /exact}\n"
        "    actions:\n"
        "      - set_headr: {X-A: 1}\n"
        "      - rewrite_path: \"/x${remainder}\"\n"
        "      - set_header: {Host: x}\n"
        "    redirect: {location: /y, status: 303}\n")

    res = run_matchgate("--check", "-c", path)

    assert res.returncode == 1
    lines = res.stderr.splitlines()
    assert f"{path}:9:9: unknown action 'set_headr' (did you mean 'set_header'?)" in lines
    assert any(line.startswith(f"{path}:10:23: unknown variable '${{remainder}}'") for line in lines), lines
    assert f"{path}:11:22: header 'Host' is set by the gateway (use forward.host)" in lines
    assert f"{path}:12:38: redirect status must be 301, 302, 307 or 308" in lines
