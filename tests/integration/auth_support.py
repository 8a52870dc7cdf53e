"""Tokens and keys for the authentication tests, made here with python3-jwt and
python3-cryptography, and a real JWKS server on 127.0.0.1 whose answers a test can change
(rotate keys, fail, answer garbage or slowly) and whose requests it can count.
"""

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from support import run_matchgate

ISSUER = "https://idp.test/"
AUDIENCE = "gateway"


class SigningKey:
    """A private key with its kid; `jwk()` is its public JWK."""

    def __init__(self, kind, kid):
        self.kind, self.kid = kind, kid
        if kind == "rsa":
            self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.alg, algo = "RS256", RSAAlgorithm
        elif kind == "ec":
            self.key = ec.generate_private_key(ec.SECP256R1())
            self.alg, algo = "ES256", ECAlgorithm
        else:
            self.key = ed25519.Ed25519PrivateKey.generate()
            self.alg, algo = "EdDSA", OKPAlgorithm
        self._jwk = json.loads(algo.to_jwk(self.key.public_key()))
        self._jwk.update(kid=kid, use="sig")

    def jwk(self):
        return dict(self._jwk)

    def sign(self, claims=None, alg=None, kid=None, headers=None, **extra):
        """A token with the usual claims (iss, aud, exp in 5 minutes, iat now), then `claims`."""
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300, "sub": "user-1"}
        payload.update(claims or {})
        payload.update(extra)
        payload = {k: v for k, v in payload.items() if v is not None}
        hdr = {"kid": self.kid if kid is None else kid}
        hdr.update(headers or {})
        hdr = {k: v for k, v in hdr.items() if v is not None}
        return jwt.encode(payload, self.key, algorithm=alg or self.alg, headers=hdr)


def jwks(*keys):
    return {"keys": [k.jwk() if isinstance(k, SigningKey) else k for k in keys]}


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def jwks_file(path, *keys):
    """Writes the JWK Set of `keys` to `path` (for `jwks: {file: ...}`); returns the path."""
    path.write_text(json.dumps(jwks(*keys)))
    return path


def api_key(tenant, claims=None):
    """A new API key from `matchgate hash-key`: (the key, its keys_file line). The line never holds
    the key itself."""
    res = run_matchgate("hash-key", tenant, *([json.dumps(claims)] if claims else []))
    assert res.returncode == 0, res.stderr
    key = re.search(r"new key \(.*\): (\S+)", res.stderr).group(1)
    assert key not in res.stdout
    return key, res.stdout


class JwksServer(ThreadingHTTPServer):
    """Serves `body` (a dict as JSON, or bytes) at any path with `status`, after `delay` seconds;
    `down()` makes it refuse connections (it stops listening). `requests` counts what arrived."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, document):
        super().__init__(("127.0.0.1", 0), _JwksHandler)
        self.port = self.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/jwks.json"
        self.lock = threading.Lock()
        self.body, self.status, self.delay = document, 200, 0.0
        self.requests = 0
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def serve(self, document, status=200, delay=0.0):
        with self.lock:
            self.body, self.status, self.delay = document, status, delay

    def count(self):
        with self.lock:
            return self.requests

    def stop(self):
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


class _JwksHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        with srv.lock:
            srv.requests += 1
            body, status, delay = srv.body, srv.status, srv.delay
        if delay:
            time.sleep(delay)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the gateway gave up (its timeout)


def jwt_authenticator(jwks_url=None, jwks_file=None, **over):
    """An `auth:` entry of kind jwt with the tests' issuer and audience."""
    conf = {"issuer": ISSUER, "audiences": [AUDIENCE]}
    if jwks_url:
        # 5s: a loaded machine must not make the first fetch fail (the gateway waits for it at start)
        conf["jwks"] = {"url": jwks_url, "refresh": "10m", "min_refresh": "30s", "timeout": "5s"}
    if jwks_file:
        conf["jwks"] = {"file": str(jwks_file)}
    conf.update(over)
    return {"jwt": conf}
