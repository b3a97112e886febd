"""What `astrid mcp serve` on stdio tells its operator (issue 36, item 6), on the real `files` capsule:

- counts read as English: "1 capsule (files), 1 resource";
- the hint is the exact `astrid mcp config` command for this server (its
  `--capsules` and `--principal`), with `astrid` spelled as this shell can
  run it, and pasted it prints that server's entry;
- a stdin that ends before any request (`make serve </dev/null`) is said on
  stderr, with status 0; a client that spoke gets no such line.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR
from tests.support.capsules import Built, build_clean
from tests.support.processes import astrid_exe, server_env

pytestmark = pytest.mark.slow
STDIN_ENDED = "stdin ended before any request"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_clean(CAPSULES_DIR / "files", tmp_path_factory.mktemp("files") / "files")


@pytest.fixture
def granted_env(tmp_path: Path, files: Built, capsule_home: Path) -> dict[str, str]:
    """The files capsule granted a folder holding one file; PATH without this astrid's folder."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("# Today\n")
    bin_dir = str(Path(astrid_exe()).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != bin_dir)
    env = server_env(capsule_home, ASTRID_CONFIG_DIR=str(tmp_path / "config"), PATH=path)
    grant = [astrid_exe(), "capsule", "grant", "files", f"fs:files={notes}", "--capsules", str(files.folder)]
    subprocess.run(grant, capture_output=True, text=True, timeout=60, env=env, check=True)
    return env


def serve(folder: Path, env: dict[str, str], log: Path, lines: tuple[dict, ...] = ()) -> tuple[int, str, str]:
    """`astrid mcp serve --capsules FOLDER --principal alice`: send `lines`, wait for its banner's last
    line, then end its stdin; (status, stdout, stderr)."""
    command = [astrid_exe(), "mcp", "serve", "--capsules", str(folder), "--principal", "alice"]
    with log.open("w") as errors:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env)
        assert process.stdin is not None and process.stdout is not None
        for line in lines:
            process.stdin.write(json.dumps(line).encode() + b"\n")
        process.stdin.flush()
        deadline = time.monotonic() + 120
        while "connect a client" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        process.stdin.close()
        out = process.stdout.read().decode()
        status = process.wait(60)
    return status, out, log.read_text()


def hinted(log: str) -> str:
    found = re.search(r"connect a client: `([^`]+)` prints a Claude Desktop entry for this server", log)
    assert found, log
    return found.group(1)


def test_the_banner_counts_in_english_and_hints_the_command_for_this_server(
    files: Built, granted_env: dict[str, str], tmp_path: Path
):
    status, _, log = serve(files.folder, granted_env, tmp_path / "server.log")
    assert status == 0, log
    assert re.search(r"ready in [0-9.]+ s: 1 capsule \(files\), 1 resource for principal 'alice'", log), log
    command = hinted(log)
    assert command == f"{astrid_exe()} mcp config --capsules {files.folder} --principal alice"
    # Pasted as it is, it prints the entry of this very server.
    pasted = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60, env=granted_env)
    assert pasted.returncode == 0, pasted.stderr
    entry = json.loads(pasted.stdout)["mcpServers"]["astrid-files"]
    assert entry["args"][-4:] == ["--capsules", str(files.folder.resolve()), "--principal", "alice"]
    # Nothing was read on its stdin: it says so, once, and still ends with status 0.
    said = [line for line in log.splitlines() if STDIN_ENDED in line]
    assert len(said) == 1 and f"`{command}`" in said[0], log


def test_a_client_that_spoke_gets_no_stdin_line_and_astrid_on_path_is_astrid(
    files: Built, granted_env: dict[str, str], tmp_path: Path
):
    bin_dir = str(Path(astrid_exe()).parent)
    env = {**granted_env, "PATH": bin_dir + os.pathsep + granted_env["PATH"]}
    status, out, log = serve(files.folder, env, tmp_path / "server.log", lines=(INITIALIZE,))
    assert status == 0, log
    assert json.loads(out.splitlines()[0])["result"]["serverInfo"]["name"] == "astrid"
    assert hinted(log).startswith("astrid mcp config --capsules ")
    assert STDIN_ENDED not in log
