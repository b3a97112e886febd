"""The `astrid` command's surface, run as a user runs it."""

from __future__ import annotations

import subprocess

from astrid.host.toolpaths import tool_path


def astrid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool_path("astrid"), *args], capture_output=True, text=True, timeout=60)


def test_version() -> None:
    result = astrid("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("astrid, version ")


def test_help_lists_the_command_groups() -> None:
    result = astrid("--help")
    assert result.returncode == 0
    for group in ("mcp", "capsule", "resources"):
        assert f"  {group} " in result.stdout


def test_unknown_command_is_a_one_line_error_without_traceback() -> None:
    result = astrid("frobnicate")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "frobnicate" in result.stderr
