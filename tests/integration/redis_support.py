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
    def __init__(self, workdir, port=None, extra=()):
        need_redis()
        self.port = port or free_port()
        self.extra = list(extra)
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
             "--appendonly", "no", "--protected-mode", "no", "--logfile", str(self.dir / "redis.log"), *self.extra],
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


def cluster_port():
    """A free port whose Cluster bus port (+10000) is free too, below the ephemeral range."""
    import random
    for _ in range(200):
        p = random.randrange(15000, 30000)
        ok = True
        for q in (p, p + 10000):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", q))
                except OSError:
                    ok = False
        if ok:
            return p
    raise RuntimeError("no free port pair")


class RedisCluster:
    """Three masters (redis-server --cluster-enabled yes, joined by redis-cli --cluster create)."""

    def __init__(self, workdir):
        extra = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"]
        self.nodes = [RedisServer(workdir / f"node{i}", cluster_port(), extra) for i in range(3)]
        subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes],
                        "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, timeout=60, check=True)
        assert wait_until(self.settled, 20, 0.1), "the cluster did not settle"
        self.ids = [n.cli("cluster", "myid") for n in self.nodes]

    def settled(self):
        views = []
        for n in self.nodes:
            if "cluster_state:ok" not in n.cli("cluster", "info"):
                return False
            views.append(n.cli("cluster", "slots"))
        return all(v == views[0] for v in views)

    @property
    def urls(self):
        return [n.url for n in self.nodes]

    def owner(self, slot):
        """The index of the node that owns `slot`, as node 0 sees it (CLUSTER NODES)."""
        for line in self.nodes[0].cli("cluster", "nodes").splitlines():
            f = line.split()
            port = int(f[1].split("@")[0].rsplit(":", 1)[1])
            for r in f[8:]:
                if r.startswith("["):
                    continue  # a slot being imported or migrated
                lo, _, hi = r.partition("-")
                if int(lo) <= slot <= int(hi or lo):
                    return next(k for k, n in enumerate(self.nodes) if n.port == port)
        raise AssertionError(f"no owner for slot {slot}")

    def move_slot(self, slot, src, dst, pause=0.05):
        """Moves `slot` from node src to node dst, one key at a time (clients meet ASK meanwhile),
        then tells every node (MOVED from then on)."""
        s, d = self.nodes[src], self.nodes[dst]
        assert d.cli("cluster", "setslot", str(slot), "importing", self.ids[src]) == "OK"
        assert s.cli("cluster", "setslot", str(slot), "migrating", self.ids[dst]) == "OK"
        while True:
            keys = s.cli("cluster", "getkeysinslot", str(slot), "1")
            if not keys:
                break
            assert s.cli("migrate", "127.0.0.1", str(d.port), "", "0", "5000", "keys", keys) in ("OK", "NOKEY")
            time.sleep(pause)
        for n in (d, s, *[x for x in self.nodes if x not in (s, d)]):
            assert n.cli("cluster", "setslot", str(slot), "node", self.ids[dst]) == "OK"

    def stop(self):
        for n in self.nodes:
            n.stop()


def resp_command(sock_file, *args):
    """One command on a RESP connection (a socket's makefile("rwb")); returns the reply
    (bytes, int, list or None; an error reply raises)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    sock_file.write(b"".join(out))
    sock_file.flush()
    return _resp_read(sock_file)


def _resp_read(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_resp_read(f) for _ in range(n)]
    raise RuntimeError(f"bad RESP line {line!r}")


class AdmissionLog:
    """Reads the store's log of admissions (a list of Redis TIME microseconds per key) from every
    node every `interval` s, so that the union is every admission Redis made, on Redis's clock:
    each admission stays in its key's log for a whole window, much longer than the interval."""

    def __init__(self, ports, keys, interval=0.2, cluster=False):
        import threading
        self.ports, self.keys, self.interval, self.cluster = ports, keys, interval, cluster
        self.counts = {k: {} for k in keys}  # key -> {timestamp: most occurrences seen at once}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _poll(self, files):
        for f in files:
            for k in self.keys:
                try:
                    if self.cluster:
                        resp_command(f, "ASKING")  # a node importing the key's slot answers too
                    items = resp_command(f, "LRANGE", k, 0, -1) or []
                except RuntimeError:  # MOVED/ASK from a node that does not hold the key
                    continue
                seen = {}
                for v in items:
                    seen[int(v)] = seen.get(int(v), 0) + 1
                for t, c in seen.items():
                    if c > self.counts[k].get(t, 0):
                        self.counts[k][t] = c

    def _run(self):
        conns = []
        try:
            for p in self.ports:
                s = socket.create_connection(("127.0.0.1", p), timeout=5)
                conns.append((s, s.makefile("rwb")))
            while not self._stop.is_set():
                self._poll([f for _, f in conns])
                self._stop.wait(self.interval)
            self._poll([f for _, f in conns])
        except OSError:
            self.errors += 1
        finally:
            for s, f in conns:
                f.close()
                s.close()

    def stop(self):
        self._stop.set()
        self._thread.join(30)

    def times(self, key):
        """Every admission of `key` in time order, in seconds on Redis's clock."""
        return sorted(t / 1e6 for t, c in self.counts[key].items() for _ in range(c))
