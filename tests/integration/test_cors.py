"""CORS at the edge against the real binary (issue 29): preflights answered by the gateway
without reaching the backend, spending a quota or needing a credential; allowed and refused
origins (exact, *.example.com wildcards, whole-origin regexes, "*"), methods and headers; the
fields of actual requests' answers, credentials, Vary; refusals counted; the policy's errors at
load with their position."""

import re

import h2client
from support import free_port, gateway_config, request, run_matchgate, to_yaml

APP = "https://app.example.com"


def policy(**over):
    p = {"origins": [APP, "*.example.org", {"regex": "https://(red|blue)\\.example\\.net"}],
         "methods": ["GET", "POST", "PUT"], "headers": ["Content-Type", "X-Trace"], "expose": ["X-Request-Id", "X-Total"],
         "max_age": "10m"}
    p.update(over)
    return p


def start(start_gateway, backend, cors=None, admin=False, routes=None, **top):
    routes = routes or [{"name": "api", "match": {"path": {"prefix": "/api"}}, "cors": cors or policy(), "forward": "b"},
                        {"name": "other", "forward": "b"}]
    if admin:
        top["admin"] = {"address": f"127.0.0.1:{free_port()}", "token": "t0ken"}
    return start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=routes, **top))


def preflight(gw, origin, method="PUT", headers=None, path="/api/items"):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return request(gw.port, "OPTIONS", path, h)


def cors_fields(headers):
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("access-control-")}


def test_an_allowed_preflight_is_answered_without_the_backend(start_gateway, backend):
    gw = start(start_gateway, backend)
    status, headers, body = preflight(gw, APP, "PUT", "content-type, x-trace")
    assert status == 204, body
    assert body == b""
    assert cors_fields(headers) == {
        "access-control-allow-origin": APP,
        "access-control-allow-methods": "GET, POST, PUT",
        "access-control-allow-headers": "content-type, x-trace",
        "access-control-max-age": "600",
    }
    assert headers["Vary"] == "Origin"
    assert backend.requests == []


def test_refused_preflights_get_no_cors_fields_and_are_counted(start_gateway, backend):
    gw = start(start_gateway, backend, admin=True)
    for origin, method, hdrs, why in (
            ("https://evil.example.com", "PUT", None, "origin"),
            ("https://app.example.com.evil.net", "PUT", None, "origin"),
            (APP, "DELETE", None, "method"),
            (APP, "PUT", "content-type, x-secret", "header")):
        status, headers, body = preflight(gw, origin, method, hdrs)
        assert status == 403, (origin, method, body)
        assert headers["X-Matchgate-Error"] == "cors-refused"
        assert why in body.decode(), body
        assert cors_fields(headers) == {}, headers
        assert headers["Vary"] == "Origin"
    assert b"x-secret" in preflight(gw, APP, "PUT", "x-secret")[2]  # the refused header is named
    assert backend.requests == []
    m = gw.metrics(token="t0ken")
    assert m['matchgate_cors_preflights_total{result="refused"}'] == 5
    assert m['matchgate_cors_preflights_total{result="allowed"}'] == 0


def test_wildcards_and_regexes_match_whole_origins(start_gateway, backend):
    gw = start(start_gateway, backend)
    allowed = ["https://a.example.org", "http://a.b.example.org", "https://red.example.net", "HTTPS://BLUE.EXAMPLE.NET"]
    refused = ["https://example.org", "https://a.example.org.evil.com", "https://evilexample.org", "https://a.example.org:8443",
               "https://green.example.net", "https://red.example.net.evil.com", "https://xred.example.net", "null"]
    for origin in allowed:
        status, headers, _ = preflight(gw, origin, "GET")
        assert status == 204 and headers["Access-Control-Allow-Origin"] == origin, origin
    for origin in refused:
        assert preflight(gw, origin, "GET")[0] == 403, origin


def test_a_preflight_spends_no_quota_and_needs_no_credential(start_gateway, backend):
    routes = [{"name": "api", "match": {"all": [{"path": {"prefix": "/api"}}, {"method": ["PUT"]}]}, "auth": "keys",
               "cors": policy(), "forward": "b"}]
    gw = start(start_gateway, backend, routes=routes,
               auth={"keys": {"api_key": {"keys_file": "/dev/null"}}},
               tenants={"identify": [{"header": "X-Tenant"}], "default_quota": {"requests": 1, "per": "1m"}})
    for _ in range(3):  # the route matches PUT only: the preflight is matched as the PUT it asks about
        status, headers, _ = request(gw.port, "OPTIONS", "/api/x", {"Origin": APP, "Access-Control-Request-Method": "PUT",
                                                                     "X-Tenant": "acme"})
        assert status == 204, headers
    # the tenant's one request is still there; the credential is asked for only now, and the
    # refusal carries the CORS fields so that the page can read it
    status, headers, _ = request(gw.port, "PUT", "/api/x", {"Origin": APP, "X-Tenant": "acme"})
    assert status == 401
    assert headers["Access-Control-Allow-Origin"] == APP
    assert request(gw.port, "PUT", "/api/x", {"Origin": APP, "X-Tenant": "acme"})[0] == 429
    assert backend.requests == []


def test_actual_requests_get_their_fields_and_vary(start_gateway, backend):
    backend.extra_headers = [("Vary", "Accept-Language"), ("Access-Control-Allow-Origin", "*"), ("X-Total", "3")]
    gw = start(start_gateway, backend)
    status, headers, _ = request(gw.port, "GET", "/api/items", {"Origin": APP})
    assert status == 200
    assert headers.get_all("Access-Control-Allow-Origin") == [APP]  # the backend's "*" is the policy's to say
    assert headers["Access-Control-Expose-Headers"] == "x-request-id, x-total"
    assert "Access-Control-Allow-Credentials" not in headers
    assert re.fullmatch(r"Accept-Language,\s*Origin", ", ".join(headers.get_all("Vary"))), headers.get_all("Vary")
    # a refused origin and no origin at all: no CORS field, but the answer still varies by Origin
    for extra in ({"Origin": "https://evil.example.com"}, {}):
        _, headers, _ = request(gw.port, "GET", "/api/items", extra)
        assert cors_fields(headers) == {}, (extra, headers)
        assert "Origin" in ", ".join(headers.get_all("Vary"))
    # a route without a policy is left as the backend answered
    _, headers, _ = request(gw.port, "GET", "/other", {"Origin": APP})
    assert headers["Access-Control-Allow-Origin"] == "*"


def test_credentials_and_any_origin(start_gateway, backend):
    routes = [
        {"name": "creds", "match": {"path": {"prefix": "/creds"}}, "cors": policy(credentials=True, origins=[APP]), "forward": "b"},
        {"name": "public", "match": {"path": {"prefix": "/public"}}, "cors": {"origins": ["*"], "headers": ["*"]}, "forward": "b"},
    ]
    gw = start(start_gateway, backend, routes=routes)
    _, headers, _ = request(gw.port, "GET", "/creds/x", {"Origin": APP})
    assert headers["Access-Control-Allow-Origin"] == APP
    assert headers["Access-Control-Allow-Credentials"] == "true"
    status, headers, _ = preflight(gw, APP, "POST", "x-anything, content-type", path="/creds/x")
    assert status == 403  # only the headers listed
    status, headers, _ = preflight(gw, "https://anyone.test", "GET", "x-anything, content-type", path="/public/x")
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == "*"
    assert headers["Access-Control-Allow-Headers"] == "x-anything, content-type"
    assert "Vary" not in headers  # "*" without credentials does not depend on the origin
    _, headers, _ = request(gw.port, "GET", "/public/x", {"Origin": "https://anyone.test"})
    assert headers["Access-Control-Allow-Origin"] == "*"


def test_http2_preflights_and_answers(start_gateway, backend):
    gw = start(start_gateway, backend)
    res = h2client.request(gw.port, [(b":method", b"OPTIONS"), (b":scheme", b"http"), (b":authority", b"t"),
                                     (b":path", b"/api/x"), (b"origin", APP.encode()),
                                     (b"access-control-request-method", b"POST")])
    assert res.status == 204, res
    assert res.get("access-control-allow-origin") == APP
    res = h2client.get(gw.port, b"/api/x", extra=[(b"origin", APP.encode())])
    assert res.status == 200
    assert res.get("access-control-allow-origin") == APP
    assert len(backend.requests) == 1


def test_policy_errors_name_their_position(tmp_path):
    cases = [
        ({"origins": ["*.example.com"], "credentials": True}, "credentials: true with the wildcard origin"),
        ({"origins": ["*"], "credentials": True}, "credentials: true with the origin \"*\""),
        ({"origins": ["https://app.example.com/"]}, "invalid origin"),
        ({"origins": [{"regex": "(unclosed"}]}, "invalid regex"),
        ({"origins": [APP], "methods": ["get"]}, "must be upper case"),
        ({"origins": [APP], "max_age": "1500ms"}, "max_age is whole seconds"),
        ({"origins": [APP], "origin": [APP]}, "unknown key 'origin'"),
    ]
    for cors, message in cases:
        path = tmp_path / "c.yaml"
        path.write_text(to_yaml({"listen": [{"address": f"127.0.0.1:{free_port()}"}],
                                 "routes": [{"name": "r", "cors": cors, "respond": {"status": 200}}]}))
        check_refused(path, message)
    # a quoted "null" is the origin sandboxed pages send: never allowed by name
    path = tmp_path / "null.yaml"
    path.write_text(f"listen: [{{address: '127.0.0.1:{free_port()}'}}]\nroutes:\n  - name: r\n"
                    "    cors: {origins: [\"null\"]}\n    respond: {status: 200}\n")
    check_refused(path, "origin 'null'")


def check_refused(path, message):
    res = run_matchgate("--check", "-c", path)
    assert res.returncode != 0, path.read_text()
    assert re.search(re.escape(str(path)) + r":\d+:\d+: .*" + re.escape(message), res.stderr), (path.read_text(), res.stderr)


def test_the_tenants_429_carries_the_routes_cors_fields(start_gateway, backend):
    routes = [{"name": "api", "match": {"path": {"prefix": "/api"}}, "cors": policy(),
               "response": [{"set_header": {"X-Frame-Options": "DENY"}, "always": True}], "forward": "b"}]
    gw = start(start_gateway, backend, routes=routes,
               tenants={"identify": [{"header": "X-Tenant"}], "default_quota": {"requests": 1, "per": "1m"}})
    h = {"Origin": APP, "X-Tenant": "acme"}
    assert request(gw.port, "GET", "/api/x", h)[0] == 200
    status, headers, _ = request(gw.port, "GET", "/api/x", h)
    assert status == 429
    assert headers["Access-Control-Allow-Origin"] == APP  # the page can read its 429 and its Retry-After
    assert headers["X-Frame-Options"] == "DENY"
    status, headers, _ = request(gw.port, "GET", "/nowhere", h)
    assert status == 429 and "Access-Control-Allow-Origin" not in headers  # no route: no policy
