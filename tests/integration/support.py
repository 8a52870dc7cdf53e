"""Helpers for the integration suite: the gateway process, recording backends, YAML, HTTP.

The binary is $MG_BUILD_DIR/matchgate (MG_BUILD_DIR defaults to "build", relative to the
repository root). Backends are in-process Python HTTP/1.1 servers that record what they
received. Every wait here is bounded in time.
"""

import hashlib
import http.client
import json
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("MG_BUILD_DIR", "build"))
if not BUILD.is_absolute():
    BUILD = REPO / BUILD
MATCHGATE = BUILD / "matchgate"
DEMO_BACKEND = BUILD / "tests" / "tools" / "matchgate-demo-backend"

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")
START_TIMEOUT = 15.0  # seconds for a process to accept connections (ASan builds start slowly)

# --------------------------------------------------------------------------------------
# Small helpers


_GIVEN_PORTS = set()


def free_port():
    """A loopback port nobody listens on right now (the OS picks it), never one this process was
    given before: two calls in a row may otherwise get the same port (the first is not bound yet),
    and a listener and an admin address then collide."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port
    raise RuntimeError("no loopback port left that was not given before")


def wait_until(predicate, timeout, interval=0.02):
    """Polls `predicate` until it is true or `timeout` seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def port_accepts(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def pattern_chunk(offset, size):
    """Bytes [offset, offset+size) of the test pattern: byte i is 'a' + i % 26."""
    start = offset % 26
    reps = (start + size) // 26 + 1
    return (b"abcdefghijklmnopqrstuvwxyz" * reps)[start:start + size]


def pattern_sha256(n, chunk=1 << 20):
    h = hashlib.sha256()
    block = pattern_chunk(0, chunk + 26)
    for off in range(0, n, chunk):
        size = min(chunk, n - off)
        h.update(block[off % 26:off % 26 + size])
    return h.hexdigest()


def check_no_sanitizer_report(text, who):
    for marker in SANITIZER_MARKERS:
        if marker in text:
            pytest.fail(f"{who} reported {marker!r}:\n{text[-6000:]}")


def request(port, method, path, headers=None, body=None, timeout=10, host="127.0.0.1"):
    """One request on a fresh connection: (status, HTTPMessage headers, body bytes)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def read_slowly(gw, request_bytes, seconds=3.0):
    """Sends `request_bytes` on a new connection with a small receive buffer, then reads 16 KiB
    every 20 ms (about 0.8 MB/s) for `seconds`, sampling the gateway's RSS as it goes; returns
    (bytes read, the highest RSS in KiB, the first 4 KiB read). The connection is closed after."""
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    peak, read, first = gw.rss_kib(), 0, b""
    try:
        sock.sendall(request_bytes)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            data = sock.recv(16 * 1024)
            assert data, "gateway closed the connection early"
            first += data[:max(0, 4096 - len(first))]
            read += len(data)
            peak = max(peak, gw.rss_kib())
            time.sleep(0.02)
    finally:
        sock.close()
    return read, peak, first


# --------------------------------------------------------------------------------------
# YAML: a tiny block-style writer, so configs look like what users write


_PLAIN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./:-]*")


def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return v if _PLAIN.fullmatch(v) else json.dumps(v)
    if v == {} or v == []:
        return json.dumps(v)
    raise TypeError(f"not a scalar: {v!r}")


def _is_scalar(v):
    return not isinstance(v, (dict, list)) or v in ({}, [])


def to_yaml(obj, indent=0):
    pad = "  " * indent
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if _is_scalar(v):
                lines.append(f"{pad}{_scalar(k)}: {_scalar(v)}")
            else:
                lines.append(f"{pad}{_scalar(k)}:")
                lines.append(to_yaml(v, indent + 1))
    elif isinstance(obj, list):
        for item in obj:
            if _is_scalar(item):
                lines.append(f"{pad}- {_scalar(item)}")
            else:
                # render one level deeper, then turn the first line's indent into "- "
                sub = to_yaml(item, indent + 1)
                lines.append(pad + "- " + sub[len(pad) + 2:])
    else:
        lines.append(pad + _scalar(obj))
    return "\n".join(lines)


def gateway_config(port, backends=None, routes=None, **top):
    """A config dict: one plain listener on `port`, quick shutdown, the given sections.

    `backends` maps a name to a list of server urls or to a full backend mapping.
    """
    conf = {
        "listen": [{"address": f"127.0.0.1:{port}"}],
        "workers": 2,
        "shutdown_timeout": "5s",
    }
    conf.update(top)
    if backends:
        conf["backends"] = {
            name: b if isinstance(b, dict) else {"servers": list(b), "connect_timeout": "1s", "timeout": "10s"}
            for name, b in backends.items()
        }
    if routes is not None:
        conf["routes"] = routes
    return conf


# --------------------------------------------------------------------------------------
# Backends: Python HTTP/1.1 servers that record every request


class RecordedRequest:
    def __init__(self, method, target, headers, body):
        self.at = time.monotonic()  # arrival, for the tests that judge windows of time
        self.method = method
        parts = urllib.parse.urlsplit(target)
        self.path = parts.path
        self.query = parts.query
        self.raw_headers = headers  # list of (name, value) as received
        self.headers = {}  # lower-case name -> values joined with ", "
        for k, v in headers:
            k = k.lower()
            self.headers[k] = f"{self.headers[k]}, {v}" if k in self.headers else v
        self.body = body

    def __repr__(self):
        return f"<{self.method} {self.path}?{self.query} {len(self.body)} bytes>"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "test-backend"
    # the head and the body are two writes: with Nagle's algorithm the body waits for the ACK of
    # the head, which the gateway may delay by 40 ms once a keep-alive connection has left TCP's
    # quick-ack start (thousands of requests then take minutes); real servers set TCP_NODELAY too
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _handle(self):
        backend = self.server
        body = self._read_body()
        rec = RecordedRequest(self.command, self.path, list(self.headers.items()), body)
        backend.record(rec)
        backend.enter()
        try:
            self._respond(rec)
        finally:
            backend.leave()

    def _respond(self, rec):
        params = urllib.parse.parse_qs(rec.query)
        try:
            if self.server.delay_ms:
                time.sleep(self.server.delay_ms / 1000)
            if rec.path.endswith("/slow") or "/slow/" in rec.path:
                time.sleep(int(params.get("ms", ["1000"])[0]) / 1000)
            if rec.path.endswith("/bytes"):
                self._send_bytes(int(params.get("n", ["0"])[0]))
                return
            m = re.search(r"/status/(\d{3})$", rec.path)
            if self.server.force_status is not None and rec.path != "/healthz":
                self._send_echo(rec, self.server.force_status)
                return
            if rec.path == "/healthz" and self.server.health_status is not None:
                self._send_echo(rec, self.server.health_status)
                return
            self._send_echo(rec, int(m.group(1)) if m else 200)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True

    def _send_echo(self, rec, status):
        payload = json.dumps({
            "backend": self.server.name,
            "method": rec.method,
            "path": rec.path,
            "query": rec.query,
            "headers": rec.headers,
            "body_bytes": len(rec.body),
        }).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Backend", self.server.name)
        for k, v in self.server.extra_headers:
            self.send_header(k, v)
        if status in (204, 304) or rec.method == "HEAD":
            payload = b""
        if status not in (204, 304):
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send_bytes(self, n):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        chunk = 256 * 1024
        block = memoryview(pattern_chunk(0, chunk + 26))
        for off in range(0, n, chunk):
            size = min(chunk, n - off)
            self.wfile.write(block[off % 26:off % 26 + size])

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _handle


class Backend(ThreadingHTTPServer):
    """A recording backend on 127.0.0.1. `requests` lists what arrived, in order."""

    daemon_threads = True
    block_on_close = False  # a handler stuck writing to a dead gateway must not block teardown
    request_queue_size = 256  # the default backlog of 5 drops connects under h2load

    def __init__(self, name, port=0):
        super().__init__(("127.0.0.1", port), _Handler)
        self.name = name
        self.port = self.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_headers = []  # (name, value) added to echo responses
        self.health_status = None  # set: the status of GET /healthz (an active check's answer)
        self.delay_ms = 0  # every response waits this long (a slow server)
        self.force_status = None  # set: the status of every response but /healthz's (a failing server)
        self.requests = []
        self._lock = threading.Lock()
        self.connections = 0  # TCP connections accepted so far
        self.in_flight = 0  # requests being answered right now
        self.max_in_flight = 0  # the most ever answered at once
        self._open = set()  # accepted sockets not yet closed
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def record(self, rec):
        with self._lock:
            self.requests.append(rec)

    def process_request(self, request, client_address):
        with self._lock:
            self.connections += 1
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def enter(self):
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self):
        with self._lock:
            self.in_flight -= 1

    def close_connections(self):
        """Shuts down every open connection (keep-alive ones included), as a dying server would."""
        with self._lock:
            socks = list(self._open)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def received(self, path=None):
        with self._lock:
            return [r for r in self.requests if path is None or r.path == path]

    def wait_for(self, path, timeout=5.0):
        """The first request for `path`, waiting up to `timeout` seconds for it."""
        found = wait_until(lambda: self.received(path), timeout)
        assert found, f"backend {self.name} never received {path}; got {self.requests}"
        return found[0]

    def stop(self):
        self.shutdown()
        self.server_close()
        self.close_connections()
        self._thread.join(timeout=5)


# --------------------------------------------------------------------------------------
# The gateway process


RELOAD_LINE = re.compile(r"^matchgate: (configuration reloaded from .*: generation \d+|reload of .* failed .*)$", re.M)


def parse_metrics(text):
    """Prometheus text format 0.0.4 -> {series: value}, a series written as in the text
    (`matchgate_requests_total`, `matchgate_responses_total{class="2xx"}`). Checks the format as
    it goes: every sample has a TYPE line of its metric before it (a histogram's _bucket, _sum
    and _count samples that of their histogram), values are numbers (+Inf allowed)."""
    typed = {}
    samples = {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "histogram"), line
            typed[name] = kind
            continue
        if line.startswith("#"):
            assert line.startswith("# HELP "), line
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_]+="[^"]*"(?:,[a-zA-Z_]+="[^"]*")*\})? (\S+)', line)
        assert m, f"not a sample line: {line!r}"
        name = m.group(1)
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in typed or typed.get(base) == "histogram", f"sample without a TYPE line before it: {line!r}"
        series = m.group(1) + (m.group(2) or "")
        assert series not in samples, f"series given twice: {series}"
        samples[series] = float(m.group(3))
    return samples


class Gateway:
    def __init__(self, args, port, workdir, expect_clean_exit=True, nofile=None):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.config_path = None  # set by the start_gateway fixture
        self.admin_port = None  # admin.address's port, when the config has one
        self.expect_clean_exit = expect_clean_exit
        self.stdout_path = workdir / "matchgate.stdout"
        self.stderr_path = workdir / "matchgate.stderr"
        self.returncode = None
        self.killed = False
        self.terminated = False
        def limit_files():  # in the child, before exec: soft and hard RLIMIT_NOFILE
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=workdir,
                                         preexec_fn=limit_files if nofile else None)
        self.pid = self.proc.pid

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def stdout(self):
        return self.stdout_path.read_text(errors="replace")

    def wait_ready(self):
        def ready():
            if self.proc.poll() is not None:
                return "died"
            return port_accepts(self.port)

        state = wait_until(ready, START_TIMEOUT)
        if state == "died":
            pytest.fail(f"matchgate exited with {self.proc.returncode} before accepting:\n{self.stderr()[-4000:]}")
        if not state:
            self.kill()
            pytest.fail(f"matchgate did not accept on port {self.port} within {START_TIMEOUT}s:\n{self.stderr()[-4000:]}")

    def rss_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS line")

    def signal(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig == signal.SIGTERM:
                self.terminated = True

    def wait(self, timeout):
        """The exit status, or None if still running after `timeout` seconds."""
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.returncode = self.proc.wait(timeout=10)

    def write_config(self, config):
        """Replaces the configuration file (a dict, written as YAML, or text); nothing is reloaded."""
        self.config_path.write_text(to_yaml(config) + "\n" if isinstance(config, dict) else config)

    def reload_lines(self):
        return RELOAD_LINE.findall(self.stderr())

    def reload(self, timeout=10.0):
        """SIGHUP, then waits for the gateway's line about this reload; returns that line
        ("configuration reloaded from ...: generation N" or "reload of ... failed ...")."""
        before = len(self.reload_lines())
        self.signal(signal.SIGHUP)
        lines = wait_until(lambda: self.reload_lines()[before:], timeout)
        assert lines, f"no reload line within {timeout}s of SIGHUP:\n{self.stderr()[-4000:]}"
        return lines[0]

    def admin_request(self, method, path, token=None, body=None, headers=None, timeout=10):
        """One call to the admin API: (status, headers, body bytes). `token` becomes
        `Authorization: Bearer <token>`."""
        assert self.admin_port, "this gateway has no admin address"
        headers = dict(headers or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return request(self.admin_port, method, path, headers=headers, body=body, timeout=timeout)

    def metrics(self, token=None):
        status, headers, body = self.admin_request("GET", "/metrics", token=token)
        assert status == 200, body
        assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return parse_metrics(body.decode())

    def stop(self, timeout=15.0):
        """SIGTERM, then wait; the exit status. Kills it, and sets `killed`, when it does not
        exit within `timeout` seconds."""
        if self.returncode is not None:
            return self.returncode
        # one SIGTERM: a second one, sent while the first is being served, tests something else
        if not self.terminated:
            self.signal(signal.SIGTERM)
        if self.wait(timeout) is None:
            self.killed = True
            self.kill()
        return self.returncode


def run_matchgate(*args, timeout=20):
    """Runs the binary to completion (for --check, --version, --help)."""
    res = subprocess.run([str(MATCHGATE), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                         stdin=subprocess.DEVNULL)
    check_no_sanitizer_report(res.stderr, "matchgate " + " ".join(map(str, args)))
    return res
