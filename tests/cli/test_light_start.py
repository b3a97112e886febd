"""What `astrid mcp serve` on stdio loads at start: not the NATS bus without `--bus`, not the
signature library without a signed capsule (each costs tens of ms of every start), nor the other
commands' modules, the key and signature code, SQLite (kv) or the file capability; and it runs no
cycle collection until it serves (`cli/start_up.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from astrid.host.toolpaths import tool_path


def stdio_start(tmp_path, *python_args: str) -> subprocess.CompletedProcess[str]:
    """`python ARGS` that runs `astrid mcp serve` on an empty capsule home, its input ended at once
    (the server starts, then exits); it must exit 0."""
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, *python_args],
        input="",
        capture_output=True,
        text=True,
        env={**os.environ, "ASTRID_CAPSULE_HOME": str(home)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def imported_at_start(tmp_path) -> set[str]:
    """Every module a real stdio start imports (`-X importtime`)."""
    done = stdio_start(tmp_path, "-X", "importtime", tool_path("astrid"), "mcp", "serve", "--principal", "alice")
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def test_a_stdio_server_without_a_bus_loads_neither_nats_nor_the_signature_library(tmp_path) -> None:
    imported = imported_at_start(tmp_path)
    assert "astrid.host.mcp.server" in imported  # the measure works: the server itself was imported
    assert not {name for name in imported if name.startswith(("astrid.host.bus.nats", "nats", "securesystemslib"))}


# Imported only when used; each costs a little of every start (`-X importtime` on a real start).
LAZY = {
    # commands other than `mcp` (cli/main.py imports a command's module when it is looked up)
    "astrid.cli.artifact_cmd",
    "astrid.cli.capsule_cmd",
    "astrid.cli.grant_cmd",
    "astrid.cli.host_cmd",
    "astrid.cli.install_cmd",
    "astrid.cli.key_cmd",
    "astrid.cli.oci_cmd",
    "astrid.cli.resources_cmd",
    "astrid.cli.status_cmd",
    "astrid.cli.trust_cmd",
    # signatures and keys: only an installed (signed) capsule or a trusted key needs them
    "astrid.host.identity.signing",
    "astrid.host.identity.artifact",
    "cryptography.hazmat.primitives.asymmetric.ed25519",
    "cryptography.hazmat.primitives.serialization",
    # capabilities: only a capsule that uses them
    "astrid.host.capabilities.kv",
    "sqlite3",
    "astrid.host.capabilities.fs",
    # a mistake in astrid.toml
    "difflib",
}


def test_a_stdio_start_loads_no_module_it_does_not_use(tmp_path) -> None:
    imported = imported_at_start(tmp_path)
    assert "astrid.cli.mcp_cmd" in imported  # the measure works: the command's module was imported
    assert sorted(LAZY & imported) == []


# Runs `astrid mcp serve` in a process of its own, watching `start_up.serving` (mcp_cmd imports it
# when the command is looked up, after this patch): how the collector stood when the start-up ended.
QUIET_START_PROBE = """
import gc, json, sys
from astrid.cli import start_up
from astrid.cli.main import main

seen = {}
original = start_up.serving


def serving():
    seen["collector_on_during_start_up"] = gc.isenabled()
    original()
    seen["frozen"] = gc.get_freeze_count()
    seen["collector_on_when_serving"] = gc.isenabled()


start_up.serving = serving
try:
    main(["mcp", "serve", "--principal", "alice"])
except SystemExit:
    pass
print(json.dumps(seen))
"""


def test_a_stdio_start_runs_no_cycle_collection_and_serves_with_what_it_made_frozen(tmp_path) -> None:
    done = stdio_start(tmp_path, "-c", QUIET_START_PROBE)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["collector_on_during_start_up"] is False
    assert seen["collector_on_when_serving"] is True
    assert seen["frozen"] > 10_000  # the SDK's and the host's objects: never scanned again
