"""`astrid mcp bundle` (capsules as one Claude Desktop bundle, .mcpb) and `astrid mcp serve-bundle` (its server).

The bundle (docs/cli.md, "mcp bundle") is a zip that Claude Desktop installs
with one click:

    manifest.json            the MCP Bundle manifest (cli/bundle_manifest.py)
    pyproject.toml           astrid's run-time dependencies, pinned; astrid from the wheel below
    server/main.py           the entry point: `astrid mcp serve-bundle` on this folder
    server/bundle.json       what each user setting grants to which capsule
    server/publishers.json   the keys of the signed capsules' publishers
    server/wheels/*.whl      astrid-py itself
    capsules/NAME/           each capsule, built (cli/bundle_capsules.py)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import click

from astrid.cli import output
from astrid.cli.errors import UserError
from astrid.cli.main import mcp
from astrid.cli.trust_options import trust_option

SUFFIX = ".mcpb"
# Every file of the bundle gets this time: the same capsules and wheel give the same zip.
ZIP_TIME = (2020, 1, 1, 0, 0, 0)
_BUNDLE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")

MAIN = '''\
"""The entry point of this MCP bundle (made by `astrid mcp bundle`): astrid serves the capsules beside it."""

import sys
from pathlib import Path

from astrid.cli.main import main

main(["mcp", "serve-bundle", str(Path(__file__).resolve().parent.parent), *sys.argv[1:]])
'''


def _say(message: str) -> None:
    output.say(message)


@mcp.command("bundle")
@click.argument("capsules", nargs=-1, metavar="CAPSULE...")
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the bundle here (default: NAME.mcpb in the current folder).",
)
@click.option("--name", default=None, help="The bundle's name (default: astrid-CAPSULE for one capsule, else astrid).")
@click.option("--version", "version", default=None, help="The bundle's version (default: the capsule's for one).")
@click.option("--author", default=None, help="The author Claude Desktop shows (default: the publishers, else astrid).")
@click.option(
    "--wheel",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="The astrid-py wheel to ship (default: built from the astrid checkout running this command).",
)
@trust_option
def mcp_bundle(
    capsules: tuple[str, ...],
    out: Path | None,
    name: str | None,
    version: str | None,
    author: str | None,
    wheel: Path | None,
    trust_file: Path | None,
) -> None:
    """Make a Claude Desktop bundle (.mcpb) serving the CAPSULEs.

    A CAPSULE is a built capsule folder (or a folder of them), a signed
    artifact (.capsule, verified against your trusted publishers), or the
    name of an installed capsule. Claude Desktop installs the bundle with one
    click and asks the user for what the capsules ask: a folder for each
    `fs` mount (read-only, for this bundle only), the hosts of `http`, `kv`.
    The bundle's server uses its own grants and state, never yours. The
    bundle's path goes to stdout, progress to stderr.
    """
    import tempfile

    from astrid.cli.bundle_capsules import collect

    if not capsules:
        raise UserError(
            "name the capsules to bundle: `astrid mcp bundle CAPSULE...` (a folder, a .capsule file, a name)"
        )
    with tempfile.TemporaryDirectory(prefix="astrid-bundle-") as scratch:
        root = Path(scratch) / "bundle"
        bundled = collect(capsules, root / "capsules", trust_file, _say)
        bundle_name = _bundle_name(name, bundled)
        bundle_version = version or (bundled[0].version if len(bundled) == 1 else "1.0.0")
        wheel_name = _ship_wheel(wheel, root / "server" / "wheels", Path(scratch))
        _write_server(root, bundle_name, bundle_version, bundled, author, wheel_name)
        target = out if out is not None else Path(f"{bundle_name}{SUFFIX}")
        _zip(root, target)
    size = target.stat().st_size
    _say(f"wrote {target} ({size / 1_000_000:.1f} MB): open it with Claude Desktop to install it")
    click.echo(str(target))


def _bundle_name(given: str | None, bundled) -> str:
    name = given or (f"astrid-{bundled[0].name}" if len(bundled) == 1 else "astrid")
    if not _BUNDLE_NAME.fullmatch(name):
        raise UserError(f"--name {name!r}: 1-64 characters of a-z, 0-9, _ and -, starting with a letter or digit")
    return name


def _source_checkout() -> Path | None:
    """The astrid-py source folder this astrid runs from (an editable install), if it does."""
    import astrid.host

    root = Path(astrid.host.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "astrid-py"' in pyproject.read_text(encoding="utf-8"):
        return root
    return None


def _ship_wheel(given: Path | None, into: Path, scratch: Path) -> str:
    """Put astrid-py's wheel into the bundle; its path inside the bundle."""
    import shutil
    import subprocess
    import sys

    into.mkdir(parents=True, exist_ok=True)
    if given is None:
        checkout = _source_checkout()
        if checkout is None:
            raise UserError(
                "astrid runs from an installed wheel, not a source checkout: give that wheel with --wheel FILE "
                "(`pip download --no-deps astrid-py` or `pip wheel --no-deps PATH-TO-ASTRID-PY`)"
            )
        _say(f"building the astrid-py wheel from {checkout} ...")
        built = scratch / "wheel"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(built), str(checkout)],
            capture_output=True,
            text=True,
        )
        wheels = sorted(built.glob("astrid_py-*.whl")) if done.returncode == 0 else []
        if not wheels:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel written"]
            raise UserError(f"building the astrid-py wheel failed ({tail[0]}): give one with --wheel FILE")
        given = wheels[0]
    elif not given.name.startswith("astrid_py-") or given.suffix != ".whl":
        raise UserError(f"--wheel {given}: not an astrid-py wheel (astrid_py-VERSION-...whl)")
    shutil.copyfile(given, into / given.name)
    return f"server/wheels/{given.name}"


def _write_server(root: Path, name: str, version: str, bundled, author: str | None, wheel: str) -> None:
    import json

    from astrid.cli import bundle_manifest as made

    settings = made.settings_for(bundled)
    manifest = made.manifest(name, version, bundled, settings, made.author(bundled, author))
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    (root / "pyproject.toml").write_text(made.pyproject(name, version, wheel), encoding="utf-8")
    server = root / "server"
    (server / "main.py").write_text(MAIN, encoding="utf-8")
    (server / "bundle.json").write_text(made.bundle_document(name, settings), encoding="utf-8")
    publishers = [
        {
            "name": capsule.publisher.name,
            "key": capsule.publisher.key,
            "fingerprint": capsule.publisher.fingerprint,
            "namespaces": list(capsule.publisher.namespaces),
            "capsule": capsule.name,
        }
        for capsule in bundled
        if capsule.publisher is not None
    ]
    document = {"publishers": publishers}
    (server / "publishers.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    for setting in settings:
        _say(f"asks the user for {setting.key} ({setting.field['type']}): {setting.field['title']}")


def _zip(root: Path, target: Path) -> None:
    """The bundle folder as a zip, files in name order with one timestamp (reproducible)."""
    import zipfile

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    os.replace(partial, target)


@mcp.command("serve-bundle")
@click.argument("bundle", type=click.Path(file_okay=False, exists=True, path_type=Path), metavar="DIR")
@click.option("--set", "pairs", multiple=True, metavar="KEY=VALUE", help="A setting of the bundle (repeatable).")
def mcp_serve_bundle(bundle: Path, pairs: tuple[str, ...]) -> None:
    """Serve the unpacked bundle in DIR over stdio, as Claude Desktop starts it.

    Its manifest.json runs this through server/main.py with one --set per
    setting the user chose. The grants come from those settings only, into
    the bundle's own config folder; your own grants, trusted keys and
    capsules are not used.
    """
    from astrid.cli.bundle_serve import prepare

    prepare(bundle, pairs)
    os.chdir(bundle.expanduser().resolve())  # no astrid.toml of the caller's working directory applies
    from astrid.cli.main import cli

    cli.main(args=["mcp", "serve"], prog_name="astrid", standalone_mode=True)
