"""conf/examples/multi-tenant.yaml (the route tree of CONFIG.md) run as written, with only its
addresses pointed at local backends: what each backend receives, and what clients get."""

import json
import re
from pathlib import Path

import pytest

from support import free_port, request

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "examples" / "multi-tenant.yaml"


@pytest.fixture
def setup(start_gateway, backend_factory):
    crm, api = backend_factory("crm"), backend_factory("api")
    port = free_port()
    text = EXAMPLE.read_text()
    text = text.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    text = text.replace("http://127.0.0.1:9001", crm.url).replace("http://127.0.0.1:9002", api.url)
    assert crm.url in text and api.url in text and str(port) in text
    gw = start_gateway(text, port=port)
    return gw, crm, api


def get(gw, path, host, headers=None, method="GET"):
    h = {"Host": host}
    h.update(headers or {})
    status, resp_headers, body = request(gw.port, method, path, h)
    return status, resp_headers, body


def test_tenant_by_host(setup):
    gw, crm, api = setup
    status, headers, body = get(gw, "/crm/contacts/7?sort=name", "acme.example.com",
                                {"Cookie": "session=secret", "X-Trace": "t1"})
    assert status == 200, body
    seen = crm.wait_for("/acme/crmapp/contacts/7")
    assert seen.query == "sort=name"
    assert seen.headers["x-tenant"] == "acme"
    assert seen.headers["authorization"] == "Bearer internal"
    assert "cookie" not in seen.headers
    assert seen.headers["x-trace"] == "t1"
    assert seen.headers["host"] == "acme.example.com"  # Host is kept: only forward.host changes it
    assert api.requests == []


def test_tenant_host_case_and_port_ignored(setup):
    gw, crm, _ = setup
    status, _, _ = get(gw, "/crm", "Beta-2.Example.COM:8080")
    assert status == 200
    assert crm.wait_for("/beta-2/crmapp").method == "GET"


def test_crm_prefix_is_a_segment(setup):
    gw, crm, api = setup
    status, headers, body = get(gw, "/crmx", "acme.example.com")
    assert (status, body) == (404, b"no route\n")
    assert crm.requests == [] and api.requests == []


@pytest.mark.parametrize("headers,route,path", [
    ({"X-User-Group": "default", "X-User-Type": "admin"}, "customer-v2", "/api-v2/customer/42"),
    ({"X-User-Type": "admin"}, "customer-v1", "/api/customer/42"),
    ({}, "customer-v2", "/api-v2/customer/42"),
    ({"X-User-Type": "staff"}, "customer-v2", "/api-v2/customer/42"),
])
def test_customer_versions(setup, headers, route, path):
    gw, crm, api = setup
    status, _, body = get(gw, "/api/customer/42", "api.example.org", headers)
    assert status == 200
    assert json.loads(body)["path"] == path
    assert api.wait_for(path).method == "GET"


def test_accounts_and_methods(setup):
    gw, crm, _ = setup
    status, _, body = get(gw, "/accounts/1/withdraw", "bank.example.org", method="POST")
    assert status == 200
    assert json.loads(body)["method"] == "POST"
    assert crm.wait_for("/accounts/1/withdraw").method == "POST"


def test_redirect(setup):
    gw, crm, api = setup
    status, headers, _ = get(gw, "/docs/v1/guide/intro", "www.example.org")
    assert status == 301
    assert headers["Location"] == "https://docs.example.com/v2/guide/intro"
    assert crm.requests == [] and api.requests == []


def test_crlf_in_rewritten_path_is_refused(setup):
    gw, crm, api = setup
    status, headers, body = get(gw, "/crm/a%0d%0aX-Injected:%201", "acme.example.com")
    assert status == 400
    assert headers["X-Matchgate-Error"] == "bad-request"
    assert crm.requests == [] and api.requests == []


def test_path_normalized_before_matching(setup):
    gw, crm, _ = setup
    status, _, _ = get(gw, "/docs/../crm/%2e%2e/crm/x", "acme.example.com")
    assert status == 200
    crm.wait_for("/acme/crmapp/x")
    status, headers, _ = get(gw, "/crm/../../etc/passwd", "acme.example.com")
    assert status == 400


@pytest.mark.parametrize("connection", [
    "X-Tenant, Authorization",
    "x-tenant",
    "AUTHORIZATION",
    "close, X-Tenant",
    "keep-alive,Authorization,,x-tenant ",
    "X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto, X-Request-Id, Host",
])
def test_client_connection_header_cannot_remove_what_the_route_adds(setup, connection):
    """Issue 13 item 3: names in the client's Connection leave the client's headers before the
    route's actions run, never the headers the route or the gateway adds."""
    gw, crm, _ = setup
    status, _, body = get(gw, "/crm/contacts", "acme.example.com",
                          {"Connection": connection, "X-Tenant": "globex", "Authorization": "Bearer stolen",
                           "X-Forwarded-For": "203.0.113.9"})
    assert status == 200, body
    seen = crm.wait_for("/acme/crmapp/contacts")
    assert seen.headers.get("x-tenant") == "acme"
    assert seen.headers.get("authorization") == "Bearer internal"
    assert seen.headers.get("host") == "acme.example.com"
    assert seen.headers.get("x-forwarded-host") == "acme.example.com"
    assert seen.headers.get("x-forwarded-proto") == "http"
    assert seen.headers.get("x-request-id")
    # the client's own X-Forwarded-For is hop-by-hop when it names it, the gateway's entry always comes
    xff = [p.strip() for p in seen.headers["x-forwarded-for"].split(",")]
    assert xff[-1] == "127.0.0.1"
    assert ("203.0.113.9" in xff) == ("x-forwarded-for" not in connection.lower())
    assert "connection" not in seen.headers or connection.lower() not in seen.headers["connection"].lower()


def test_connection_named_headers_are_not_seen_by_conditions(setup):
    """A field the client declared hop-by-hop is gone before routing: the route tree decides as if
    it had not been sent (customer-v1 needs X-User-Type: admin)."""
    gw, _, api = setup
    status, _, _ = get(gw, "/api/customer/7", "api.example.com", {"X-User-Type": "admin", "Connection": "X-User-Type"})
    assert status == 200
    assert api.wait_for("/api-v2/customer/7").headers.get("x-user-type") is None
    status, _, _ = get(gw, "/api/customer/8", "api.example.com", {"X-User-Type": "admin"})
    assert status == 200
    assert api.wait_for("/api/customer/8").headers["x-user-type"] == "admin"
