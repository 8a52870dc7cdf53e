"""Request mirrors against the real binary (issue 31): copies with their bodies, marked, at the
share asked for; a slow or dead mirror changes nothing for the client; drops counted (in flight
full, body too large); answers by class and status differences counted; copies spend no quota;
`--check` refuses bad mirrors with their positions."""

import json
import re
import time

from support import free_port, gateway_config, request, run_matchgate, to_yaml, wait_until

TOKEN = "t0ken"


def start(start_gateway, backends, mirror, **top):
    route = {"name": "api", "forward": "main", "mirror": mirror if isinstance(mirror, list) else [mirror]}
    config = gateway_config(free_port(), backends=backends, routes=[route],
                            admin={"address": f"127.0.0.1:{free_port()}", "token": TOKEN}, **top)
    return start_gateway(config)


def metric(gw, name, **labels):
    m = gw.metrics(token=TOKEN)
    want = "{" + ",".join(f'{k}="{v}"' for k, v in {"route": "api", **labels}.items()) + "}"
    return m.get(name + want, 0)


def test_copies_reach_the_mirror_with_their_bodies_and_marks(start_gateway, backend_factory):
    main, shadow = backend_factory("main"), backend_factory("shadow")
    gw = start(start_gateway, {"main": [main.url], "shadow": [shadow.url]}, {"backend": "shadow"})
    status, headers, body = request(gw.port, "POST", "/orders?x=1", {"Host": "shop.test", "X-Trace": "t1"}, body=b"a" * 5000)
    assert status == 200 and json.loads(body)["backend"] == "main"  # the client's answer is the backend's
    copy = shadow.wait_for("/orders")
    assert copy.method == "POST" and copy.query == "x=1" and copy.body == b"a" * 5000
    assert copy.headers["x-matchgate-mirror"] == "1"
    assert copy.headers["host"] == "shop.test-shadow"
    assert copy.headers["x-trace"] == "t1"
    assert "x-matchgate-mirror" not in main.wait_for("/orders").headers
    assert wait_until(lambda: metric(gw, "matchgate_mirror_answers_total", backend="shadow", **{"class": "2xx"}) == 1, 5)
    assert metric(gw, "matchgate_mirror_requests_total", backend="shadow") == 1


def test_a_slow_mirror_changes_nothing_for_the_client_and_drops_are_counted(start_gateway, backend_factory):
    main, slow = backend_factory("main"), backend_factory("slow")
    slow.delay_ms = 2000
    gw = start(start_gateway, {"main": [main.url], "slow": [slow.url]}, {"backend": "slow", "max_in_flight": 3, "timeout": "10s"})
    took = []
    for i in range(10):
        t = time.monotonic()
        assert request(gw.port, "GET", f"/r{i}")[0] == 200
        took.append(time.monotonic() - t)
    assert max(took) < 1.0, f"a client waited for the mirror: {took}"
    assert metric(gw, "matchgate_mirror_requests_total", backend="slow") == 3
    assert metric(gw, "matchgate_mirror_dropped_total", backend="slow", reason="in_flight") == 7
    assert metric(gw, "matchgate_mirror_in_flight", backend="slow") == 3


def test_a_dead_mirror_changes_nothing_and_its_failures_are_counted(start_gateway, backend_factory):
    main = backend_factory("main")
    gw = start(start_gateway, {"main": [main.url], "dead": [f"http://127.0.0.1:{free_port()}"]}, {"backend": "dead"})
    for i in range(5):
        assert request(gw.port, "GET", f"/d{i}")[0] == 200
    assert wait_until(lambda: metric(gw, "matchgate_mirror_answers_total", backend="dead", **{"class": "none"}) == 5, 5)
    assert metric(gw, "matchgate_mirror_in_flight", backend="dead") == 0


def test_percent_sticky_and_body_bound(start_gateway, backend_factory):
    main, half, keyed = backend_factory("main"), backend_factory("half"), backend_factory("keyed")
    gw = start(start_gateway, {"main": [main.url], "half": [half.url], "keyed": [keyed.url]},
               [{"backend": "half", "percent": 50, "max_body": "1KiB"},
                {"backend": "keyed", "percent": 30, "sticky": "${header.X-User}"}])
    for i in range(400):
        assert request(gw.port, "GET", f"/p{i}", {"X-User": f"u{i % 40}"})[0] == 200
    assert wait_until(lambda: metric(gw, "matchgate_mirror_in_flight", backend="half") == 0, 5)
    share = metric(gw, "matchgate_mirror_requests_total", backend="half") / 400
    assert 0.4 <= share <= 0.6, share
    # a key is mirrored every time or never
    assert wait_until(lambda: len(keyed.requests) == metric(gw, "matchgate_mirror_requests_total", backend="keyed"), 5)
    users = {}
    for rec in keyed.requests:
        users.setdefault(rec.headers["x-user"], 0)
        users[rec.headers["x-user"]] += 1
    assert all(n == 10 for n in users.values()), users
    assert 0 < len(users) < 40
    before = metric(gw, "matchgate_mirror_requests_total", backend="half")
    for i in range(20):
        assert request(gw.port, "POST", "/big", body=b"b" * 2048)[0] == 200
    assert metric(gw, "matchgate_mirror_dropped_total", backend="half", reason="body") >= 5
    assert metric(gw, "matchgate_mirror_requests_total", backend="half") == before


def test_status_differences_are_counted(start_gateway, backend_factory):
    main, broken = backend_factory("main"), backend_factory("broken")
    broken.force_status = 500
    gw = start(start_gateway, {"main": [main.url], "broken": [broken.url]}, {"backend": "broken", "compare": "status"})
    for i in range(4):
        assert request(gw.port, "GET", f"/c{i}")[0] == 200
    assert wait_until(lambda: metric(gw, "matchgate_mirror_status_differed_total", backend="broken") == 4, 5)
    assert metric(gw, "matchgate_mirror_answers_total", backend="broken", **{"class": "5xx"}) == 4


def test_copies_spend_no_quota(start_gateway, backend_factory):
    main, shadow = backend_factory("main"), backend_factory("shadow")
    gw = start(start_gateway, {"main": [main.url], "shadow": [shadow.url]}, {"backend": "shadow"},
               tenants={"identify": [{"header": "X-Tenant"}], "default_quota": {"requests": 3, "per": "1m"}})
    statuses = [request(gw.port, "GET", f"/q{i}", {"X-Tenant": "acme"})[0] for i in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert wait_until(lambda: len(shadow.requests) == 3, 5)


def test_check_refuses_bad_mirrors(tmp_path):
    base = {"listen": [{"address": "127.0.0.1:8080"}],
            "backends": {"main": {"servers": ["http://127.0.0.1:9"]}, "shadow": {"servers": ["http://127.0.0.1:9"]}}}
    cases = [
        ({"name": "r", "respond": {"status": 200}, "mirror": [{"backend": "shadow"}]}, "mirror belongs to a route that forwards"),
        ({"name": "r", "forward": "main", "mirror": [{"backend": "shadow", "percent": 101}]}, "between 0 and 100"),
        ({"name": "r", "forward": "main", "mirror": [{"backend": "nope"}]}, "undefined backend 'nope'"),
        ({"name": "r", "forward": "main", "mirror": [{"backend": "shadow", "compare": "body"}]}, "compare: status is the only"),
        ({"name": "r", "forward": "main", "mirror": [{"backend": "shadow", "timeout": "0s"}]}, "timeout must be above 0"),
        ({"name": "r", "forward": "main", "mirror": []}, "1 to 4 mirrors"),
    ]
    for route, message in cases:
        path = tmp_path / "m.yaml"
        path.write_text(to_yaml(dict(base, routes=[route])) + "\n")
        res = run_matchgate("--check", "-c", path)
        assert res.returncode != 0, route
        assert re.search(re.escape(str(path)) + r":\d+:\d+: .*" + re.escape(message), res.stderr), (route, res.stderr)
