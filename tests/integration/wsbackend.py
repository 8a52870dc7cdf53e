"""A real WebSocket backend (python3-websockets) on 127.0.0.1, in its own thread and event loop.

Paths: /echo echoes every message (text or binary); /close/<code> closes at once with that code;
/push/<n> sends n numbered text messages as fast as the client takes them, then waits;
/flood/<n>/<size> sends n binary messages of size bytes, counting them in `flooded`;
/refuse answers the upgrade with 403. Every handshake's request headers are recorded, with the
close code the backend saw from the client.
"""

import asyncio
import http
import threading

import websockets


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
