"""WebSocket tunnel through the real gateway to a real WebSocket backend (python3-websockets):
echo of text, binary and 1 MiB messages, close codes both ways, refusals and a backend that is
down, the idle timeout and pings, size and framing limits, the session manager's admin API
(list, send, priority, broadcast, close, abort, drain), reload and shutdown."""

import asyncio
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest
import websockets

from support import free_port, gateway_config, wait_until
from wsbackend import WsBackend, connect, newest_session, run, wait_sessions


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


def strace_attach(pid, out):
    """strace -f on every thread of pid, writing to `out`; returns the strace process once it is
    attached to all of them (or skips the test where strace is missing or may not trace)."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    calls = "read,readv,recvfrom,write,writev,sendto,sendmsg,epoll_ctl,fcntl,getpeername"
    err = open(f"{out}.err", "w+")
    st = subprocess.Popen(["strace", "-f", "-e", f"trace={calls}", "-o", str(out), "-p", str(pid)],
                          stdout=subprocess.DEVNULL, stderr=err)
    # "Process N attached with T threads": strace writes it once it traces all of them
    if not wait_until(lambda: "attached" in open(f"{out}.err").read() or st.poll() is not None, 10) \
            or st.poll() is not None:
        st.kill()
        pytest.skip(f"strace could not attach: {open(f'{out}.err').read()[-300:]}")
    return st


def strace_counts(st, out):
    """Stops strace (it detaches and flushes on SIGINT) and counts its calls by name."""
    st.send_signal(signal.SIGINT)
    st.wait(timeout=10)
    counts = {}
    for line in open(out):
        m = re.match(r"\d+\s+(\w+)\(", line)  # "<... x resumed>" lines are the second half of a call
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def test_the_relay_makes_one_read_and_one_write_per_message_each_way(gw, tmp_path):
    """The relay's system calls, counted by strace on the gateway (issue 15: as few as nginx's):
    a message and its echo cost one read and one writev on each side of the tunnel and no
    epoll_ctl, so beyond the tunnel's setup the counts grow by 2 reads and 2 writes per message;
    and the setup makes no fcntl and no getpeername (h2o patch 0008: accept4 and socket() make
    the sockets non-blocking, accept4 gives the peer's address)."""
    out = tmp_path / "strace.out"
    st = strace_attach(gw.pid, out)
    n = 200
    try:
        with raw_upgrade(int(gw.url.rsplit(":", 1)[1])) as s:
            for i in range(n):
                s.sendall(masked_frame(1, b"message %04d" % i))
                assert read_frame(s) == (1, b"message %04d" % i)
            counts = strace_counts(st, out)
    finally:
        if st.poll() is None:
            st.kill()
    reads = sum(counts.get(c, 0) for c in ("read", "readv", "recvfrom"))
    writes = sum(counts.get(c, 0) for c in ("write", "writev", "sendto", "sendmsg"))
    # setup: the upgrade request, the backend's 101 and a few calls of other threads
    assert 2 * n <= reads <= 2 * n + 10, counts
    assert 2 * n <= writes <= 2 * n + 10, counts
    assert counts.get("epoll_ctl", 0) <= 4, counts  # the two sockets' registrations, not per message
    assert counts.get("fcntl", 0) == 0 and counts.get("getpeername", 0) == 0, counts


def test_a_big_message_is_read_in_one_go(gw, tmp_path):
    """A direction that carries big messages reads into a 96 KiB buffer: a 60,000-byte message
    takes about one read per hop (it was 5: h2o's 8 KiB buffer doubled while reads filled it),
    whatever the TCP segments it came in. Counted by strace on the gateway, over 20 messages."""
    out = tmp_path / "strace.out"
    with raw_upgrade(int(gw.url.rsplit(":", 1)[1])) as s:
        s.sendall(masked_frame(2, b"w" * 60000))  # the first one sets the directions' buffers
        assert read_frame(s) == (2, b"w" * 60000)
        st = strace_attach(gw.pid, out)
        n = 20
        try:
            for i in range(n):
                payload = bytes([i]) * 60000
                s.sendall(masked_frame(2, payload))
                assert read_frame(s) == (2, payload)
            counts = strace_counts(st, out)
        finally:
            if st.poll() is None:
                st.kill()
    reads = sum(counts.get(c, 0) for c in ("read", "readv", "recvfrom"))
    # 2 per message when each arrives whole; a message split over two wake-ups costs one more
    assert 2 * n <= reads <= 3 * n, counts


# --------------------------------------------------------------------------------------
# Session manager


def test_sessions_listed_and_sent_to(gw):
    async def main():
        async with connect(gw.url + "/ws/echo") as a, connect(gw.url + "/ws/echo") as b:
            listed = wait_sessions(gw, 2)
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
            assert gw.admin_request("POST", f"/sessions/{first}/send", body=b"\xff\xfe")[0] == 400, "not UTF-8"
            assert gw.admin_request("POST", f"/sessions/{first}/explode")[0] == 404

    run(main())
    assert wait_until(lambda: sessions(gw) == [], 5)


def test_admin_messages_arrive_between_backend_messages(gw):
    async def main():
        async with connect(gw.url + "/ws/push/3000") as ws:
            await asyncio.sleep(0.05)
            sid = newest_session(gw)
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
            sid = newest_session(gw)
            assert gw.admin_request("POST", f"/sessions/{sid}/close")[0] == 202
            assert await closed_code(ws) == 1000
        async with connect(gw.url + "/ws/echo") as ws:
            sid = newest_session(gw, after=sid)
            assert gw.admin_request("POST", f"/sessions/{sid}/abort")[0] == 202
            assert await closed_code(ws) is None  # no close frame: the connection just ends
        async with connect(gw.url + "/ws/echo") as ws:
            sid = newest_session(gw, after=sid)
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
        sid = newest_session(gw)
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
        sid = newest_session(g)
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


# --------------------------------------------------------------------------------------
# Edges found by review: sessions before they open, frame boundaries, sizes


def masked_frame(opcode, payload, fin=True):
    """A client frame (masked), with a 16-bit length when needed."""
    key = os.urandom(4)
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class RawWsBackend:
    """A WebSocket server on a plain socket, so that a test decides every byte it sends: it
    answers one upgrade (or, with answer=False, never answers it) and then runs `script`."""

    def __init__(self, answer=True, script=None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.answer, self.script = answer, script
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        c, _ = self.sock.accept()
        self.conns.append(c)
        head = b""
        while b"\r\n\r\n" not in head:
            head += c.recv(4096)
        if not self.answer:
            return
        key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
        accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        if self.script:
            self.script(c)

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


def test_a_tunnel_is_a_session_only_once_open(start_gateway):
    """While the backend has not answered the upgrade there is no session to act on (an admin
    order or a shutdown then could only meet a half-made tunnel); the client gets 504."""
    backend = RawWsBackend(answer=False)
    port, admin = free_port(), free_port()
    conf = gateway_config(port, {"live": {"servers": [f"ws://127.0.0.1:{backend.port}"], "timeout": "1s"}},
                          [{"name": "sockets", "forward": "live"}], admin={"address": f"127.0.0.1:{admin}"})
    g = start_gateway(conf)
    result = {}

    def client():
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            result["head"] = s.recv(4096)

    t = threading.Thread(target=client)
    t.start()
    assert wait_until(lambda: backend.conns, 5)
    assert sessions(g) == []
    t.join(10)
    assert result["head"].startswith(b"HTTP/1.1 504"), result
    backend.close()


def test_gateway_frames_wait_for_the_end_of_the_frame_in_progress(start_gateway):
    """The backend sends half a frame, the admin API sends a message, then the rest of the frame:
    the admin message comes after the whole frame, never inside it."""
    sent_half = threading.Event()
    go_on = threading.Event()

    def script(c):
        c.sendall(b"\x82\x7e\x03\xe8" + b"A" * 500)  # binary, 1000 bytes: the first half
        sent_half.set()
        go_on.wait(10)
        c.sendall(b"B" * 500)
        time.sleep(1)

    backend = RawWsBackend(script=script)
    port, admin = free_port(), free_port()
    conf = gateway_config(port, {"live": [f"ws://127.0.0.1:{backend.port}"]}, [{"name": "sockets", "forward": "live"}],
                          admin={"address": f"127.0.0.1:{admin}"})
    g = start_gateway(conf)
    with raw_upgrade(port, "/x") as s:
        assert sent_half.wait(5)
        assert wait_until(lambda: len(sessions(g)) == 1, 5)
        assert g.admin_request("POST", f"/sessions/{newest_session(g)}/send", body=b"HELLO")[0] == 202
        time.sleep(0.3)
        go_on.set()
        assert read_frame(s) == (2, b"A" * 500 + b"B" * 500)
        assert read_frame(s) == (1, b"HELLO")
    backend.close()


def test_a_message_too_big_after_another_frame_still_gets_1009(start_gateway, wsb):
    port = free_port()
    start_gateway(ws_config(port, wsb, websocket={"max_message_size": "1KiB"}))
    with raw_upgrade(port) as s:
        # one write: a small whole message, then the first fragment of one over the limit
        s.sendall(masked_frame(1, b"small") + masked_frame(1, b"x" * 2000, fin=False))
        opcode, payload = read_frame(s)
        while opcode != 8:  # the echo of "small" may come first
            opcode, payload = read_frame(s)
        assert struct.unpack("!H", payload[:2])[0] == 1009


# --------------------------------------------------------------------------------------
# What the client's upgrade request may and may not carry through the tunnel (issue 13)

UPGRADE_KEY = "dGhlIHNhbXBsZSBub25jZQ=="
UPGRADE_ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def upgrade_answer(port, path, extra=""):
    """Sends an upgrade with `extra` header lines (CRLF-terminated) and returns the answer's head and
    whether the gateway closed the connection after a refusal."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall((f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n{extra}"
                   f"Sec-WebSocket-Key: {UPGRADE_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            assert chunk, f"closed without an answer: {data!r}"
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0]
        closed = False
        if not head.startswith(b"HTTP/1.1 101"):
            s.settimeout(3)
            try:
                while s.recv(4096):
                    pass
                closed = True
            except (socket.timeout, TimeoutError):
                closed = False
            except ConnectionResetError:
                closed = True
        return head, closed


def test_client_connection_header_cannot_remove_what_a_tunnel_route_adds(start_gateway, wsb):
    port = free_port()
    conf = gateway_config(port, {"live": [wsb.url]}, [
        {"name": "sockets", "actions": [{"set_header": {"X-Tenant": "acme", "Authorization": "Bearer internal"}}],
         "forward": "live"}])
    start_gateway(conf)
    head, _ = upgrade_answer(port, "/echo", "Connection: Upgrade, X-Tenant, Authorization, X-Forwarded-For\r\n"
                                            "X-Tenant: mallory\r\nAuthorization: Bearer stolen\r\nX-Kept: 1\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    path, headers = wsb.handshakes[-1]
    assert headers["x-tenant"] == "acme"
    assert headers["authorization"] == "Bearer internal"
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-kept"] == "1"
    assert headers["connection"].lower() == "upgrade", "the backend's Connection is the tunnel's own"


@pytest.mark.parametrize("extra", [
    "Connection: Upgrade\r\nX-A: a\r\n :  Transfer-Encoding: chunked\r\n",  # the obs-fold
    "Connection: Upgrade\r\nX-A: a\r\n\tcontinued\r\n",
    "Connection: Upgrade\r\nHost: y\r\n",  # a second Host
])
def test_malformed_upgrade_requests_never_reach_the_backend(gw, wsb, extra):
    port = int(gw.url.rsplit(":", 1)[1])
    before = len(wsb.handshakes)
    head, closed = upgrade_answer(port, "/ws/echo", extra)
    assert head.startswith(b"HTTP/1.1 400"), head
    assert b"x-matchgate-error: bad-request" in head.lower()
    assert closed, "the connection stays open after a framing error"
    time.sleep(0.2)
    assert len(wsb.handshakes) == before, wsb.handshakes[before:]


def test_a_folded_line_in_the_backend_answer_to_the_upgrade_is_a_502(start_gateway, raw_backend_factory):
    def folded_101(stream, backend):
        stream.read_until(b"\r\n\r\n")
        stream.sock.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             f"Sec-WebSocket-Accept: {UPGRADE_ACCEPT}\r\nSec-WebSocket-Protocol: chat\r\n"
                             " Set-Cookie: injected=1\r\n\r\n").encode())
        stream.read_to_eof(timeout=3)

    be = raw_backend_factory(folded_101)
    port = free_port()
    start_gateway(gateway_config(port, {"live": [be.url]}, [{"name": "sockets", "forward": "live"}]))
    head, _ = upgrade_answer(port, "/x", "Connection: Upgrade\r\n")
    assert head.startswith(b"HTTP/1.1 502"), head
    assert b"x-matchgate-error: bad-gateway-response" in head.lower()
    assert b"injected" not in head
