"""Staying reachable when connections or file descriptors run out (issue 20): the connection cap
and its idle reclaim, the per-client cap, the head deadline, the admin listener while the client
side is full, and the descriptor limit. Each test holds many sockets: the test process raises its
own descriptor limit first."""

import os
import re
import resource
import socket
import subprocess
import threading
import time

import pytest

from h2client import GOAWAY, HEADERS, END_HEADERS, END_STREAM, RawH2, frame
from rawhttp import RawClient, read_request, read_response
from support import MATCHGATE, free_port, gateway_config, parse_metrics, request, wait_until

OK = {"name": "ok", "match": {"path": {"prefix": "/ok"}}, "respond": {"status": 200, "body": "ok\n"}}
API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}


@pytest.fixture(autouse=True)
def many_sockets():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 16384)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 2000, "the test process needs 2000 descriptors"
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def config(admin_port=None, limits=None, **top):
    conf = gateway_config(free_port(), routes=[OK], **top)
    if admin_port:
        conf["admin"] = {"address": f"127.0.0.1:{admin_port}"}
    if limits:
        conf["limits"] = limits
    return conf


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_over(pid, seconds):
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - before


def timed_get(port, path="/ok", timeout=5.0, source=None):
    """(status or None, seconds) for a GET on a new connection."""
    start = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0) if source else None)
        with s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
            head = b""
            while b"\r\n" not in head:
                data = s.recv(4096)
                if not data:
                    break
                head += data
        status = int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else None
    except OSError:
        status = None
    return status, time.monotonic() - start


def idles_and_answers(gw, admin_port):
    """The issue's bar: near idle (under 20% of one CPU over 3 s), /healthz within 100 ms, a new
    client served within 1 s."""
    spent = cpu_over(gw.pid, 3.0)
    assert spent < 0.6, f"{spent:.2f} s of CPU in 3 s"
    status, took = fastest_healthz(admin_port)
    assert status == 200 and took < 0.1, ("/healthz", status, took)
    status, took = timed_get(gw.port)
    assert status == 200 and took < 1.0, ("new client", status, took)


def fastest_healthz(admin_port, tries=3):
    """The quickest of a few /healthz calls (each on a new connection): (status, seconds)."""
    results = [timed_get(admin_port, "/healthz", timeout=2) for _ in range(tries)]
    return min(results, key=lambda r: (r[0] is None, r[1]))


def hold(port, n, send=b"", source=None):
    """n client connections held open (never read); each sends `send` first."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        if source:
            s.bind((source, 0))
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        if send:
            s.sendall(send)
        s.setblocking(False)
        socks.append(s)
    return socks


def closed_by_peer(s, wait=0.0):
    """True when the gateway has closed the connection (EOF or reset), waiting up to `wait` s."""
    deadline = time.monotonic() + wait
    while True:
        try:
            s.setblocking(False)
            data = s.recv(65536)
            if not data:
                return True
            continue  # responses the client never read: drain them
        except BlockingIOError:
            pass
        except (ConnectionResetError, OSError):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def slow_backend(raw_backend_factory):
    """(backend, release): a backend that answers each request once `release` is set."""
    release = threading.Event()

    def slow(stream, backend):
        read_request(stream)
        release.wait(20)
        stream.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nslow\n")

    return raw_backend_factory(slow), release


def close_all(socks):
    for s in socks:
        s.close()


def metrics_of(port):
    status, _, body = request(port, "GET", "/metrics", timeout=5)
    assert status == 200
    return parse_metrics(body.decode())


# --------------------------------------------------------------------------------------
# Out of descriptors


@pytest.mark.parametrize("clients", ["silent", "keep-alive"])
def test_700_idle_connections_under_512_descriptors_leave_the_gateway_idle_and_reachable(start_gateway, clients):
    """The issue's case: RLIMIT_NOFILE 512 and 700 connections that hold on (sending nothing, or
    one request and then nothing). Today's main spins both workers at 100% CPU on EMFILE and
    stops answering, /healthz included. Now max_connections (auto: 325 for 512 descriptors and two
    workers) keeps descriptors free, the oldest idle connections are closed to make room, the
    CPU stays near idle, /healthz answers within 100 ms and a new client within 1 s."""
    admin = free_port()
    gw = start_gateway(config(admin), nofile=512)
    send = b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n" if clients == "keep-alive" else b""
    socks = hold(gw.port, 700, send)
    try:
        assert wait_until(lambda: metrics_of(admin)["matchgate_connections_accepted_total"] >= 400, 10), metrics_of(admin)
        time.sleep(0.5)
        idles_and_answers(gw, admin)
        m = metrics_of(admin)
        assert m["matchgate_connections_max"] == 325
        assert m["matchgate_open_files_limit"] == 512
        assert m["matchgate_connections"] <= 325
        assert m["matchgate_connections_closed_total{reason=\"idle_reclaimed\"}"] > 0, "idle reclaim, not luck"
        assert m["matchgate_accept_errors_total{error=\"EMFILE\"}"] == 0, "the cap keeps descriptors free"
    finally:
        close_all(socks)
    err = gw.stderr()
    assert "matchgate: open files limit 512 (soft limit was 512, hard limit 512); max_connections 325 (auto)" in err, err
    assert re.search(r"matchgate: overloaded: \d+ of 325 client connections", err), err
    assert wait_until(lambda: "matchgate: no longer overloaded" in gw.stderr(), 10), gw.stderr()


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one(start_gateway, tmp_path):
    admin = free_port()
    conf = config(admin)
    path = tmp_path / "gw.yaml"
    from support import to_yaml
    path.write_text(to_yaml(conf) + "\n")
    err_path = tmp_path / "err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(["prlimit", "--nofile=256:4096", str(MATCHGATE), "-c", str(path)], stderr=err,
                                stdout=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: b"serving" in err_path.read_bytes(), 15), err_path.read_text()
        text = err_path.read_text()
        assert "matchgate: open files limit 4096 (soft limit was 256, hard limit 4096); max_connections 3013 (auto)" in text
        assert metrics_of(admin)["matchgate_open_files_limit"] == 4096
        with open(f"/proc/{proc.pid}/limits") as f:
            assert re.search(r"Max open files\s+4096\s+4096", f.read())
    finally:
        proc.terminate()
        assert proc.wait(15) == 0


def test_a_max_connections_the_descriptors_cannot_hold_pauses_accept_and_stays_reachable(start_gateway):
    """max_connections 1000 with 128 descriptors (--check warns about it): accept fails with
    EMFILE. Each worker takes its listeners out for 100 ms and closes idle connections, instead of
    spinning; the admin listener answers from its reserve of descriptors."""
    admin = free_port()
    gw = start_gateway(config(admin, limits={"max_connections": 1000}), nofile=128)
    assert "warning: limits.max_connections 1000 with their backend connections needs about" in gw.stderr()
    socks = hold(gw.port, 400)
    try:
        time.sleep(1.0)
        idles_and_answers(gw, admin)
        m = metrics_of(admin)
        assert m["matchgate_accept_errors_total{error=\"EMFILE\"}"] > 0
        assert m["matchgate_listener_pauses_total{reason=\"accept_error\"}"] > 0
    finally:
        close_all(socks)
    assert "accept failed: Too many open files (EMFILE): its listeners pause for 100 ms" in gw.stderr()


def test_check_warns_when_max_connections_cannot_fit_the_descriptor_limit(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("listen:\n  - address: \"127.0.0.1:1\"\nworkers: 2\nlimits:\n  max_connections: 5000\n"
                    "routes:\n  - name: r\n    respond: {status: 200}\n")
    run = subprocess.run(["prlimit", "--nofile=512:512", str(MATCHGATE), "--check", "-c", str(path)], capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert (f"{path}:5:20: warning: limits.max_connections 5000 with their backend connections needs about 5078 file "
            "descriptors, more than the open files limit (512)") in run.stderr
    run = subprocess.run(["prlimit", "--nofile=512:8192", str(MATCHGATE), "--check", "-c", str(path)], capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 0 and "warning" not in run.stderr, "the hard limit is what the gateway will have"


# --------------------------------------------------------------------------------------
# max_connections and idle reclaim


def test_idle_connections_make_room_oldest_first(start_gateway):
    """max_connections 40: 100 silent connections; the gateway keeps itself at 90% (36) by closing
    the oldest idle ones, and a new client is served at once."""
    admin = free_port()
    gw = start_gateway(config(admin, limits={"max_connections": 40, "client_header_timeout": "30s"}))
    first = hold(gw.port, 20)
    time.sleep(0.3)
    later = hold(gw.port, 80)
    try:
        assert wait_until(lambda: metrics_of(admin)["matchgate_connections_accepted_total"] >= 100, 10)
        assert wait_until(lambda: all(closed_by_peer(s) for s in first), 5), "the oldest are closed first"
        assert not all(closed_by_peer(s) for s in later[-30:]), "the youngest stay"
        status, took = timed_get(gw.port)
        assert status == 200 and took < 1.0, (status, took)
        m = metrics_of(admin)
        assert m["matchgate_connections"] <= 40
        assert m["matchgate_overloaded"] == 1
        assert m["matchgate_connections_closed_total{reason=\"idle_reclaimed\"}"] >= 60
    finally:
        close_all(first + later)
    assert wait_until(lambda: metrics_of(admin)["matchgate_overloaded"] == 0, 5)
    assert re.search(r"matchgate: overloaded: 3[6-9] of 40 client connections", gw.stderr()), gw.stderr()
    assert "matchgate: no longer overloaded:" in gw.stderr()


def test_busy_connections_are_never_reclaimed_and_the_admin_answers_while_full(start_gateway, raw_backend_factory):
    """max_connections 10, every one of them with a request at a slow backend: the listeners pause
    (the new client waits in the backlog), /healthz and /metrics answer, no request is cut, and
    the waiting client is served as soon as a connection is done with its request."""
    b, release = slow_backend(raw_backend_factory)
    admin = free_port()
    conf = gateway_config(free_port(), backends={"b": [f"http://127.0.0.1:{b.port}"]}, routes=[API, OK],
                          admin={"address": f"127.0.0.1:{admin}"}, limits={"max_connections": 10})
    gw = start_gateway(conf)
    busy = []
    for _ in range(10):  # each sends its request at once, as clients do (an idle one may be reclaimed)
        busy.append(RawClient(gw.port, timeout=30))
        busy[-1].send(b"GET /api/slow HTTP/1.1\r\nHost: t\r\n\r\n")
        assert wait_until(lambda: metrics_of(admin)["matchgate_requests_in_flight"] == len(busy), 5), {k: v for k, v in metrics_of(admin).items() if "flight" in k or "conn" in k}
    try:
        assert wait_until(lambda: metrics_of(admin)["matchgate_requests_in_flight"] == 10, 10)
        result = {}
        waiting = threading.Thread(target=lambda: result.update(r=timed_get(gw.port, timeout=20)))
        waiting.start()
        assert wait_until(lambda: metrics_of(admin)["matchgate_listeners_paused"] >= 1, 5), metrics_of(admin)
        status, took = fastest_healthz(admin)
        assert status == 200 and took < 0.1, (status, took)
        m = metrics_of(admin)
        assert m["matchgate_connections"] == 10 and m["matchgate_connections_max"] == 10
        time.sleep(1.0)
        assert "r" not in result, "the listeners are out of the loop: the client waits in the backlog"
        release.set()
        for c in busy:
            assert read_response(c.stream, timeout=10).status == 200, "a busy connection was cut"
        waiting.join(15)
        assert result["r"][0] == 200, result
        assert metrics_of(admin)["matchgate_listener_pauses_total{reason=\"max_connections\"}"] >= 1
    finally:
        release.set()
        for c in busy:
            c.close()


def test_websocket_sessions_are_never_reclaimed(start_gateway):
    from wsbackend import WsBackend
    wsb = WsBackend()
    try:
        admin = free_port()
        conf = gateway_config(free_port(), backends={"ws": [wsb.url]},
                              routes=[{"name": "sockets", "match": {"all": [{"path": {"prefix": "/ws"}}, {"websocket": True}]},
                                       "actions": [{"rewrite_path": "${remainder}"}], "forward": "ws"}, OK],
                              admin={"address": f"127.0.0.1:{admin}"}, limits={"max_connections": 12})
        gw = start_gateway(conf)
        from test_websocket import raw_upgrade
        sessions = [raw_upgrade(gw.port) for _ in range(8)]
        socks = hold(gw.port, 30)
        try:
            assert wait_until(lambda: metrics_of(admin)["matchgate_connections_closed_total{reason=\"idle_reclaimed\"}"] >= 20,
                              10), metrics_of(admin)
            for s in sessions:
                assert not closed_by_peer(s), "a WebSocket session was reclaimed"
            assert metrics_of(admin)["matchgate_websocket_sessions"] == 8
        finally:
            close_all(sessions + socks)
    finally:
        wsb.stop()


def test_idle_http2_connections_get_goaway(start_gateway):
    """HTTP/2 connections with no stream open are idle: reclaimed with a GOAWAY (NO_ERROR) naming
    the last stream they opened, as h2o's own idle timeout does."""
    admin = free_port()
    # one worker: a worker reclaims its own idle connections when it accepts at the cap, so with
    # two, whether these HTTP/2 connections were reclaimed depended on which worker the flood of
    # plain connections landed on (one failure in a full ASan run)
    gw = start_gateway(config(admin, limits={"max_connections": 10, "client_header_timeout": "30s"}, workers=1))
    h2 = []
    for i in range(4):
        c = RawH2(gw.port)
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, c.request_block(b"/ok")))
        assert c.until(lambda f: f[0] == HEADERS and f[2] == 1, 5) is not None
        h2.append(c)
    socks = hold(gw.port, 20)
    try:
        for c in h2:
            f = c.until(lambda f: f[0] == GOAWAY, 5)
            assert f is not None, "closed without a GOAWAY"
            assert int.from_bytes(f[3][:4], "big") == 1, "the last stream it opened"
            assert int.from_bytes(f[3][4:8], "big") == 0, "NO_ERROR"
            assert c.ends(5)
    finally:
        close_all(socks)
        for c in h2:
            c.close()


def test_a_reload_changes_max_connections(start_gateway):
    admin = free_port()
    gw = start_gateway(config(admin, limits={"max_connections": 200}))
    assert metrics_of(admin)["matchgate_connections_max"] == 200
    gw.write_config(config(admin, limits={"max_connections": 20}) | {"listen": [{"address": f"127.0.0.1:{gw.port}"}]})
    assert "generation 2" in gw.reload()
    assert metrics_of(admin)["matchgate_connections_max"] == 20
    socks = hold(gw.port, 40)
    try:
        assert wait_until(lambda: metrics_of(admin)["matchgate_connections_accepted_total"] >= 40, 10)
        assert metrics_of(admin)["matchgate_connections"] <= 20
    finally:
        close_all(socks)


# --------------------------------------------------------------------------------------
# max_connections_per_client


def test_one_address_cannot_take_more_than_its_share(start_gateway):
    admin = free_port()
    gw = start_gateway(config(admin, limits={"max_connections_per_client": 5}))
    assert wait_until(lambda: metrics_of(admin)["matchgate_connections"] == 0, 5), "start_gateway's probe has closed"
    accepted = metrics_of(admin)["matchgate_connections_accepted_total"]
    mine = hold(gw.port, 5)
    try:
        # admitted, not only open: matchgate_connections also counts a slot a worker holds while
        # it calls accept(2), and with two workers the sixth could otherwise be admitted first
        assert wait_until(lambda: metrics_of(admin)["matchgate_connections_accepted_total"] == accepted + 5, 5), \
            "all five admitted first"
        sixth = hold(gw.port, 1)[0]
        assert closed_by_peer(sixth, 2), "the sixth connection of 127.0.0.1 is closed at once"
        for s in mine:
            assert not closed_by_peer(s)
        status, _ = timed_get(gw.port, source="127.0.0.2")
        assert status == 200, "another address is served"
        mine.pop().close()
        time.sleep(0.3)
        status, _ = timed_get(gw.port)
        assert status == 200, "a closed connection gives its place back"
        m = metrics_of(admin)
        assert m["matchgate_connections_refused_total{reason=\"per_client\"}"] >= 1
    finally:
        close_all(mine)


def test_the_per_client_cap_holds_across_workers_and_for_mapped_addresses(start_gateway):
    """Four workers, 40 connections from one address with a cap of 8: exactly 8 stay open."""
    admin = free_port()
    gw = start_gateway(config(admin, limits={"max_connections_per_client": 8, "client_header_timeout": "30s"}, workers=4))
    socks = hold(gw.port, 40, source="127.0.0.3")
    try:
        assert wait_until(lambda: metrics_of(admin)["matchgate_connections_accepted_total"] +
                          metrics_of(admin)["matchgate_connections_refused_total{reason=\"per_client\"}"] >= 40, 10)
        time.sleep(0.3)
        assert sum(not closed_by_peer(s) for s in socks) == 8
        assert metrics_of(admin)["matchgate_client_addresses"] >= 1
    finally:
        close_all(socks)


# --------------------------------------------------------------------------------------
# client_header_timeout


def test_a_head_must_arrive_within_client_header_timeout(start_gateway):
    """client_header_timeout 1s next to client_idle_timeout 30s: silence after accept and a head
    dripped byte by byte are closed after about a second (h2o alone waited 30 s for both); a
    keep-alive connection may wait longer between requests, but its next head is timed too; a
    body that takes longer is not a late head."""
    admin = free_port()
    gw = start_gateway(config(admin, limits={"client_header_timeout": "1s", "client_idle_timeout": "30s"}))
    silent = hold(gw.port, 1)[0]
    drip = socket.create_connection(("127.0.0.1", gw.port))
    start = time.monotonic()
    closed_at = None
    for byte in b"GET /ok HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 100:
        try:
            drip.send(bytes([byte]))
        except OSError:
            closed_at = time.monotonic() - start
            break
        if closed_by_peer(drip, 0.1):
            closed_at = time.monotonic() - start
            break
    assert closed_at is not None and 0.9 <= closed_at < 3.0, closed_at
    assert closed_by_peer(silent, 1.0)

    with RawClient(gw.port, timeout=10) as c:
        c.send(b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(c.stream).status == 200
        time.sleep(2.5)
        c.send(b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(c.stream).status == 200, "between requests the idle timeout applies"
        c.send(b"GET /ok HTTP/1.1\r\nHo")
        start = time.monotonic()
        assert closed_by_peer(c.sock, 4.0), "the next head is timed as well"
        assert 0.9 <= time.monotonic() - start < 3.5

    with RawClient(gw.port, timeout=10) as c:
        c.send(b"POST /ok HTTP/1.1\r\nHost: t\r\nContent-Length: 30\r\n\r\n")
        for _ in range(30):
            c.send(b"x")
            time.sleep(0.08)
        assert read_response(c.stream).status == 200, "a slow body is not a late head"
    assert metrics_of(admin)["matchgate_connections_closed_total{reason=\"header_timeout\"}"] >= 3


# --------------------------------------------------------------------------------------
# Shutdown


def test_idle_keep_alive_connections_are_closed_at_shutdown(start_gateway, raw_backend_factory):
    """SIGTERM with a request in flight: an idle keep-alive connection is closed at once, not when
    the process exits after the slow request."""
    b, release = slow_backend(raw_backend_factory)
    conf = gateway_config(free_port(), backends={"b": [f"http://127.0.0.1:{b.port}"]}, routes=[API, OK])
    conf["shutdown_timeout"] = "20s"
    gw = start_gateway(conf)
    with RawClient(gw.port, timeout=10) as idle, RawClient(gw.port, timeout=30) as busy:
        idle.send(b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(idle.stream).status == 200
        busy.send(b"GET /api/slow HTTP/1.1\r\nHost: t\r\n\r\n")
        time.sleep(0.3)
        gw.signal()
        assert closed_by_peer(idle.sock, 2.0), "the idle connection waits for the process to exit"
        release.set()
        assert read_response(busy.stream, timeout=10).status == 200
