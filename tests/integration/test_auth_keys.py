"""Keys and hostile tokens through the real gateway: a JWKS server on 127.0.0.1 that rotates its
keys (no reload; a new kid verifies on its first request, which waits for the fetch it asked
for), goes down, answers garbage, 10 MB, slowly or with 1,000 keys (the last good keys stay, and
the log names why); no usable key at all (503, not 401); a flood of invented kids (one fetch per
min_refresh); and each class of hostile token refused with its reason, never a crash, a hang or
a fetch."""

import base64
import hashlib
import hmac
import itertools
import json
import re
import time

import jwt
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from auth_support import JwksServer, SigningKey, bearer, jwks, jwt_authenticator
from h2client import END_HEADERS, END_STREAM, HEADERS, RST_STREAM, RawH2, frame
from support import free_port, gateway_config, request, wait_until


def start(start_gateway, backend, url, admin=False, **auth_over):
    port = free_port()
    top = {}
    if admin:
        top["admin"] = {"address": f"127.0.0.1:{free_port()}"}
    authn = jwt_authenticator(url, **auth_over)
    return start_gateway(gateway_config(port, backends={"app": [backend.url]}, auth={"corp": authn},
                                        routes=[{"name": "r", "auth": "corp", "forward": "app"}], **top))


def status_of(gw, token, path="/x"):
    return request(gw.port, "GET", path, headers=bearer(token))


def test_a_new_kid_is_picked_up_and_a_removed_one_stops_without_a_reload(start_gateway, backend):
    k1, k2 = SigningKey("rsa", "k1"), SigningKey("ec", "k2")
    srv = JwksServer(jwks(k1))
    try:
        gw = start(start_gateway, backend, srv.url,
                   jwks={"url": srv.url, "refresh": "2s", "min_refresh": "500ms", "timeout": "5s"})
        assert status_of(gw, k1.sign())[0] == 200
        srv.serve(jwks(k1, k2))
        t2 = k2.sign()
        # the unknown kid makes the gateway fetch at once (its request waits for that fetch)
        assert wait_until(lambda: status_of(gw, t2)[0] == 200, 5), \
            f"the new kid was never picked up ({srv.count()} fetches):\n{gw.stderr()[-2000:]}"
        srv.serve(jwks(k2))
        t1 = k1.sign()
        assert wait_until(lambda: status_of(gw, t1)[0] == 401, 8), \
            f"a removed key kept verifying ({srv.count()} fetches):\n{gw.stderr()[-2000:]}"
        assert 'error_description="the token\'s signing key is unknown"' in status_of(gw, t1)[1]["WWW-Authenticate"]
        assert status_of(gw, t2)[0] == 200
    finally:
        srv.stop()


def failures(k1):
    """Each failed fetch: what the server answers (body, status, delay) and the reason the log names,
    so that a size cap is told from a parse failure or a timeout."""
    many = {"keys": [dict(k1.jwk(), kid=f"k{i}") for i in range(1000)]}
    return {"down": (None, "Couldn't connect to server"),
            "garbage": ((b"\x00not json{", 200, 0.0), "not a JSON document"),
            "huge": ((b'{"keys": [' + b" " * (10 << 20) + b"]}", 200, 0.0), f"the answer is larger than {1 << 20} bytes"),
            "slow": ((jwks(k1), 200, 6.0), "Timeout was reached"),
            "many": ((many, 200, 0.0), "1000 keys: a set holds at most 100"),
            "status": ((jwks(k1), 500, 0.0), "status 500")}


@pytest.mark.parametrize("failure", ["down", "garbage", "huge", "slow", "many", "status"])
def test_a_failed_fetch_keeps_the_last_good_keys(start_gateway, backend, failure):
    k1 = SigningKey("rsa", "k1")
    srv = JwksServer(jwks(k1))
    try:
        gw = start(start_gateway, backend, srv.url, admin=True,
                   jwks={"url": srv.url, "refresh": "1s", "min_refresh": "1s", "timeout": "2s"})
        token = k1.sign()
        assert status_of(gw, token)[0] == 200
        before = gw.metrics()['matchgate_auth_jwks_fetch_failures_total{authenticator="corp"}']
        answer, reason = failures(k1)[failure]
        if answer is None:
            srv.stop()
        else:
            srv.serve(*answer)
        failed = wait_until(lambda: gw.metrics()['matchgate_auth_jwks_fetch_failures_total{authenticator="corp"}'] > before, 10)
        assert failed, gw.stderr()[-2000:]
        assert status_of(gw, token)[0] == 200
        assert status_of(gw, k1.sign())[0] == 200  # a token never cached: verified with the keys held
        assert gw.metrics()['matchgate_auth_jwks_keys{authenticator="corp"}'] == 1
        line = rf"matchgate: auth 'corp': fetching {re.escape(srv.url)} failed \({re.escape(reason)}.*\): keeping the 1 key held"
        assert re.search(line, gw.stderr()), gw.stderr()[-2000:]
    finally:
        if failure != "down":
            srv.stop()


def test_no_usable_key_is_503_not_401(start_gateway, backend):
    dead = f"http://127.0.0.1:{free_port()}/jwks.json"  # nobody listens
    gw = start(start_gateway, backend, dead)
    status, headers, _ = status_of(gw, SigningKey("rsa", "k1").sign())
    assert status == 503
    assert headers["X-Matchgate-Error"] == "auth-unavailable"
    assert int(headers["Retry-After"]) >= 1
    assert "WWW-Authenticate" not in headers
    assert status_of(gw, "")[0] == 401  # an empty credential is still the client's fault


def test_an_unknown_kid_is_fetched_for_its_first_request(start_gateway, backend):
    """refresh is 10m: only the unknown kid can make the gateway fetch, and the request that names
    it waits for that fetch rather than getting a 401."""
    k1, k2 = SigningKey("rsa", "k1"), SigningKey("ec", "k2")
    srv = JwksServer(jwks(k1))
    try:
        gw = start(start_gateway, backend, srv.url, admin=True,
                   jwks={"url": srv.url, "refresh": "10m", "min_refresh": "2s", "timeout": "5s"})
        outcome = lambda result: gw.metrics()[f'matchgate_auth_requests_total{{authenticator="corp",result="{result}"}}']
        assert status_of(gw, k1.sign())[0] == 200
        before = srv.count()
        srv.serve(jwks(k2))  # the identity provider rotated its key
        started = time.monotonic()
        status, headers, _ = status_of(gw, k2.sign())
        assert status == 200, headers.get("WWW-Authenticate")
        assert time.monotonic() - started < 7  # one fetch, within its timeout: far below refresh
        assert srv.count() - before == 1
        assert (outcome("ok"), outcome("unknown_key")) == (2, 0)  # counted once, when final
        status, headers, _ = status_of(gw, k1.sign())  # the rotated-out key went with that fetch
        assert status == 401 and "signing key is unknown" in headers["WWW-Authenticate"]
        assert outcome("unknown_key") == 1
    finally:
        srv.stop()


def test_a_request_reset_while_it_waits_for_the_keys_is_dropped(start_gateway, backend):
    """HTTP/2: the stream of a request waiting for a (slow) fetch is reset; the wait ends with it
    (nothing reaches the backend), and the connection and the fetch go on."""
    k1, k2 = SigningKey("rsa", "k1"), SigningKey("ec", "k2")
    srv = JwksServer(jwks(k1))
    try:
        gw = start(start_gateway, backend, srv.url, jwks={"url": srv.url, "refresh": "10m", "min_refresh": "2s", "timeout": "5s"})
        before = srv.count()
        srv.serve(jwks(k1, k2), delay=2.0)
        c = RawH2(gw.port)
        auth = lambda key: [(b"authorization", f"Bearer {key.sign()}".encode())]
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, c.request_block(b"/waits", extra=auth(k2))))
        assert wait_until(lambda: srv.count() > before, 5), "the unknown kid asked for no fetch"
        c.send(frame(RST_STREAM, 0, 1, (8).to_bytes(4, "big")))  # CANCEL
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, c.request_block(b"/known", extra=auth(k1))))
        assert c.response(3).status == 200
        c.close()
        assert status_of(gw, k2.sign())[0] == 200  # waits for the same fetch if it is still on its way
        assert srv.count() - before == 1
        assert [r.path for r in backend.received()] == ["/known", "/x"]
    finally:
        srv.stop()


def flood(gw, key, window, seconds):
    """Tokens with invented kids for `seconds`: each one 401. Returns when its first one was answered."""
    deadline, first = time.monotonic() + seconds, None
    for i in itertools.count():
        assert status_of(gw, key.sign(kid=f"invented-{window}-{i}"))[0] == 401
        first = first or time.monotonic()
        if time.monotonic() >= deadline:
            return first


def test_a_flood_of_invented_kids_costs_one_fetch_per_min_refresh(start_gateway, backend):
    """Two floods of a second each, min_refresh (4s) apart: exactly one fetch each. The window
    opens at the first ask, before the first answer; the floods end well inside it."""
    k1 = SigningKey("ec", "k1")
    srv = JwksServer(jwks(k1))
    try:
        gw = start(start_gateway, backend, srv.url, jwks={"url": srv.url, "refresh": "10m", "min_refresh": "4s", "timeout": "5s"})
        assert status_of(gw, k1.sign())[0] == 200
        before = srv.count()
        for window in range(2):
            first = flood(gw, k1, window, 1.0)
            time.sleep(max(0.0, first + 4.5 - time.monotonic()))  # past the window, for the next flood
            assert srv.count() - before == window + 1, f"window {window}"
        assert status_of(gw, k1.sign())[0] == 200
    finally:
        srv.stop()


def b64(data):
    return base64.urlsafe_b64encode(data if isinstance(data, bytes) else json.dumps(data).encode()).rstrip(b"=").decode()


def hostile_tokens(k1, counter_url):
    good = k1.sign()
    h, p, s = good.split(".")
    other_header = b64({"alg": "RS256", "kid": "k1", "typ": "other"})
    pem = k1.key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    hs_header = b64({"alg": "HS256", "kid": "k1"})
    hs_sig = b64(hmac.new(pem, f"{hs_header}.{p}".encode(), hashlib.sha256).digest())
    deep = b'{"a":' + b"[" * 10000 + b"]" * 10000 + b"}"
    # signed by the right key, so that the payload itself is what is refused (the gateway reads a
    # payload only once its signature holds)
    signed = lambda payload: jwt.api_jws.PyJWS().encode(payload, k1.key, algorithm="RS256", headers={"kid": "k1"})
    duplicate = b'{"alg":"RS256","alg":"RS256","kid":"k1"}'
    return {
        "not three parts": ("a.b", "malformed"),
        "bad base64url": (f"{h}.{p}+/=.{s}", "malformed"),
        "header not an object": (f"{b64([1, 2])}.{p}.{s}", "malformed"),
        "payload not an object": (signed(b"[42]"), "malformed"),
        "payload not JSON": (signed(b"{'a': 1}"), "malformed"),
        "nesting 10,000 deep": (signed(deep), "malformed"),
        "a forged payload": (f"{h}.{b64({'sub': 'admin'})}.{s}", "signature"),
        "over max_token_bytes": (f"{h}.{'A' * 40000}.{s}", "too large"),
        "duplicate members": (f"{b64(duplicate)}.{p}.{s}", "malformed"),
        "exp as a string": (k1.sign(exp=str(int(time.time()) + 300)), "claim"),
        "exp past 2^63 as a real": (k1.sign(exp=1e19), "claim"),
        "exp past 2^63 as an integer": (k1.sign(exp=2 ** 63 + 5), "malformed"),
        "alg none": (f"{b64({'alg': 'none', 'kid': 'k1'})}.{p}.", "malformed"),
        "alg None": (f"{b64({'alg': 'None', 'kid': 'k1'})}.{p}.{s}", "algorithm"),
        "alg nOnE": (f"{b64({'alg': 'nOnE', 'kid': 'k1'})}.{p}.{s}", "algorithm"),
        "HS256 with the RSA key's bytes": (f"{hs_header}.{p}.{hs_sig}", "algorithm"),
        "a valid signature over another header": (f"{other_header}.{p}.{s}", "signature"),
        "a kid with ../": (k1.sign(kid="../../etc/passwd"), "key"),
        "crit": (k1.sign(headers={"crit": ["exp"], "exp": 1}), "extension"),
        "jku naming a server": (k1.sign(kid="elsewhere", headers={"jku": counter_url}), "key"),
        "x5u naming a server": (k1.sign(kid="elsewhere", headers={"x5u": counter_url}), "key"),
    }


def test_hostile_tokens_get_401_with_their_reason(start_gateway, backend):
    k1 = SigningKey("rsa", "k1")
    srv, counter = JwksServer(jwks(k1)), JwksServer(jwks(SigningKey("rsa", "elsewhere")))
    try:
        # 32 KiB: room for the 10,000-deep payload (27 KB), under the 64 KiB header limit
        gw = start(start_gateway, backend, srv.url, max_token_bytes="32KiB")
        fetches = srv.count()
        for name, (token, reason) in hostile_tokens(k1, counter.url).items():
            status, headers, body = status_of(gw, token)
            assert status == 401, name
            assert headers["X-Matchgate-Error"] == "unauthenticated", name
            assert reason in headers["WWW-Authenticate"], (name, headers["WWW-Authenticate"])
            assert token[:40].encode() not in body, name
        assert counter.count() == 0  # jku and x5u were never followed
        assert srv.count() - fetches <= 1  # the unknown kids asked for one fetch at most
        # a valid token with a jku pointing elsewhere verifies with the configured keys, no contact
        assert status_of(gw, k1.sign(headers={"jku": counter.url}))[0] == 200
        assert counter.count() == 0
        assert not backend.received("/x")[:-1]  # only the last, valid one reached the backend
    finally:
        srv.stop()
        counter.stop()
