"""Compression of backend answers (issue 29), against the real binary and a scripted backend:
gzip and br bodies decoded here equal the backend's bytes, for fixed-length, chunked and
event-stream answers over HTTP/1.1 and HTTP/2 (each event decodable before the backend sends the
next); every case that must go uncompressed does; Vary, the weak ETag, the memory budget, the
metrics, and a slow reader of a compressed 64 MiB stream with the gateway's memory bounded."""

import base64
import gzip
import os
import random
import socket
import threading
import time
import urllib.parse
import zlib

import brotli
import pytest

import h2client
from rawhttp import RawClient, Stream, read_chunked, serve_keepalive
from support import free_port, gateway_config, read_slowly, request, wait_until

MiB = 1 << 20
TYPES = ["application/json", "text/plain", "text/event-stream"]
COMPRESS = {"types": TYPES, "min_size": "1KiB", "gzip": {"level": 5}, "brotli": {"quality": 4}}
GATES = {}  # id -> [threading.Event]: a gated answer sends its piece i once GATES[id][i] is set


def body_of(n, seed=1):
    """n bytes of JSON-like text, the same for the same n and seed."""
    rnd = random.Random(seed)
    parts, size = [], 0
    while size < n:
        item = '{"id":%d,"name":"user%d","score":%.3f,"tags":["%s"]},' % (
            rnd.randrange(10**6), rnd.randrange(1000), rnd.random(), rnd.choice(["a", "bb", "ccc"]))
        parts.append(item)
        size += len(item)
    return "".join(parts).encode()[:n]


def decode(coding, data):
    if coding == "gzip":
        return gzip.decompress(data)
    assert coding == "br", coding
    return brotli.decompress(data)


def decoder(coding):
    """An incremental decoder: feed(bytes) -> the bytes decoded so far from them."""
    if coding == "gzip":
        return zlib.decompressobj(16 + 15).decompress
    return brotli.Decompressor().process


# --------------------------------------------------------------------------------------
# The backend: what it answers is said by the path and the query


def head(status, fields, length=None, body=True):
    """A response head: with Content-Length `length`, chunked when None, neither without a body."""
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in fields]
    if body:
        lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def gated(gate_id, pieces, fields):
    gates = GATES[gate_id]

    def parts():
        yield head(200, fields)
        for i, piece in enumerate(pieces):
            if not gates[i].wait(10):
                yield None  # the test gave up: close
                return
            yield chunk(piece)
        yield b"0\r\n\r\n"

    return parts


def random_text(n):
    """n bytes of base64 of random bytes, in pieces (a stream that compresses to 3/4 of itself)."""
    def parts():
        yield head(200, [("Content-Type", "text/plain")])
        sent = 0
        while sent < n:
            piece = base64.b64encode(os.urandom(192 * 1024))[:n - sent]
            sent += len(piece)
            yield chunk(piece)
        yield b"0\r\n\r\n"

    return parts


def answer(req):
    url = urllib.parse.urlsplit(req.target)
    q = urllib.parse.parse_qs(url.query)
    n = int(q.get("n", ["20000"])[0])
    fields = [("Content-Type", q.get("type", ["application/json"])[0])]
    fields += [tuple(h.split(":", 1)) for h in q.get("h", [])]
    status = int(q.get("status", ["200"])[0])
    if url.path.endswith("/gated"):
        return gated(q["id"][0], [p.encode() for p in q["piece"]], fields)
    if url.path.endswith("/random"):
        return random_text(n)
    body = body_of(n)
    if url.path.endswith("/encoded"):
        body = gzip.compress(body)
        fields.append(("Content-Encoding", "gzip"))
    if status in (204, 304):
        return head(status, fields, body=False)
    if status == 206:
        fields.append(("Content-Range", f"bytes 0-{n - 1}/{n * 2}"))
    if req.method == "HEAD":
        return head(status, fields, n)
    if url.path.endswith("/chunked"):
        return head(status, fields) + b"".join(chunk(body[i:i + 7000]) for i in range(0, n, 7000)) + b"0\r\n\r\n"
    return head(status, fields, len(body)) + body


@pytest.fixture
def gw(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(answer))
    routes = [
        {"name": "made", "match": {"path": "/made"},
         "respond": {"status": 200, "body": body_of(5000).decode(), "headers": {"Content-Type": "application/json"}}},
        {"name": "down", "match": {"path": {"prefix": "/down"}}, "forward": "nobody"},
        {"name": "api", "match": {"path": {"prefix": "/api"}}, "compress": {"gzip": {"level": 6}}, "routes": [
            {"name": "quiet", "match": {"path": {"prefix": "/api/quiet"}}, "compress": "off", "forward": "b"},
            {"name": "rest", "forward": "b"},
        ]},
    ]
    backends = {"b": {"servers": [be.url], "timeout": "60s"}, "nobody": [f"http://127.0.0.1:{free_port()}"]}
    config = gateway_config(free_port(), backends=backends, routes=routes, compress=COMPRESS,
                            admin={"address": f"127.0.0.1:{free_port()}"})
    return start_gateway(config)


def get(gw, path, accept="gzip", method="GET", extra=None):
    headers = {"Accept-Encoding": accept} if accept is not None else {}
    headers.update(extra or {})
    return request(gw.port, method, path, headers)


def tokens(value):
    return [t.strip().lower() for t in (value or "").split(",") if t.strip()]


# --------------------------------------------------------------------------------------
# Compressed answers


@pytest.mark.parametrize("coding", ["gzip", "br"])
@pytest.mark.parametrize("shape", ["fixed", "chunked"])
def test_http1_answers_decode_to_the_backend_bytes(gw, coding, shape):
    for n in (1024, 30000, 300000):
        status, headers, body = get(gw, f"/api/{shape}?n={n}", accept=coding)
        assert status == 200
        assert headers["Content-Encoding"] == coding
        assert headers["Content-Length"] is None, "the backend's length is not that of the compressed body"
        assert "accept-encoding" in tokens(headers["Vary"])
        assert decode(coding, body) == body_of(n)
        assert len(body) < n / 2, f"{n} bytes of JSON became {len(body)}"


@pytest.mark.parametrize("coding", ["gzip", "br"])
@pytest.mark.parametrize("shape", ["fixed", "chunked"])
def test_http2_answers_decode_to_the_backend_bytes(gw, coding, shape):
    for n in (2000, 250000):
        res = h2client.get(gw.port, f"/api/{shape}?n={n}".encode(), extra=[(b"accept-encoding", coding.encode())])
        assert res.status == 200, res
        assert res.get("content-encoding") == coding
        assert res.get("content-length") is None
        assert "accept-encoding" in tokens(res.get("vary"))
        assert decode(coding, res.body) == body_of(n)


def test_the_client_preference_decides_the_coding(gw):
    cases = [("br;q=1, gzip;q=0.8", "br"), ("br;q=0.5, gzip", "gzip"), ("gzip, br", "br"), ("*", "br"),
             ("br;q=0, *", "gzip"), ("x-gzip", "gzip")]
    for accept, coding in cases:
        _, headers, body = get(gw, "/api/fixed?n=5000", accept=accept)
        assert headers["Content-Encoding"] == coding, accept
        assert decode(coding, body) == body_of(5000)


def gate(pieces):
    gate_id = f"g{random.randrange(10**9)}"
    GATES[gate_id] = [threading.Event() for _ in pieces]
    query = urllib.parse.urlencode([("id", gate_id), ("type", "text/event-stream")] + [("piece", p) for p in pieces])
    return GATES[gate_id], query


EVENTS = [f"id: {i}\ndata: {{\"n\": {i}, \"text\": \"{'event ' * (i + 1)}\"}}\n\n" for i in range(4)]


def read_events_http1(gw, coding, gates, query):
    """Each event decoded from what came before the backend was let to send the next one."""
    with RawClient(gw.port, timeout=10) as c:
        c.send(f"GET /api/gated?{query} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: {coding}\r\n\r\n".encode())
        feed = decoder(coding)
        gates[0].set()
        fields = c.stream.read_until(b"\r\n\r\n").decode().lower()
        assert f"content-encoding: {coding}" in fields and "transfer-encoding: chunked" in fields, fields
        for i, event in enumerate(EVENTS):
            got = b""
            deadline = time.monotonic() + 10
            while got != event.encode():
                assert time.monotonic() < deadline, f"event {i}: only {got!r} decoded"
                size = int(c.stream.read_until(b"\r\n").split(b";")[0], 16)
                assert size > 0, f"the answer ended before event {i}"
                got += feed(c.stream.read_exact(size))
                assert c.stream.read_exact(2) == b"\r\n"
                assert event.encode().startswith(got), got
            if i + 1 < len(gates):
                gates[i + 1].set()
        tail = read_chunked(c.stream, 10)
        assert feed(tail) == b""


def read_events_http2(gw, coding, gates, query):
    conn = h2client.RawH2(gw.port, timeout=10)
    try:
        conn.send(h2client.frame(h2client.SETTINGS, h2client.ACK, 0))
        block = conn.request_block(f"/api/gated?{query}".encode(), extra=[(b"accept-encoding", coding.encode())])
        conn.send(h2client.frame(h2client.HEADERS, h2client.END_HEADERS | h2client.END_STREAM, 1, block))
        feed, fields, ended = decoder(coding), None, False
        gates[0].set()
        for i, event in enumerate(EVENTS):
            got = b""
            while got != event.encode():
                f = conn.read_frame(10)
                assert f is not None, f"the connection ended before event {i}"
                ftype, flags, sid, payload = f
                if ftype == h2client.HEADERS and sid == 1:
                    block = h2client._headers_payload(flags, payload)
                    fields = dict((k.decode().lower(), v.decode()) for k, v in conn.decoder.decode(block, raw=True))
                    assert fields.get("content-encoding") == coding, fields
                elif ftype == h2client.DATA and sid == 1:
                    got += feed(payload)
                    if payload:
                        n = len(payload).to_bytes(4, "big")
                        conn.send(h2client.frame(h2client.WINDOW_UPDATE, 0, 0, n) + h2client.frame(h2client.WINDOW_UPDATE, 0, 1, n))
                    ended = bool(flags & h2client.END_STREAM)
                    assert event.encode().startswith(got), got
                    assert not ended or i == len(EVENTS) - 1, f"the stream ended at event {i}"
            if i + 1 < len(gates):
                gates[i + 1].set()
        assert fields is not None
    finally:
        conn.close()


@pytest.mark.parametrize("coding", ["gzip", "br"])
@pytest.mark.parametrize("version", ["1.1", "2"])
def test_each_event_of_a_stream_decodes_before_the_next_is_sent(gw, coding, version):
    gates, query = gate(EVENTS)
    (read_events_http1 if version == "1.1" else read_events_http2)(gw, coding, gates, query)


# --------------------------------------------------------------------------------------
# What goes as it is


def expect_plain(gw, path, accept="gzip", method="GET", n=20000):
    """The answer as the backend sent it: no coding of the gateway's, the same bytes and length."""
    status, headers, body = get(gw, path, accept=accept, method=method)
    assert headers["Content-Encoding"] is None, (path, accept, dict(headers))
    if method != "HEAD" and status not in (204, 304):
        assert body == body_of(n), (path, accept)
        assert headers["Content-Length"] == str(n)
    return status, headers, body


def test_no_compression_where_it_does_not_belong(gw):
    # an answer encoded already: passed on as it is, never twice
    _, headers, body = get(gw, "/api/encoded?n=20000", accept="gzip, br")
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == body_of(20000)
    assert headers["Content-Length"] == str(len(body))
    expect_plain(gw, "/api/fixed?h=Cache-Control:public,%20no-transform")
    status, headers, _ = expect_plain(gw, "/api/fixed?status=206&n=20000")
    assert status == 206 and headers["Content-Range"] == "bytes 0-19999/40000"
    assert expect_plain(gw, "/api/fixed?status=204")[0] == 204
    assert expect_plain(gw, "/api/fixed?status=304")[0] == 304
    status, headers, body = expect_plain(gw, "/api/fixed?n=20000", method="HEAD")
    assert (status, body, headers["Content-Length"]) == (200, b"", "20000")
    expect_plain(gw, "/api/fixed?n=1023", n=1023)  # below min_size
    expect_plain(gw, "/api/fixed?type=image/png")
    expect_plain(gw, "/api/fixed?type=text/csv")
    for accept in ("identity;q=0", "gzip;q=0", "gzip;q=0, br;q=0", "deflate", None):
        expect_plain(gw, "/api/fixed", accept=accept)
    expect_plain(gw, "/api/quiet/fixed")  # compress: off on the child route
    # gateway-made answers: respond:, and the 502 of a backend nobody listens on
    status, headers, body = get(gw, "/made")
    assert (status, headers["Content-Encoding"], body) == (200, None, body_of(5000))
    status, headers, _ = get(gw, "/down/x")
    assert (status, headers["Content-Encoding"]) == (502, None)


def test_an_http10_client_gets_the_answer_as_it_is(gw):
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(b"GET /api/fixed?n=5000 HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n")
        data = Stream(s, 10).read_to_eof()
    fields, _, body = data.partition(b"\r\n\r\n")
    fields = fields.decode().lower()
    assert fields.startswith("http/1.1 200") and "content-encoding" not in fields, fields
    assert "vary: accept-encoding" in fields, "another client could get it compressed"
    assert body == body_of(5000)


def test_vary_is_merged_and_only_where_the_answer_depends_on_it(gw):
    _, headers, _ = get(gw, "/api/fixed?h=Vary:Origin")
    vary = headers.get_all("Vary")
    assert len(vary) == 1 and sorted(tokens(vary[0])) == ["accept-encoding", "origin"], vary
    _, headers, _ = get(gw, "/api/fixed?h=Vary:Accept-Encoding")
    assert tokens(headers["Vary"]) == ["accept-encoding"], "not named twice"
    _, headers, _ = get(gw, "/api/fixed?h=Vary:*")
    assert tokens(headers["Vary"]) == ["*"]
    # uncompressed for this client, compressed for another: a cache must tell them apart
    _, headers, _ = get(gw, "/api/fixed", accept=None)
    assert (headers["Content-Encoding"], tokens(headers["Vary"])) == (None, ["accept-encoding"])
    # never compressed whoever asks: no Vary
    for path in ("/api/fixed?type=image/png", "/api/fixed?n=100", "/api/quiet/fixed", "/api/fixed?status=304"):
        assert get(gw, path)[1]["Vary"] is None, path


def test_etags_become_weak_and_ranges_go(gw):
    _, headers, body = get(gw, '/api/fixed?h=ETag:"v1"&h=Accept-Ranges:bytes')
    assert headers["Content-Encoding"] == "gzip"
    assert headers["ETag"] == 'W/"v1"'
    assert headers["Accept-Ranges"] is None
    _, headers, _ = get(gw, '/api/fixed?h=ETag:W/"v2"', accept="br")
    assert headers["ETag"] == 'W/"v2"', "a weak one stays as it is"
    _, headers, _ = get(gw, '/api/fixed?h=ETag:"v1"&h=Accept-Ranges:bytes', accept=None)
    assert (headers["ETag"], headers["Accept-Ranges"]) == ('"v1"', "bytes"), "uncompressed answers keep both"


def test_metrics_count_answers_bytes_and_reasons(gw):
    sizes, sent = (3000, 40000, 200000), 0
    for n in sizes:
        _, headers, body = get(gw, f"/api/chunked?n={n}")
        assert headers["Content-Encoding"] == "gzip"
        sent += len(body)
    get(gw, "/api/fixed", accept="identity")
    get(gw, "/api/fixed?type=image/png")
    get(gw, "/api/fixed?n=10")
    m = gw.metrics()
    assert m['matchgate_compress_responses_total{coding="gzip"}'] == len(sizes)
    assert m['matchgate_compress_responses_total{coding="br"}'] == 0
    assert m['matchgate_compress_bytes_in_total{coding="gzip"}'] == sum(sizes)
    assert m['matchgate_compress_bytes_out_total{coding="gzip"}'] == sent
    assert m['matchgate_compress_skipped_total{reason="not_accepted"}'] == 1
    assert m['matchgate_compress_skipped_total{reason="type"}'] == 1
    assert m['matchgate_compress_skipped_total{reason="size"}'] == 1
    assert m['matchgate_compress_skipped_total{reason="memory"}'] == 0
    assert m["matchgate_compress_memory_bytes"] == 0, "every stream gave its memory back"
    assert m["matchgate_compress_memory_max_bytes"] == 64 * MiB


# --------------------------------------------------------------------------------------
# Memory


def test_a_slow_reader_of_a_compressed_stream_keeps_gateway_memory_bounded(gw):
    assert get(gw, "/api/fixed")[0] == 200
    baseline = gw.rss_kib()
    # about 3 s of reading at 0.8 MB/s while the backend could send 64 MiB at once: the compressed
    # stream must push back on the backend, not pile up
    request_bytes = f"GET /api/random?n={64 * MiB} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n".encode()
    read, peak, first = read_slowly(gw, request_bytes)
    assert b"content-encoding: gzip" in first.lower(), first[:400]
    assert read > 100 * 1024, "the answer did flow"
    growth_mib = (peak - baseline) / 1024
    assert growth_mib < 32, f"RSS grew by {growth_mib:.1f} MiB for a slow reader of a compressed stream"
    assert wait_until(lambda: gw.metrics()["matchgate_compress_memory_bytes"] == 0, 10), "the stream's memory came back"
    assert get(gw, "/api/fixed")[1]["Content-Encoding"] == "gzip"


def test_over_the_budget_answers_go_uncompressed_and_are_counted(start_gateway, raw_backend_factory):
    be = raw_backend_factory(serve_keepalive(answer))
    # one gzip stream of unknown length reserves 264 KiB: the budget holds one, not two
    compress = {"types": ["text/event-stream"], "brotli": "off", "max_memory": "400KiB"}
    config = gateway_config(free_port(), backends={"b": {"servers": [be.url], "timeout": "60s"}},
                            routes=[{"name": "api", "forward": "b"}], compress=compress,
                            admin={"address": f"127.0.0.1:{free_port()}"})
    gw = start_gateway(config)
    clients, all_gates = [], []
    try:
        for i in range(3):
            gates, query = gate(["data: first\n\n", "data: last\n\n"])
            gates[0].set()
            c = RawClient(gw.port, timeout=10)
            c.send(f"GET /s/gated?{query} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n".encode())
            fields = c.stream.read_until(b"\r\n\r\n").decode().lower()
            clients.append((c, "content-encoding: gzip" in fields))
            all_gates.append(gates)
        assert [compressed for _, compressed in clients] == [True, False, False]
        m = gw.metrics()
        assert m['matchgate_compress_skipped_total{reason="memory"}'] == 2
        assert 0 < m["matchgate_compress_memory_bytes"] <= 400 * 1024
        for (c, compressed), gates in zip(clients, all_gates):
            gates[1].set()
            body = read_chunked(c.stream, 10)
            assert (decode("gzip", body) if compressed else body) == b"data: first\n\ndata: last\n\n"
    finally:
        for c, _ in clients:
            c.close()
    m = gw.metrics()
    assert m['matchgate_compress_responses_total{coding="gzip"}'] == 1
    assert wait_until(lambda: gw.metrics()["matchgate_compress_memory_bytes"] == 0, 10)
    # with the budget free again, the next one is compressed
    gates, query = gate(["data: again\n\n"])
    gates[0].set()
    with RawClient(gw.port, timeout=10) as c:
        c.send(f"GET /s/gated?{query} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n".encode())
        assert "content-encoding: gzip" in c.stream.read_until(b"\r\n\r\n").decode().lower()
        assert decode("gzip", read_chunked(c.stream, 10)) == b"data: again\n\n"


def test_a_client_leaving_mid_stream_frees_its_encoder(gw):
    for coding, abort in (("gzip", False), ("br", True)):
        with RawClient(gw.port, timeout=10) as c:
            c.send(f"GET /api/random?n={64 * MiB} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: {coding}\r\n\r\n".encode())
            assert f"content-encoding: {coding}" in c.stream.read_until(b"\r\n\r\n").decode().lower()
            c.stream.read_exact(256 * 1024)
            assert gw.metrics()["matchgate_compress_memory_bytes"] > 0
            if abort:  # a reset instead of an orderly close
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        # gone half way through 64 MiB: the gateway drops the answer and the encoder's memory
        assert wait_until(lambda: gw.metrics()["matchgate_compress_memory_bytes"] == 0, 10), coding
    assert get(gw, "/api/fixed")[1]["Content-Encoding"] == "gzip"
