"""Who is calling, verified at the edge, through the real gateway: tokens signed here
(python3-jwt, python3-cryptography) against keys a real JWKS server on 127.0.0.1 serves. The
brief's A/B routing on claims, which of two authenticators decides, RFC 6750 answers, a cached
token refused past its exp, claims to the backend and the client's copies stripped, a tenant from
a verified claim (and a forged X-Tenant-Id spending nothing of the victim's) and --check's warning
about a tenant header, HTTP/2, API keys (a reload reads their file again), metrics and the access
log. Key rotation, fetch failures and hostile tokens are in test_auth_keys.py; claims in templates
in test_auth_claims.py; WebSockets in test_auth_ws.py."""

import json
import re
import time

import pytest

import h2client
from auth_support import AUDIENCE, ISSUER, JwksServer, SigningKey, api_key, bearer, jwks, jwks_file, jwt_authenticator
from support import free_port, gateway_config, request, run_matchgate, to_yaml, wait_until


@pytest.fixture
def idp():
    key = SigningKey("rsa", "k1")
    srv = JwksServer(jwks(key))
    yield key, srv
    srv.stop()


def ab_routes():
    """The brief's example: v2 when usergroup = default or usertype != admin, else v1."""
    return [{"name": "customer", "match": {"path": {"prefix": "/api/customer"}}, "auth": "corp",
             "routes": [{"name": "customer-v2",
                         "match": {"any": [{"claim": {"name": "usergroup", "equals": "default"}},
                                           {"not": {"claim": {"name": "usertype", "equals": "admin"}}}]},
                         "forward": "v2"},
                        {"name": "customer-v1", "forward": "v1"}]},
            {"name": "open", "match": {"path": {"prefix": "/open"}},
             "routes": [{"name": "open-v2", "match": {"not": {"claim": {"name": "usertype", "equals": "admin"}}}, "forward": "v2"},
                        {"name": "open-v1", "forward": "v1"}]},
            {"name": "orders", "match": {"path": {"prefix": "/orders"}}, "auth": "corp",
             "require": [{"claim": {"name": "scope", "in": ["orders:write"]}}], "forward": "v1"},
            {"name": "public", "match": {"path": {"prefix": "/public"}}, "auth": "none", "forward": "v1"}]


@pytest.fixture
def ab(start_gateway, backend_factory, idp):
    key, srv = idp
    v1, v2 = backend_factory("v1"), backend_factory("v2")
    port = free_port()
    gw = start_gateway(gateway_config(port, backends={"v1": [v1.url], "v2": [v2.url]},
                                      auth={"corp": jwt_authenticator(srv.url, forward_claims={"sub": "X-User-Id"})},
                                      routes=ab_routes()))
    return gw, key, v1, v2


def test_the_brief_a_b_routing_on_verified_claims(ab):
    gw, key, v1, v2 = ab
    cases = [({"usergroup": "default", "usertype": "admin"}, v2), ({"usergroup": "gold", "usertype": "staff"}, v2),
             ({"usergroup": "gold", "usertype": "admin"}, v1), ({"usertype": "admin"}, v1)]
    for i, (claims, target) in enumerate(cases):
        status, _, _ = request(gw.port, "GET", f"/api/customer/{i}", headers=bearer(key.sign(claims)))
        assert status == 200
        assert target.wait_for(f"/api/customer/{i}").headers["x-user-id"] == "user-1"
    # the plain headers the old examples stood in with are nobody's claims
    status, headers, body = request(gw.port, "GET", "/api/customer/x", headers={"X-User-Group": "default"})
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Bearer realm="matchgate"'  # RFC 6750 3.1: no error without a credential
    assert headers["X-Matchgate-Error"] == "unauthenticated"


def test_the_first_declared_authenticator_whose_source_is_present_decides(start_gateway, backend, tmp_path):
    """zeta is declared before alpha (names in the other order: declaration decides, not the name);
    both read the bearer header, alpha reads X-Token too."""
    zk, ak = SigningKey("rsa", "z1"), SigningKey("ec", "a1")
    auth = {"zeta": jwt_authenticator(jwks_file=jwks_file(tmp_path / "zeta.json", zk)),
            "alpha": jwt_authenticator(jwks_file=jwks_file(tmp_path / "alpha.json", ak),
                                       **{"from": [{"header": "Authorization", "prefix": "Bearer "}, {"header": "X-Token"}]})}
    routes = [{"name": "alpha-only", "match": {"path": {"prefix": "/alpha"}}, "auth": "alpha", "forward": "app"},
              {"name": "either", "auth": ["zeta", "alpha"], "forward": "app"}]
    gw = start_gateway(gateway_config(free_port(), backends={"app": [backend.url]}, auth=auth, routes=routes))

    def answer(path, headers):
        status, hdrs, _ = request(gw.port, "GET", path, headers=headers)
        return status, re.sub(r'.*error_description="([^"]*)".*', r"\1", hdrs.get("WWW-Authenticate", ""))
    assert answer("/any", bearer(zk.sign())) == (200, "")
    # alpha's token in the shared header: zeta decides and refuses it, alpha never sees it
    assert answer("/any", bearer(ak.sign())) == (401, "the token's signing key is unknown")
    assert answer("/alpha/1", bearer(zk.sign())) == (401, "the credential is not accepted on this route")
    assert answer("/alpha/2", {"X-Token": ak.sign()}) == (200, "")  # only alpha reads X-Token
    assert answer("/alpha/3", dict(bearer(zk.sign()), **{"X-Token": ak.sign()})) == \
        (401, "the credential is not accepted on this route")  # zeta's source is present: zeta decides
    assert [r.path for r in backend.received()] == ["/any", "/alpha/2"]


def test_a_claim_test_is_unknown_without_a_credential_whatever_not_says(ab):
    gw, key, v1, v2 = ab
    assert request(gw.port, "GET", "/open/anon")[0] == 200
    v1.wait_for("/open/anon")  # not {claim} did not let the anonymous request into open-v2
    assert request(gw.port, "GET", "/open/staff", headers=bearer(key.sign({"usertype": "staff"})))[0] == 200
    v2.wait_for("/open/staff")
    assert not v2.received("/open/anon")


def test_401_and_403_answers_follow_rfc_6750(ab):
    gw, key, v1, _ = ab
    expired = key.sign(exp=int(time.time()) - 600)
    status, headers, body = request(gw.port, "GET", "/api/customer/1", headers=bearer(expired))
    assert status == 401
    assert headers["WWW-Authenticate"] == ('Bearer realm="matchgate", error="invalid_token", '
                                           'error_description="the token has expired"')
    assert headers["X-Matchgate-Error"] == "unauthenticated"
    assert expired.encode() not in body and b"expired" in body

    status, headers, body = request(gw.port, "POST", "/orders", headers=bearer(key.sign({"scope": "orders:read"})))
    assert status == 403
    assert headers["X-Matchgate-Error"] == "forbidden"
    assert re.fullmatch(r'Bearer realm="matchgate", error="insufficient_scope", error_description="[^"]+"',
                        headers["WWW-Authenticate"])
    status, _, _ = request(gw.port, "POST", "/orders", headers=bearer(key.sign({"scope": ["a", "orders:write"]})))
    assert status == 200
    assert len(v1.received("/orders")) == 1  # the 403 never reached the backend


def test_a_cached_token_is_refused_once_past_its_exp(start_gateway, backend, idp):
    key, srv = idp
    gw = start_gateway(gateway_config(free_port(), backends={"app": [backend.url]}, workers=1,  # one cache
                                      auth={"corp": jwt_authenticator(srv.url, clock_skew="0s")},
                                      routes=[{"name": "r", "auth": "corp", "forward": "app"}]))
    exp = int(time.time()) + 4
    token = key.sign(exp=exp)
    assert [request(gw.port, "GET", "/c", headers=bearer(token))[0] for _ in range(2)] == [200, 200]  # verified, then cached
    time.sleep(max(0.0, exp + 1.2 - time.time()))  # the clock's whole second is past exp
    status, headers, _ = request(gw.port, "GET", "/late", headers=bearer(token))
    assert status == 401
    assert headers["WWW-Authenticate"].endswith('error_description="the token has expired"')
    assert not backend.received("/late")


def test_a_bad_token_is_ignored_on_an_auth_none_route(ab):
    gw, key, v1, _ = ab
    status, _, _ = request(gw.port, "GET", "/public/x", headers=bearer("not.a.token"))
    assert status == 200
    assert v1.wait_for("/public/x").headers["authorization"] == "Bearer not.a.token"


def test_claims_reach_the_backend_and_the_clients_copies_do_not(ab):
    gw, key, v1, v2 = ab
    forged = {"X-User-Id": "admin"}
    assert request(gw.port, "GET", "/public/anon", headers=forged)[0] == 200
    assert "x-user-id" not in v1.wait_for("/public/anon").headers
    headers = dict(bearer(key.sign({"sub": "alice", "usergroup": "default"})), **forged)
    assert request(gw.port, "GET", "/api/customer/alice", headers=headers)[0] == 200
    got = v2.wait_for("/api/customer/alice")
    assert [v for k, v in got.raw_headers if k.lower() == "x-user-id"] == ["alice"]


def test_forward_token_false_removes_the_credential(start_gateway, backend, idp):
    key, srv = idp
    port = free_port()
    gw = start_gateway(gateway_config(port, backends={"app": [backend.url]},
                                      auth={"corp": jwt_authenticator(srv.url, forward_token=False,
                                                                      **{"from": [{"cookie": "session"}]})},
                                      routes=[{"name": "r", "auth": "corp", "forward": "app"}]))
    cookie = f"theme=dark; session={key.sign()}; lang=en"
    assert request(gw.port, "GET", "/c", headers={"Cookie": cookie})[0] == 200
    assert backend.wait_for("/c").headers["cookie"] == "theme=dark; lang=en"
    assert request(gw.port, "GET", "/c2", headers={"Cookie": "theme=dark"})[0] == 401


def test_a_tenant_from_a_verified_claim_and_a_forged_header_spends_nothing(start_gateway, backend, idp):
    key, srv = idp
    port = free_port()
    gw = start_gateway(gateway_config(
        port, backends={"app": [backend.url]}, auth={"corp": jwt_authenticator(srv.url)},
        tenants={"identify": [{"claim": "tid"}, {"header": "X-Tenant-Id"}], "trusted_proxies": ["10.0.0.0/8"],
                 "quotas": {"victim": {"requests": 3, "per": "1m"}}, "default_quota": {"requests": 100, "per": "1m"}},
        routes=[{"name": "r", "auth": "optional", "forward": "app"}]))
    attacker = key.sign({"tid": "attacker"})
    for _ in range(5):  # the header is not believed from 127.0.0.1: the attacker's own tenant pays
        assert request(gw.port, "GET", "/x", headers=dict(bearer(attacker), **{"X-Tenant-Id": "victim"}))[0] == 200
    for _ in range(5):  # anonymous, forged header: no tenant at all
        assert request(gw.port, "GET", "/y", headers={"X-Tenant-Id": "victim"})[0] == 200
    expired = key.sign({"tid": "victim"}, exp=int(time.time()) - 600)
    for _ in range(5):  # a failing credential naming the victim spends nothing either
        assert request(gw.port, "GET", "/z", headers=bearer(expired))[0] == 401
    victim = key.sign({"tid": "victim"})
    statuses = [request(gw.port, "GET", "/v", headers=bearer(victim))[0] for _ in range(4)]
    assert statuses == [200, 200, 200, 429]


def test_check_warns_about_tenants_from_a_header_unless_trusted_proxies(tmp_path):
    tenants = {"identify": [{"claim": "tid"}, {"header": "X-Tenant-Id"}]}
    path, keys = tmp_path / "gw.yaml", jwks_file(tmp_path / "k.json", SigningKey("ec", "e1"))
    for trusted, warns in ((None, True), (["10.0.0.0/8"], False)):
        conf = gateway_config(free_port(), auth={"corp": jwt_authenticator(jwks_file=keys)},
                              tenants=dict(tenants, **({"trusted_proxies": trusted} if trusted else {})),
                              routes=[{"name": "r", "auth": "optional", "respond": {"status": 200}}])
        path.write_text(to_yaml(conf) + "\n")
        line = path.read_text().splitlines().index("    - header: X-Tenant-Id") + 1
        res = run_matchgate("--check", "-c", path)
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith(f"{path}: ok"), res.stdout
        if warns:
            assert res.stderr == (f"{path}:{line}:7: warning: any client can set header 'x-tenant-id' and spend that tenant's "
                                  "quota: identify tenants by a verified credential ({claim: NAME}, {api_key: tenant}) or list "
                                  "the proxies whose header is believed in tenants.trusted_proxies\n")
        else:
            assert res.stderr == ""


def test_http2_requests_are_authenticated_too(ab):
    gw, key, v1, v2 = ab
    ok = h2client.get(gw.port, b"/api/customer/h2", extra=[(b"authorization", f"Bearer {key.sign()}".encode())])
    assert ok.status == 200
    v2.wait_for("/api/customer/h2")
    refused = h2client.get(gw.port, b"/api/customer/h2", extra=[(b"authorization", b"Bearer a.b.c")])
    assert refused.status == 401
    assert refused.get("www-authenticate").startswith('Bearer realm="matchgate", error="invalid_token"')


def test_api_keys_by_their_hash(start_gateway, backend, tmp_path):
    key, line = api_key("acme", {"sub": "batch-7"})
    keys = tmp_path / "keys.txt"
    keys.write_text("# partners\n" + line)
    port = free_port()
    gw = start_gateway(gateway_config(
        port, backends={"app": [backend.url]},
        auth={"partners": {"api_key": {"keys_file": str(keys), "forward_claims": {"sub": "X-Caller"}}}},
        tenants={"identify": [{"api_key": "tenant"}], "quotas": {"acme": {"requests": 2, "per": "1m"}}},
        routes=[{"name": "r", "auth": "partners", "forward": "app"}]))
    assert request(gw.port, "GET", "/k1", headers={"X-Api-Key": key})[0] == 200
    assert backend.wait_for("/k1").headers["x-caller"] == "batch-7"
    status, headers, _ = request(gw.port, "GET", "/k2", headers={"X-Api-Key": key + "x"})
    assert status == 401
    assert headers["WWW-Authenticate"].startswith('ApiKey realm="matchgate", error="invalid_token"')
    # the key's tenant has its quota
    assert [request(gw.port, "GET", "/k3", headers={"X-Api-Key": key})[0] for _ in range(2)] == [200, 429]


def test_a_reload_reads_the_keys_file_again(start_gateway, backend, tmp_path):
    (kept, kept_line), (removed, removed_line), (added, added_line) = (api_key(t) for t in ("acme", "globex", "initech"))
    keys = tmp_path / "keys.txt"
    keys.write_text(kept_line + removed_line)
    gw = start_gateway(gateway_config(free_port(), backends={"app": [backend.url]},
                                      auth={"partners": {"api_key": {"keys_file": str(keys)}}},
                                      routes=[{"name": "r", "auth": "partners", "forward": "app"}]))
    statuses = lambda: [request(gw.port, "GET", "/k", headers={"X-Api-Key": k})[0] for k in (kept, removed, added)]
    assert statuses() == [200, 200, 401]
    keys.write_text(kept_line + added_line)  # the configuration file itself is unchanged
    assert "configuration reloaded" in gw.reload()
    assert statuses() == [200, 401, 200]


def test_metrics_and_access_log_show_the_outcomes(start_gateway, backend, idp, tmp_path):
    key, srv = idp
    log = tmp_path / "access.log"
    port, admin = free_port(), free_port()
    gw = start_gateway(gateway_config(port, backends={"app": [backend.url]}, auth={"corp": jwt_authenticator(srv.url)},
                                      admin={"address": f"127.0.0.1:{admin}"}, access_log=str(log),
                                      routes=[{"name": "r", "auth": "corp", "forward": "app"}]))
    assert request(gw.port, "GET", "/ok", headers=bearer(key.sign({"sub": "carol"})))[0] == 200
    assert request(gw.port, "GET", "/old", headers=bearer(key.sign(exp=int(time.time()) - 999)))[0] == 401
    m = gw.metrics()
    assert m['matchgate_auth_requests_total{authenticator="corp",result="ok"}'] == 1
    assert m['matchgate_auth_requests_total{authenticator="corp",result="expired"}'] == 1
    assert m['matchgate_auth_jwks_keys{authenticator="corp"}'] == 1
    assert m['matchgate_auth_jwks_fetches_total{authenticator="corp"}'] >= 1
    assert 0 <= m['matchgate_auth_jwks_age_seconds{authenticator="corp"}'] < 60
    # a line is written once its response is out: the client may read the file before that
    logged = lambda: {l["path"]: l for l in map(json.loads, log.read_text().splitlines())}
    assert wait_until(lambda: {"/ok", "/old"} <= set(logged()), 10), log.read_text()
    assert logged()["/ok"]["sub"] == "carol" and "sub" not in logged()["/old"]


def test_the_route_tool_shows_the_verification_and_the_claims(tmp_path):
    key = SigningKey("ec", "e1")
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(jwks(key)))
    conf = tmp_path / "gw.yaml"
    conf.write_text(f"""listen: [{{address: "127.0.0.1:{free_port()}"}}]
auth:
  corp: {{jwt: {{issuer: "{ISSUER}", audiences: [{AUDIENCE}], jwks: {{file: jwks.json}}}}}}
backends: {{app: {{servers: ["http://127.0.0.1:9"]}}}}
routes:
  - {{name: admins, auth: corp, match: {{claim: {{name: roles, equals: admin}}}}, forward: app}}
  - {{name: others, auth: corp, respond: {{status: 403}}}}
""")
    token = key.sign({"roles": ["user", "admin"], "sub": "dave"})
    res = run_matchgate("route", "-c", conf, "--json", "GET", "http://a.test/x", "-H", f"Authorization: Bearer {token}")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["route"] == "admins"
    assert out["auth"]["outcome"] == "verified" and out["auth"]["authenticator"] == "corp"
    assert out["auth"]["claims"]["roles"] == ["user", "admin"] and out["auth"]["claims"]["sub"] == "dave"
    res = run_matchgate("route", "-c", conf, "--json", "GET", "http://a.test/x", "-H", "Authorization: Bearer x.y.z")
    out = json.loads(res.stdout)
    assert out["auth"]["outcome"] == "failed" and out["status"] == 401


def ec_key_with_short_x():
    """A P-256 key whose x coordinate starts with a zero byte (one key in 256), and its JWK with
    that byte dropped, as PyJWT 2.6 writes it (RFC 7518 wants all 32 bytes)."""
    import base64
    for i in range(20000):
        key = SigningKey("ec", "short")
        x = key.key.public_key().public_numbers().x
        if x < 1 << 248:
            jwk = key.jwk()
            short = x.to_bytes((x.bit_length() + 7) // 8, "big")
            jwk["x"] = base64.urlsafe_b64encode(short).rstrip(b"=").decode()
            return key, jwk
    raise AssertionError("no key with a leading zero byte in x in 20,000 tries")


def route_tool_verifies(tmp_path, keys_json, token):
    (tmp_path / "jwks.json").write_text(json.dumps(keys_json))
    conf = tmp_path / "gw.yaml"
    conf.write_text(f"""listen: [{{address: "127.0.0.1:{free_port()}"}}]
auth:
  corp: {{jwt: {{issuer: "{ISSUER}", audiences: [{AUDIENCE}], algorithms: [ES256], jwks: {{file: jwks.json}}}}}}
routes:
  - {{name: in, auth: corp, respond: {{status: 200}}}}
""")
    return run_matchgate("route", "-c", conf, "--json", "GET", "http://a.test/x", "-H", f"Authorization: Bearer {token}")


def test_an_ec_key_whose_coordinate_lost_its_leading_zero_still_verifies(tmp_path):
    key, jwk = ec_key_with_short_x()
    assert len(jwk["x"]) < 43, "the published x is shorter than 32 bytes"
    res = route_tool_verifies(tmp_path, {"keys": [jwk]}, key.sign({"sub": "erin"}))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["auth"]["outcome"] == "verified"


def test_an_ec_coordinate_longer_than_its_curve_is_refused(tmp_path):
    import base64
    key = SigningKey("ec", "long")
    jwk = key.jwk()
    # all 32 bytes of x: PyJWT's own x lacks a leading zero byte for one key in 256, and 1 + 31 fits
    x = key.key.public_key().public_numbers().x.to_bytes(32, "big")
    jwk["x"] = base64.urlsafe_b64encode(b"\x00" + x).rstrip(b"=").decode()
    res = route_tool_verifies(tmp_path, {"keys": [jwk]}, key.sign())
    assert res.returncode != 0
    assert "longer than a coordinate of P-256" in res.stderr
