"""A short soak: `python -m soak` with 2 MCP clients for ~8 s, bundled plus hostile capsules."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.security.hostile import make_hostile
from tests.support.paths import REPO
from tests.support.processes import server_env

pytestmark = pytest.mark.slow

SECONDS = 8
MAX_RSS_GROWTH = 64 << 20


def test_a_short_soak_answers_everything_without_crashes_or_leaks(bundled, hostile_wasm, tmp_path):
    hostile = tmp_path / "hostile"
    make_hostile(hostile, "memory", "memory", hostile_wasm)  # would list the other principal if state leaked
    make_hostile(hostile, "flood", "flood", hostile_wasm)
    make_hostile(hostile, "bad", "malformed", hostile_wasm)
    make_hostile(hostile, "trap", "trap", hostile_wasm)
    home = tmp_path / "home"
    home.mkdir()
    args = [sys.executable, "-m", "soak", "--clients", "2", "--seconds", str(SECONDS), "--json"]
    for folder in (*bundled, hostile):
        args += ["--capsules", str(folder)]
    result = subprocess.run(args, cwd=REPO, env=server_env(home), capture_output=True, text=True, timeout=SECONDS + 120)
    assert result.returncode == 0, result.stderr
    line, raw = result.stdout.strip().splitlines()[-2:]
    print("\n" + line)
    figures = json.loads(raw)
    assert figures["crashes"] == 0, result.stderr
    assert figures["leaks"] == []
    assert figures["unanswered"] == 0
    assert figures["requests"] > 20 and figures["answered"] == figures["requests"]
    assert figures["rss_end"] - figures["rss_start"] < MAX_RSS_GROWTH, line
    # errors are answers too: only "not found" (-32002) and "failed / over a limit" (-32603)
    assert set(figures["errors"]) <= {"-32002", "-32603"}, figures["errors"]
