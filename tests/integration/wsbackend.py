"""A real WebSocket backend (python3-websockets) on 127.0.0.1, in its own thread and event loop.

Paths: /echo echoes every message (text or binary); /close/<code> closes at once with that code;
/push/<n> sends n numbered text messages as fast as the client takes them, then waits;
/flood/<n>/<size> sends n binary messages of size bytes, counting them in `flooded`;
/refuse answers the upgrade with 403. Every handshake's request headers are recorded, with the
close code the backend saw from the client.
"""

import asyncio
import http
import json
import threading
import time

import websockets


def run(coro, timeout=60):
    """Runs a client coroutine to its end, within `timeout` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def connect(url, **kw):
    """A python3-websockets client as the tests want it: no size limit, no pings of its own, no
    compression (so frames through a tunnel are what was sent)."""
    return websockets.connect(url, max_size=None, ping_interval=None, compression=None, open_timeout=20, **kw)


def wait_sessions(g, n, query="", timeout=5):
    """GET /sessions until it lists n sessions, and returns them: a session registers once its
    101 has been written, which may be a moment after the client has read it."""
    deadline = time.monotonic() + timeout
    while True:
        listed = json.loads(g.admin_request("GET", "/sessions" + query, timeout=30)[2])["sessions"]
        if len(listed) == n or time.monotonic() > deadline:
            assert len(listed) == n, listed
            return listed
        time.sleep(0.02)


def newest_session(g, after=0, timeout=5):
    """The id of a session newer than `after`, once registered."""
    deadline = time.monotonic() + timeout
    while True:
        ids = [s["id"] for s in json.loads(g.admin_request("GET", "/sessions")[2])["sessions"] if s["id"] > after]
        if ids:
            return max(ids)
        assert time.monotonic() < deadline, f"no session after {after}"
        time.sleep(0.02)


class WsBackend:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.handshakes = []  # (path, headers dict lower-cased)
        self.closes = []  # (path, code, reason) seen from the client
        self.received = []  # (path, message)
        self.flooded = 0
        self.lock = threading.Lock()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        assert started.wait(10), "the WebSocket backend did not start"
        self.url = f"ws://127.0.0.1:{self.port}"

    def _run(self, started):
        asyncio.set_event_loop(self.loop)

        async def serve():
            self.server = await websockets.serve(self._handler, "127.0.0.1", 0, process_request=self._process_request,
                                                 max_size=None, ping_interval=None, compression=None, close_timeout=2)
            self.port = self.server.sockets[0].getsockname()[1]
            started.set()

        self.loop.run_until_complete(serve())
        self.loop.run_forever()

    async def _process_request(self, path, headers):
        with self.lock:
            self.handshakes.append((path, {k.lower(): v for k, v in headers.raw_items()}))
        if path == "/refuse":
            return http.HTTPStatus.FORBIDDEN, [("Content-Type", "text/plain"), ("Content-Length", "8")], b"refused\n"
        return None

    async def _handler(self, ws, path):
        try:
            if path.startswith("/close/"):
                await ws.close(int(path.rsplit("/", 1)[1]), "backend closes")
            elif path.startswith("/flood/"):
                n, size = map(int, path.split("/")[2:4])
                chunk = b"\xab" * size
                for _ in range(n):
                    await ws.send(chunk)
                    self.flooded += 1
                await ws.wait_closed()
            elif path.startswith("/push/"):
                for i in range(int(path.rsplit("/", 1)[1])):
                    await ws.send(f"push {i}")
                await ws.wait_closed()
            else:
                async for message in ws:
                    with self.lock:
                        self.received.append((path, message))
                    await ws.send(message)
        except websockets.ConnectionClosed:
            pass
        with self.lock:
            self.closes.append((path, ws.close_code, ws.close_reason))

    def stop(self):
        async def close():
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
