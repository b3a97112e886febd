"""What `astrid mcp serve` on stdio loads at start: not the NATS bus without `--bus`, not the
signature library without a signed capsule (each costs tens of ms of every start)."""

from __future__ import annotations

import os
import subprocess
import sys

from astrid.host.toolpaths import tool_path


def test_a_stdio_server_without_a_bus_loads_neither_nats_nor_the_signature_library(tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", tool_path("astrid"), "mcp", "serve", "--principal", "alice"],
        input="",  # end of input at once: the server starts, then exits
        capture_output=True,
        text=True,
        env={**os.environ, "ASTRID_CAPSULE_HOME": str(home)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "astrid.host.mcp.server" in imported  # the measure works: the server itself was imported
    assert not {name for name in imported if name.startswith(("astrid.host.bus.nats", "nats", "securesystemslib"))}
