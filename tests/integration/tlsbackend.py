"""TLS and HTTP/2 backends for the tests of https:// and h2/h2c servers, and the certificates
they need, made with `openssl` in a temporary directory.

- Pki(dir): a CA, a server certificate for localhost and 127.0.0.1 signed by it, a client
  certificate signed by it, and a second CA that signed nothing the backends use.
- TlsBackend: the recording HTTP/1.1 backend of support.py behind TLS; `client_cert=True`
  requires a client certificate of the CA. Records the SNI names it was asked for.
- H2Backend: an HTTP/2 server (python3-h2) over TLS (ALPN h2) or plain TCP (h2c prior knowledge),
  answering each request with a JSON echo; /slow answers after 300 ms. Counts connections and
  the most streams open at once on one connection.
"""

import json
import socket
import ssl
import subprocess
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from support import Backend, RecordedRequest


def _openssl(*args):
    res = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr


class Pki:
    def __init__(self, d):
        self.dir = d
        self.ca, self.ca_key = self._ca("test-ca")
        self.other_ca, _ = self._ca("other-ca")
        self.server, self.server_key = self._leaf("server", "localhost", "serverAuth",
                                                  "subjectAltName=DNS:localhost,IP:127.0.0.1")
        self.client, self.client_key = self._leaf("client", "matchgate", "clientAuth", None)

    def _ca(self, name):
        cert, key = self.dir / f"{name}.pem", self.dir / f"{name}.key"
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
                 "-out", str(cert), "-days", "2", "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return cert, key

    def _leaf(self, name, cn, usage, san):
        cert, key, csr, ext = (self.dir / f"{name}.pem", self.dir / f"{name}.key", self.dir / f"{name}.csr",
                               self.dir / f"{name}.ext")
        ext.write_text(f"extendedKeyUsage={usage}\n" + (f"{san}\n" if san else ""))
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
                 "-out", str(csr), "-subj", f"/CN={cn}")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key), "-CAcreateserial",
                 "-out", str(cert), "-days", "2", "-extfile", str(ext))
        return cert, key

    def server_context(self, client_cert=False, alpn=None):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server, self.server_key)
        if client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.ca)
        if alpn:
            ctx.set_alpn_protocols(alpn)
        return ctx


def _record_sni(names):
    def callback(sslsock, name, ctx):
        names.append(name)
    return callback


class TlsBackend(Backend):
    """support.Backend over TLS: `url` is https://127.0.0.1:PORT. Failed handshakes are counted in
    `handshake_failures`, not printed."""

    def __init__(self, name, pki, client_cert=False):
        self.sni = []
        self.handshake_failures = 0
        self.ctx = pki.server_context(client_cert=client_cert, alpn=["http/1.1"])
        self.ctx.sni_callback = _record_sni(self.sni)
        super().__init__(name)
        self.url = f"https://127.0.0.1:{self.port}"

    def get_request(self):
        sock, addr = super().get_request()
        # the handshake happens in the handler's thread, on its first read
        return self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):
        self.handshake_failures += 1


class H2Backend:
    def __init__(self, name, pki=None):
        self.name = name
        self.ctx = pki.server_context(alpn=["h2"]) if pki else None
        self.lock = threading.Lock()
        self.requests = []  # RecordedRequest, in order of completion
        self.protocols = []  # ALPN per TLS connection
        self.connections = 0
        self.max_streams = 0  # the most requests open at once on one connection
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.url = f"{'https' if pki else 'http'}://127.0.0.1:{self.port}"
        self.stopping = False
        self.open = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            if self.ctx:
                conn = self.ctx.wrap_socket(conn, server_side=True)
                with self.lock:
                    self.protocols.append(conn.selected_alpn_protocol())
            _H2Connection(self, conn).run()
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError):
            pass
        finally:
            conn.close()

    def received(self, path=None):
        with self.lock:
            return [r for r in self.requests if path is None or r.path == path]

    def stop(self):
        self.stopping = True
        self.sock.close()
        with self.lock:
            for c in self.open:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _H2Connection:
    def __init__(self, backend, sock):
        self.b = backend
        self.sock = sock
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.send_lock = threading.Lock()
        self.streams = {}  # id -> (headers, body)
        self.open = 0

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def run(self):
        with self.send_lock:
            self.conn.initiate_connection()
            self.flush()
        while True:
            data = self.sock.recv(65536)
            if not data:
                return
            with self.send_lock:
                for ev in self.conn.receive_data(data):
                    self.on_event(ev)
                self.flush()

    def on_event(self, ev):
        if isinstance(ev, h2.events.RequestReceived):
            self.streams[ev.stream_id] = (ev.headers, bytearray())
            self.open += 1
            with self.b.lock:
                self.b.max_streams = max(self.b.max_streams, self.open)
        elif isinstance(ev, h2.events.DataReceived):
            self.streams[ev.stream_id][1].extend(ev.data)
            self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            headers, body = self.streams.pop(ev.stream_id)
            h = dict(headers)
            rec = RecordedRequest(h[":method"], h[":path"], [(k, v) for k, v in headers], bytes(body))
            with self.b.lock:
                self.b.requests.append(rec)
            if rec.path.endswith("/slow"):
                threading.Timer(0.3, self.respond_later, args=(ev.stream_id, rec)).start()
            else:
                self.respond(ev.stream_id, rec)

    def respond_later(self, stream_id, rec):
        with self.send_lock:
            try:
                self.respond(stream_id, rec)
                self.flush()
            except (OSError, h2.exceptions.ProtocolError):
                pass

    def respond(self, stream_id, rec):
        self.open -= 1
        payload = json.dumps({"backend": self.b.name, "method": rec.method, "path": rec.path, "query": rec.query,
                              "headers": rec.headers, "body_bytes": len(rec.body)}).encode()
        self.conn.send_headers(stream_id, [(":status", "200"), ("content-type", "application/json"),
                                           ("x-backend", self.b.name), ("content-length", str(len(payload)))])
        self.conn.send_data(stream_id, payload, end_stream=True)


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
