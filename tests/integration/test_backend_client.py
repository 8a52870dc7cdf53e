"""The builtin HTTP/1.1 client (gateway/backend/client_h1.c) against backends written byte by byte:
framing a backend could use to smuggle a response (502, the connection never used again), pooled
connections the backend closed, keepalive_timeout, max_idle_connections, names and their addresses,
and the switch back to libcurl."""

import socket
import threading
import time

import pytest

from rawhttp import RawClient, read_request, serve_keepalive
from support import free_port, gateway_config, request, run_matchgate, to_yaml, wait_until

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}


def backends_for(*urls, **extra):
    b = {"servers": list(urls), "connect_timeout": "1s", "timeout": "5s", "http_client": "builtin"}
    b.update(extra)
    return {"b": b}


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def hostile_backend(bad):
    """Answers /api/evil with `bad` and keeps the connection open; everything else with a clean
    keep-alive 200. `by_conn` records which connection served which path."""
    def handler(stream, backend):
        conn = backend.connections
        while True:
            req = read_request(stream)
            if req is None:
                return
            backend.record((conn, req.target))
            if req.target.startswith("/api/evil"):
                stream.sock.sendall(bad)
                if bad.endswith(b"#close"):
                    return
            else:
                stream.sock.sendall(OK)
    return handler


# Each: the response bytes, and whether the 502 is certain (the head is refused) or the response
# may instead have started and be cut short (the bad part is in the body).
HOSTILE = {
    "cl-and-te": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", True),
    "te-and-cl": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 14\r\n\r\n0\r\n\r\nHTTP/1.1", True),
    "differing-cl": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", True),
    "cl-list": (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 20\r\n\r\nok", True),
    "bad-cl": (b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", True),
    "te-gzip": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok", True),
    "bad-header": (b"HTTP/1.1 200 OK\r\nX Bad: v\r\nContent-Length: 2\r\n\r\nok", True),
    "bad-chunk-size": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", False),
    "chunk-overflow": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff1\r\nhello\r\n", False),
    "bytes-after": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nsmugg", False),
    "bytes-after-chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", False),
    "body-on-204": (b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nsmugg", False),
    "premature-close": (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello#close", False),
    "premature-close-chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n#close", False),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_framing_is_502_and_the_connection_is_dropped(start_gateway, raw_backend_factory, case):
    bad, head_level = HOSTILE[case]
    be = raw_backend_factory(hostile_backend(bad))
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url, retries=0), routes=[API], workers=1))

    assert request(gw.port, "GET", "/api/first")[0] == 200
    with RawClient(gw.port) as c:
        resp = c.request("GET", "/api/evil")
    if head_level or resp.status != 200:
        assert resp.status == 502, resp
        assert resp.get("x-matchgate-error") in ("bad-gateway-response", "backend-unavailable"), resp
        assert b"smugg" not in resp.body and b"hello" not in resp.body
    else:
        assert not resp.complete, f"a response with broken framing reached the client as complete: {resp}"
    for i in range(3):
        status, _, body = request(gw.port, "GET", f"/api/after{i}")
        assert (status, body) == (200, b"ok"), (status, body)
    served = list(be.requests)
    evil_conn = next(conn for conn, target in served if target == "/api/evil")
    after = [conn for conn, target in served if target.startswith("/api/after")]
    assert evil_conn not in after, f"the connection of a broken response was used again: {served}"


def test_interim_responses_are_skipped(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(
        lambda req: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK))
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API], workers=1))
    for i in range(3):
        status, headers, body = request(gw.port, "GET", f"/api/i{i}")
        assert (status, body) == (200, b"ok") and "Link" not in headers
    assert be.connections == 1


def test_head_and_no_body_statuses_keep_the_connection(start_gateway, raw_backend_factory):
    def respond(req):
        if req.target.endswith("/204"):
            return b"HTTP/1.1 204 No Content\r\n\r\n"
        if req.target.endswith("/304"):
            return b"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n" + (b"" if req.method == "HEAD" else b"x" * 50)
    be = raw_backend_factory(serve_keepalive(respond))
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API], workers=1))
    with RawClient(gw.port) as c:
        assert c.request("HEAD", "/api/h").status == 200
        assert c.request("GET", "/api/204").status == 204
        assert c.request("GET", "/api/304").status == 304
        resp = c.request("GET", "/api/g")
        assert resp.status == 200 and resp.body == b"x" * 50
    assert be.connections == 1


def test_close_delimited_body_is_passed_whole(start_gateway, raw_backend_factory):
    def handler(stream, backend):
        req = read_request(stream)
        backend.record(req)
        stream.sock.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + b"y" * 100000)
    be = raw_backend_factory(handler)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API], workers=1))
    for i in range(2):
        status, _, body = request(gw.port, "GET", f"/api/c{i}")
        assert status == 200 and body == b"y" * 100000
    assert be.connections == 2, "a close-delimited response's connection is not reused"


# --------------------------------------------------------------------------------------
# Pooled connections


def closes_second_request(stream, backend):
    """Answers the first request of a connection, then closes on the second without a byte: a
    backend that closed an idle connection just as the gateway reused it."""
    first = True
    while True:
        req = read_request(stream)
        if req is None:
            return
        backend.record(req)
        if not first:
            return
        first = False
        stream.sock.sendall(OK)


def test_idempotent_request_failing_on_a_reused_connection_is_sent_again(start_gateway, raw_backend_factory):
    be = raw_backend_factory(closes_second_request)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url, retries=0), routes=[API], workers=1))
    assert request(gw.port, "GET", "/api/one")[0] == 200
    status, headers, body = request(gw.port, "GET", "/api/two")
    assert (status, body) == (200, b"ok"), (status, headers, body)
    assert [r.target for r in be.requests] == ["/api/one", "/api/two", "/api/two"]
    assert be.connections == 2


def test_post_failing_on_a_reused_connection_is_sent_again_once(start_gateway, raw_backend_factory):
    # as libcurl did: the connection was being closed as idle, nothing came back
    be = raw_backend_factory(closes_second_request)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url, retries=0), routes=[API], workers=1))
    assert request(gw.port, "GET", "/api/one")[0] == 200
    status, _, body = request(gw.port, "POST", "/api/two", body=b"once")
    assert (status, body) == (200, b"ok")
    assert [r.target for r in be.requests] == ["/api/one", "/api/two", "/api/two"]


def test_a_fresh_connection_failing_is_not_sent_again(start_gateway, raw_backend_factory):
    def handler(stream, backend):
        req = read_request(stream)
        backend.record(req)  # and close without a byte
    be = raw_backend_factory(handler)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url, retries=0), routes=[API], workers=1))
    status, headers, _ = request(gw.port, "GET", "/api/x")
    assert status == 502 and headers["X-Matchgate-Error"] == "backend-unavailable", (status, headers)
    assert len(be.requests) == 1


def test_idle_connection_closed_by_the_backend_is_not_used(start_gateway, raw_backend_factory):
    def handler(stream, backend):
        req = read_request(stream)
        backend.record(req)
        stream.sock.sendall(OK)  # keep-alive, then closes: the gateway sees it while idle
    be = raw_backend_factory(handler)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url, retries=0), routes=[API], workers=1))
    for i in range(5):
        assert request(gw.port, "POST", f"/api/p{i}", body=b"x")[0] == 200
        time.sleep(0.1)
    assert len(be.requests) == 5 and be.connections == 5


class ClosingWatch:
    """A keep-alive backend that records when the gateway closes each connection."""

    def __init__(self):
        self.closed_at = []
        self.lock = threading.Lock()

    def __call__(self, stream, backend):
        while True:
            req = read_request(stream, timeout=30)
            if req is None:
                with self.lock:
                    self.closed_at.append(time.monotonic())
                return
            backend.record(req)
            stream.sock.sendall(OK)


def test_keepalive_timeout_closes_idle_connections(start_gateway, raw_backend_factory):
    watch = ClosingWatch()
    be = raw_backend_factory(watch)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url, keepalive_timeout="300ms"), routes=[API],
                                      workers=1))
    assert request(gw.port, "GET", "/api/a")[0] == 200
    sent = time.monotonic()
    assert wait_until(lambda: watch.closed_at, 5), "the idle connection was never closed"
    assert watch.closed_at[0] - sent >= 0.25
    assert request(gw.port, "GET", "/api/b")[0] == 200
    assert be.connections == 2


def test_idle_connections_are_kept_by_default(start_gateway, raw_backend_factory):
    watch = ClosingWatch()
    be = raw_backend_factory(watch)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API], workers=1))
    for i in range(3):
        assert request(gw.port, "GET", f"/api/k{i}")[0] == 200
        time.sleep(0.4)
    assert be.connections == 1 and not watch.closed_at


def test_max_idle_connections(start_gateway, raw_backend_factory):
    watch = ClosingWatch()
    be = raw_backend_factory(watch)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url, max_idle_connections=0), routes=[API],
                                      workers=1))
    for i in range(4):
        assert request(gw.port, "GET", f"/api/m{i}")[0] == 200
    assert be.connections == 4
    assert wait_until(lambda: len(watch.closed_at) == 4, 5)


# --------------------------------------------------------------------------------------
# Names


def localhost_resolves():
    try:
        return bool(socket.getaddrinfo("localhost", 80, proto=socket.IPPROTO_TCP))
    except OSError:
        return False


# the machine must name itself: a bare chroot without /etc/hosts does not
needs_localhost = pytest.mark.skipif(not localhost_resolves(), reason="'localhost' does not resolve here (no /etc/hosts)")


@needs_localhost
def test_a_name_is_resolved_and_every_address_tried(start_gateway, raw_backend_factory):
    # "localhost" may give ::1 first: nothing listens there, the next address is taken
    be = raw_backend_factory(serve_keepalive(lambda req: OK))
    url = f"http://localhost:{be.port}"
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(url, max_idle_connections=0), routes=[API], workers=1))
    for i in range(4):
        assert request(gw.port, "GET", f"/api/n{i}")[:1] == (200,)
    assert len(be.requests) == 4


def test_a_name_that_does_not_resolve_is_502(start_gateway):
    gw = start_gateway(gateway_config(free_port(), backends=backends_for("http://no-such-host.invalid:80"), routes=[API],
                                      workers=1))
    status, headers, _ = request(gw.port, "GET", "/api/x")
    assert status == 502 and headers["X-Matchgate-Error"] == "backend-unavailable"


# --------------------------------------------------------------------------------------
# The switch and its configuration


def test_libcurl_still_serves_a_backend_that_asks_for_it(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(backend.url, http_client="libcurl"), routes=[API]))
    status, _, body = request(gw.port, "POST", "/api/curl?q=1", body=b"hello")
    assert status == 200 and b'"path": "/api/curl", "query": "q=1"' in body, body


@pytest.mark.parametrize("key,value,message", [
    ("http_client", "nginx", "unknown http_client 'nginx'"),
    ("keepalive_timeout", "0s", "keepalive_timeout"),
    ("keepalive_timeout", "soon", "invalid duration"),
    ("max_idle_connections", -1, "expected an integer between 0 and 1000000"),
    ("dns_refresh", "forever", "invalid duration"),
])
def test_bad_client_settings_are_refused_with_their_place(tmp_path, key, value, message):
    conf = gateway_config(free_port(), backends=backends_for("http://127.0.0.1:9", **{key: value}), routes=[API])
    path = tmp_path / "gw.yaml"
    path.write_text(to_yaml(conf))
    res = run_matchgate("--check", "-c", path)
    assert res.returncode == 1
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.strip().startswith(key + ":"))
    assert f"gw.yaml:{line}:" in res.stderr and message in res.stderr, res.stderr


@needs_localhost
def test_tunnel_upgrade_reaches_a_named_server(start_gateway):
    # the tunnel's connection goes through the builtin client's addresses: "localhost" is looked
    # up by the resolver threads, and an address nothing listens on (::1) is passed over
    from wsbackend import WsBackend, connect, run
    wsb = WsBackend()
    try:
        port = free_port()
        url = wsb.url.replace("127.0.0.1", "localhost")
        start_gateway(gateway_config(port, {"live": {"servers": [url], "max_idle_connections": 0}},
                                     [{"name": "sockets", "forward": "live"}], workers=1))

        async def main():
            got = []
            for i in range(3):
                async with connect(f"ws://127.0.0.1:{port}/echo") as ws:
                    await ws.send(f"hi {i}")
                    got.append(await ws.recv())
            return got
        assert run(main()) == ["hi 0", "hi 1", "hi 2"]
    finally:
        wsb.stop()
