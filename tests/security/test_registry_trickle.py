"""A registry that stalls cannot hold `astrid capsule install oci://…` (issue 34, item 6).

The per-request timeouts bound each wait for a byte, not a pull: a registry
sending one byte a second, or accepting the connection and never answering,
kept the install running for hours (or, silent, two minutes). Each attack
here is a real loopback server speaking the OCI distribution API
(`tests/support/slow_registry.py`) that stalls at one point of the pull:

- the blob's body, one byte a second, after normal headers;
- the manifest's headers, one byte a second, never finished;
- the whole connection: accepted, never answered.

`astrid capsule install … --yes` runs as a real process with its deadline set
small (`ASTRID_OCI_DEADLINE`); it must exit within the deadline and some slack,
with one error line that names the reference, what was slow, the limit and
the variable to change it, and install nothing. The control: the same server,
not stalling, installs a real signed capsule.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.capsules import Built
from tests.support.processes import astrid_exe
from tests.support.slow_registry import REPOSITORY, TAG, SlowRegistry

pytestmark = pytest.mark.slow

DEADLINE_S = 2
# what the process may take beyond its deadline: its start (imports) on a loaded CI machine, the
# watchdog's look (at most a second), the error line; the stalls above run for hours without a deadline
SLACK_S = 30
STALLED_BLOB_BYTES = 4096  # the manifest declares this much: 0.5 s more at the minimum rate


@dataclass
class Operator:
    config: Path  # keys, trust store, lock file
    home: Path  # the capsule home

    def env(self, **extra: str) -> dict[str, str]:
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("ASTRID_OCI_", "OTEL_"))}
        return {
            **inherited,
            "ASTRID_CONFIG_DIR": str(self.config),
            "ASTRID_CAPSULE_HOME": str(self.home),
            "HOME": str(self.config.parent),  # no ~/.docker/config.json of the developer's
            **extra,
        }

    def run(self, *args: str | Path, timeout_s: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [astrid_exe(), *map(str, args)],
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )

    def ok(self, *args: str | Path) -> str:
        """The stdout of a command that must succeed."""
        done = self.run(*args)
        assert done.returncode == 0, f"astrid {' '.join(map(str, args))}:\n{done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def signed_artifact(built_docs: Built, tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Path]:
    """The bundled docs capsule packed and signed by `acme`, and a config dir that trusts acme."""
    root = tmp_path_factory.mktemp("publisher")
    operator = Operator(root / "config", root / "unused-home")
    artifact = root / "docs-1.0.0.capsule"
    operator.ok("key", "new", "acme")
    operator.ok("capsule", "pack", built_docs.folder, "-o", artifact)
    operator.ok("capsule", "sign", artifact, "--key", "acme")
    operator.ok("trust", "add", operator.ok("key", "show", "acme").strip(), "--publisher", "acme")
    return artifact.read_bytes(), operator.config


@pytest.fixture
def operator(signed_artifact: tuple[bytes, Path], tmp_path: Path) -> Operator:
    """A fresh capsule home, and a copy of the config dir that trusts acme (modes kept: it is owner-only)."""
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "config"
    shutil.copytree(signed_artifact[1], config)
    return Operator(config, home)


def test_the_same_registry_not_stalling_installs_the_signed_capsule(signed_artifact, operator: Operator) -> None:
    artifact, _ = signed_artifact
    with SlowRegistry(artifact) as registry:
        done = operator.run("capsule", "install", registry.ref(), "--yes", ASTRID_OCI_DEADLINE=str(DEADLINE_S * 30))
    assert done.returncode == 0, done.stderr
    assert (operator.home / "docs" / "identity.json").is_file()
    layer = json.loads(registry.manifest)["layers"][0]["digest"]
    assert registry.requests == [
        "GET /v2/",
        f"GET /v2/{REPOSITORY}/manifests/{TAG}",
        f"GET /v2/{REPOSITORY}/blobs/{layer}",
    ]


@pytest.mark.parametrize(
    ("stall", "what_was_slow"),
    [
        ("blob-body", "receiving the body of GET /v2/notes/blobs/sha256:"),
        ("manifest-headers", "waiting for the answer to GET /v2/notes/manifests/1.0"),
        ("silent", "waiting for the answer to GET /v2/"),
    ],
)
def test_a_stalling_registry_fails_the_install_at_its_deadline(
    signed_artifact, operator: Operator, stall: str, what_was_slow: str
) -> None:
    stalled_blob = signed_artifact[0][:STALLED_BLOB_BYTES]
    with SlowRegistry(stalled_blob, stall) as registry:
        ref = registry.ref()
        started = time.monotonic()
        process = subprocess.Popen(
            [astrid_exe(), "capsule", "install", ref, "--yes"],
            env=operator.env(ASTRID_OCI_DEADLINE=str(DEADLINE_S)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=DEADLINE_S + SLACK_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            pytest.fail(f"the install still ran {DEADLINE_S + SLACK_S} s into a pull stalled at {stall!r}: no deadline")
        took = time.monotonic() - started

    assert process.returncode == 1, stderr
    assert took >= DEADLINE_S, f"it failed after {took:.1f} s, before its deadline: not the deadline's doing"
    assert "Traceback" not in stderr and stdout == ""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    line = errors[0]
    assert line.startswith(f"error: {ref}: the pull did not finish within its deadline of {DEADLINE_S} s"), line
    assert what_was_slow in line and "allow more with ASTRID_OCI_DEADLINE=SECONDS" in line, line
    if stall == "blob-body":
        assert f"+ 0.5 s for {STALLED_BLOB_BYTES} bytes at 8192 bytes/s" in line, line  # its declared size
    assert list(operator.home.iterdir()) == [], "something was installed"
    assert not (operator.config / "capsules.lock").exists()
