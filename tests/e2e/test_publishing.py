"""Publishing and installing a capsule through the CLI, as an operator does: key, pack, sign, trust, push,
install (by tag, by digest, locked), serve; and every refusal, with nothing installed or loaded.

The registry is a real `docker-registry` on loopback; the capsule is the bundled `docs` capsule
(built once per session), given a namespace, packed and signed here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import astrid_exe
from tests.support.registry import registry_server

pytestmark = pytest.mark.slow

DOCS_NAMESPACE = "astrid://docs/"


@dataclass
class Operator:
    """`astrid` run with this operator's own config dir (keys, trust, grants, lock) and capsule home."""

    config: Path
    home: Path

    def __call__(self, *args: str | Path, ok: bool = True, home: Path | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "ASTRID_CONFIG_DIR": str(self.config), "ASTRID_CAPSULE_HOME": str(home or self.home)}
        command = [astrid_exe(), *map(str, args)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
        if ok:
            assert done.returncode == 0, f"astrid {' '.join(map(str, args))}:\n{done.stderr}"
        return done

    def refused(self, *args: str | Path, home: Path | None = None) -> str:
        """The one error line of a command that must fail (no traceback)."""
        done = self(*args, ok=False, home=home)
        assert done.returncode != 0, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
        return errors[0]


@pytest.fixture
def operator(tmp_path: Path) -> Operator:
    home = tmp_path / "home"
    home.mkdir()
    return Operator(tmp_path / "config", home)


def with_namespaces(built: Path, target: Path, *namespaces: str, name: str | None = None) -> Path:
    """A copy of the built capsule at `built` whose manifest claims `namespaces` (and maybe another name)."""
    shutil.copytree(built, target)
    manifest = target / "Capsule.toml"
    text = manifest.read_text()
    claims = "namespaces = [" + ", ".join(json.dumps(n) for n in namespaces) + "]\n"
    text = text.replace('version = "1.0.0"\n', 'version = "1.0.0"\n' + claims, 1)
    if name is not None:
        text = text.replace('name = "docs"', f'name = "{name}"', 1)
    manifest.write_text(text)
    return target


def publish(operator: Operator, folder: Path, key: str, out: Path) -> tuple[Path, str]:
    """Pack and sign `folder` with the publisher key `key` (made if new); (artifact, public key)."""
    if not (operator.config / "keys" / f"{key}.key").exists():
        operator("key", "new", key)
    public = operator("key", "show", key).stdout.strip()
    operator("capsule", "pack", folder, "-o", out)
    operator("capsule", "sign", out, "--key", key)
    return out, public


@pytest.fixture
def docs_artifact(built_docs, operator: Operator, tmp_path: Path) -> tuple[Path, str]:
    folder = with_namespaces(built_docs.folder, tmp_path / "src" / "docs", DOCS_NAMESPACE)
    return publish(operator, folder, "acme", tmp_path / "docs-1.0.0.capsule")


def test_an_operator_publishes_installs_by_tag_and_by_digest_and_serves(operator, docs_artifact, tmp_path):
    artifact, public = docs_artifact
    operator("trust", "add", public, "--publisher", "acme")
    with registry_server(tmp_path) as registry:
        pushed = operator("capsule", "push", artifact, registry.ref("team/docs:1.0"))
        by_digest = pushed.stdout.strip()
        assert by_digest.startswith(registry.ref("team/docs@sha256:"))

        installed = operator("capsule", "install", registry.ref("team/docs:1.0"), "--yes")
        assert "publisher   acme (key " in installed.stderr and DOCS_NAMESPACE in installed.stderr
        assert (operator.home / "docs" / "identity.json").is_file()

        second_home = tmp_path / "home2"
        second_home.mkdir()
        operator("capsule", "install", by_digest, "--yes", home=second_home)

    for home in (operator.home, second_home):
        read = operator("resources", "read", "astrid://docs/index", "--principal", "alice", home=home)
        assert "astrid" in read.stdout.lower()
        listed = json.loads(operator("resources", "list", "--json", "--principal", "alice", home=home).stdout)
        capsule = next(r["capsule"] for r in listed if r["uri"] == "astrid://docs/index")
        assert capsule["publisher"] == "acme" and capsule["signed"] and capsule["namespaces"] == [DOCS_NAMESPACE]
        assert capsule["digest"].startswith("sha256:")
    shown = operator("capsule", "list", operator.home / "docs").stdout
    assert "publisher: publisher acme (key " in shown and f"namespaces: {DOCS_NAMESPACE}" in shown
    lock = json.loads((operator.config / "capsules.lock").read_text())["capsules"]
    assert [(e["name"], e["publisher"], e["source"].split("@")[0]) for e in lock] == [
        ("docs", "acme", registry.ref("team/docs"))
    ]


def test_a_flipped_byte_is_refused_and_nothing_is_installed(operator, docs_artifact, tmp_path):
    artifact, public = docs_artifact
    operator("trust", "add", public, "--publisher", "acme")
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the component
    flipped = tmp_path / "flipped.capsule"
    flipped.write_bytes(bytes(data))
    line = operator.refused("capsule", "install", flipped, "--yes")
    assert "flipped.capsule" in line
    assert list(operator.home.iterdir()) == []


def test_an_artifact_signed_by_an_untrusted_key_is_refused(operator, docs_artifact):
    artifact, _ = docs_artifact  # signed, but `trust add` never ran
    line = operator.refused("capsule", "install", artifact, "--yes")
    assert "astrid trust add" in line
    assert list(operator.home.iterdir()) == []


def test_a_second_publisher_cannot_claim_the_first_ones_namespace_nor_a_uri_inside_it(
    operator, docs_artifact, built_docs, tmp_path
):
    artifact, acme = docs_artifact
    operator("trust", "add", acme, "--publisher", "acme")
    operator("capsule", "install", artifact, "--yes")
    for index, namespace in enumerate((DOCS_NAMESPACE, DOCS_NAMESPACE + "pages/")):
        folder = with_namespaces(built_docs.folder, tmp_path / f"rival{index}" / "docs", namespace, name="rival")
        rival, public = publish(operator, folder, "mallory", tmp_path / f"rival{index}.capsule")
        if index == 0:
            operator("trust", "add", public, "--publisher", "mallory")
        line = operator.refused("capsule", "install", rival, "--yes")
        assert "acme" in line and DOCS_NAMESPACE in line
    assert sorted(p.name for p in operator.home.iterdir()) == ["docs"]


def test_at_load_a_folder_claiming_a_trusted_publishers_namespace_is_refused(
    operator, docs_artifact, built_docs, tmp_path
):
    artifact, acme = docs_artifact
    operator("trust", "add", acme, "--publisher", "acme")
    operator("capsule", "install", artifact, "--yes")
    # an unsigned local folder that claims the namespace, dropped beside it
    with_namespaces(built_docs.folder, operator.home / "squatter", DOCS_NAMESPACE, name="squatter")
    shown = operator("capsule", "list", operator.home, ok=False)
    assert shown.returncode == 1
    squatter = shown.stdout.split("squatter 1.0.0")[1]
    assert "does not load" in squatter and "acme" in squatter and DOCS_NAMESPACE in squatter
    # and the installed capsule still serves
    read = operator("resources", "read", "astrid://docs/index", "--principal", "alice")
    assert "astrid" in read.stdout.lower()


def test_an_unsigned_folder_serves_no_uri_inside_an_owned_namespace(operator, docs_artifact, built_docs, tmp_path):
    artifact, acme = docs_artifact
    operator("trust", "add", acme, "--publisher", "acme")
    operator("capsule", "install", artifact, "--yes")
    operator("capsule", "remove", "docs")
    # the namespace stays acme's: the same docs capsule, unsigned and claiming nothing, lists none of it
    shutil.copytree(built_docs.folder, operator.home / "docs")
    listed = json.loads(operator("resources", "list", "--json", "--principal", "alice").stdout)
    assert not [r for r in listed if r["uri"].startswith(DOCS_NAMESPACE)]
    read = operator("resources", "read", "astrid://docs/index", "--principal", "alice", ok=False)
    assert read.returncode != 0


def test_install_locked_installs_the_locked_bytes_after_the_tag_moved(operator, docs_artifact, built_docs, tmp_path):
    artifact, public = docs_artifact
    operator("trust", "add", public, "--publisher", "acme")
    with registry_server(tmp_path) as registry:
        tag = registry.ref("team/docs:stable")
        operator("capsule", "push", artifact, tag)
        operator("capsule", "install", tag, "--yes")
        locked = json.loads((operator.config / "capsules.lock").read_text())["capsules"][0]

        # the tag moves to other bytes (a version 2 by the same publisher)
        newer = with_namespaces(built_docs.folder, tmp_path / "v2" / "docs", DOCS_NAMESPACE)
        manifest = newer / "Capsule.toml"
        manifest.write_text(manifest.read_text().replace('version = "1.0.0"', 'version = "2.0.0"', 1))
        v2, _ = publish(operator, newer, "acme", tmp_path / "docs-2.0.0.capsule")
        operator("capsule", "push", v2, tag)

        fresh = tmp_path / "fresh"
        fresh.mkdir()
        operator("capsule", "install", "--locked", "--yes", home=fresh)
        installed = (fresh / "docs" / "Capsule.toml").read_text()
        assert 'version = "1.0.0"' in installed
        assert json.loads((operator.config / "capsules.lock").read_text())["capsules"][0] == locked

    # a file source whose bytes changed is refused, never installed
    moved = tmp_path / "moved.capsule"
    shutil.copy(artifact, moved)
    operator("capsule", "install", moved, "--yes", home=tmp_path / "third")
    shutil.copy(v2, moved)
    line = operator.refused("capsule", "install", "--locked", "--yes", home=tmp_path / "fourth")
    assert "other bytes" in line
    assert not (tmp_path / "fourth" / "docs").exists()


def test_install_asks_before_it_writes_and_never_without_a_terminal(operator, docs_artifact):
    artifact, public = docs_artifact
    operator("trust", "add", public, "--publisher", "acme")
    line = operator.refused("capsule", "install", artifact)
    assert "--yes" in line
    assert list(operator.home.iterdir()) == []
