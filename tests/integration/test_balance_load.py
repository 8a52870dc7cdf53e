"""Balancing policies, HTTP/2 stream limits, and many clients at once."""

import http.client
import json
import re
import subprocess
import threading
import time

from support import free_port, gateway_config, request

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}


def names_of(port, method, paths, body=None):
    out = []
    for p in paths:
        status, headers, resp = request(port, method, p, body=body)
        assert status == 200, (method, p, status, headers.get("X-Matchgate-Error"))
        out.append(json.loads(resp)["backend"])
    return out


def test_first_available(start_gateway, backend_factory):
    one, two = backend_factory("one"), backend_factory("two")
    backends = {"b": {"servers": [one.url, two.url], "balance": "first_available", "connect_timeout": "1s"}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))

    assert names_of(gw.port, "GET", [f"/api/fa{i}" for i in range(10)]) == ["one"] * 10
    assert names_of(gw.port, "POST", [f"/api/fa-post{i}" for i in range(3)], body=b"x") == ["one"] * 3

    one.stop()  # down: listener and its keep-alive connections gone
    assert names_of(gw.port, "GET", [f"/api/fb{i}" for i in range(6)]) == ["two"] * 6
    assert [r.path for r in one.received()] == [f"/api/fa{i}" for i in range(10)] + [f"/api/fa-post{i}" for i in range(3)]


def test_primary_for_writes(start_gateway, backend_factory):
    one, two = backend_factory("one"), backend_factory("two")
    backends = {"b": {"servers": [one.url, two.url], "balance": "primary_for_writes", "primary": two.url,
                      "connect_timeout": "1s"}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))

    writes = []
    for i in range(4):
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            writes.extend(names_of(gw.port, method, [f"/api/w{i}"], body=b"w"))
    reads = names_of(gw.port, "GET", [f"/api/r{i}" for i in range(10)])

    assert writes == ["two"] * 16, writes
    assert reads.count("one") >= 3 and reads.count("two") >= 3, f"GETs not spread: {reads}"
    assert {r.method for r in one.received()} == {"GET"}


def test_primary_for_writes_never_retries_a_write_elsewhere(start_gateway, backend_factory):
    other = backend_factory("other")
    primary = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    backends = {"b": {"servers": [other.url, primary], "balance": "primary_for_writes", "primary": primary,
                      "connect_timeout": "1s", "retries": 3}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API]))

    for method in ("PUT", "DELETE", "POST"):
        status, headers, _ = request(gw.port, method, "/api/w", body=b"w")
        assert status == 502 and headers["X-Matchgate-Error"] == "backend-unavailable", (method, status)
    # reads still reach the server that is up (directly, or by a retry past the primary)
    assert [request(gw.port, "GET", f"/api/r{i}")[0] for i in range(4)] == [200] * 4
    assert {r.method for r in other.received()} == {"GET"}


def test_weights_follow_the_schedule(start_gateway, backend_factory):
    one, two = backend_factory("one"), backend_factory("two")
    backends = {"b": {"servers": [one.url, {"url": two.url, "weight": 2}], "connect_timeout": "1s"}}
    gw = start_gateway(gateway_config(free_port(), backends=backends, routes=[API], workers=1))

    names = names_of(gw.port, "GET", [f"/api/wt{i}" for i in range(30)])

    assert (names.count("one"), names.count("two")) == (10, 20), names
    # smooth weighted round robin: the heavy server never gets three in a row
    assert "two,two,two" not in ",".join(names), names


def test_max_http2_streams_bounds_backend_concurrency(start_gateway, backend):
    config = gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API], workers=1,
                            limits={"max_http2_streams": 2})
    gw = start_gateway(config)

    started = time.monotonic()
    res = subprocess.run(["h2load", "-n", "10", "-c", "1", "-m", "10", f"http://127.0.0.1:{gw.port}/api/slow?ms=300"],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    elapsed = time.monotonic() - started

    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"requests: 10 total, 10 started, 10 done, 10 succeeded", res.stdout), res.stdout
    assert len(backend.received()) == 10
    assert backend.max_in_flight <= 2, f"{backend.max_in_flight} requests at once at the backend from one connection"
    assert elapsed >= 1.4, f"10 x 300 ms two at a time cannot take {elapsed:.2f}s"


def test_many_concurrent_clients_get_their_own_responses(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API], workers=4))
    threads_n, per_thread = 50, 20
    errors = []
    done = [0]
    lock = threading.Lock()

    def client(t):
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=20)
        try:
            for i in range(per_thread):
                uid = f"t{t}-r{i}"
                body = (uid * (i + 1)).encode() if i % 2 else None
                conn.request("POST" if body else "GET", f"/api/mix/{uid}?id={uid}", body=body,
                             headers={"X-Request-Id": f"rid-{uid}", "X-Uid": uid})
                resp = conn.getresponse()
                data = resp.read()
                if resp.status != 200:
                    errors.append((uid, resp.status, data[:200]))
                    return
                echo = json.loads(data)
                got = (echo["path"], echo["query"], echo["headers"].get("x-uid"), echo["headers"].get("x-request-id"),
                       echo["body_bytes"], resp.getheader("X-Request-Id"))
                want = (f"/api/mix/{uid}", f"id={uid}", uid, f"rid-{uid}", len(body or b""), f"rid-{uid}")
                if got != want:
                    errors.append((uid, got, want))
                    return
                with lock:
                    done[0] += 1
        except Exception as e:  # reported below
            errors.append((t, repr(e)))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)

    assert not any(th.is_alive() for th in threads), "clients still running after 60s"
    assert not errors, f"{len(errors)} bad responses, first: {errors[:5]}"
    assert done[0] == threads_n * per_thread
    assert len(backend.received()) == threads_n * per_thread
