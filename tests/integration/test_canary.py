"""Canaries that drive themselves, against the real binary (issue 31, short intervals): a canary
walks its steps against a healthy leg and is promoted; one whose leg starts answering 500 is
rolled back within an interval, with the figures that decided it; the operator's pause, resume,
promote and abort; a reload of the unchanged route keeps its progress; one JSON line per
decision; `--check` refuses bad canaries with their positions."""

import json
import re
import threading
import time

from support import free_port, gateway_config, request, run_matchgate, to_yaml, wait_until

TOKEN = "t0ken"


def canary_route(**over):
    canary = {"to": "v2", "steps": [10, 50, 100], "interval": "1s", "min_requests": 20, "max_error_ratio": 0.1,
              "max_p99": "2s"}
    canary.update(over)
    return {"name": "api", "forward": {"split": [{"backend": "v1", "weight": 1}, {"backend": "v2", "weight": 0}],
                                       "canary": canary}}


def config(port, admin, v1, v2, **over):
    return gateway_config(port, backends={"v1": [v1.url], "v2": [v2.url]}, routes=[canary_route(**over)],
                          admin={"address": f"127.0.0.1:{admin}", "token": TOKEN})


class Traffic:
    """Requests back to back from a thread, until stopped."""

    def __init__(self, port):
        self.port, self.stopped, self.sent = port, threading.Event(), 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopped.is_set():
            try:
                request(self.port, "GET", "/t", timeout=5)
                self.sent += 1
            except OSError:
                time.sleep(0.01)

    def stop(self):
        self.stopped.set()
        self.thread.join(10)


def canary(gw):
    status, _, body = gw.admin_request("GET", "/routes/api/canary", token=TOKEN)
    assert status == 200, body
    return json.loads(body)


def start(start_gateway, backend_factory, **over):
    v1, v2 = backend_factory("v1"), backend_factory("v2")
    gw = start_gateway(config(free_port(), free_port(), v1, v2, **over))
    return gw, v1, v2


def test_a_healthy_canary_walks_its_steps_and_is_promoted(start_gateway, backend_factory):
    gw, v1, v2 = start(start_gateway, backend_factory)
    c = canary(gw)
    assert (c["state"], c["percent"], c["steps"]) == ("running", 10, [10, 50, 100])
    traffic = Traffic(gw.port)
    try:
        assert wait_until(lambda: canary(gw)["state"] == "promoted", 20, interval=0.2), canary(gw)
    finally:
        traffic.stop()
    decisions = [d["decision"] for d in canary(gw)["history"]]
    assert decisions[-2:] == ["next", "promoted"] and set(decisions) <= {"hold", "next", "promoted"}, decisions
    assert all(d["requests"] >= 20 and d["errors"] == 0 for d in canary(gw)["history"] if d["decision"] != "hold")
    before = len(v2.requests)
    for _ in range(20):
        assert request(gw.port, "GET", "/after")[0] == 200
    assert len(v2.requests) - before == 20, "promoted: every request goes to v2"
    lines = [json.loads(line) for line in gw.stderr().splitlines() if line.startswith("{") and '"canary"' in line]
    assert [line["decision"] for line in lines] == decisions and all(line["route"] == "api" for line in lines)


def test_a_failing_canary_is_rolled_back_within_an_interval(start_gateway, backend_factory):
    gw, v1, v2 = start(start_gateway, backend_factory, steps=[20, 100], min_requests=10)
    v2.force_status = 500
    traffic = Traffic(gw.port)
    try:
        t = time.monotonic()
        assert wait_until(lambda: canary(gw)["state"] == "rolled_back", 10, interval=0.1), canary(gw)
        took = time.monotonic() - t
    finally:
        traffic.stop()
    c = canary(gw)
    decisions = [d["decision"] for d in c["history"]]
    # the first decision with enough requests rolled it back: within one interval of enough traffic
    assert decisions[-1] == "rolled_back" and set(decisions[:-1]) <= {"hold"}, (decisions, took)
    last = c["history"][-1]
    assert c["percent"] == 0 and last["decision"] == "rolled_back" and last["errors"] == last["requests"] >= 10, c
    assert last["error_ratio"] == 1.0
    before = len(v2.requests)
    for _ in range(30):
        request(gw.port, "GET", "/after")
    assert len(v2.requests) == before, "rolled back: nothing goes to v2"


def test_the_operators_orders(start_gateway, backend_factory):
    gw, _, _ = start(start_gateway, backend_factory, interval="1h")
    post = lambda action: gw.admin_request("POST", f"/routes/api/canary/{action}", token=TOKEN)  # noqa: E731
    assert post("pause")[0] == 200 and canary(gw)["state"] == "paused"
    assert post("resume")[0] == 200 and canary(gw)["state"] == "running"
    assert post("resume")[0] == 409
    status, _, body = gw.admin_request("POST", "/routes/api/split", token=TOKEN, body='{"weights": [1, 1]}')
    assert status == 409, body  # the canary sets the weights while it runs
    assert post("promote")[0] == 200
    c = canary(gw)
    assert (c["state"], c["percent"]) == ("promoted", 100)
    assert [d["decision"] for d in c["history"]] == ["pause", "resume", "promote"]
    assert post("abort")[0] == 409 and post("dance")[0] == 404
    routes = json.loads(gw.admin_request("GET", "/routes", token=TOKEN)[2])
    assert routes["routes"][0]["split"]["canary"] == {"state": "promoted", "percent": 100}


def test_abort_sets_the_leg_to_zero_and_a_reload_keeps_the_progress(start_gateway, backend_factory):
    gw, v1, v2 = start(start_gateway, backend_factory, interval="1h")
    assert gw.admin_request("POST", "/routes/api/canary/pause", token=TOKEN)[0] == 200
    status, _, text = gw.admin_request("POST", "/reload", token=TOKEN)
    assert status == 200 and canary(gw)["state"] == "paused", "a reload of the unchanged route lost the canary's state"
    assert [d["decision"] for d in canary(gw)["history"]] == ["pause"]
    assert gw.admin_request("POST", "/routes/api/canary/abort", token=TOKEN)[0] == 200
    before = len(v2.requests)
    for _ in range(30):
        assert request(gw.port, "GET", "/a")[0] == 200
    assert len(v2.requests) == before


def test_check_refuses_bad_canaries(tmp_path):
    base = {"listen": [{"address": "127.0.0.1:8080"}],
            "backends": {"v1": {"servers": ["http://127.0.0.1:9"]}, "v2": {"servers": ["http://127.0.0.1:9"]}}}
    cases = [({"steps": [10, 5, 100]}, "the steps of a canary rise"),
             ({"steps": [10, 50]}, "last step is 100"),
             ({"to": "v3"}, "the canary's leg 'v3' is not one of the split's backends"),
             ({"max_error_ratio": 2}, "max_error_ratio is a number from 0 to 1"),
             ({"interval": "10ms"}, "interval is 100ms at least"),
             ({"step": [1]}, "unknown key 'step'")]
    for over, message in cases:
        path = tmp_path / "c.yaml"
        route = canary_route(**over)
        if "step" in over:
            route["forward"]["canary"].pop("steps")
        path.write_text(to_yaml(dict(base, routes=[route])) + "\n")
        res = run_matchgate("--check", "-c", path)
        assert res.returncode != 0, over
        assert re.search(re.escape(str(path)) + r":\d+:\d+: .*" + re.escape(message), res.stderr), (over, res.stderr)
