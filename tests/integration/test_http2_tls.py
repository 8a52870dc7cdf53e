"""HTTP/2 (h2c prior knowledge, and ALPN over TLS) with nghttp, h2load and curl."""

import json
import re
import subprocess

from support import free_port, gateway_config

API = {"name": "api", "match": {"path": {"prefix": "/api"}}, "forward": "b"}


def run(args, timeout=30):
    res = subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return res


def test_h2c_prior_knowledge_with_nghttp(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))

    res = run(["nghttp", "-nv", "-H", "x-custom: h2", f"http://127.0.0.1:{gw.port}/api/h2?q=1"])

    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"recv \(stream_id=\d+\) :status: 200", res.stdout), res.stdout
    assert re.search(r"recv \(stream_id=\d+\) x-backend: backend1", res.stdout), res.stdout
    seen = backend.wait_for("/api/h2")
    assert (seen.method, seen.query) == ("GET", "q=1")
    assert seen.headers["x-custom"] == "h2"
    assert seen.headers["x-forwarded-proto"] == "http"


def test_h2c_post_body_with_nghttp(start_gateway, backend, tmp_path):
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))
    data = tmp_path / "body.bin"
    data.write_bytes(bytes(range(256)) * 100)

    res = run(["nghttp", "-d", str(data), f"http://127.0.0.1:{gw.port}/api/h2post"])

    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["method"] == "POST"
    assert backend.wait_for("/api/h2post").body == data.read_bytes()


def test_h2load_all_succeed(start_gateway, backend):
    gw = start_gateway(gateway_config(free_port(), backends={"b": [backend.url]}, routes=[API]))

    res = run(["h2load", "-n", "200", "-c", "4", "-m", "10", f"http://127.0.0.1:{gw.port}/api/load"], timeout=60)

    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"requests: 200 total, 200 started, 200 done, 200 succeeded, 0 failed, 0 errored", res.stdout), res.stdout
    assert re.search(r"status codes: 200 2xx", res.stdout), res.stdout
    assert len(backend.received()) == 200


def make_cert(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    res = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
               "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
    assert res.returncode == 0, res.stderr
    return cert, key


def test_tls_listener_alpn_h2_and_http11(start_gateway, backend, tmp_path):
    cert, key = make_cert(tmp_path)
    port = free_port()
    config = gateway_config(port, backends={"b": [backend.url]}, routes=[API])
    config["listen"] = [{"address": f"127.0.0.1:{port}", "tls": {"certificate": str(cert), "key": str(key)}}]
    gw = start_gateway(config)
    url = f"https://127.0.0.1:{gw.port}/api/tls"

    for flag, version in (("--http2", "2"), ("--http1.1", "1.1")):
        res = run(["curl", "-sk", flag, "-o", str(tmp_path / "out"), "-w", "%{http_version} %{http_code}",
                   "--max-time", "10", f"{url}?v={version}"])
        assert res.returncode == 0, res.stderr
        assert res.stdout == f"{version} 200"
        assert json.loads((tmp_path / "out").read_text())["query"] == f"v={version}"

    protos = [r.headers["x-forwarded-proto"] for r in backend.received("/api/tls")]
    assert protos == ["https", "https"]
