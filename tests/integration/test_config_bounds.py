"""A configuration file cannot take the process down: `--check` refuses what expands past the
YAML reader's bounds (alias bombs, deep nesting) with FILE:LINE:COL, in bounded time and memory;
a reload by POST /reload or SIGHUP refuses them too, and whatever happens while the new file is
checked in its child process (errors, running out of reload.memory_limit, a crash, going past
reload.timeout), the running configuration keeps serving and the gateway lives on."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from support import check_no_sanitizer_report, free_port, gateway_config, request, wait_until

ASAN = "ASAN_OPTIONS" in os.environ


def alias_bomb():
    """Nested `any:` of ten aliases each: about 1 KiB of YAML, 10^10 conditions once expanded."""
    lines = ["  - name: r0", "    match: &c0 {path: /x}", "    respond: {status: 200}"]
    for i in range(1, 10):
        aliases = ", ".join([f"*c{i - 1}"] * 10)
        lines += [f"  - name: r{i}", f"    match: &c{i} {{any: [{aliases}]}}", "    respond: {status: 200}"]
    return "\n".join(lines) + "\n"


def deep_nesting():
    """100,000 nested sequences."""
    return "  - " + "[" * 100000 + "]" * 100000 + "\n"


def chained_anchors():
    """Each anchor one level deeper than the one it holds: never deep as written."""
    lines = ["  - name: r", "    respond: {status: 200}", "    x0: &a0 x"]
    lines += [f"    x{i}: &a{i} [*a{i - 1}]" for i in range(1, 300)]
    return "\n".join(lines) + "\n"


BOMBS = {
    "alias-bomb": (alias_bomb, "the document holds more than 4000000 nodes once its aliases are expanded"),
    "deep-nesting": (deep_nesting, "nesting deeper than 200 levels"),
    "chained-anchors": (chained_anchors, "nesting deeper than 200 levels once aliases are expanded"),
}


def with_routes(head, routes_text):
    return head + "routes:\n" + routes_text


def many_routes(n):
    return "".join(f"  - name: t{i}\n    match: {{all: [{{host: tenant{i}.example.com}}, {{path: {{prefix: /api}}}}]}}\n"
                   f"    respond: {{status: 200}}\n" for i in range(n))


def assert_error_at(text, path, source, message):
    """`text` holds `PATH:LINE:COL: message` once, at a position that exists in `source`."""
    m = re.search(rf"^{re.escape(str(path))}:(\d+):(\d+): {re.escape(message)}$", text, re.M)
    assert m, text[-2000:]
    line, col = int(m.group(1)), int(m.group(2))
    lines = source.splitlines()
    assert 1 <= line <= len(lines) and 1 <= col <= len(lines[line - 1]) + 1, (line, col)
    return line, col


# --------------------------------------------------------------------------------------
# --check


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_check_refuses_in_bounded_time_and_memory(matchgate_bin, tmp_path, kind):
    make, message = BOMBS[kind]
    source = with_routes('listen: [{address: "127.0.0.1:8080"}]\n', make())
    path = tmp_path / f"{kind}.yaml"
    path.write_text(source)

    started = time.monotonic()
    proc = subprocess.Popen([str(matchgate_bin), "--check", "-c", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - started
    err = err.decode()
    check_no_sanitizer_report(err, "matchgate --check")

    assert proc.returncode == 1, err
    assert out == b""
    line, col = assert_error_at(err, path, source, message)
    if kind == "alias-bomb":
        assert source.splitlines()[line - 1][col - 1] == "*", "the error points at the alias that passes the bound"
    assert elapsed < 10, f"--check took {elapsed:.1f}s"


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_check_memory_stays_small(matchgate_bin, tmp_path, kind):
    """The peak RSS of --check on each bomb: a few MiB of tree at most (AddressSanitizer adds its own
    tens of MiB), where the alias bomb used to reach 4 GB and abort."""
    make, _ = BOMBS[kind]
    path = tmp_path / f"{kind}.yaml"
    path.write_text(with_routes('listen: [{address: "127.0.0.1:8080"}]\n', make()))
    proc = subprocess.Popen([str(matchgate_bin), "--check", "-c", str(path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)

    assert proc.returncode == 1
    assert usage.ru_maxrss < 256 * 1024, f"peak RSS {usage.ru_maxrss} KiB"


def test_check_reads_stdin_under_a_memory_limit(matchgate_bin, tmp_path):
    """The options a reload gives the process that checks the new file, usable by hand: the text
    comes on stdin, the file name names it in messages."""
    source = with_routes('listen: [{address: "127.0.0.1:8080"}]\n', alias_bomb())
    res = subprocess.run([str(matchgate_bin), "--check", "--stdin", "--memory-limit", str(256 << 20), "-c", "named.yaml"],
                         input=source, capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert_error_at(res.stderr, "named.yaml", source, BOMBS["alias-bomb"][1])

    good = with_routes('listen: [{address: "127.0.0.1:8080"}]\n', "  - name: r\n    respond: {status: 200}\n")
    res = subprocess.run([str(matchgate_bin), "--check", "--stdin", "-c", "named.yaml"], input=good, capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert re.fullmatch(r"named\.yaml: ok \(1 listener, 0 backends, 1 route, \d+ workers?, 0 tenants\)\n", res.stdout), res.stdout
    res = subprocess.run([str(matchgate_bin), "--stdin", "-c", "named.yaml"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2, "--stdin is an option of --check"


# --------------------------------------------------------------------------------------
# Reloads


def admin_gateway(start_gateway, **top):
    config = gateway_config(free_port(), routes=[{"name": "hello", "match": {"path": "/hello"},
                                                  "respond": {"status": 200, "body": "hello\n"}}],
                            admin={"address": f"127.0.0.1:{free_port()}"}, **top)
    gw = start_gateway(config)
    text = gw.config_path.read_text()
    return gw, text[:text.index("routes:")]


def assert_still_serving(gw, generation=1):
    assert gw.proc.poll() is None, "the gateway is alive"
    status, _, body = request(gw.port, "GET", "/hello")
    assert (status, body) == (200, b"hello\n"), "the running configuration still serves"
    assert gw.metrics()["matchgate_config_generation"] == generation


def post_reload(gw, timeout=60):
    status, _, body = gw.admin_request("POST", "/reload", timeout=timeout)
    return status, json.loads(body)


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_reload_refuses_a_bomb_by_post_and_by_sighup(start_gateway, kind):
    make, message = BOMBS[kind]
    gw, head = admin_gateway(start_gateway)
    good = gw.config_path.read_text()
    source = with_routes(head, make())
    gw.write_config(source)

    status, answer = post_reload(gw)
    assert status == 422, answer
    assert answer["result"] == "failed" and answer["generation"] == 1
    assert len(answer["errors"]) == 1, answer
    assert_error_at(answer["errors"][0], gw.config_path, source, message)
    assert_still_serving(gw)

    line = gw.reload()  # SIGHUP: the same refusal, on stderr
    assert line == f"reload of {gw.config_path} failed (1 error): still serving generation 1"
    assert_error_at(gw.stderr(), gw.config_path, source, message)
    assert_still_serving(gw)
    assert gw.metrics()['matchgate_reloads_total{result="failed"}'] == 2

    gw.write_config(good)
    status, answer = post_reload(gw)
    assert status == 200, answer
    assert_still_serving(gw, generation=2)


@pytest.mark.skipif(ASAN, reason="an address-space limit cannot be set under AddressSanitizer (it reserves terabytes)")
def test_reload_running_out_of_the_memory_limit_keeps_the_running_config(start_gateway):
    """A file within every bound that needs more memory than reload.memory_limit to load: the check
    runs out in its own process, the reload is refused, and once the limit is raised (by a reload
    of its own) the same file loads."""
    gw, head = admin_gateway(start_gateway, reload={"memory_limit": "64MiB"})
    big = with_routes(head, many_routes(100000) + "  - name: hello\n    match: {path: /hello}\n"
                      "    respond: {status: 200, body: \"hello\\n\"}\n")
    gw.write_config(big)

    status, answer = post_reload(gw)
    assert status == 422, answer
    assert any("reload.memory_limit (64 MiB)" in e for e in answer["errors"]), answer
    assert_still_serving(gw)

    line = gw.reload()
    assert line.startswith(f"reload of {gw.config_path} failed"), line
    assert_still_serving(gw)

    gw.write_config(gw.config_path.read_text().replace("memory_limit: 64MiB", "memory_limit: 1GiB").split("routes:")[0]
                    + "routes:\n  - name: hello\n    match: {path: /hello}\n    respond: {status: 200, body: \"hello\\n\"}\n")
    assert post_reload(gw)[0] == 200
    gw.write_config(big.replace("memory_limit: 64MiB", "memory_limit: 1GiB"))
    status, answer = post_reload(gw)
    assert status == 200, answer
    assert_still_serving(gw, generation=3)
    assert request(gw.port, "GET", "/api/x", headers={"Host": "tenant99999.example.com"})[0] == 200


def check_children(gw):
    """The pids of the gateway's children that check a file (`--check --stdin`)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == gw.pid and b"--stdin" in cmdline:
            found.append(int(entry))
    return found


def test_a_crash_of_the_check_keeps_the_running_config(start_gateway):
    gw, head = admin_gateway(start_gateway)
    gw.write_config(with_routes(head, many_routes(100000)))
    result = {}
    thread = threading.Thread(target=lambda: result.update(answer=post_reload(gw, timeout=120)))
    thread.start()
    try:
        children = wait_until(lambda: check_children(gw), 30, interval=0.005)
        assert children, "no check process seen"
        os.kill(children[0], signal.SIGSEGV)
    finally:
        thread.join(timeout=120)
    status, answer = result["answer"]

    # AddressSanitizer may catch the SIGSEGV, report and abort, depending on when it comes
    crashed = r"11 \(SIGSEGV\)" if not ASAN else r"(11 \(SIGSEGV\)|6 \(SIGABRT\))"
    assert status == 422, answer
    assert len(answer["errors"]) == 1, answer
    assert re.fullmatch(rf"{re.escape(str(gw.config_path))}: the check of the new file ended with signal {crashed}: out of "
                        rf"memory under reload\.memory_limit \(1024 MiB\), or a crash", answer["errors"][0]), answer
    assert_still_serving(gw)
    assert check_children(gw) == [], "the check process was reaped"


def test_a_check_past_reload_timeout_is_killed_and_the_running_config_kept(start_gateway):
    gw, head = admin_gateway(start_gateway, reload={"timeout": "20ms"})
    gw.write_config(with_routes(head, many_routes(100000)))

    status, answer = post_reload(gw)
    assert status == 422, answer
    assert answer["errors"] == [f"{gw.config_path}: the check of the new file did not finish within reload.timeout (20 ms)"]
    assert_still_serving(gw)
    assert check_children(gw) == [], "the check process was killed and reaped"
    line = gw.reload()
    assert line.startswith(f"reload of {gw.config_path} failed"), line
    assert_still_serving(gw)


def test_a_file_over_64_mib_is_not_read_past_the_bound(start_gateway):
    gw, head = admin_gateway(start_gateway)
    with open(gw.config_path, "w") as f:
        f.write(head + "routes: []\n")
        f.write("#" * ((64 << 20) + 1) + "\n")

    status, answer = post_reload(gw)
    assert status == 422, answer
    assert answer["errors"] == [f"{gw.config_path}: larger than 64 MiB, the limit for a configuration file"]
    assert_still_serving(gw)
