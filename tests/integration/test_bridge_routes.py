"""`bridge:` routes as configuration: the contract's customer-socket route passes --check, a
plain request on a bridge route gets 426 (never forwarded), an upgrade is answered by the
gateway itself (nothing reaches the backend before a message), and other routes keep serving.
The bridge's behaviour is in test_bridge.py."""

import socket

from support import free_port, gateway_config, request, run_matchgate, to_yaml


def bridge_config(port, backend):
    routes = [
        {"name": "customer-socket",
         "match": {"path": {"prefix": "/sockets/customer"}},
         "bridge": {"backend": "api", "path": "/${tenant}/api/customer/${msg.id}",
                    "method": {"from": "type", "map": {"add": "POST", "update": "PUT", "delete": "DELETE", "get": "GET"},
                               "default": "POST"},
                    "body": "payload", "priority": {"from": "priority", "high": ["urgent"]}}},
        {"name": "rest", "forward": "api"},
    ]
    return gateway_config(port, {"api": [backend.url]}, routes)


def test_contract_bridge_route_passes_check(tmp_path, backend):
    path = tmp_path / "bridge.yaml"
    path.write_text(to_yaml(bridge_config(free_port(), backend)) + "\n")
    res = run_matchgate("--check", "-c", path)
    assert res.returncode == 0, res.stderr


def test_bridge_error_is_reported_by_check(tmp_path, backend):
    conf = bridge_config(free_port(), backend)
    conf["routes"][0]["bridge"]["method"] = "post"
    path = tmp_path / "bad.yaml"
    path.write_text(to_yaml(conf) + "\n")
    res = run_matchgate("--check", "-c", path)
    assert res.returncode == 1
    assert "method 'post' must be upper case" in res.stderr, res.stderr


def test_plain_request_on_a_bridge_route_gets_426(start_gateway, backend):
    port = free_port()
    start_gateway(bridge_config(port, backend))
    status, headers, body = request(port, "GET", "/sockets/customer")
    assert status == 426
    assert headers["X-Matchgate-Error"] == "bad-request"
    assert headers["Upgrade"] == "websocket"
    assert b"customer-socket" in body
    assert backend.received() == [], "a bridge route never forwards a plain request"
    status, _, _ = request(port, "GET", "/other")
    assert status == 200


def test_upgrade_on_a_bridge_route_is_answered_by_the_gateway(start_gateway, backend):
    port = free_port()
    start_gateway(bridge_config(port, backend))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /sockets/customer HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head
        assert b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head
    assert backend.received() == []
