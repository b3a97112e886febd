"""Claude Desktop bundles (`astrid mcp bundle`) made, checked and started as Claude Desktop starts them.

The MCP Bundle CLI and library (`@anthropic-ai/mcpb`, pinned in
tests/e2e/mcpb, installed by `make test`) validate and unpack a bundle, and
make its server entry (`mcp_config.mjs`: the library's own
`getMcpConfigForManifest`, which substitutes `${__dirname}` and
`${user_config.*}`). The one liberty taken: the entry runs
`uv run --directory DIR server/main.py ...`, for which Claude Desktop's uv
would install Python and the pinned dependencies from PyPI; the tests run
`server/main.py` with this project's interpreter instead (the same pins,
installed by `make`), in DIR, as uv does. Offline and fast.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment

from tests.support.paths import REPO
from tests.support.processes import astrid_exe

MCPB_DIR = REPO / "tests" / "e2e" / "mcpb"
MCPB_CLI = MCPB_DIR / "node_modules" / "@anthropic-ai" / "mcpb" / "dist" / "cli" / "cli.js"


def _node(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert MCPB_CLI.is_file(), "the MCP Bundle CLI is not installed: run `make test` (npm ci in tests/e2e/mcpb)"
    return subprocess.run(["node", *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=MCPB_DIR)


def mcpb(*args: str | Path) -> str:
    """`mcpb ARGS...`, which must succeed; its output."""
    done = _node(MCPB_CLI, *args)
    assert done.returncode == 0, f"mcpb {' '.join(map(str, args))}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def make_bundle(*sources: str | Path, out: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`astrid mcp bundle SOURCES... -o OUT`, run as a user runs it."""
    return subprocess.run(
        [astrid_exe(), "mcp", "bundle", *map(str, sources), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def unpack(bundle: Path, into: Path) -> Path:
    """The bundle unpacked by `mcpb unpack`, as Claude Desktop unpacks an installed extension."""
    mcpb("unpack", bundle, into)
    return into


def desktop_entry(extension: Path, user_config: dict) -> dict:
    """The {command, args, env} Claude Desktop runs for the extension at `extension` with these settings."""
    done = _node(MCPB_DIR / "mcp_config.mjs", extension, json.dumps(user_config))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def local_command(entry: dict) -> tuple[str, list[str], Path]:
    """The entry's `uv run --directory DIR ENTRY ARGS...` as this project's Python running DIR/ENTRY in DIR."""
    command, args = entry["command"], entry["args"]
    assert command == "uv" and args[:2] == ["run", "--directory"], entry
    folder, script, rest = Path(args[2]), args[3], args[4:]
    return sys.executable, [str(folder / script), *rest], folder


def server_env(**places: Path) -> dict[str, str]:
    """What Claude Desktop's SDK hands a server (a minimal environment), plus astrid's places (`ASTRID_...`)."""
    env = get_default_environment()
    env["ASTRID_CACHE_DIR"] = os.environ["ASTRID_CACHE_DIR"]  # the tests' shared compiled-component cache
    env.update({name: str(path) for name, path in places.items()})
    return env


@asynccontextmanager
async def desktop_session(entry: dict, env: dict[str, str], stderr: Path) -> AsyncIterator[ClientSession]:
    """A real MCP client (the Python SDK's ClientSession) on the server the entry starts, over stdio."""
    command, args, cwd = local_command(entry)
    params = StdioServerParameters(command=command, args=args, env={**env, **entry.get("env", {})}, cwd=cwd)
    with stderr.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(60):
                init = await session.initialize()
            assert init.server_info.name == "astrid"
            yield session


def start_fails(entry: dict, env: dict[str, str]) -> str:
    """The server the entry starts, which must refuse to start: its one error line (no traceback)."""
    command, args, cwd = local_command(entry)
    done = subprocess.run(
        [command, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd, stdin=subprocess.DEVNULL
    )
    assert done.returncode != 0, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    return errors[0]


def _operator(config: Path):
    """`astrid ARGS...` with `config` as its config dir (keys, trust), which must succeed."""

    def run(*args: str | Path) -> subprocess.CompletedProcess:
        env = {**os.environ, "ASTRID_CONFIG_DIR": str(config)}
        done = subprocess.run(
            [astrid_exe(), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, f"astrid {' '.join(map(str, args))}:\n{done.stderr}"
        return done

    return run


def signed_files(built: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The files capsule claiming astrid://files/, packed and signed by publisher acme: (the artifact, the
    publisher's own config dir, whose trust store trusts acme)."""
    source = tmp_path / "src" / "files"
    shutil.copytree(built, source)
    manifest = source / "Capsule.toml"
    manifest.write_text(
        manifest.read_text().replace('version = "1.0.0"\n', 'version = "1.0.0"\nnamespaces = ["astrid://files/"]\n')
    )
    config = tmp_path / "publisher-config"
    astrid = _operator(config)
    astrid("key", "new", "acme")
    public = astrid("key", "show", "acme").stdout.strip()
    artifact = tmp_path / "files-1.0.0.capsule"
    astrid("capsule", "pack", source, "-o", artifact)
    astrid("capsule", "sign", artifact, "--key", "acme")
    astrid("trust", "add", public, "--publisher", "acme")
    return artifact, config
