"""WebSocket upgrades are authenticated like any request: a tunnel and a bridge refuse an upgrade
without a valid token (401 before any backend is contacted), a bridged session keeps its claims
for its messages' templates, and a session whose token expires is closed with 1008, or kept with
websocket.on_token_expiry: keep."""

import asyncio
import json
import time

import pytest
import websockets

from auth_support import JwksServer, SigningKey, bearer, jwks, jwt_authenticator
from support import free_port, gateway_config
from wsbackend import WsBackend, connect, run


@pytest.fixture
def idp():
    key = SigningKey("ec", "w1")
    srv = JwksServer(jwks(key))
    yield key, srv
    srv.stop()


@pytest.fixture
def ws_backend():
    b = WsBackend()
    yield b
    b.stop()


def start(start_gateway, backend, ws_backend, srv, **ws_settings):
    port = free_port()
    routes = [{"name": "tunnel", "match": {"path": {"prefix": "/echo"}}, "auth": "corp", "forward": "ws"},
              {"name": "bridge", "match": {"path": {"prefix": "/sockets"}}, "auth": "corp",
               "bridge": {"backend": "api", "path": "/users/${claim.sub}/${msg.op}", "method": "POST"}}]
    conf = gateway_config(port, backends={"ws": [ws_backend.url], "api": [backend.url]},
                          auth={"corp": jwt_authenticator(srv.url)}, routes=routes)
    if ws_settings:
        conf["websocket"] = ws_settings
    return start_gateway(conf)


def refused_status(url, headers=None):
    async def go():
        try:
            async with connect(url, extra_headers=headers or {}):
                return 101
        except websockets.exceptions.InvalidStatusCode as e:
            return e.status_code
    return run(go())


def test_upgrades_without_a_valid_token_are_refused(start_gateway, backend, ws_backend, idp):
    key, srv = idp
    gw = start(start_gateway, backend, ws_backend, srv)
    assert refused_status(f"ws://127.0.0.1:{gw.port}/echo") == 401
    assert refused_status(f"ws://127.0.0.1:{gw.port}/sockets") == 401
    assert refused_status(f"ws://127.0.0.1:{gw.port}/echo", bearer(key.sign(exp=int(time.time()) - 600))) == 401
    assert ws_backend.handshakes == []

    async def echo():
        async with connect(f"ws://127.0.0.1:{gw.port}/echo", extra_headers=bearer(key.sign())) as ws:
            await ws.send("hello")
            return await ws.recv()
    assert run(echo()) == "hello"


def test_a_bridged_session_keeps_its_claims_for_its_messages(start_gateway, backend, ws_backend, idp):
    key, srv = idp
    gw = start(start_gateway, backend, ws_backend, srv)

    async def talk():
        async with connect(f"ws://127.0.0.1:{gw.port}/sockets", extra_headers=bearer(key.sign({"sub": "erin"}))) as ws:
            await ws.send(json.dumps({"id": 1, "op": "add"}))
            return json.loads(await ws.recv())
    answer = run(talk())
    assert answer["status"] == 200
    backend.wait_for("/users/erin/add")


@pytest.mark.parametrize("path", ["/echo", "/sockets"])
def test_a_session_is_closed_with_1008_when_its_token_expires(start_gateway, backend, ws_backend, idp, path):
    key, srv = idp
    gw = start(start_gateway, backend, ws_backend, srv)
    token = key.sign(exp=int(time.time()) + 2)

    async def wait_close():
        async with connect(f"ws://127.0.0.1:{gw.port}{path}", extra_headers=bearer(token)) as ws:
            started = time.monotonic()
            try:
                while True:
                    await ws.recv()
            except websockets.exceptions.ConnectionClosed as e:
                return e.code, time.monotonic() - started
    code, after = run(wait_close(), timeout=20)
    assert code == 1008
    assert after < 6


async def say(ws, path, op):
    """One message of the session and whether its answer came: the tunnel's echo, or the bridge's
    200 from the backend."""
    if path == "/echo":
        await ws.send(op)
        return await ws.recv() == op
    await ws.send(json.dumps({"id": op, "op": op}))
    return json.loads(await ws.recv())["status"] == 200


@pytest.mark.parametrize("path", ["/echo", "/sockets"])
def test_on_token_expiry_keep_lets_the_session_run(start_gateway, backend, ws_backend, idp, path):
    key, srv = idp
    gw = start(start_gateway, backend, ws_backend, srv, on_token_expiry="keep")
    token = key.sign({"sub": "erin"}, exp=int(time.time()) + 1)

    async def talk():
        async with connect(f"ws://127.0.0.1:{gw.port}{path}", extra_headers=bearer(token)) as ws:
            before = await say(ws, path, "before")
            await asyncio.sleep(2.5)  # past the token's exp
            return before, await say(ws, path, "after")
    assert run(talk()) == (True, True)
    if path == "/sockets":  # the session's claims outlive its token
        backend.wait_for("/users/erin/after")
