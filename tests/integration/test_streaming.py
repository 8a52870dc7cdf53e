"""Large responses: streamed byte-exact, with bounded memory, and clients that leave early."""

import hashlib
import http.client
import socket

from support import free_port, gateway_config, pattern_sha256, read_slowly, request

MiB = 1 << 20
API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}


def streaming_gateway(start_gateway, backend):
    backends = {"b": {"servers": [backend.url], "timeout": "60s"}}
    return start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))


def test_large_response_byte_exact(start_gateway, backend):
    gw = streaming_gateway(start_gateway, backend)
    n = 64 * MiB

    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request("GET", f"/api/bytes?n={n}")
        resp = conn.getresponse()
        assert resp.status == 200
        h, got = hashlib.sha256(), 0
        while chunk := resp.read(MiB):
            h.update(chunk)
            got += len(chunk)
    finally:
        conn.close()

    assert got == n
    assert h.hexdigest() == pattern_sha256(n)


def test_slow_reader_keeps_gateway_memory_bounded(start_gateway, backend):
    gw = streaming_gateway(start_gateway, backend)
    assert request(gw.port, "GET", "/api/warmup")[0] == 200
    baseline = gw.rss_kib()

    # about 3 s of reading 16 KiB every 20 ms (~0.8 MB/s) while the backend could
    # deliver 256 MiB at once: the gateway has to push back, not buffer
    read, peak, _ = read_slowly(gw, f"GET /api/bytes?n={256 * MiB} HTTP/1.1\r\nHost: t\r\n\r\n".encode())

    assert read > 100 * 1024, "the response did flow"
    growth_mib = (peak - baseline) / 1024
    assert growth_mib < 32, f"RSS grew by {growth_mib:.1f} MiB for a slow client"
    # the abandoned transfer must not break the gateway
    assert request(gw.port, "GET", "/api/after")[0] == 200


def test_client_disconnect_mid_response(start_gateway, backend):
    gw = streaming_gateway(start_gateway, backend)

    for abort in (False, True, False):
        sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        try:
            sock.sendall(f"GET /api/bytes?n={64 * MiB} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            got = 0
            while got < 256 * 1024:
                data = sock.recv(64 * 1024)
                assert data, "gateway closed the connection early"
                got += len(data)
            if abort:  # a reset instead of an orderly close
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        finally:
            sock.close()

    for i in range(5):
        assert request(gw.port, "GET", f"/api/still-serving{i}")[0] == 200
    assert gw.proc.poll() is None
