"""server.json, the MCP registry entry: valid against the registry's published schema, at pyproject's version,
and claimed by the README (the registry's ownership check of a PyPI package)."""

from __future__ import annotations

import hashlib
import json
import tomllib

import jsonschema
import pytest

from tests.support.paths import REPO

SCHEMA = REPO / "docs" / "registry" / "server.schema.json"
SCHEMA_URL = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
SCHEMA_SHA256 = "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0"  # docs/registry/README.md


def entry() -> dict:
    return json.loads((REPO / "server.json").read_text(encoding="utf-8"))


def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def test_the_schema_is_the_published_one_unchanged() -> None:
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256
    assert json.loads(SCHEMA.read_text())["$id"] == SCHEMA_URL
    assert entry()["$schema"] == SCHEMA_URL


def test_server_json_is_valid_against_the_registry_schema() -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '/'}: {e.message}" for e in validator().iter_errors(entry())]
    assert errors == []


@pytest.mark.parametrize(
    "change",
    [
        lambda e: e.update(name="astrid-py"),  # no namespace
        lambda e: e.update(description="x" * 101),
        lambda e: e["packages"][0].update(version="latest"),
        lambda e: e["packages"][0].pop("transport"),
    ],
)
def test_the_schema_check_catches_a_broken_entry(change) -> None:
    broken = entry()
    change(broken)
    assert list(validator().iter_errors(broken)) != []


def test_the_entry_is_the_pypi_package_at_pyprojects_version() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    data = entry()
    [package] = data["packages"]
    assert data["version"] == project["version"] == package["version"]
    assert package["registryType"] == "pypi" and package["identifier"] == project["name"]
    assert [arg["value"] for arg in package["packageArguments"]] == ["mcp", "serve"]
    # `uvx astrid-py mcp serve`: the package ships a command of its own name
    assert package["runtimeHint"] == "uvx"
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"][project["name"]]
    assert package["transport"] == {"type": "stdio"}


def test_the_readme_claims_the_registry_name() -> None:
    # The registry finds `mcp-name: NAME` in the PyPI description (the README) before it lists the package.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["readme"] == "README.md"
    assert f"mcp-name: {entry()['name']}" in (REPO / "README.md").read_text(encoding="utf-8")
