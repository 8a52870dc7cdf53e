"""Server health: outlier ejection (passive checks), 503 no-healthy-server, panic, and the
health state across reloads (issue 16)."""

import json
import socket
import statistics
import threading
import time

from support import free_port, gateway_config, request

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}


class Resetter:
    """A 'server' on `port` that accepts and closes at once (a crashed process behind a live
    listener): each attempt is a reset, which a retry does not cover. Counts connections."""

    def __init__(self, port, read_first=False):
        self.read_first = read_first  # reset once the request head came (not at the connect)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        self.sock.settimeout(0.05)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            if self.read_first:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                except OSError:
                    pass
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()

    def stop(self):
        self._stop = True
        self._thread.join(timeout=5)
        self.sock.close()


def backend_of(resp):
    return json.loads(resp)["backend"]


def test_passive_ejection_stops_traffic_to_a_dead_server(start_gateway, backend_factory):
    one, two, three = backend_factory("one"), backend_factory("two"), backend_factory("three")
    backends = {"b": {"servers": [one.url, two.url, three.url], "connect_timeout": "1s", "retries": 2,
                      "outlier": {"consecutive_failures": 3, "eject_for": "30s"}}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))
    for i in range(9):
        assert request(gw.port, "GET", f"/api/warm{i}")[0] == 200

    # the server's process dies but something still accepts on its port: every attempt there is
    # a reset, which no retry covers; the passive checks must take it out after 3
    port = two.port
    two.stop()
    dead = Resetter(port)
    try:
        statuses = []
        for i in range(60):
            status, headers, resp = request(gw.port, "GET", f"/api/load{i}")
            statuses.append(status)
            if status == 200:
                assert backend_of(resp) in ("one", "three")
        assert dead.connections <= 3, f"{dead.connections} attempts went to the dead server"
        # (a reset before the request went out may count as a connect failure, which a retry hides)
        assert 1 <= statuses.count(502) <= dead.connections, statuses
        assert statuses[-50:] == [200] * 50, statuses  # once ejected, nobody sees a 502
    finally:
        dead.stop()


def test_refused_connections_eject_and_retries_hide_the_window(start_gateway, backend_factory):
    one, two, three = backend_factory("one"), backend_factory("two"), backend_factory("three")
    backends = {"b": {"servers": [one.url, two.url, three.url], "connect_timeout": "1s", "retries": 2,
                      "outlier": {"consecutive_failures": 2, "eject_for": "30s"}}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))
    two.stop()
    seen = [request(gw.port, "GET", f"/api/r{i}") for i in range(60)]
    assert [s for s, _, _ in seen] == [200] * 60, "a refused connect is retried on the next server"
    names = [backend_of(b) for _, _, b in seen]
    assert abs(names.count("one") - names.count("three")) <= 3, names  # the others share its load


def test_no_healthy_server_is_a_fast_503_until_the_ejection_ends(start_gateway):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    backends = {"b": {"servers": [dead], "connect_timeout": "1s",
                      "outlier": {"consecutive_failures": 2, "eject_for": "1s", "max_eject_for": "4s"}}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))
    assert [request(gw.port, "GET", "/api/x")[0] for _ in range(2)] == [502, 502]

    times = []
    for i in range(20):
        t0 = time.monotonic()
        status, headers, body = request(gw.port, "GET", f"/api/fast{i}")
        times.append(time.monotonic() - t0)
        assert status == 503 and headers["X-Matchgate-Error"] == "no-healthy-server", (status, body)
        assert headers["Retry-After"] == "1"
    assert statistics.median(times) < 0.010, times

    # the ejection ends: the next request tries the server (half-open), fails, and the server is
    # out again for twice as long
    time.sleep(1.1)
    status, headers, _ = request(gw.port, "GET", "/api/probe")
    assert (status, headers["X-Matchgate-Error"]) == (502, "backend-unavailable")
    status, headers, _ = request(gw.port, "GET", "/api/again")
    assert (status, headers["X-Matchgate-Error"]) == (503, "no-healthy-server")
    assert headers["Retry-After"] == "2"


def test_panic_uses_unhealthy_servers_anyway(start_gateway):
    dead = f"http://127.0.0.1:{free_port()}"
    backends = {"b": {"servers": [dead], "connect_timeout": "1s", "panic": True,
                      "outlier": {"consecutive_failures": 1}}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))
    for i in range(4):
        status, headers, _ = request(gw.port, "GET", f"/api/p{i}")
        assert (status, headers["X-Matchgate-Error"]) == (502, "backend-unavailable")


def test_the_bridge_and_the_tunnel_get_503_too(start_gateway):
    dead = f"http://127.0.0.1:{free_port()}"
    backends = {"b": {"servers": [dead], "connect_timeout": "1s", "outlier": {"consecutive_failures": 1}}}
    routes = [{"name": "ws", "match": {"path": "/ws"}, "forward": "b"}, API]
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=routes))
    assert request(gw.port, "GET", "/api/x")[0] == 502
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    status, headers, _ = request(gw.port, "GET", "/ws", headers=upgrade)
    assert (status, headers["X-Matchgate-Error"]) == (503, "no-healthy-server")
    assert int(headers["Retry-After"]) >= 1


def test_a_reload_keeping_the_server_keeps_its_ejection(start_gateway, backend_factory):
    live = backend_factory("live")
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = gateway_config(free_port(), routes=[API],
                         backends={"b": {"servers": [dead], "connect_timeout": "1s",
                                         "outlier": {"consecutive_failures": 1, "eject_for": "1m"}}})
    gw = start_gateway(cfg)
    assert request(gw.port, "GET", "/api/x")[0] == 502
    assert request(gw.port, "GET", "/api/x")[0] == 503

    cfg["backends"]["b"]["timeout"] = "5s"  # same server: its ejection stays
    gw.write_config(cfg)
    gw.reload()
    status, headers, _ = request(gw.port, "GET", "/api/x")
    assert (status, headers["X-Matchgate-Error"]) == (503, "no-healthy-server")

    cfg["backends"]["b"]["servers"] = [live.url]  # another server: it starts healthy
    gw.write_config(cfg)
    gw.reload()
    assert request(gw.port, "GET", "/api/x")[0] == 200


# --------------------------------------------------------------------------------------
# Active checks


def health_lines(gw):
    out = []
    for line in gw.stderr().splitlines():
        if line.startswith("{") and '"health_check"' in line:
            out.append(json.loads(line))
    return out


def wait_for_line(gw, state, server, timeout):
    from support import wait_until
    return wait_until(lambda: [l for l in health_lines(gw) if l["state"] == state and l["server"] == server], timeout)


def app_requests(backend):
    return [r for r in backend.received() if r.path != "/healthz"]


def test_active_checks_take_a_server_out_and_bring_it_back(start_gateway, backend_factory):
    one, two, three = backend_factory("one"), backend_factory("two"), backend_factory("three")
    health = {"path": "/healthz", "interval": "200ms", "timeout": "500ms", "healthy": 2, "unhealthy": 2,
              "host": "check.internal", "headers": {"X-Check": "yes"}}
    backends = {"b": {"servers": [one.url, two.url, three.url], "connect_timeout": "1s", "health": health}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API], workers=2))

    time.sleep(1.0)
    checks = two.received("/healthz")
    # one prober for the process, not one per worker: about 1 s / 200 ms checks
    assert 3 <= len(checks) <= 7, len(checks)
    headers = checks[0].headers
    assert headers["host"] == "check.internal" and headers["x-check"] == "yes"
    assert headers["user-agent"] == "matchgate-health-check"

    two.health_status = 503
    t0 = time.monotonic()
    assert wait_for_line(gw, "unhealthy", two.url, 5.0), gw.stderr()
    detect = time.monotonic() - t0
    assert detect < 2 * 0.2 + 0.5, detect  # interval x unhealthy, and a tick
    line = [l for l in health_lines(gw) if l["state"] == "unhealthy"][0]
    assert line["backend"] == "b" and line["status"] == 503

    before = len(app_requests(two))
    statuses = [request(gw.port, "GET", f"/api/a{i}")[0] for i in range(30)]
    assert statuses == [200] * 30
    assert len(app_requests(two)) == before, "no request goes to an unhealthy server"

    two.health_status = None
    assert wait_for_line(gw, "healthy", two.url, 5.0), gw.stderr()
    names = [backend_of(request(gw.port, "GET", f"/api/b{i}")[2]) for i in range(9)]
    assert names.count("two") == 3, names


def test_active_checks_of_a_dead_server_and_all_down(start_gateway, backend_factory):
    one = backend_factory("one")
    health = {"path": "/healthz", "interval": "100ms", "timeout": "200ms", "unhealthy": 1, "healthy": 1}
    backends = {"b": {"servers": [one.url], "connect_timeout": "1s", "health": health}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))
    port = one.port
    one.stop()
    assert wait_for_line(gw, "unhealthy", one.url, 5.0), gw.stderr()
    line = [l for l in health_lines(gw) if l["state"] == "unhealthy"][0]
    assert "error" in line and "status" not in line
    t0 = time.monotonic()
    status, headers, _ = request(gw.port, "GET", "/api/x")
    assert time.monotonic() - t0 < 0.1
    assert (status, headers["X-Matchgate-Error"], headers["Retry-After"]) == (503, "no-healthy-server", "1")

    again = backend_factory("again", port=port)  # the server restarts on its port
    assert wait_for_line(gw, "healthy", again.url, 5.0), gw.stderr()
    assert request(gw.port, "GET", "/api/y")[0] == 200


def test_expect_decides_what_passes(start_gateway, backend_factory):
    one = backend_factory("one")
    one.health_status = 500
    health = {"path": "/healthz", "interval": "100ms", "unhealthy": 1, "expect": "500-503"}
    backends = {"b": {"servers": [one.url], "connect_timeout": "1s", "health": health}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))
    time.sleep(0.5)
    assert len(one.received("/healthz")) >= 2
    assert not health_lines(gw)
    one.health_status = 200  # outside expect: a failure
    assert wait_for_line(gw, "unhealthy", one.url, 5.0), gw.stderr()


# --------------------------------------------------------------------------------------
# Operating it: GET /backends, drain / disable / enable, per-server metrics


def admin_of(cfg):
    cfg["admin"] = {"address": f"127.0.0.1:{free_port()}"}
    return cfg


def servers_of(gw, backend="b"):
    status, _, body = gw.admin_request("GET", "/backends")
    assert status == 200
    return [b for b in json.loads(body)["backends"] if b["name"] == backend][0]["servers"]


def test_backends_lists_states_and_ejections(start_gateway, backend_factory):
    one = backend_factory("one")
    dead = f"http://127.0.0.1:{free_port()}"
    backends = {"b": {"servers": [one.url, dead], "connect_timeout": "1s", "retries": 1,
                      "outlier": {"consecutive_failures": 1, "eject_for": "1m"},
                      "health": {"path": "/healthz", "interval": "100ms", "unhealthy": 100}}}
    gw = start_gateway(admin_of(gateway_config(free_port(), backends=backends, routes=[API])))
    for i in range(4):
        assert request(gw.port, "GET", f"/api/x{i}")[0] == 200
    time.sleep(0.3)
    one_s, dead_s = servers_of(gw)
    assert (one_s["index"], one_s["url"], one_s["state"], one_s["ejected_for_ms"]) == (0, one.url, "healthy", None)
    assert one_s["requests"] >= 2 and one_s["responses"]["2xx"] == one_s["requests"] and one_s["in_flight"] == 0
    assert one_s["last_check"]["status"] == 200
    assert (dead_s["state"], dead_s["ejections"], dead_s["connect_failures"]) == ("ejected", 1, 1)
    assert 50000 < dead_s["ejected_for_ms"] <= 60000
    assert dead_s["last_check"]["status"] == 0

    m = gw.metrics()
    assert m[f'matchgate_server_ejections_total{{backend="b",server="{dead}"}}'] == 1
    assert m[f'matchgate_server_state{{backend="b",server="{dead}",state="ejected"}}'] == 1
    assert m[f'matchgate_server_state{{backend="b",server="{dead}",state="healthy"}}'] == 0
    assert m[f'matchgate_server_state{{backend="b",server="{one.url}",state="healthy"}}'] == 1
    assert m[f'matchgate_server_responses_total{{backend="b",server="{one.url}",class="2xx"}}'] >= one_s["requests"]
    assert m[f'matchgate_server_connect_failures_total{{backend="b",server="{dead}"}}'] == 1


def test_disable_and_enable_hold_across_a_reload(start_gateway, backend_factory):
    one, two = backend_factory("one"), backend_factory("two")
    cfg = admin_of(gateway_config(free_port(), backends={"b": [one.url, two.url]}, routes=[API]))
    gw = start_gateway(cfg)
    status, _, body = gw.admin_request("POST", "/backends/b/servers/1/disable")
    assert status == 200 and json.loads(body)["state"] == "disabled"
    names = [backend_of(request(gw.port, "GET", f"/api/d{i}")[2]) for i in range(6)]
    assert names == ["one"] * 6

    cfg["backends"]["b"]["timeout"] = "5s"
    gw.write_config(cfg)
    gw.reload()
    assert servers_of(gw)[1]["state"] == "disabled"
    assert [backend_of(request(gw.port, "GET", f"/api/e{i}")[2]) for i in range(4)] == ["one"] * 4

    assert gw.admin_request("POST", "/backends/b/servers/0/disable")[0] == 200
    status, headers, _ = request(gw.port, "GET", "/api/none")
    assert (status, headers["X-Matchgate-Error"]) == (503, "no-healthy-server")

    assert gw.admin_request("POST", "/backends/b/servers/1/enable")[0] == 200
    assert gw.admin_request("POST", "/backends/b/servers/0/enable")[0] == 200
    names = [backend_of(request(gw.port, "GET", f"/api/f{i}")[2]) for i in range(6)]
    assert sorted(set(names)) == ["one", "two"]

    for path, code in (("/backends/nope/servers/0/drain", 404), ("/backends/b/servers/2/drain", 404),
                       ("/backends/b/servers/x/drain", 404), ("/backends/b/servers/0/explode", 404)):
        assert gw.admin_request("POST", path)[0] == code, path


def test_drain_keeps_an_open_websocket_session(start_gateway):
    from wsbackend import WsBackend, connect, run
    ws1, ws2 = WsBackend(), WsBackend()
    try:
        routes = [{"name": "ws", "match": {"all": [{"path": {"prefix": "/ws"}}, {"websocket": True}]},
                   "actions": [{"rewrite_path": "${remainder}"}], "forward": "live"}]
        port = free_port()
        gw = start_gateway(admin_of(gateway_config(port, {"live": [ws1.url, ws2.url]}, routes)))
        url = f"ws://127.0.0.1:{port}/ws/echo"

        async def main():
            async with connect(url) as ws:
                await ws.send("before")
                assert await ws.recv() == "before"
                first = ws1 if len(ws1.handshakes) == 1 else ws2
                other = ws2 if first is ws1 else ws1
                index = 0 if first is ws1 else 1
                status, _, body = gw.admin_request("POST", f"/backends/live/servers/{index}/drain")
                assert status == 200 and json.loads(body)["state"] == "draining"
                before = len(first.handshakes)
                for i in range(6):  # new sessions go to the other server only
                    async with connect(url) as other_ws:
                        await other_ws.send(f"new {i}")
                        assert await other_ws.recv() == f"new {i}"
                assert len(first.handshakes) == before and len(other.handshakes) >= 6
                for i in range(20):  # the drained server's session goes on
                    await ws.send(f"after {i}")
                    assert await ws.recv() == f"after {i}"

        run(main())
    finally:
        ws1.stop()
        ws2.stop()


# --------------------------------------------------------------------------------------
# Balancing: hash and least_request


def test_hash_keeps_a_tenant_on_one_server(start_gateway, backend_factory):
    servers = [backend_factory(n) for n in ("one", "two", "three")]
    backends = {"b": {"servers": [s.url for s in servers], "connect_timeout": "1s", "balance": "hash",
                      "hash_key": "${header.X-Tenant}"}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))
    homes = {}
    for i in range(500):
        tenant = f"t{i % 25}"
        status, _, body = request(gw.port, "GET", f"/api/h{i}", headers={"X-Tenant": tenant})
        assert status == 200
        homes.setdefault(tenant, set()).add(backend_of(body))
    assert all(len(h) == 1 for h in homes.values()), homes
    assert len({next(iter(h)) for h in homes.values()}) == 3, "25 tenants spread over the three servers"

    # a server out: its tenants go elsewhere, the others stay; back: they come back
    index = [s.name for s in servers].index(next(iter(homes["t0"])))
    servers[index].stop()  # refused: the retry (and then the next choice on the ring) takes its keys
    for i in range(25):
        tenant = f"t{i}"
        status, _, body = request(gw.port, "GET", "/api/moved", headers={"X-Tenant": tenant})
        assert status == 200
        if next(iter(homes[tenant])) != servers[index].name:
            assert backend_of(body) == next(iter(homes[tenant])), tenant


def test_least_request_avoids_a_slow_server(start_gateway, backend_factory):
    fast, slow = backend_factory("fast"), backend_factory("slow")
    slow.delay_ms = 200
    backends = {"b": {"servers": [fast.url, slow.url], "connect_timeout": "1s", "balance": "least_request"}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))
    names, lock = [], threading.Lock()

    def client(n):
        for i in range(n):
            name = backend_of(request(gw.port, "GET", f"/api/q{i}")[2])
            with lock:
                names.append(name)

    clients = [threading.Thread(target=client, args=(15,)) for _ in range(8)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    # requests pile up at the slow server: the two choices send the others to the fast one
    # (round robin would give each half)
    assert len(names) == 120
    assert names.count("fast") >= 0.8 * len(names), (names.count("fast"), names.count("slow"))


# --------------------------------------------------------------------------------------
# Retries: retry_on, retry_backoff


def test_retry_on_statuses_and_resets(start_gateway, backend_factory):
    good, bad = backend_factory("good"), backend_factory("bad")
    bad.force_status = 503
    plain = {"servers": [good.url, bad.url], "connect_timeout": "1s", "retries": 1}
    backends = {"b": plain, "r": dict(plain, retry_on=["connect-failure", "503"])}
    routes = [{"name": "r", "match": {"path": {"prefix": "/retry"}}, "forward": "r"}, API]
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=routes))
    statuses = [request(gw.port, "GET", f"/api/p{i}")[0] for i in range(10)]
    assert statuses.count(503) == 5, "by default a 503 goes to the client as it came"
    got = [request(gw.port, "GET", f"/retry/p{i}") for i in range(10)]
    assert [s for s, _, _ in got] == [200] * 10 and {backend_of(b) for _, _, b in got} == {"good"}
    statuses = [request(gw.port, "POST", f"/retry/w{i}", body=b"x")[0] for i in range(10)]
    assert statuses.count(503) == 5, "a POST is never retried"

    # a reset before the response: retried with `reset` only
    port = bad.port
    bad.stop()
    dead = Resetter(port, read_first=True)
    try:
        cfg_backends = {"b": plain, "r": dict(plain, retry_on=["reset"])}
        gw2 = start_gateway(gateway_config(free_port(), backends=cfg_backends, routes=routes))
        assert [request(gw2.port, "GET", f"/retry/x{i}")[0] for i in range(10)] == [200] * 10
        assert 502 in [request(gw2.port, "GET", f"/api/x{i}")[0] for i in range(10)]
    finally:
        dead.stop()


def test_retry_backoff_waits_within_timeout(start_gateway, backend_factory):
    good = backend_factory("good")
    dead = f"http://127.0.0.1:{free_port()}"
    b = {"servers": [dead, good.url], "balance": "first_available", "connect_timeout": "1s", "retries": 1,
         "retry_backoff": "200ms"}
    backends = {"b": b, "t": dict(b, retry_backoff="2s", timeout="300ms")}
    routes = [{"name": "t", "match": {"path": {"prefix": "/short"}}, "forward": "t"}, API]
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=routes))
    for i in range(3):
        t0 = time.monotonic()
        assert request(gw.port, "GET", f"/api/b{i}")[0] == 200
        assert time.monotonic() - t0 >= 0.1  # jittered from half of it
    t0 = time.monotonic()
    status, headers, _ = request(gw.port, "GET", "/short/x")
    assert (status, headers["X-Matchgate-Error"]) == (504, "backend-timeout")
    assert time.monotonic() - t0 < 1.0, "the backoff stays within the backend's timeout"


# --------------------------------------------------------------------------------------
# Slow start, response times, hash across a reload


def names_for(gw, n, prefix, limit_s=None, clients=1):
    """Which server answered each of up to `n` requests, from `clients` threads one request after
    the other each; they stop early after limit_s seconds."""
    names, lock, t0 = [], threading.Lock(), time.monotonic()

    def client(c):
        for i in range(c, n, clients):
            if limit_s is not None and time.monotonic() - t0 > limit_s:
                return
            status, _, body = request(gw.port, "GET", f"/api/{prefix}{i}")
            assert status == 200
            with lock:
                names.append(backend_of(body))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return names


def test_slow_start_ramps_a_server_back_in(start_gateway, backend_factory, tmp_path):
    from support import run_matchgate, to_yaml
    one, two, three = backend_factory("one"), backend_factory("two"), backend_factory("three")
    backends = {"b": {"servers": [one.url, two.url, three.url], "connect_timeout": "1s", "slow_start": "6s"}}
    cfg = admin_of(gateway_config(free_port(), backends=backends, routes=[API]))
    path = tmp_path / "print.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    res = run_matchgate("--check", "--print", "-c", path)
    assert res.returncode == 0 and "    slow_start: 6000ms\n" in res.stdout, res.stdout + res.stderr
    gw = start_gateway(cfg)
    assert servers_of(gw)[2]["weight_factor"] == 1, "in service from the start: no ramp"
    assert names_for(gw, 30, "w").count("three") == 10

    assert gw.admin_request("POST", "/backends/b/servers/2/disable")[0] == 200
    assert "three" not in names_for(gw, 12, "d")
    status, _, body = gw.admin_request("POST", "/backends/b/servers/2/enable")
    assert status == 200
    enabled_at = time.monotonic()
    s = json.loads(body)
    assert s["weight_factor"] < 0.2 and 5000 < s["slow_start_left_ms"] <= 6000, s

    # the first second of six: a factor from 0.1 to 0.25, at most a tenth of the requests
    # (an even share would be a third)
    early = names_for(gw, 1000, "e", limit_s=1.0, clients=8)
    assert time.monotonic() - enabled_at < 1.5
    assert len(early) >= 60, len(early)
    share = early.count("three") / len(early)
    assert 0 < early.count("three") and share < 0.2, (share, len(early))
    assert abs(early.count("one") - early.count("two")) <= 0.1 * len(early), "the others share the rest"
    ramping = servers_of(gw)[2]
    assert 0.1 < ramping["weight_factor"] < 0.5 and ramping["slow_start_left_ms"] > 0, ramping

    time.sleep(max(0.0, enabled_at + 6.2 - time.monotonic()))
    late = names_for(gw, 150, "l")
    assert late.count("three") == 50, late.count("three")  # its full turn again
    done = servers_of(gw)[2]
    assert done["weight_factor"] == 1 and done["slow_start_left_ms"] is None, done


def test_slow_start_after_a_restart_found_by_the_active_checks(start_gateway, backend_factory):
    one, two, three = backend_factory("one"), backend_factory("two"), backend_factory("three")
    health = {"path": "/healthz", "interval": "100ms", "timeout": "300ms", "healthy": 1, "unhealthy": 1}
    backends = {"b": {"servers": [one.url, two.url, three.url], "connect_timeout": "1s", "health": health,
                      "balance": "least_request", "slow_start": "30s"}}
    gw = start_gateway(admin_of(gateway_config(free_port(), backends=backends, routes=[API])))
    port = two.port
    two.stop()
    assert wait_for_line(gw, "unhealthy", two.url, 5.0), gw.stderr()
    again = backend_factory("two", port=port)  # the server restarts on its port
    assert wait_for_line(gw, "healthy", again.url, 5.0), gw.stderr()
    back_at = time.monotonic()
    early = names_for(gw, 1000, "r", limit_s=1.0, clients=8)
    assert time.monotonic() - back_at < 1.5 and len(early) >= 60, len(early)
    # the first second of thirty: a factor of 0.1 to 0.15. Under 8 clients the two choices favour
    # the server with nothing in flight, so its share is about its chance to be drawn into the
    # pair (near 1 in 10), not 1 in 3
    assert early.count("two") / len(early) < 0.2, (early.count("two"), len(early))
    s = servers_of(gw)[1]
    assert s["state"] == "healthy" and s["weight_factor"] < 0.5 and s["slow_start_left_ms"] > 25000, s


def test_response_time_histogram_per_server(start_gateway, backend_factory):
    fast, slow = backend_factory("fast"), backend_factory("slow")
    slow.delay_ms = 300
    backends = {"b": {"servers": [fast.url, slow.url], "connect_timeout": "1s"}}
    gw = start_gateway(admin_of(gateway_config(free_port(), backends=backends, routes=[API])))
    names = names_for(gw, 20, "t")
    assert names.count("slow") == 10
    m = gw.metrics()

    def series(server, le=None):
        name = "matchgate_server_response_seconds" + ("_bucket" if le else "_count")
        return m[f'{name}{{backend="b",server="{server}"' + (f',le="{le}"' if le else "") + "}"]

    assert series(slow.url) == 10 and series(fast.url) == 10
    assert series(slow.url, "0.25") == 0, "a 300 ms server is not in the buckets below it"
    assert series(slow.url, "0.5") == 10 and series(slow.url, "+Inf") == 10
    assert series(fast.url, "0.1") == 10, "a fast one is in the lower buckets"
    assert m[f'matchgate_server_response_seconds_sum{{backend="b",server="{slow.url}"}}'] >= 3.0
    assert m[f'matchgate_server_response_seconds_sum{{backend="b",server="{fast.url}"}}'] < 1.0


def test_hash_moves_about_a_quarter_of_the_tenants_to_a_fourth_server(start_gateway, backend_factory):
    servers = [backend_factory(n) for n in ("one", "two", "three", "four")]
    b = {"servers": [s.url for s in servers[:3]], "connect_timeout": "1s", "balance": "hash", "hash_key": "${tenant}"}
    cfg = admin_of(gateway_config(free_port(), backends={"b": b}, routes=[API],
                                  tenants={"identify": [{"header": "X-Tenant"}]}))
    gw = start_gateway(cfg)
    tenants = [f"tenant-{i}" for i in range(300)]

    def homes(tag):
        out = {}
        for t in tenants:
            status, _, body = request(gw.port, "GET", f"/api/{tag}", headers={"X-Tenant": t})
            assert status == 200
            out[t] = backend_of(body)
        return out

    before = homes("a")
    assert set(before.values()) == {"one", "two", "three"}
    assert homes("again") == before, "one tenant, one server"

    cfg["backends"]["b"]["servers"] = [s.url for s in servers]
    gw.write_config(cfg)
    assert "reloaded" in gw.reload()
    after = homes("b")
    moved = [t for t in tenants if after[t] != before[t]]
    assert all(after[t] == "four" for t in moved), "a key only moves to the new server"
    assert 0.25 / 2 <= len(moved) / len(tenants) <= 1.5 * 0.25, len(moved)

    # the new server out: its keys go to the next server on the ring, where they were before
    assert gw.admin_request("POST", "/backends/b/servers/3/disable")[0] == 200
    assert homes("c") == before
    assert gw.admin_request("POST", "/backends/b/servers/3/enable")[0] == 200
    assert homes("d") == after, "and come back when it returns"
