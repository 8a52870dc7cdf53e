"""`matchgate route`: where a request goes, without sending it (docs/operating.md).

The shipped conf/examples/*.routes-test.yaml hold for their configurations; a file of tests
reports every mismatch at its position and exits 1; the text and JSON forms show the routes
tried, the failed conditions, the variables, the quota keys and what the backend gets; and what
the tool predicts is what a running gateway sends to its backend, request for request."""

import json
import re

import pytest

from support import REPO, free_port, gateway_config, request, run_matchgate

EXAMPLES = REPO / "conf" / "examples"
ROUTE_TESTS = sorted(EXAMPLES.glob("*.routes-test.yaml"))


def config_of(test_file):
    return test_file.with_name(test_file.name.replace(".routes-test.yaml", ".yaml"))


def test_there_are_route_tests_for_the_examples():
    assert {p.name for p in ROUTE_TESTS} >= {"multi-tenant.routes-test.yaml", "branches.routes-test.yaml",
                                              "actions.routes-test.yaml", "quotas.routes-test.yaml"}


@pytest.mark.parametrize("tests", ROUTE_TESTS, ids=lambda p: p.name)
def test_shipped_route_tests_hold(matchgate_bin, tests):
    res = run_matchgate("route", "-c", config_of(tests), "--expect", tests)

    assert res.returncode == 0, res.stdout + res.stderr
    n = len(re.findall(r"^  - ", tests.read_text(), re.M))
    assert res.stdout.endswith(f"{tests}: {n} tests, 0 failed\n"), res.stdout


def test_every_mismatch_is_listed_with_its_position(matchgate_bin, tmp_path):
    tests = tmp_path / "t.yaml"
    tests.write_text("tests:\n"
                     "  - name: wrong route\n"
                     "    request: GET http://site.example/api/v3\n"
                     "    expect: {route: api-v1, status: 200}\n"
                     "  - request: GET http://site.example/api\n"
                     "    expect:\n"
                     "      path: /nope\n"
                     "      headers: {X-A: b}\n"
                     "  - request: GET http://site.example/api/v2/x\n"
                     "    expect: {route: api-v2, path: /api/v2/x}\n"
                     "  - request: GET no-host\n"
                     "    expect: {route: site}\n")

    res = run_matchgate("route", "-c", EXAMPLES / "branches.yaml", "--expect", tests)

    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines == [
        f'{tests}:4:21: wrong route: route: expected "api-v1", got "site"',
        f'{tests}:4:37: wrong route: status: expected "200", got none',
        f'{tests}:7:13: GET http://site.example/api: path: expected "/nope", got "/api"',
        f'{tests}:8:22: GET http://site.example/api: headers X-A: expected "b", got none',
        f"{tests}:11:14: GET no-host: request: expected a usable request, got the URL must be absolute "
        "(http://host/path) or a path (/path)",
        f"{tests}: 4 tests, 3 failed",
    ], res.stdout


def test_a_malformed_test_file_is_an_error(matchgate_bin, tmp_path):
    tests = tmp_path / "t.yaml"
    tests.write_text("tests:\n  - request: GET http://a/\n    expect: {rout: x}\n")

    res = run_matchgate("route", "-c", EXAMPLES / "branches.yaml", "--expect", tests)

    assert res.returncode == 2
    assert f"{tests}:3:14: unknown key 'rout' (did you mean 'route'?)" in res.stdout


@pytest.mark.parametrize("text,message", [
    ("- request: GET http://a/\n  expect: {status: 404}\n",
     "1:1: expected a mapping with `tests:` (a list of tests under it), got a sequence"),
    ("tests: []\n", "1:8: no tests: `tests:` is empty, so nothing would be checked"),
    ("", "1:1: missing key 'tests'"),
])
def test_a_file_that_tests_nothing_fails(matchgate_bin, tmp_path, text, message):
    tests = tmp_path / "t.yaml"
    tests.write_text(text)

    res = run_matchgate("route", "-c", EXAMPLES / "branches.yaml", "--expect", tests)

    assert res.returncode == 2  # a CI gate must not pass on a file that checks nothing
    assert f"{tests}:{message}" in res.stdout
    assert "0 tests" not in res.stdout


def test_text_shows_the_walk_the_failed_conditions_and_what_is_sent(matchgate_bin):
    res = run_matchgate("route", "-c", EXAMPLES / "multi-tenant.yaml", "GET", "http://x.test/api/customer/7?a=1",
                        "-H", "X-User-Type: admin", "-H", "Connection: X-Drop", "-H", "X-Drop: 1")

    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "request: GET http://x.test/api/customer/7?a=1\n" in out
    assert "  host 'x.test', path '/api/customer/7', query a=1, tenant (none)\n" in out
    assert re.search(r"  x  crm-by-tenant \(.*multi-tenant.yaml:\d+:5\): no match\n"
                     r'    no match: \{"host":\{"regex":"\^\(\?<tenant>.*\}\} on "x.test"\n', out), out
    assert re.search(r"  >  api-customer \(.*\): branch entered\n"
                     r"    x  customer-v2 \(.*\): no match\n"
                     r'      no match: \{"header":\{"name":"x-user-group","equals":"default"\}\} on \(absent\)\n'
                     r'      no match: \{"not":\{"header":\{"name":"x-user-type","equals":"admin"\}\}\}\n'
                     r"    => customer-v1 \(.*\): match\n", out), out
    assert "route: api-customer > customer-v1 (" in out
    assert "variables: remainder=/7\n" in out
    assert "backend: api (round_robin: http://127.0.0.1:9002)\n" in out
    assert "sent as: GET /api/customer/7?a=1\n  host: x.test\n  x-user-type: admin\n" in out
    assert "x-drop" not in out and "connection" not in out.lower().replace("connections", "")


def test_json_for_scripts(matchgate_bin):
    res = run_matchgate("route", "-c", EXAMPLES / "quotas.yaml", "--json", "GET", "http://acme.example.com/search?q=1",
                        "-H", "X-User-Id: u7")

    assert res.returncode == 0, res.stderr
    e = json.loads(res.stdout)
    assert e["outcome"] == "forward"
    assert e["route"] == "search" and e["route_path"] == ["search"]
    assert e["request"]["tenant"] == "acme"
    assert e["backend"]["name"] == "api"
    assert e["send"]["path"] == "/search" and e["send"]["query"] == "q=1"
    assert e["quotas"]["tenant"] == {"key": "acme", "quota": {"requests": 1000, "per_ms": 1000}, "listed": True}
    assert e["quotas"]["routes"] == [{"route": "search", "key": "u7", "quota": {"requests": 5, "per_ms": 1000},
                                      "counted": True}]
    assert [t["route"] for t in e["tried"]] == ["search"]


@pytest.mark.parametrize("args, status, error, outcome", [
    (["GET", "http://www.example.org/search"], 401, "unidentified", "refused"),
    (["GET", "http://a.example.com/x/../../etc"], 400, "bad-request", "refused"),
    (["GET", "http://a.example.com/a%2Fb"], 400, "bad-request", "refused"),
    (["GET", "/search", "-H", "X-Tenant-Id: acme"], 400, "bad-request", "refused"),  # HTTP/1.1 without Host
    (["GET", "http://a.example.com/search", "-H", "X-Tenant-Id: bad/name"], 400, "bad-request", "refused"),
])
def test_refusals_before_routing(matchgate_bin, args, status, error, outcome):
    res = run_matchgate("route", "-c", EXAMPLES / "quotas.yaml", "--json", *args)

    assert res.returncode == 0, res.stderr
    e = json.loads(res.stdout)
    assert (e["outcome"], e["status"], e["error"]) == (outcome, status, error), e
    assert "route" not in e


def test_no_route_and_terminals(matchgate_bin):
    def explain(conf, *args):
        res = run_matchgate("route", "-c", EXAMPLES / conf, "--json", *args)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    e = explain("minimal.yaml", "GET", "http://a/app/x")
    assert e["outcome"] == "forward" and e["route"] == "app"
    e = explain("minimal.yaml", "GET", "http://a/other")
    assert (e["outcome"], e["status"], e["body"]) == ("respond", 404, "no route\n")
    e = explain("actions.yaml", "GET", "http://a/docs/v1/x")
    assert (e["outcome"], e["status"], e["location"]) == ("redirect", 301, "https://docs.example.com/v2/x")
    e = explain("websocket.yaml", "GET", "http://a/sockets/12", "-H", "Upgrade: websocket", "-H", "Connection: upgrade")
    assert (e["outcome"], e["bridge_path"]) == ("bridge", "/api/customer/${customer}/${msg.type}")
    e = explain("ordering.yaml", "GET", "http://a/accounts/1", "-H", "X-Account-Id: 42")
    assert e["order"] == {"route": "accounts", "key": "42"}


def test_no_route_at_all(matchgate_bin, tmp_path):
    conf = tmp_path / "gw.yaml"
    conf.write_text('listen: [{address: "127.0.0.1:8080"}]\nbackends: {b: {servers: ["http://127.0.0.1:9"]}}\n'
                    "routes:\n  - name: only\n    match: {path: /only}\n    forward: b\n")
    res = run_matchgate("route", "-c", conf, "GET", "http://a/else")

    assert res.returncode == 0
    assert "outcome: 404 no-route (no route matches the request)\n" in res.stdout
    assert re.search(r'x  only \(.*\): no match\n    no match: \{"path":"/only"\} on "/else"\n', res.stdout), res.stdout


@pytest.mark.parametrize("args, message", [
    (["GET", "ftp://a/x"], "the URL's scheme must be http or https"),
    (["GET", "x"], "the URL must be absolute"),
    (["G T", "http://a/"], "the method is not a token"),
    (["GET", "http://a/", "-H", "NoColon"], "a header must be written 'Name: value'"),
    (["GET", "http://a/", "-H", "Bad Name: x"], "a header has an invalid name or value"),
])
def test_unusable_requests_exit_2(matchgate_bin, args, message):
    res = run_matchgate("route", "-c", EXAMPLES / "minimal.yaml", *args)

    assert res.returncode == 2
    assert message in res.stderr


def test_usage_and_invalid_configuration(matchgate_bin, tmp_path):
    assert run_matchgate("route", "-c", EXAMPLES / "minimal.yaml", "GET").returncode == 2
    assert run_matchgate("route", "GET", "http://a/").returncode == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("routes: 3\n")
    res = run_matchgate("route", "-c", bad, "GET", "http://a/")
    assert res.returncode == 3
    assert f"{bad}:" in res.stderr


AGREE_ROUTES = [
    {"name": "crm", "match": {"all": [{"host": {"regex": "^(?<tenant>[a-z0-9-]+)\\.example\\.com$"}},
                                      {"path": {"prefix": "/crm"}}]},
     "actions": [{"set_header": {"X-Tenant": "${tenant}"}}, {"remove_header": "Cookie"},
                 {"rewrite_path": "/${tenant}/crmapp${remainder}"}],
     "forward": "b"},
    {"name": "api", "match": {"path": {"prefix": "/api"}}, "routes": [
        {"name": "v2", "match": {"header": {"name": "X-V", "equals": "2"}},
         "actions": [{"rewrite_path": "/v2${remainder}"}, {"set_query": "from=${query.id}&m=${method}"},
                     {"set_method": "POST"}],
         "forward": {"backend": "b", "host": "api.internal"}},
        {"name": "v1", "match": {"not": {"method": "DELETE"}}, "forward": "b"}]},
    {"name": "rest", "actions": [{"add_header": {"X-Seen": "${path}"}}], "forward": "b"},
]

AGREE_REQUESTS = [
    ("GET", "/crm/a/b?x=1", {"Host": "acme.example.com", "Cookie": "c=1", "X-Keep": "k"}),
    ("GET", "/crm/./a//b/../c", {"Host": "Beta.Example.com:81"}),
    ("GET", "/api/items?id=7", {"Host": "h", "X-V": "2"}),
    ("GET", "/api/items", {"Host": "h"}),
    ("DELETE", "/api/items", {"Host": "h"}),
    ("PUT", "/%7Euser/x?q", {"Host": "h", "Connection": "X-Gone", "X-Gone": "1"}),
    ("GET", "/t", {"Host": "h", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                   "tracestate": "a=1"}),
    ("GET", "/t", {"Host": "h", "traceparent": "bad", "tracestate": "a=1"}),
]


def test_the_tool_predicts_what_the_gateway_sends(start_gateway, backend, tmp_path):
    port = free_port()
    gw = start_gateway(gateway_config(port, backends={"b": [backend.url]}, routes=AGREE_ROUTES))
    for method, target, headers in AGREE_REQUESTS:
        lines = [a for name, value in headers.items() if name != "Host" for a in ("-H", f"{name}: {value}")]
        res = run_matchgate("route", "-c", gw.config_path, "--json", method,
                            f"http://{headers['Host']}{target}", *lines)
        assert res.returncode == 0, res.stderr
        e = json.loads(res.stdout)
        assert e["outcome"] == "forward", e

        backend.requests.clear()
        status, _, body = request(port, method, target, headers)
        assert status == 200, body
        seen = backend.requests[-1]
        sent = e["send"]
        what = f"{method} {target}: predicted {sent}"
        assert (seen.method, seen.path, seen.query) == (sent["method"], sent["path"], sent["query"]), what
        assert seen.headers["host"] == sent["host"], what
        predicted = {n: v for n, v in sent["headers"]}
        for name, value in predicted.items():
            assert seen.headers.get(name) == value, f"{what}: {name}"
        added = {"host", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-request-id", "traceparent",
                 "content-length", "user-agent", "accept-encoding"}
        assert set(seen.headers) - added <= set(predicted), f"{what}: {seen.headers}"
        assert ("tracestate" in seen.headers) == ("tracestate" in predicted), what
