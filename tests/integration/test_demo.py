"""scripts/run's demo, as a new user meets it: every command the script prints runs against the
running demo (two demo backends and the gateway on conf/demo.yaml), and shows what it says it
shows: the backends' echo, the gateway's own answers, HTTP/2, a tenant's quota ending in 429 with
Retry-After, the route tester, a WebSocket message bridged to a backend request, the dashboard
page and the metrics. Ports are moved to free ones, in the file and in the commands alike."""

import os
import re
import subprocess

import pytest

from support import BUILD, REPO, free_port
from test_lifecycle import start_demo_backend, stop_demo_backend

FIXED = ("127.0.0.1:8080", "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9901")


def printed_commands():
    """The commands of scripts/run's printed block: each line that starts with two spaces, joined
    with the next ones while its single quotes are open (a multi-line python3 -c)."""
    text = (REPO / "scripts" / "run").read_text()
    block = text[text.index("cat <<'EOF'\n") + len("cat <<'EOF'\n"):]
    block = block[:block.index("\nEOF\n")]
    commands, current = [], None
    for line in block.splitlines():
        if current is not None:
            current += "\n" + line
        elif re.match(r"^  \S", line):
            current = line.strip()
        if current is not None and current.count("'") % 2 == 0:
            commands.append(current)
            current = None
    return commands


@pytest.fixture
def demo(tmp_path, start_gateway):
    ports = {fixed: f"127.0.0.1:{free_port()}" for fixed in FIXED}
    text = (REPO / "conf" / "demo.yaml").read_text()
    for fixed, port in ports.items():
        assert fixed in text, fixed
        text = text.replace(fixed, port)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "demo.yaml").write_text(text)
    os.symlink(BUILD, tmp_path / "build")
    backends = [start_demo_backend(int(ports[f"127.0.0.1:900{n}"].rsplit(":", 1)[1]), f"backend-900{n}") for n in (1, 2)]
    gw = start_gateway(text, port=int(ports["127.0.0.1:8080"].rsplit(":", 1)[1]))
    yield tmp_path, ports
    gw.stop()
    for proc in backends:
        stop_demo_backend(proc)


def run(command, cwd, ports):
    for fixed, port in ports.items():
        command = command.replace(fixed, port)
    env = dict(os.environ, PATH="/usr/bin:/bin:" + os.environ.get("PATH", ""))  # Debian's python3, with websockets
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=30)


def test_the_printed_commands(demo):
    cwd, ports = demo
    commands = printed_commands()
    assert len(commands) >= 10, commands
    seen = set()
    for command in commands:
        res = run(command, cwd, ports)
        assert res.returncode == 0, f"{command}\n{res.stdout}\n{res.stderr}"
        out = res.stdout
        if "/api/hello" in command and command.startswith("curl"):
            assert '"path":"/api/hello"' in out.replace(" ", "") and out.startswith("HTTP/1.1 200"), out
            seen.add("echo")
        elif "/health" in command:
            assert out.startswith("HTTP/1.1 200") and out.endswith("ok\n"), out
        elif "/nope" in command:
            assert out.startswith("HTTP/1.1 404"), out
        elif command.startswith("nghttp"):
            assert ":status: 200" in out or "status: 200" in out, out
            seen.add("http2")
        elif command.startswith("for "):
            statuses = re.findall(r"^HTTP/1.1 (\d+)", out, re.M)
            assert statuses == ["200"] * 5 + ["429"], out
            assert re.search(r"^retry-after: [1-9]\d*", out, re.M | re.I), out
            seen.add("quota")
        elif "matchgate route" in command:
            assert "outcome: forward" in out and "route: api" in out, out
            seen.add("route")
        elif command.startswith("python3"):
            answer = out.strip()
            assert '"status":200' in answer.replace(" ", "") and "/api/socket/add" in answer, answer
            seen.add("websocket")
        elif "<title>" in command:
            assert "<title>" in out, out
            seen.add("dashboard")
        elif "/metrics" in command:
            assert "matchgate_requests_total" in out and "matchgate_throttle_rejected_total 1" in out, out
            seen.add("metrics")
    assert seen == {"echo", "http2", "quota", "route", "websocket", "dashboard", "metrics"}, seen
