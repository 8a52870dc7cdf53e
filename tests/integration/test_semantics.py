"""HTTP semantics a production gateway must keep: bodyless responses, unframed streaming bodies,
request bodies at the edges, Expect: 100-continue, query strings and path normalization,
request ids."""

import hashlib
import http.client
import json
import os
import re
import subprocess
import time

import pytest

from rawhttp import RawClient, read_response, serve_keepalive
from support import free_port, gateway_config, pattern_chunk, request

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}
MiB = 1 << 20


def api_gateway(start_gateway, url, **top):
    backends = {"b": {"servers": [url], "connect_timeout": "1s", "timeout": "10s"}}
    return start_gateway(gateway_config(free_port(), backends=backends, routes=[API], **top))


def nghttp(*args, timeout=20):
    return subprocess.run(["nghttp", *args], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


# --------------------------------------------------------------------------------------
# Responses without a body

HEAD_LEN = 1234


def head_get_backend(req):
    body = pattern_chunk(0, HEAD_LEN)
    head = (f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {HEAD_LEN}\r\n"
            f"ETag: \"v1\"\r\nX-Head: yes\r\n\r\n").encode()
    return head if req.method == "HEAD" else head + body


def test_head_keeps_backend_headers_and_sends_no_body(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(head_get_backend))
    gw = api_gateway(start_gateway, be.url)

    with RawClient(gw.port) as c:
        resp = c.request("HEAD", "/api/doc")
        assert resp.status == 200
        assert resp.get("content-length") == str(HEAD_LEN), resp
        assert resp.get("x-head") == "yes" and resp.get("etag") == '"v1"'
        assert resp.get("transfer-encoding") is None
        assert c.stream.pending(0.3) == b"", "bytes followed the head of a HEAD response"
        # the connection is still in sync: a GET on it gets its full body
        resp = c.request("GET", "/api/doc")
        assert (resp.status, resp.body) == (200, pattern_chunk(0, HEAD_LEN))
    assert [r.method for r in be.requests] == ["HEAD", "GET"]


def test_head_over_http2(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(head_get_backend))
    gw = api_gateway(start_gateway, be.url)

    res = nghttp("-v", "-H", ":method: HEAD", f"http://127.0.0.1:{gw.port}/api/doc")

    out = res.stdout.decode(errors="replace")
    assert res.returncode == 0, out + res.stderr.decode(errors="replace")
    assert re.search(r":status: 200", out), out
    assert re.search(rf"content-length: {HEAD_LEN}", out), out
    assert not re.search(r"recv DATA frame <length=[1-9]", out), out


def bodyless_backend(req):
    if req.target.endswith("/204"):
        return b"HTTP/1.1 204 No Content\r\nX-Kind: nothing\r\n\r\n"
    if req.target.endswith("/304"):
        return b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=60\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.mark.parametrize("status", [204, 304])
def test_204_and_304_have_no_body(start_gateway, raw_backend_factory, status):
    be = raw_backend_factory(serve_keepalive(bodyless_backend))
    gw = api_gateway(start_gateway, be.url)

    with RawClient(gw.port) as c:
        resp = c.request("GET", f"/api/{status}", [("If-None-Match", '"v1"')])
        assert resp.status == status
        assert resp.get("transfer-encoding") is None, f"a {status} must not be chunked: {resp}"
        assert resp.get("content-length") in (None, "0"), resp
        if status == 304:
            assert resp.get("etag") == '"v1"' and resp.get("cache-control") == "max-age=60"
        else:
            assert resp.get("x-kind") == "nothing"
        extra = c.stream.pending(0.3)
        assert not extra, f"bytes after a {status} head: {extra!r}"
        if extra is None or (resp.get("connection") or "").lower() == "close":
            return  # closing is allowed; being out of sync is not
        resp = c.request("GET", "/api/after")
        assert (resp.status, resp.body) == (200, b"ok")


@pytest.mark.parametrize("status", [204, 304])
def test_204_and_304_over_http2(start_gateway, raw_backend_factory, status):
    be = raw_backend_factory(serve_keepalive(bodyless_backend))
    gw = api_gateway(start_gateway, be.url)

    res = nghttp("-v", f"http://127.0.0.1:{gw.port}/api/{status}")

    out = res.stdout.decode(errors="replace")
    assert res.returncode == 0, out + res.stderr.decode(errors="replace")
    assert f":status: {status}" in out
    assert not re.search(r"recv DATA frame <length=[1-9]", out), out
    assert "RST_STREAM" not in out, out


# --------------------------------------------------------------------------------------
# Responses without Content-Length: chunked and close-delimited

STREAM_PARTS = [pattern_chunk(i * 30000, 30000) for i in range(10)] + [b"tail"]
STREAM_BODY = b"".join(STREAM_PARTS)


def unframed_backend(req):
    if req.target.startswith("/api/chunked"):
        def gen():
            yield b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            for part in STREAM_PARTS:
                yield b"%x\r\n%s\r\n" % (len(part), part)
                time.sleep(0.01)
            yield b"0\r\n\r\n"
        return gen

    def close_delimited():
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
        for part in STREAM_PARTS:
            yield part
            time.sleep(0.01)
        yield None  # close: the end of the connection ends the body
    return close_delimited


@pytest.mark.parametrize("kind", ["chunked", "close"])
def test_unframed_response_streams_over_http1(start_gateway, raw_backend_factory, kind):
    be = raw_backend_factory(serve_keepalive(unframed_backend))
    gw = api_gateway(start_gateway, be.url)

    with RawClient(gw.port) as c:
        for i in range(2):  # twice on one connection: the framing to the client is sound
            resp = c.request("GET", f"/api/{kind}?i={i}")
            assert resp.complete, resp
            assert resp.status == 200
            assert len(resp.body) == len(STREAM_BODY)
            assert resp.body == STREAM_BODY
            if (resp.get("connection") or "").lower() == "close":
                break


@pytest.mark.parametrize("kind", ["chunked", "close"])
def test_unframed_response_streams_over_http2(start_gateway, raw_backend_factory, kind):
    be = raw_backend_factory(serve_keepalive(unframed_backend))
    gw = api_gateway(start_gateway, be.url)

    res = nghttp(f"http://127.0.0.1:{gw.port}/api/{kind}")

    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert len(res.stdout) == len(STREAM_BODY)
    assert res.stdout == STREAM_BODY


# --------------------------------------------------------------------------------------
# Request bodies


def test_large_request_body_byte_exact(start_gateway, backend):
    gw = api_gateway(start_gateway, backend.url)
    body = os.urandom(8 * MiB)

    status, _, resp = request(gw.port, "POST", "/api/big-upload", {"Content-Type": "application/octet-stream"}, body,
                              timeout=30)

    assert status == 200, resp[:200]
    assert json.loads(resp)["body_bytes"] == len(body)
    seen = backend.wait_for("/api/big-upload")
    assert seen.headers["content-length"] == str(len(body))
    assert hashlib.sha256(seen.body).digest() == hashlib.sha256(body).digest()


def test_large_request_body_over_http2(start_gateway, backend, tmp_path):
    gw = api_gateway(start_gateway, backend.url)
    data = tmp_path / "up.bin"
    data.write_bytes(os.urandom(3 * MiB))

    res = nghttp("-d", str(data), f"http://127.0.0.1:{gw.port}/api/h2-upload")

    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert json.loads(res.stdout)["body_bytes"] == 3 * MiB
    assert backend.wait_for("/api/h2-upload").body == data.read_bytes()


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_empty_body_arrives_with_length_zero(start_gateway, backend, method):
    gw = api_gateway(start_gateway, backend.url)

    status, _, _ = request(gw.port, method, "/api/empty", {"Content-Length": "0"}, b"")

    assert status == 200
    seen = backend.wait_for("/api/empty")
    assert (seen.method, seen.body) == (method, b"")
    # RFC 9110 8.6: a request whose method defines content sends Content-Length (0 here);
    # backends such as nginx or IIS may answer 411 Length Required without it
    assert seen.headers.get("content-length") == "0", f"backend saw headers {seen.headers}"
    assert "transfer-encoding" not in seen.headers


def test_expect_100_continue(start_gateway, backend):
    gw = api_gateway(start_gateway, backend.url)
    body = b"z" * 5000

    with RawClient(gw.port) as c:
        c.send(b"POST /api/expect HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
        interim = read_response(c.stream, allow_interim=True, timeout=3)
        assert interim.status == 100, f"expected 100 Continue before the body, got {interim}"
        c.send(body)
        resp = read_response(c.stream)

    assert resp.status == 200
    assert json.loads(resp.body)["body_bytes"] == 5000
    seen = backend.wait_for("/api/expect")
    assert seen.body == body
    assert "expect" not in seen.headers, "Expect is hop-by-hop in practice: the gateway already answered it"


# --------------------------------------------------------------------------------------
# Query strings and paths

QUERIES = [
    "a=1&a=2&a=3",
    "q=x+y&r=x%20y&s=%2B",
    "path=%2F%3F%26%3D%23&empty=&flag",
    "utf=%E2%9C%93&lower=%e2%9c%93&tilde=%7E",
    "semi=a;b&comma=a,b&colon=a:b&at=@&bang=!&star=*&paren=()&dollar=$&quote='",
]


def test_query_strings_forwarded_byte_for_byte(start_gateway, backend):
    gw = api_gateway(start_gateway, backend.url)
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        for i, q in enumerate(QUERIES):
            conn.request("GET", f"/api/q{i}?{q}")
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
    finally:
        conn.close()

    for i, q in enumerate(QUERIES):
        assert backend.wait_for(f"/api/q{i}").query == q


@pytest.mark.parametrize("sent, forwarded", [
    ("/api/./x//y", "/api/x/y"),
    ("/api/x/../y/.", "/api/y/"),
    ("/api/%7Euser", "/api/~user"),
    ("/api/%61%62c", "/api/abc"),
    ("/api/a%3Bb;c=1", "/api/a%3Bb;c=1"),  # %2F is refused by default: test_path_hardening.py
    ("/api/x/..;/y", "/api/y"),
    ("/api/a%20b", "/api/a%20b"),
    ("/other/../api/x", "/api/x"),
    ("//api///x", "/api/x"),
])
def test_path_forwarded_normalized(start_gateway, backend, sent, forwarded):
    gw = api_gateway(start_gateway, backend.url)

    status, headers, body = request(gw.port, "GET", sent + "?k=%2F")

    assert status == 200, (status, body)
    assert len(backend.received()) == 1
    seen = backend.received()[0]
    assert (seen.path, seen.query) == (forwarded, "k=%2F")


@pytest.mark.parametrize("path", ["/../x", "/api/../../x", "/api/%2e%2e/%2e%2e/x", "/api/%zz", "/api/%4"])
def test_bad_paths_are_400(start_gateway, backend, path):
    gw = api_gateway(start_gateway, backend.url)

    status, headers, body = request(gw.port, "GET", path)

    assert status == 400, (status, body)
    assert headers["X-Matchgate-Error"] == "bad-request"
    assert backend.received() == []


def test_route_is_chosen_on_normalized_path(start_gateway, backend):
    gw = api_gateway(start_gateway, backend.url)

    # /api/%2e%2e/admin is /admin: the /api route must not carry it to the backend
    status, headers, _ = request(gw.port, "GET", "/api/%2e%2e/admin")
    assert (status, headers["X-Matchgate-Error"]) == (404, "no-route")
    status, headers, _ = request(gw.port, "GET", "/api/../admin")
    assert (status, headers["X-Matchgate-Error"]) == (404, "no-route")
    assert backend.received() == []


# --------------------------------------------------------------------------------------
# Request ids


def test_unusual_but_valid_request_id_passes_through(start_gateway, backend):
    gw = api_gateway(start_gateway, backend.url)
    rid = "id with spaces,commas;semi=eq!#$%&'*+.^_`|~\"quoted\"(x)[y]{z}<>/?@:\\é"

    status, headers, _ = request(gw.port, "GET", "/api/rid", {"X-Request-Id": rid.encode("latin-1")})

    assert status == 200
    assert backend.wait_for("/api/rid").headers["x-request-id"] == rid
    assert headers["X-Request-Id"] == rid


@pytest.mark.parametrize("length, kept", [(128, True), (129, False), (4000, False)])
def test_overlong_request_id_is_replaced(start_gateway, backend, length, kept):
    gw = api_gateway(start_gateway, backend.url)
    rid = ("r" * length)

    status, headers, _ = request(gw.port, "GET", "/api/rid", {"X-Request-Id": rid})

    assert status == 200
    seen = backend.wait_for("/api/rid").headers["x-request-id"]
    assert headers["X-Request-Id"] == seen, "the client and the backend see the same id"
    if kept:
        assert seen == rid
    else:
        assert seen != rid and 0 < len(seen) <= 128
        assert re.fullmatch(r"[0-9a-f]{32}", seen), seen


# --------------------------------------------------------------------------------------
# Header order and merging, HTTP/1.0 clients, interim responses


def test_request_header_order_is_kept(start_gateway, backend):
    gw = api_gateway(start_gateway, backend.url)
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        conn.putrequest("GET", "/api/order", skip_accept_encoding=True)
        for name, value in (("X-Multi", "first"), ("X-Other", "o"), ("X-Multi", "second"), ("X-Multi", "third"),
                            ("Accept", "text/html"), ("Accept", "application/json;q=0.5")):
            conn.putheader(name, value)
        conn.endheaders()
        resp = conn.getresponse()
        resp.read()
    finally:
        conn.close()

    assert resp.status == 200
    seen = backend.wait_for("/api/order")
    # RFC 9110 5.3: the order of field lines with the same name is significant
    assert [v for k, v in seen.raw_headers if k.lower() == "x-multi"] == ["first", "second", "third"], seen.raw_headers
    assert seen.headers["accept"] == "text/html, application/json;q=0.5"


def test_response_header_order_is_kept(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(
        lambda req: b"HTTP/1.1 200 OK\r\nX-M: 1\r\nLink: <a>\r\nX-M: 2\r\nX-M: 3\r\nContent-Length: 0\r\n\r\n"))
    gw = api_gateway(start_gateway, be.url)

    with RawClient(gw.port) as c:
        resp = c.request("GET", "/api/x")

    assert resp.get_all("x-m") == ["1", "2", "3"]


def test_http2_cookie_crumbs_are_merged_for_the_backend(start_gateway, backend):
    gw = api_gateway(start_gateway, backend.url)

    # HTTP/2 clients (browsers among them) send each cookie as its own field (RFC 9113 8.2.3);
    # an HTTP/1.1 request carries at most one Cookie header (RFC 6265 5.4), joined with "; "
    res = nghttp("-H", "cookie: a=1", "-H", "cookie: b=2", "-H", "cookie: c=3", f"http://127.0.0.1:{gw.port}/api/cookies")

    assert res.returncode == 0, res.stderr
    seen = backend.wait_for("/api/cookies")
    cookies = [v for k, v in seen.raw_headers if k.lower() == "cookie"]
    assert cookies == ["a=1; b=2; c=3"], seen.raw_headers


def test_http10_client_without_host(start_gateway, backend):
    gw = api_gateway(start_gateway, backend.url)

    with RawClient(gw.port) as c:
        c.send(b"GET /api/old HTTP/1.0\r\n\r\n")
        resp = read_response(c.stream)

    assert resp.status == 200
    seen = backend.wait_for("/api/old").headers
    # the gateway's internal host name ("default") is no business of the backend
    assert seen.get("host") not in (None, "", "default"), seen
    assert seen.get("x-forwarded-host") != "default", seen


def test_http10_client_gets_unframed_backend_body(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(unframed_backend))
    gw = api_gateway(start_gateway, be.url)

    with RawClient(gw.port) as c:
        c.send(b"GET /api/chunked HTTP/1.0\r\nHost: t\r\n\r\n")
        resp = read_response(c.stream)

    assert resp.status == 200
    assert resp.get("transfer-encoding") is None, "no chunked encoding for an HTTP/1.0 client"
    assert resp.complete and resp.body == STREAM_BODY


def interim_backend(req):
    return (b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Final: yes\r\n\r\nfinal")


def test_interim_responses_from_backend(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(interim_backend))
    gw = api_gateway(start_gateway, be.url)

    status, headers, body = request(gw.port, "POST", "/api/interim", body=b"data")

    assert (status, body) == (200, b"final")
    assert headers["X-Final"] == "yes"
    assert request(gw.port, "GET", "/api/again")[0] == 200


def test_head_with_chunked_backend_head(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(
        lambda req: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-H: 1\r\n\r\n"
        + (b"" if req.method == "HEAD" else b"2\r\nok\r\n0\r\n\r\n")))
    gw = api_gateway(start_gateway, be.url)

    with RawClient(gw.port) as c:
        resp = c.request("HEAD", "/api/h")
        assert resp.status == 200 and resp.get("x-h") == "1"
        assert c.stream.pending(0.3) == b"", "bytes followed the head of a HEAD response"
        resp = c.request("GET", "/api/h")
        assert (resp.status, resp.body) == (200, b"ok")
