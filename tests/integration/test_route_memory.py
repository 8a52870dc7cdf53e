"""What a large route file costs the served process, and that the memory a load or a reload
frees goes back to the system (gateway/memory.c): the parsed YAML tree of a 30,000-route file
is larger than the compiled routes, and after a reload the whole old configuration is freed;
without malloc_trim the process's RSS stays at its peak for good (issue 27)."""

import os

import pytest

from support import free_port, request, wait_until

ROUTES = 30000
SANITIZED = os.environ.get("MG_SANITIZED") == "1" or "ASAN_OPTIONS" in os.environ
pytestmark = pytest.mark.skipif(SANITIZED, reason="a measure of glibc's heap: AddressSanitizer has an allocator of its own")


def config(port, routes):
    """Host + prefix routes as route-match generates them, then a fallback; text, written fast."""
    lines = [f'listen:\n  - address: "127.0.0.1:{port}"\nworkers: 2\nroutes:\n']
    for i in range(routes):
        lines.append(f"  - name: t{i}\n    match: {{all: [{{host: tenant{i}.example.com}}, {{path: {{prefix: /api}}}}]}}\n"
                     f"    respond: {{status: 200, body: \"t{i}\\n\"}}\n")
    lines.append("  - name: fallback\n    respond: {status: 404}\n")
    return "".join(lines)


def served(gw, host, path="/api/x"):
    status, _, body = request(gw.port, "GET", path, {"Host": host})
    return status, body


def test_a_large_route_file_costs_its_routes_not_its_parse(start_gateway):
    """The parse's peak is given back before serving: RSS per route is what the compiled
    routes hold (about 1 KB), not the peak (about 2.5 KB before the trim)."""
    port_small, port_big = free_port(), free_port()
    small = start_gateway(config(port_small, 10), port=port_small)
    big = start_gateway(config(port_big, ROUTES), port=port_big)
    assert served(big, f"tenant{ROUTES - 1}.example.com") == (200, f"t{ROUTES - 1}\n".encode())
    per_route = (big.rss_kib() - small.rss_kib()) * 1024 / ROUTES
    print(f"RSS {small.rss_kib()} KiB with 10 routes, {big.rss_kib()} KiB with {ROUTES}: {per_route:.0f} bytes per route")
    assert per_route < 1600, f"{per_route:.0f} bytes of RSS per route: the load's peak was kept"


def test_a_reload_to_a_small_file_gives_the_memory_back(start_gateway):
    port_small, port = free_port(), free_port()
    small = start_gateway(config(port_small, 10), port=port_small)
    gw = start_gateway(config(port, ROUTES), port=port)
    big_kib, small_kib = gw.rss_kib(), small.rss_kib()
    gw.write_config(config(port, 10))
    assert "reloaded" in gw.reload()
    assert served(gw, "tenant5.example.com") == (200, b"t5\n")
    assert served(gw, f"tenant{ROUTES - 1}.example.com")[0] == 404, "the old routes are gone"
    # the old configuration is freed once both workers let go of it; the main thread then
    # trims within a second
    target = big_kib - (big_kib - small_kib) * 2 // 3
    assert wait_until(lambda: gw.rss_kib() < target, 5, interval=0.2), (
        f"RSS {gw.rss_kib()} KiB after the reload, {big_kib} before, {small_kib} for a gateway started with the small file")


def test_reloads_of_the_same_large_file_stay_at_its_size(start_gateway):
    """Each reload builds the new configuration while the old one serves, then frees the old:
    what the load leaves between the routes it keeps (the can-never-match check's notes) must
    not pin the freed configuration's pages, or RSS grows by a configuration per reload."""
    port = free_port()
    gw = start_gateway(config(port, ROUTES), port=port)
    start_kib = gw.rss_kib()
    sizes = []
    for _ in range(3):
        assert "reloaded" in gw.reload(timeout=30)
        assert served(gw, f"tenant{ROUTES - 1}.example.com") == (200, f"t{ROUTES - 1}\n".encode())
        # the old configuration goes once both workers move on; the main thread then trims
        wait_until(lambda: gw.rss_kib() < start_kib * 1.15, 5, interval=0.2)
        sizes.append(gw.rss_kib())
    assert max(sizes) < start_kib * 1.15, f"RSS {start_kib} KiB at start, {sizes} after three reloads of the same file"
