"""`${claim.NAME}` in the templates of a route, through the real gateway: a route quota keyed by a
claim (each caller its own window), an order key (one caller's requests one at a time, another's
beside them), a claim landing in a header (CR/LF refused with 400) and in a rewritten path (its
`/` percent-encoded, one segment)."""

import threading

import pytest

from auth_support import SigningKey, bearer, jwks_file, jwt_authenticator
from support import free_port, gateway_config, request

SLOW_MS = 4000  # how long the first ordered request runs at the backend


def routes():
    return [{"name": "quota", "match": {"path": {"prefix": "/q"}},
             "quota": {"requests": 2, "per": "1m", "key": "${claim.sub}"}, "forward": "app"},
            {"name": "ordered", "match": {"path": {"prefix": "/o"}}, "order": {"key": "${claim.acct}"}, "forward": "app"},
            {"name": "header", "match": {"path": {"prefix": "/h"}}, "actions": [{"set_header": {"X-Note": "${claim.note}"}}],
             "forward": "app"},
            {"name": "path", "match": {"path": {"prefix": "/p"}}, "actions": [{"rewrite_path": "/users/${claim.sub}/profile"}],
             "forward": "app"}]


@pytest.fixture
def claims_gw(start_gateway, backend, tmp_path):
    key = SigningKey("ec", "c1")
    branch = {"name": "all", "auth": "corp", "routes": routes()}
    gw = start_gateway(gateway_config(free_port(), backends={"app": [backend.url]}, routes=[branch],
                                      auth={"corp": jwt_authenticator(jwks_file=jwks_file(tmp_path / "jwks.json", key))}))
    return gw, key


def as_(key, **claims):
    return bearer(key.sign(claims))


def test_a_route_quota_keyed_by_a_claim_counts_each_caller_apart(claims_gw):
    gw, key = claims_gw
    statuses = lambda sub: [request(gw.port, "GET", "/q", headers=as_(key, sub=sub))[0] for _ in range(3)]
    assert statuses("alice") == [200, 200, 429]
    assert statuses("bob") == [200, 200, 429]  # alice spent her own key, not bob's
    status, headers, body = request(gw.port, "GET", "/q", headers=as_(key, sub="alice"))
    assert status == 429 and b"route quota exceeded" in body


def test_an_order_key_from_a_claim_runs_one_callers_requests_one_at_a_time(claims_gw, backend):
    gw, key = claims_gw
    send = lambda path, acct: threading.Thread(target=request, args=(gw.port, "GET", path),
                                               kwargs={"headers": as_(key, acct=acct), "timeout": 30}, daemon=True)
    threads = [send(f"/o/a1/slow?ms={SLOW_MS}", "A")]
    threads[0].start()
    first = backend.wait_for("/o/a1/slow", 10)
    threads += [send("/o/a2/slow?ms=0", "A"), send("/o/b1/slow?ms=0", "B")]
    for t in threads[1:]:
        t.start()
    other, second = backend.wait_for("/o/b1/slow", 10), backend.wait_for("/o/a2/slow", SLOW_MS / 1000 + 10)
    for t in threads:
        t.join(timeout=30)
    assert second.at >= first.at + SLOW_MS / 1000  # A's second waited for A's first to end
    assert other.at < first.at + SLOW_MS / 1000  # B's did not


def test_a_claim_with_cr_lf_is_refused_where_it_lands_in_a_header(claims_gw, backend):
    gw, key = claims_gw
    status, headers, body = request(gw.port, "GET", "/h/evil", headers=as_(key, note="a\r\nX-Evil: 1"))
    assert status == 400
    assert headers["X-Matchgate-Error"] == "bad-request"
    assert b"set_header 'x-note'" in body and b"CR, LF or NUL" in body
    assert request(gw.port, "GET", "/h/fine", headers=as_(key, note="fine"))[0] == 200
    assert backend.wait_for("/h/fine").headers["x-note"] == "fine"
    assert not backend.received("/h/evil")


def test_a_claim_with_a_slash_stays_one_segment_of_a_rewritten_path(claims_gw, backend):
    gw, key = claims_gw
    assert request(gw.port, "GET", "/p", headers=as_(key, sub="alice/../bob"))[0] == 200
    assert backend.wait_for("/users/alice%2F..%2Fbob/profile").method == "GET"
