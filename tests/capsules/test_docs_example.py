"""The "A Python capsule" example of docs/capsules.md, as a reader copies it: built for real and read.

Issue 36 found it using an undefined `NOTES`: a reader's copy built, then
failed on its first read of a note.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from astrid.host.build import build_capsule
from tests.support.paths import REPO
from tests.support.processes import astrid_exe, server_env

pytestmark = pytest.mark.slow

MANIFEST = """[package]
name = "notes"
version = "0.1.0"

[[component]]
id = "notes"
file = "notes.wasm"

[subscribe]
"resource.v1.request.describe" = { wit = "astrid-bus:resource@1.0.0", handler = "describe" }
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0", handler = "read" }

[publish]
"resource.v1.response.describe.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.response.read.*" = { wit = "astrid-bus:resource@1.0.0" }
"""


def example() -> str:
    """The first Python block under the page's "## A Python capsule"."""
    page = (REPO / "docs" / "capsules.md").read_text(encoding="utf-8")
    section = page[page.index("## A Python capsule") :]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "docs/capsules.md: no python block under 'A Python capsule'"
    return found.group(1)


def test_the_python_capsule_example_builds_lists_and_reads(tmp_path: Path, capsule_home: Path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST)
    (folder / "app.py").write_text(example())
    build_capsule(folder)

    def resources(*args: str) -> subprocess.CompletedProcess[str]:
        command = [astrid_exe(), "resources", *args, "--capsules", str(folder), "--principal", "alice"]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=server_env(capsule_home))

    listed = resources("list")
    assert listed.returncode == 0, listed.stderr
    uris = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert sorted(uris) == ["astrid://notes/n/later", "astrid://notes/n/today", "astrid://notes/readme"]
    for uri in uris:  # every listed resource reads
        read = resources("read", uri)
        assert read.returncode == 0, (uri, read.stderr)
        assert read.stdout.strip(), uri
    assert resources("read", "astrid://notes/readme").stdout == "# Hello alice\n"
    unknown = resources("read", "astrid://notes/n/nowhere")
    assert unknown.returncode == 1 and unknown.stderr.startswith("error: not_found:"), unknown.stderr
