"""The capsule artifact: one file holding a built capsule, its description and (once signed) its signature.

`astrid capsule pack DIR` makes `NAME-VERSION.capsule` from a built capsule
folder. It is a tar (ustar, uncompressed) of these regular files, in this
order:

    Capsule.toml     the manifest, byte for byte
    component.wasm   the component (installed under the manifest's [[component]] file name)
    metadata.json    what the capsule is and asks for, canonical JSON (below)
    signature.json   a DSSE envelope over metadata.json (`astrid capsule sign`; absent until signed)

The bytes are a pure function of the entries: ustar headers with mode 0644,
uid/gid 0, no owner names, mtime 0, the data padded with zeros to 512 bytes,
two zero blocks at the end. The same built folder packs to the same bytes,
whatever the files' times or modes.

Reading (`read_artifact`) happens in memory and is strict: exactly the entries
above in that order, each under its size cap, every header byte equal to the
canonical header for its name and size, zero padding, the end marker and
nothing after it. So a link, a directory, a path, a pax header, an extra or
repeated entry, or any changed byte of the framing is refused before anything
looks at the content; a changed byte of the content is caught by the digests
and the signature. The tar is not compressed on purpose: deflate has many
encodings of the same content, so a compressed file could change without its
content changing (transports may compress it; OCI registries and HTTP do).

metadata.json (format 1), keys sorted, no spaces:

    name, version          from [package]
    component              {"sha256": hex, "size": bytes} of component.wasm
    manifest               {"sha256": hex, "size": bytes} of Capsule.toml
    imports                the WIT packages the component imports, e.g. "astrid:ipc@1.0.0"
    capabilities           {"fs": [...], "kv": bool, "http": [...]}, as [capabilities] asks (a capability
                           added since format 1 only when asked: `capabilities/asks.py`)
    topics                 {"publish": [...], "subscribe": [...]}: the topic patterns it declares
    namespaces             the URI namespaces [package] namespaces claims
    toolchain (optional)   the tools the component records in its `producers` section
    sdk (optional)         the guest SDK version, when the build recorded one
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import subprocess
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from astrid.host.capsule.manifest import MANIFEST_NAME, NOTHING_ASKED, Asks, Manifest, namespace_problem, parse_manifest
from astrid.host.capsule.sources import DEV_PACKAGE
from astrid.host.errors import ManifestError
from astrid.host.identity.errors import ArtifactError
from astrid.host.toolpaths import wasm_tools
from astrid.host.tuning import IDENTITY_TUNING

SUFFIX = ".capsule"
METADATA_FORMAT = 1
KIB = 1024
MIB = 1024 * KIB

MANIFEST_ENTRY = MANIFEST_NAME  # "Capsule.toml"
COMPONENT_ENTRY = "component.wasm"
METADATA_ENTRY = "metadata.json"
SIGNATURE_ENTRY = "signature.json"
# every entry, in archive order (sorted by name), with its size cap
ENTRY_CAPS: dict[str, int] = {
    MANIFEST_ENTRY: 64 * KIB,
    COMPONENT_ENTRY: 255 * MIB,
    METADATA_ENTRY: 256 * KIB,
    SIGNATURE_ENTRY: 64 * KIB,
}
REQUIRED_ENTRIES = (MANIFEST_ENTRY, COMPONENT_ENTRY, METADATA_ENTRY)
MAX_ARTIFACT_BYTES = 256 * MIB  # the whole file: every entry at its cap, with its header and padding, fits

BLOCK = 512

WASM_MAGIC = b"\0asm"
COMPONENT_VERSION = b"\x0d\x00\x01\x00"  # version 13, layer 1: a component (a core module is 01 00 00 00)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PACKAGE = re.compile(r"[a-z0-9-]+:[a-z0-9-]+(/[a-z0-9-]+)*(@[0-9A-Za-z.+-]+)?")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> bytes:
    """The one byte string astrid writes for `value`: keys sorted, no spaces, ASCII only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


# -- the archive ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Artifact:
    """The entries of a capsule artifact, in memory."""

    manifest: bytes = field(repr=False)
    component: bytes = field(repr=False)
    metadata: bytes = field(repr=False)
    signature: bytes | None = field(default=None, repr=False)

    def entries(self) -> list[tuple[str, bytes]]:
        entries = [(MANIFEST_ENTRY, self.manifest), (COMPONENT_ENTRY, self.component), (METADATA_ENTRY, self.metadata)]
        if self.signature is not None:
            entries.append((SIGNATURE_ENTRY, self.signature))
        return entries

    def with_signature(self, signature: bytes | None) -> Artifact:
        return replace(self, signature=signature)

    def encode(self) -> bytes:
        """The artifact file's bytes (deterministic)."""
        for name, data in self.entries():
            if len(data) > ENTRY_CAPS[name]:
                raise ArtifactError(f"{name} is {len(data)} bytes, over the {ENTRY_CAPS[name]}-byte cap of an artifact")
        return _tar(self.entries())


def _tar_header(name: str, size: int) -> bytes:
    """The canonical ustar header of a regular file `name` of `size` bytes."""
    header = bytearray(BLOCK)

    def put(offset: int, value: bytes) -> None:
        header[offset : offset + len(value)] = value

    put(0, name.encode("ascii"))
    put(100, b"0000644\0")  # mode
    put(108, b"0000000\0")  # uid
    put(116, b"0000000\0")  # gid
    put(124, b"%011o\0" % size)
    put(136, b"00000000000\0")  # mtime
    put(148, b" " * 8)  # checksum, counted as spaces
    put(156, b"0")  # regular file
    put(257, b"ustar\x0000")
    put(329, b"0000000\0")  # devmajor
    put(337, b"0000000\0")  # devminor
    put(148, b"%06o\0 " % sum(header))
    return bytes(header)


def _padding(size: int) -> int:
    return -size % BLOCK


def _tar(entries: list[tuple[str, bytes]]) -> bytes:
    parts: list[bytes] = []
    for name, data in entries:
        parts += [_tar_header(name, len(data)), data, b"\0" * _padding(len(data))]
    parts.append(b"\0" * (2 * BLOCK))
    return b"".join(parts)


def _corrupt(why: str, source: str | None = None) -> ArtifactError:
    prefix = f"{source}: " if source else ""
    return ArtifactError(
        f"{prefix}not a valid capsule artifact: {why} (damaged, or not made by `astrid capsule pack`; get it again)"
    )


def read_artifact(data: bytes, source: str | None = None) -> Artifact:
    """The entries of the artifact `data`, read in memory and refused on any deviation from the canonical form
    (`source` names it in errors)."""
    if len(data) > MAX_ARTIFACT_BYTES:
        raise _corrupt(f"{len(data)} bytes, over the {MAX_ARTIFACT_BYTES}-byte cap", source)
    tar = memoryview(data)
    found: dict[str, bytes] = {}
    offset = 0
    order = list(ENTRY_CAPS)
    while True:
        header = bytes(tar[offset : offset + BLOCK])
        if len(header) < BLOCK:
            raise _corrupt("the tar stream ends without its end marker", source)
        if header == b"\0" * BLOCK:
            break
        name = header[:100].rstrip(b"\0").decode("ascii", "replace")
        if name not in order:
            raise _corrupt(f"unexpected entry {name[:60]!r} (an artifact holds only {', '.join(ENTRY_CAPS)})", source)
        if order.index(name) < len(found) or name in found:
            raise _corrupt(f"entry {name} is repeated or out of order", source)
        digits = header[124:135]
        if not re.fullmatch(rb"[0-7]{11}", digits):
            raise _corrupt(f"entry {name} has a malformed size", source)
        size = int(digits, 8)
        if size > ENTRY_CAPS[name]:
            raise _corrupt(f"entry {name} is {size} bytes, over its {ENTRY_CAPS[name]}-byte cap", source)
        if header != _tar_header(name, size):
            raise _corrupt(f"entry {name} is not a plain file with astrid's fixed header (a link? times?)", source)
        start = offset + BLOCK
        end = start + size
        if end + _padding(size) > len(tar):
            raise _corrupt(f"entry {name} is cut short", source)
        if any(tar[end : end + _padding(size)]):
            raise _corrupt(f"the padding after entry {name} is not zero", source)
        found[name] = bytes(tar[start:end])
        offset = end + _padding(size)
    if bytes(tar[offset:]) != b"\0" * (2 * BLOCK):
        raise _corrupt("bytes after the tar end marker", source)
    missing = [name for name in REQUIRED_ENTRIES if name not in found]
    if missing:
        raise _corrupt(f"it lacks {', '.join(missing)}", source)
    return Artifact(found[MANIFEST_ENTRY], found[COMPONENT_ENTRY], found[METADATA_ENTRY], found.get(SIGNATURE_ENTRY))


# -- metadata ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metadata:
    """metadata.json: the capsule's description, pinning its component and manifest by digest."""

    name: str
    version: str
    component_sha256: str
    component_size: int
    manifest_sha256: str
    manifest_size: int
    imports: tuple[str, ...] = ()
    capabilities: Asks = NOTHING_ASKED
    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    toolchain: tuple[tuple[str, str], ...] = ()
    sdk: str | None = None

    @classmethod
    def describe(
        cls,
        manifest: Manifest,
        manifest_bytes: bytes,
        component: bytes,
        *,
        imports: tuple[str, ...] = (),
        toolchain: tuple[tuple[str, str], ...] = (),
        sdk: str | None = None,
    ) -> Metadata:
        return cls(
            name=manifest.name,
            version=manifest.package.version,
            component_sha256=sha256(component),
            component_size=len(component),
            manifest_sha256=sha256(manifest_bytes),
            manifest_size=len(manifest_bytes),
            imports=tuple(sorted(set(imports))),
            capabilities=manifest.capabilities,
            publish=tuple(sorted(manifest.publish)),
            subscribe=tuple(sorted(manifest.subscribe)),
            namespaces=tuple(sorted(manifest.package.namespaces)),
            toolchain=tuple(sorted(toolchain)),
            sdk=sdk,
        )

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "format": METADATA_FORMAT,
            "name": self.name,
            "version": self.version,
            "component": {"sha256": self.component_sha256, "size": self.component_size},
            "manifest": {"sha256": self.manifest_sha256, "size": self.manifest_size},
            "imports": list(self.imports),
            "capabilities": self.capabilities.as_json(),
            "topics": {"publish": list(self.publish), "subscribe": list(self.subscribe)},
            "namespaces": list(self.namespaces),
        }
        if self.toolchain:
            document["toolchain"] = dict(self.toolchain)
        if self.sdk is not None:
            document["sdk"] = self.sdk
        return document

    def encode(self) -> bytes:
        return canonical_json(self.as_json())

    @classmethod
    def decode(cls, raw: bytes) -> Metadata:
        """metadata.json's bytes, which must be canonical JSON of format 1 with every field well-formed."""
        try:
            document = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise _bad_metadata("it is not JSON") from None
        metadata = cls.from_json(document)
        if metadata.encode() != raw:
            raise _bad_metadata("it is not in canonical form (sorted keys, no spaces, sorted lists)")
        return metadata

    @classmethod
    def from_json(cls, document: Any) -> Metadata:
        if not isinstance(document, dict):
            raise _bad_metadata("it is not a JSON object")
        if document.get("format") != METADATA_FORMAT:
            raise _bad_metadata(f"format {document.get('format')!r} is not {METADATA_FORMAT} (a newer astrid made it?)")
        required = {"format", "name", "version", "component", "manifest", "imports", "capabilities", "topics"}
        allowed = required | {"namespaces", "toolchain", "sdk"}
        if not required <= set(document) <= allowed:
            raise _bad_metadata(f"its keys must be {', '.join(sorted(allowed))}")
        name, version = document["name"], document["version"]
        if not isinstance(name, str) or not isinstance(version, str) or not name or not version:
            raise _bad_metadata("name and version must be strings")
        component_sha256, component_size = _digest(document["component"], "component")
        manifest_sha256, manifest_size = _digest(document["manifest"], "manifest")
        imports = _strings(document["imports"], "imports")
        if not all(_PACKAGE.fullmatch(i) for i in imports):
            raise _bad_metadata("imports must be WIT package names like astrid:ipc@1.0.0")
        try:
            capabilities = Asks.from_json(document["capabilities"])
        except ValueError as exc:
            raise _bad_metadata(f"capabilities: {exc}") from None
        topics = document["topics"]
        if not isinstance(topics, dict) or set(topics) != {"publish", "subscribe"}:
            raise _bad_metadata('topics must be {"publish": [...], "subscribe": [...]}')
        namespaces = _strings(document.get("namespaces", []), "namespaces")
        for namespace in namespaces:
            problem = namespace_problem(namespace)
            if problem:
                raise _bad_metadata(f"namespace {namespace!r} {problem}")
        toolchain = document.get("toolchain", {})
        if not isinstance(toolchain, dict) or not all(isinstance(v, str) for v in toolchain.values()):
            raise _bad_metadata("toolchain must map tool names to versions")
        sdk = document.get("sdk")
        if sdk is not None and not isinstance(sdk, str):
            raise _bad_metadata("sdk must be a version string")
        return cls(
            name=name,
            version=version,
            component_sha256=component_sha256,
            component_size=component_size,
            manifest_sha256=manifest_sha256,
            manifest_size=manifest_size,
            imports=imports,
            capabilities=capabilities,
            publish=_strings(topics["publish"], "topics.publish"),
            subscribe=_strings(topics["subscribe"], "topics.subscribe"),
            namespaces=namespaces,
            toolchain=tuple(sorted(toolchain.items())),
            sdk=sdk,
        )


def _bad_metadata(why: str) -> ArtifactError:
    return ArtifactError(f"the artifact's metadata.json is malformed: {why} (re-pack it with `astrid capsule pack`)")


def _digest(value: Any, what: str) -> tuple[str, int]:
    if (
        not isinstance(value, dict)
        or set(value) != {"sha256", "size"}
        or not isinstance(value["sha256"], str)
        or not _HEX64.fullmatch(value["sha256"])
        or type(value["size"]) is not int
        or value["size"] < 0
    ):
        raise _bad_metadata(f'{what} must be {{"sha256": <64 hex>, "size": <bytes>}}')
    return value["sha256"], value["size"]


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(set(value)) != len(value):
        raise _bad_metadata(f"{what} must be a list of distinct strings")
    if value != sorted(value):
        raise _bad_metadata(f"{what} must be sorted")
    return tuple(value)


def parse_manifest_bytes(raw: bytes, where: str) -> Manifest:
    """`Capsule.toml` from its bytes; an `ArtifactError` naming `where` when it is not a valid manifest."""
    try:
        return parse_manifest(tomllib.loads(raw.decode("utf-8")), where)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ArtifactError(f"{where}: not a valid Capsule.toml ({exc})") from None
    except ManifestError as exc:
        raise ArtifactError(str(exc)) from None


def check_against_manifest(metadata: Metadata, manifest: Manifest, where: str) -> None:
    """The metadata must state exactly what the manifest says: name, version, capabilities, topics, namespaces."""
    expected = Metadata.describe(manifest, b"", b"")

    def differs(what: str, claimed: Any, asked: Any, less: bool) -> ArtifactError:
        how = "claims less than" if less else "does not match"
        return ArtifactError(
            f"{where}: metadata.json {how} its Capsule.toml on {what} (metadata: {claimed or 'none'}; "
            f"Capsule.toml: {asked or 'none'}); the artifact is refused: re-pack it with `astrid capsule pack`"
        )

    if metadata.name != expected.name:
        raise differs("the name", metadata.name, expected.name, False)
    if metadata.version != expected.version:
        raise differs("the version", metadata.version, expected.version, False)
    if metadata.capabilities != expected.capabilities:
        less = expected.capabilities.covers(metadata.capabilities)
        claimed, asked = metadata.capabilities.specs(), expected.capabilities.specs()
        raise differs("capabilities", ", ".join(claimed), ", ".join(asked), less)
    for what, claimed_topics, asked_topics in (
        ("publish topics", metadata.publish, expected.publish),
        ("subscribe topics", metadata.subscribe, expected.subscribe),
        ("namespaces", metadata.namespaces, expected.namespaces),
    ):
        if set(claimed_topics) != set(asked_topics):
            less = set(claimed_topics) < set(asked_topics)
            raise differs(what, ", ".join(claimed_topics), ", ".join(asked_topics), less)


# -- packing -------------------------------------------------------------------------------------


def check_component_header(component: bytes, where: str, fix: str) -> None:
    if component[:4] != WASM_MAGIC:
        raise ArtifactError(f"{where} is not a WebAssembly file; {fix}")
    if component[4:8] != COMPONENT_VERSION:
        raise ArtifactError(f"{where} is a core wasm module or an unknown version, not a component; {fix}")


def pack_capsule(folder: Path, *, sdk: str | None = None) -> bytes:
    """The artifact of the built capsule in `folder` (Capsule.toml + its component), unsigned."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST_NAME
    try:
        manifest_bytes = manifest_path.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"{folder}: no {MANIFEST_NAME} here (give a capsule folder)") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {manifest_path}: {exc.strerror or exc}") from None
    manifest = parse_manifest_bytes(manifest_bytes, str(manifest_path))
    build = f"run `astrid capsule build {folder}` first"
    component_path = folder / manifest.component_file
    try:
        with component_path.open("rb") as source:
            component = source.read(ENTRY_CAPS[COMPONENT_ENTRY] + 1)
    except FileNotFoundError:
        raise ArtifactError(f"{folder}: not built ({manifest.component_file} is missing); {build}") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {component_path}: {exc.strerror or exc}") from None
    if len(component) > ENTRY_CAPS[COMPONENT_ENTRY]:
        raise ArtifactError(f"{component_path} is over the {ENTRY_CAPS[COMPONENT_ENTRY]}-byte cap of an artifact")
    check_component_header(component, str(component_path), f"rebuild it: {build}")
    imports, toolchain = inspect_component(component, str(component_path))
    if DEV_PACKAGE in imports:  # the runner of `astrid capsule dev`: it serves sources, it is no release
        raise ArtifactError(
            f"{component_path} imports {DEV_PACKAGE}: it is dev mode's runner (`astrid capsule dev`), "
            f"not a build of this capsule, and cannot be packed or signed; {build}"
        )
    metadata = Metadata.describe(manifest, manifest_bytes, component, imports=imports, toolchain=toolchain, sdk=sdk)
    return Artifact(manifest_bytes, component, metadata.encode()).encode()


def inspect_component(component: bytes, where: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The WIT packages `component` imports, and the tools its `producers` section names (with wasm-tools)."""
    wit = _wasm_tools(["component", "wit", "--json"], component, where)
    try:
        packages = [p["name"] for p in wit["packages"]]
        interfaces = wit["interfaces"]
        roots = [w for w in wit["worlds"] if packages[w["package"]].startswith("root:")]
        world = (roots or wit["worlds"])[-1]
        imported = set()
        for item in world["imports"].values():
            if isinstance(item, dict) and "interface" in item:
                package = interfaces[item["interface"]["id"]].get("package")
                if package is not None:
                    imported.add(packages[package])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{where}: cannot read the component's imports ({exc!r})") from None
    shown = _wasm_tools(["metadata", "show", "--json"], component, where)
    tools: dict[str, str] = {}
    try:
        top = shown.get("component") or shown.get("module") or {}
        for field_name, values in top.get("metadata", {}).get("producers") or []:
            if field_name == "processed-by" and isinstance(values, dict):
                tools.update({str(k): str(v) for k, v in values.items()})
    except (AttributeError, TypeError, ValueError):
        tools = {}
    return tuple(sorted(imported)), tuple(sorted(tools.items()))


def _wasm_tools(args: list[str], component: bytes, where: str) -> Any:
    try:
        result = subprocess.run(
            [wasm_tools(), *args],
            input=component,
            capture_output=True,
            timeout=IDENTITY_TUNING.wasm_tools_timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ArtifactError(f"cannot run wasm-tools on {where}: {exc} (reinstall astrid-py)") from None
    if result.returncode != 0:
        lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ArtifactError(f"{where} is not a valid component: {lines[-1] if lines else 'wasm-tools failed'}")
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise ArtifactError(f"wasm-tools gave no JSON for {where} (reinstall astrid-py)") from None


def default_artifact_name(metadata: Metadata) -> str:
    """`NAME-VERSION.capsule`; a version that cannot be part of a file name is an error."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}", metadata.version) or ".." in metadata.version:
        raise ArtifactError(f"version {metadata.version!r} cannot be part of a file name: give the output file with -o")
    return f"{metadata.name}-{metadata.version}{SUFFIX}"


def write_file(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (a temp file beside it, then a rename), mode 0644 less the umask."""
    path = Path(path)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
    except OSError as exc:
        raise ArtifactError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except OSError as exc:
        raise ArtifactError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        temp.unlink(missing_ok=True)


def read_file(path: Path) -> bytes:
    """An artifact file's bytes, refusing anything over the cap before reading it all."""
    path = Path(path)
    try:
        with path.open("rb") as source:
            data = source.read(MAX_ARTIFACT_BYTES + 1)
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no such file (make one with `astrid capsule pack DIR`)") from None
    except IsADirectoryError:
        raise ArtifactError(f"{path} is a folder: give a .capsule file (`astrid capsule pack` makes one)") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_ARTIFACT_BYTES:
        raise ArtifactError(f"{path} is over the {MAX_ARTIFACT_BYTES}-byte cap of an artifact")
    return data
