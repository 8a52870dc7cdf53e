"""Hostile HTTP/2 clients (issue 21), each over h2c with prior knowledge and over TLS with ALPN h2:
the gateway bounds what one connection can cost and closes it past the bound, and the other
clients keep being served. Frames are built by hand (h2client.RawH2)."""

import socket
import threading
import time

import pytest

import hpack

from h2client import (WINDOW_UPDATE, CANCEL, CONTINUATION, DATA, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM, GOAWAY, HEADERS,
                      RST_STREAM, RawH2, frame)
from support import free_port, gateway_config, request, wait_until
from test_http2_tls import make_cert

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}
MAX_CONTINUATION_FRAMES = 32  # deps/h2o/patches/0001-http2-bound-continuation-frames.patch
MAX_HEADER_LIST = 8192 + 4096 * 100  # per header block, 0002-http2-bound-decoded-header-list.patch
MAX_HEADER_LIST_PER_CONN = 1 << 20  # the open streams of one connection, together
RESET_BUDGET, RESET_REFILL_S = 100, 0.1  # 0004-http2-budget-for-cancelled-streams.patch, 0010 (every reset)
MAX_REQUESTS_PER_CONNECTION = 1000  # limits.max_requests_per_connection's default (0011 for HTTP/2)
REFUSED_STREAM = 0x7


@pytest.fixture(params=["h2c", "tls"])
def start_h2(request, start_gateway, tmp_path):
    """start_h2(config) -> (gateway, tls): the config's listener serves h2c, or TLS with ALPN."""
    tls = request.param == "tls"

    def start(config):
        if tls:
            cert, key = make_cert(tmp_path)
            config["listen"][0]["tls"] = {"certificate": str(cert), "key": str(key)}
        return start_gateway(config), tls

    return start


def status_of(gw, tls, path="/api/other", timeout=10):
    """The status another client gets on a new connection (HTTP/1.1, or h2 over TLS)."""
    if tls:
        c = RawH2(gw.port, tls=True, timeout=timeout)
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, c.request_block(path.encode())))
        res = c.response(1, timeout)
        c.close()
        return res.status
    return request(gw.port, "GET", path, timeout=timeout)[0]


def served(gw, tls, path="/api/other"):
    """Another client's request on a new connection gets 200."""
    return status_of(gw, tls, path) == 200


def one_request(gw, tls, block, body=None):
    """One request on a new connection: its H2Result."""
    c = RawH2(gw.port, tls=tls)
    c.send(frame(HEADERS, END_HEADERS | (0 if body is not None else END_STREAM), 1, block))
    if body is not None:
        c.send(frame(DATA, END_STREAM, 1, body))
    res = c.response(1)
    c.close()
    return res


def test_continuation_frames_up_to_the_bound_make_a_request(start_h2, backend):
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    c = RawH2(gw.port, tls=tls)
    block = c.request_block(b"/api/cont")
    frames = frame(HEADERS, END_STREAM, 1, block[:2])
    frames += frame(CONTINUATION, 0, 1) * (MAX_CONTINUATION_FRAMES - 1)
    frames += frame(CONTINUATION, END_HEADERS, 1, block[2:])
    assert c.send(frames)

    f = c.until(lambda f: f[0] == HEADERS and f[2] == 1, 10)
    assert f is not None and f[3][:1] == b"\x88", f  # :status 200
    assert backend.wait_for("/api/cont")


@pytest.mark.parametrize("payload", [b"", b"\x00"], ids=["empty", "one-byte"])
def test_continuation_flood_is_closed_at_the_bound(start_h2, backend, payload):
    """HEADERS without END_HEADERS, then CONTINUATION frames that never end the block: empty ones
    (the byte limit never grows) or one-byte ones (it takes ~400,000 to reach it). One frame past
    the bound is a GOAWAY ENHANCE_YOUR_CALM and the end of the connection; nothing reaches the
    backend and other clients are served."""
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    c = RawH2(gw.port, tls=tls)
    block = c.request_block(b"/api/flood")
    assert c.send(frame(HEADERS, END_STREAM, 1, block) + frame(CONTINUATION, 0, 1, payload) * (MAX_CONTINUATION_FRAMES + 1))

    assert c.goaway(5) == ENHANCE_YOUR_CALM
    assert c.ends(5)
    # whatever the client sends after it goes nowhere
    for _ in range(100):
        if not c.send(frame(CONTINUATION, 0, 1, payload) * 1000):
            break
    c.close()
    assert served(gw, tls)
    assert backend.received("/api/flood") == []


def send_block(c, stream, block, flags=END_STREAM, size=16384):
    """A header block as HEADERS then CONTINUATION frames of `size` bytes at most."""
    parts = [block[i:i + size] for i in range(0, len(block), size)] or [b""]
    data = b"".join(frame(CONTINUATION if i else HEADERS, (END_HEADERS if i == len(parts) - 1 else 0) | (flags if i == 0 else 0),
                          stream, p) for i, p in enumerate(parts))
    return c.send(data)


def bomb_block(c, path, entry=4000, size=400_000):
    """A request whose header block is one 4 KB literal added to the HPACK table, then one-byte
    references to it up to `size` bytes: ~100 fields of 4 KB per KiB sent (1.6 GB decoded)."""
    head = c.request_block(path) + c.encoder.encode([(b"x-bomb", b"a" * entry)], huffman=False)
    # the literal went in at dynamic index 62 (0xbe): the encoder's own entries come after it
    return head + b"\xbe" * (size - len(head))


def peak_rss_kib(gw):
    with open(f"/proc/{gw.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def test_hpack_bomb_costs_bounded_memory(start_h2, backend):
    """8 connections at once, each one header block of 400 KB of references to a 4 KB table
    entry: each is closed with GOAWAY ENHANCE_YOUR_CALM once its decoded list passes the bound,
    the gateway's peak RSS grows by a few MiB (h2o 2.2.5: 280-380 MiB), nothing reaches the
    backend, and other clients are served."""
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    assert served(gw, tls)
    before = peak_rss_kib(gw)
    results = [None] * 8

    def bomb(i):
        c = RawH2(gw.port, tls=tls, timeout=20)
        # a fresh encoder per connection: the entry lands at index 62 of this connection's table
        send_block(c, 1, bomb_block(c, b"/api/bomb"))
        try:
            results[i] = c.goaway(20)
        except TimeoutError:
            results[i] = "open"
        c.close()

    threads = [threading.Thread(target=bomb, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    grown_mib = (peak_rss_kib(gw) - before) / 1024
    # AddressSanitizer's redzones and quarantine (freed memory kept for a while) cost more
    with open(f"/proc/{gw.pid}/maps") as f:
        limit = 64 if "libasan" in f.read() else 24
    assert grown_mib < limit, f"peak RSS grew by {grown_mib:.0f} MiB"
    assert results == [ENHANCE_YOUR_CALM] * 8
    assert served(gw, tls)
    assert backend.received("/api/bomb") == []


def test_header_lists_held_by_one_connection_are_bounded(start_h2, backend):
    """Streams whose responses cannot be sent (the client's flow-control window is 0) keep their
    header lists: three lists of ~400 KB each pass the connection's 1 MiB, and the third header
    block ends the connection (GOAWAY ENHANCE_YOUR_CALM). Two pass: each alone is below the
    per-block bound."""
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    c = RawH2(gw.port, tls=tls, initial_window_size=0)
    value = b"v" * 8000
    fields = [(f"x-h{i}".encode(), value) for i in range((MAX_HEADER_LIST - 2000) // (8000 + 36))]
    for stream in (1, 3):
        assert send_block(c, stream, c.request_block(b"/api/big", extra=fields)) or c.closed
        # matchgate answers 431 (limits.max_header_size); the body waits for a window
        f = c.until(lambda f: f[0] == HEADERS and f[2] == stream, 10)
        assert f is not None, "the connection ended before the third header block"
    send_block(c, 5, c.request_block(b"/api/big", extra=fields))
    assert c.goaway(10) == ENHANCE_YOUR_CALM
    c.close()
    assert served(gw, tls)


BAD_METHODS = [b"GET /admin?", b"GET /admin? /g/52 HTTP/1.1\r\nx:", b"", b"GET\t", b"G(T)", b"GET,POST", b"G\xc3\xa9T",
               b"GE\"T", b"GET/"]


@pytest.mark.parametrize("method", BAD_METHODS, ids=range(len(BAD_METHODS)))
def test_a_method_that_is_not_a_token_is_refused(start_h2, backend, method):
    """:method must be a token (RFC 9110 9.1): 'GET /admin?' reached the backend as the request
    line 'GET /admin? /g/52 HTTP/1.1'. 400 bad-request, nothing reaches the backend, the
    connection stays usable."""
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    enc = hpack.Encoder()
    block = enc.encode([(b":method", method), (b":scheme", b"http"), (b":authority", b"t"), (b":path", b"/api/m")],
                       huffman=False)

    res = one_request(gw, tls, block)

    assert res.status == 400, res
    assert res.get("x-matchgate-error") == "bad-request"
    assert backend.received() == []
    assert served(gw, tls)


BAD_TARGETS = [b"/api/a b", b"/api/m?x=1 2", b"/api/x\tz", b"/api/m HTTP/1.1\r\nX-Injected: 1\r\n\r\nGET /admin",
               b"/api/\x7f", b"/api/\x01"]


@pytest.mark.parametrize("path", BAD_TARGETS, ids=range(len(BAD_TARGETS)))
def test_a_path_with_white_space_or_a_control_character_is_refused(start_h2, backend, path):
    """h2o does not check :path, and the builtin client writes the target into the backend's
    request line as it came: '/api/a b' reached a backend as 'GET /api/a b HTTP/1.1'. 400
    bad-request, nothing reaches the backend, the connection stays usable."""
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    enc = hpack.Encoder()
    block = enc.encode([(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"t"), (b":path", path)], huffman=False)

    res = one_request(gw, tls, block)

    assert res.status == 400, res
    assert res.get("x-matchgate-error") == "bad-request"
    assert backend.received() == []
    assert served(gw, tls)


def test_a_token_method_is_forwarded_as_sent(start_h2, backend):
    setattr(backend.RequestHandlerClass, "do_M-SEARCH", backend.RequestHandlerClass._handle)  # any token goes
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    c = RawH2(gw.port, tls=tls)
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, c.request_block(b"/api/m", method=b"M-SEARCH")))
    assert c.response(1).status == 200
    assert backend.wait_for("/api/m").method == "M-SEARCH"


CONNECTION_SPECIFIC = [[(b"keep-alive", b"timeout=5")], [(b"proxy-connection", b"keep-alive")],
                       [(b"content-length", b"3"), (b"content-length", b"4")]]


@pytest.mark.parametrize("fields", CONNECTION_SPECIFIC, ids=["keep-alive", "proxy-connection", "content-length-differs"])
def test_connection_specific_fields_are_refused(start_h2, backend, fields):
    """RFC 9113 8.2.2 and 8.1.1: keep-alive and proxy-connection make a request malformed, and so
    do two content-length values that differ (the body's length is unknown). 400 on the stream
    (h2o patch 0003), nothing reaches the backend, the connection goes on serving."""
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    c = RawH2(gw.port, tls=tls)
    c.send(frame(HEADERS, END_HEADERS, 1, c.request_block(b"/api/cs", method=b"POST", extra=fields)) +
           frame(DATA, END_STREAM, 1, b"abc"))
    res = c.response(1)
    assert res.status == 400, res
    assert res.get("x-matchgate-error") == "bad-request"
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, c.request_block(b"/api/after")))
    assert c.response(3).status == 200
    c.close()
    assert [r.path for r in backend.received()] == ["/api/after"]


def test_one_content_length_repeated_is_accepted(start_h2, backend):
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    fields = [(b"content-length", b"3"), (b"content-length", b"3")]
    c = RawH2(gw.port, tls=tls)
    c.send(frame(HEADERS, END_HEADERS, 1, c.request_block(b"/api/cl", method=b"POST", extra=fields)) +
           frame(DATA, END_STREAM, 1, b"abc"))
    assert c.response(1).status == 200
    assert backend.wait_for("/api/cl").body == b"abc"


def late_reset_flood(c, rounds, per_round, gap_s=0.005):
    """Rounds of `per_round` HEADERS, then their RST_STREAM (CANCEL) `gap_s` later: the requests
    reach the gateway, which starts them, and the client never reads an answer. Returns the
    streams sent before the connection was seen closed."""
    stream, sent = 1, 0
    for _ in range(rounds):
        ids = list(range(stream, stream + 2 * per_round, 2))
        stream += 2 * per_round
        if not c.send(b"".join(frame(HEADERS, END_HEADERS | END_STREAM, i, c.request_block(b"/api/r/slow?ms=300"))
                              for i in ids)):
            break
        time.sleep(gap_s)
        if not c.send(b"".join(frame(RST_STREAM, 0, i, CANCEL.to_bytes(4, "big")) for i in ids)):
            break
        sent += per_round
    return sent


def test_late_reset_flood_is_cut_by_the_reset_budget(start_h2, backend):
    """200 rounds of 20 HEADERS and their RST_STREAM 5 ms later (Rapid Reset with a late reset;
    nginx: ~1,000 requests then GOAWAY; h2o 2.2.5: thousands). The connection gets GOAWAY
    ENHANCE_YOUR_CALM once it has cancelled RESET_BUDGET streams the gateway was serving, and
    the backend sees at most the budget, plus the streams served at once
    (limits.max_http2_streams), plus the budget's refills while the flood lasted."""
    streams = 20
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API],
                            limits={"max_http2_streams": streams})
    gw, tls = start_h2(config)
    c = RawH2(gw.port, tls=tls, timeout=10)
    start = time.monotonic()
    late_reset_flood(c, 200, streams)
    took = time.monotonic() - start  # the refills of the budget while the flood lasted
    try:
        code = c.goaway(10)
    except TimeoutError:
        code = "open"
    c.close()
    time.sleep(0.5)  # what the gateway started reaches the backend

    bound = RESET_BUDGET + streams + int(took / RESET_REFILL_S) + 1
    assert len(backend.received()) <= bound, f"{len(backend.received())} backend requests, bound {bound}"
    assert code == ENHANCE_YOUR_CALM
    assert served(gw, tls)


def test_late_reset_flood_against_a_fast_backend_is_cut(start_h2, backend):
    """The issue's flood: 200 rounds of 100 HEADERS, then their 100 RST_STREAM 5 ms later, against a
    backend that answers at once: most streams are answered before their reset comes. Every
    RST_STREAM spends the reset budget (deps/h2o patch 0010), so the connection gets GOAWAY
    ENHANCE_YOUR_CALM and is closed, and the backend sees at most max_requests_per_connection
    requests from it (before patch 0010: about 11,800 in 0.75 s)."""
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    c = RawH2(gw.port, tls=tls, timeout=10)
    stream = 1
    for _ in range(200):
        ids = list(range(stream, stream + 200, 2))
        stream += 200
        if not c.send(b"".join(frame(HEADERS, END_HEADERS | END_STREAM, i, c.request_block(b"/api/fast")) for i in ids)):
            break
        time.sleep(0.005)
        if not c.send(b"".join(frame(RST_STREAM, 0, i, CANCEL.to_bytes(4, "big")) for i in ids)):
            break
    try:
        code = c.goaway(10)
    except TimeoutError:
        code = "open"
    closed = c.ends(10)
    c.close()
    time.sleep(0.5)  # what the gateway started reaches the backend
    assert code == ENHANCE_YOUR_CALM
    assert closed
    assert len(backend.received()) <= MAX_REQUESTS_PER_CONNECTION
    assert served(gw, tls)


def test_an_http2_connection_ends_after_max_requests_per_connection(start_h2, backend):
    """limits.max_requests_per_connection: 5 (deps/h2o patch 0011). One at a time, five requests
    are answered, the fifth with a graceful GOAWAY (NO_ERROR) naming its stream; a sixth sent
    after it is not processed, and the connection closes. Sent at once, eight streams get five
    answers: the waiting ones are refused (REFUSED_STREAM), never sent to the backend."""
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API],
                                      limits={"max_requests_per_connection": 5, "max_http2_streams": 2}))
    c = RawH2(gw.port, tls=tls)
    for i in range(1, 8, 2):
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, i, c.request_block(f"/api/one/{i}".encode())))
        res = c.response(i)
        assert res.status == 200, (i, res)
    # the fifth: the GOAWAY goes out as it starts, its answer follows
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 9, c.request_block(b"/api/one/9")))
    goaway = c.until(lambda f: f[0] == GOAWAY, 5)
    assert goaway is not None and int.from_bytes(goaway[3][4:8], "big") == 0  # NO_ERROR
    assert int.from_bytes(goaway[3][:4], "big") & 0x7FFFFFFF == 9  # the last stream processed
    assert c.until(lambda f: f[2] == 9 and f[1] & END_STREAM, 5) is not None  # the fifth is answered whole
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 11, c.request_block(b"/api/one/11")))
    assert c.ends(5)
    c.close()
    assert len(backend.received()) == 5

    c = RawH2(gw.port, tls=tls)
    c.send(b"".join(frame(HEADERS, END_HEADERS | END_STREAM, i, c.request_block(f"/api/many/{i}".encode()))
                    for i in range(1, 17, 2)))
    outcomes = {}  # stream -> 200, a reset code
    try:
        while len(outcomes) < 8:
            f = c.read_frame(5)
            if f is None:
                break
            if f[0] == RST_STREAM:
                outcomes[f[2]] = int.from_bytes(f[3][:4], "big")
            elif f[0] in (HEADERS, DATA) and f[1] & END_STREAM:
                outcomes[f[2]] = 200  # GET /api/... of the recording backend: 200 with a body
    except TimeoutError:
        pass
    c.close()
    outcomes = list(outcomes.values())
    assert outcomes.count(200) == 5, outcomes
    assert set(outcomes) - {200} <= {REFUSED_STREAM, "gone"}, outcomes
    assert len([r for r in backend.received() if r.path.startswith("/api/many/")]) == 5


def test_an_http1_connection_ends_with_its_1000th_request(start_gateway, backend):
    """max_requests_per_connection's default (1000, nginx's keepalive_requests): a keep-alive
    HTTP/1.1 client gets `Connection: close` on its 1000th response, and the connection ends. (The
    gateway answers itself: a Python backend's two writes per response would cost 40 ms each of
    Nagle and delayed ACK.)"""
    respond = {"name": "api", "match": {"path": {"prefix": "/api"}}, "respond": {"status": 200, "body": "ok\n"}}
    gw = start_gateway(gateway_config(free_port(), routes=[respond]))
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        reader = s.makefile("rb")
        for n in range(1, MAX_REQUESTS_PER_CONNECTION + 1):
            s.sendall(b"GET /api/k HTTP/1.1\r\nHost: t\r\n\r\n")
            status = reader.readline()
            assert status.startswith(b"HTTP/1.1 200"), (n, status)
            headers = {}
            for line in iter(reader.readline, b"\r\n"):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            reader.read(int(headers.get("content-length", "0")))
            assert headers.get("connection", "keep-alive").lower() == ("close" if n == MAX_REQUESTS_PER_CONNECTION else "keep-alive"), n
        assert reader.read(1) == b""  # the gateway closed it
    assert served(gw, False)


def test_cancelling_within_the_budget_keeps_the_connection(start_h2, backend):
    """A client that cancels streams now and then (a browser leaving a page) is not cut: 50
    requests cancelled while served, then the connection still answers."""
    gw, tls = start_h2(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    c = RawH2(gw.port, tls=tls)
    assert late_reset_flood(c, 5, 10, gap_s=0.05) == 50
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 101, c.request_block(b"/api/after")))
    res = c.response(101)
    assert res.status == 200, res
    c.close()


def stall_config(backend, admin_port=None):
    config = gateway_config(free_port(), routes=[API], limits={"client_idle_timeout": "1s"},
                            backends={"b": {"servers": [backend.url], "max_in_flight": 4, "queue_timeout": "8s",
                                            "timeout": "30s"}})
    config["admin"] = {"address": f"127.0.0.1:{free_port()}"}
    return config


def in_flight(gw):
    return gw.metrics()['matchgate_backend_in_flight{backend="b"}']


@pytest.mark.parametrize("trickle", [False, True], ids=["zero-window", "trickle"])
def test_stalled_streams_end_and_release_their_backend_slots(start_h2, backend, trickle):
    """2 connections x 2 streams of an 8 MiB response, the client's window 0 and never opened
    (or opened by 1 KiB every 0.2 s: a send of the gateway's is never taken whole): they hold
    all 4 max_in_flight slots. Each stalled connection is cut within client_idle_timeout (1s) and
    its slots are released; another client, queued behind them, gets 200 long before its
    queue_timeout (h2o 2.2.5: the streams stay forever, everyone else gets 503 queue-timeout)."""
    gw, tls = start_h2(stall_config(backend))
    conns = []
    for _ in range(2):
        c = RawH2(gw.port, tls=tls, timeout=15, initial_window_size=0)
        for stream in (1, 3):
            c.send(frame(HEADERS, END_HEADERS | END_STREAM, stream, c.request_block(b"/api/s/bytes?n=8388608")))
        conns.append(c)
    assert wait_until(lambda: in_flight(gw) == 4, 5), "the stalled streams hold the slots"
    started = time.monotonic()
    other = []
    t = threading.Thread(target=lambda: other.append(status_of(gw, tls, timeout=15)))
    t.start()

    def trickle_until_closed(c):
        while not c.closed and time.monotonic() - started < 10:
            if trickle:
                c.send(frame(WINDOW_UPDATE, 0, 1, (1024).to_bytes(4, "big")))
            try:
                c.until(lambda f: False, 0.2)
            except TimeoutError:
                pass
        return time.monotonic() - started

    ended = [trickle_until_closed(c) for c in conns]
    t.join(15)
    for c in conns:
        c.close()

    assert all(c.closed for c in conns), "a stalled connection is still open"
    assert max(ended) < 1 + 2.5, f"stalled connections ended after {ended} s (client_idle_timeout 1s)"
    assert other == [200]
    assert wait_until(lambda: in_flight(gw) == 0, 5)
    assert served(gw, tls)


def test_a_slow_reader_that_takes_every_send_is_not_cut(start_h2, backend):
    """A client that reads slowly but takes each of the gateway's sends within client_idle_timeout
    gets the whole response: only a stall is cut."""
    gw, tls = start_h2(stall_config(backend))
    c = RawH2(gw.port, tls=tls, timeout=15)
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, c.request_block(b"/api/s/bytes?n=2097152")))
    res = c.response(1, timeout=20)
    assert res.status == 200 and len(res.body) == 2097152, res


@pytest.mark.parametrize("limits,bound", [({"client_idle_timeout": "1s"}, 1.0), ({"tls_handshake_timeout": "500ms"}, 0.5)],
                         ids=["client_idle_timeout", "tls_handshake_timeout"])
@pytest.mark.parametrize("sent", [b"", b"\x16\x03\x01\x02\x00\x01"], ids=["nothing", "part-of-a-hello"])
def test_a_tls_handshake_that_never_ends_is_cut(start_gateway, backend, tmp_path, limits, bound, sent):
    """The TLS handshake is bounded by limits.tls_handshake_timeout, or else by the smaller of 10 s
    and client_idle_timeout (h2o 2.2.5: 10 s whatever the configuration said)."""
    cert, key = make_cert(tmp_path)
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API], limits=limits)
    config["listen"][0]["tls"] = {"certificate": str(cert), "key": str(key)}
    gw = start_gateway(config)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(sent)
        started = time.monotonic()
        s.settimeout(bound + 3)
        try:
            data = s.recv(4096)
        except (socket.timeout, TimeoutError):
            data = None
        except ConnectionResetError:
            data = b""
        took = time.monotonic() - started
    assert data == b"", f"still open after {took:.1f}s"
    assert took < bound + 1.5
