"""`pack_capsule` and `read_artifact`: one deterministic file per built capsule, read strictly in memory."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from astrid.host.identity import artifact as artifact_module
from astrid.host.identity.artifact import (
    Artifact,
    ArtifactError,
    Metadata,
    canonical_json,
    default_artifact_name,
    pack_capsule,
    read_artifact,
)
from tests.host.identity.conftest import MANIFEST, make_capsule


def test_the_same_capsule_packs_to_the_same_bytes_whatever_the_file_times(
    capsule: Path, tmp_path: Path, component: bytes
) -> None:
    first = pack_capsule(capsule)
    assert pack_capsule(capsule) == first
    other = make_capsule(tmp_path / "elsewhere" / "notes", component)
    for path in other.iterdir():
        os.utime(path, (1_000_000_000, 1_000_000_000))
    os.chmod(other / "notes.wasm", 0o755)
    assert pack_capsule(other) == first


def test_the_artifact_holds_the_manifest_the_component_and_their_description(capsule: Path, component: bytes) -> None:
    read = read_artifact(pack_capsule(capsule))
    assert read.manifest == MANIFEST.encode() and read.component == component and read.signature is None
    metadata = Metadata.decode(read.metadata)
    assert (metadata.name, metadata.version) == ("notes", "1.2.0")
    assert metadata.component_sha256 == hashlib.sha256(component).hexdigest()
    assert metadata.component_size == len(component)
    assert metadata.manifest_sha256 == hashlib.sha256(MANIFEST.encode()).hexdigest()
    assert {"astrid:ipc@1.0.0", "astrid:sys@1.0.0"} <= set(metadata.imports)
    assert metadata.capabilities.as_json() == {"fs": ["notes"], "kv": True, "http": ["api.example.com"]}
    assert metadata.publish == ("resource.v1.response.read.*",)
    assert metadata.subscribe == ("resource.v1.request.read",)
    assert metadata.namespaces == ("astrid://notes-extra/", "astrid://notes/")
    assert "wit-component" in dict(metadata.toolchain)  # what the component's producers section records
    assert metadata.sdk is None  # the build records no SDK version
    document = json.loads(read.metadata)
    assert read.metadata == json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def test_the_archive_is_a_plain_tar_with_fixed_entries(capsule: Path) -> None:
    data = pack_capsule(capsule)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["Capsule.toml", "component.wasm", "metadata.json"]
    fields = {(m.mode, m.uid, m.gid, m.mtime, m.uname, m.type) for m in members}
    assert fields == {(0o644, 0, 0, 0, "", tarfile.REGTYPE)}


def test_a_folder_not_built_names_the_build_command(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST)
    with pytest.raises(ArtifactError, match=r"not built \(notes.wasm is missing\); run `astrid capsule build .*notes`"):
        pack_capsule(folder)


def test_a_core_module_is_not_a_component(tmp_path: Path) -> None:
    make_capsule(tmp_path / "notes", b"\0asm\x01\0\0\0")
    with pytest.raises(ArtifactError, match="core wasm module"):
        pack_capsule(tmp_path / "notes")


def test_an_invalid_manifest_is_refused(tmp_path: Path, component: bytes) -> None:
    make_capsule(tmp_path / "notes", component, MANIFEST.replace('"astrid://notes/"', '"astrid://notes"'))
    with pytest.raises(ArtifactError, match=r"package.namespaces: namespace 'astrid://notes' must be an absolute"):
        pack_capsule(tmp_path / "notes")


def test_a_version_that_cannot_be_a_file_name_needs_an_output_name(packed: bytes) -> None:
    metadata = Metadata.decode(read_artifact(packed).metadata)
    assert default_artifact_name(metadata) == "notes-1.2.0.capsule"
    odd = Metadata(**{**metadata.__dict__, "version": "1.0/../../x"})
    with pytest.raises(ArtifactError, match="give the output file with -o"):
        default_artifact_name(odd)


def tar(members: list[tuple[tarfile.TarInfo, bytes | None]], format: int = tarfile.USTAR_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=format) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def entry(name: str, data: bytes, **fields: object) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def test_other_tar_writers_and_odd_entries_are_refused(packed: bytes) -> None:
    read = read_artifact(packed)
    good = [entry("Capsule.toml", read.manifest), entry("component.wasm", read.component)]
    meta = entry("metadata.json", read.metadata)
    link = tarfile.TarInfo("metadata.json")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    folder = tarfile.TarInfo("component.wasm")
    folder.type = tarfile.DIRTYPE
    Members = list[tuple[tarfile.TarInfo, bytes | None]]
    cases: dict[str, Members] = {
        "a file's mtime": [*good, entry("metadata.json", read.metadata, mtime=1)],
        "an owner name": [*good, entry("metadata.json", read.metadata, uname="me")],
        "a symlink": [*good, (link, None)],
        "a directory": [good[0], (folder, None), meta],
        "a path": [*good, entry("../metadata.json", read.metadata)],
        "an extra entry": [*good, meta, entry("extra.txt", b"x")],
        "a repeated entry": [*good, meta, meta],
        "out of order": [good[1], good[0], meta],
        "a missing entry": good,
    }
    for what, members in cases.items():
        with pytest.raises(ArtifactError, match="not a valid capsule artifact") as caught:
            read_artifact(tar(members))
        assert "\n" not in str(caught.value), what
    assert read_artifact(Artifact(read.manifest, read.component, read.metadata).encode()) == read


def test_tar_framing_is_strict(packed: bytes) -> None:
    manifest_size = len(read_artifact(packed).manifest)
    padding_byte = 512 + manifest_size  # the first byte of zeros after Capsule.toml's data
    for damaged in [
        packed + b"\0",  # trailing bytes
        packed + b"\0" * 512,  # a third zero block
        packed[:-1],  # cut short
        packed[:-1024],  # no end marker
        packed[:-512],  # half an end marker
        packed[:padding_byte] + b"x" + packed[padding_byte + 1 :],  # padding that is not zero
        gzip.compress(packed, mtime=0),  # compressed
        tar([entry("Capsule.toml", b"x")], format=tarfile.PAX_FORMAT),
        b"",
    ]:
        with pytest.raises(ArtifactError, match="not a valid capsule artifact"):
            read_artifact(damaged)


def test_size_caps_hold_before_the_content_is_read(packed: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(artifact_module.ENTRY_CAPS, "component.wasm", 1000)
    with pytest.raises(ArtifactError, match="component.wasm is .* over its 1000-byte cap"):
        read_artifact(packed)
    monkeypatch.setattr(artifact_module, "MAX_ARTIFACT_BYTES", 100)
    with pytest.raises(ArtifactError, match="over the 100-byte cap"):
        read_artifact(packed)


def test_metadata_must_be_canonical_and_well_formed(packed: bytes) -> None:
    metadata = json.loads(read_artifact(packed).metadata)
    bad = [
        json.dumps(metadata, sort_keys=True).encode(),  # spaces
        canonical_json({**metadata, "format": 2}),
        canonical_json({**metadata, "extra": 1}),
        canonical_json({**metadata, "imports": ["z:z@1", "a:a@1"]}),  # not sorted
        canonical_json({**metadata, "component": {"sha256": "x", "size": 1}}),
        canonical_json({**metadata, "namespaces": ["astrid://a/../"]}),
        b"not json",
    ]
    for raw in bad:
        with pytest.raises(ArtifactError, match="metadata.json is malformed"):
            Metadata.decode(raw)


def test_dev_modes_runner_cannot_be_packed(tmp_path: Path) -> None:
    """A component importing astrid:dev/sources (the runner of `astrid capsule dev`) is no release of anything."""
    from astrid.wit import DEV_RUNNER_WORLD
    from tests.support.paths import FIXTURES
    from tests.support.wat import build_wat

    runner = build_wat(FIXTURES / "wat" / "dev_reader.wat", tmp_path / "runner.wasm", world=DEV_RUNNER_WORLD)
    make_capsule(tmp_path / "notes", runner.read_bytes())
    with pytest.raises(ArtifactError, match=r"imports astrid:dev@1\.0\.0: it is dev mode's runner .* cannot be packed"):
        pack_capsule(tmp_path / "notes")
