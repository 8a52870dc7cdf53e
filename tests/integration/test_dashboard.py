"""The admin dashboard (GET /, docs/operating.md): one self-contained page, served without the
token (it holds no data) under a strict content security policy, that a real browser (headless
Chromium) renders from the admin API while the gateway serves a little traffic: non-zero counts,
a tenant row with its totals, a row per backend server, the route tree with hits. With
admin.token set the page asks for the token before any data shows. A screenshot is saved under
MG_BUILD_DIR/test-output/. The browser runs once per scripts/test run (MG_BROWSER=0 in the ASan
pass)."""

import html.parser
import json
import os
import re
import shutil
import subprocess
import threading
import time

import pytest

from support import BUILD, free_port, gateway_config, request

browser = pytest.mark.skipif(os.environ.get("MG_BROWSER", "1") == "0",
                             reason="the browser test runs once per scripts/test, in the normal build")

OUTPUT = BUILD / "test-output"


def chromium(*args, timeout=90):
    exe = shutil.which("chromium")
    assert exe, "chromium is not installed (scripts/deps installs it)"
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                           "--virtual-time-budget=8000", *args], capture_output=True, timeout=timeout)


class Dom(html.parser.HTMLParser):
    """Elements by id and the rows' data-* attributes, from chromium --dump-dom."""

    def __init__(self, text):
        super().__init__()
        self.text_of, self.rows, self.attrs_of = {}, [], {}
        self._open = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.attrs_of[attrs["id"]] = attrs
        if tag == "tr" and any(k.startswith("data-") for k in attrs):
            self.rows.append({"attrs": attrs, "cells": []})
        if tag == "td" and self.rows:
            self.rows[-1]["cells"].append("")
        self._open.append((tag, attrs.get("id")))

    def handle_endtag(self, tag):
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data):
        for _, ident in self._open:
            if ident:
                self.text_of[ident] = self.text_of.get(ident, "") + data
        if self._open and self._open[-1][0] == "td" and self.rows:
            self.rows[-1]["cells"][-1] += data

    def rows_with(self, attr):
        return [r for r in self.rows if attr in r["attrs"]]


def number(text):
    return int(re.sub(r"[^0-9]", "", text) or 0)


def traffic(port, stop):
    while not stop.is_set():
        request(port, "GET", "/api/x", {"X-Tenant-Id": "acme"})
        request(port, "GET", "/nothing", {"X-Tenant-Id": "globex"})
        time.sleep(0.05)


@pytest.fixture
def gateway(start_gateway, backend_factory):
    b1, b2 = backend_factory("one"), backend_factory("two")

    def start(token=None):
        admin = {"address": f"127.0.0.1:{free_port()}"}
        if token:
            admin["token"] = token
        config = gateway_config(free_port(), backends={"api": {"servers": [b1.url, {"url": b2.url, "weight": 2}]},
                                                       "api2": {"servers": [b2.url]}},
                                routes=[{"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "api"},
                                        {"name": "canary", "match": {"path": {"prefix": "/new"}},
                                         "forward": {"split": [{"backend": "api", "weight": 90}, {"backend": "api2", "weight": 10}]}},
                                        {"name": "fallback", "respond": {"status": 404, "body": "no\n"}}],
                                admin=admin,
                                tenants={"identify": [{"header": "X-Tenant-Id"}],
                                         "quotas": {"acme": {"requests": 1000, "per": "1m"}}})
        return start_gateway(config), (b1, b2)

    return start


def test_the_page_is_self_contained_and_open(gateway):
    gw, _ = gateway(token="secret")
    status, headers, body = gw.admin_request("GET", "/")
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    policy = headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert headers["X-Frame-Options"] == "DENY"
    page = body.decode()
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "the page loads nothing from elsewhere"
    assert "localStorage" not in page and "sessionStorage" not in page and "document.cookie" not in page
    # the data stays behind the token
    assert gw.admin_request("GET", "/tenants")[0] == 401
    assert gw.admin_request("GET", "/backends")[0] == 401
    assert gw.admin_request("POST", "/")[0] == 401, "another method on / is not open"


def test_backends_endpoint(gateway):
    gw, (b1, b2) = gateway()
    status, _, body = gw.admin_request("GET", "/backends")
    assert status == 200
    listing = json.loads(body)
    assert listing["generation"] == 1
    api, api2 = listing["backends"]
    assert api2["name"] == "api2"
    assert {k: api[k] for k in ("name", "balance", "in_flight", "queued")} == {
        "name": "api", "balance": "round_robin", "in_flight": 0, "queued": 0}
    assert [(s["url"], s["weight"], s["state"]) for s in api["servers"]] == [(b1.url, 1, "healthy"), (b2.url, 2, "healthy")]


@browser
def test_the_dashboard_in_a_browser(gateway):
    gw, (b1, b2) = gateway()
    stop = threading.Event()
    t = threading.Thread(target=traffic, args=(gw.port, stop), daemon=True)
    t.start()
    try:
        time.sleep(1)
        res = chromium("--dump-dom", f"http://127.0.0.1:{gw.admin_port}/")
        OUTPUT.mkdir(exist_ok=True)
        shot = OUTPUT / "dashboard.png"
        shot.unlink(missing_ok=True)
        for _ in range(2):  # a screenshot run now and then ends without writing (chromium's timing)
            chromium("--window-size=1400,1000", f"--screenshot={shot}", f"http://127.0.0.1:{gw.admin_port}/")
            if shot.exists():
                break
    finally:
        stop.set()
        t.join()
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    dom = Dom(res.stdout.decode())

    body_attrs = re.search(r"<body[^>]*data-polled=\"(\d+)\"", res.stdout.decode())
    assert body_attrs and int(body_attrs.group(1)) >= 1, "the page never completed a poll"
    assert number(dom.text_of["requests-total"]) > 0
    assert dom.text_of["generation"].strip() == "1"
    assert dom.text_of["health"].strip() == "healthy"
    classes = {r["attrs"]["data-class"]: number(r["cells"][1]) for r in dom.rows_with("data-class")}
    assert classes["2xx"] > 0 and classes["4xx"] > 0, classes

    tenants = {r["attrs"]["data-tenant"]: r["cells"] for r in dom.rows_with("data-tenant")}
    assert "acme" in tenants, tenants
    assert number(tenants["acme"][3]) > 0, f"acme admitted: {tenants['acme']}"

    servers = {r["attrs"]["data-server"]: r for r in dom.rows_with("data-server") if r["attrs"]["data-backend"] == "api"}
    assert set(servers) == {b1.url, b2.url}
    assert servers[b2.url]["attrs"]["data-backend"] == "api" and servers[b2.url]["cells"][2] == "2"

    assert dom.text_of["sessions-count"] == "0"
    hits = re.search(r'data-route="api"><b>api</b> → api <span class="label">(\d+) hits', res.stdout.decode())
    assert hits and int(hits.group(1)) > 0, dom.text_of["routes"]
    assert 'data-route="canary"><b>canary</b> → api 90 / api2 10 ' in res.stdout.decode(), dom.text_of["routes"]

    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "no screenshot"
    print(f"dashboard screenshot: {shot}")


@browser
def test_with_a_token_the_page_asks_for_it(gateway):
    gw, _ = gateway(token="secret")
    request(gw.port, "GET", "/api/x", {"X-Tenant-Id": "acme"})

    res = chromium("--dump-dom", f"http://127.0.0.1:{gw.admin_port}/")

    assert res.returncode == 0
    page = res.stdout.decode()
    assert re.search(r'id="login" style="display: flex;"', page), "the token form is shown"
    assert 'data-tenant="acme"' not in page, "no data without the token"
