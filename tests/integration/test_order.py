"""Ordered dispatch through the real gateway (route `order:`, backend `max_in_flight` and
`queue_timeout`): the banking sequence applied in order by a backend that keeps balances and
answers after a random delay, high priority served next without preempting, the concurrency
cap at the backend, 503 queue-timeout with Retry-After, and a client leaving while queued."""

import random
import subprocess
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from support import free_port, gateway_config, request, wait_until


class Bank(ThreadingHTTPServer):
    """POST /acct/<op>/<amount> with X-Account-Id: applies it after a random short sleep;
    GET /gate/<tag>: waits (at most 10 s) until `release` is set; GET /gate/big3000000<n>: answers n
    bytes at once. Records everything."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), BankHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.lock = threading.Lock()
        self.balances = {}
        self.applied = {}  # account -> [(op, amount, ok)]
        self.busy = {}  # account -> requests inside now
        self.overlaps = 0
        self.inside = 0
        self.max_inside = 0
        self.order = []  # tags of /gate requests, in arrival order
        self.release = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.release.set()
        self.shutdown()
        self.server_close()


class BankHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        bank = self.server
        with bank.lock:
            bank.inside += 1
            bank.max_inside = max(bank.max_inside, bank.inside)
            bank.order.append(self.path.rsplit("/", 1)[-1])
        tag = self.path.rsplit("/", 1)[-1]
        if self.path.startswith("/gate/big3000000"):
            with bank.lock:
                bank.inside -= 1
            self.reply(200, "x" * int(tag[3:]))
            return
        if self.path.startswith("/gate/"):
            bank.release.wait(10)
        else:
            time.sleep(0.05)
        with bank.lock:
            bank.inside -= 1
        self.reply(200, "ok\n")

    def do_POST(self):
        bank = self.server
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        acct = self.headers.get("X-Account-Id", "")
        _, _, op, amount = self.path.split("/")
        amount = int(amount)
        with bank.lock:
            bank.busy[acct] = bank.busy.get(acct, 0) + 1
            if bank.busy[acct] > 1:
                bank.overlaps += 1
        time.sleep(random.uniform(0.05, 0.15))
        with bank.lock:
            balance = bank.balances.setdefault(acct, 100)
            ok = op == "deposit" or balance >= amount
            if ok:
                bank.balances[acct] = balance + amount if op == "deposit" else balance - amount
            bank.applied.setdefault(acct, []).append((op, amount, ok))
            bank.busy[acct] -= 1
        self.reply(200 if ok else 409, f"{bank.balances[acct]}\n")


@pytest.fixture
def bank():
    b = Bank()
    yield b
    b.stop()


def start_bank_gateway(start_gateway, bank, workers=4, admin=False, **backend):
    port = free_port()
    b = {"servers": [bank.url], "timeout": "10s"}
    b.update(backend)
    routes = [
        {"name": "accounts", "match": {"path": {"prefix": "/acct"}},
         "order": {"key": "${header.X-Account-Id}", "priority_header": "X-Priority"}, "forward": "bank"},
        {"name": "gates", "match": {"path": {"prefix": "/gate"}},
         "order": {"key": "${header.X-Account-Id}", "priority_header": "X-Priority"}, "forward": "bank"},
        {"name": "plain", "forward": "bank"},
    ]
    top = {"admin": {"address": f"127.0.0.1:{free_port()}"}} if admin else {}
    conf = gateway_config(port, {"bank": b}, routes, workers=workers, **top)
    gw = start_gateway(conf)
    gw.test_config = conf
    return gw


def in_threads(jobs, stagger=0.0):
    """Runs each job in its own thread, started `stagger` seconds apart; returns their results."""
    results = [None] * len(jobs)

    def run(i):
        results[i] = jobs[i]()

    threads = []
    for i in range(len(jobs)):
        t = threading.Thread(target=run, args=(i,))
        t.start()
        threads.append(t)
        if stagger:
            time.sleep(stagger)
    for t in threads:
        t.join(30)
    return results


def hold(gw, bank, headers=None):
    """Sends GET /gate/held from a thread and waits until the backend holds it; returns the
    thread and the list its status goes into."""
    held = []
    t = threading.Thread(target=lambda: held.append(request(gw.port, "GET", "/gate/held", headers)[0]))
    t.start()
    assert wait_until(lambda: bank.order == ["held"], 5)
    return t, held


def test_banking_sequences_apply_in_order(start_gateway, bank):
    gw = start_bank_gateway(start_gateway, bank)
    steps = [("withdraw", 50), ("deposit", 100), ("withdraw", 150)]
    accounts = [f"acct-{i}" for i in range(8)]

    def step(acct, op, amount):
        return lambda: request(gw.port, "POST", f"/acct/{op}/{amount}", {"X-Account-Id": acct}, b"")[0]

    # each step of each account on its own connection (spread over the workers), the steps
    # of one account sent in order a little apart, every account at the same time
    jobs = [step(a, op, amount) for op, amount in steps for a in accounts]
    statuses = in_threads(jobs, stagger=0.005)
    assert statuses == [200] * len(jobs)
    for a in accounts:
        assert bank.applied[a] == [(op, amount, True) for op, amount in steps], a
        assert bank.balances[a] == 0
    assert bank.overlaps == 0


def test_high_priority_is_served_next(start_gateway, bank):
    gw = start_bank_gateway(start_gateway, bank)
    h = {"X-Account-Id": "k"}

    def get(tag, extra=None):
        return lambda: request(gw.port, "GET", f"/gate/{tag}", dict(h, **(extra or {})))[0]

    jobs = [get("first"), get("n1"), get("n2"), get("urgent", {"X-Priority": "HIGH"})]
    results = []
    t = threading.Thread(target=lambda: results.extend(in_threads(jobs, stagger=0.1)))
    t.start()
    assert wait_until(lambda: bank.order == ["first"], 5)
    time.sleep(0.5)  # the other three wait in the gateway, not at the backend
    assert bank.order == ["first"], "nothing preempts the running request"
    bank.release.set()
    t.join(30)
    assert results == [200] * 4
    assert bank.order == ["first", "urgent", "n1", "n2"]


def test_max_in_flight_caps_the_backend(start_gateway, bank):
    gw = start_bank_gateway(start_gateway, bank, max_in_flight=2)
    jobs = [lambda: request(gw.port, "GET", "/plain/x")[0] for _ in range(12)]
    assert in_threads(jobs) == [200] * 12
    assert bank.max_inside == 2


def test_queue_timeout_gives_503_with_retry_after(start_gateway, bank):
    gw = start_bank_gateway(start_gateway, bank, max_in_flight=1, queue_timeout="300ms")
    t, held = hold(gw, bank)
    started = time.monotonic()
    status, headers, body = request(gw.port, "GET", "/gate/late")
    waited = time.monotonic() - started
    assert status == 503
    assert headers["X-Matchgate-Error"] == "queue-timeout"
    assert headers["Retry-After"] == "1"
    assert b"route gates" in body
    assert 0.25 <= waited < 3
    bank.release.set()
    t.join(15)
    assert held == [200]
    assert bank.order == ["held"], "the request that timed out never reached the backend"
    assert request(gw.port, "GET", "/gate/after")[0] == 200


def test_client_leaving_while_queued_does_not_wedge_the_key(start_gateway, bank):
    gw = start_bank_gateway(start_gateway, bank, workers=1)
    t, held = hold(gw, bank, {"X-Account-Id": "k"})
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as s:
        s.sendall(b"GET /gate/gone HTTP/1.1\r\nHost: x\r\nX-Account-Id: k\r\n\r\n")
        time.sleep(0.5)  # queued behind "held"; long enough for the gateway to watch it
    time.sleep(0.5)
    bank.release.set()
    t.join(15)
    assert held == [200]
    status, _, _ = request(gw.port, "GET", "/gate/next", {"X-Account-Id": "k"}, timeout=5)
    assert status == 200
    assert bank.order == ["held", "next"], "the request whose client left was withdrawn"

def test_a_client_reading_nothing_holds_neither_slot_nor_key_turn(start_gateway, bank):
    """The job completes when the backend has answered, not when the client has read it all:
    an HTTP/2 client with a zero flow-control window (nghttp -w 0) takes none of the response,
    which the gateway holds whole, and the next request of the key and the slot go on."""
    gw = start_bank_gateway(start_gateway, bank, workers=1, max_in_flight=1, queue_timeout="2s")
    bank.release.set()
    h = {"X-Account-Id": "k"}
    reader = subprocess.Popen(["nghttp", "-w", "0", "-t", "20", "-H", "x-account-id: k",
                               f"http://127.0.0.1:{gw.port}/gate/big100000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: bank.order == ["big100000"], 5)
        time.sleep(0.3)
        started = time.monotonic()
        status, headers, _ = request(gw.port, "GET", "/gate/after", h, timeout=10)
        assert (status, headers.get("X-Matchgate-Error")) == (200, None)
        assert time.monotonic() - started < 1.5
        assert bank.order == ["big100000", "after"]
        assert request(gw.port, "GET", "/plain/x", timeout=10)[0] == 200
        assert reader.poll() is None, "the reader still holds its stream"
    finally:
        reader.kill()
        reader.wait(5)


def test_metrics_show_the_queue(start_gateway, bank):
    gw = start_bank_gateway(start_gateway, bank, admin=True, max_in_flight=1, queue_timeout="400ms")
    t, held = hold(gw, bank)
    late = []
    t2 = threading.Thread(target=lambda: late.append(request(gw.port, "GET", "/gate/late")[0]))
    t2.start()
    assert wait_until(lambda: gw.metrics().get('matchgate_backend_queue_depth{backend="bank"}') == 1, 5)
    m = gw.metrics()
    assert m['matchgate_backend_in_flight{backend="bank"}'] == 1
    t2.join(10)
    assert late == [503]
    bank.release.set()
    t.join(10)
    assert held == [200]
    m = gw.metrics()
    assert m['matchgate_backend_queue_depth{backend="bank"}'] == 0
    assert m['matchgate_backend_in_flight{backend="bank"}'] == 0
    assert m['matchgate_backend_queue_timeouts_total{backend="bank"}'] == 1
    assert m['matchgate_backend_queue_wait_seconds_count{backend="bank"}'] == 1, "the request that started at once"
    assert m['matchgate_backend_queue_wait_seconds_bucket{backend="bank",le="0.001"}'] == 1
    assert m['matchgate_backend_queue_wait_seconds_bucket{backend="bank",le="+Inf"}'] == 1
    buckets = [v for k, v in m.items() if k.startswith("matchgate_backend_queue_wait_seconds_bucket")]
    assert buckets == sorted(buckets) and len(buckets) == 13, "cumulative, 12 bounds and +Inf"


def test_reload_keeps_waiting_requests_in_order(start_gateway, bank):
    gw = start_bank_gateway(start_gateway, bank, queue_timeout="10s")
    h = {"X-Account-Id": "k"}
    jobs = [lambda tag=tag: request(gw.port, "GET", f"/gate/{tag}", h, timeout=20)[0] for tag in ("first", "second", "third")]
    results = []
    t = threading.Thread(target=lambda: results.extend(in_threads(jobs, stagger=0.1)))
    t.start()
    assert wait_until(lambda: bank.order == ["first"], 5)
    time.sleep(0.3)  # the other two wait for their key
    conf = gw.test_config
    conf["backends"]["bank"]["queue_timeout"] = "20s"
    conf["backends"]["bank"]["max_in_flight"] = 4
    gw.write_config(conf)
    assert "configuration reloaded" in gw.reload()
    bank.release.set()
    t.join(30)
    assert results == [200] * 3
    assert bank.order == ["first", "second", "third"]


def test_reload_lowering_queue_timeout_applies_to_waiting_requests(start_gateway, bank):
    gw = start_bank_gateway(start_gateway, bank, max_in_flight=1, queue_timeout="30s")
    t, held = hold(gw, bank)
    late = []
    t2 = threading.Thread(target=lambda: late.append(request(gw.port, "GET", "/gate/late", timeout=40)))
    t2.start()
    time.sleep(0.5)  # "late" waits behind "held", its worker's timer armed for 30 s
    conf = gw.test_config
    conf["backends"]["bank"]["queue_timeout"] = "1s"
    gw.write_config(conf)
    assert "configuration reloaded" in gw.reload()
    reloaded = time.monotonic()
    t2.join(10)
    assert late and late[0][0] == 503 and late[0][1]["X-Matchgate-Error"] == "queue-timeout"
    assert time.monotonic() - reloaded < 3
    bank.release.set()
    t.join(15)
    assert held == [200]
    assert bank.order == ["held"]


def test_http2_client_leaving_while_queued_is_withdrawn(start_gateway, bank):
    gw = start_bank_gateway(start_gateway, bank, workers=1)
    t, held = hold(gw, bank, {"X-Account-Id": "k"})
    # nghttp speaks h2c with prior knowledge and gives up after 0.5 s: the stream goes away
    # while its request waits for the key
    res = subprocess.run(["nghttp", "-t", "0.5", "-H", "x-account-id: k", f"http://127.0.0.1:{gw.port}/gate/gone"],
                         capture_output=True, timeout=10)
    assert res.returncode != 0, res.stdout
    bank.release.set()
    t.join(15)
    assert held == [200]
    assert request(gw.port, "GET", "/gate/next", {"X-Account-Id": "k"}, timeout=5)[0] == 200
    assert bank.order == ["held", "next"]
