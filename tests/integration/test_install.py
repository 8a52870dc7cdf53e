"""Installed like a service (docs/operating.md, "Installing"): `meson install` puts the binary,
the man page, the systemd unit and example configurations in place; the unit passes
`systemd-analyze verify` (where systemd is installed) with its hardening; the man page names
every command-line flag and signal; `--check` sums up a file in one line and `--check --print`
prints it with every default filled in, as YAML that checks again."""

import re
import shutil
import subprocess

import pytest

from support import BUILD, MATCHGATE, REPO, run_matchgate

EXAMPLES = REPO / "conf" / "examples"
MAN = REPO / "docs" / "matchgate.1"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    dest = tmp_path_factory.mktemp("dest")
    res = subprocess.run(["meson", "install", "-C", str(BUILD), "--destdir", str(dest), "--no-rebuild", "--quiet"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    prefixes = [p for p in dest.rglob("bin/matchgate")]
    assert len(prefixes) == 1, list(dest.rglob("*"))
    return prefixes[0].parent.parent  # DEST/PREFIX


def test_meson_install_puts_everything_in_place(installed):
    binary = installed / "bin" / "matchgate"
    assert binary.stat().st_mode & 0o111
    assert subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout.startswith("matchgate ")
    assert (installed / "share" / "man" / "man1" / "matchgate.1").read_text() == MAN.read_text()
    example = installed / "share" / "matchgate" / "matchgate.yaml"
    assert example.read_text() == (EXAMPLES / "minimal.yaml").read_text()
    assert (installed / "share" / "matchgate" / "examples" / "multi-tenant.routes-test.yaml").is_file()
    unit = (installed / "lib" / "systemd" / "system" / "matchgate.service").read_text()
    assert "@BINDIR@" not in unit
    assert re.search(r"^ExecStart=/\S*/bin/matchgate -c /etc/matchgate/matchgate.yaml$", unit, re.M), unit


def unit_for_here(installed, tmp_path, text=None):
    """The installed unit, its binary pointed at this build's (systemd-analyze checks it exists)."""
    unit = text if text is not None else (installed / "lib" / "systemd" / "system" / "matchgate.service").read_text()
    path = tmp_path / "matchgate.service"
    path.write_text(re.sub(r"/\S*/bin/matchgate", str(MATCHGATE), unit))
    return path


def verify(path):
    return subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_the_unit_verifies(installed, tmp_path):
    path = unit_for_here(installed, tmp_path)
    res = verify(path)
    # systemd-analyze exits 0 on many problems: anything it says is one
    assert res.returncode == 0 and res.stderr == "" and res.stdout == "", res.stdout + res.stderr
    unit = path.read_text()
    for line in ("Type=exec", "ExecReload=/bin/kill -HUP $MAINPID", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "ProtectHome=yes", "PrivateTmp=yes", "DynamicUser=yes", "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
                 "SystemCallFilter=@system-service", "KillSignal=SIGTERM"):
        assert re.search(rf"^{re.escape(line)}$", unit, re.M), line
    # the check sees a mistake
    broken = unit_for_here(installed, tmp_path, unit.replace("ProtectSystem=strict", "ProtectSytem=strict"))
    assert "ProtectSytem" in verify(broken).stderr


def man_text():
    return MAN.read_text().replace("\\-", "-")


def test_the_man_page_names_every_flag_and_signal(matchgate_bin):
    usage = run_matchgate("--help").stdout + run_matchgate("route", "--help").stdout
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b", usage))
    assert {"--check", "--print", "--stdin", "--memory-limit", "--version", "--help", "-c", "-H", "--json", "--expect",
            "--peer"} <= flags, flags
    man = man_text()
    for flag in flags:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}\b", man), f"{flag} is not in {MAN.name}"
    for long_only in ("--config", "--header"):
        assert long_only in man
    for signal in ("SIGHUP", "SIGTERM", "SIGINT"):
        assert signal in man
    if shutil.which("groff"):  # the page is well-formed troff where man's formatter is at hand
        res = subprocess.run(["groff", "-man", "-Tutf8", "-ww", str(MAN)], capture_output=True, text=True)
        assert res.returncode == 0 and res.stderr == "", res.stderr


def test_check_sums_up_the_file(matchgate_bin):
    res = run_matchgate("--check", "-c", EXAMPLES / "quotas.yaml")
    assert res.returncode == 0
    assert res.stdout == f"{EXAMPLES / 'quotas.yaml'}: ok (1 listener, 1 backend, 4 routes, 2 workers, 2 tenants)\n"


CONFIGS = [p for p in sorted(EXAMPLES.glob("*.yaml"))
           if not p.name.endswith(".routes-test.yaml") and "bridge:" not in p.read_text()]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_print_shows_defaults_and_checks_again(matchgate_bin, path, tmp_path):
    res = run_matchgate("--check", "--print", "-c", path)
    assert res.returncode == 0, res.stderr
    summary = run_matchgate("--check", "-c", path).stdout
    assert res.stderr == summary, "the summary goes to stderr with --print"
    text = res.stdout
    for default in ("shutdown_timeout: ", "max_header_size: ", "client_header_timeout: ", "idle_timeout: ",
                    "max_keys", "memory_limit: ", "connect_timeout: " if "backends:" in path.read_text() else ""):
        assert default in text, default
    copy = path.parent / f".printed-{path.name}"  # beside the original: relative paths (TLS files) still resolve
    try:
        copy.write_text(text)
        again = run_matchgate("--check", "-c", copy)
    finally:
        copy.unlink()
    assert again.returncode == 0, again.stderr + text
    assert again.stdout.replace(str(copy), str(path)) == summary
    assert "warning" not in again.stderr


def test_print_keeps_the_token_out(matchgate_bin, tmp_path):
    conf = tmp_path / "gw.yaml"
    conf.write_text('listen: [{address: "127.0.0.1:8080"}]\nadmin: {address: "127.0.0.1:9901", token: "s3cret"}\n'
                    "routes:\n  - name: r\n    respond: {status: 204}\n")
    res = run_matchgate("--check", "--print", "-c", conf)
    assert res.returncode == 0
    assert "s3cret" not in res.stdout
    assert "# token: set, not printed" in res.stdout
    assert "respond: {status: 204, body: \"\"}" in res.stdout


def test_print_needs_check(matchgate_bin):
    assert run_matchgate("--print", "-c", EXAMPLES / "minimal.yaml").returncode == 2
