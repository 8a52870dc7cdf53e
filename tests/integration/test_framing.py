"""What a client request must be before anything of it is forwarded (issue 13, items 6 and 9):
RFC 9112 framing of HTTP/1 heads on raw sockets (Content-Length and Transfer-Encoding together,
differing lengths, two Hosts, codings other than one chunked, chunked in HTTP/1.0, folded lines:
400, the connection closed, nothing at the backend, and no request smuggled behind the body),
an authority that is a host[:port] over HTTP/1 and HTTP/2, and HTTP/2 header fields that h2o's
HPACK decoder lets through (python3-h2 client that sends fields unchecked)."""

import time

import pytest

import h2client
from rawhttp import RawClient, read_response
from support import free_port, gateway_config

SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.fixture
def gw(start_gateway, backend):
    port = free_port()
    g = start_gateway(gateway_config(port, {"b": [backend.url]}, [{"name": "all", "forward": "b"}]))
    g.backend = backend
    return g


def send_raw(port, data):
    """Sends `data` on a new connection; returns the first response and whether the gateway then
    closed the connection (without answering anything else)."""
    with RawClient(port) as c:
        c.send(data)
        resp = read_response(c.stream)
        try:
            rest, closed = c.stream.read_to_eof(timeout=3), True
        except ConnectionResetError:
            rest, closed = c.stream.buf, True
        except TimeoutError:
            rest, closed = c.stream.buf, False
        return resp, closed, rest


def assert_refused_and_closed(gw, data):
    resp, closed, rest = send_raw(gw.port, data)
    assert resp.status == 400, resp
    assert resp.get("x-matchgate-error") == "bad-request", resp
    assert resp.get("connection") == "close", resp
    assert closed, f"the connection stayed open after the 400 (then got {rest!r})"
    assert rest == b"", f"something was answered after the 400: {rest!r}"
    time.sleep(0.2)  # a request that slipped through would have reached the backend by now
    assert gw.backend.requests == [], gw.backend.requests
    return resp


# --------------------------------------------------------------------------------------
# HTTP/1 framing (RFC 9112 6.1, 6.3, 3.2, 5.2)


@pytest.mark.parametrize("head", [
    # both Content-Length and Transfer-Encoding, in either order, whatever the length says
    b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
    b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
    # Transfer-Encoding on HTTP/1.0
    b"POST /a HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
    # codings other than a single final chunked
    b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n",
], ids=["cl-then-te", "te-then-cl", "cl0-te", "te-http10", "gzip-then-chunked", "chunked-twice", "identity-chunked"])
def test_chunked_framing_conflicts_are_refused_and_close(gw, head):
    # a valid chunked body, then a request a front proxy framing by Content-Length would not see
    assert_refused_and_closed(gw, head + b"0\r\n\r\n" + SMUGGLED)


@pytest.mark.parametrize("te", [b"gzip, chunked", b"chunked, gzip", b"gzip", b"chunked;x=1"])
def test_transfer_codings_other_than_chunked_are_refused(gw, te):
    """h2o refuses these itself (its own 400, which closes too); the rule holds either way."""
    assert_refused_and_closed(gw, b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: " + te + b"\r\n\r\n0\r\n\r\n" +
                              SMUGGLED)


@pytest.mark.parametrize("lengths", [
    [b"5", b"6"],
    [b"6", b"5"],
    [b"5", b"5, 6"],
    [b"5", b"x"],
    [b"5, 6"],  # h2o's own 400
    [b"5", b"+5"],
], ids=["5-6", "6-5", "5-5,6", "5-x", "one-field", "5-+5"])
def test_differing_content_lengths_are_refused_and_close(gw, lengths):
    head = b"POST /a HTTP/1.1\r\nHost: t\r\n" + b"".join(b"Content-Length: " + v + b"\r\n" for v in lengths) + b"\r\n"
    assert_refused_and_closed(gw, head + b"hello" + b"!" + SMUGGLED)


@pytest.mark.parametrize("hosts", [[b"a", b"b"], [b"t", b"t"], [b"t", b""], [b"good.example", b"evil.example:80"]])
def test_more_than_one_host_is_refused_and_closes(gw, hosts):
    head = b"GET /a HTTP/1.1\r\n" + b"".join(b"Host: " + h + b"\r\n" for h in hosts) + b"\r\n"
    assert_refused_and_closed(gw, head + SMUGGLED)


@pytest.mark.parametrize("fold", [b"X-A: a\r\n :  Transfer-Encoding: chunked\r\n", b"X-A: a\r\n\tb\r\n",
                                  b"X-A: a\r\n X-B: b\r\n"])
def test_folded_header_lines_are_refused(gw, fold):
    """RFC 9112 5.2: a server rejects obs-fold or replaces it; h2o 2.2.5 made the continuation a
    header with an empty name."""
    assert_refused_and_closed(gw, b"GET /a HTTP/1.1\r\nHost: t\r\n" + fold + b"\r\n" + SMUGGLED)


def test_sound_framings_still_pass_and_keep_the_connection(gw):
    """The head is read again where h2o left it: pipelined requests, a chunked body, identical
    lengths (RFC 9110 8.6), Expect: 100-continue and HTTP/1.0 all keep working."""
    with RawClient(gw.port) as c:
        c.send(b"POST /one HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
               b"POST /two HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nde"
               b"GET /three HTTP/1.1\r\nHost: t\r\n\r\n")
        assert [read_response(c.stream).status for _ in range(3)] == [200, 200, 200]
        resp = c.request("POST", "/four", headers=[("Expect", "100-continue")], body=b"xyz")
        assert resp.status == 200
    resp, closed, _ = send_raw(gw.port, b"POST /five HTTP/1.0\r\nContent-Length: 1\r\n\r\nz")
    assert resp.status == 200 and closed
    got = {r.path: r.body for r in gw.backend.requests}
    assert got == {"/one": b"abc", "/two": b"de", "/three": b"", "/four": b"xyz", "/five": b"z"}, got


# --------------------------------------------------------------------------------------
# The authority: host[:port] of RFC 3986, over HTTP/1 and HTTP/2 (item 9c)

BAD_AUTHORITIES = [b"evil.com/x y", b"evil.com/x", b"a b", b"a\tb", b"user@host", b"a?b", b"a#b", b"a\\b",
                   b"host:port", b"host:99999", b"[::1", b"caf\xc3\xa9.example", b"a%zz", b":80"]
GOOD_AUTHORITIES = [b"ok.example", b"OK.Example:8080", b"127.0.0.1:80", b"[::1]:8080", b"a-b_c~d.example"]


def with_authority(port, proto, path, authority):
    """(status, X-Matchgate-Error) of a GET naming `authority` in Host (http1) or :authority (h2)."""
    if proto == "h2":
        res = h2client.get(port, path.encode(), authority=authority)
        return res.status, res.get("x-matchgate-error")
    with RawClient(port) as c:
        c.send(f"GET {path} HTTP/1.1\r\nHost: ".encode() + authority + b"\r\n\r\n")
        resp = read_response(c.stream)
        return resp.status, resp.get("x-matchgate-error")


@pytest.mark.parametrize("proto", ["http1", "h2"])
@pytest.mark.parametrize("authority", BAD_AUTHORITIES)
def test_an_authority_that_is_not_a_host_is_refused(gw, proto, authority):
    assert with_authority(gw.port, proto, "/a", authority) == (400, "bad-request")
    time.sleep(0.1)
    assert gw.backend.requests == []


@pytest.mark.parametrize("authority", GOOD_AUTHORITIES)
def test_valid_authorities_pass_unchanged(gw, authority):
    assert with_authority(gw.port, "h2", "/h2", authority) == (200, None)
    assert with_authority(gw.port, "http1", "/h1", authority) == (200, None)
    seen = {r.path: r.headers["host"] for r in gw.backend.requests}
    assert seen == {"/h2": authority.decode(), "/h1": authority.decode()}


# --------------------------------------------------------------------------------------
# HTTP/2 header fields (item 9): nothing malformed reaches the backend

BAD_H2_FIELDS = [
    (b"x-a", b"a\rb"), (b"x-a", b"a\nb"), (b"x-a", b"a\x00b"), (b"x-a", b"a\x0bb"), (b"x-a", b"\x1b[31m"),
    (b"x-a", b"a\x7f"),
    # RFC 9113 8.2.1: no leading or trailing white space
    (b"x-a", b" lead"), (b"x-a", b"trail\t"),
    # names: upper case, separators, non-ASCII, empty
    (b"X-Up", b"v"), (b"x a", b"v"), (b"x(a", b"v"), (b"x\x80a", b"v"), (b"", b"v"),
]


@pytest.mark.parametrize("huffman", [True, False], ids=["huffman", "plain"])
@pytest.mark.parametrize("field", BAD_H2_FIELDS)
def test_malformed_http2_fields_never_reach_the_backend(gw, field, huffman):
    res = h2client.get(gw.port, b"/bad", extra=[field], huffman=huffman)
    # a 400, or h2o resets the stream or ends the connection: never the backend's answer
    assert res.status in (400, None), res
    assert res.status is None or res.get("x-matchgate-error") == "bad-request", res
    time.sleep(0.1)
    assert gw.backend.requests == [], gw.backend.requests


BAD_H1_FIELDS = [
    b"x-a: a\rb", b"x-a: a\x00b", b"x-a: a\x0bb", b"x-a: \x1b[31m", b"x-a: a\x7f",
    b"x a: v", b"x(a: v", b"x\x80a: v", b"x@a: v", b"x\"a: v", b": v",
]


@pytest.mark.parametrize("field", BAD_H1_FIELDS)
def test_malformed_http1_fields_never_reach_the_backend(gw, field):
    """The gateway leaves these to h2o's HTTP/1 parser (picohttpparser checks a name's every byte
    against the same tchar table and a value for control characters): a 400, never the backend."""
    with RawClient(gw.port) as c:
        c.send(b"GET /bad HTTP/1.1\r\nHost: t\r\n" + field + b"\r\n\r\n")
        try:
            resp = read_response(c.stream)
        except (ConnectionResetError, EOFError):
            resp = None
    assert resp is None or resp.status == 400, resp
    time.sleep(0.1)
    assert gw.backend.requests == [], gw.backend.requests


def test_well_formed_http2_fields_pass(gw):
    res = h2client.get(gw.port, b"/good", extra=[(b"x-a", b"a\tb c"), (b"x-utf8", b"caf\xc3\xa9"), (b"x-empty", b""),
                                                 (b"x-!#$%&'*+-.^_`|~", b"v")])
    assert res.status == 200, res
    seen = gw.backend.requests[0]
    assert seen.headers["x-a"] == "a\tb c"
    assert seen.headers["x-!#$%&'*+-.^_`|~"] == "v"


def test_http2_hop_by_hop_fields_h2o_lets_through_are_not_forwarded(gw):
    res = h2client.get(gw.port, b"/hop", extra=[(b"te", b"trailers"), (b"x-kept", b"1")])
    assert res.status == 200, res
    seen = gw.backend.requests[0].headers
    assert seen["x-kept"] == "1"
    assert "te" not in seen, seen


def test_http2_connection_specific_fields_are_refused(gw):
    """keep-alive and proxy-connection make an HTTP/2 request malformed (RFC 9113 8.2.2; h2o
    patch 0003; test_http2_abuse.py has the TLS and content-length cases)."""
    for field in ((b"keep-alive", b"timeout=5"), (b"proxy-connection", b"close")):
        res = h2client.get(gw.port, b"/hop", extra=[field])
        assert (res.status, res.get("x-matchgate-error")) == (400, "bad-request"), res
    assert gw.backend.requests == []


def test_a_bad_request_does_not_break_the_next_on_its_connection_for_http1(gw):
    """A field error is not a framing error: the 400 keeps an HTTP/1.1 connection."""
    with RawClient(gw.port) as c:
        c.send(b"GET /a HTTP/1.1\r\nHost: a b\r\n\r\n")
        assert read_response(c.stream).status == 400
        assert c.request("GET", "/after").status == 200
    assert [r.path for r in gw.backend.requests] == ["/after"]


def test_closed_means_closed(gw):
    """send_raw can tell: a sound request keeps its connection open."""
    resp, closed, _ = send_raw(gw.port, b"GET /open HTTP/1.1\r\nHost: t\r\n\r\n")
    assert resp.status == 200 and not closed
