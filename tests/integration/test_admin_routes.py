"""GET /routes on the admin API (docs/operating.md): the loaded route tree as JSON, each route
with its condition, terminal and the requests it was chosen for; a branch counts the requests of
the routes below it; the token applies; a reload shows the new tree, counted from zero."""

import json

from support import free_port, gateway_config, request

TOKEN = "t0ken"

ROUTES = [
    {"name": "api", "match": {"path": {"prefix": "/api"}}, "quota": {"requests": 1000, "per": "1s"}, "routes": [
        {"name": "v2", "match": {"header": {"name": "X-V", "equals": "2"}}, "forward": "b"},
        {"name": "v1", "forward": "b"}]},
    {"name": "old", "match": {"path": "/old"}, "redirect": {"location": "/new", "status": 301}},
    {"name": "fallback", "respond": {"status": 404, "body": "no\n"}},
]


def routes_of(gw, token=TOKEN):
    status, headers, body = gw.admin_request("GET", "/routes", token=token)
    assert status == 200, body
    assert headers["Content-Type"] == "application/json"
    return json.loads(body)


def test_the_tree_with_hit_counts(start_gateway, backend):
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=ROUTES,
                            admin={"address": f"127.0.0.1:{free_port()}", "token": TOKEN})
    gw = start_gateway(config)

    before = routes_of(gw)
    assert before["generation"] == 1 and before["count"] == 5 and before["hits"] == 0
    api, old, fallback = before["routes"]
    assert api["name"] == "api" and api["kind"] == "branch" and api["match"] == {"path": {"prefix": "/api"}}
    assert api["quota"] == {"requests": 1000, "per_ms": 1000}
    assert api["at"].endswith(":5") and api["at"].startswith(str(gw.config_path))
    assert [c["name"] for c in api["routes"]] == ["v2", "v1"]
    assert api["routes"][0] == {"name": "v2", "kind": "forward", "backend": "b", "hits": 0, "at": api["routes"][0]["at"],
                                "match": {"header": {"name": "x-v", "equals": "2"}}}
    assert api["routes"][1]["match"] is None
    assert (old["kind"], old["status"], old["location"]) == ("redirect", 301, "/new")
    assert (fallback["kind"], fallback["status"]) == ("respond", 404)

    for _ in range(3):
        assert request(gw.port, "GET", "/api/x", {"X-V": "2"})[0] == 200
    assert request(gw.port, "GET", "/api/y")[0] == 200
    for _ in range(2):
        assert request(gw.port, "GET", "/old")[0] == 301
    assert request(gw.port, "GET", "/nothing")[0] == 404

    after = routes_of(gw)
    api, old, fallback = after["routes"]
    assert [c["hits"] for c in api["routes"]] == [3, 1]
    assert api["hits"] == 4, "a branch counts the requests of the routes below it"
    assert (old["hits"], fallback["hits"], after["hits"]) == (2, 1, 7)

    assert gw.admin_request("GET", "/routes")[0] == 401


def test_a_reload_shows_the_new_tree_counted_from_zero(start_gateway, backend):
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=ROUTES,
                            admin={"address": f"127.0.0.1:{free_port()}"})
    gw = start_gateway(config)
    assert request(gw.port, "GET", "/old")[0] == 301
    assert routes_of(gw, None)["routes"][1]["hits"] == 1

    config["routes"] = [{"name": "only", "forward": "b"}]
    gw.write_config(config)
    gw.reload()

    tree = routes_of(gw, None)
    assert tree["generation"] == 2 and tree["count"] == 1
    assert [(r["name"], r["hits"]) for r in tree["routes"]] == [("only", 0)]
    assert request(gw.port, "GET", "/old")[0] == 200
    assert routes_of(gw, None)["routes"][0]["hits"] == 1


def test_per_route_metrics(start_gateway, backend):
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=ROUTES,
                            admin={"address": f"127.0.0.1:{free_port()}"})
    gw = start_gateway(config)
    for _ in range(3):
        assert request(gw.port, "GET", "/api/x", {"X-V": "2"})[0] == 200
    assert request(gw.port, "GET", "/api/status/503")[0] == 503
    assert request(gw.port, "GET", "/old")[0] == 301
    backend_slow = request(gw.port, "GET", "/api/slow?ms=300")
    assert backend_slow[0] == 200

    m = gw.metrics()
    assert m['matchgate_route_requests_total{route="v2"}'] == 3
    assert m['matchgate_route_requests_total{route="v1"}'] == 2
    assert m['matchgate_route_requests_total{route="old"}'] == 1
    assert m['matchgate_route_requests_total{route="fallback"}'] == 0
    assert not any('route="api"' in k for k in m), "a branch has no series of its own"
    assert m['matchgate_route_responses_total{route="v2",class="2xx"}'] == 3
    assert m['matchgate_route_responses_total{route="v1",class="5xx"}'] == 1
    assert m['matchgate_route_responses_total{route="v1",class="2xx"}'] == 1
    assert m['matchgate_route_responses_total{route="old",class="3xx"}'] == 1
    assert m['matchgate_route_duration_seconds_count{route="v1"}'] == 2
    assert m['matchgate_route_duration_seconds_bucket{route="v1",le="+Inf"}'] == 2
    assert m['matchgate_route_duration_seconds_bucket{route="v1",le="0.25"}'] == 1, "the 300 ms request is above 0.25 s"
    assert m['matchgate_route_duration_seconds_bucket{route="v1",le="0.5"}'] == 2
    assert m['matchgate_route_duration_seconds_sum{route="v1"}'] >= 0.3
    buckets = [v for k, v in m.items() if k.startswith('matchgate_route_duration_seconds_bucket{route="v2"')]
    assert buckets == sorted(buckets) and len(buckets) == 12


def test_route_label_cardinality_is_bounded(start_gateway, backend):
    routes = [{"name": f"r{i}", "match": {"path": f"/r{i}"}, "respond": {"status": 204}} for i in range(1005)]
    config = gateway_config(free_port(), routes=routes, admin={"address": f"127.0.0.1:{free_port()}"})
    gw = start_gateway(config)
    assert request(gw.port, "GET", "/r999")[0] == 204
    assert request(gw.port, "GET", "/r1004")[0] == 204

    m = gw.metrics()
    labelled = [k for k in m if k.startswith("matchgate_route_requests_total{")]
    assert len(labelled) == 1000
    assert m['matchgate_route_requests_total{route="r999"}'] == 1
    assert 'matchgate_route_requests_total{route="r1000"}' not in m
    # /routes still counts every route
    tree = routes_of(gw, None)
    assert [r["hits"] for r in tree["routes"] if r["name"] in ("r999", "r1004")] == [1, 1]
