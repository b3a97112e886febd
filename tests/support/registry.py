"""A real OCI registry on a free loopback port: `docker-registry serve CONFIG`.

The binary is the CNCF distribution registry (2.8) from Debian's
`docker-registry` package; `make test` installs it. It stores blobs under a
scratch folder of the test and answers plain HTTP on 127.0.0.1 only.

    with registry_server(tmp_path) as registry:
        push(data, f"oci://{registry.address}/notes:1.0")
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import free_port, stop

BINARY = "docker-registry"
MISSING = (
    "docker-registry is missing: `make test` installs it "
    "(the Debian package docker-registry: as root, apt-get update && apt-get install -y docker-registry)"
)


def registry_path() -> str:
    found = shutil.which(BINARY) or (f"/usr/bin/{BINARY}" if Path(f"/usr/bin/{BINARY}").exists() else None)
    if not found:
        pytest.fail(MISSING, pytrace=False)
    return found


@dataclass
class Registry:
    port: int
    storage: Path
    log_path: Path

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT`, the HOST:PORT of an `oci://` reference."""
        return f"127.0.0.1:{self.port}"

    def ref(self, rest: str) -> str:
        """`oci://127.0.0.1:PORT/REST`."""
        return f"oci://{self.address}/{rest}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _htpasswd(users: dict[str, str]) -> str:
    """An htpasswd file (bcrypt, the only kind the registry reads; cost 4: fast) from the C library's crypt(3)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # `crypt` leaves the standard library in 3.13
        import crypt

    return "".join(
        f"{user}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))}\n"
        for user, password in users.items()
    )


def _config(port: int, storage: Path, htpasswd: Path | None) -> str:
    lines = [
        "version: 0.1",
        "log:",
        "  level: warn",
        "  accesslog:",
        "    disabled: true",
        "storage:",
        "  filesystem:",
        f"    rootdirectory: {storage}",
        "  delete:",
        "    enabled: true",
        "http:",
        f"  addr: 127.0.0.1:{port}",
        "  secret: astrid-tests-only",
    ]
    if htpasswd is not None:
        lines += ["auth:", "  htpasswd:", "    realm: astrid-tests", f"    path: {htpasswd}"]
    return "\n".join(lines) + "\n"


def _wait_ready(process: subprocess.Popen, port: int, log_path: Path, timeout_s: float = 15) -> None:
    """Until `GET /v2/` answers (200, or 401 with auth on), bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1):
                return
        except urllib.error.HTTPError as answered:
            if answered.code == 401:
                return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"docker-registry did not answer GET /v2/ within {timeout_s} s:\n{tail}")
        time.sleep(0.05)


@contextmanager
def registry_server(tmp_path: Path, *, users: dict[str, str] | None = None) -> Iterator[Registry]:
    """`docker-registry serve` on 127.0.0.1:<free port>, storing under `tmp_path`, until the block ends.

    `users` (name -> password) turns on htpasswd (HTTP Basic) auth."""
    binary = registry_path()
    port = free_port()
    folder = tmp_path / f"registry-{port}"
    storage = folder / "storage"
    storage.mkdir(parents=True)
    htpasswd = None
    if users:
        htpasswd = folder / "htpasswd"
        htpasswd.write_text(_htpasswd(users))
    config = folder / "config.yml"
    config.write_text(_config(port, storage, htpasswd))
    log_path = folder / "registry.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [binary, "serve", str(config)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        _wait_ready(process, port, log_path)
        yield Registry(port, storage, log_path)
    finally:
        stop(process)


@pytest.fixture(scope="module")
def oci_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """One registry for a test module (tests use their own repository names)."""
    with registry_server(tmp_path_factory.mktemp("oci-registry")) as registry:
        yield registry
