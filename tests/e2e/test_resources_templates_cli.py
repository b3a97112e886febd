"""`astrid resources templates` and `astrid resources complete`: the templates a principal sees and a
variable's completion, as an MCP client gets them, on the real `templated` capsule (tests/e2e/capsules)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.capsules import Built
from tests.support.processes import astrid_exe, server_env

pytestmark = pytest.mark.slow
NOTES = "test://users/{user}/notes/{note}"
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def resources(built_templated: Built, capsule_home: Path) -> Run:
    """`astrid resources ARGS... --capsules TEMPLATED --principal P` (alice unless `principal=`)."""

    def run(*args: str, principal: str = "alice") -> subprocess.CompletedProcess[str]:
        where = ["--capsules", str(built_templated.folder), "--principal", principal]
        command = [astrid_exe(), "resources", *args, *where]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=server_env(capsule_home))

    return run


def test_templates_lists_each_with_its_capsule_for_this_principal(resources: Run):
    table = resources("templates")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["TEMPLATE", "NAME", "MIME", "CAPSULE", "TITLE"]
    assert ["test://template/{id}/data", "template", "application/json", "templated", "Template", "data"] in [
        row.split() for row in rows
    ]
    assert any(row.startswith("astrid://private/{name} ") for row in rows)  # alice's own template
    bob = resources("templates", principal="bob")
    assert bob.returncode == 0, bob.stderr
    assert "astrid://private/" not in bob.stdout and NOTES in bob.stdout

    records = json.loads(resources("templates", "--json").stdout)
    files = next(r for r in records if r["uri_template"] == "astrid://files/{+path}")
    assert files["mime_type"] == "text/plain" and files["annotations"]["priority"] == 0.5
    assert files["capsule"]["name"] == "templated" and files["capsule"]["signed"] is False


def test_complete_prints_the_values_one_per_line(resources: Run):
    ids = resources("complete", "test://template/{id}/data", "id", "12")
    assert ids.returncode == 0, ids.stderr
    assert ids.stdout.splitlines() == ["12", "123", "1234"]
    every = resources("complete", "test://template/{id}/data", "id")
    assert every.stdout.splitlines() == ["1", "12", "123", "1234", "2", "42"]  # no PREFIX: everything
    answer = json.loads(resources("complete", "astrid://files/{+path}", "path", "notes/", "--json").stdout)
    assert answer == {"values": ["notes/later.md", "notes/today.md"], "total": 2, "has_more": False}


def test_complete_hands_the_context_on(resources: Run):
    """`note` completes from the notes of the `user` given as context, as a client's context arguments."""
    ann = resources("complete", NOTES, "note", "", "--context", "user=ann")
    assert ann.returncode == 0, ann.stderr
    assert ann.stdout.splitlines() == ["todo", "trip"]
    assert resources("complete", NOTES, "note", "", "--context", "user=bob").stdout.splitlines() == ["taxes"]
    assert resources("complete", NOTES, "note", "").stdout == ""  # no user given: no notes


def test_a_bad_completion_is_one_line_naming_the_fix(resources: Run):
    cases = {
        ("complete", NOTES, "nope", "x"): "error: invalid_request: 'nope' is not a variable of the template",
        ("complete", "test://nowhere/{x}", "x", ""): "error: not_found: no capsule declares the template",
        ("complete", NOTES, "note", "", "--context", "user"): "error: --context 'user': write NAME=VALUE",
        ("complete", "astrid://private/{name}", "name", ""): "error: not_found:",  # bob does not see it
    }
    for args, start in cases.items():
        result = resources(*args, principal="bob")
        assert result.returncode == 1, (args, result.stdout)
        assert result.stderr.startswith(start), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "`astrid resources templates`" in resources("complete", NOTES, "nope", "x").stderr
