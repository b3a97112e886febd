"""The one principal-name grammar, shared by `--principal`, the token file and OIDC claims."""

from __future__ import annotations

import pytest

from astrid.host.auth.principal import PRINCIPAL_MAX, principal_problem


@pytest.mark.parametrize("name", ["alice", "a", "alice@example.com", "Ålice Ünicode", "x" * PRINCIPAL_MAX, "a b"])
def test_a_good_name_has_no_problem(name: str) -> None:
    assert principal_problem(name) is None


@pytest.mark.parametrize(
    "name",
    ["", " alice", "alice ", "\talice", "ali\nce", "ali\x00ce", "ali\x1bce", "x" * (PRINCIPAL_MAX + 1), "\u2028"],
)
def test_a_bad_name_is_named_with_the_rule(name: str) -> None:
    assert principal_problem(name) == f"use 1-{PRINCIPAL_MAX} printable characters without surrounding spaces"


@pytest.mark.parametrize("name", [None, 42, b"alice", ["alice"]])
def test_a_name_that_is_not_a_string_is_refused(name: object) -> None:
    problem = principal_problem(name)
    assert problem is not None
    assert type(name).__name__ in problem
