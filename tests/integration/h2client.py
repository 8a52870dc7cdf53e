"""A small HTTP/2 (h2c prior knowledge) client on python3-h2 that sends header fields exactly as
given, unchecked: names and values a conforming client library would refuse to send (CR, LF, NUL
and other controls, upper-case or empty names, odd pseudo-header values). It reports what the
server did with the stream: a response, a stream reset or the connection's end. Every read is
bounded in time.
"""

import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import hpack


class H2Result:
    def __init__(self):
        self.status = None  # int, when a response head came
        self.headers = []  # [(lower name, value)] as str
        self.body = b""
        self.reset = None  # RST_STREAM error code, when the stream was reset
        self.goaway = None  # GOAWAY error code, when the connection was ended
        self.closed = False  # the connection ended (EOF) before the stream did

    def get(self, name, default=None):
        for k, v in self.headers:
            if k == name:
                return v
        return default

    def __repr__(self):
        return (f"<H2Result status={self.status} reset={self.reset} goaway={self.goaway} closed={self.closed} "
                f"{self.headers} {self.body[:80]!r}>")


def _str(b):
    return b.decode("latin-1") if isinstance(b, bytes) else b


def request(port, headers, body=b"", timeout=5.0, huffman=True):
    """Sends one request on a new connection to 127.0.0.1:port; `headers` is a list of
    (name, value) bytes pairs, pseudo-headers included, sent in that order and unchanged, their
    strings Huffman-coded or not (h2o checks the two forms with different code).
    Returns an H2Result once the stream ends, is reset, or the connection goes."""
    config = h2.config.H2Configuration(client_side=True, header_encoding=None, validate_outbound_headers=False,
                                       normalize_outbound_headers=False, validate_inbound_headers=False)
    conn = h2.connection.H2Connection(config=config)
    encode = conn.encoder.encode
    conn.encoder.encode = lambda hs, huffman_=huffman: encode(hs, huffman=huffman_)
    res = H2Result()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, headers, end_stream=not body)
        if body:
            conn.send_data(stream, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no end of stream within {timeout}s: {res!r}")
            sock.settimeout(remaining)
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                res.closed = True
                return res
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == stream:
                    res.headers = [(_str(k).lower(), _str(v)) for k, v in ev.headers]
                    res.status = int(res.get(":status"))
                elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == stream:
                    res.body += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, stream)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == stream:
                    return res
                elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == stream:
                    res.reset = int(ev.error_code)
                    return res
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    res.goaway = int(ev.error_code)
                    return res
            out = conn.data_to_send()
            if out:
                sock.sendall(out)


def get(port, path=b"/", authority=b"t", extra=(), huffman=True):
    """A GET with the usual pseudo-headers, then `extra` (name, value) pairs."""
    return request(port, [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", authority), (b":path", path)] +
                   list(extra), huffman=huffman)


# Frame types and flags (RFC 9113 6)
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
CANCEL, ENHANCE_YOUR_CALM = 0x8, 0xb
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big") + payload


def settings_payload(**values):
    """SETTINGS entries by name: header_table_size, enable_push, max_concurrent_streams,
    initial_window_size, max_frame_size, max_header_list_size."""
    ids = {"header_table_size": 1, "enable_push": 2, "max_concurrent_streams": 3, "initial_window_size": 4,
           "max_frame_size": 5, "max_header_list_size": 6}
    return b"".join(ids[k].to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in values.items())


def tls_socket(port, timeout):
    """A TLS connection to 127.0.0.1:port that negotiated h2 with ALPN (the certificate is not checked)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=timeout), server_hostname="localhost")
    assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
    return sock


class RawH2:
    """One HTTP/2 connection driven frame by frame, as a hostile client would: nothing is checked
    or answered unless the test says so (no SETTINGS ACK, no WINDOW_UPDATE). Header blocks are
    encoded with the connection's own HPACK encoder. `tls=True` negotiates h2 over TLS with ALPN,
    otherwise h2c with prior knowledge. Every read is bounded in time."""

    def __init__(self, port, tls=False, timeout=5.0, **settings):
        self.sock = tls_socket(port, timeout) if tls else socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.timeout = timeout
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.buf = b""
        self.closed = False
        self.send(PREFACE + frame(SETTINGS, 0, 0, settings_payload(**settings)))

    def block(self, headers, huffman=False):
        """A header block for (name, value) bytes pairs, in order."""
        return self.encoder.encode(headers, huffman=huffman)

    def request_block(self, path=b"/", method=b"GET", authority=b"t", extra=()):
        return self.block([(b":method", method), (b":scheme", b"http"), (b":authority", authority), (b":path", path)] +
                          list(extra))

    def send(self, data):
        """Sends bytes; False once the peer has closed the connection (nothing more can go)."""
        if self.closed:
            return False
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.closed = True
            return False

    def read_frame(self, timeout=None):
        """(type, flags, stream, payload), None at the end of the connection; TimeoutError when
        nothing whole came within `timeout` (default: the connection's)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no whole frame within {timeout or self.timeout}s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                data = b""
            except (socket.timeout, TimeoutError):
                continue
            if not data:
                self.closed = True
                return None
            self.buf += data
        n = int.from_bytes(self.buf[:3], "big")
        f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF, self.buf[9:9 + n])
        self.buf = self.buf[9 + n:]
        return f

    def until(self, predicate, timeout):
        """Reads frames until predicate(frame) is true (returns that frame) or the connection ends
        (returns None); TimeoutError past `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(max(deadline - time.monotonic(), 0.001))
            if f is None or predicate(f):
                return f

    def goaway(self, timeout):
        """The error code of the GOAWAY the server sends, or None when it closes without one;
        TimeoutError when the connection is still open after `timeout` seconds."""
        f = self.until(lambda f: f[0] == GOAWAY, timeout)
        return None if f is None else int.from_bytes(f[3][4:8], "big")

    def ends(self, timeout):
        """True when the server closes the connection within `timeout` seconds (frames read on
        the way are dropped)."""
        try:
            self.until(lambda f: False, timeout)
        except TimeoutError:
            return False
        return True

    def response(self, stream, timeout=10):
        """The response on `stream` as an H2Result (status, headers, body; reset or goaway when
        that ended it), acknowledging DATA so that it can come. Header blocks of other streams are
        decoded on the way (HPACK state is per connection)."""
        res = H2Result()
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(max(deadline - time.monotonic(), 0.001))
            if f is None:
                res.closed = True
                return res
            ftype, flags, sid, payload = f
            if ftype == HEADERS:
                fields = self.decoder.decode(_headers_payload(flags, payload), raw=True)
                if sid == stream and res.status is None:
                    res.headers = [(_str(k).lower(), _str(v)) for k, v in fields]
                    res.status = int(res.get(":status"))
            elif ftype == DATA and sid == stream:
                body = payload[1:len(payload) - payload[0]] if flags & 0x8 else payload
                res.body += body
                if payload:
                    self.send(frame(WINDOW_UPDATE, 0, 0, len(payload).to_bytes(4, "big")) +
                              frame(WINDOW_UPDATE, 0, stream, len(payload).to_bytes(4, "big")))
            elif ftype == RST_STREAM and sid == stream:
                res.reset = int.from_bytes(payload[:4], "big")
                return res
            elif ftype == GOAWAY:
                res.goaway = int.from_bytes(payload[4:8], "big")
                return res
            if sid == stream and ftype in (HEADERS, DATA) and flags & END_STREAM:
                return res

    def close(self):
        self.sock.close()


def _headers_payload(flags, payload):
    """The header block fragment of a HEADERS frame (padding and priority removed); the server
    sends no CONTINUATION for the small heads these tests read."""
    start, end = 0, len(payload)
    if flags & 0x8:
        start, end = 1, len(payload) - payload[0]
    if flags & 0x20:
        start += 5
    return payload[start:end]
