"""The backend timeout as a response deadline, slow clients, and pipelined HTTP/1.1 requests
(which the gateway must not mistake for a client leaving)."""

import json
import socket
import time

from rawhttp import RawClient, read_response, serve_keepalive
from support import free_port, gateway_config, pattern_chunk, request

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}
MiB = 1 << 20


def gateway(start_gateway, url, timeout="10s", **top):
    backends = {"b": {"servers": [url], "connect_timeout": "1s", "timeout": timeout, "retries": 0}}
    return start_gateway(gateway_config(free_port(), backends=backends, routes=[API], **top))


def steady_trickle(req):
    if "trickle" not in req.target:
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    def gen():
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 20000\r\n\r\n"
        for i in range(10):  # 2000 bytes every 200 ms: 2 s in all, never silent for long
            yield pattern_chunk(i * 2000, 2000)
            time.sleep(0.2)
    return gen


def test_timeout_is_a_deadline_for_the_whole_response(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(steady_trickle))
    gw = gateway(start_gateway, be.url, timeout="1s")

    started = time.monotonic()
    with RawClient(gw.port, timeout=10) as c:
        c.send(b"GET /api/trickle HTTP/1.1\r\nHost: t\r\n\r\n")
        resp = read_response(c.stream, timeout=10)
    elapsed = time.monotonic() - started

    # the head went out before the deadline, so the client can only be told by a cut
    assert resp.status == 200
    assert not resp.complete, f"a response past its deadline arrived complete after {elapsed:.2f}s"
    assert 0.8 <= elapsed < 1.8, f"cut after {elapsed:.2f}s with a 1s timeout"
    assert request(gw.port, "GET", "/api/next")[0] == 200  # the gateway (and its pool) are fine


def test_slow_client_does_not_trip_the_backend_timeout(start_gateway, backend):
    gw = gateway(start_gateway, backend.url, timeout="1s")
    n = 8 * MiB

    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    got, head, data = 0, b"", b""
    started = time.monotonic()
    try:
        sock.sendall(f"GET /api/bytes?n={n} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        # about 2.5 s to read 8 MiB: well past the 1 s backend timeout, but the backend was fast
        while time.monotonic() - started < 10:
            chunk = sock.recv(16 * 1024)
            if not chunk:
                break
            data += chunk
            if not head and b"\r\n\r\n" in data:
                head, data = data.split(b"\r\n\r\n", 1)
            got = len(data)
            time.sleep(0.005)
    finally:
        sock.close()
    elapsed = time.monotonic() - started

    assert head.startswith(b"HTTP/1.1 200"), head
    assert elapsed > 1.2, f"the client read too fast ({elapsed:.2f}s) to test anything"
    assert got == n, f"got {got} of {n} bytes after {elapsed:.2f}s: a slow client was cut by the backend timeout"


def test_pipelined_requests_behind_a_slow_one(start_gateway, backend):
    gw = gateway(start_gateway, backend.url)

    with RawClient(gw.port, timeout=10) as c:
        # three requests in one write; the first waits 600 ms at the backend, long enough for
        # the gateway to start watching the client connection
        c.send(b"GET /api/slow?ms=600 HTTP/1.1\r\nHost: t\r\n\r\n"
               b"POST /api/second HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
               b"GET /api/third?x=1 HTTP/1.1\r\nHost: t\r\n\r\n")
        paths = []
        for _ in range(3):
            resp = read_response(c.stream, timeout=10)
            assert resp.status == 200 and resp.complete, resp
            paths.append(json.loads(resp.body)["path"])

    assert paths == ["/api/slow", "/api/second", "/api/third"]
    assert backend.wait_for("/api/second").body == b"hello"


def test_client_half_close_after_request_still_gets_response_or_499(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    gw = gateway(start_gateway, backend.url, access_log=str(log))

    with RawClient(gw.port, timeout=10) as c:
        c.send(b"GET /api/slow?ms=500 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        c.sock.shutdown(socket.SHUT_WR)  # "nothing more to send", as nc -N does
        try:
            resp = read_response(c.stream, timeout=10)
        except Exception:  # closed without a response
            resp = None

    assert request(gw.port, "GET", "/api/after")[0] == 200
    assert gw.stop() == 0
    entries = {e["path"]: e for e in (json.loads(l) for l in log.read_text().splitlines() if l.strip())}
    # either answer is defensible (nginx calls it a client abort); the log must agree with the wire
    if resp is not None and resp.complete:
        assert entries["/api/slow"]["status"] == resp.status, (resp, entries["/api/slow"])
    else:
        assert entries["/api/slow"]["status"] == 499


def test_client_that_stops_reading_is_dropped_after_client_idle_timeout(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    gw = gateway(start_gateway, backend.url, access_log=str(log), limits={"client_idle_timeout": "1s"})

    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.sendall(f"GET /api/bytes?n={64 * MiB} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        time.sleep(2.5)  # read nothing for longer than client_idle_timeout
        sock.settimeout(5)
        got, started = 0, time.monotonic()
        while time.monotonic() - started < 5:
            try:
                chunk = sock.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += len(chunk)
    finally:
        sock.close()

    assert got < 64 * MiB, "a client that stalled was still served in full"
    # the gateway let go of the connection and the backend transfer, and keeps serving
    assert request(gw.port, "GET", "/api/after")[0] == 200
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(e["path"] == "/api/bytes" for e in entries), entries
