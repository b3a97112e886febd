"""Small real wheels made on the spot, for requirements.txt tests that must not need the network."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    files: dict[str, str | bytes],
    *,
    requires: tuple[str, ...] = (),
    tag: str = "py3-none-any",
    purelib: bool = True,
) -> Path:
    """`folder/NAME-VERSION-TAG.whl` holding `files` (path -> content), with valid METADATA, WHEEL and RECORD."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    pure = "true" if purelib else "false"
    wheel = f"Wheel-Version: 1.0\nGenerator: astrid-tests\nRoot-Is-Purelib: {pure}\nTag: {tag}\n"
    entries: dict[str, bytes] = {
        path: content.encode() if isinstance(content, str) else content for path, content in files.items()
    }
    entries[f"{info}/METADATA"] = metadata.encode()
    entries[f"{info}/WHEEL"] = wheel.encode()
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in entries.items())
    record += f"{info}/RECORD,,\n"
    entries[f"{info}/RECORD"] = record.encode()
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry, data in entries.items():
            archive.writestr(entry, data)
    return path


def wheel_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
