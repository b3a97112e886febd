"""`counted`: the one "N thing(s)" of every banner and list the CLI prints (issue 36: "1 capsules, 1 resources")."""

from __future__ import annotations

from astrid.cli.output import counted


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "capsule") == "1 capsule"
    assert counted(0, "capsule") == "0 capsules"
    assert counted(2, "resource") == "2 resources"
    assert counted(1, "sandbox", "sandboxes") == "1 sandbox"
    assert counted(3, "sandbox", "sandboxes") == "3 sandboxes"


def test_a_metric_is_rounded_with_thousands_separators() -> None:
    assert counted(1.0, "session") == "1 session"
    assert counted(12345.0, "request") == "12,345 requests"
