"""Forwarding: what the backend receives and what the client gets back."""

import http.client
import json
import os

import pytest

from support import free_port, gateway_config, request


def api_config(port, backend, **route_extra):
    route = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}
    route.update(route_extra)
    return gateway_config(port, backends={"b": [backend.url]}, routes=[route])


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE"])
def test_round_trip(start_gateway, backend, method):
    gw = start_gateway(api_config(free_port(), backend))
    body = b"" if method == "GET" else f"payload for {method}\n".encode() * 10
    headers = {"X-Custom": "abc", "Content-Type": "text/plain"}

    status, resp_headers, resp_body = request(gw.port, method, "/api/items/7?x=1&y=two", headers, body or None)

    seen = backend.wait_for("/api/items/7")
    assert (seen.method, seen.query, seen.body) == (method, "x=1&y=two", body)
    assert seen.headers["x-custom"] == "abc"
    assert seen.headers["content-type"] == "text/plain"
    assert status == 200
    assert resp_headers["X-Backend"] == backend.name
    assert resp_headers["Content-Type"] == "application/json"
    echo = json.loads(resp_body)
    assert (echo["method"], echo["path"], echo["body_bytes"]) == (method, "/api/items/7", len(body))


def test_backend_status_and_headers_reach_client(start_gateway, backend):
    backend.extra_headers = [("X-Answer", "42"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")]
    gw = start_gateway(api_config(free_port(), backend))

    status, headers, body = request(gw.port, "POST", "/api/status/201", body=b"{}")

    assert status == 201
    assert headers["X-Answer"] == "42"
    assert sorted(headers.get_all("Set-Cookie")) == ["a=1", "b=2"]
    assert json.loads(body)["path"] == "/api/status/201"


def test_hop_by_hop_headers_stripped_both_ways(start_gateway, backend):
    backend.extra_headers = [
        ("Connection", "X-Hop-Resp"),
        ("X-Hop-Resp", "secret"),
        ("Keep-Alive", "timeout=5"),
        ("Proxy-Authenticate", "Basic realm=x"),
        ("Upgrade", "foo/1"),
        ("Trailer", "X-Checksum"),
        ("X-End-To-End", "kept"),
    ]
    gw = start_gateway(api_config(free_port(), backend))
    headers = {
        "Connection": "keep-alive, X-Hop-Req",
        "X-Hop-Req": "secret",
        "Keep-Alive": "timeout=5",
        "TE": "trailers",
        "Trailer": "X-Checksum",
        "Proxy-Authorization": "Basic dTpw",
        "Proxy-Foo": "bar",
        "X-End-To-End": "kept",
    }

    status, resp_headers, _ = request(gw.port, "GET", "/api/hop", headers)

    seen = backend.wait_for("/api/hop").headers
    assert status == 200
    assert seen["x-end-to-end"] == "kept"
    for name in ("x-hop-req", "keep-alive", "te", "trailer", "proxy-authorization", "proxy-foo"):
        assert name not in seen, f"backend received hop-by-hop header {name}"
    assert "x-hop-req" not in seen.get("connection", "").lower()

    assert resp_headers["X-End-To-End"] == "kept"
    for name in ("X-Hop-Resp", "Keep-Alive", "Proxy-Authenticate", "Upgrade", "Trailer"):
        assert name not in resp_headers, f"client received hop-by-hop header {name}"
    assert "x-hop-resp" not in resp_headers.get("Connection", "").lower()


def test_forwarded_headers_added(start_gateway, backend):
    gw = start_gateway(api_config(free_port(), backend))

    status, resp_headers, _ = request(gw.port, "GET", "/api/fwd", {"Host": "shop.example.test"})

    seen = backend.wait_for("/api/fwd").headers
    assert status == 200
    assert seen["x-forwarded-for"] == "127.0.0.1"
    assert seen["x-forwarded-proto"] == "http"
    assert seen["x-forwarded-host"] == "shop.example.test"
    assert seen["host"] == "shop.example.test", "the client's Host is preserved"
    assert seen.get("x-request-id"), "a request id is generated"
    assert resp_headers["X-Request-Id"] == seen["x-request-id"]


def test_forwarded_for_appended_and_request_id_kept(start_gateway, backend):
    gw = start_gateway(api_config(free_port(), backend))
    headers = {"X-Forwarded-For": "203.0.113.7", "X-Request-Id": "client-id-123"}

    status, resp_headers, _ = request(gw.port, "GET", "/api/chain", headers)

    seen = backend.wait_for("/api/chain").headers
    assert status == 200
    assert [p.strip() for p in seen["x-forwarded-for"].split(",")] == ["203.0.113.7", "127.0.0.1"]
    assert seen["x-request-id"] == "client-id-123"
    assert resp_headers["X-Request-Id"] == "client-id-123"


def test_request_ids_are_unique(start_gateway, backend):
    gw = start_gateway(api_config(free_port(), backend))
    for i in range(5):
        assert request(gw.port, "GET", f"/api/id{i}")[0] == 200
    ids = {r.headers.get("x-request-id") for r in backend.received()}
    assert len(ids) == 5 and None not in ids


def test_forward_host_overrides_host(start_gateway, backend):
    route_forward = {"backend": "b", "host": "internal.test"}
    gw = start_gateway(api_config(free_port(), backend, forward=route_forward))

    status, _, _ = request(gw.port, "GET", "/api/h", {"Host": "public.test"})

    seen = backend.wait_for("/api/h").headers
    assert status == 200
    assert seen["host"] == "internal.test"
    assert seen["x-forwarded-host"] == "public.test"


def test_chunked_request_body_arrives_intact(start_gateway, backend):
    gw = start_gateway(api_config(free_port(), backend))
    chunks = [os.urandom(n) for n in (1, 1000, 65536, 7, 200000)]

    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        # an iterable body with encode_chunked sends Transfer-Encoding: chunked
        conn.request("POST", "/api/upload", body=iter(chunks), encode_chunked=True)
        resp = conn.getresponse()
        resp.read()
    finally:
        conn.close()

    seen = backend.wait_for("/api/upload")
    assert resp.status == 200
    assert seen.body == b"".join(chunks)


def test_keep_alive_connection_serves_many_requests(start_gateway, backend):
    gw = start_gateway(api_config(free_port(), backend))
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        for i in range(20):
            conn.request("GET", f"/api/k{i}")
            resp = conn.getresponse()
            assert resp.status == 200
            assert json.loads(resp.read())["path"] == f"/api/k{i}"
    finally:
        conn.close()
