"""A small HTTP/2 (h2c prior knowledge) client on python3-h2 that sends header fields exactly as
given, unchecked: names and values a conforming client library would refuse to send (CR, LF, NUL
and other controls, upper-case or empty names, odd pseudo-header values). It reports what the
server did with the stream: a response, a stream reset or the connection's end. Every read is
bounded in time.
"""

import socket
import time

import h2.config
import h2.connection
import h2.events


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
