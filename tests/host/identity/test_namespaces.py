"""`[package] namespaces` in Capsule.toml: absolute URI prefixes ending in `/`, checked when the manifest loads."""

from __future__ import annotations

import pytest

from astrid.host.capsule.manifest import MAX_NAMESPACES, namespace_problem, parse_manifest
from astrid.host.errors import ManifestError


def manifest(namespaces: object) -> dict:
    return {
        "package": {"name": "notes", "version": "1.0.0", "namespaces": namespaces},
        "component": [{"id": "notes", "file": "notes.wasm"}],
    }


@pytest.mark.parametrize(
    "namespace",
    ["astrid://notes/", "astrid://notes/private/", "test://a.b-c/x_y~z/", "astrid://n0tes/a:b@c/"],
)
def test_good_namespaces(namespace: str) -> None:
    assert namespace_problem(namespace) is None
    assert parse_manifest(manifest([namespace])).package.namespaces == [namespace]


@pytest.mark.parametrize(
    "namespace",
    [
        "astrid://notes",  # no trailing slash
        "astrid://",  # no host
        "notes/",  # not absolute
        "/notes/",
        "Astrid://notes/",  # uppercase scheme
        "astrid://Notes/",  # uppercase host
        "astrid://notes:8080/",  # port
        "astrid://user@notes/",
        "astrid://notes//",  # empty segment
        "astrid://notes/../",
        "astrid://notes/./",
        "astrid://no..tes/",
        "astrid://notes/%2e%2e/",
        "astrid://notes/a?b/",
        "astrid://notes/a#b/",
        "astrid://notes/a b/",
        "astrid://notes/a\\b/",
        "astrid://" + "n" * 250 + "/",  # too long
    ],
)
def test_bad_namespaces_are_refused_naming_the_rule(namespace: str) -> None:
    assert namespace_problem(namespace)
    with pytest.raises(ManifestError, match=r"package.namespaces: namespace .* (must|longer)"):
        parse_manifest(manifest([namespace]))


def test_no_namespaces_by_default_and_no_duplicates_or_too_many() -> None:
    raw = manifest([])
    del raw["package"]["namespaces"]
    assert parse_manifest(raw).package.namespaces == []
    with pytest.raises(ManifestError, match="lists a namespace twice"):
        parse_manifest(manifest(["astrid://a/", "astrid://a/"]))
    with pytest.raises(ManifestError, match="package.namespaces"):
        parse_manifest(manifest([f"astrid://n{i}/" for i in range(MAX_NAMESPACES + 1)]))
    with pytest.raises(ManifestError, match="package.namespaces"):
        parse_manifest(manifest("astrid://notes/"))  # a string, not a list
