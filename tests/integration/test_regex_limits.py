"""A regex that gives up (PCRE2's match limit on a catastrophic backtracking pattern) fails closed:
the request is refused with 400 `bad-request`, never forwarded, and one line on stderr names the
route (or tenants.identify) and the regex; whatever else decides the request still does, and the
gateway stays responsive."""

import concurrent.futures
import re
import time

from support import free_port, gateway_config, request

RUNAWAY = "a" * 40 + "b"  # ^(a+)+$ backtracks about 2^40 times on it without a limit
DENY = "^(a+)+$"


def refused(status, headers, body):
    return status == 400 and headers["X-Matchgate-Error"] == "bad-request" and b"a regex hit the match limit" in body


def undecided_lines(gw):
    return re.findall(r"^matchgate: .*: regex '.*' hit the match limit: request refused \(400\)$", gw.stderr(), re.M)


def test_a_deny_route_with_a_runaway_regex_refuses_instead_of_forwarding(start_gateway, backend):
    routes = [{"name": "deny", "match": {"path": {"regex": r"^/x/(a+)+$"}}, "respond": {"status": 403, "body": "denied\n"}},
              {"name": "allow", "forward": "b"}]
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=routes))

    started = time.monotonic()
    assert refused(*request(gw.port, "GET", f"/x/{RUNAWAY}"))
    assert time.monotonic() - started < 5
    assert request(gw.port, "GET", "/x/aaaa")[0] == 403, "a match still denies"
    assert request(gw.port, "GET", "/y")[0] == 200, "a non-match still passes"
    assert [r.path for r in backend.received()] == ["/y"], "the refused request never reached the backend"
    assert undecided_lines(gw) == [f"matchgate: route 'deny': regex '^/x/(a+)+$' hit the match limit: request refused (400)"]


def test_not_any_all_and_repeated_values_fail_closed(start_gateway, backend):
    routes = [
        # allowed only when the header does NOT match: an undecided regex must not allow
        {"name": "only-safe", "match": {"all": [{"path": {"prefix": "/safe"}},
                                                {"not": {"header": {"name": "X-Q", "regex": DENY}}}]}, "forward": "b"},
        {"name": "safe-refused", "match": {"path": {"prefix": "/safe"}}, "respond": {"status": 403}},
        # denied when either holds: the path decides alone when it matches
        {"name": "deny-any", "match": {"any": [{"path": "/admin"}, {"query": {"name": "q", "regex": DENY}}]},
         "respond": {"status": 403}},
        {"name": "allow", "forward": "b"},
    ]
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=routes))

    assert refused(*request(gw.port, "GET", "/safe/1", headers={"X-Q": RUNAWAY}))
    assert request(gw.port, "GET", "/safe/2", headers={"X-Q": "b"})[0] == 200
    assert request(gw.port, "GET", "/safe/3", headers={"X-Q": "aaa"})[0] == 403
    assert request(gw.port, "GET", f"/admin?q={RUNAWAY}")[0] == 403, "decided by the path"
    assert refused(*request(gw.port, "GET", f"/other?q={RUNAWAY}"))
    assert refused(*request(gw.port, "GET", f"/other?q=b&q={RUNAWAY}")), "any value may be the one that matches"
    assert request(gw.port, "GET", f"/other?q={RUNAWAY}&q=aa")[0] == 403, "one value that matches decides"
    assert request(gw.port, "GET", "/other?q=b")[0] == 200
    assert sorted(r.path for r in backend.received()) == ["/other", "/safe/2"]
    assert len(undecided_lines(gw)) == 3


def test_a_tenant_rule_that_cannot_decide_refuses(start_gateway, backend):
    tenants = {"identify": [{"host": r"^(?<tenant>(a+)+)\.example$"}, {"header": "X-Tenant"}],
               "default_quota": {"requests": 1000, "per": "1s"}}
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[{"name": "all", "forward": "b"}],
                                      tenants=tenants))

    assert refused(*request(gw.port, "GET", "/", headers={"Host": f"{RUNAWAY}.example", "X-Tenant": "acme"}))
    assert request(gw.port, "GET", "/ok", headers={"Host": "aaa.example"})[0] == 200
    assert [r.path for r in backend.received()] == ["/ok"]
    assert undecided_lines(gw) == [f"matchgate: tenants.identify: regex '^(?<tenant>(a+)+)\\.example$' hit the match limit: "
                                   f"request refused (400)"]


def test_a_flood_of_runaway_requests_leaves_the_gateway_responsive(start_gateway, backend):
    routes = [{"name": "deny", "match": {"header": {"name": "X-Q", "regex": DENY}}, "respond": {"status": 403}},
              {"name": "allow", "forward": "b"}]
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=routes))

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: request(gw.port, "GET", f"/{i}", headers={"X-Q": RUNAWAY}), range(200)))
        status, _, _ = request(gw.port, "GET", "/fine")
    elapsed = time.monotonic() - started

    assert all(refused(*r) for r in results)
    assert status == 200
    assert [r.path for r in backend.received()] == ["/fine"]
    # each refusal costs at most the match limit (milliseconds); unbounded, one would take hours
    assert elapsed < 60, elapsed
