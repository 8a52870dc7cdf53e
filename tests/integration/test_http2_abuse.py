"""Hostile HTTP/2 clients (issue 21), each over h2c with prior knowledge and over TLS with ALPN h2:
the gateway bounds what one connection can cost and closes it past the bound, and the other
clients keep being served. Frames are built by hand (h2client.RawH2)."""

import pytest

from h2client import CONTINUATION, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM, HEADERS, RawH2, frame
from support import free_port, gateway_config, request
from test_http2_tls import make_cert

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}
MAX_CONTINUATION_FRAMES = 32  # deps/h2o/patches/0001-http2-bound-continuation-frames.patch


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


def served(gw, tls, path="/api/other"):
    """Another client's request on a new connection gets 200 (HTTP/1.1, or h2 over TLS)."""
    if tls:
        c = RawH2(gw.port, tls=True)
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, c.request_block(path.encode())))
        f = c.until(lambda f: f[0] == HEADERS and f[2] == 1, 10)
        c.close()
        return f is not None and f[3][:1] == b"\x88"  # :status 200, indexed
    return request(gw.port, "GET", path)[0] == 200


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
