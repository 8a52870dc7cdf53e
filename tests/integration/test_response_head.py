"""The bytes of an HTTP/1.1 response head as the gateway writes them (h2o's flatten_headers,
which h2o patch 0014 writes without sprintf): status line, then Date, Connection and
Content-Length in that order, then the response's own fields, Server first (the gateway writes it
as a field, so that response actions may replace or remove it)."""

import re
import socket

from support import free_port, gateway_config

DATE = rb"[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT"


def head(port, raw):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, data
            data += chunk
    return data.split(b"\r\n\r\n", 1)[0] + b"\r\n"


def start(start_gateway):
    routes = [
        {"name": "hello", "match": {"path": "/hello"}, "respond": {"status": 200, "body": "hello\n"}},
        {"name": "big", "match": {"path": "/big"}, "respond": {"status": 200, "body": "x" * 123456}},
        {"name": "missing", "respond": {"status": 404, "body": "no such page\n"}},
    ]
    return start_gateway(gateway_config(free_port(), routes=routes))


def expect(got, status_line, connection, length):
    want = (re.escape(status_line) + rb"\r\nDate: " + DATE + rb"\r\nConnection: " + connection +
            rb"\r\nContent-Length: " + length + rb"\r\nserver: matchgate\r\n")
    assert re.match(want, got), got


def test_status_line_and_first_fields_byte_for_byte(start_gateway):
    gw = start(start_gateway)
    expect(head(gw.port, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"), b"HTTP/1.1 200 OK", b"keep-alive", b"6")
    expect(head(gw.port, b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n"), b"HTTP/1.1 200 OK", b"keep-alive", b"123456")
    expect(head(gw.port, b"GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"), b"HTTP/1.1 404 Not Found",
           b"close", b"13")
    # the response's own fields follow, each on its line
    got = head(gw.port, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
    assert re.search(rb"\r\nserver: matchgate\r\n(?:[A-Za-z0-9-]+: [^\r\n]*\r\n)+$", got), got
    assert got.lower().count(b"\r\nserver: ") == 1
    assert got.count(b"\r\nContent-Length: ") == 1
