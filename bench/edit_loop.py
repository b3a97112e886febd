"""`make bench`'s edit loop: seconds from saving app.py to its new content served, dev mode against a build.

    python -m bench.edit_loop [DEV_ROUNDS] [BUILD_ROUNDS]   # prints one JSON line

Both sides are what an author does, through a real MCP client over stdio:

- dev: `astrid capsule dev DIR` runs; app.py is saved; the client reads until
  the new text comes back;
- build: `astrid mcp serve --capsules DIR` runs (hot reload on); app.py is
  saved, `astrid capsule build DIR` runs (componentize-py, the compile, the
  manifest check), the server reloads the new build; the client reads until
  the new text comes back.

Every edit writes text no build has seen, so the build cache never answers.
The dev runner is built and compiled before the clock starts (once per astrid
version, as on a user's first `capsule dev`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import MCPError as McpError

URI = "astrid://edit/text"
WAIT_S = 300.0  # a bound, far above a slow build

MANIFEST = """\
[package]
name = "edit"
version = "0.1.0"
description = "make bench: the edit loop"

[[component]]
id = "edit"
file = "edit.wasm"

[subscribe]
"resource.v1.request.describe" = { wit = "astrid-bus:resource@1.0.0", handler = "describe" }
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0", handler = "read" }

[publish]
"resource.v1.response.describe.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.response.read.*" = { wit = "astrid-bus:resource@1.0.0" }
"""

APP = """\
from astrid_sdk import Capsule

capsule = Capsule("edit")


@capsule.resource("astrid://edit/text", name="text", mime_type="text/plain")
def text(ctx):
    return {text!r}


WitWorld = capsule.world()
"""


def astrid_exe() -> str:
    return str(Path(sys.executable).parent / "astrid")


def write_app(folder: Path, text: str) -> None:
    (folder / "app.py").write_text(APP.format(text=text), encoding="utf-8")


def capsule(root: Path) -> tuple[Path, str]:
    """A new capsule folder under `root`, and the text it serves."""
    folder = root / "edit"
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(MANIFEST, encoding="utf-8")
    text = f"start {uuid.uuid4().hex}"
    write_app(folder, text)
    return folder, text


async def served(session: ClientSession, text: str) -> None:
    """Read until the resource's text is `text` (bounded)."""
    with anyio.fail_after(WAIT_S):
        while True:
            try:
                result = await session.read_resource(URI)
                if "".join(getattr(c, "text", "") for c in result.contents) == text:
                    return
            except McpError as exc:  # between two versions: not listed for a moment
                if "not found" not in str(exc).lower():
                    raise
            await anyio.sleep(0.01)


async def rounds_of(args: list[str], folder: Path, first: str, rounds: int, rebuild: bool) -> list[float]:
    """Seconds from each save of app.py (and, with `rebuild`, `astrid capsule build`) to the new text served."""
    params = StdioServerParameters(command=astrid_exe(), args=args, env=dict(os.environ))
    seconds = []
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await served(session, first)  # loaded (the clock starts at the first save)
            for _ in range(rounds):
                text = f"edit {uuid.uuid4().hex}"
                started = time.perf_counter()
                write_app(folder, text)
                if rebuild:
                    await anyio.to_thread.run_sync(build, folder)
                await served(session, text)
                seconds.append(time.perf_counter() - started)
    return seconds


def build(folder: Path) -> None:
    subprocess.run([astrid_exe(), "capsule", "build", str(folder)], check=True, capture_output=True)


def prepare_runner() -> None:
    """The dev runner built and compiled (cached), so the clock measures edits, not the first start."""
    from astrid.host.build.builder import default_build_cache_dir
    from astrid.host.build.dev_runner import dev_runner
    from astrid.host.kernel.compile_cache import CompileCache

    CompileCache().precompile(dev_runner(default_build_cache_dir()))


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_s": ordered[len(ordered) // 2], "min_s": ordered[0], "max_s": ordered[-1], "n": len(ordered)}


def main() -> None:
    dev_rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    build_rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    prepare_runner()
    with tempfile.TemporaryDirectory(prefix="astrid-edit-loop-") as tmp:
        folder, first = capsule(Path(tmp) / "dev")
        args = ["capsule", "dev", str(folder), "--principal", "bench"]
        dev = anyio.run(rounds_of, args, folder, first, dev_rounds, False)
        folder, first = capsule(Path(tmp) / "build")
        build(folder)
        args = ["mcp", "serve", "--capsules", str(folder), "--principal", "bench"]
        full = anyio.run(rounds_of, args, folder, first, build_rounds, True)
    on_dev, on_build = stats(dev), stats(full)
    print(json.dumps({"dev": on_dev, "build": on_build, "ratio": on_build["median_s"] / on_dev["median_s"]}))


if __name__ == "__main__":
    main()
