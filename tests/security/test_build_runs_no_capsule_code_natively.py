"""Building or listing someone else's capsule folder runs none of its code outside WebAssembly.

The capsule below tries, at import time, to leave traces on the machine: it
writes a file at an absolute host path and connects to a Unix socket the test
listens on. Import time is build time, and componentize-py runs it inside its
own WebAssembly runtime (no such path, no such socket there). What the build
and `astrid capsule list -v` learn of the code for the manifest check they ask
the built component, in the kernel's sandbox. If either ever imported app.py
on the host's Python again (as the check once did), the file would appear and
the socket would be connected.

componentize-py's runtime does mount the folders it imports from, writable:
the build gives it copies (one test plants files there). And the host's own
Python helpers the build and the loader start (pip, the compile worker) must
not find modules in the capsule folder they run in: a `pip.py` or an
`astrid/` there would run instead, natively.

The witness paths are fixed per work tree (under the test cache), so app.py's
bytes, and with them the compiled component, are the same on every run.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from astrid.capsules import SDK_DIR
from tests.support.processes import astrid_exe, run_astrid

SNEAKY = '''"""Tries, at import, to leave traces on the machine that builds it: a file and a socket connection."""

from astrid_sdk import Capsule

TRIED = []
try:
    with open({marker!r}, "w") as marker:
        marker.write("app.py ran outside WebAssembly")
    TRIED.append("wrote")
except Exception as exc:
    TRIED.append("write: " + type(exc).__name__)
try:
    import socket

    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect({sock!r})
    TRIED.append("connected")
except Exception as exc:
    TRIED.append("socket: " + type(exc).__name__)

capsule = Capsule("sneaky")


@capsule.resource("astrid://sneaky/tried", name="tried", mime_type="text/plain")
def tried(ctx):
    return ", ".join(TRIED)


# The entry point componentize-py exports; keep this line last.
WitWorld = capsule.world()
'''

LOUD = '''"""Plants files in the folders componentize-py mounts, then writes at a host path, letting the error out."""

from astrid_sdk import Capsule

for mounted in ("/0", "/1"):  # the capsule folder and the SDK, as componentize-py shows them to the guest
    try:
        with open(mounted + "/{planted}", "w") as planted:
            planted.write("planted while the component was built")
    except OSError:
        pass

with open({marker!r}, "w") as marker:
    marker.write("app.py ran outside WebAssembly")

capsule = Capsule("loud")


@capsule.resource("astrid://loud/hello", name="hello", mime_type="text/plain")
def hello(ctx):
    return "hello"


# The entry point componentize-py exports; keep this line last.
WitWorld = capsule.world()
'''


def witness_dir() -> Path:
    """Where the capsules try to write and connect: fixed per work tree, outside every capsule folder."""
    path = Path(os.environ["ASTRID_BUILD_CACHE_DIR"]).resolve().parent / "native-witness"
    path.mkdir(parents=True, exist_ok=True)
    return path


MARKER = "marker"
LOUD_MARKER = "marker-loud"
SOCKET = "s"
PLANTED = "planted-at-build"
SHADOW_MARKER = "marker-shadow"
SHADOW = """# Runs only if the host's Python imports it from the capsule folder.
open({marker!r}, "w").write("ran natively")
"""


@contextmanager
def listening(path: Path) -> Iterator[socket.socket]:
    path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        server.listen(8)
        server.setblocking(False)
        yield server
    finally:
        server.close()
        path.unlink(missing_ok=True)


def connections(server: socket.socket) -> int:
    """How many connections wait on `server` (each accepted and closed)."""
    count = 0
    while True:
        try:
            connection, _ = server.accept()
        except BlockingIOError:
            return count
        connection.close()
        count += 1


def capsule_folder(parent: Path, name: str, app: str | None = None) -> Path:
    """`astrid capsule new NAME` in `parent`, with `app` as its app.py (None: the scaffold's)."""
    created = run_astrid("capsule", "new", name, "--dir", str(parent), cwd=parent)
    assert created.returncode == 0, created.stderr
    folder = parent / name
    if app is not None:
        (folder / "app.py").write_text(app)
    return folder


@dataclass
class Built:
    folder: Path
    build: subprocess.CompletedProcess[str]
    wrote: bool
    connections: int


@pytest.fixture(scope="module")
def sneaky(tmp_path_factory: pytest.TempPathFactory) -> Built:
    witness = witness_dir()
    marker, sock = witness / MARKER, witness / SOCKET
    if len(str(sock)) > 100:
        pytest.skip(f"{sock} is too long a path for a Unix socket")
    marker.unlink(missing_ok=True)
    app = SNEAKY.format(marker=str(marker), sock=str(sock))
    folder = capsule_folder(tmp_path_factory.mktemp("sneaky"), "sneaky", app)
    # A build cache of its own: the build is never a cache hit (which would skip whatever runs before or
    # during componentize-py), while the compile cache is shared (the same bytes, compiled once).
    env = {**os.environ, "ASTRID_BUILD_CACHE_DIR": str(folder.parent / "build-cache")}
    with listening(sock) as server:
        build = subprocess.run(
            [astrid_exe(), "capsule", "build", str(folder)],
            cwd=folder.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        built = Built(folder, build, marker.exists(), connections(server))
    marker.unlink(missing_ok=True)
    return built


def test_building_runs_none_of_the_capsule_on_the_host(sneaky: Built):
    assert not sneaky.wrote, "astrid capsule build ran app.py outside WebAssembly: it wrote a file on the host"
    assert sneaky.connections == 0, "astrid capsule build ran app.py outside WebAssembly: it opened a socket"
    assert sneaky.build.returncode == 0, sneaky.build.stderr
    assert "warning" not in sneaky.build.stderr  # the manifest was checked, against the built component
    # Inside WebAssembly both attempts failed, and the capsule served what it saw.
    read = run_astrid("resources", "read", "astrid://sneaky/tried", "--capsules", str(sneaky.folder), cwd=sneaky.folder)
    assert read.returncode == 0, read.stderr
    assert "write: " in read.stdout and "socket: " in read.stdout, read.stdout
    assert "wrote" not in read.stdout and "connected" not in read.stdout


def test_listing_runs_none_of_the_capsule_on_the_host(sneaky: Built):
    witness = witness_dir()
    marker = witness / MARKER
    marker.unlink(missing_ok=True)
    with listening(witness / SOCKET) as server:
        listed = run_astrid("capsule", "list", "-v", str(sneaky.folder), cwd=sneaky.folder.parent)
        assert not marker.exists(), "astrid capsule list -v ran app.py outside WebAssembly: it wrote a file"
        assert connections(server) == 0, "astrid capsule list -v ran app.py outside WebAssembly: it opened a socket"
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "  status: loads" in listed.stdout
    assert "warning" not in listed.stdout  # checked (in the sandbox), and it matches


def test_a_top_level_that_fails_in_webassembly_fails_the_build_in_one_line(tmp_path: Path):
    """And what the build's own sandbox lets the code write lands in copies: not in the folder, not in the SDK."""
    marker = witness_dir() / LOUD_MARKER
    marker.unlink(missing_ok=True)
    app = LOUD.format(marker=str(marker), planted=PLANTED)
    folder = capsule_folder(tmp_path, "loud", app)
    line = app.splitlines().index(f'with open({str(marker)!r}, "w") as marker:') + 1
    try:
        build = run_astrid("capsule", "build", "loud", cwd=tmp_path)
        assert not marker.exists(), "astrid capsule build ran app.py outside WebAssembly: it wrote a file on the host"
        assert not (SDK_DIR / PLANTED).exists(), "the build let app.py write into the SDK every build uses"
    finally:
        (SDK_DIR / PLANTED).unlink(missing_ok=True)
    assert build.returncode == 1, build.stdout + build.stderr
    errors = [text for text in build.stderr.splitlines() if text.startswith("error:")]
    expected = (
        f"error: loud/app.py:{line}: SandboxError: open({str(marker)!r}): a capsule has no file system: "
        "read files with ctx.fs, after the operator grants fs to the capsule"
    )
    assert errors == [expected], build.stderr
    assert not (folder / PLANTED).exists(), "the build let app.py write into the capsule folder"
    assert not (folder / "__pycache__").exists()
    assert not (folder / "loud.wasm").exists()


def test_a_pip_in_the_capsule_folder_is_not_the_pip_the_build_runs(tmp_path: Path):
    """pip installs requirements.txt with the capsule folder as its working directory: that is not its module path."""
    marker = witness_dir() / SHADOW_MARKER
    marker.unlink(missing_ok=True)
    folder = capsule_folder(tmp_path, "shady")
    (folder / "pip.py").write_text(SHADOW.format(marker=str(marker)))
    (folder / "requirements.txt").write_text("--no-index\nnot-on-any-index==1.0\n")
    env = {**os.environ, "ASTRID_BUILD_CACHE_DIR": str(tmp_path / "build-cache")}  # no site from an earlier run
    build = subprocess.run(
        [astrid_exe(), "capsule", "build", "shady"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert not marker.exists(), "astrid capsule build ran the capsule's pip.py instead of pip, natively"
    assert build.returncode == 1 and "not-on-any-index==1.0" in build.stderr, build.stderr


def test_listing_from_inside_a_capsule_folder_runs_none_of_it(sneaky: Built, tmp_path: Path):
    """The compile worker starts with the working directory (here the capsule folder) off its module path."""
    marker = witness_dir() / SHADOW_MARKER
    marker.unlink(missing_ok=True)
    inside = tmp_path / "inside"
    inside.mkdir()
    for name in ("Capsule.toml", "sneaky.wasm"):
        (inside / name).write_bytes((sneaky.folder / name).read_bytes())
    (inside / "astrid").mkdir()
    (inside / "astrid" / "__init__.py").write_text(SHADOW.format(marker=str(marker)))
    env = {**os.environ, "ASTRID_CACHE_DIR": str(tmp_path / "empty-compile-cache")}  # so it compiles, in a worker
    listed = subprocess.run(
        [astrid_exe(), "capsule", "list", "."], cwd=inside, env=env, capture_output=True, text=True, timeout=300
    )
    assert not marker.exists(), "astrid capsule list ran the capsule folder's astrid/ package, natively"
    assert listed.returncode == 0 and "  status: loads" in listed.stdout, listed.stdout + listed.stderr
    assert list((tmp_path / "empty-compile-cache").glob("*.cwasm")), "the component was compiled (by the worker)"
