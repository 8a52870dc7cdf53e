"""Fair shares of a backend's queue (backend `max_queued_per_key`, issue 13 item 5): one
ordering key, one bridge session and one client (its tenant, else its connection) may hold at
most that many waiting requests, so that a flood of one of them is refused (503 queue-full with
Retry-After) before anyone else is. A bridge session is slowed down by backpressure at its own
share; a message over its tenant's share gets a 503 frame and the session stays open. Places are
given back however a request stops waiting (it runs, times out, its client leaves, its session
is aborted) and across a reload."""

import asyncio
import json
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from support import free_port, gateway_config, request, wait_until
from wsbackend import connect, run, wait_sessions

QUEUE_TIMEOUT = 30  # seconds: the Retry-After of a refusal


class Gate(ThreadingHTTPServer):
    """GET|POST /gate/<tag> waits (at most 30 s) until `release` is set; /fast/<tag> answers after
    20 ms. Both answer {"tag": tag}. Counts the requests inside."""

    daemon_threads = True
    request_queue_size = 1024

    def __init__(self):
        super().__init__(("127.0.0.1", 0), GateHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.lock = threading.Lock()
        self.inside = 0
        self.release = threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def stop(self):
        self.release.set()
        self.shutdown()
        self.server_close()


class GateHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_one(self):
        gate = self.server
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with gate.lock:
            gate.inside += 1
        kind, tag = self.path.split("?")[0].split("/")[1:3]
        if kind == "gate":
            gate.release.wait(30)
        else:
            time.sleep(0.02)
        with gate.lock:
            gate.inside -= 1
        body = json.dumps({"tag": tag}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = handle_one


@pytest.fixture
def gate():
    g = Gate()
    yield g
    g.stop()


def start(start_gateway, gate, max_in_flight=1, share=None, workers=2, queue_timeout=f"{QUEUE_TIMEOUT}s"):
    port, admin = free_port(), free_port()
    backend = {"servers": [gate.url], "timeout": "60s", "max_in_flight": max_in_flight, "queue_timeout": queue_timeout}
    if share is not None:
        backend["max_queued_per_key"] = share
    routes = [
        {"name": "socket", "match": {"all": [{"path": "/sockets/q"}, {"websocket": True}]},
         "bridge": {"backend": "b", "path": "/${msg.op}/${msg.tag}", "method": "GET"}},
        {"name": "accounts", "match": {"path": {"prefix": "/acct"}},
         "order": {"key": "${header.X-Account-Id}"},
         "actions": [{"rewrite_path": "${remainder}"}], "forward": "b"},
        {"name": "plain", "forward": "b"},
    ]
    conf = gateway_config(port, {"b": backend}, routes, workers=workers,
                          admin={"address": f"127.0.0.1:{admin}"},
                          tenants={"identify": [{"header": "X-Tenant-Id"}]})
    gw = start_gateway(conf)
    gw.conf = conf
    gw.ws = f"ws://127.0.0.1:{port}/sockets/q"
    return gw


def metric(gw, name):
    return gw.metrics().get(f'matchgate_backend_{name}{{backend="b"}}', 0)


def depth(gw):
    return metric(gw, "queue_depth")


def settled_depth(gw, at_least, timeout=20, tolerance=0):
    """Waits until the backend's queue depth is at least `at_least` and has moved by no more than
    `tolerance` for a second; returns it (the last value seen on timeout)."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        seen.append((time.monotonic(), depth(gw)))
        recent = [d for t, d in seen if t >= seen[-1][0] - 1.0]
        if seen[-1][0] - seen[0][0] >= 1.0 and recent[-1] >= at_least and max(recent) - min(recent) <= tolerance:
            return recent[-1]
        time.sleep(0.1)
    return seen[-1][1]


class Client(threading.Thread):
    """One request on its own connection, from a thread: `result` is (status, headers, body)."""

    def __init__(self, gw, path, headers=None):
        super().__init__(daemon=True)
        self.gw, self.path, self.headers, self.result = gw, path, headers or {}, None
        self.start()

    def run(self):
        try:
            self.result = request(self.gw.port, "GET", self.path, self.headers, timeout=60)
        except OSError as e:
            self.result = (None, None, repr(e).encode())


def statuses(clients):
    return [c.result[0] if c.result else None for c in clients]


def assert_refused(result, reason):
    status, headers, body = result
    assert status == 503, (status, body)
    assert headers["X-Matchgate-Error"] == "queue-full"
    assert headers["Retry-After"] == str(QUEUE_TIMEOUT), "queue_timeout: everything waiting now has left by then"
    assert reason in body.decode(), body


def hold_the_slot(gw, gate):
    """A request (no tenant) that holds the backend's only slot at the gate."""
    blocker = Client(gw, "/gate/blocker")
    assert wait_until(lambda: gate.inside == 1, 10)
    return blocker


# --------------------------------------------------------------------------------------
# The scenario, and the unordered flood of one tenant, at the default share


def test_bridge_sessions_flooding_a_backend_do_not_starve_another_client(start_gateway, gate):
    """Ten sessions each pipeline more than max_queued_messages (1024) messages to a slow backend
    with two slots. Before: they filled the backend's 10,000 places and another client's request
    got 503 queue-full. Now each session is held at the default share (100) by backpressure, and
    the other client's request waits its turn and is served."""
    gw = start(start_gateway, gate, max_in_flight=2)

    async def send_all(ws, i):
        for n in range(1100):
            await ws.send(json.dumps({"id": n, "op": "fast", "tag": f"s{i}-{n}"}))

    async def main():
        loop = asyncio.get_running_loop()
        sessions = [await connect(gw.ws, max_queue=None) for _ in range(10)]
        senders = [asyncio.create_task(send_all(ws, i)) for i, ws in enumerate(sessions)]
        flooded = await loop.run_in_executor(None, lambda: settled_depth(gw, 900, tolerance=20))
        listed = await loop.run_in_executor(None, wait_sessions, gw, 10)
        victim = await loop.run_in_executor(None, lambda: request(gw.port, "GET", "/fast/victim", timeout=60))
        firsts = [[json.loads(await asyncio.wait_for(ws.recv(), 30)) for _ in range(5)] for ws in sessions]
        for t in senders:
            t.cancel()
        for ws in sessions:
            ws.transport.abort()  # gone with its messages waiting: they leave the queue
        return flooded, listed, victim, firsts

    flooded, listed, victim, firsts = run(main(), timeout=120)
    assert victim[0] == 200, (victim[0], victim[2], flooded)
    assert json.loads(victim[2]) == {"tag": "victim"}
    assert flooded <= 10 * 100, f"{flooded} waiting: each session holds at most its share"
    assert all(s["queued"] <= 150 for s in listed), f"reading pauses at the share: {listed}"
    for i, got in enumerate(firsts):
        assert [a["status"] for a in got] == [200] * 5, f"session {i} was refused instead of slowed down: {got}"
        assert [a["id"] for a in got] == [0, 1, 2, 3, 4]
    assert metric(gw, "queue_share_refused_total") == 0
    assert wait_until(lambda: depth(gw) == 0, 10), "the aborted sessions' messages left the queue"


def test_an_unordered_flood_of_one_tenant_is_refused_beyond_its_share(start_gateway, gate):
    """130 requests of tenant acme while the backend's one slot is held: 100 (the default share)
    wait, the other 30 are refused at once; globex's request and an unidentified one still wait
    their turn, and everything admitted is served once the backend answers."""
    gw = start(start_gateway, gate)
    blocker = hold_the_slot(gw, gate)
    flood = [Client(gw, f"/gate/acme{i}", {"X-Tenant-Id": "acme"}) for i in range(130)]
    assert wait_until(lambda: sum(s == 503 for s in statuses(flood)) == 30 and depth(gw) == 100, 20), \
        (statuses(flood).count(503), depth(gw))
    others = [Client(gw, "/gate/globex", {"X-Tenant-Id": "globex"}), Client(gw, "/gate/anonymous")]
    assert wait_until(lambda: depth(gw) == 102, 10), "another tenant, and a client without one, are not refused"
    assert statuses(others) == [None, None]
    refused = [c.result for c in flood if c.result]
    for r in refused:
        assert_refused(r, "tenant (or connection) has max_queued_per_key")
    assert metric(gw, "queue_share_refused_total") == 30
    gate.release.set()
    for c in flood + others + [blocker]:
        c.join(60)
    assert sorted(statuses(flood)).count(200) == 100
    assert statuses(others) == [200, 200]
    assert depth(gw) == 0


# --------------------------------------------------------------------------------------
# Ordered requests: one key, one tenant over many keys


def test_an_ordering_key_and_a_tenant_spreading_over_keys_each_hold_their_share(start_gateway, gate):
    gw = start(start_gateway, gate, share=5)
    blocker = hold_the_slot(gw, gate)
    one_key = [Client(gw, f"/acct/gate/a1-{i}", {"X-Account-Id": "a1"}) for i in range(8)]
    assert wait_until(lambda: depth(gw) == 5 and statuses(one_key).count(503) == 3, 10), statuses(one_key)
    spread = [Client(gw, f"/acct/gate/t2-{i}", {"X-Account-Id": f"b{i}", "X-Tenant-Id": "t2"}) for i in range(8)]
    assert wait_until(lambda: depth(gw) == 10 and statuses(spread).count(503) == 3, 10), statuses(spread)
    same_key = Client(gw, "/acct/gate/t3-a1", {"X-Account-Id": "a1", "X-Tenant-Id": "t3"})
    other = Client(gw, "/acct/gate/t3-c1", {"X-Account-Id": "c1", "X-Tenant-Id": "t3"})
    assert wait_until(lambda: same_key.result is not None and depth(gw) == 11, 10)
    assert_refused(same_key.result, "ordering key has max_queued_per_key")
    for c in one_key:
        if c.result:
            assert_refused(c.result, "ordering key has max_queued_per_key")
    for c in spread:
        if c.result:
            assert_refused(c.result, "tenant (or connection) has max_queued_per_key")
    gate.release.set()
    for c in one_key + spread + [other, blocker]:
        c.join(60)
    assert statuses(one_key).count(200) == 5 and statuses(spread).count(200) == 5
    assert other.result[0] == 200
    assert metric(gw, "queue_share_refused_total") == 7


def test_one_http2_connection_without_a_tenant_holds_its_share(start_gateway, gate):
    """Without a tenant the client is its connection: 30 streams of one HTTP/2 connection, one at
    the backend, 10 waiting, 19 refused; another connection still gets in."""
    gw = start(start_gateway, gate, share=10)
    h2 = subprocess.Popen(["h2load", "-n", "30", "-c", "1", "-m", "30", f"http://127.0.0.1:{gw.port}/gate/h2"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_until(lambda: depth(gw) == 10 and metric(gw, "queue_share_refused_total") == 19, 20), depth(gw)
        other = Client(gw, "/gate/http1")
        assert wait_until(lambda: depth(gw) == 11, 10), "another connection is not refused"
        gate.release.set()
        out = h2.communicate(timeout=60)[0]
    finally:
        h2.kill()
    other.join(30)
    assert other.result[0] == 200
    assert "status codes: 11 2xx, 0 3xx, 0 4xx, 19 5xx" in out, out


# --------------------------------------------------------------------------------------
# Places are given back however a request stops waiting


def raw_request(gw, path, tenant):
    """A request sent on a socket that is not read (the client may then leave)."""
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Tenant-Id: {tenant}\r\n\r\n".encode())
    return s


def read_status(s):
    data = b""
    while b"\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ")[1]) if data else None


def test_a_place_comes_back_when_its_client_leaves_or_its_wait_times_out(start_gateway, gate):
    gw = start(start_gateway, gate, share=2, queue_timeout="2s")
    blocker = hold_the_slot(gw, gate)
    c1, c2 = raw_request(gw, "/gate/c1", "t"), raw_request(gw, "/gate/c2", "t")
    assert wait_until(lambda: depth(gw) == 2, 10)
    c3 = raw_request(gw, "/gate/c3", "t")
    assert read_status(c3) == 503, "the tenant holds its share"
    c1.close()  # gone while waiting: withdrawn, its place given back
    assert wait_until(lambda: depth(gw) == 1, 10)
    c4 = raw_request(gw, "/gate/c4", "t")
    assert wait_until(lambda: depth(gw) == 2, 10), "the place c1 left is free again"
    assert read_status(c2) == 503 and read_status(c4) == 503, "queue-timeout, after 2 s"
    assert depth(gw) == 0
    c5, c6 = raw_request(gw, "/gate/c5", "t"), raw_request(gw, "/gate/c6", "t")
    assert wait_until(lambda: depth(gw) == 2, 10), "timed out: both places are free again"
    assert metric(gw, "queue_share_refused_total") == 1
    gate.release.set()
    assert read_status(c5) == 200 and read_status(c6) == 200
    for s in (c2, c3, c4, c5, c6):
        s.close()
    blocker.join(30)


def test_a_reload_applies_the_new_share_and_keeps_what_waits(start_gateway, gate):
    gw = start(start_gateway, gate, share=2)
    blocker = hold_the_slot(gw, gate)
    first = [Client(gw, f"/gate/r{i}", {"X-Tenant-Id": "t"}) for i in range(3)]
    assert wait_until(lambda: depth(gw) == 2 and statuses(first).count(503) == 1, 10)
    gw.conf["backends"]["b"]["max_queued_per_key"] = 4
    gw.write_config(gw.conf)
    assert gw.reload().startswith("configuration reloaded")
    more = [Client(gw, f"/gate/m{i}", {"X-Tenant-Id": "t"}) for i in range(3)]
    assert wait_until(lambda: depth(gw) == 4 and statuses(more).count(503) == 1, 10), "two more places, not three"
    gw.conf["backends"]["b"]["max_queued_per_key"] = 0
    gw.write_config(gw.conf)
    assert gw.reload().startswith("configuration reloaded")
    unbounded = [Client(gw, f"/gate/u{i}", {"X-Tenant-Id": "t"}) for i in range(5)]
    assert wait_until(lambda: depth(gw) == 9, 10), "0: no share"
    gate.release.set()
    for c in first + more + unbounded + [blocker]:
        c.join(60)
    assert statuses(first + more).count(200) == 4 and statuses(unbounded) == [200] * 5
    assert depth(gw) == 0


# --------------------------------------------------------------------------------------
# The bridge: backpressure at the session's share, a 503 frame over the tenant's


def test_a_bridged_message_over_its_tenants_share_gets_a_503_frame_and_the_session_stays_open(start_gateway, gate):
    """Share 3, one slot. Session s1 of acme pipelines 10 messages: one runs, two wait, and s1 is
    no longer read (its own share: backpressure, no refusal). s2 of acme gets one more message in
    (acme's third waiting place); its next one gets a 503 frame, and s2 stays open. globex is not
    refused. When s1 is aborted its waiting messages give acme's places back: s3 of acme gets
    three messages in."""
    gw = start(start_gateway, gate, share=3)
    acme = {"X-Tenant-Id": "acme"}

    async def answer(ws):
        return json.loads(await asyncio.wait_for(ws.recv(), 30))

    def send(ws, id, tag):
        return ws.send(json.dumps({"id": id, "op": "gate", "tag": tag}))

    async def main():
        loop = asyncio.get_running_loop()
        s1 = await connect(gw.ws, extra_headers=acme)
        for i in range(10):
            await send(s1, i, f"s1-{i}")
        held = await loop.run_in_executor(None, lambda: settled_depth(gw, 2, 10))
        listed = await loop.run_in_executor(None, wait_sessions, gw, 1)
        s2 = await connect(gw.ws, extra_headers=acme)
        await send(s2, "in", "s2-in")
        await send(s2, "over", "s2-over")
        over = await answer(s2)
        other = await connect(gw.ws, extra_headers={"X-Tenant-Id": "globex"})
        await send(other, "g", "g")
        with_other = await loop.run_in_executor(None, lambda: settled_depth(gw, 4, 10))
        # s1 goes with its messages waiting (its slot goes on to s2's first message)
        await loop.run_in_executor(None, gw.admin_request, "POST", f"/sessions/{listed[0]['id']}/abort")
        after_abort = await loop.run_in_executor(None, lambda: settled_depth(gw, 1, 10))
        s3 = await connect(gw.ws, extra_headers=acme)
        for i in range(3):
            await send(s3, i, f"s3-{i}")
        with_s3 = await loop.run_in_executor(None, lambda: settled_depth(gw, 4, 10))
        gate.release.set()
        got = {"s2": await answer(s2), "g": await answer(other), "s3": [await answer(s3) for _ in range(3)]}
        for ws in (s2, other, s3):
            await ws.close()
        return held, listed, over, with_other, after_abort, with_s3, got

    held, listed, over, with_other, after_abort, with_s3, got = run(main(), timeout=90)
    assert held == 2, "s1's own share: one runs, two wait, and it is no longer read"
    assert listed[0]["queued"] == 3, listed
    assert over == {"id": "over", "status": 503, "retry_after": QUEUE_TIMEOUT,
                    "error": "the tenant has max_queued_per_key requests waiting for the backend"}, over
    assert with_other == 4, "another tenant's session is not refused"
    assert after_abort == 1, "s1's waiting messages left the queue; globex's waits"
    assert with_s3 == 4, "acme's places came back: s3 got three messages in"
    assert got["s2"] == {"id": "in", "status": 200, "body": {"tag": "s2-in"}}, "s2 stayed open"
    assert got["g"] == {"id": "g", "status": 200, "body": {"tag": "g"}}
    assert [a["status"] for a in got["s3"]] == [200, 200, 200]
    assert metric(gw, "queue_share_refused_total") == 1
    assert depth(gw) == 0
