"""Throttle keys a client can invent, through the real gateway: what a made-up tenant name
costs in memory (the gateway's RSS, per key, against a big default quota), the key ceiling
(tenants.max_keys: new unlisted keys refused 429 `throttled` with a Retry-After, listed
tenants and keys the configuration bounds still served), the table shrinking back once
windows pass, and a reload moving the ceiling."""

import http.client
import threading
import time

from support import free_port, gateway_config, request, wait_until


def start(start_gateway, tenants, routes=None, **top):
    port = free_port()
    routes = routes or [{"name": "all", "respond": {"status": 200, "body": "ok\n"}}]
    conf = gateway_config(port, None, routes, **top)
    conf["tenants"] = tenants
    return start_gateway(conf)


def get(gw, tenant, path="/", headers=None):
    h = dict(headers or {})
    if tenant is not None:
        h["X-Tenant-Id"] = tenant
    return request(gw.port, "GET", path, h)


def send_all(gw, tenants, threads=4):
    """One GET / per name in `tenants`, spread over `threads` keep-alive connections: the
    statuses, in no particular order."""
    statuses, lock = [], threading.Lock()

    def run(names):
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        got = []
        try:
            for name in names:
                conn.request("GET", "/", headers={"X-Tenant-Id": name})
                resp = conn.getresponse()
                resp.read()
                got.append(resp.status)
        finally:
            conn.close()
        with lock:
            statuses.extend(got)

    workers = [threading.Thread(target=run, args=(tenants[i::threads],)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert len(statuses) == len(tenants), "a request got no answer"
    return statuses


def test_invented_tenants_cost_bytes_not_their_quota(start_gateway):
    """The issue's case scaled down: a big default quota (8000 per hour, 64 KB of ring per key
    when rings had N slots) and one request per made-up name. What the keys cost is the RSS
    growth of those requests beyond what as many requests of one tenant grow it (the same work
    otherwise: under ASan its quarantine grows with requests, not keys)."""
    keys = 2000
    gw = start(start_gateway, {"identify": [{"header": "X-Tenant-Id"}],
                               "default_quota": {"requests": 8000, "per": "1h"}})
    assert set(send_all(gw, ["warm"] * 1000)) == {200}  # pools, connections, the allocator settle
    rss0 = gw.rss_kib()
    assert set(send_all(gw, ["same"] * keys)) == {200}
    rss1 = gw.rss_kib()
    assert set(send_all(gw, [f"invented-{i:05d}" for i in range(keys)])) == {200}
    rss2 = gw.rss_kib()
    per_key = max(0, (rss2 - rss1) - (rss1 - rss0)) * 1024 / keys
    print(f"RSS {rss0} -> {rss1} -> {rss2} KiB: {per_key:.0f} bytes per invented tenant")
    # today about 135 bytes (docs/performance.md); a ring of N slots was 64,064 bytes per key
    assert per_key < 4096, f"{per_key:.0f} bytes of RSS per invented tenant ({rss0} -> {rss1} -> {rss2} KiB)"


def ceiling_routes():
    ok = {"status": 200, "body": "ok\n"}
    return [
        {"name": "per-user", "match": {"path": {"prefix": "/users"}},
         "quota": {"requests": 100, "per": "30s", "key": "${header.X-User}"}, "respond": ok},
        {"name": "shared", "match": {"path": {"prefix": "/shared"}}, "quota": {"requests": 100, "per": "30s", "key": "all"},
         "respond": ok},
        {"name": "per-tenant", "match": {"path": {"prefix": "/mine"}}, "quota": {"requests": 100, "per": "30s"},
         "respond": ok},
        {"name": "all", "respond": ok},
    ]


def expect_refused_for_the_ceiling(response):
    status, headers, body = response
    assert status == 429, (status, body)
    assert headers["X-Matchgate-Error"] == "throttled"
    assert b"tenants.max_keys" in body, body
    assert headers["RateLimit-Remaining"] == "0"
    retry = int(headers["Retry-After"])
    assert 1 <= retry <= 30, retry
    return retry


def test_past_max_keys_new_unlisted_keys_are_refused_and_listed_tenants_served(start_gateway):
    tenants = {"identify": [{"header": "X-Tenant-Id"}], "default_quota": {"requests": 100, "per": "30s"},
               "quotas": {"acme": {"requests": 100, "per": "30s"}}, "max_keys": 4}
    port = free_port()
    conf = gateway_config(port, None, ceiling_routes(), tenants=tenants)
    gw = start_gateway(conf)
    for name in ("n1", "n2", "n3", "n4"):
        assert get(gw, name)[0] == 200, name
    expect_refused_for_the_ceiling(get(gw, "n5"))
    status, headers, _ = get(gw, "n5")
    assert status == 429 and headers["RateLimit-Limit"] == "100"
    # keys already in the table go on as before
    assert [get(gw, "n1")[0] for _ in range(3)] == [200] * 3
    # a route key that is literal text is one key whoever asks: it enters past the ceiling
    assert get(gw, "n1", "/shared")[0] == 200
    # a listed tenant is never refused for the ceiling: its own key, a route key that is its name
    assert get(gw, "acme")[0] == 200
    assert get(gw, "acme", "/shared")[0] == 200
    assert get(gw, "acme", "/mine")[0] == 200
    assert [get(gw, "acme")[0] for _ in range(3)] == [200] * 3
    # route keys made from request data are bounded too, whoever the tenant; an unlisted
    # tenant's name as a route key as well
    expect_refused_for_the_ceiling(get(gw, "acme", "/users", {"X-User": "u1"}))
    expect_refused_for_the_ceiling(get(gw, "n1", "/mine"))
    # once an eviction pass has looked at the table (once a second), Retry-After is the wait
    # until the first window of the table ends: n2's, admitted a moment ago, 30 s long
    time.sleep(1.5)
    retry = expect_refused_for_the_ceiling(get(gw, "n6"))
    assert retry >= 20, retry
    # a reload raising the ceiling (7 keys now: n1..n4, acme, shared, acme's per-tenant) lets
    # the next new key in, one
    tenants["max_keys"] = 8
    gw.write_config(conf)
    assert "configuration reloaded" in gw.reload()
    assert get(gw, "n6")[0] == 200
    expect_refused_for_the_ceiling(get(gw, "n7"))


def test_the_table_shrinks_back_once_windows_pass(start_gateway):
    port, admin = free_port(), free_port()
    tenants = {"identify": [{"header": "X-Tenant-Id"}], "default_quota": {"requests": 5, "per": "1s"}, "max_keys": 2}
    conf = gateway_config(port, None, [{"name": "all", "respond": {"status": 200}}], admin={"address": f"127.0.0.1:{admin}"},
                          tenants=tenants)
    gw = start_gateway(conf)
    assert get(gw, "a")[0] == 200 and get(gw, "b")[0] == 200
    assert get(gw, "c")[0] == 429
    m = gw.metrics()
    assert (m["matchgate_throttle_keys"], m["matchgate_throttle_max_keys"]) == (2, 2)
    assert m["matchgate_throttle_rejected_total"] == 1
    # a and b leave the table once their 1 s windows have passed (the evictor runs every
    # second): c gets in then, without anything else happening
    assert wait_until(lambda: get(gw, "c")[0] == 200, 10, interval=0.2), "the table did not shrink back"
    # (the pass that made room may have come between a's window end and b's)
    assert wait_until(lambda: gw.metrics()["matchgate_throttle_keys"] == 1, 5), "a and b were not both forgotten"
    status, _, body = gw.admin_request("GET", "/tenants")
    assert status == 200 and b'"c"' in body and b'"a"' not in body and b'"b"' not in body, body
