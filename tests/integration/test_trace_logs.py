"""W3C trace context and the access log's formats (docs/configuration.md, "Access log" and
"Trace context"): a valid traceparent keeps its trace with the gateway's own span and its
tracestate; an absent or invalid one becomes a new trace and the tracestate goes; the trace id is
logged next to the request id; access_log `format: combined` writes Apache's combined lines and
`fields:` logs chosen request headers, in both formats."""

import json
import re

import pytest

from rawhttp import RawClient
from support import free_port, gateway_config, request, run_matchgate

ROUTES = [{"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"},
          {"name": "here", "respond": {"status": 204}}]
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
CLIENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def start(start_gateway, backend, tmp_path, access_log=None):
    log = tmp_path / "access.log"
    conf = gateway_config(free_port(), backends={"b": [backend.url]}, routes=ROUTES,
                          access_log=access_log if access_log is not None else str(log))
    return start_gateway(conf), log


def entries(gw, log):
    assert gw.stop() == 0, gw.stderr()[-3000:]
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_valid_traceparent_keeps_its_trace_with_a_new_span(start_gateway, backend, tmp_path):
    gw, log = start(start_gateway, backend, tmp_path)
    assert request(gw.port, "GET", "/api/a", {"traceparent": CLIENT, "tracestate": "vendor=abc,x=1",
                                              "X-Request-Id": "r1"})[0] == 200
    seen = backend.requests[-1].headers
    m = TRACEPARENT.fullmatch(seen["traceparent"])
    assert m, seen["traceparent"]
    assert m.group(1) == "4bf92f3577b34da6a3ce929d0e0e4736" and m.group(3) == "01"
    assert m.group(2) not in ("00f067aa0ba902b7", "0" * 16), "the gateway's hop is a span of its own"
    assert seen["tracestate"] == "vendor=abc,x=1"
    (e,) = entries(gw, log)
    assert (e["request_id"], e["trace_id"]) == ("r1", "4bf92f3577b34da6a3ce929d0e0e4736")


@pytest.mark.parametrize("headers", [
    {},
    {"traceparent": CLIENT.upper().replace("X", "x"), "tracestate": "vendor=abc"},    # upper-case hex
    {"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "tracestate": "a=b"},
    {"traceparent": CLIENT + "-extra", "tracestate": "a=b"},                           # version 00 is exact
], ids=["absent", "upper-case", "zero-trace", "too-long"])
def test_a_missing_or_invalid_traceparent_starts_a_trace(start_gateway, backend, tmp_path, headers):
    gw, log = start(start_gateway, backend, tmp_path)
    for _ in range(2):
        assert request(gw.port, "GET", "/api/a", headers)[0] == 200
    sent = [r.headers for r in backend.requests]
    ids = []
    for h in sent:
        m = TRACEPARENT.fullmatch(h["traceparent"])
        assert m and m.group(3) == "00", h["traceparent"]
        assert "4bf92f3577b34da6a3ce929d0e0e4736" not in h["traceparent"]
        assert "tracestate" not in h, "a tracestate without a valid traceparent is not passed on"
        ids.append(m.group(1))
    assert ids[0] != ids[1]
    assert [e["trace_id"] for e in entries(gw, log)] == ids


def test_two_traceparent_fields_are_invalid(start_gateway, backend, tmp_path):
    gw, log = start(start_gateway, backend, tmp_path)
    with RawClient(gw.port) as c:
        assert c.request("GET", "/api/a", [("traceparent", CLIENT), ("traceparent", CLIENT)]).status == 200
    sent = backend.requests[-1].headers["traceparent"]
    # One field of one fresh trace: a random id may itself hold "00-", so the shape is matched whole.
    m = TRACEPARENT.fullmatch(sent)
    assert m, sent
    assert m.group(1) != "4bf92f3577b34da6a3ce929d0e0e4736" and m.group(3) == "00"


def test_gateway_answers_are_logged_with_their_trace(start_gateway, backend, tmp_path):
    gw, log = start(start_gateway, backend, tmp_path)
    assert request(gw.port, "GET", "/here", {"traceparent": CLIENT})[0] == 204
    (e,) = entries(gw, log)
    assert e["route"] == "here" and e["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_combined_format_with_fields(start_gateway, backend, tmp_path):
    log = tmp_path / "combined.log"
    gw, _ = start(start_gateway, backend, tmp_path,
                  access_log={"path": str(log), "format": "combined", "fields": ["X-Client-Version", "X-Missing"]})
    assert request(gw.port, "GET", "/api/a?x=1", {"Referer": "http://ref/", "User-Agent": 'agent "q"',
                                                  "X-Client-Version": "1.2"})[0] == 200
    assert request(gw.port, "POST", "/here", body=b"")[0] == 204
    assert gw.stop() == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 2, lines
    combined = re.compile(r'127\.0\.0\.1 - - \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000\] '
                          r'"(\S+) (\S+) (HTTP/1\.1)" (\d{3}) (\d+|-) "(.*?)" "(.*?)" "(.*?)" "(.*?)"')
    m = combined.fullmatch(lines[0])
    assert m, lines[0]
    assert m.group(1, 2, 4, 6, 7, 8, 9) == ("GET", "/api/a?x=1", "200", "http://ref/", 'agent \\"q\\"', "1.2", "-")
    assert int(m.group(5)) > 0
    m = combined.fullmatch(lines[1])
    assert m and m.group(1, 2, 4, 5, 6, 7) == ("POST", "/here", "204", "-", "-", "-"), lines[1]


def test_json_fields(start_gateway, backend, tmp_path):
    log = tmp_path / "access.log"
    gw, _ = start(start_gateway, backend, tmp_path, access_log={"path": str(log), "fields": ["X-Client-Version", "X-Missing"]})
    assert request(gw.port, "GET", "/api/a", {"X-Client-Version": "1.2\t"})[0] == 200
    (e,) = entries(gw, log)
    assert e["fields"] == {"x-client-version": "1.2\t", "x-missing": None}
    assert TRACEPARENT.fullmatch(f"00-{e['trace_id']}-0000000000000001-00")


@pytest.mark.parametrize("access_log, message", [
    ('{path: "-", format: jsn}', "3:33: unknown format 'jsn' (did you mean 'json'?)"),
    ('{path: "-", format: clf}', "3:33: unknown format 'clf' (expected json or combined)"),
    ('{path: "-", fields: ["Bad Name"]}', "3:34: invalid header name 'Bad Name'"),
    ('{format: json}', "3:13: missing key 'path'"),
    ('{path: "-", colour: red}', "3:25: unknown key 'colour'"),
])
def test_access_log_errors(matchgate_bin, tmp_path, access_log, message):
    conf = tmp_path / "gw.yaml"
    conf.write_text(f'listen: [{{address: "127.0.0.1:8080"}}]\nroutes: [{{name: r, respond: {{status: 204}}}}]\n'
                    f"access_log: {access_log}\n")
    res = run_matchgate("--check", "-c", conf)
    assert res.returncode == 1
    assert f"{conf}:{message}" in res.stderr, res.stderr
