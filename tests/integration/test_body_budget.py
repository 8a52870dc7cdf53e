"""limits.max_buffered_request_bytes (issue 20): the request body bytes the process holds at once.
A body's announced length (max_request_body when it announces none) is taken when its head
arrives, before any of it is read (deps/h2o patch 0005), and given back when the request is done
or its client leaves. Past the budget, a request with a body gets 503 `overloaded` with
Retry-After and nothing of it is read or forwarded. These tests fail with Debian's unpatched h2o
(-Dh2o=system): it has no hook, and nothing is ever refused."""

import socket
import time

from h2client import DATA, END_HEADERS, END_STREAM, HEADERS, RST_STREAM, RawH2, frame
import hpack

from rawhttp import RawClient, Stream, read_response
from support import free_port, gateway_config, parse_metrics, request, wait_until

MiB = 1 << 20
API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}


def start(start_gateway, backend, budget="2MiB", body="1MiB"):
    admin = free_port()
    conf = gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API], admin={"address": f"127.0.0.1:{admin}"},
                          limits={"max_request_body": body, "max_buffered_request_bytes": budget})
    return start_gateway(conf), admin


def metrics(admin):
    return parse_metrics(request(admin, "GET", "/metrics")[2].decode())


def held(admin):
    return metrics(admin)["matchgate_buffered_request_bytes"]


def upload_started(port, length, sent=1000, chunked=False):
    """An upload whose head and first bytes are sent, the rest held back."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if chunked:
        s.sendall(b"POST /api/up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % sent + b"u" * sent +
                  b"\r\n")
    else:
        s.sendall(b"POST /api/up HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % length + b"u" * sent)
    return s


def test_bodies_past_the_budget_get_503_overloaded_and_it_is_given_back(start_gateway, backend):
    gw, admin = start(start_gateway, backend)
    a = upload_started(gw.port, MiB)
    b = upload_started(gw.port, MiB)
    try:
        assert wait_until(lambda: held(admin) == 2 * MiB, 5), metrics(admin)
        with RawClient(gw.port) as c:
            c.send(b"POST /api/refused HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n0123456789")
            resp = read_response(c.stream)
            assert resp.status == 503
            assert resp.get("x-matchgate-error") == "overloaded"
            assert resp.get("retry-after") == "1"
            assert resp.get("connection") == "close", "the body is left unread: the connection cannot go on"
        assert request(gw.port, "GET", "/api/no-body")[0] == 200, "a request without a body is never refused"
        assert metrics(admin)["matchgate_request_bodies_refused_total"] == 1

        a.close()  # an upload that aborts gives its bytes back
        assert wait_until(lambda: held(admin) == MiB, 5), metrics(admin)
        status, _, _ = request(gw.port, "POST", "/api/fits", body=b"f" * MiB)
        assert status == 200
        assert len(backend.received("/api/fits")[0].body) == MiB
        assert wait_until(lambda: held(admin) == MiB, 5), "an upload done gives its bytes back"

        b.sendall(b"u" * (MiB - 1000))  # the held one finishes
        resp = read_response(Stream(b, 10.0))
        assert resp.status == 200
        assert wait_until(lambda: held(admin) == 0, 5), metrics(admin)
        assert backend.received("/api/refused") == []
    finally:
        a.close()
        b.close()


def test_a_body_without_a_length_counts_max_request_body(start_gateway, backend):
    """Chunked: its size is known only at its end, so it holds max_request_body until then."""
    gw, admin = start(start_gateway, backend)
    a = upload_started(gw.port, 0, chunked=True)
    try:
        assert wait_until(lambda: held(admin) == MiB, 5), metrics(admin)
        b = upload_started(gw.port, 0, chunked=True)
        assert wait_until(lambda: held(admin) == 2 * MiB, 5)
        status, headers, _ = request(gw.port, "POST", "/api/small", body=b"s")
        assert status == 503 and headers["X-Matchgate-Error"] == "overloaded"
        b.close()
        assert wait_until(lambda: held(admin) == MiB, 5)
        assert request(gw.port, "POST", "/api/small", body=b"s")[0] == 200
    finally:
        a.close()


def test_a_client_waiting_for_100_continue_never_sends_the_refused_body(start_gateway, backend):
    gw, admin = start(start_gateway, backend, budget="1MiB")
    a = upload_started(gw.port, MiB)
    try:
        assert wait_until(lambda: held(admin) == MiB, 5)
        with RawClient(gw.port) as c:
            c.send(b"PUT /api/wait HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
            resp = read_response(c.stream, allow_interim=True)
            assert resp.status == 503, "a 503 instead of 100 Continue"
            assert resp.get("x-matchgate-error") == "overloaded"
    finally:
        a.close()


def test_http2_bodies_are_counted_and_refused_on_their_stream(start_gateway, backend):
    """HTTP/2: the 503 comes on the stream at once, the stream's DATA frames are dropped, and the
    stream ends with RST_STREAM NO_ERROR once the response is out (RFC 9113 8.1); the connection
    goes on serving other streams."""
    gw, admin = start(start_gateway, backend)
    up = RawH2(gw.port)
    up.send(frame(HEADERS, END_HEADERS, 1, up.request_block(b"/api/h2up", b"POST", extra=[(b"content-length", b"2097152")])) +
            frame(DATA, 0, 1, b"x" * 1000))
    try:
        assert wait_until(lambda: held(admin) == 2 * MiB, 5), metrics(admin)
        c = RawH2(gw.port)
        c.send(frame(HEADERS, END_HEADERS, 1, c.request_block(b"/api/h2refused", b"POST", extra=[(b"content-length", b"10")])) +
               frame(DATA, 0, 1, b"01234"))
        decoder = hpack.Decoder()
        f = c.until(lambda f: f[0] == HEADERS and f[2] == 1, 5)
        assert f is not None, "no response"
        head = dict(decoder.decode(f[3]))
        assert head[":status"] == "503" and head["x-matchgate-error"] == "overloaded" and head["retry-after"] == "1", head
        rst = c.until(lambda f: f[0] == RST_STREAM and f[2] == 1, 5)
        assert rst is not None and int.from_bytes(rst[3], "big") == 0, "RST_STREAM NO_ERROR after the response"
        c.send(frame(DATA, END_STREAM, 1, b"56789"))  # already on its way: dropped
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, c.request_block(b"/api/after")))
        f = c.until(lambda f: f[0] == HEADERS and f[2] == 3, 5)
        assert f is not None and dict(decoder.decode(f[3]))[":status"] == "200", "the connection goes on"
        c.close()
        assert metrics(admin)["matchgate_request_bodies_refused_total"] == 1
        up.close()  # the upload's client leaves: its stream's bytes are given back
        assert wait_until(lambda: held(admin) == 0, 5), metrics(admin)
        assert backend.received("/api/h2refused") == []
    finally:
        up.close()


def test_no_bound_with_0(start_gateway, backend):
    gw, admin = start(start_gateway, backend, budget=0)
    socks = [upload_started(gw.port, MiB) for _ in range(4)]
    try:
        time.sleep(0.3)
        assert request(gw.port, "POST", "/api/more", body=b"m" * 100)[0] == 200
        assert metrics(admin)["matchgate_buffered_request_bytes"] == 0, "nothing is counted"
    finally:
        for s in socks:
            s.close()
