"""Response actions against the real binary (issue 29): fields set, added and removed on the
backend's answers, ancestors first; `always` ones on the gateway's own answers too (errors, 429,
respond, redirect); the answer's variables; Server replaced or removed; a value a variable would
split is left out and counted, never written."""

import socket

from support import free_port, gateway_config, request


def start(start_gateway, routes, *urls, admin=False, **top):
    backends = {"b": list(urls)} if urls else None
    if admin:
        top["admin"] = {"address": f"127.0.0.1:{free_port()}", "token": "t0ken"}
    return start_gateway(gateway_config(free_port(), backends=backends, routes=routes, **top))


def raw_head(port, path, extra=b""):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + extra + b"\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, data
            data += chunk
    return data.split(b"\r\n\r\n", 1)[0]


SECURITY = [
    {"set_header": {"Strict-Transport-Security": "max-age=63072000; includeSubDomains"}, "always": True},
    {"set_header": {"X-Content-Type-Options": "nosniff"}},
    {"remove_header": ["X-Powered-By"]},
]


def test_set_add_remove_on_backend_answers_ancestors_first(start_gateway, backend):
    backend.extra_headers = [("X-Powered-By", "PHP/5.1"), ("Cache-Control", "no-cache"), ("X-Backend-Note", "one")]
    routes = [{
        "name": "site", "match": {"path": {"prefix": "/"}}, "response": SECURITY + [{"add_header": {"X-Layer": "branch"}}],
        "routes": [{
            "name": "api", "match": {"path": {"prefix": "/api"}},
            "response": [{"add_header": {"X-Layer": "leaf", "X-Backend-Note": "two"}}, {"set_header": {"Cache-Control": "private"}}],
            "forward": "b"}]}]
    gw = start(start_gateway, routes, backend.url)
    status, headers, _ = request(gw.port, "GET", "/api/x")
    assert status == 200
    assert headers["Strict-Transport-Security"] == "max-age=63072000; includeSubDomains"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "X-Powered-By" not in headers
    assert headers.get_all("X-Layer") == ["branch", "leaf"]  # the branch's first
    assert headers.get_all("X-Backend-Note") == ["one", "two"]
    assert headers.get_all("Cache-Control") == ["private"]
    assert headers["X-Backend"]  # the backend's own fields stay


def test_the_answers_variables_and_the_requests(start_gateway, backend):
    routes = [{"name": "api", "match": {"path": {"regex": "^/u/(?<user>[a-z]+)$"}},
               "response": [{"set_header": {"X-Echo": "${status} ${response.header.content-type} ${user} ${method}",
                                            "X-Query": "${query.q}"}}],
               "forward": "b"}]
    gw = start(start_gateway, routes, backend.url)
    status, headers, _ = request(gw.port, "GET", "/u/alice?q=hello%20world")
    assert status == 200
    assert headers["X-Echo"] == "200 application/json alice GET"
    assert headers["X-Query"] == "hello world"


def test_a_later_action_sees_an_earlier_ones_field(start_gateway, backend):
    routes = [{"name": "api", "response": [{"set_header": {"X-A": "first"}}, {"set_header": {"X-B": "${response.header.x-a}!"}}],
               "forward": "b"}]
    gw = start(start_gateway, routes, backend.url)
    _, headers, _ = request(gw.port, "GET", "/x")
    assert headers["X-B"] == "first!"


def test_always_applies_to_the_gateways_own_answers(start_gateway, backend):
    dead = f"http://127.0.0.1:{free_port()}"
    routes = [
        {"name": "quota", "match": {"path": "/q"}, "quota": {"requests": 1, "per": "1m", "key": "everyone"},
         "response": SECURITY, "respond": {"status": 200, "body": "ok\n"}},
        {"name": "down", "match": {"path": "/down"}, "response": SECURITY, "forward": "dead"},
        {"name": "moved", "match": {"path": "/old"}, "response": SECURITY, "redirect": {"location": "/new"}},
    ]
    gw = start_gateway(gateway_config(free_port(), backends={"dead": {"servers": [dead], "retries": 0}}, routes=routes))
    for path, want in (("/q", 200), ("/q", 429), ("/down", 502), ("/old", 302)):
        status, headers, _ = request(gw.port, "GET", path)
        assert status == want, path
        assert headers["Strict-Transport-Security"].startswith("max-age="), (path, headers)
        # only `always` items reach the gateway's answers
        assert "X-Content-Type-Options" not in headers, (path, headers)


def test_server_is_replaced_or_removed(start_gateway, backend):
    routes = [
        {"name": "renamed", "match": {"path": "/renamed"}, "response": [{"set_header": {"Server": "edge"}, "always": True}],
         "forward": "b"},
        {"name": "hidden", "match": {"path": "/hidden"}, "response": [{"remove_header": "Server", "always": True}],
         "respond": {"status": 200, "body": "x"}},
        {"name": "plain", "forward": "b"},
    ]
    gw = start(start_gateway, routes, backend.url)
    assert request(gw.port, "GET", "/renamed")[1].get_all("Server") == ["edge"]
    head = raw_head(gw.port, "/hidden").lower()
    assert b"\r\nserver:" not in head, head
    assert b"\r\ndate:" in head  # Date stays
    assert request(gw.port, "GET", "/plain")[1].get_all("Server") == ["matchgate"]


def test_a_value_a_variable_would_split_is_left_out_and_counted(start_gateway, backend):
    routes = [{"name": "api", "response": [{"set_header": {"X-From-Query": "${query.v}", "X-Fine": "yes"}}], "forward": "b"}]
    gw = start(start_gateway, routes, backend.url, admin=True)
    status, headers, _ = request(gw.port, "GET", "/x?v=a%0d%0aSet-Cookie:%20evil=1")
    assert status == 200  # the backend has answered: the answer goes without the field
    assert "X-From-Query" not in headers and "Set-Cookie" not in headers
    assert headers["X-Fine"] == "yes"
    metrics = gw.metrics(token="t0ken")
    assert metrics["matchgate_response_action_failures_total"] == 1


def test_http2_answers_get_the_edits(start_gateway, backend):
    import h2client
    routes = [{"name": "api", "response": [{"set_header": {"X-Edge": "h2"}}, {"remove_header": "X-Backend"}], "forward": "b"}]
    gw = start(start_gateway, routes, backend.url)
    res = h2client.get(gw.port, b"/x")
    assert res.status == 200, res
    assert res.get("x-edge") == "h2"
    assert res.get("x-backend") is None
    assert res.get("server") == "matchgate"
