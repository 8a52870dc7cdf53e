"""Shutdown with idle client connections open, and with requests that outlast shutdown_timeout."""

import signal
import socket
import threading
import time

from support import free_port, gateway_config, port_accepts, request, wait_until

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS


def test_idle_keepalive_clients_do_not_delay_shutdown(start_gateway, backend):
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API], shutdown_timeout="8s")
    gw = start_gateway(config)

    idle = []
    try:
        for i in range(3):  # HTTP/1.1 connections that served a request and then sit idle
            sock = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
            sock.sendall(f"GET /api/idle{i} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                assert chunk, "closed before the response"
                data += chunk
            assert data.startswith(b"HTTP/1.1 200")
            idle.append(sock)
        never_asked = socket.create_connection(("127.0.0.1", gw.port), timeout=5)  # connected, no request yet
        idle.append(never_asked)
        h2 = socket.create_connection(("127.0.0.1", gw.port), timeout=5)  # an idle HTTP/2 connection
        h2.sendall(H2_PREFACE)
        idle.append(h2)
        time.sleep(0.2)

        started = time.monotonic()
        gw.signal(signal.SIGTERM)
        rc = gw.wait(6)
        elapsed = time.monotonic() - started
    finally:
        for s in idle:
            s.close()

    assert rc == 0, f"exit status {rc} ({elapsed:.2f}s after SIGTERM):\n{gw.stderr()[-3000:]}"
    assert elapsed < 2.0, f"idle connections held shutdown for {elapsed:.2f}s"


def test_shutdown_timeout_cuts_long_requests(start_gateway, backend):
    config = gateway_config(free_port(), backends={"b": {"servers": [backend.url], "timeout": "30s"}}, routes=[API],
                            shutdown_timeout="1s")
    gw = start_gateway(config)
    result = {}

    def slow_client():
        try:
            result["response"] = request(gw.port, "GET", "/api/slow?ms=5000", timeout=10)
        except Exception as e:  # the gateway may cut it: that is the point
            result["error"] = e

    client = threading.Thread(target=slow_client)
    client.start()
    try:
        backend.wait_for("/api/slow")
        started = time.monotonic()
        gw.signal(signal.SIGTERM)
        assert wait_until(lambda: not port_accepts(gw.port), 0.8), "still accepting after SIGTERM"
        rc = gw.wait(6)
        elapsed = time.monotonic() - started
    finally:
        client.join(timeout=10)

    assert rc == 0, f"exit status {rc} after {elapsed:.2f}s:\n{gw.stderr()[-3000:]}"
    assert 0.8 <= elapsed < 2.5, f"exited {elapsed:.2f}s after SIGTERM with shutdown_timeout 1s"
    assert not client.is_alive(), "the client was left hanging after the gateway exited"


def test_sigint_is_graceful_too(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    assert request(gw.port, "GET", "/api/before")[0] == 200

    gw.signal(signal.SIGINT)

    assert gw.wait(5) == 0, gw.stderr()[-3000:]
