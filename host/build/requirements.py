"""A capsule's `requirements.txt`: pure-Python packages, pinned, installed into an isolated site.

The build sees only the standard library, the guest SDK, the capsule folder
and the packages pinned here. The file uses pip's format with these rules:

- every requirement is `name==version` (extras allowed: `name[extra]==version`),
  optionally followed by `--hash=sha256:...` options, which pip checks;
- no environment markers, URLs, paths, `-e`, `-r` or `-c`;
- option lines may choose where packages come from: `--index-url`,
  `--extra-index-url`, `--find-links`, `--no-index`, `--require-hashes`;
- every package pip installs, dependencies included, must be pinned;
- a package that cannot work in a capsule (`unfit_packages.py`: one that needs
  sockets or processes) is refused by name, with what to use instead.

pip installs them with `--only-binary :all:` for a pure-Python target
(platform `any`, ABI `none`, Python 3.14: the guest's), into a folder of the
build cache keyed by the file's bytes (plus any local `--find-links` folder),
so an unchanged file never reaches the network again. Every installed file is
then checked: a package with native code (an extension module, a wheel that is
not pure) is refused by name. The sha256 of the installed tree is part of the
build's content hash.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path

from astrid.host.build.steps import Progress, run_tool, shown
from astrid.host.build.unfit_packages import unfit_distribution
from astrid.host.errors import BuildError
from astrid.host.tuning import BUILD_TUNING

log = logging.getLogger(__name__)

REQUIREMENTS_FILE = "requirements.txt"
GUEST_PYTHON = "3.14"  # the CPython componentize-py 0.25 bundles
PURE_TARGET = ("--platform", "any", "--implementation", "py", "--python-version", GUEST_PYTHON, "--abi", "none")
SITE_FORMAT = "astrid-site-1"  # bump when the way a site is installed changes
TREE_FILE = "tree.sha256"
# Option lines a capsule's requirements.txt may hold (where packages come from, hash checking).
SOURCE_OPTIONS = {"--index-url": True, "-i": True, "--extra-index-url": True, "--find-links": True, "-f": True}
FLAG_OPTIONS = {"--no-index", "--require-hashes"}
NATIVE_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".a", ".lib", ".o", ".node", ".wasm")

_REQUIREMENT = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[A-Za-z0-9._,\s-]*\])?\s*(.*)")
_EXACT = re.compile(r"==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)")
_HASH = re.compile(r"--hash[= ]\s*[a-z0-9]+:[0-9a-fA-F]+")


def normalize(name: str) -> str:
    """A distribution name as the package index compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str  # as written
    version: str
    line: int

    @property
    def key(self) -> str:
        return normalize(self.name)


@dataclass(frozen=True)
class Requirements:
    path: Path
    text: bytes
    pins: tuple[Pin, ...]
    find_links: tuple[str, ...]  # local --find-links folders, as written (their files are part of the key)
    sources: tuple[str, ...] = ()  # the option lines choosing where packages come from, as pip arguments


@dataclass(frozen=True)
class Site:
    """An installed set of packages the build puts on the guest's path."""

    root: Path  # what componentize-py gets as VIRTUAL_ENV
    site_packages: Path
    tree_sha256: str


def site_packages_of(root: Path) -> Path:
    """Where componentize-py looks for packages under a VIRTUAL_ENV folder."""
    if os.name == "nt":
        return root / "Lib" / "site-packages"
    return root / "lib" / f"python{GUEST_PYTHON}" / "site-packages"


def _where(path: Path, line: int) -> str:
    return f"{shown(path)}:{line}"


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, line) with `\\` continuations joined and comments dropped, as pip reads them."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        stripped = re.sub(r"(^|\s+)#.*$", "", raw)
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        joined = " ".join(part.strip() for part in pending).strip()
        pending = []
        if joined:
            lines.append((start, joined))
    if pending:
        joined = " ".join(part.strip() for part in pending).strip()
        if joined:
            lines.append((start, joined))
    return lines


def _pin_hint(name: str) -> str:
    try:
        return f"{name}=={installed_version(name)}"
    except (PackageNotFoundError, ValueError):
        return f"{name}==<version>"


def read_requirements(folder: Path) -> Requirements | None:
    """The pins of `folder/requirements.txt`, checked; None when there is no such file or it pins nothing."""
    path = Path(folder) / REQUIREMENTS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BuildError(f"{shown(path)}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BuildError(f"{shown(path)}: not UTF-8 text") from None
    pins: list[Pin] = []
    find_links: list[str] = []
    sources: list[str] = []
    seen: dict[str, int] = {}
    for number, line in _logical_lines(text):
        where = _where(path, number)
        if line.startswith("-"):
            find_links.extend(_option_line(line, where))
            if not line.startswith("--require-hashes"):
                sources.extend(line.split(None, 1))
            continue
        pin = _requirement_line(line, number, where)
        why = unfit_distribution(pin.key)
        if why is not None:
            raise BuildError(f"{where}: {pin.name} cannot work in a capsule: {why}; remove it")
        if pin.key in seen:
            raise BuildError(f"{where}: {pin.name} is pinned twice (also on line {seen[pin.key]}): keep one line")
        seen[pin.key] = number
        pins.append(pin)
    if not pins:
        return None
    return Requirements(path, data, tuple(pins), tuple(find_links), tuple(sources))


def _option_line(line: str, where: str) -> list[str]:
    """The local --find-links folders of an option line; BuildError for an option a capsule may not use."""
    first, _, rest = line.partition(" ")
    option, equals, value = first.partition("=") if first.startswith("--") else (first, "", "")
    value = (value if equals else rest).strip()
    if option in FLAG_OPTIONS and not value:
        return []
    if option in SOURCE_OPTIONS and value:
        if option in ("--find-links", "-f") and "://" not in value:
            return [value]
        return []
    allowed = ", ".join([*SOURCE_OPTIONS, *sorted(FLAG_OPTIONS)])
    raise BuildError(
        f"{where}: {option} is not allowed in a capsule's {REQUIREMENTS_FILE} "
        f"(pin each package as name==version; allowed options: {allowed})"
    )


def _requirement_line(line: str, number: int, where: str) -> Pin:
    spec, hashes = line, []
    while True:
        found = _HASH.search(spec)
        if found is None:
            break
        hashes.append(found.group(0))
        spec = (spec[: found.start()] + spec[found.end() :]).strip()
    options = [token for token in spec.split() if token.startswith("-")]
    if options:
        raise BuildError(f"{where}: {options[0]} is not allowed on a requirement line (only --hash=sha256:...)")
    matched = _REQUIREMENT.fullmatch(spec)
    if matched is None or "@" in spec or "/" in spec or "\\" in spec:
        raise BuildError(
            f"{where}: {spec!r} is not a package pin: write name==version (URLs and paths are not allowed)"
        )
    name, _extras, rest = matched.groups()
    if ";" in rest:
        raise BuildError(
            f"{where}: environment markers ({rest[rest.index(';') :].strip()}) are not allowed: the guest is always "
            f"CPython {GUEST_PYTHON} on WebAssembly, so list exactly the packages it needs"
        )
    exact = _EXACT.fullmatch(rest.strip())
    if exact is None or "*" in rest:
        shown = f"{name}{rest.strip()}" if rest.strip() else name
        raise BuildError(
            f"{where}: {shown!r} is not pinned to one version: write {_pin_hint(name)} "
            f"(only exact == pins are built; `pip index versions {name}` lists the versions)"
        )
    return Pin(name, exact.group(1), number)


# -- installing -------------------------------------------------------------------------------


def site_key(requirements: Requirements) -> str:
    """The cache key of a site: the file's bytes, the target, and the files of local --find-links folders."""
    digest = hashlib.sha256()
    digest.update(f"{SITE_FORMAT}\0{' '.join(PURE_TARGET)}\0".encode())
    digest.update(len(requirements.text).to_bytes(8, "big") + requirements.text)
    for link in requirements.find_links:
        base = requirements.path.parent / link
        files = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        for path in files:
            data = path.read_bytes()
            digest.update(path.relative_to(base).as_posix().encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def cached_site(requirements: Requirements, cache: Path) -> Site | None:
    """The site already installed for these requirements, or None (nothing is installed)."""
    root = Path(cache) / "sites" / site_key(requirements)
    try:
        tree = (root / TREE_FILE).read_text(encoding="ascii").strip()
    except OSError:
        return None
    return Site(root, site_packages_of(root), tree)


def install_site(requirements: Requirements, cache: Path, progress: Progress | None = None) -> Site:
    """Install the pinned packages into an isolated folder of the build cache (once per file content)."""
    found = cached_site(requirements, cache)
    if found is not None:
        return found
    sites = Path(cache) / "sites"
    try:
        sites.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".install-", dir=sites))
    except OSError as exc:
        raise BuildError(f"cannot use the build cache at {cache}: {exc.strerror or exc}") from None
    try:
        target = site_packages_of(scratch)
        target.mkdir(parents=True)
        _pip_install(requirements, target, progress)
        shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts: nothing the guest imports
        _check_pure(requirements, target)
        _check_all_pinned(requirements, target)
        tree = tree_sha256(target)
        (scratch / TREE_FILE).write_text(tree + "\n", encoding="ascii")
        final = sites / site_key(requirements)
        try:
            os.rename(scratch, final)
        except OSError:  # another build installed the same site meanwhile
            if cached_site(requirements, cache) is None:
                raise
        found = cached_site(requirements, cache)
        assert found is not None
        return found
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def tree_sha256(folder: Path) -> str:
    """sha256 over every file under `folder` (its relative path and bytes), in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() or p.is_symlink()):
        data = path.read_bytes()
        digest.update(path.relative_to(folder).as_posix().encode("utf-8", "surrogateescape") + b"\0")
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    for name in ("PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_NO_BINARY", "PIP_ONLY_BINARY", "PIP_CONSTRAINT"):
        env.pop(name, None)
    env.update({"PIP_USER": "0", "PIP_REQUIRE_VIRTUALENV": "0", "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def _pip(args: list[str], cwd: Path, progress: Progress | None, phase: str | None) -> tuple[int, str]:
    # -P: pip runs in the capsule folder (relative --find-links), which must not come first on the
    # module path: a `pip.py` there would run instead of pip, natively.
    command = [sys.executable, "-P", "-m", "pip", *args]
    return run_tool(
        command,
        env=_pip_env(),
        cwd=cwd,
        name=f"pip (installing {REQUIREMENTS_FILE})",
        progress=progress,
        phase=phase,
        timeout_s=BUILD_TUNING.pip_timeout_s,
    )


def _pip_install(requirements: Requirements, target: Path, progress: Progress | None) -> None:
    args = [
        "install",
        "--target", str(target),
        "--no-compile",
        "--no-input",
        "--disable-pip-version-check",
        "--no-warn-conflicts",
        "--no-warn-script-location",
        "--progress-bar", "off",
        "--only-binary", ":all:",
        *PURE_TARGET,
        "-r", str(requirements.path.resolve()),
    ]  # fmt: skip
    code, output = _pip(args, requirements.path.parent, progress, "requirements")
    if code == 0:
        return
    if "No module named pip" in output:
        raise BuildError(
            f"{shown(requirements.path)} needs pip to install its packages, and this Python has none "
            f"(run `{Path(sys.executable).name} -m ensurepip`)"
        )
    raise BuildError(_explain_pip(requirements, output))


def _explain_pip(requirements: Requirements, output: str) -> str:
    where = shown(requirements.path)
    missing = re.search(r"No matching distribution found for (\S+)", output)
    if missing:
        wanted = missing.group(1)
        name = re.split(r"[=<>!~\[;]", wanted, maxsplit=1)[0]
        native = _native_wheel(requirements, wanted)
        if native:
            return (
                f"{where}: {name} has native code (its wheel {native} is built for one CPU and CPython), which the "
                "WebAssembly guest cannot load: use a pure-Python package instead"
            )
        return (
            f"{where}: no wheel of {wanted} on the package index (check the name and version: "
            f"`pip index versions {name}`; packages without a wheel are not built)"
        )
    if "DO NOT MATCH THE HASHES" in output:
        got = re.search(r"^\s*(\S+==\S+) from ", output, re.MULTILINE)
        which = got.group(1) if got else "a package"
        return f"{where}: the download of {which} does not match its --hash: fix the hash or the pin"
    if "Hashes are required" in output:
        lines = [line.strip() for line in output.splitlines() if "==" in line and "--hash" in line]
        detail = f" ({lines[0]})" if lines else ""
        return f"{where}: with --hash, every package needs a pin and a hash, dependencies included{detail}"
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR:")]
    last = errors[-1] if errors else (output.strip().splitlines() or ["pip failed without a message"])[-1]
    return f"{where}: pip could not install the pinned packages: {last.removeprefix('ERROR: ').strip()}"


def _native_wheel(requirements: Requirements, wanted: str) -> str | None:
    """The wheel pip would pick for `wanted` on this machine, when it is not pure Python (else None)."""
    with tempfile.TemporaryDirectory(prefix="astrid-pip-") as scratch:
        report = Path(scratch) / "report.json"
        args = [
            "install", "--dry-run", "--ignore-installed", "--no-deps", "--only-binary", ":all:",
            "--quiet", "--no-input", "--disable-pip-version-check", "--report", str(report),
            *requirements.sources, wanted,
        ]  # fmt: skip
        code, _ = _pip(args, requirements.path.parent, None, None)
        if code != 0:
            return None
        try:
            installs = json.loads(report.read_text(encoding="utf-8")).get("install", [])
            url = installs[0]["download_info"]["url"]
        except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
            return None
    filename = str(url).rsplit("/", 1)[-1].split("#", 1)[0]
    return None if filename.endswith("-none-any.whl") else filename


def _distributions(site: Path) -> list[tuple[str, str, Path]]:
    """(name, version, dist-info folder) of every distribution installed in `site`."""
    found = []
    for info in sorted(site.glob("*.dist-info")):
        name = version = ""
        try:
            for line in (info / "METADATA").read_text(encoding="utf-8", errors="replace").splitlines():
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key == "Name":
                    name = value.strip()
                elif key == "Version":
                    version = value.strip()
        except OSError as exc:  # its folder name says the same, below
            log.debug("cannot read %s: %s", info / "METADATA", exc)
        if not name:
            name, _, version = info.name.removesuffix(".dist-info").partition("-")
        found.append((name, version, info))
    return found


def _check_pure(requirements: Requirements, site: Path) -> None:
    """Refuse, by name, a package that brings native code."""
    owners: dict[str, str] = {}
    for name, version, info in _distributions(site):
        label = f"{name} {version}".strip()
        try:
            wheel = (info / "WHEEL").read_text(encoding="utf-8", errors="replace")
        except OSError:
            wheel = ""
        tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
        impure = "Root-Is-Purelib: false" in wheel or any(not tag.endswith("-none-any") for tag in tags)
        if impure:
            raise BuildError(
                f"{shown(requirements.path)}: {label} has native code (a wheel tagged {', '.join(tags) or 'impure'}), "
                "which the WebAssembly guest cannot load: use a pure-Python package instead"
            )
        try:
            record = (info / "RECORD").read_text(encoding="utf-8", errors="replace")
        except OSError:
            record = ""
        for row in record.splitlines():
            owners[row.split(",", 1)[0]] = label
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        relative = path.relative_to(site).as_posix()
        if _is_native(path.name):
            label = owners.get(relative, "a package")
            raise BuildError(
                f"{shown(requirements.path)}: {label} has native code ({relative}), which the WebAssembly guest "
                "cannot load: use a pure-Python package instead"
            )


def _is_native(filename: str) -> bool:
    lowered = filename.lower()
    return lowered.endswith(NATIVE_SUFFIXES) or re.search(r"\.so\.\d", lowered) is not None


def _check_all_pinned(requirements: Requirements, site: Path) -> None:
    """Every installed distribution must be pinned: the lines to add otherwise."""
    pinned = {pin.key for pin in requirements.pins}
    unpinned = [(name, version) for name, version, _ in _distributions(site) if normalize(name) not in pinned]
    if unpinned:
        lines = "\n".join(f"    {name}=={version}" for name, version in unpinned)
        names = ", ".join(name for name, _ in unpinned)
        raise BuildError(
            f"{shown(requirements.path)}: the pinned packages also need {names}, which it does not pin. "
            f"Add these lines to {REQUIREMENTS_FILE}:\n{lines}"
        )
