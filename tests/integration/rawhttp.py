"""Byte-level HTTP/1.1 for tests that need to see (or send) exactly what crosses the wire.

`RawBackend` is a TCP server that runs a test-supplied function per connection, so a test can
misbehave like a real broken backend (close mid-body, send garbage, stream without a length).
`RawClient` is a client socket that reads responses exactly as framed, and reports framing
errors instead of papering over them. Every read and wait is bounded in time.
"""

import socket
import threading
import time


class Closed(Exception):
    """The peer closed the connection before the expected bytes arrived."""


class Stream:
    """A socket with a read buffer; every read has a deadline."""

    def __init__(self, sock, timeout=5.0):
        self.sock = sock
        self.buf = b""
        self.timeout = timeout

    def _fill(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("read timed out")
        self.sock.settimeout(remaining)
        data = self.sock.recv(256 * 1024)
        if not data:
            raise Closed(f"connection closed with {len(self.buf)} bytes buffered")
        self.buf += data

    def read_until(self, marker, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while marker not in self.buf:
            self._fill(deadline)
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_exact(self, n, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < n:
            self._fill(deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_to_eof(self, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            try:
                self._fill(deadline)
            except Closed:
                out, self.buf = self.buf, b""
                return out

    def pending(self, wait=0.2):
        """Bytes that arrive within `wait` seconds without being asked for (b"" if none; None on EOF)."""
        if self.buf:
            return self.buf
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(65536)
        except (TimeoutError, socket.timeout):
            return b""
        except ConnectionResetError:
            return None
        if not data:
            return None
        self.buf += data
        return self.buf


def parse_head(head):
    """(status or method/target tuple, [(lower name, value)]) from a head ending in CRLF CRLF."""
    lines = head.decode("latin-1").split("\r\n")
    fields = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        fields.append((name.strip().lower(), value.strip()))
    return lines[0], fields


class Response:
    def __init__(self, status, reason, headers, body, complete):
        self.status = status
        self.reason = reason
        self.headers = headers  # [(lower name, value)]
        self.body = body
        self.complete = complete  # False when the connection ended before the framing said it should
        self.error = None  # why it is not complete

    def get(self, name, default=None):
        for k, v in self.headers:
            if k == name.lower():
                return v
        return default

    def get_all(self, name):
        return [v for k, v in self.headers if k == name.lower()]

    def __repr__(self):
        return f"<Response {self.status} {len(self.body)} bytes complete={self.complete} {self.error or ''} {self.headers}>"


def read_chunked(stream, timeout, parts=None):
    """Reads a chunked body (RFC 9112 7.1) and its trailers; the chunks read so far stay in
    `parts` when it is cut short."""
    parts = [] if parts is None else parts
    while True:
        size = int(stream.read_until(b"\r\n", timeout).split(b";")[0].strip(), 16)
        if size == 0:
            while stream.read_until(b"\r\n", timeout) != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(stream.read_exact(size, timeout))
        assert stream.read_exact(2, timeout) == b"\r\n", "chunk not followed by CRLF"


def read_response(stream, method="GET", timeout=5.0, allow_interim=False):
    """Reads one response as framed by RFC 9112 6.3. Interim (1xx) heads are returned on their own
    when `allow_interim`, and skipped otherwise."""
    while True:
        start, headers = parse_head(stream.read_until(b"\r\n\r\n", timeout))
        version, _, rest = start.partition(" ")
        assert version.startswith("HTTP/1."), f"not an HTTP/1 status line: {start!r}"
        code, _, reason = rest.partition(" ")
        status = int(code)
        if 100 <= status < 200 and status != 101:
            if allow_interim:
                return Response(status, reason, headers, b"", True)
            continue
        break
    resp = Response(status, reason, headers, b"", True)
    te = resp.get("transfer-encoding")
    cl = resp.get("content-length")
    if method == "HEAD" or status in (204, 304):
        return resp
    assert te is None or te.lower() == "chunked", f"unexpected transfer-encoding {te!r}"
    parts = []
    try:
        if te is not None:
            resp.body = read_chunked(stream, timeout, parts)
        elif cl is not None:
            resp.body = stream.read_exact(int(cl), timeout)
        else:
            resp.body = stream.read_to_eof(timeout)
    except (Closed, ConnectionResetError, ValueError, AssertionError) as e:
        # cut short, or framing a client cannot parse: either way not a complete response
        resp.complete = False
        resp.error = repr(e)
        resp.body = resp.body or b"".join(parts) or stream.buf
    return resp


class RawClient:
    """One client connection to the gateway, for byte-exact requests and responses."""

    def __init__(self, port, timeout=5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.stream = Stream(self.sock, timeout)

    def send(self, data):
        self.sock.sendall(data)

    def request(self, method, target, headers=(), body=b"", host="t"):
        head = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n"
        for k, v in headers:
            head += f"{k}: {v}\r\n"
        if body and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in headers):
            head += f"Content-Length: {len(body)}\r\n"
        self.send(head.encode("latin-1") + b"\r\n" + body)
        return read_response(self.stream, method)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RawRequest:
    def __init__(self, method, target, headers, body):
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body

    def get(self, name, default=None):
        for k, v in self.headers:
            if k == name.lower():
                return v
        return default


def read_request(stream, timeout=10.0):
    """The next request on a backend connection (body by Content-Length or chunked), or None at EOF."""
    try:
        start, headers = parse_head(stream.read_until(b"\r\n\r\n", timeout))
    except (Closed, ConnectionResetError):
        return None
    method, target, _ = start.split(" ", 2)
    req = RawRequest(method, target, headers, b"")
    if (req.get("transfer-encoding") or "").lower() == "chunked":
        req.body = read_chunked(stream, timeout)
    elif req.get("content-length"):
        req.body = stream.read_exact(int(req.get("content-length")), timeout)
    return req


class RawBackend:
    """A TCP server on 127.0.0.1 calling `handler(stream, backend)` for every connection on its
    own thread; the connection is closed when the handler returns. `requests` records what
    handlers append, `connections` counts accepted connections."""

    def __init__(self, handler):
        self.handler = handler
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self.requests = []
        self.lock = threading.Lock()
        self._socks = []
        self._threads = []
        self._stopping = threading.Event()
        self._accepter = threading.Thread(target=self._accept_loop, daemon=True)
        self._accepter.start()

    def _accept_loop(self):
        while not self._stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self._socks.append(sock)
            t = threading.Thread(target=self._run, args=(sock,), daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, sock):
        try:
            self.handler(Stream(sock, 10.0), self)
        except (OSError, Closed, TimeoutError):
            pass
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def record(self, req):
        with self.lock:
            self.requests.append(req)

    def stop(self):
        self._stopping.set()
        self._accepter.join(timeout=5)
        self.listener.close()
        with self.lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=2)


def serve_keepalive(respond):
    """A RawBackend handler: reads requests one after another on the connection and sends
    `respond(req)` (bytes) for each; a None answer closes the connection."""

    def handler(stream, backend):
        for _ in range(10000):
            req = read_request(stream)
            if req is None:
                return
            backend.record(req)
            out = respond(req)
            if out is None:
                return
            if callable(out):  # a generator of writes, for streaming answers
                for part in out():
                    if part is None:
                        return
                    stream.sock.sendall(part)
                continue
            stream.sock.sendall(out)

    return handler
