"""Gateway-made answers: errors, limits, respond routes, retries and balancing."""

import http.client
import json
import time

from support import free_port, gateway_config, request

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}


def test_no_route_is_404(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))

    status, headers, _ = request(gw.port, "GET", "/elsewhere")

    assert status == 404
    assert headers["X-Matchgate-Error"] == "no-route"
    assert backend.received() == []


def test_respond_route(start_gateway):
    route = {
        "name": "teapot",
        "match": {"path": "/tea"},
        "respond": {"status": 418, "body": "short and stout\n", "headers": {"X-Kind": "earl grey", "Content-Type": "text/plain"}},
    }
    gw = start_gateway(gateway_config(free_port(), routes=[route]))

    status, headers, body = request(gw.port, "GET", "/tea")

    assert (status, body) == (418, b"short and stout\n")
    assert headers["X-Kind"] == "earl grey"
    assert headers["Content-Type"] == "text/plain"
    assert request(gw.port, "GET", "/tea/pot")[0] == 404, "an exact path matches only itself"


def test_method_condition(start_gateway, backend):
    routes = [
        {"name": "reads", "match": {"all": [{"method": "GET"}, {"path": {"prefix": "/api"}}]}, "forward": "b"},
        {"name": "other", "respond": {"status": 405, "body": "no\n"}},
    ]
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=routes))

    assert request(gw.port, "GET", "/api/m")[0] == 200
    assert request(gw.port, "POST", "/api/m", body=b"x")[0] == 405
    assert [r.method for r in backend.received()] == ["GET"]


def test_prefix_respects_segment_boundary(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))

    assert request(gw.port, "GET", "/api")[0] == 200
    assert request(gw.port, "GET", "/api/x/y")[0] == 200
    assert request(gw.port, "GET", "/apix")[0] == 404


def test_backend_unavailable_is_502(start_gateway):
    dead = f"http://127.0.0.1:{free_port()}"
    gw = start_gateway(gateway_config(free_port(), backends={"b": [dead]}, routes=[API]))

    status, headers, body = request(gw.port, "GET", "/api/x")

    assert status == 502
    assert headers["X-Matchgate-Error"] == "backend-unavailable"
    assert body, "gateway errors carry a short body"


def test_slow_backend_is_504(start_gateway, backend):
    backends = {"b": {"servers": [backend.url], "connect_timeout": "1s", "timeout": "500ms"}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))

    started = time.monotonic()
    status, headers, _ = request(gw.port, "GET", "/api/slow?ms=2500")
    elapsed = time.monotonic() - started

    assert status == 504
    assert headers["X-Matchgate-Error"] == "backend-timeout"
    assert 0.4 <= elapsed < 2.0, f"answered after {elapsed:.2f}s with a 500ms timeout"


def test_request_body_over_limit_is_413(start_gateway, backend):
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API],
                            limits={"max_request_body": "1KiB"})
    gw = start_gateway(config)

    assert request(gw.port, "POST", "/api/small", body=b"x" * 1000)[0] == 200
    assert request(gw.port, "POST", "/api/big", body=b"x" * 4096)[0] == 413
    assert backend.received("/api/big") == []


def test_headers_over_limit_is_431(start_gateway, backend):
    # below h2o's own 8 KiB request-head limit, so the gateway's check is what answers
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API],
                            limits={"max_header_size": "4KiB"})
    gw = start_gateway(config)

    assert request(gw.port, "GET", "/api/ok", {"X-Big": "a" * 1000})[0] == 200
    assert request(gw.port, "GET", "/api/huge", {"X-Big": "a" * 6000})[0] == 431
    assert backend.received("/api/huge") == []


def two_servers_first_dead(backend, balance="round_robin"):
    dead = f"http://127.0.0.1:{free_port()}"
    return {"b": {"servers": [dead, backend.url], "balance": balance, "retries": 1, "connect_timeout": "1s"}}


def test_idempotent_request_retried_on_another_server(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends=two_servers_first_dead(backend), routes=[API]))

    for i in range(6):
        status, headers, _ = request(gw.port, "GET", f"/api/r{i}")
        assert status == 200, f"GET {i}: {status} {headers.get('X-Matchgate-Error')}"
    for i in range(2):
        assert request(gw.port, "PUT", f"/api/p{i}", body=b"put")[0] == 200
    assert len(backend.received()) == 8


def test_non_idempotent_request_not_retried(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends=two_servers_first_dead(backend), routes=[API]))

    # round robin alternates, so some of these land on the dead server first
    results = [request(gw.port, "POST", f"/api/post{i}", body=b"once")[:2] for i in range(6)]

    failed = [h["X-Matchgate-Error"] for s, h in results if s == 502]
    assert failed and set(failed) == {"backend-unavailable"}
    assert {s for s, _ in results} <= {200, 502}
    ok = sum(1 for s, _ in results if s == 200)
    assert len(backend.received()) == ok, "each POST reached the backend at most once"


def test_round_robin_alternates(start_gateway, backend_factory):
    one, two = backend_factory("one"), backend_factory("two")
    gw = start_gateway(gateway_config(free_port(), backends={"b": [one.url, two.url]}, routes=[API]))

    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    names = []
    try:
        for i in range(10):
            conn.request("GET", f"/api/rr{i}")
            resp = conn.getresponse()
            names.append(json.loads(resp.read())["backend"])
    finally:
        conn.close()

    assert names.count("one") == names.count("two") == 5
    assert all(a != b for a, b in zip(names, names[1:])), f"not alternating: {names}"
