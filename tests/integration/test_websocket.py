"""WebSocket tunnel through the real gateway to a real WebSocket backend (python3-websockets):
echo of text, binary and 1 MiB messages, close codes both ways, refusals and a backend that is
down, the idle timeout and pings, size and framing limits, the session manager's admin API
(list, send, priority, broadcast, close, abort, drain), reload and shutdown."""

import asyncio
import json
import os
import signal
import socket
import struct
import time

import pytest
import websockets

from support import free_port, gateway_config, wait_until
from wsbackend import WsBackend


@pytest.fixture
def wsb():
    b = WsBackend()
    yield b
    b.stop()


def ws_config(port, wsb, admin_port=None, websocket=None, **top):
    routes = [
        {"name": "sockets", "match": {"all": [{"path": {"prefix": "/ws"}}, {"websocket": True}]},
         "actions": [{"rewrite_path": "${remainder}"}], "forward": "live"},
        {"name": "plain", "forward": "live"},
    ]
    conf = gateway_config(port, {"live": [wsb.url]}, routes, **top)
    if admin_port:
        conf["admin"] = {"address": f"127.0.0.1:{admin_port}"}
    if websocket:
        conf["websocket"] = websocket
    return conf


@pytest.fixture
def gw(start_gateway, wsb):
    port, admin = free_port(), free_port()
    g = start_gateway(ws_config(port, wsb, admin))
    g.url = f"ws://127.0.0.1:{port}"
    return g


def run(coro, timeout=30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def connect(url, **kw):
    return websockets.connect(url, max_size=None, ping_interval=None, compression=None, open_timeout=10, **kw)


def sessions(g, query=""):
    status, _, body = g.admin_request("GET", "/sessions" + query)
    assert status == 200
    return json.loads(body)["sessions"]


# --------------------------------------------------------------------------------------
# Tunnel


def test_echo_text_binary_and_a_mebibyte_in_order(gw, wsb):
    big = os.urandom(1 << 20)

    async def main():
        async with connect(gw.url + "/ws/echo") as ws:
            for i in range(200):
                await ws.send(f"message {i}")
            got = [await ws.recv() for _ in range(200)]
            assert got == [f"message {i}" for i in range(200)]
            await ws.send(b"\x00\x01binary\xff")
            assert await ws.recv() == b"\x00\x01binary\xff"
            await ws.send(big)
            assert await ws.recv() == big
            await ws.send("x" * 70000)  # a 64-bit length
            assert await ws.recv() == "x" * 70000

    run(main())
    path, headers = wsb.handshakes[-1]
    assert path == "/echo", "rewrite_path applies to the upgrade"
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert "x-request-id" in headers


def test_fragmented_messages_pass_unchanged(gw):
    async def main():
        async with connect(gw.url + "/ws/echo") as ws:
            await ws.send(["frag", "men", "ted"])  # one message in three frames
            assert await ws.recv() == "fragmented"

    run(main())


def test_close_codes_pass_both_ways(gw, wsb):
    async def client_closes():
        async with connect(gw.url + "/ws/echo") as ws:
            await ws.send("hi")
            await ws.recv()
            await ws.close(4001, "client bye")

    run(client_closes())
    assert wait_until(lambda: any(c[0] == "/echo" and c[1] == 4001 for c in wsb.closes), 5), wsb.closes
    assert [c for c in wsb.closes if c[1] == 4001][0][2] == "client bye"

    async def backend_closes():
        async with connect(gw.url + "/ws/close/4002") as ws:
            with pytest.raises(websockets.ConnectionClosed) as e:
                await ws.recv()
            return e.value.rcvd.code, e.value.rcvd.reason

    assert run(backend_closes()) == (4002, "backend closes")


def test_backend_refusal_and_backend_down(start_gateway, gw, wsb):
    async def refused(url):
        with pytest.raises(websockets.InvalidStatusCode) as e:
            async with connect(url):
                pass
        return e.value.status_code

    assert run(refused(gw.url + "/ws/refuse")) == 403
    port = free_port()
    dead = f"ws://127.0.0.1:{free_port()}"
    conf = gateway_config(port, {"live": [dead]}, [{"name": "sockets", "forward": "live"}])
    start_gateway(conf)
    assert run(refused(f"ws://127.0.0.1:{port}/x")) == 502


def test_bad_handshakes_get_400(gw):
    port = int(gw.url.rsplit(":", 1)[1])
    for headers in ("Sec-WebSocket-Version: 13\r\n",  # no key
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(("GET /ws/echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" + headers +
                       "\r\n").encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 400")


def test_idle_timeout_closes_with_1001(start_gateway, wsb):
    port = free_port()
    start_gateway(ws_config(port, wsb, websocket={"idle_timeout": "500ms", "ping_interval": "0s"}))

    async def main():
        async with connect(f"ws://127.0.0.1:{port}/ws/echo") as ws:
            started = time.monotonic()
            with pytest.raises(websockets.ConnectionClosed) as e:
                await ws.recv()
            return e.value.rcvd.code, time.monotonic() - started

    code, waited = run(main())
    assert code == 1001
    assert 0.4 < waited < 3


def test_pings_keep_a_live_client_and_pongs_stay_in_the_gateway(start_gateway, wsb):
    port = free_port()
    start_gateway(ws_config(port, wsb, websocket={"idle_timeout": "600ms", "ping_interval": "150ms"}))

    async def main():
        async with connect(f"ws://127.0.0.1:{port}/ws/echo") as ws:
            await asyncio.sleep(2)  # the client library answers the pings
            await ws.send("still here")
            assert await ws.recv() == "still here"

    run(main())


def test_message_size_limit_closes_with_1009(start_gateway, wsb):
    port = free_port()
    start_gateway(ws_config(port, wsb, websocket={"max_message_size": "1KiB"}))

    async def main():
        async with connect(f"ws://127.0.0.1:{port}/ws/echo") as ws:
            await ws.send("a" * 1024)
            assert await ws.recv() == "a" * 1024
            await ws.send("b" * 1025)
            with pytest.raises(websockets.ConnectionClosed) as e:
                await ws.recv()
            return e.value.rcvd.code

    assert run(main()) == 1009
    assert wait_until(lambda: any(c[1] == 1001 for c in wsb.closes), 5), wsb.closes


def raw_upgrade(port, path="/ws/echo", rcvbuf=None):
    """A client on a plain socket (which reads only when told): the 101 is checked and read."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    assert b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head
    return s


def read_frame(s):
    b0, b1 = s.recv(1)[0], s.recv(1)[0]
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", s.recv(2))[0]
    payload = b""
    while len(payload) < n:
        payload += s.recv(n - len(payload))
    return b0 & 0x0F, payload


def test_a_client_that_stops_reading_holds_the_backend_back(gw, wsb):
    """Backpressure through the tunnel: the backend pushes 256 MiB to a client that reads
    nothing; the backend's sends stop after what the socket buffers hold, and the gateway's
    memory stays flat."""
    before = gw.rss_kib()
    with raw_upgrade(int(gw.url.rsplit(":", 1)[1]), path="/ws/flood/4096/65536", rcvbuf=65536):
        time.sleep(2)
        sent = wsb.flooded
        time.sleep(1)
        assert wsb.flooded == sent, "the backend is held back"
        assert sent * 65536 < 64 << 20, f"{sent} messages went out to a client reading nothing"
        assert gw.rss_kib() - before < 32 * 1024


def test_unmasked_client_frame_is_a_protocol_error(gw):
    with raw_upgrade(int(gw.url.rsplit(":", 1)[1])) as s:
        s.sendall(b"\x81\x02hi")  # clients must mask
        opcode, payload = read_frame(s)
        assert opcode == 8 and struct.unpack("!H", payload[:2])[0] == 1002


# --------------------------------------------------------------------------------------
# Session manager


def test_sessions_listed_and_sent_to(gw):
    async def main():
        async with connect(gw.url + "/ws/echo") as a, connect(gw.url + "/ws/echo") as b:
            listed = sessions(gw)
            assert len(listed) == 2
            assert gw.metrics()["matchgate_websocket_sessions"] == 2
            assert {s["route"] for s in listed} == {"sockets"}
            assert all(s["peer"] == "127.0.0.1" and s["queued"] == 0 and s["since"].endswith("Z") for s in listed)
            assert sessions(gw, "?route=other") == []
            first = min(s["id"] for s in listed)
            status, _, _ = gw.admin_request("POST", f"/sessions/{first}/send", body=b"from the admin")
            assert status == 202
            got = await asyncio.wait_for(a.recv(), 5)
            assert got == "from the admin"
            status, _, body = gw.admin_request("POST", "/routes/sockets/broadcast", body=b"to all")
            assert status == 202 and json.loads(body)["sessions"] == 2
            assert await asyncio.wait_for(a.recv(), 5) == "to all"
            assert await asyncio.wait_for(b.recv(), 5) == "to all"
            assert gw.admin_request("POST", "/sessions/999999/send", body=b"x")[0] == 404
            assert gw.admin_request("POST", "/routes/nosuchroute/broadcast", body=b"x")[0] == 404
            assert gw.admin_request("POST", f"/sessions/{first}/explode")[0] == 404

    run(main())
    assert wait_until(lambda: sessions(gw) == [], 5)


def test_admin_messages_arrive_between_backend_messages(gw):
    async def main():
        async with connect(gw.url + "/ws/push/3000") as ws:
            await asyncio.sleep(0.05)
            sid = sessions(gw)[0]["id"]
            for i in range(20):
                gw.admin_request("POST", f"/sessions/{sid}/send", body=f"admin {i}".encode())
            got = []
            while len([m for m in got if m.startswith("admin")]) < 20 or len(got) < 3020:
                got.append(await asyncio.wait_for(ws.recv(), 5))
            pushes = [m for m in got if m.startswith("push")]
            admins = [m for m in got if m.startswith("admin")]
            assert pushes == [f"push {i}" for i in range(3000)]
            assert admins == [f"admin {i}" for i in range(20)]

    run(main(), timeout=60)


def test_admin_close_abort_and_drain(gw):
    async def closed_code(ws):
        with pytest.raises(websockets.ConnectionClosed) as e:
            while True:
                await asyncio.wait_for(ws.recv(), 5)
        return e.value.rcvd.code if e.value.rcvd else None

    async def main():
        async with connect(gw.url + "/ws/echo") as ws:
            sid = sessions(gw)[0]["id"]
            assert gw.admin_request("POST", f"/sessions/{sid}/close")[0] == 202
            assert await closed_code(ws) == 1000
        async with connect(gw.url + "/ws/echo") as ws:
            sid = sessions(gw)[0]["id"]
            assert gw.admin_request("POST", f"/sessions/{sid}/abort")[0] == 202
            assert await closed_code(ws) is None  # no close frame: the connection just ends
        async with connect(gw.url + "/ws/echo") as ws:
            sid = sessions(gw)[0]["id"]
            for i in range(5):
                gw.admin_request("POST", f"/sessions/{sid}/send", body=f"queued {i}".encode())
            assert gw.admin_request("POST", f"/sessions/{sid}/drain")[0] == 202
            got = []
            with pytest.raises(websockets.ConnectionClosed) as e:
                while True:
                    got.append(await asyncio.wait_for(ws.recv(), 5))
            assert got == [f"queued {i}" for i in range(5)]
            assert e.value.rcvd.code == 1000

    run(main())


def test_high_priority_send_jumps_queued_messages(gw):
    """A client that does not read lets the queue build up in the gateway; the high message
    then arrives before the normal ones still queued."""
    with raw_upgrade(int(gw.url.rsplit(":", 1)[1]), rcvbuf=4096) as s:
        sid = sessions(gw)[0]["id"]
        filler = b"f" * 60000
        for _ in range(200):  # 12 MB: more than the socket buffers hold
            gw.admin_request("POST", f"/sessions/{sid}/send", body=filler)
        assert wait_until(lambda: sessions(gw)[0]["queued"] > 5, 5)
        gw.admin_request("POST", f"/sessions/{sid}/send?priority=high", body=b"urgent")
        seen = 0
        while read_frame(s)[1] != b"urgent":
            seen += 1
        assert seen < 199, "the high message came before the queued normal ones"


def test_slow_client_is_closed_with_1008_beyond_max_queued(start_gateway, wsb):
    port, admin = free_port(), free_port()
    g = start_gateway(ws_config(port, wsb, admin, websocket={"max_queued_messages": 4}))
    with raw_upgrade(port, rcvbuf=4096):
        sid = sessions(g)[0]["id"]
        for _ in range(200):
            if g.admin_request("POST", f"/sessions/{sid}/send", body=b"s" * 60000)[0] == 404:
                break
        assert wait_until(lambda: sessions(g) == [], 10), "the slow client is closed"


def test_reload_keeps_sessions_and_shutdown_closes_with_1001(gw):
    async def main():
        async with connect(gw.url + "/ws/echo") as ws:
            await ws.send("before")
            assert await ws.recv() == "before"
            gw.reload()
            await ws.send("after")
            assert await ws.recv() == "after"
            gw.signal(signal.SIGTERM)
            with pytest.raises(websockets.ConnectionClosed) as e:
                await asyncio.wait_for(ws.recv(), 10)
            return e.value.rcvd.code

    assert run(main()) == 1001
    assert gw.wait(10) == 0
