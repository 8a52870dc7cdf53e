"""Limits the gateway enforces, and backends that fail in the ways real ones do."""

import json
import re
import socket
import subprocess
import time

import pytest

from rawhttp import RawClient, read_request, read_response, serve_keepalive
from support import free_port, gateway_config, pattern_chunk, request, wait_until

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}


def backends_for(*urls, **extra):
    b = {"servers": list(urls), "connect_timeout": "1s", "timeout": "10s"}
    b.update(extra)
    return {"b": b}


def log_entries(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def send_ignoring_reset(sock, data):
    """Sends as much of `data` as the peer takes; a gateway may answer and close early."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


# --------------------------------------------------------------------------------------
# 413 and 431


def test_413_for_content_length_over_limit_is_marked_and_logged(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    config = gateway_config(free_port(), backends=backends_for(backend.url), routes=[API],
                            limits={"max_request_body": "64KiB"}, access_log=str(log))
    gw = start_gateway(config)

    with RawClient(gw.port) as c:
        # announce more than the limit: the gateway can answer without reading the body
        c.send(b"POST /api/too-big HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n")
        send_ignoring_reset(c.sock, b"x" * 70000)
        resp = read_response(c.stream)
    assert resp.status == 413
    assert resp.get("x-matchgate-error") == "body-too-large", resp

    assert backend.received() == []
    assert request(gw.port, "POST", "/api/fits", body=b"y" * 60000)[0] == 200
    entries = wait_until(lambda: [e for e in log_entries(log) if e.get("path") == "/api/too-big"], 3)
    assert entries and entries[0]["status"] == 413, log_entries(log)
    assert entries[0]["method"] == "POST"


def test_413_for_chunked_body_over_limit_is_marked_and_logged(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    config = gateway_config(free_port(), backends=backends_for(backend.url), routes=[API],
                            limits={"max_request_body": "64KiB"}, access_log=str(log))
    gw = start_gateway(config)

    with RawClient(gw.port) as c:
        c.send(b"POST /api/chunked-too-big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (16384, b"c" * 16384)
        for _ in range(8):  # 128 KiB, twice the limit
            send_ignoring_reset(c.sock, chunk)
        send_ignoring_reset(c.sock, b"0\r\n\r\n")
        resp = read_response(c.stream)
    assert resp.status == 413
    assert resp.get("x-matchgate-error") == "body-too-large", resp

    assert backend.received() == []
    entries = wait_until(lambda: [e for e in log_entries(log) if e.get("path") == "/api/chunked-too-big"], 3)
    assert entries and entries[0]["status"] == 413, log_entries(log)


def test_over_limit_http2_upload_is_refused_before_the_backend(start_gateway, backend, tmp_path):
    """h2o 2.2.5 resets an HTTP/2 stream whose body passes max_request_entity_size
    (RST_STREAM REFUSED_STREAM) instead of letting a 413 be sent: a documented limit
    (docs/architecture.md). What must hold: nothing reaches the backend, and the gateway
    keeps serving on the same connection kind."""
    config = gateway_config(free_port(), backends=backends_for(backend.url), routes=[API],
                            limits={"max_request_body": "64KiB"})
    gw = start_gateway(config)
    data = tmp_path / "big.bin"
    data.write_bytes(b"x" * 200000)

    res = subprocess.run(["nghttp", "-v", "-d", str(data), f"http://127.0.0.1:{gw.port}/api/h2-too-big"],
                         capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)

    assert "RST_STREAM" in res.stdout and ":status: 200" not in res.stdout, res.stdout[-2000:]
    assert backend.received() == []
    ok = subprocess.run(["nghttp", "-v", f"http://127.0.0.1:{gw.port}/api/after"],
                        capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    assert ":status: 200" in ok.stdout, ok.stdout[-2000:]


def test_431_is_marked_and_logged(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    config = gateway_config(free_port(), backends=backends_for(backend.url), routes=[API],
                            limits={"max_header_size": "2KiB"}, access_log=str(log))
    gw = start_gateway(config)

    status, headers, body = request(gw.port, "GET", "/api/big-head", {"X-A": "a" * 1500, "X-B": "b" * 1500})

    assert status == 431
    assert headers["X-Matchgate-Error"] == "headers-too-large"
    assert body
    assert backend.received() == []
    entries = wait_until(lambda: [e for e in log_entries(log) if e.get("path") == "/api/big-head"], 3)
    assert entries and entries[0]["status"] == 431


# --------------------------------------------------------------------------------------
# Backends that fail


def truncating_backend(stream, backend):
    req = read_request(stream)
    if req is None:
        return
    backend.record(req)
    if req.target.startswith("/api/ok"):
        stream.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        return
    chunked = "chunked" in req.target
    framing = "Transfer-Encoding: chunked" if chunked else "Content-Length: 1000000"
    stream.sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n{framing}\r\n\r\n".encode())
    for i in range(4):
        part = pattern_chunk(i * 50000, 50000)
        stream.sock.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
        time.sleep(0.02)
    # and then the backend dies: 200000 bytes sent, the announced length or the last chunk missing


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_backend_closing_mid_body_truncates_the_response(start_gateway, raw_backend_factory, framing):
    be = raw_backend_factory(truncating_backend)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url, retries=0), routes=[API]))

    for _ in range(2):
        with RawClient(gw.port, timeout=10) as c:
            c.send(f"GET /api/truncated-{framing} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            resp = read_response(c.stream, timeout=10)
        # either a gateway error before any byte, or a response the client can tell is cut short
        if resp.status == 200:
            assert not resp.complete, f"a truncated backend body reached the client as complete: {resp}"
            assert len(resp.body) < 1000000
            assert resp.body == pattern_chunk(0, len(resp.body))
        else:
            assert resp.status == 502, resp

    for i in range(3):
        assert request(gw.port, "GET", f"/api/ok{i}")[:1] == (200,)


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_backend_closing_mid_body_over_http2(start_gateway, raw_backend_factory, framing):
    be = raw_backend_factory(truncating_backend)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url, retries=0), routes=[API]))

    res = subprocess.run(["nghttp", "-v", f"http://127.0.0.1:{gw.port}/api/truncated-{framing}"], capture_output=True,
                         timeout=20, stdin=subprocess.DEVNULL)

    out = res.stdout.decode(errors="replace")
    if ":status: 200" in out:
        assert "RST_STREAM" in out, f"the HTTP/2 stream ended normally after a truncated body:\n{out[-3000:]}"
    else:
        assert ":status: 502" in out, out[-3000:]
    assert request(gw.port, "GET", "/api/ok")[0] == 200


def garbage_backend(stream, backend):
    req = read_request(stream)
    if req is None:
        return
    backend.record(req)
    if req.target.startswith("/api/ok"):
        stream.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        return
    stream.sock.sendall(b"SSH-2.0-OpenSSH_9.2 this is not HTTP\r\n\r\n\x00\x01\x02garbage")


def test_garbage_from_backend_is_502(start_gateway, raw_backend_factory):
    be = raw_backend_factory(garbage_backend)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API]))

    status, headers, body = request(gw.port, "GET", "/api/garbage")

    assert status == 502
    assert headers["X-Matchgate-Error"], headers
    assert b"SSH" not in body
    assert request(gw.port, "GET", "/api/ok")[0] == 200


def bad_status_backend(stream, backend):
    req = read_request(stream)
    if req is None:
        return
    backend.record(req)
    stream.sock.sendall(b"HTTP/1.1 2x0 Weird\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


def test_malformed_status_line_is_502(start_gateway, raw_backend_factory):
    be = raw_backend_factory(bad_status_backend)
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API]))

    status, headers, _ = request(gw.port, "GET", "/api/weird")

    assert status == 502, status
    assert headers["X-Matchgate-Error"]


# --------------------------------------------------------------------------------------
# Backend response heads that would break the client's framing (issue 13 item 8): 502


def head_backend(status_line, *lines):
    def respond(req):
        return status_line + b"\r\n" + b"".join(line + b"\r\n" for line in lines) + b"Content-Length: 2\r\n\r\nok"
    return serve_keepalive(respond)


EVIL_LINES = [
    b"X-Evil: a\rSet-Cookie: injected=1",  # the issue's: a bare CR ends the line for an HTTP/1 client
    b"X-Evil: a\r\rSet-Cookie: injected=1",
    b"X-Evil: a\x00Set-Cookie: injected=1",
    b"X-Evil: \x1b[31minjected",
    b"X-Evil: a\x0binjected",
    b"X-Evil: a\x7finjected",
    b"X-Bad Name: injected",
    b"X(Bad): injected",
    b"X-\xc3\xa9: injected",
    b": injected",
    b"no colon injected",
]


@pytest.mark.parametrize("line", EVIL_LINES)
def test_malformed_backend_header_is_502(start_gateway, raw_backend_factory, line):
    be = raw_backend_factory(head_backend(b"HTTP/1.1 200 OK", b"X-Good: 1", line, b"X-After: 2"))
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API]))
    with RawClient(gw.port) as c:
        resp = c.request("GET", "/api/evil")
        assert resp.status == 502, resp
        assert resp.get("x-matchgate-error") == "bad-gateway-response", resp
        assert resp.get("set-cookie") is None and resp.get("x-good") is None, resp
        assert b"injected" not in resp.body
        # the client's connection is intact: the backend broke its own response, not the client's
        assert c.request("GET", "/api/again").status == 502
    assert len(be.requests) == 2, "a broken answer is not retried on another server"


def test_folded_backend_header_is_502(start_gateway, raw_backend_factory):
    be = raw_backend_factory(head_backend(b"HTTP/1.1 200 OK", b"X-Good: 1", b" Set-Cookie: injected=1", b"\tx: y"))
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API]))
    status, headers, body = request(gw.port, "GET", "/api/folded")
    assert status == 502 and headers["X-Matchgate-Error"] == "bad-gateway-response", (status, headers)
    assert "Set-Cookie" not in headers and b"injected" not in body


@pytest.mark.parametrize("status_line", [b"HTTP/1.1 200 OK\rSet-Cookie: injected=1", b"HTTP/1.1 200 O\x00K",
                                         b"HTTP/1.1 200 \x1b[0m"])
def test_malformed_backend_reason_phrase_is_502(start_gateway, raw_backend_factory, status_line):
    be = raw_backend_factory(head_backend(status_line, b"X-Good: 1"))
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API]))
    with RawClient(gw.port) as c:
        resp = c.request("GET", "/api/reason")
    assert resp.status == 502, resp
    assert resp.get("x-matchgate-error") == "bad-gateway-response"
    assert resp.get("set-cookie") is None and "injected" not in resp.reason


def test_unusual_but_valid_backend_fields_pass(start_gateway, raw_backend_factory):
    be = raw_backend_factory(head_backend(b"HTTP/1.1 200 Fine Thanks", b"X-Space-Before-Colon : v", b"X-Empty:",
                                          b"X-Tab: a\tb", b"X-Obs-Text: caf\xc3\xa9", b"X-Token!#$%&'*+-.^_`|~: t"))
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API]))
    with RawClient(gw.port) as c:
        resp = c.request("GET", "/api/valid")
    assert resp.status == 200 and resp.reason == "Fine Thanks", resp
    assert resp.get("x-space-before-colon") == "v"  # RFC 9112 5.1: the proxy removes the space
    assert resp.get("x-empty") == ""
    assert resp.get("x-tab") == "a\tb"
    assert resp.get("x-obs-text") == "caf\xc3\xa9"
    assert resp.get("x-token!#$%&'*+-.^_`|~") == "t"


def test_malformed_backend_header_is_502_over_http2(start_gateway, raw_backend_factory):
    import h2client
    be = raw_backend_factory(head_backend(b"HTTP/1.1 200 OK", b"X-Evil: a\rb"))
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API]))
    res = h2client.get(gw.port, b"/api/h2")
    assert res.status == 502 and res.get("x-matchgate-error") == "bad-gateway-response", res


# --------------------------------------------------------------------------------------
# Backend keep-alive


def test_backend_connections_are_reused(start_gateway, backend):
    config = gateway_config(free_port(), backends=backends_for(backend.url), routes=[API], workers=1)
    gw = start_gateway(config)

    for i in range(30):
        # a fresh client connection each time: reuse must come from the gateway's pool
        assert request(gw.port, "GET" if i % 3 else "POST", f"/api/ka{i}", body=None if i % 3 else b"p")[0] == 200

    assert len(backend.received()) == 30
    assert backend.connections <= 2, f"{backend.connections} backend connections for 30 sequential requests"


# --------------------------------------------------------------------------------------
# Clients that leave while the backend is still working


def test_client_gone_while_waiting_for_backend_is_499(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    config = gateway_config(free_port(), backends=backends_for(backend.url), routes=[API], access_log=str(log))
    gw = start_gateway(config)

    for n in range(3):
        sock = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
        sock.sendall(f"GET /api/slow/gone{n}?ms=1500 HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        backend.wait_for(f"/api/slow/gone{n}")
        if n == 1:  # a reset instead of an orderly close
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()

    for i in range(3):
        assert request(gw.port, "GET", f"/api/still{i}")[0] == 200
    # let the slow backend answers arrive (or not) before judging the log
    time.sleep(1.8)
    assert request(gw.port, "GET", "/api/last")[0] == 200

    entries = {e["path"]: e for e in log_entries(log)}
    for n in range(3):
        e = entries.get(f"/api/slow/gone{n}")
        assert e is not None, f"no access log line for an abandoned request: {sorted(entries)}"
        assert e["status"] == 499, f"abandoned request logged as {e}"


def test_client_gone_while_waiting_for_backend_http2(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    config = gateway_config(free_port(), backends=backends_for(backend.url), routes=[API], access_log=str(log))
    gw = start_gateway(config)

    # nghttp gives up on the request after 300 ms and closes the connection
    res = subprocess.run(["nghttp", "-t", "300ms", f"http://127.0.0.1:{gw.port}/api/slow/h2gone?ms=1500"],
                         capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    assert b"Timeout" in res.stderr, res.stderr
    backend.wait_for("/api/slow/h2gone")

    assert request(gw.port, "GET", "/api/after")[0] == 200
    e = wait_until(lambda: {x["path"]: x for x in log_entries(log)}.get("/api/slow/h2gone"), 3)
    assert e, log_entries(log)
    assert e["status"] == 499, e
    assert e["duration_ms"] < 1400, "the gateway noticed the client leave before the backend answered"


# --------------------------------------------------------------------------------------
# Gateway errors after the backend's head arrived, and oversized heads


def head_then_trouble(req):
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nSet-Cookie: session=backend-secret\r\n"
            b"X-Backend-Only: 1\r\nContent-Length: 100\r\n\r\n")
    if "stall" in req.target:
        def stall():
            yield head
            time.sleep(1.5)
            yield None
        return stall

    def close():
        yield head
        yield None
    return close


@pytest.mark.parametrize("kind, status", [("stall", 504), ("close", 502)])
def test_gateway_error_after_backend_head_has_no_backend_headers(start_gateway, raw_backend_factory, kind, status):
    be = raw_backend_factory(serve_keepalive(head_then_trouble))
    backends = backends_for(be.url, timeout="500ms", retries=0)
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))

    with RawClient(gw.port) as c:
        resp = c.request("GET", f"/api/{kind}")

    if resp.status == 200:  # a cut-short 200 would be acceptable too
        assert not resp.complete, resp
        return
    assert resp.status == status, resp
    assert resp.get("x-matchgate-error") in ("backend-timeout", "backend-unavailable")
    assert resp.get_all("content-type") == ["text/plain; charset=utf-8"], f"gateway error mixed with backend head: {resp}"
    assert resp.get("set-cookie") is None, f"gateway error carries the backend's cookie: {resp}"
    assert resp.get("x-backend-only") is None, resp


def many_headers_backend(req):
    def gen():
        yield (b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: %d\r\n" % (i, i) for i in range(150))
               + b"Content-Length: 8\r\n\r\n")
        for _ in range(2):  # the body comes after the head, in parts
            time.sleep(0.1)
            yield b"body"
    return gen


def test_response_head_is_never_silently_cut(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(many_headers_backend))
    gw = start_gateway(gateway_config(free_port(), backends=backends_for(be.url), routes=[API]))

    with RawClient(gw.port) as c:
        resp = c.request("GET", "/api/many")

    got = [k for k, _ in resp.headers if re.fullmatch(r"x-h\d+", k)]
    if resp.status == 200:
        assert len(got) == 150, f"the client got {len(got)} of the backend's 150 headers and a 200"
    else:
        assert resp.status == 502, resp
        assert got == [], "a gateway error carries the backend's headers"


# --------------------------------------------------------------------------------------
# Backends that close idle keep-alive connections, clients that idle


def closes_when_idle(stream, backend):
    req = read_request(stream)
    if req is None:
        return
    backend.record(req)
    # keep-alive as far as the head says, but the server drops idle connections after 50 ms
    stream.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=1\r\n\r\nok")
    time.sleep(0.05)


def test_backend_closing_idle_keepalive_connections(start_gateway, raw_backend_factory):
    be = raw_backend_factory(closes_when_idle)
    backends = backends_for(be.url, retries=0)
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API], workers=1))

    statuses = []
    for i in range(20):
        method = "POST" if i % 2 else "GET"
        statuses.append(request(gw.port, method, f"/api/stale{i}", body=b"x" if method == "POST" else None)[0])
        time.sleep(0.04 if i % 3 else 0.1)  # around the backend's idle close

    assert statuses == [200] * 20, statuses
    assert len(be.requests) == 20


def test_client_idle_timeout_closes_connections(start_gateway, backend):
    config = gateway_config(free_port(), backends=backends_for(backend.url), routes=[API],
                            limits={"client_idle_timeout": "500ms"})
    gw = start_gateway(config)

    idle = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    slow = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    try:
        slow.sendall(b"GET /api/slowloris HTTP/1.1\r\nHost: t\r\nX-A: ")  # a head that never ends
        started = time.monotonic()
        for sock in (idle, slow):
            sock.settimeout(max(0.1, started + 3 - time.monotonic()))
            try:
                while sock.recv(65536):
                    pass
            except ConnectionResetError:
                pass
        elapsed = time.monotonic() - started
    finally:
        idle.close()
        slow.close()

    assert elapsed < 2.5, f"idle connections still open after {elapsed:.2f}s with client_idle_timeout 500ms"
    assert backend.received() == []
    assert request(gw.port, "GET", "/api/after")[0] == 200


def trickling_head(req):
    def gen():
        yield b"HTTP/1.1 200 OK\r\n"
        for i in range(8):  # one header line every 300 ms: the head takes 2.4 s
            time.sleep(0.3)
            yield b"X-Slow-%d: %d\r\n" % (i, i)
        yield b"Content-Length: 2\r\n\r\nok"
    return gen


def test_backend_timeout_bounds_a_trickling_head(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(trickling_head))
    backends = backends_for(be.url, timeout="1s", retries=0)
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))

    started = time.monotonic()
    status, headers, _ = request(gw.port, "GET", "/api/trickle")
    elapsed = time.monotonic() - started

    # timeout: "-> 504 when the response is not complete in time"; a head is not a response yet
    assert (status, headers.get("X-Matchgate-Error")) == (504, "backend-timeout"), f"{status} after {elapsed:.2f}s"
    assert elapsed < 1.8, f"answered after {elapsed:.2f}s with a 1s backend timeout"


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_body_of_exactly_the_limit_is_accepted(start_gateway, backend, framing):
    config = gateway_config(free_port(), backends=backends_for(backend.url), routes=[API],
                            limits={"max_request_body": "64KiB"})
    gw = start_gateway(config)
    body = pattern_chunk(0, 65536)

    with RawClient(gw.port) as c:
        if framing == "length":
            resp = c.request("POST", "/api/exact", body=body)
        else:
            resp = c.request("POST", "/api/exact", [("Transfer-Encoding", "chunked")],
                             body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))

    assert resp.status == 200, f"a {len(body)}-byte body with max_request_body 64KiB: {resp}"
    assert backend.wait_for("/api/exact").body == body
