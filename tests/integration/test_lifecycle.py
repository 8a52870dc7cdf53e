"""The process: command line, graceful shutdown, access log, and the demo configuration."""

import json
import re
import signal
import socket
import subprocess
import threading
import time

from support import (DEMO_BACKEND, REPO, free_port, gateway_config, pattern_chunk, port_accepts, request,
                     run_matchgate, to_yaml, wait_until)

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}
ACCESS_LOG_KEYS = {"time", "peer", "method", "path", "status", "bytes", "duration_ms", "route", "tenant", "server", "request_id"}


def test_version_and_help(matchgate_bin):
    version = re.search(r"version: '([^']+)'", (REPO / "meson.build").read_text()).group(1)
    res = run_matchgate("--version")
    assert res.returncode == 0, res.stderr
    assert version in res.stdout

    res = run_matchgate("--help")
    assert res.returncode == 0, res.stderr
    assert "--check" in res.stdout and "-c" in res.stdout


def test_check_good_file(matchgate_bin, tmp_path, backend):
    path = tmp_path / "good.yaml"
    path.write_text(to_yaml(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API])) + "\n")

    res = run_matchgate("--check", "-c", path)

    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], res.stdout


BAD = """\
listen:
  - address: "127.0.0.1:1"
backends:
  b:
    servers: ["http://127.0.0.1:2"]
    balance: sideways
routes:
  - name: r
    forward: nosuchbackend
"""


def test_check_bad_file_reports_every_error(matchgate_bin, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)

    res = run_matchgate("--check", "-c", path)

    assert res.returncode == 1
    errors = [l for l in res.stderr.splitlines() if re.match(rf"{re.escape(str(path))}:\d+:\d+: \S", l)]
    lines = {int(l[len(str(path)) + 1:].split(":")[0]) for l in errors}
    assert {6, 9} <= lines, f"expected errors on lines 6 and 9:\n{res.stderr}"


def test_check_missing_file(matchgate_bin, tmp_path):
    res = run_matchgate("--check", "-c", tmp_path / "nope.yaml")
    assert res.returncode == 1
    assert "nope.yaml" in res.stderr


def test_graceful_shutdown_finishes_in_flight_request(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    result = {}

    def slow_client():
        try:
            result["response"] = request(gw.port, "GET", "/api/slow?ms=2500", timeout=15)
        except Exception as e:  # reported by the assertions below
            result["error"] = e

    client = threading.Thread(target=slow_client)
    client.start()
    backend.wait_for("/api/slow")  # in flight: the backend has it and is sleeping
    gw.signal(signal.SIGTERM)

    # the listener goes away while the request is still running
    assert wait_until(lambda: not port_accepts(gw.port), 1.5), "still accepting after SIGTERM"
    assert client.is_alive(), "the slow request should still be in flight"
    client.join(timeout=10)

    assert "error" not in result, result.get("error")
    status, _, body = result["response"]
    assert status == 200 and json.loads(body)["path"] == "/api/slow"
    assert gw.wait(10) == 0, gw.stderr()
    try:
        socket.create_connection(("127.0.0.1", gw.port), timeout=1).close()
        raise AssertionError("connection accepted after exit")
    except ConnectionRefusedError:
        pass


def test_access_log_lines_are_json(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    routes = [API, {"name": "health", "match": {"path": "/health"}, "respond": {"status": 200, "body": "ok\n"}}]
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=routes, access_log=str(log))
    gw = start_gateway(config)

    assert request(gw.port, "GET", "/api/logged?x=1", {"X-Request-Id": "log-me"})[0] == 200
    assert request(gw.port, "GET", "/health")[0] == 200
    assert request(gw.port, "POST", "/nowhere", body=b"abc")[0] == 404
    assert gw.stop() == 0, gw.stderr()[-4000:]

    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert len(entries) == 3, entries
    for e in entries:
        assert ACCESS_LOG_KEYS <= set(e), f"missing {ACCESS_LOG_KEYS - set(e)} in {e}"
    api = next(e for e in entries if e["path"].startswith("/api/logged"))
    assert (api["method"], api["status"], api["route"], api["request_id"]) == ("GET", 200, "api", "log-me")
    assert api["peer"].startswith("127.0.0.1")
    assert api["bytes"] > 0 and api["duration_ms"] >= 0
    assert next(e for e in entries if e["path"] == "/health")["route"] == "health"
    assert next(e for e in entries if e["path"] == "/nowhere")["status"] == 404


def start_demo_backend(port, name):
    proc = subprocess.Popen([str(DEMO_BACKEND), "--listen", f"127.0.0.1:{port}", "--name", name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    if not wait_until(lambda: proc.poll() is not None or port_accepts(port), 10) or proc.poll() is not None:
        proc.kill()
        raise AssertionError(f"demo backend did not start: {proc.communicate(timeout=5)}")
    return proc


def stop_demo_backend(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("demo backend ignored SIGTERM")
    assert proc.returncode == 0, err
    assert "listening on" in out
    assert "ERROR: AddressSanitizer" not in err and "runtime error:" not in err, err


def test_demo_config_checks(matchgate_bin):
    res = run_matchgate("--check", "-c", REPO / "conf" / "demo.yaml")
    assert res.returncode == 0, res.stderr


def test_demo_config_serves(start_gateway, matchgate_bin):
    assert DEMO_BACKEND.is_file(), f"{DEMO_BACKEND} not built"
    gw_port, p1, p2, admin = free_port(), free_port(), free_port(), free_port()
    text = (REPO / "conf" / "demo.yaml").read_text()
    for old, new in (("127.0.0.1:8080", gw_port), ("127.0.0.1:9001", p1), ("127.0.0.1:9002", p2), ("127.0.0.1:9901", admin)):
        assert old in text
        text = text.replace(old, f"127.0.0.1:{new}")

    backends = [start_demo_backend(p1, "demo-1")]
    try:
        backends.append(start_demo_backend(p2, "demo-2"))
        gw = start_gateway(text, port=gw_port)

        seen = set()
        for _ in range(2):
            status, headers, body = request(gw.port, "GET", "/api/hello?who=me", {"X-Custom": "1"})
            assert status == 200
            echo = json.loads(body)
            assert (echo["path"], echo["query"], echo["headers"]["x-custom"]) == ("/api/hello", "who=me", "1")
            assert echo["headers"]["x-forwarded-for"] == "127.0.0.1"
            seen.add(echo["backend"])
        assert seen == {"demo-1", "demo-2"}, "round robin over both demo backends"

        status, _, body = request(gw.port, "POST", "/api/items", {"Content-Type": "application/json"}, b'{"a": 1}')
        assert status == 200 and json.loads(body)["body"] == '{"a": 1}'
        status, _, body = request(gw.port, "GET", "/health")
        assert (status, body) == (200, b"ok\n")
        assert request(gw.port, "GET", "/nope")[0] == 404

        # the demo backend's own endpoints, through the gateway
        n = 3 * 65536 + 7
        status, headers, body = request(gw.port, "GET", f"/api/bytes?n={n}")
        assert (status, int(headers["Content-Length"]), body) == (200, n, pattern_chunk(0, n))
        assert request(gw.port, "GET", "/api/status/503")[0] == 503
        started = time.monotonic()
        assert request(gw.port, "GET", "/api/slow?ms=300")[0] == 200
        assert time.monotonic() - started >= 0.3
        assert gw.stop() == 0, gw.stderr()[-4000:]
    finally:
        for proc in backends:
            stop_demo_backend(proc)

    # access_log "-": one JSON object per request on stdout
    entries = [json.loads(line) for line in gw.stdout().splitlines() if line.startswith("{")]
    assert len(entries) >= 8
