"""docs/configuration.md says what the code does: every key of its key tables, every condition
kind and every action it lists is accepted by `--check` (a key documented but not implemented,
or renamed, is an "unknown key"), the documented settings run in a gateway, every admin endpoint
of its Endpoints table answers 2xx there, the endpoints its "Not yet implemented" section
names answer 404, and every metric and access log field a gateway writes has its row.

The page is read when the test runs, so keys added to its tables later are covered without
changing this file. A value for each key is looked for in the page itself (the backticked
values of its row: default, examples in the rules), then by its type (an integer from the
range of its rules, a duration, a size, a string), then in the conf/ example files that use the
key; the key passes when one of these makes a file `--check` accepts."""

import copy
import json
import re
import subprocess

import pytest
import yaml

from auth_support import SigningKey, bearer, jwks_file, jwt_authenticator
from support import MATCHGATE, REPO, free_port, request, wait_until
from wsbackend import connect, run

DOC = REPO / "docs" / "configuration.md"
EXAMPLES = sorted(REPO.glob("conf/*.yaml")) + sorted(REPO.glob("conf/examples/*.yaml"))

# Where the keys of each key table go: the heading above the table -> the path of the mapping
# they belong to ("*" is any list item or any name) and what that mapping holds besides the key.
# A key table under another heading fails test_every_key_table_has_a_place: add it here.
ROUTE = {"name": "r", "forward": "app"}
SECTIONS = {
    "Process settings": ((), None),
    "limits": (("limits",), {}),
    "listen": (("listen", "*"), {"address": None}),  # the base listener, see base_config
    "backends": (("backends", "*"), {"servers": ["http://127.0.0.1:9"]}),
    "Passive checks: outlier": (("backends", "*", "outlier"), {}),
    "Active checks: health": (("backends", "*", "health"), {"path": "/healthz"}),
    "tenants": (("tenants",), {"identify": [{"header": "X-Tenant-Id"}]}),
    "routes": (("routes", "*"), ROUTE),
    "bridge": (("routes", "*", "bridge"), {"backend": "app", "method": "POST"}),
    "websocket": (("websocket",), {}),
    "admin": (("admin",), {"address": None}),  # a free port, see base_config
    "reload": (("reload",), {}),
    "jwt": (("auth", "*", "jwt"), {"jwks": {"file": str(REPO / "conf" / "examples" / "identity-jwks.json")}}),
    "api_key": (("auth", "*", "api_key"), {"keys_file": str(REPO / "conf" / "examples" / "identity-keys.txt")}),
    "Routes: auth and require": (("routes", "*"), ROUTE),
    "cors": (("routes", "*", "cors"), {"origins": ["https://app.example.com"]}),
    "mirror": (("routes", "*", "mirror", "*"), {"backend": "app2"}),
    "canary": (("routes", "*", "forward", "canary"), {"to": "app2", "steps": [100]}),
    "forward: split": (("routes", "*", "forward"), {"split": [{"backend": "app", "weight": 1}, {"backend": "app2", "weight": 1}]}),
    "compress": (("compress",), {}),
}
# Sections whose keys are plain settings: all of them together run in one gateway.
RUN_TOGETHER = ("Process settings", "limits", "websocket", "admin", "reload")


# --------------------------------------------------------------------------------------
# Reading the page


def split_row(line):
    """The cells of a table row; a `|` inside backticks does not split."""
    cells, cell, code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
    cells.append(cell.strip())
    return cells


def tables():
    """(heading, header cells, rows) for every table of the page, under its nearest heading."""
    heading, found, lines = None, [], DOC.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^#{1,4} (.+)$", lines[i])
        if m:
            heading = m.group(1).strip()
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[ :|-]+\|$", lines[i + 1]):
            header = split_row(lines[i])
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(dict(zip(header, split_row(lines[i]))))
                i += 1
            found.append((heading, header, rows))
            continue
        i += 1
    return found


def backticked(text):
    return re.findall(r"`([^`]+)`", text or "")


def documented_keys():
    """(heading, key, row) for every row of every table whose first column is `key`."""
    return [(heading, backticked(row["key"])[0], row) for heading, header, rows in tables() if header[0] == "key"
            for row in rows if backticked(row["key"])]


def first_column(title):
    """The backticked names of the first column of the tables whose first header is `title`."""
    names = []
    for _, header, rows in tables():
        if header[0] == title:
            for row in rows:
                for name in backticked(row[title])[:1]:
                    if name not in names:
                        names.append(name)
    return names


# --------------------------------------------------------------------------------------
# Values and files


def parse_value(text):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def typed_guesses(row):
    """Values of the row's type: integers of its range, a duration, a size, a string."""
    kind = (row.get("type", "") + " " + row.get("rules", "")).lower()
    guesses = []
    if "integer" in kind or re.search(r"\d+ to \d", kind):
        guesses += [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", kind)[:4]]
    if "duration" in kind:
        guesses.append("1s")
    if "size" in kind:
        guesses.append("64MiB")
    if "string" in kind or "template" in kind:
        guesses += ["x", "/x"]
    return guesses


def candidates(row):
    values = []
    for text in backticked(row.get("default")) + backticked(row.get("rules")) + backticked(row.get("type")):
        value = parse_value(text)
        if value is not None and value not in values:
            values.append(value)
    return values + [g for g in typed_guesses(row) if g not in values]


def base_config(port, admin_port):
    return {"listen": [{"address": f"127.0.0.1:{port}"}], "workers": 1, "shutdown_timeout": "5s",
            "backends": {"app": {"servers": ["http://127.0.0.1:9"]}, "app2": {"servers": ["http://127.0.0.1:9"]}},
            "routes": [dict(ROUTE)]}


def with_key(config, heading, key, value, admin_port):
    """A copy of `config` with `key: value` in the mapping of `heading` (made when missing)."""
    path, holds = SECTIONS[heading]
    config = copy.deepcopy(config)
    if heading == "canary":  # a canary is a split's: the route's forward becomes one
        config["routes"][0]["forward"] = copy.deepcopy(SECTIONS["forward: split"][1])
    holder = config
    for i, step in enumerate(path):
        if step == "*":
            if isinstance(holder, dict) and not holder:
                holder["a"] = {}  # a name of the user's (an authenticator) the base config lacks
            holder = holder[0] if isinstance(holder, list) else next(iter(holder.values()))
            continue
        if step not in holder:
            holder[step] = copy.deepcopy(holds) if i == len(path) - 1 else {}
        holder = holder[step]
    if heading == "admin":
        holder.setdefault("address", f"127.0.0.1:{admin_port}")
        holder["address"] = holder["address"] or f"127.0.0.1:{admin_port}"
    if heading == "bridge":
        config["routes"][0].pop("forward", None)
    if heading == "forward: split":  # the route's forward becomes a split's mapping
        holder = config["routes"][0]["forward"] = copy.deepcopy(holds)
    holder[key] = value
    return config


def route_variants(config, heading, key):
    """A key of a route may be its terminal: then the route's `forward` must go."""
    yield config
    if heading == "routes" and key != "forward":
        bare = copy.deepcopy(config)
        bare["routes"][0].pop("forward")
        yield bare


def has_key(node, path, key):
    """Whether the parsed YAML `node` has `key` under `path` ("*": any item or name)."""
    if not path:
        return isinstance(node, dict) and key in node
    step, rest = path[0], path[1:]
    if step == "*":
        items = node if isinstance(node, list) else list(node.values()) if isinstance(node, dict) else []
        return any(has_key(item, rest, key) for item in items)
    return isinstance(node, dict) and step in node and has_key(node[step], rest, key)


def examples_with(heading, key):
    path, _ = SECTIONS[heading]
    return [p for p in EXAMPLES if has_key(yaml.safe_load(p.read_text()), path, key)]


def check(path):
    res = subprocess.run([str(MATCHGATE), "--check", "-c", str(path)], capture_output=True, text=True, timeout=30)
    return res.returncode == 0, res.stderr


def first_accepted(tmp_path, configs):
    """The first of `configs` (dicts, or paths of files) that --check accepts, and the errors of
    all the others."""
    errors = []
    for n, config in enumerate(configs):
        path = config
        if isinstance(config, dict):
            path = tmp_path / f"candidate{n}.yaml"
            path.write_text(yaml.safe_dump(config, sort_keys=False))
        ok, stderr = check(path)
        if ok:
            return config, errors
        errors.append(f"{config if isinstance(config, dict) else path}:\n{stderr}")
    return None, errors


def key_configs(heading, key, row, port, admin_port):
    for value in candidates(row):
        yield from route_variants(with_key(base_config(port, admin_port), heading, key, value, admin_port), heading, key)
    yield from examples_with(heading, key)


# --------------------------------------------------------------------------------------
# Keys, kinds and actions


def test_the_page_has_what_this_test_reads():
    keys = documented_keys()
    assert len(keys) >= 40, keys
    assert {h for h, _, _ in keys} >= {"limits", "backends", "routes", "admin"}
    assert "regex" not in first_column("kind") and {"host", "path", "all", "any", "not"} <= set(first_column("kind"))
    assert {"set_header", "rewrite_path"} <= set(first_column("action"))
    assert len(endpoints()) >= 8, endpoints()


def test_every_key_table_has_a_place():
    unplaced = sorted({h for h, _, _ in documented_keys() if h not in SECTIONS})
    assert not unplaced, f"key tables under headings this test does not place: {unplaced} (add them to SECTIONS)"


@pytest.mark.parametrize("heading,key,row", [pytest.param(h, k, r, id=f"{h}.{k}") for h, k, r in documented_keys()
                                             if h in SECTIONS])
def test_every_documented_key_is_accepted(tmp_path, heading, key, row):
    accepted, errors = first_accepted(tmp_path, key_configs(heading, key, row, free_port(), free_port()))
    assert accepted is not None, f"no configuration with {heading} key '{key}' passes --check:\n" + "\n".join(errors[-6:])


def condition_values(row):
    return [v for v in (parse_value(t) for t in backticked(row.get("form"))) if v is not None]


@pytest.mark.parametrize("kind", first_column("kind"))
def test_every_documented_condition_kind_is_accepted(tmp_path, kind):
    rows = [row for _, header, rows in tables() if header[0] == "kind" for row in rows if backticked(row["kind"])[:1] == [kind]]
    configs = []
    for row in rows:
        for value in condition_values(row):
            config = base_config(free_port(), free_port())
            config["routes"][0]["match"] = {kind: value}
            configs.append(config)
    configs += [p for p in EXAMPLES if f"{kind}:" in p.read_text() and re.search(rf"[{{ ]{kind}:", p.read_text())]
    accepted, errors = first_accepted(tmp_path, configs)
    assert accepted is not None, f"no condition '{kind}' passes --check:\n" + "\n".join(errors[-6:])


@pytest.mark.parametrize("action", first_column("action"))
def test_every_documented_action_is_accepted(tmp_path, action):
    rows = [row for _, header, rows in tables() if header[0] == "action" for row in rows if backticked(row["action"])[:1] == [action]]
    configs = []
    for value in [v for row in rows for v in condition_values(row)] + ["/x", "X-A"]:
        config = base_config(free_port(), free_port())
        config["routes"][0]["actions"] = [{action: value}]
        configs.append(config)
    configs += [p for p in EXAMPLES if re.search(rf"[{{ -]{action}:", p.read_text())]
    accepted, errors = first_accepted(tmp_path, configs)
    assert accepted is not None, f"no action '{action}' passes --check:\n" + "\n".join(errors[-6:])


# --------------------------------------------------------------------------------------
# The settings together, and the admin endpoints, on a running gateway


def endpoints():
    """(method, path) of every endpoint of the Endpoints table: `POST /sessions/{id}/close`,
    `/abort` is two, the second taking the first's method and all but its last segment."""
    found = []
    for heading, header, rows in tables():
        if heading != "Endpoints":
            continue
        for row in rows:
            method, path = None, None
            for token in backticked(row[header[0]]):
                m = re.fullmatch(r"(GET|POST|PUT|DELETE|HEAD) (/\S*)", token)
                if m:
                    method, path = m.group(1), m.group(2)
                elif token.startswith("/") and path is not None:
                    path = path.rsplit("/", 1)[0] + token
                else:
                    continue
                found.append((method, re.sub(r"\[[^\]]*\]", "", path)))
    return found


def not_implemented_endpoints():
    text = DOC.read_text()
    section = text[text.index("## Not yet implemented"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    return [(m or "GET", p) for m, p in re.findall(r"`(?:(GET|POST) )?(/[^`\s]*)`", section)]


def settings_together(tmp_path, port, admin_port):
    """One configuration with an accepted value of every key of RUN_TOGETHER, a bridge route for
    the sessions, and the admin address."""
    config = base_config(port, admin_port)
    for heading, key, row in documented_keys():
        if heading not in RUN_TOGETHER:
            continue
        for value in candidates(row):
            trial = with_key(config, heading, key, value, admin_port)
            if heading == "admin" and key == "address":
                trial["admin"]["address"] = f"127.0.0.1:{admin_port}"
            if key == "workers":
                trial["workers"] = 1  # the value matters little, CPUs do
            if first_accepted(tmp_path, [trial])[0] is not None:
                config = trial
                break
        else:
            pytest.fail(f"no value of {heading} key '{key}' passes --check with the others")
    config["routes"] = [{"name": "sockets", "match": {"all": [{"path": "/ws"}, {"websocket": True}]},
                         "bridge": {"backend": "app", "method": "POST"}},
                        {"name": "canary", "match": {"path": "/canary"},
                         "forward": {"split": [{"backend": "app", "weight": 9}, {"backend": "app2", "weight": 1}]}}]
    for name in ("staged", "staged-promote", "staged-abort"):  # a canary each for the orders that end it
        config["routes"].append({"name": name, "match": {"path": f"/{name}"},
                                 "forward": {"split": [{"backend": "app", "weight": 1}, {"backend": "app2", "weight": 0}],
                                             "canary": {"to": "app2", "steps": [10, 100], "interval": "1h"}}})
    config["routes"].append(dict(ROUTE))
    return config


def test_documented_settings_run_and_every_endpoint_answers(start_gateway, tmp_path):
    port, admin_port = free_port(), free_port()
    config = settings_together(tmp_path, port, admin_port)
    token = config["admin"].get("token")
    gw = start_gateway(config)
    assert gw.admin_port == admin_port

    def sessions():
        return json.loads(gw.admin_request("GET", "/sessions", token=token)[2])["sessions"]

    async def session_and_call(method, path):
        """`path` with {id} and {name} those of a bridge session opened for the call."""
        async with connect(f"ws://127.0.0.1:{port}/ws"):
            listed = wait_until(sessions, 10)
            assert listed, "the session never registered"
            path = path.replace("{id}", str(listed[0]["id"])).replace("{name}", listed[0]["route"])
            return gw.admin_request(method, path, token=token, body=b"hello" if method == "POST" else None)

    answers = {}
    for method, path in endpoints():
        if path.startswith("/routes/{name}/canary"):  # the canaries of the configuration
            action = path.rsplit("/", 1)[1]
            route = f"staged-{action}" if action in ("promote", "abort") else "staged"
            status, _, body = gw.admin_request(method, path.replace("{name}", route), token=token, body=b"" if method == "POST" else None)
        elif path == "/routes/{name}/split":  # the configuration's split route
            status, _, body = gw.admin_request(method, "/routes/canary/split", token=token, body=b'{"weights": [1, 1]}')
        elif path.startswith("/backends/"):  # the base configuration's backend, its first server
            status, _, body = gw.admin_request(method, path.replace("{name}", "app").replace("{index}", "0"), token=token)
        elif "{" in path:
            status, _, body = run(session_and_call(method, path))
            assert wait_until(lambda: sessions() == [], 10), "the session did not end"
        else:
            status, _, body = gw.admin_request(method, path, token=token, body=b"" if method == "POST" else None)
        answers[(method, path)] = (status, body[:200])
    failed = {k: v for k, v in answers.items() if not 200 <= v[0] < 300}
    assert not failed, f"documented endpoints that did not answer 2xx: {failed}"
    assert request(port, "GET", "/anything")[0] == 502, "the data listener serves (the backend is down)"

    for method, path in not_implemented_endpoints():
        status, _, body = gw.admin_request(method, path, token=token)
        assert (status, json.loads(body)) == (404, {"error": "no such endpoint"}), (method, path, "is implemented now: "
                                                                                    "move it out of 'Not yet implemented'")


# --------------------------------------------------------------------------------------
# What a running gateway reports: its metrics and its access log's fields


def documented_names(heading, column):
    """Every backticked name of `column` in the tables under `heading`, labels cut off."""
    return {re.sub(r"\{.*", "", name) for h, header, rows in tables() if h == heading for row in rows
            for name in backticked(row.get(column))}


def test_every_metric_and_access_log_field_is_in_its_table(start_gateway, backend, tmp_path):
    """With an authenticator, a tenant and a verified request: each metric family /metrics serves
    (its TYPE line) has a row in Metrics, and each field of the access log's line one in Access log."""
    key, log, port = SigningKey("ec", "d1"), tmp_path / "access.log", free_port()
    config = base_config(port, None)
    config.update(admin={"address": f"127.0.0.1:{free_port()}"}, access_log={"path": str(log), "fields": ["user-agent"]},
                  auth={"corp": jwt_authenticator(jwks_file=jwks_file(tmp_path / "jwks.json", key))},
                  tenants={"identify": [{"claim": "tid"}]}, backends={"app": {"servers": [backend.url]}})
    config["routes"] = [dict(ROUTE, auth="corp")]
    gw = start_gateway(config)
    assert request(port, "GET", "/x", headers=bearer(key.sign({"sub": "dana", "tid": "acme"})))[0] == 200
    status, _, body = gw.admin_request("GET", "/metrics")
    assert status == 200
    text = body.decode()
    served = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert {"matchgate_requests_total", "matchgate_auth_requests_total"} <= served
    missing = sorted(served - documented_names("Metrics", "metric"))
    assert not missing, f"metrics served but not in the Metrics table of {DOC.name}: {missing}"
    results = set(re.findall(r'^matchgate_auth_requests_total\{authenticator="corp",result="([a-z_]+)"\}', text, re.M))
    listed = {name for h, _, rows in tables() if h == "Metrics" for row in rows
              if "matchgate_auth_requests_total" in row["metric"] for name in backticked(row["what"])}
    assert len(results) > 10 and not results - listed, f"results not listed in {DOC.name}: {sorted(results - listed)}"
    line = json.loads(wait_until(lambda: log.read_text().strip(), 10).splitlines()[-1])
    assert line["sub"] == "dana"
    missing = sorted(set(line) - documented_names("Access log", "field"))
    assert not missing, f"access log fields not in the Access log table of {DOC.name}: {missing}"
