"""The command a running server tells its operator to run for a client entry: `astrid mcp config` with
this server's own options, and `astrid` spelled as this shell can run it.

`make serve` runs `.venv/bin/astrid`, which is not on PATH: a bare `astrid
mcp config` would fail there, or print the entry of another install, and
without the server's `--capsules` the entry would serve the capsule home
alone.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from astrid.cli.config_file import explicit_config_file


def astrid_as_typed() -> str:
    """`astrid` when that is this install on PATH; else the path this one was started by (as typed)."""
    own = Path(sys.executable).parent / ("astrid.exe" if os.name == "nt" else "astrid")
    if not own.is_file():  # started as `python -m astrid.cli.main`
        return shlex.join([sys.executable, "-m", "astrid.cli.main"])
    on_path = shutil.which("astrid")
    if on_path is not None and _same_file(on_path, own):
        return "astrid"
    invoked = sys.argv[0]
    return shlex.quote(invoked if invoked and _same_file(invoked, own) else str(own))


def config_command(capsule_dirs: tuple[Path, ...], principal: str | None, resource_tools: bool) -> str:
    """`astrid [--config FILE] mcp config [--capsules PATH]... [--principal NAME] [--resource-tools]`: the
    entry of a server with these options (the paths as given: the hint is run where the server was)."""
    words = []
    config_file = explicit_config_file()
    if config_file is not None:
        words += ["--config", str(config_file)]
    words += ["mcp", "config"]
    for path in capsule_dirs:
        words += ["--capsules", str(path)]
    if principal is not None:
        words += ["--principal", principal]
    if resource_tools:
        words.append("--resource-tools")
    return f"{astrid_as_typed()} {shlex.join(words)}"


def dev_config_command(folder: Path, principal: str | None) -> str:
    """`astrid mcp config --dev FOLDER [--principal NAME]`: the entry of `astrid capsule dev FOLDER`."""
    words = ["mcp", "config", "--dev", str(folder)]
    if principal is not None:
        words += ["--principal", principal]
    return f"{astrid_as_typed()} {shlex.join(words)}"


def http_config_command(url: str) -> str:
    """`astrid mcp config --http URL`, with `astrid` as this shell can run it."""
    return f"{astrid_as_typed()} {shlex.join(['mcp', 'config', '--http', url])}"


def _same_file(one: str | Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False
