"""The configuration files shipped in conf/, the YAML examples of docs/configuration.md and
the one in README.md stay valid: `matchgate --check` accepts each without warnings, and every
YAML block of the configuration documentation is one of the conf/ files, word for word."""

import re

import pytest

from support import REPO, run_matchgate

EXAMPLES = sorted(REPO.glob("conf/*.yaml")) + sorted(REPO.glob("conf/examples/*.yaml"))
# the route tester's files (test_route_tool.py runs them), not configurations
CONFIGS = [p for p in EXAMPLES if not p.name.endswith(".routes-test.yaml")]
CONFIGURATION_DOC = REPO / "docs" / "configuration.md"


def test_there_are_examples():
    names = {p.relative_to(REPO).as_posix() for p in EXAMPLES}
    assert "conf/demo.yaml" in names
    assert any(n.startswith("conf/examples/") for n in names), names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_example_passes_check(matchgate_bin, path):
    res = run_matchgate("--check", "-c", path)

    assert res.returncode == 0, res.stderr
    assert re.fullmatch(rf"{re.escape(str(path))}: ok \(.*\)\n", res.stdout), res.stdout
    assert "warning" not in res.stderr, res.stderr


def test_documented_yaml_examples_are_checked_files():
    blocks = re.findall(r"^```yaml\n(.*?)^```$", CONFIGURATION_DOC.read_text(), re.S | re.M)
    files = {p.read_text(): p for p in EXAMPLES}

    assert blocks, f"no YAML example in {CONFIGURATION_DOC}"
    for block in blocks:
        assert block in files, f"this YAML example of {CONFIGURATION_DOC.name} is not a file in conf/:\n{block}"


def test_readme_example_passes_check(tmp_path):
    blocks = re.findall(r"^```yaml\n(.*?)^```$", (REPO / "README.md").read_text(), re.S | re.M)
    assert len(blocks) == 1, "README.md shows one configuration"
    path = tmp_path / "readme.yaml"
    path.write_text(blocks[0])

    res = run_matchgate("--check", "-c", path)

    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr
