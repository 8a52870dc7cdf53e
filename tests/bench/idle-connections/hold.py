#!/usr/bin/env python3
"""hold.py PORT N: opens N keep-alive connections to 127.0.0.1:PORT, sends one request on each and
reads its response, then holds them all, idle, until stdin closes. Prints "ready N" (connections
still open) once every one has its response, or "ready K" after 60 s when only K have. This is what
a pool of pre-connected clients looks like to a server: open, served once, waiting."""

import resource
import selectors
import socket
import sys
import time


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 64), hard))
    request = b"GET /ok HTTP/1.1\r\nHost: bench\r\n\r\n"
    sel = selectors.DefaultSelector()
    pending = {}
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        pending[s] = b""
        sel.register(s, selectors.EVENT_WRITE)
    served, deadline = [], time.monotonic() + 60
    while pending and time.monotonic() < deadline:
        for key, ev in sel.select(1.0):
            s = key.fileobj
            if ev & selectors.EVENT_WRITE:
                try:
                    s.send(request)
                except OSError:
                    sel.unregister(s)
                    del pending[s]
                    s.close()
                    continue
                sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                del pending[s]
                s.close()
                continue
            pending[s] += data
            if b"\r\n\r\n" in pending[s] and pending[s].endswith(b"ok\n"):
                sel.unregister(s)
                del pending[s]
                served.append(s)
    print(f"ready {len(served)}", flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
    open_now = 0
    for s in served:  # how many the server kept while the load ran
        try:
            s.setblocking(False)
            open_now += s.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            open_now += 1
        except OSError:
            pass
    print(f"still open {open_now}", flush=True)


if __name__ == "__main__":
    main()
