"""The event loop's turns on /metrics (gateway/loop.c, h2o patch 0012): per worker, a histogram
of how long each turn kept the worker busy and the longest turn of the last two seconds. A
request that costs the worker milliseconds (20,000 regex routes, which the index cannot
narrow, tried one by one for a long path none matches: each regex walks the whole path back,
so the turn is tens of milliseconds however fast the machine) shows up in both; quick requests
do not reach the gauge's range."""

import os

from support import free_port, gateway_config, request, wait_until

SLOW_ROUTES = 20000


def start(start_gateway, routes):
    conf = gateway_config(free_port(), routes=routes, workers=1, admin={"address": f"127.0.0.1:{free_port()}"})
    return start_gateway(conf)


def slow_turns(metrics, over="0.001"):
    """Turns of worker 0 longer than `over` seconds."""
    total = metrics['matchgate_loop_turn_seconds_bucket{worker="0",le="+Inf"}']
    return total - metrics[f'matchgate_loop_turn_seconds_bucket{{worker="0",le="{over}"}}']


def test_every_worker_has_a_histogram_of_its_turns(start_gateway):
    gw = start(start_gateway, [{"name": "all", "respond": {"status": 200, "body": "ok\n"}}])
    for _ in range(20):
        assert request(gw.port, "GET", "/")[0] == 200
    m = gw.metrics()
    count = m['matchgate_loop_turn_seconds_count{worker="0"}']
    assert count >= 20, f"{count} turns for 20 requests"
    assert m['matchgate_loop_turn_seconds_bucket{worker="0",le="+Inf"}'] == count
    buckets = [v for k, v in m.items() if k.startswith('matchgate_loop_turn_seconds_bucket{worker="0"')]
    assert buckets == sorted(buckets), "cumulative buckets"
    assert 0 < m['matchgate_loop_turn_seconds_sum{worker="0"}'] < 60
    assert 'matchgate_loop_turn_longest_seconds{worker="0"}' in m


def test_a_slow_turn_moves_the_histogram_and_the_longest_turn(start_gateway):
    # `.*` first: a regex tries every split of the path before it gives up (a route costs its
    # path's length, not 50 ns: a fast machine once made one of these turns under 1 ms)
    routes = [{"name": f"r{i}", "match": {"path": {"regex": f"^.*/r{i}/[a-z]+$"}}, "respond": {"status": 200, "body": f"r{i}\n"}}
              for i in range(SLOW_ROUTES)]
    routes.append({"name": "fallback", "respond": {"status": 404}})
    gw = start(start_gateway, routes)
    assert request(gw.port, "GET", "/r7/abc")[2] == b"r7\n"
    before = slow_turns(gw.metrics())
    for _ in range(5):
        assert request(gw.port, "GET", "/none/of/them/" + "x" * 1000)[0] == 404
    m = gw.metrics()
    assert slow_turns(m) - before >= 5, f"5 requests of {SLOW_ROUTES} regexes each: {slow_turns(m) - before} turns over 1 ms"
    longest = m['matchgate_loop_turn_longest_seconds{worker="0"}']
    assert longest > 0.001, f"the longest turn of the last two seconds: {longest} s"
    # the gauge forgets: two seconds without a slow turn bring it under a millisecond again
    assert wait_until(lambda: gw.metrics()['matchgate_loop_turn_longest_seconds{worker="0"}'] < 0.001, 6, interval=0.5), \
        "the longest turn did not age out"


def test_threads_are_named_for_what_they_do(start_gateway):
    """top -H, perf sched and /proc show which part of the gateway a thread is."""
    conf = gateway_config(free_port(), routes=[{"name": "all", "respond": {"status": 200}}], workers=2,
                          admin={"address": f"127.0.0.1:{free_port()}"})
    gw = start_gateway(conf)
    assert request(gw.port, "GET", "/")[0] == 200
    wanted = {"mg-worker-0", "mg-worker-1", "mg-admin", "mg-prober", "mg-jwks"}

    def names():
        found = set()
        for tid in os.listdir(f"/proc/{gw.pid}/task"):
            with open(f"/proc/{gw.pid}/task/{tid}/comm") as f:
                found.add(f.read().strip())
        return found

    # the prober's thread starts after the listeners accept: its name may come a moment later
    assert wait_until(lambda: wanted <= names(), 5), names()
