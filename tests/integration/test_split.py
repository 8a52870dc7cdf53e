"""Weighted traffic splits against the real binary (issue 31): shares by weight over 10,000
requests, sticky keys that stay on their leg and move only as the weights change (towards the
leg that grew, and back), weights set through the admin API without a reload and kept by a
reload of the unchanged file, a changed split taking the file's weights with a warning, and
`--check` refusing bad splits with their positions."""

import http.client
import json
import re

from support import free_port, gateway_config, request, run_matchgate, to_yaml

TOKEN = "t0ken"


def split_route(weights=(95, 5), sticky=None):
    fwd = {"split": [{"backend": "v1", "weight": weights[0]}, {"backend": "v2", "weight": weights[1]}]}
    if sticky:
        fwd["sticky"] = sticky
    return {"name": "api", "forward": fwd}


def config(port, admin, v1, v2, **route):
    return gateway_config(port, backends={"v1": [v1.url], "v2": [v2.url]}, routes=[split_route(**route)],
                          admin={"address": f"127.0.0.1:{admin}", "token": TOKEN})


def start(start_gateway, backend_factory, **route):
    v1, v2 = backend_factory("v1"), backend_factory("v2")
    gw = start_gateway(config(free_port(), free_port(), v1, v2, **route))
    return gw, v1, v2


def legs_of(gw, n, headers_of=lambda i: {}):
    """The backend (from its echo) of each of n requests on one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    out = []
    try:
        for i in range(n):
            conn.request("GET", f"/x/{i}", headers=headers_of(i))
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, body
            out.append(json.loads(body)["backend"])
    finally:
        conn.close()
    return out


def set_weights(gw, weights):
    status, _, body = gw.admin_request("POST", "/routes/api/split", token=TOKEN, body=json.dumps({"weights": weights}))
    return status, json.loads(body)


def test_shares_follow_the_weights(start_gateway, backend_factory):
    gw, _, _ = start(start_gateway, backend_factory)
    legs = legs_of(gw, 10000)
    share = legs.count("v2") / len(legs)
    assert 0.03 <= share <= 0.07, f"v2 got {share:.2%} of 10,000 requests for a weight of 5%"


def test_sticky_keys_stay_and_move_only_as_weights_change(start_gateway, backend_factory):
    gw, _, _ = start(start_gateway, backend_factory, sticky="${header.X-User}")
    users = lambda i: {"X-User": f"user-{i % 2000}"}  # noqa: E731
    first = legs_of(gw, 2000, users)
    assert legs_of(gw, 2000, users) == first, "a key changed legs with the weights unchanged"
    assert 0.03 <= first.count("v2") / 2000 <= 0.07
    assert set_weights(gw, {"v1": 90, "v2": 10})[0] == 200
    grown = legs_of(gw, 2000, users)
    moved = [i for i in range(2000) if grown[i] != first[i]]
    assert all(first[i] == "v1" and grown[i] == "v2" for i in moved), "a key moved away from the leg that grew"
    assert 0.03 <= len(moved) / 2000 <= 0.07, f"{len(moved)} of 2,000 keys moved for 5 points of weight"
    assert set_weights(gw, [95, 5])[0] == 200
    assert legs_of(gw, 2000, users) == first, "setting the weights back did not return every key"


def test_weights_at_run_time_survive_a_reload_of_the_unchanged_file(start_gateway, backend_factory):
    gw, v1, v2 = start(start_gateway, backend_factory)
    status, body = set_weights(gw, {"v1": 0, "v2": 1})
    assert status == 200 and [leg["weight"] for leg in body["split"]["legs"]] == [0, 1]
    assert set(legs_of(gw, 50)) == {"v2"}
    status, _, text = gw.admin_request("POST", "/reload", token=TOKEN)
    assert status == 200 and json.loads(text)["warnings"] == []
    assert set(legs_of(gw, 50)) == {"v2"}, "a reload of the unchanged file lost the weights"
    routes = json.loads(gw.admin_request("GET", "/routes", token=TOKEN)[2])
    legs = next(r for r in routes["routes"] if r["name"] == "api")["split"]["legs"]
    assert [(leg["weight"], leg["file_weight"]) for leg in legs] == [(0, 95), (1, 5)]
    # a reload that changes the split takes the file's weights, and its answer says so
    gw.write_config(config(gw.port, gw.admin_port, v1, v2, weights=(50, 50)))
    status, _, text = gw.admin_request("POST", "/reload", token=TOKEN)
    answer = json.loads(text)
    assert status == 200 and any("api" in w and "file's weights" in w for w in answer["warnings"]), answer
    assert 0.3 <= legs_of(gw, 400).count("v2") / 400 <= 0.7


def test_bad_weights_through_the_admin_api(start_gateway, backend_factory):
    gw, _, _ = start(start_gateway, backend_factory)
    for weights in ({"v1": 0, "v2": 0}, {"v1": 1}, {"v1": 1, "v3": 1}, [1, -1], [1, 2000000], "90/10"):
        status, body = set_weights(gw, weights)
        assert status == 400, (weights, body)
    status, _, body = gw.admin_request("POST", "/routes/nope/split", token=TOKEN, body='{"weights": [1, 1]}')
    assert status == 404
    assert set_weights(gw, [1, 1])[0] == 200  # the refused ones set nothing


def test_the_route_tool_shows_the_leg_and_why(backend_factory, tmp_path):
    path = tmp_path / "s.yaml"
    v1, v2 = backend_factory("v1"), backend_factory("v2")
    path.write_text(to_yaml(config(free_port(), free_port(), v1, v2, sticky="${header.X-User}")) + "\n")
    res = run_matchgate("route", "-c", path, "--json", "-H", "X-User: alice", "GET", "http://x/a")
    e = json.loads(res.stdout)
    assert e["split"]["sticky_key"] == "alice" and e["backend"]["name"] in ("v1", "v2")
    res = run_matchgate("route", "-c", path, "GET", "http://x/a")
    assert "drawn by weight" in res.stdout and "v1 95 (95.0%), v2 5 (5.0%)" in res.stdout, res.stdout


def test_check_refuses_bad_splits_with_their_positions(tmp_path):
    base = {"listen": [{"address": "127.0.0.1:8080"}], "backends": {"v1": {"servers": ["http://127.0.0.1:9"]},
                                                                     "v2": {"servers": ["http://127.0.0.1:9"]}}}
    cases = [
        ([{"backend": "v1", "weight": 0}, {"backend": "v2", "weight": 0}], "add up to 0"),
        ([{"backend": "v1", "weight": 5}], "a split has 2 to 16 legs"),
        ([{"backend": "v1", "weight": -1}, {"backend": "v2", "weight": 1}], "expected an integer between 0 and 1000000"),
        ([{"backend": "v1", "weight": 1}, {"backend": "v1", "weight": 1}], "is a leg of this split already"),
        ([{"backend": "v1", "weight": 1}, {"backend": "v9", "weight": 1}], "undefined backend 'v9'"),
        ([{"backend": "v1"}, {"backend": "v2", "weight": 1}], "missing key 'weight'"),
    ]
    for legs, message in cases:
        path = tmp_path / "c.yaml"
        path.write_text(to_yaml(dict(base, routes=[{"name": "r", "forward": {"split": legs}}])) + "\n")
        res = run_matchgate("--check", "-c", path)
        assert res.returncode != 0, legs
        assert re.search(re.escape(str(path)) + r":\d+:\d+: .*" + re.escape(message), res.stderr), (legs, res.stderr)
    for fwd, message in (({"backend": "v1", "split": [{"backend": "v1", "weight": 1}, {"backend": "v2", "weight": 1}]},
                          "both backend and split"),
                         ({"backend": "v1", "sticky": "${tenant}"}, "sticky belongs to a split")):
        path.write_text(to_yaml(dict(base, routes=[{"name": "r", "forward": fwd}])) + "\n")
        res = run_matchgate("--check", "-c", path)
        assert res.returncode != 0 and message in res.stderr, res.stderr


def test_a_split_route_answers_over_http2_and_tunnels_nothing_else(start_gateway, backend_factory):
    import h2client
    gw, _, _ = start(start_gateway, backend_factory, weights=(0, 1))
    res = h2client.get(gw.port, b"/h2")
    assert res.status == 200 and json.loads(res.body)["backend"] == "v2"
    assert request(gw.port, "GET", "/h1")[0] == 200
