"""Fixtures: recording backends and matchgate processes, all torn down after each test.

A gateway started here must exit 0 on SIGTERM at teardown and leave no sanitizer report
(AddressSanitizer, LeakSanitizer, UBSan) on its stderr.
"""

import os

import pytest

from rawhttp import RawBackend
from support import (BUILD, MATCHGATE, START_TIMEOUT, Backend, Gateway, check_no_sanitizer_report, port_accepts, to_yaml,
                     wait_until)


@pytest.fixture
def backend_factory():
    started = []

    def start(name=None, port=0):
        b = Backend(name or f"backend{len(started) + 1}", port)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


@pytest.fixture
def backend(backend_factory):
    return backend_factory("backend1")


@pytest.fixture
def matchgate_bin():
    assert MATCHGATE.is_file() and os.access(MATCHGATE, os.X_OK), (
        f"{MATCHGATE} not found: build first (ninja -C {BUILD}) or set MG_BUILD_DIR")
    return MATCHGATE


@pytest.fixture
def start_gateway(tmp_path, matchgate_bin):
    """start_gateway(config, port=None) -> Gateway, ready to accept.

    `config` is a dict (written as YAML) or YAML text; `port` is the listener to wait for
    (default: the first listen address in a dict config); `nofile` sets the process's
    RLIMIT_NOFILE (soft and hard) before it starts. `gw.config_path` is the file (see
    Gateway.write_config and Gateway.reload); `gw.admin_port` the admin port of a dict config. At teardown every gateway gets
    SIGTERM and must exit 0 (unless started with expect_clean_exit=False) with no sanitizer
    report on stderr.
    """
    started = []

    def start(config, port=None, expect_clean_exit=True, name="matchgate.yaml", nofile=None):
        if isinstance(config, dict):
            port = port or int(config["listen"][0]["address"].rsplit(":", 1)[1])
            text = to_yaml(config) + "\n"
        else:
            text = config
        assert port, "which port to wait for?"
        workdir = tmp_path / f"gw{len(started)}"
        workdir.mkdir()
        path = workdir / name
        path.write_text(text)
        gw = Gateway([str(matchgate_bin), "-c", str(path)], port, workdir, expect_clean_exit, nofile=nofile)
        gw.config_path = path
        if isinstance(config, dict) and "admin" in config:
            gw.admin_port = int(config["admin"]["address"].rsplit(":", 1)[1])
        started.append(gw)
        gw.wait_ready()
        if gw.admin_port:
            assert wait_until(lambda: port_accepts(gw.admin_port), START_TIMEOUT), "the admin address does not accept"
        return gw

    yield start
    # stop them all before judging any, so a failure leaves no process behind
    for gw in started:
        gw.signal()
    codes = [gw.stop() for gw in started]
    for gw, rc in zip(started, codes):
        assert not gw.killed, f"matchgate did not exit within 15s of SIGTERM:\n{gw.stderr()[-4000:]}"
        check_no_sanitizer_report(gw.stderr(), "matchgate")
        if gw.expect_clean_exit:
            assert rc == 0, f"matchgate exited with {rc} after SIGTERM:\n{gw.stderr()[-4000:]}"


@pytest.fixture
def raw_backend_factory():
    """raw_backend_factory(handler) -> RawBackend: a scriptable TCP backend (rawhttp.py),
    stopped after the test."""
    started = []

    def start(handler):
        b = RawBackend(handler)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()
