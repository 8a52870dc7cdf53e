"""The WebSocket bridge through the real gateway to a real HTTP backend that keeps balances:
the banking sequence over many concurrent sessions with random backend latency (every
session's answers in order, with the right balances), a high-priority message served next,
bad messages, a backend that is down or slow, the tenant's quota, admin send and drain, and
10,000 idle sessions within a memory bound."""

import asyncio
import json
import os
import random
import resource
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import websockets

from support import free_port, gateway_config, wait_until
from wsbackend import connect, run, wait_sessions


class Bank(ThreadingHTTPServer):
    """/acct/<account>/<op>: POST withdraw|deposit with {"amount": N} applies it after a random
    short sleep and answers {"balance": N} (409 when the balance is short); GET balance; POST
    slow sleeps 0.5 s; GET teapot answers a text body. Records every call in order."""

    daemon_threads = True
    request_queue_size = 1024  # many sessions connect at once

    def __init__(self):
        super().__init__(("127.0.0.1", 0), BankHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.lock = threading.Lock()
        self.balances = {}
        self.calls = []  # (account, op, message tag)
        self.busy = {}
        self.overlaps = 0
        self.headers_seen = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def stop(self):
        self.shutdown()
        self.server_close()


class BankHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, obj, content_type="application/json"):
        body = (json.dumps(obj) if content_type == "application/json" else obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_call(self):
        bank = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _, _, acct, op = self.path.split("?")[0].split("/")
        payload = json.loads(body) if body else {}
        with bank.lock:
            bank.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
            bank.busy[acct] = bank.busy.get(acct, 0) + 1
            bank.overlaps += bank.busy[acct] > 1
            bank.calls.append((acct, op, payload.get("tag")))
        time.sleep(0.5 if op == "slow" else random.uniform(0.005, 0.03))
        with bank.lock:
            bank.busy[acct] -= 1
            balance = bank.balances.setdefault(acct, 100)
            if op == "teapot":
                return self.reply(418, "short and stout", "text/plain")
            if op in ("withdraw", "deposit"):
                amount = payload["amount"]
                if op == "withdraw" and balance < amount:
                    return self.reply(409, {"error": "insufficient funds", "balance": balance})
                bank.balances[acct] = balance + amount if op == "deposit" else balance - amount
            self.reply(200, {"balance": bank.balances[acct]})

    do_GET = do_POST = do_PUT = do_DELETE = handle_call


@pytest.fixture
def bank():
    b = Bank()
    yield b
    b.stop()


def bridge_config(port, bank_url, admin_port=None, bridge=None, **top):
    route = {
        "name": "bank-socket",
        "match": {"all": [{"path": {"regex": "^/sockets/(?<acct>[a-z0-9]+)$"}}, {"websocket": True}]},
        "bridge": {
            "backend": "bank",
            "path": "/acct/${acct}/${msg.type}",
            "method": {"from": "type", "map": {"withdraw": "POST", "deposit": "POST", "balance": "GET",
                                               "slow": "POST", "teapot": "GET"}},
            "body": "payload",
            "priority": {"from": "priority", "high": ["urgent"]},
        },
    }
    route["bridge"].update(bridge or {})
    conf = gateway_config(port, {"bank": [bank_url]}, [route, {"name": "fallback", "respond": {"status": 404}}], **top)
    if admin_port:
        conf["admin"] = {"address": f"127.0.0.1:{admin_port}"}
    return conf


@pytest.fixture
def gw(start_gateway, bank):
    port, admin = free_port(), free_port()
    g = start_gateway(bridge_config(port, bank.url, admin))
    g.url = f"ws://127.0.0.1:{port}"
    return g


async def answers(ws, n):
    return [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(n)]


def msg(id, type, **fields):
    return json.dumps({"id": id, "type": type, **fields})


def test_banking_sequence_over_many_sessions_in_order(gw, bank):
    async def session(i):
        async with connect(f"{gw.url}/sockets/acct{i}") as ws:
            await ws.send(msg(1, "withdraw", payload={"amount": 50}))
            await ws.send(msg(2, "deposit", payload={"amount": 100}))
            await ws.send(msg(3, "withdraw", payload={"amount": 150}))
            return await answers(ws, 3)

    async def main():
        return await asyncio.gather(*(session(i) for i in range(40)))

    for got in run(main()):
        assert [a["id"] for a in got] == [1, 2, 3]
        assert [a["status"] for a in got] == [200, 200, 200], got
        assert [a["body"]["balance"] for a in got] == [50, 150, 0]
    assert bank.overlaps == 0, "one message of a session at a time"
    assert all(bank.balances[f"acct{i}"] == 0 for i in range(40))
    m = gw.metrics()
    assert m["matchgate_websocket_bridged_messages_total"] == 120
    assert wait_until(lambda: gw.metrics()["matchgate_websocket_sessions"] == 0, 5)


def test_high_priority_goes_next_without_preempting(gw, bank):
    async def main():
        async with connect(f"{gw.url}/sockets/prio") as ws:
            await ws.send(msg("a", "slow", payload={"tag": "a"}))
            await asyncio.sleep(0.1)  # a runs at the backend now
            await ws.send(msg("b", "balance", payload={"tag": "b"}))
            await ws.send(msg("c", "balance", payload={"tag": "c"}))
            await ws.send(msg("d", "deposit", priority="urgent", payload={"tag": "d", "amount": 1}))
            return await answers(ws, 4)

    got = run(main())
    assert [a["id"] for a in got] == ["a", "d", "b", "c"], "answers come in execution order"
    # GET messages carry no body, so only a and d are tagged at the backend
    assert [c[2] for c in bank.calls if c[0] == "prio" and c[2]] == ["a", "d"]
    assert [c[1] for c in bank.calls if c[0] == "prio"] == ["slow", "deposit", "balance", "balance"]


def test_bad_messages_get_400_and_the_session_stays_open(gw):
    async def main():
        async with connect(f"{gw.url}/sockets/bad") as ws:
            await ws.send("not json")
            await ws.send("[1, 2]")
            await ws.send(b"\x01\x02")
            await ws.send(msg(4, "explode"))  # no method for it, no default
            await ws.send("")
            await ws.send(msg(5, "balance"))
            return await answers(ws, 6)

    got = run(main())
    assert [a["status"] for a in got] == [400, 400, 400, 400, 400, 200]
    assert "error" in got[0] and "id" not in got[0]
    assert got[3]["id"] == 4 and got[5] == {"id": 5, "status": 200, "body": {"balance": 100}}


def test_a_message_too_big_gets_400_and_the_session_stays_open(start_gateway, bank):
    port = free_port()
    start_gateway(bridge_config(port, bank.url, websocket={"max_message_size": "1KiB"}))

    async def main():
        async with connect(f"ws://127.0.0.1:{port}/sockets/big") as ws:
            await ws.send(msg(1, "balance", pad="x" * 2000))
            fragmented = msg(2, "balance", pad="y" * 1500)  # each fragment under the limit, not the whole
            await ws.send([fragmented[:800], fragmented[800:]])
            await ws.send(msg(3, "balance"))
            return await answers(ws, 3)

    got = run(main())
    assert [a["status"] for a in got] == [400, 400, 200]
    assert got[0]["error"] == "the message exceeds websocket.max_message_size" and "id" not in got[0]
    assert got[2] == {"id": 3, "status": 200, "body": {"balance": 100}}


def test_a_client_that_reads_no_answers_is_closed_and_the_gateway_goes_on(start_gateway, bank):
    """max_queued_messages answers waiting for a client that does not read: it is closed, and
    the gateway serves the next session."""
    port = free_port()
    start_gateway(bridge_config(port, bank.url, websocket={"max_queued_messages": 4, "close_timeout": "1s"}))
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /sockets/slow HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    bad = b"\x81\x84\x00\x00\x00\x00" + b"nope"  # masked with zeros: "nope", not JSON: a 400 each
    closed = False
    deadline = time.monotonic() + 15
    try:
        # the close frame cannot reach a client that reads nothing: the connection goes at
        # close_timeout, while what the client still sends is read and dropped
        while time.monotonic() < deadline:
            s.sendall(bad * 50)
    except OSError:
        closed = True
    s.close()
    assert closed, "the gateway closed the client that read nothing"

    async def next_session():
        async with connect(f"ws://127.0.0.1:{port}/sockets/after") as ws:
            await ws.send(msg(1, "balance"))
            return (await answers(ws, 1))[0]["status"]

    assert run(next_session()) == 200


def test_backend_bodies_and_headers(gw, bank):
    async def main():
        async with connect(f"{gw.url}/sockets/hdr", extra_headers={"X-Trace": "t1"}) as ws:
            await ws.send(msg({"nested": [1]}, "teapot"))
            await ws.send(msg(2, "balance"))
            return await answers(ws, 2)

    got = run(main())
    assert got[0] == {"id": {"nested": [1]}, "status": 418, "body": "short and stout"}
    seen = [h for h in bank.headers_seen if h.get("x-trace") == "t1"]
    assert len(seen) == 2
    assert not any(k.startswith("sec-websocket") for k in seen[0])
    ids = [h["x-request-id"] for h in seen]
    assert ids[0] != ids[1] and ids[0].rsplit("-", 1)[0] == ids[1].rsplit("-", 1)[0]
    assert seen[0]["x-forwarded-for"] == "127.0.0.1"
    assert seen[0]["content-type"] == "application/json"


def test_route_actions_reach_the_backend_and_reload_keeps_the_session(start_gateway, bank):
    port = free_port()
    conf = bridge_config(port, bank.url, free_port(), tenants={"identify": [{"header": "X-Tenant"}]})
    conf["routes"][0]["actions"] = [{"set_header": {"X-Tenant-Seen": "${tenant}"}}, {"remove_header": "X-Secret"}]
    g = start_gateway(conf)

    async def main():
        async with connect(f"ws://127.0.0.1:{port}/sockets/act", extra_headers={"X-Tenant": "acme", "X-Secret": "s"}) as ws:
            await ws.send(msg(1, "balance"))
            first = await answers(ws, 1)
            listed = wait_sessions(g, 1, "?tenant=acme&route=bank-socket")
            assert [(x["tenant"], x["route"]) for x in listed] == [("acme", "bank-socket")]
            assert json.loads(g.admin_request("GET", "/sessions?tenant=other")[2])["sessions"] == []
            g.reload()
            await ws.send(msg(2, "deposit", payload={"amount": 5}))
            return first + await answers(ws, 1)

    got = run(main())
    assert [a["status"] for a in got] == [200, 200] and got[1]["body"] == {"balance": 105}
    seen = [h for h in bank.headers_seen if h.get("x-tenant-seen") == "acme"]
    assert len(seen) == 2, bank.headers_seen
    assert not any("x-secret" in h for h in seen)


def test_client_connection_header_cannot_remove_what_a_bridge_route_adds(start_gateway, bank):
    """Issue 13 item 3 for the bridge: the upgrade's Connection names leave the client's headers
    before the route's actions, so every bridged call carries what the route sets."""
    port = free_port()
    conf = bridge_config(port, bank.url)
    conf["routes"][0]["actions"] = [{"set_header": {"X-Tenant": "acme", "Authorization": "Bearer internal"}}]
    start_gateway(conf)

    async def main():
        # a second Connection field: h2o reads the last one for the upgrade, so it names Upgrade too
        extra = [("Connection", "Upgrade, X-Tenant, Authorization, X-Request-Id"), ("X-Tenant", "mallory"),
                 ("Authorization", "Bearer stolen"), ("X-Trace", "conn")]
        async with connect(f"ws://127.0.0.1:{port}/sockets/conn", extra_headers=extra) as ws:
            await ws.send(msg(1, "balance"))
            await ws.send(msg(2, "balance"))
            return await answers(ws, 2)

    got = run(main())
    assert [a["status"] for a in got] == [200, 200], got
    seen = [h for h in bank.headers_seen if h.get("x-trace") == "conn"]
    assert len(seen) == 2, bank.headers_seen
    for h in seen:
        assert h["x-tenant"] == "acme" and h["authorization"] == "Bearer internal"
        assert h.get("x-request-id"), "the gateway's request id is always sent"
        assert "x-tenant" not in h.get("connection", "").lower()


def test_backend_down_and_slow(start_gateway, bank):
    port = free_port()
    conf = bridge_config(port, f"http://127.0.0.1:{free_port()}")
    start_gateway(conf)

    async def one(url, m):
        async with connect(url) as ws:
            await ws.send(m)
            return (await answers(ws, 1))[0]

    got = run(one(f"ws://127.0.0.1:{port}/sockets/down", msg(1, "balance")))
    assert got["status"] == 502 and got["id"] == 1 and got["error"]
    port2 = free_port()
    conf = bridge_config(port2, bank.url)
    conf["backends"]["bank"]["timeout"] = "200ms"
    start_gateway(conf)
    got = run(one(f"ws://127.0.0.1:{port2}/sockets/slowacct", msg(2, "slow")))
    assert got["status"] == 504 and got["id"] == 2


def test_a_write_pinned_to_the_primary_is_not_retried_elsewhere(start_gateway, bank):
    """primary_for_writes: a bridged PUT goes to the primary only, even when it is down and a
    GET would move on to the next server."""
    port, dead = free_port(), f"http://127.0.0.1:{free_port()}"
    conf = bridge_config(port, bank.url, bridge={"method": {"from": "type", "map": {"balance": "GET", "deposit": "PUT"}}})
    conf["backends"]["bank"] = {"servers": [dead, bank.url], "balance": "primary_for_writes", "primary": dead,
                                "retries": 1, "connect_timeout": "1s"}
    start_gateway(conf)

    async def main():
        async with connect(f"ws://127.0.0.1:{port}/sockets/pinned") as ws:
            await ws.send(msg(1, "deposit", payload={"amount": 5}))
            await ws.send(msg(2, "balance"))
            return await answers(ws, 2)

    got = run(main())
    assert [a["status"] for a in got] == [502, 200], got
    assert [c[1] for c in bank.calls if c[0] == "pinned"] == ["balance"], "the PUT never reached another server"


def test_each_message_counts_against_the_tenant_quota(start_gateway, bank):
    port = free_port()
    conf = bridge_config(port, bank.url, tenants={
        "identify": [{"header": "X-Tenant"}], "quotas": {"acme": {"requests": 4, "per": "10s"}}})
    start_gateway(conf)

    async def main():
        async with connect(f"ws://127.0.0.1:{port}/sockets/q", extra_headers={"X-Tenant": "acme"}) as ws:
            for i in range(6):
                await ws.send(msg(i, "balance"))
            return await answers(ws, 6)

    got = run(main())
    # the upgrade itself was the first admission
    assert [a["status"] for a in got] == [200, 200, 200, 429, 429, 429]
    assert got[3]["retry_after"] >= 1 and got[3]["error"] == "tenant quota exceeded"


def test_admin_send_and_drain_on_a_bridge_session(gw):
    async def main():
        async with connect(f"{gw.url}/sockets/drain") as ws:
            listed = wait_sessions(gw, 1, "?route=bank-socket")
            sid = listed[0]["id"]
            assert gw.admin_request("POST", f"/sessions/{sid}/send", body=b'{"notice": 1}')[0] == 202
            assert json.loads(await asyncio.wait_for(ws.recv(), 5)) == {"notice": 1}
            for i in range(3):
                await ws.send(msg(i, "slow"))
            await asyncio.sleep(0.2)
            assert gw.admin_request("POST", f"/sessions/{sid}/drain")[0] == 202
            got = []
            with pytest.raises(websockets.ConnectionClosed) as e:
                while True:
                    got.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
            return got, e.value.rcvd.code

    got, code = run(main())
    assert [a["id"] for a in got] == [0, 1, 2], "the messages received before the drain are finished"
    assert code == 1000


def test_client_leaving_withdraws_its_waiting_messages(gw, bank):
    async def main():
        async with connect(f"{gw.url}/sockets/gone") as ws:
            for i in range(5):
                await ws.send(msg(i, "slow", payload={"tag": f"g{i}"}))
            await asyncio.sleep(0.2)

    run(main())
    time.sleep(1)
    assert [c[2] for c in bank.calls if c[0] == "gone"] == ["g0"], "only the running one reached the backend"
    assert wait_until(lambda: json.loads(gw.admin_request("GET", "/sessions")[2])["sessions"] == [], 5)


@pytest.mark.skipif("ASAN_OPTIONS" in os.environ, reason="a memory measure: meaningless under AddressSanitizer")
def test_ten_thousand_idle_sessions_within_memory_bounds(start_gateway, bank):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 12000:
        pytest.skip("needs 12000 file descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    port = free_port()
    g = start_gateway(bridge_config(port, bank.url, free_port(), workers=2))
    before = g.rss_kib()
    n = 10000

    async def main():
        conns = []
        for start in range(0, n, 500):
            conns += await asyncio.gather(*(connect(f"ws://127.0.0.1:{port}/sockets/idle{i}")
                                            for i in range(start, start + 500)))
        time.sleep(0.5)
        listed = wait_sessions(g, n, timeout=30)
        rss = g.rss_kib()
        await conns[-1].send(msg(1, "balance"))
        answer = json.loads(await asyncio.wait_for(conns[-1].recv(), 10))
        await asyncio.gather(*(c.close() for c in conns))
        return len(listed), rss, answer

    count, rss, answer = run(main(), timeout=240)
    assert count == n
    assert answer["status"] == 200
    per_session = (rss - before) * 1024 / n
    print(f"\n{n} idle bridge sessions: {per_session:.0f} bytes each (RSS {before} -> {rss} KiB)")
    assert per_session < 24 * 1024
