"""https:// and HTTP/2 backends (libcurl behind the backend seam): a CA, server and client
certificates made with openssl for each test; TLS backends in Python on 127.0.0.1.

Verification is on by default (an unknown CA, a wrong name: 502 backend-tls), tls.ca, verify:
false, server_name (sent as SNI and verified), mTLS with certificate/key, a TLS failure moving
on to the next server, HTTP/2 over TLS by ALPN and h2c by prior knowledge with requests
multiplexed on one connection, the bridge's calls to an https:// backend, a WebSocket upgrade
to an https:// server refused with 502 backend-tls, and the configuration errors of --check."""

import asyncio
import json
import subprocess
import threading

import pytest
import websockets

from support import free_port, gateway_config, request, run_matchgate, to_yaml
from tlsbackend import H2Backend, Pki, TlsBackend, wait_for

ROUTES = [{"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}]


@pytest.fixture
def pki(tmp_path):
    d = tmp_path / "pki"
    d.mkdir()
    return Pki(d)


@pytest.fixture
def servers():
    started = []
    yield started
    for s in started:
        s.stop()


def tls_backend(servers, pki, name="tls1", client_cert=False):
    b = TlsBackend(name, pki, client_cert=client_cert)
    servers.append(b)
    return b


def h2_backend(servers, name, pki=None):
    b = H2Backend(name, pki)
    servers.append(b)
    return b


def backend_conf(urls, **extra):
    conf = {"servers": list(urls), "connect_timeout": "2s", "timeout": "10s"}
    conf.update(extra)
    return conf


def start(start_gateway, backend, routes=ROUTES, **top):
    return start_gateway(gateway_config(free_port(), {"b": backend}, routes, **top))


def get_json(gw, path, **kw):
    status, headers, body = request(gw.port, "GET", path, **kw)
    assert status == 200, (status, dict(headers), body)
    return json.loads(body)


def expect_tls_error(gw, path, *words):
    status, headers, body = request(gw.port, "GET", path)
    assert status == 502, (status, body)
    assert headers["X-Matchgate-Error"] == "backend-tls", dict(headers)
    for w in words:
        assert w in body.decode(), body
    return body.decode()


# ---------------------------------------------------------------------------------------
# HTTP/1.1 over TLS


def test_https_forward_with_ca(start_gateway, servers, pki):
    b = tls_backend(servers, pki)
    gw = start(start_gateway, backend_conf([b.url + "/pre"], tls={"ca": str(pki.ca)}))

    echo = get_json(gw, "/api/x?q=1", headers={"X-Custom": "yes"})
    assert (echo["backend"], echo["path"], echo["query"]) == ("tls1", "/pre/api/x", "q=1")
    assert echo["headers"]["x-custom"] == "yes"
    res = request(gw.port, "POST", "/api/post", body=b"z" * 100000)
    assert res[0] == 200 and json.loads(res[2])["body_bytes"] == 100000
    assert set(b.sni) == {None}, "no SNI is sent for an address"
    # keep-alive: sequential requests reuse one TLS connection per worker
    for _ in range(10):
        get_json(gw, "/api/again")
    assert b.connections <= 2, b.connections


def test_unknown_ca_is_refused_by_default(start_gateway, servers, pki):
    b = tls_backend(servers, pki)
    gw = start(start_gateway, backend_conf([b.url]))
    expect_tls_error(gw, "/api/x", "certificate")
    assert b.received() == []


def test_wrong_ca_is_refused(start_gateway, servers, pki):
    b = tls_backend(servers, pki)
    gw = start(start_gateway, backend_conf([b.url], tls={"ca": str(pki.other_ca)}))
    expect_tls_error(gw, "/api/x", "certificate")
    assert b.received() == []


def test_wrong_server_name_is_refused(start_gateway, servers, pki):
    b = tls_backend(servers, pki)
    gw = start(start_gateway, backend_conf([b.url], tls={"ca": str(pki.ca), "server_name": "wrong.example"}))
    expect_tls_error(gw, "/api/x", "wrong.example")
    assert b.received() == []


def test_server_name_is_sent_and_verified(start_gateway, servers, pki):
    b = tls_backend(servers, pki)
    gw = start(start_gateway, backend_conf([b.url], tls={"ca": str(pki.ca), "server_name": "localhost"}))
    echo = get_json(gw, "/api/sni", headers={"Host": "app.example"})
    assert echo["headers"]["host"] == "app.example", "the Host header stays the request's"
    assert b.sni and set(b.sni) == {"localhost"}, b.sni


def test_verify_false_accepts_any_certificate(start_gateway, servers, pki):
    b = tls_backend(servers, pki)
    gw = start(start_gateway, backend_conf([b.url], tls={"verify": False, "server_name": "wrong.example"}))
    assert get_json(gw, "/api/x")["backend"] == "tls1"


def test_mtls_with_client_certificate(start_gateway, servers, pki):
    b = tls_backend(servers, pki, client_cert=True)
    tls = {"ca": str(pki.ca), "certificate": str(pki.client), "key": str(pki.client_key)}
    gw = start(start_gateway, backend_conf([b.url], tls=tls))
    assert get_json(gw, "/api/m")["path"] == "/api/m"


def test_mtls_without_client_certificate_fails(start_gateway, servers, pki):
    b = tls_backend(servers, pki, client_cert=True)
    gw = start(start_gateway, backend_conf([b.url], tls={"ca": str(pki.ca)}))
    expect_tls_error(gw, "/api/m")
    assert b.received() == []


def test_tls_failure_goes_on_to_the_next_server(start_gateway, servers, pki):
    bad = tls_backend(servers, pki, "bad", client_cert=True)  # refuses us: no client certificate
    good = tls_backend(servers, pki, "good")
    gw = start(start_gateway, backend_conf([bad.url, good.url], balance="first_available", tls={"ca": str(pki.ca)}))
    assert get_json(gw, "/api/retry")["backend"] == "good"
    # a POST is not retried: the failure is the client's answer
    status, headers, _ = request(gw.port, "POST", "/api/write", body=b"x")
    assert (status, headers["X-Matchgate-Error"]) == (502, "backend-tls")


def test_mixed_http_and_https_servers(start_gateway, servers, pki, backend):
    b = tls_backend(servers, pki)
    gw = start(start_gateway, backend_conf([b.url, backend.url], tls={"ca": str(pki.ca)}))
    seen = {get_json(gw, f"/api/{i}")["backend"] for i in range(6)}
    assert seen == {"tls1", "backend1"}


# ---------------------------------------------------------------------------------------
# HTTP/2


def concurrent_gets(gw, paths):
    results = [None] * len(paths)

    def one(i):
        results[i] = request(gw.port, "GET", paths[i], timeout=20)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(paths))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_h2_over_tls_multiplexes(start_gateway, servers, pki):
    b = h2_backend(servers, "h2tls", pki)
    gw = start(start_gateway, backend_conf([b.url], protocol="h2", tls={"ca": str(pki.ca)}), workers=1)

    echo = get_json(gw, "/api/one?x=1", headers={"X-Custom": "h2"})
    assert (echo["backend"], echo["method"], echo["path"], echo["query"]) == ("h2tls", "GET", "/api/one", "x=1")
    assert echo["headers"]["x-custom"] == "h2"
    assert echo["headers"][":authority"] == f"127.0.0.1:{gw.port}"
    status, _, body = request(gw.port, "POST", "/api/body", body=b"y" * 70000)
    assert status == 200 and json.loads(body)["body_bytes"] == 70000
    results = concurrent_gets(gw, ["/api/slow"] * 10)
    assert [r[0] for r in results] == [200] * 10
    assert b.protocols == ["h2"] * len(b.protocols) and b.protocols
    assert b.connections == 1, "one worker multiplexes its requests on one connection"
    assert b.max_streams >= 5, b.max_streams


def curl_reuses_h2c():
    """libcurl before 8.0.0 breaks reused h2c connections (curl issue 10634): matchgate gives each h2c
    exchange a connection of its own there."""
    res = subprocess.run(["curl-config", "--vernum"], capture_output=True, text=True, check=True)
    return int(res.stdout.strip(), 16) >= 0x080000


def test_h2c_prior_knowledge(start_gateway, servers):
    b = h2_backend(servers, "h2c")
    gw = start(start_gateway, backend_conf([b.url], protocol="h2c"), workers=1)

    echo = get_json(gw, "/api/c", headers={"X-Custom": "h2c"})
    assert (echo["backend"], echo["headers"][":scheme"], echo["headers"]["x-custom"]) == ("h2c", "http", "h2c")
    assert get_json(gw, "/api/again")["path"] == "/api/again", "a second exchange after the first"
    status, _, body = request(gw.port, "POST", "/api/body", body=b"y" * 70000)
    assert status == 200 and json.loads(body)["body_bytes"] == 70000
    results = concurrent_gets(gw, ["/api/slow"] * 10)
    assert [r[0] for r in results] == [200] * 10, [r[2] for r in results]
    if curl_reuses_h2c():
        assert b.connections == 1
        assert b.max_streams >= 5, b.max_streams
    else:
        assert b.connections == 13, "a connection per exchange"


def test_h2_verification_failure(start_gateway, servers, pki):
    b = h2_backend(servers, "h2tls", pki)
    gw = start(start_gateway, backend_conf([b.url], protocol="h2"))
    expect_tls_error(gw, "/api/x", "certificate")
    assert b.received() == []


# ---------------------------------------------------------------------------------------
# WebSockets


def test_bridge_calls_an_https_backend(start_gateway, servers, pki):
    b = tls_backend(servers, pki)
    routes = [{"name": "sock", "match": {"path": {"prefix": "/sock"}},
               "bridge": {"backend": "b", "path": "/api/item/${msg.id}", "method": "GET"}}]
    gw = start(start_gateway, backend_conf([b.url], tls={"ca": str(pki.ca)}), routes)

    async def talk():
        async with websockets.connect(f"ws://127.0.0.1:{gw.port}/sock", open_timeout=10) as ws:
            await ws.send(json.dumps({"id": "7", "type": "get"}))
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    answer = asyncio.run(talk())
    assert answer["status"] == 200, answer
    assert answer["body"]["path"] == "/api/item/7", answer
    assert b.received("/api/item/7")


def test_websocket_tunnel_to_https_server_is_refused(start_gateway, servers, pki):
    b = tls_backend(servers, pki)
    gw = start(start_gateway, backend_conf([b.url], tls={"ca": str(pki.ca)}))
    headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
               "Sec-WebSocket-Version": "13"}
    status, resp, body = request(gw.port, "GET", "/api/ws", headers=headers)
    assert (status, resp["X-Matchgate-Error"]) == (502, "backend-tls")
    assert b"WebSocket tunnels to https:// servers are not supported" in body
    assert b.received() == [] and b.connections == 0


# ---------------------------------------------------------------------------------------
# Configuration errors, as --check shows them


def check(tmp_path, backend):
    path = tmp_path / "gw.yaml"
    path.write_text(to_yaml(gateway_config(free_port(), {"b": backend}, ROUTES)) + "\n")
    return run_matchgate("--check", "-c", path)


def test_check_reports_tls_errors_with_positions(tmp_path, pki):
    cases = [
        (backend_conf(["https://127.0.0.1:1"], tls={"ca": str(tmp_path / "nope.pem")}), "cannot read ca"),
        (backend_conf(["https://127.0.0.1:1"], tls={"key": str(pki.client_key)}), "tls.certificate and tls.key go together"),
        (backend_conf(["https://127.0.0.1:1"], tls={"certificate": str(pki.client), "key": str(pki.server_key)}),
         "does not belong to certificate"),
        (backend_conf(["https://127.0.0.1:1"], tls={"ca": str(pki.ca_key)}), "holds no PEM certificate"),
        (backend_conf(["http://127.0.0.1:1"], protocol="h2"), "protocol h2 is HTTP/2 over TLS"),
        (backend_conf(["https://127.0.0.1:1"], protocol="h2c"), "protocol h2c is HTTP/2 without TLS"),
        (backend_conf(["http://127.0.0.1:1"], protocol="http2"), "unknown protocol 'http2'"),
        (backend_conf(["http://127.0.0.1:1"], tls={"verify": False}), "tls is only used with https:// servers"),
        (backend_conf(["wss://127.0.0.1:1"]), "wss:// servers are not supported"),
    ]
    for conf, words in cases:
        res = check(tmp_path, conf)
        assert res.returncode == 1, (conf, res.stderr)
        assert words in res.stderr, (conf, res.stderr)
        assert "gw.yaml:" in res.stderr and res.stderr.split("gw.yaml:")[1].split(":")[0].isdigit(), res.stderr
    ok = check(tmp_path, backend_conf(["https://127.0.0.1:1"], protocol="h2",
                                      tls={"ca": str(pki.ca), "certificate": str(pki.client), "key": str(pki.client_key)}))
    assert ok.returncode == 0, ok.stderr


# ---------------------------------------------------------------------------------------
# Active health checks of https:// servers use the backend's tls (issue 16 with issue 15)


def server_states(gw):
    status, _, body = gw.admin_request("GET", "/backends")
    assert status == 200, body
    return json.loads(body)["backends"][0]["servers"]


@pytest.mark.parametrize("tls", [{"server_name": "localhost"}, {}])
def test_health_checks_of_an_https_server_use_its_tls(start_gateway, servers, pki, tls):
    # a private CA: checks made with the system's CAs, or with the url's address as the name,
    # would fail every time and take a healthy server out
    b = tls_backend(servers, pki)
    conf = backend_conf([b.url], tls={"ca": str(pki.ca), **tls},
                        health={"path": "/healthz", "interval": "100ms", "healthy": 1, "unhealthy": 1})
    cfg = gateway_config(free_port(), {"b": conf}, ROUTES)
    cfg["admin"] = {"address": f"127.0.0.1:{free_port()}"}
    gw = start_gateway(cfg)
    assert wait_for(lambda: (server_states(gw)[0]["last_check"] or {}).get("status") == 200, 5), server_states(gw)
    assert server_states(gw)[0]["state"] == "healthy"
    assert get_json(gw, "/api/x")["backend"] == "tls1"
    if tls:
        assert "localhost" in b.sni, b.sni
