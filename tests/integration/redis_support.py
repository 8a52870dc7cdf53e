"""A real redis-server for the tests, on a free loopback port with its own temp dir, started
and stopped (or killed and restarted on the same port) by the test."""

import shutil
import socket
import subprocess
import time

import pytest

from support import free_port, port_accepts, wait_until


def need_redis():
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.fail("redis-server and redis-cli are needed (scripts/deps installs redis-server redis-tools)")


class RedisServer:
    def __init__(self, workdir, port=None):
        need_redis()
        self.port = port or free_port()
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
             "--appendonly", "no", "--protected-mode", "no", "--logfile", str(self.dir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_until(lambda: port_accepts(self.port), 10), "redis-server did not start"

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def cli(self, *args):
        out = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True, timeout=10)
        return out.stdout.strip()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"
