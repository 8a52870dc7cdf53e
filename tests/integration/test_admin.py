"""The admin API (admin.address): health, metrics, the bearer token, 404/405, and reloading the
configuration by SIGHUP and POST /reload."""

import http.client
import json
import re
import signal
import socket
import subprocess
import threading
import time

from support import free_port, gateway_config, port_accepts, request, to_yaml, wait_until

TOKEN = "s3cret-token"


def admin_config(port=None, routes=None, backends=None, token=None, **top):
    admin = {"address": f"127.0.0.1:{free_port()}"}
    if token is not None:
        admin["token"] = token
    routes = routes if routes is not None else [{"name": "hello", "match": {"path": "/hello"},
                                                 "respond": {"status": 200, "body": "hello\n"}}]
    return gateway_config(port or free_port(), backends=backends, routes=routes, admin=admin, **top)


def respond_route(name, path, status=200):
    return {"name": name, "match": {"path": path}, "respond": {"status": status, "body": f"{name}\n"}}


def delta(after, before, series):
    return after.get(series, 0) - before.get(series, 0)


# --------------------------------------------------------------------------------------
# Endpoints


def test_healthz(start_gateway):
    gw = start_gateway(admin_config())

    status, headers, body = gw.admin_request("GET", "/healthz")
    assert (status, body) == (200, b"ok\n")
    assert headers["Content-Type"].startswith("text/plain")
    assert headers["Cache-Control"] == "no-store"

    status, _, body = gw.admin_request("HEAD", "/healthz")
    assert (status, body) == (200, b"")


def test_metrics_count_real_requests(start_gateway, backend):
    routes = [respond_route("ok", "/ok"), respond_route("created", "/created", 201),
              {"name": "moved", "match": {"path": "/old"}, "redirect": {"location": "/new"}},
              {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"},
              {"name": "down", "match": {"path": {"prefix": "/down"}}, "forward": "dead"}]
    backends = {"b": [backend.url], "dead": {"servers": [f"http://127.0.0.1:{free_port()}"], "retries": 0}}
    gw = start_gateway(admin_config(routes=routes, backends=backends))
    before = gw.metrics()
    for series in ("matchgate_requests_total", "matchgate_requests_in_flight", "matchgate_throttle_admitted_total",
                   "matchgate_throttle_rejected_total", "matchgate_connections_rate_limited_total",
                   "matchgate_config_generation", 'matchgate_reloads_total{result="ok"}',
                   'matchgate_reloads_total{result="failed"}'):
        assert series in before, f"{series} missing from {sorted(before)}"
    for cls in ("1xx", "2xx", "3xx", "4xx", "5xx"):
        assert f'matchgate_responses_total{{class="{cls}"}}' in before
    assert before["matchgate_config_generation"] == 1

    statuses = [request(gw.port, "GET", p)[0] for p in ("/ok", "/created", "/api/x", "/api/status/404", "/nope", "/old",
                                                        "/down")]
    assert statuses == [200, 201, 200, 404, 404, 302, 502]

    # a response is counted as it is handed to h2o, which may write it before the worker gets
    # there: wait for the last ones
    def all_answered():
        m = gw.metrics()
        answered = sum(delta(m, before, f'matchgate_responses_total{{class="{c}xx"}}') for c in range(1, 6))
        return m if answered == 7 else None

    after = wait_until(all_answered, 5)
    assert after, gw.metrics()
    assert delta(after, before, "matchgate_requests_total") == 7
    assert delta(after, before, 'matchgate_responses_total{class="2xx"}') == 3
    assert delta(after, before, 'matchgate_responses_total{class="3xx"}') == 1
    assert delta(after, before, 'matchgate_responses_total{class="4xx"}') == 2
    assert delta(after, before, 'matchgate_responses_total{class="5xx"}') == 1
    assert after["matchgate_requests_in_flight"] == 0


def test_metrics_show_a_request_in_flight(start_gateway, backend):
    gw = start_gateway(admin_config(routes=[{"name": "api", "forward": "b"}], backends={"b": [backend.url]}))
    done = threading.Event()

    def slow():
        request(gw.port, "GET", "/slow?ms=1500", timeout=10)
        done.set()

    t = threading.Thread(target=slow)
    t.start()
    try:
        backend.wait_for("/slow")
        assert gw.metrics()["matchgate_requests_in_flight"] == 1
    finally:
        t.join(timeout=10)
    assert done.is_set()
    assert wait_until(lambda: gw.metrics()["matchgate_requests_in_flight"] == 0, 5)


def test_token_is_required_when_set(start_gateway):
    gw = start_gateway(admin_config(token=TOKEN))

    for path in ("/healthz", "/metrics", "/nope"):
        status, headers, body = gw.admin_request("GET", path)
        assert status == 401, (path, status)
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert "error" in json.loads(body)
    for wrong in ("wrong", TOKEN + "x", TOKEN[:-1], "", TOKEN.upper()):
        assert gw.admin_request("GET", "/healthz", token=wrong)[0] == 401, wrong
    assert gw.admin_request("GET", "/healthz", headers={"Authorization": f"Basic {TOKEN}"})[0] == 401
    assert gw.admin_request("POST", "/reload", token="wrong")[0] == 401
    assert "reload" not in gw.stderr(), "an unauthorized POST /reload must not reload"

    assert gw.admin_request("GET", "/healthz", token=TOKEN)[:3:2] == (200, b"ok\n")
    assert gw.admin_request("GET", "/healthz", headers={"Authorization": f"bearer {TOKEN}"})[0] == 200
    assert gw.metrics(token=TOKEN)["matchgate_config_generation"] == 1
    assert gw.admin_request("GET", "/nope", token=TOKEN)[0] == 404


def test_unknown_path_and_wrong_method(start_gateway):
    gw = start_gateway(admin_config())

    status, headers, body = gw.admin_request("GET", "/nope")
    assert status == 404
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"error": "no such endpoint"}
    assert gw.admin_request("GET", "/healthz/x")[0] == 404
    assert gw.admin_request("GET", "/metrics?x=1")[0] == 200, "the query is not part of the path"

    status, headers, body = gw.admin_request("DELETE", "/metrics")
    assert status == 405
    assert headers["Allow"] == "GET, HEAD"
    status, headers, _ = gw.admin_request("GET", "/reload")
    assert status == 405
    assert headers["Allow"] == "POST"
    assert gw.reload_lines() == []


def test_data_plane_does_not_serve_admin_endpoints(start_gateway):
    gw = start_gateway(admin_config(routes=[]))
    assert request(gw.port, "GET", "/healthz")[0] == 404
    assert request(gw.port, "GET", "/metrics")[0] == 404


def test_admin_address_in_use_stops_the_start(matchgate_bin, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        config = admin_config()
        config["admin"]["address"] = f"127.0.0.1:{busy.getsockname()[1]}"
        path = tmp_path / "gw.yaml"
        path.write_text(to_yaml(config) + "\n")
        res = subprocess.run([str(matchgate_bin), "-c", str(path)], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL)
    assert res.returncode == 1
    assert f"cannot listen on admin address {config['admin']['address']}" in res.stderr


# --------------------------------------------------------------------------------------
# Reload


def test_reload_by_sighup_changes_routing(start_gateway):
    config = admin_config()
    gw = start_gateway(config)
    assert request(gw.port, "GET", "/new")[0] == 404

    config["routes"] = [respond_route("new", "/new", 201)] + config["routes"]
    gw.write_config(config)
    line = gw.reload()

    assert line == f"configuration reloaded from {gw.config_path}: generation 2"
    for _ in range(10):  # every worker, on new connections
        status, _, body = request(gw.port, "GET", "/new")
        assert (status, body) == (201, b"new\n")
    assert request(gw.port, "GET", "/hello")[0] == 200
    metrics = gw.metrics()
    assert metrics["matchgate_config_generation"] == 2
    assert metrics['matchgate_reloads_total{result="ok"}'] == 1
    assert metrics['matchgate_reloads_total{result="failed"}'] == 0


def test_reload_by_post_changes_routing(start_gateway):
    config = admin_config(token=TOKEN)
    gw = start_gateway(config)

    config["routes"] = [respond_route("hello", "/hello", 202), respond_route("new", "/new")]
    gw.write_config(config)
    status, headers, body = gw.admin_request("POST", "/reload", token=TOKEN)

    assert status == 200, body
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"result": "ok", "generation": 2, "errors": [], "warnings": []}
    assert request(gw.port, "GET", "/hello")[0] == 202
    assert request(gw.port, "GET", "/new")[0] == 200
    assert "generation 2" in gw.reload_lines()[-1]

    status, _, body = gw.admin_request("POST", "/reload", token=TOKEN)
    assert (status, json.loads(body)["generation"]) == (200, 3), "every reload is a new generation"


def test_keep_alive_connection_moves_to_the_new_config(start_gateway):
    config = admin_config()
    gw = start_gateway(config)
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        conn.request("GET", "/new")
        resp = conn.getresponse()
        assert resp.status == 404
        resp.read()
        config["routes"].append(respond_route("new", "/new"))
        gw.write_config(config)
        gw.reload()
        conn.request("GET", "/new")
        resp = conn.getresponse()
        assert resp.status == 200, "the next request of an open connection uses the new configuration"
        resp.read()
    finally:
        conn.close()


BAD_ROUTES = """\
routes:
  - name: hello
    match: {path: /hello}
    respond: {status: 200, body: "changed\\n"}
  - name: broken
    forward: nosuchbackend
"""


def test_bad_reload_keeps_the_running_config_and_reports_where(start_gateway):
    config = admin_config()
    gw = start_gateway(config)
    good = gw.config_path.read_text()
    head = good[:good.index("routes:")]
    gw.write_config(head + BAD_ROUTES)
    bad_line = (head + BAD_ROUTES).splitlines().index("    forward: nosuchbackend") + 1
    where = f"{gw.config_path}:{bad_line}:14: "

    status, headers, body = gw.admin_request("POST", "/reload")

    assert status == 422, body
    answer = json.loads(body)
    assert answer["result"] == "failed"
    assert answer["generation"] == 1
    assert len(answer["errors"]) == 1 and answer["errors"][0].startswith(where), answer
    assert "nosuchbackend" in answer["errors"][0]
    status, _, body = request(gw.port, "GET", "/hello")
    assert (status, body) == (200, b"hello\n"), "the running configuration still serves"

    line = gw.reload()  # SIGHUP: the same, on stderr
    assert line == f"reload of {gw.config_path} failed (1 error): still serving generation 1"
    stderr = gw.stderr()
    assert stderr.count(where) == 2, stderr
    assert request(gw.port, "GET", "/hello")[2] == b"hello\n"

    gw.write_config("listen: [\n")  # a syntax error
    status, _, body = gw.admin_request("POST", "/reload")
    assert status == 422
    assert re.match(rf"{re.escape(str(gw.config_path))}:\d+:\d+: syntax error", json.loads(body)["errors"][0])
    gw.config_path.unlink()  # and no file at all
    status, _, body = gw.admin_request("POST", "/reload")
    assert status == 422
    assert json.loads(body)["errors"] == [f"{gw.config_path}: cannot open: No such file or directory"]

    metrics = gw.metrics()
    assert metrics["matchgate_config_generation"] == 1
    assert metrics['matchgate_reloads_total{result="failed"}'] == 4
    assert metrics['matchgate_reloads_total{result="ok"}'] == 0

    gw.write_config(good)
    assert gw.admin_request("POST", "/reload")[0] == 200


def test_in_flight_request_finishes_on_the_config_it_started_with(start_gateway, backend_factory, tmp_path):
    old, new = backend_factory("old"), backend_factory("new")
    log = tmp_path / "access.log"
    config = admin_config(routes=[{"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}],
                          backends={"b": [old.url]}, access_log=str(log))
    gw = start_gateway(config)
    result = {}

    def slow_client():
        try:
            result["response"] = request(gw.port, "GET", "/api/slow?ms=3000", timeout=15)
        except Exception as e:  # reported below
            result["error"] = e

    t = threading.Thread(target=slow_client)
    t.start()
    try:
        old.wait_for("/api/slow")
        config["routes"] = [{"name": "api-v2", "match": {"path": {"prefix": "/api"}}, "forward": "b"}]
        config["backends"]["b"]["servers"] = [new.url]
        gw.write_config(config)
        status, _, body = gw.admin_request("POST", "/reload")
        assert status == 200, body
        status, _, body = request(gw.port, "GET", "/api/x")
        assert status == 200 and json.loads(body)["backend"] == "new"
        assert t.is_alive(), "the slow request should still be running"
    finally:
        t.join(timeout=15)
    assert "error" not in result, result.get("error")
    status, _, body = result["response"]
    assert status == 200
    assert json.loads(body)["backend"] == "old", "the request finished on the configuration it started with"
    lines = [json.loads(l) for l in log.read_text().splitlines()]
    routes = {l["path"]: l["route"] for l in lines}
    assert routes == {"/api/slow": "api", "/api/x": "api-v2"}


def test_reload_reopens_the_access_log(start_gateway, tmp_path):
    log = tmp_path / "access.log"
    config = admin_config(access_log=str(log))
    gw = start_gateway(config)
    assert request(gw.port, "GET", "/hello?before")[0] == 200
    assert wait_until(lambda: log.exists() and log.read_text().count("\n") == 1, 5)

    log.rename(tmp_path / "access.log.1")  # rotation: move, then reload
    gw.reload()
    assert request(gw.port, "GET", "/hello?after")[0] == 200

    assert wait_until(lambda: log.exists() and log.read_text().count("\n") == 1, 5), "a new file at the configured path"
    assert (tmp_path / "access.log.1").read_text().count("\n") == 1

    other = tmp_path / "other.log"  # and the path itself can change
    config["access_log"] = str(other)
    gw.write_config(config)
    gw.reload()
    assert request(gw.port, "GET", "/hello")[0] == 200
    assert wait_until(lambda: other.exists() and other.read_text().count("\n") == 1, 5)
    assert log.read_text().count("\n") == 1


def test_access_log_that_cannot_be_opened_fails_the_reload(start_gateway, tmp_path):
    config = admin_config()
    gw = start_gateway(config)
    config["access_log"] = str(tmp_path / "no" / "such" / "dir.log")
    gw.write_config(config)

    status, _, body = gw.admin_request("POST", "/reload")

    assert status == 422
    assert json.loads(body)["errors"] == [f"{gw.config_path}: cannot open access log {config['access_log']}: "
                                          "No such file or directory"]
    assert gw.metrics()["matchgate_config_generation"] == 1


def test_restart_only_settings_are_warned_about_and_kept(start_gateway):
    config = admin_config(workers=2)
    gw = start_gateway(config)
    other_port = free_port()

    config["workers"] = 3
    config["listen"] = [{"address": f"127.0.0.1:{other_port}"}]
    config["routes"].append(respond_route("new", "/new"))
    gw.write_config(config)
    status, _, body = gw.admin_request("POST", "/reload")

    assert status == 200, body
    warnings = json.loads(body)["warnings"]
    path = str(gw.config_path)
    assert any(w.startswith(path + ":") and "workers only changes with a restart" in w for w in warnings), warnings
    assert any(w.startswith(path + ":") and "listen only changes with a restart" in w for w in warnings), warnings
    assert "warning: workers only changes with a restart: the running value is kept" in gw.stderr()
    assert request(gw.port, "GET", "/new")[0] == 200, "the rest of the file is applied, on the old listener"
    assert not port_accepts(other_port)


def test_healthz_says_stopping_during_shutdown(start_gateway, backend):
    gw = start_gateway(admin_config(routes=[{"name": "api", "forward": "b"}], backends={"b": [backend.url]}))
    t = threading.Thread(target=lambda: request(gw.port, "GET", "/slow?ms=2000", timeout=15))
    t.start()
    try:
        backend.wait_for("/slow")
        gw.signal(signal.SIGTERM)
        assert wait_until(lambda: gw.admin_request("GET", "/healthz")[0] == 503, 5)
        status, _, body = gw.admin_request("GET", "/healthz")
        assert body == b"stopping\n"
        status, _, body = gw.admin_request("POST", "/reload")
        assert status == 503
    finally:
        t.join(timeout=15)
    assert gw.wait(15) == 0


def test_many_reloads_under_load(start_gateway, backend):
    """Reloads by both paths while clients keep sending: every request is answered by one of the
    two configurations, nothing is dropped, and (in the ASan build) nothing leaks."""
    routes_a = [{"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}, respond_route("v", "/v", 200)]
    routes_b = [{"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}, respond_route("v", "/v", 201)]
    config = admin_config(routes=routes_a, backends={"b": [backend.url]}, workers=2)
    gw = start_gateway(config)
    stop = threading.Event()
    failures = []
    counts = {"sent": 0}
    lock = threading.Lock()

    def client(n):
        conn = None
        while not stop.is_set():
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
                path = "/v" if n % 2 else f"/api/{n}"
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                if resp.status not in ((200, 201) if path == "/v" else (200,)):
                    failures.append((path, resp.status))
                with lock:
                    counts["sent"] += 1
            except Exception as e:
                failures.append(repr(e))
                conn = None

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        reloads = 40
        for i in range(reloads):
            config["routes"] = routes_b if i % 2 == 0 else routes_a
            gw.write_config(config)
            if i % 2:
                assert "reloaded" in gw.reload()
            else:
                assert gw.admin_request("POST", "/reload")[0] == 200
            time.sleep(0.02)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)
    assert not failures, failures[:5]
    assert counts["sent"] > reloads
    metrics = gw.metrics()
    assert metrics["matchgate_config_generation"] == reloads + 1
    assert metrics['matchgate_reloads_total{result="ok"}'] == reloads
    assert wait_until(lambda: gw.metrics()["matchgate_requests_in_flight"] == 0, 5)
    # the fixture stops the gateway: exit 0 and no sanitizer (leak) report


# --------------------------------------------------------------------------------------
# An admin API off loopback without a token: allowed, warned about


EXPOSED = ("warning: admin.address '{}' is not a loopback address and no admin.token is set: whoever can reach it can "
           "reload the configuration and send to, close or drain WebSocket sessions")


def test_check_warns_about_an_admin_api_off_loopback_without_a_token(matchgate_bin, tmp_path):
    port = free_port()
    for address, token, warns in ((f":{port}", None, True), (f"0.0.0.0:{port}", None, True), (f"[::]:{port}", None, True),
                                  (f":{port}", TOKEN, False), (f"127.0.0.1:{port}", None, False),
                                  (f"[::1]:{port}", None, False)):
        admin = {"address": address, **({"token": token} if token else {})}
        path = tmp_path / "gw.yaml"
        path.write_text(to_yaml(gateway_config(free_port(), routes=[], admin=admin)) + "\n")
        line = path.read_text().splitlines().index("admin:") + 2  # the address, first key under admin
        res = subprocess.run([str(matchgate_bin), "--check", "-c", str(path)], capture_output=True, text=True, timeout=20)

        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith(f"{path}: ok"), res.stdout
        if warns:
            assert res.stderr == f"{path}:{line}:12: {EXPOSED.format(address)}\n", (address, res.stderr)
        else:
            assert res.stderr == "", (address, res.stderr)


def test_a_reload_reports_the_warning_about_an_exposed_admin_api(start_gateway):
    port = free_port()
    config = admin_config(token=TOKEN)
    config["admin"]["address"] = f"0.0.0.0:{port}"
    gw = start_gateway(config)
    gw.admin_port = port
    assert wait_until(lambda: port_accepts(port), 10)

    del config["admin"]["token"]
    gw.write_config(config)
    status, _, body = gw.admin_request("POST", "/reload", token=TOKEN)

    assert status == 200, body
    answer = json.loads(body)
    assert len(answer["warnings"]) == 1, answer
    assert answer["warnings"][0].startswith(f"{gw.config_path}:") and answer["warnings"][0].endswith(
        EXPOSED.format(f"0.0.0.0:{port}")), answer
    assert EXPOSED.format(f"0.0.0.0:{port}") in gw.stderr()
    assert gw.admin_request("GET", "/healthz")[0] == 200, "the token is gone"
