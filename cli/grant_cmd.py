"""`astrid capsule grant` / `revoke`: what the operator lets a capsule reach; `astrid grants list`: all of it.

A capsule's `Capsule.toml` only asks (`[capabilities]`); these commands write
the grants file (`astrid.host.capabilities.grants`). A running server reads
the file on every call, so a grant or a revoke needs no restart.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from astrid.cli.main import capsule, cli

SPEC_HELP = """SPEC is one of:

\b
  fs:MOUNT=PATH      the folder PATH as the read-only mount MOUNT
                     (PATH may hold {principal}: one folder per principal)
  kv                 durable key-value state, one namespace per principal
  http:HOST[:PORT]   outbound https to HOST; http:http://HOST[:PORT] for
                     plain http. Loopback and private addresses are reached
                     only when the grant names the address itself.
  bus:request        ask other capsules over the bus: publish the requests
                     and hear the replies its [publish] and [subscribe]
                     declare (other capsules answer with their own grants).
"""


def grants_option(function: Callable) -> Callable:
    return click.option(
        "--grants",
        "grants_file",
        type=click.Path(path_type=Path, dir_okay=False),
        metavar="FILE",
        default=None,
        help="The grants file (default: $ASTRID_CONFIG_DIR/grants.json, else the user config dir's).",
    )(function)


def grant_store(grants_file: Path | None) -> Any:
    from astrid.host.capabilities.grants import GrantStore
    from astrid.host.settings import default_grants_file

    return GrantStore(grants_file.expanduser() if grants_file is not None else default_grants_file())


def _say(message: str) -> None:
    click.echo(f"astrid: {message}", err=True)


def _capsule_option(help_text: str) -> Callable:
    return click.option(
        "--capsules", "capsule_dirs", multiple=True, type=click.Path(path_type=Path), metavar="PATH", help=help_text
    )


@capsule.command("grant", epilog=SPEC_HELP)
@click.argument("name")
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@_capsule_option("Where to find capsule NAME besides the capsule home (a capsule folder or a parent of many).")
@grants_option
def capsule_grant(name: str, specs: tuple[str, ...], capsule_dirs: tuple[Path, ...], grants_file: Path | None) -> None:
    """Let capsule NAME use what SPEC names, when its manifest asks for it.

    The grant belongs to the capsule found under NAME (in the capsule home and
    the --capsules paths): its publisher's key when it is signed, its folder
    when it is local. Another capsule of the same name gets none of it.
    """
    from astrid.host.capabilities.grants import check_spec

    for spec in specs:
        check_spec(spec)  # every spec is checked before the capsule is looked for or the file is touched
    store = grant_store(grants_file)
    identity, label = _identity_of(name, capsule_dirs)
    for spec in specs:
        granted = store.grant(name, spec, identity)
        _say(f"granted {granted} to {name} (in {store.path})")
        warning = _folder_warning(granted)
        if warning:
            _say(warning)
    if identity is not None:
        _say(f"the grants of {name} belong to {label}")
    else:
        _say(
            f"no capsule named {name} in the capsule home or the --capsules paths: the first capsule named {name} "
            f"that loads takes these grants (pass --capsules PATH to bind them to one now)"
        )
    _say(
        "a running server applies it at once (its next call, its resource lists within a second); "
        "the capsule must also ask for it in its Capsule.toml "
        "([capabilities], or for bus:request the requests and replies in [publish] and [subscribe])"
    )


def _folder_warning(granted: str) -> str | None:
    """One line when the folder of an fs grant is not there (granted anyway: it may be made later)."""
    from astrid.host.capabilities.plugins.fs import PRINCIPAL_PLACEHOLDER

    kind, _, rest = granted.partition(":")
    if kind != "fs":
        return None
    path = rest.partition("=")[2]
    if PRINCIPAL_PLACEHOLDER in path:  # one folder per principal: the folder above them must be there
        parent = path.split(PRINCIPAL_PLACEHOLDER)[0]
        folder = Path(parent if parent.endswith(("/", "\\")) else os.path.dirname(parent) or parent)
        if folder.is_dir():
            return None
        return f"warning: {folder} does not exist (yet): no principal's folder under it can be served until it does"
    if Path(path).is_dir():
        return None
    what = "is not a folder" if Path(path).exists() else "does not exist (yet)"
    return f"warning: {path} {what}: the capsule gets nothing from it until it is a folder"


def _identity_of(name: str, capsule_dirs: tuple[Path, ...]) -> tuple[str | None, str]:
    """The grant identity of the one capsule named `name`, and who it is; (None, "") when there is none.

    Looked for in the --capsules paths first (the operator pointed there), else in the capsule home."""
    from astrid.host.settings import default_capsule_home

    found = _named(name, list(capsule_dirs)) if capsule_dirs else {}
    if not found:
        found = _named(name, [default_capsule_home()])
    if len(found) > 1:
        from astrid.cli.errors import UserError

        listed = "; ".join(sorted(found.values()))
        raise UserError(f"more than one capsule is named {name}: {listed}. Name its folder with --capsules PATH")
    if not found:
        return None, ""
    return next(iter(found.items()))


def _named(name: str, roots: list[Path]) -> dict[str, str]:
    """Grant identity -> who it is, for every loadable capsule named `name` under `roots`."""
    from astrid.host.capsule.discovery import discover_capsules
    from astrid.host.capsule.manifest import ManifestError, load_manifest
    from astrid.host.errors import AstridError
    from astrid.host.identity.trust import TrustStore, default_trust_file
    from astrid.host.identity.vetting import vetter

    vet = vetter(TrustStore(default_trust_file()))
    found: dict[str, str] = {}
    for folder in discover_capsules(roots):
        try:
            if load_manifest(folder).name != name:
                continue
            provenance = vet(folder)
        except (ManifestError, AstridError):
            continue  # it would not load either: nothing to bind to
        found.setdefault(provenance.grant_key(name, folder), f"the capsule at {folder} ({provenance.label()})")
    return found


@cli.group("grants")
def grants_group() -> None:
    """What the operator granted capsules (the grants file)."""


@grants_group.command("list")
@click.option(
    "--capsules",
    "capsule_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="Where to look for the capsules besides the capsule home (a capsule folder or a parent of many).",
)
@grants_option
@click.option("--json", "as_json", is_flag=True, help="One JSON document, for scripts.")
def grants_list(capsule_dirs: tuple[Path, ...], grants_file: Path | None, as_json: bool) -> None:
    """Every capsule's grants, the capsule each is bound to, and whether that capsule is found now.

    Capsules are looked for in the capsule home and the --capsules paths,
    as `astrid mcp serve` finds them.
    """
    import json

    from astrid.host.settings import capsule_paths

    store = grant_store(grants_file)
    granted = store.all()
    found = _capsules_under(capsule_paths(capsule_dirs))
    entries = [_grant_entry(name, granted[name], found) for name in sorted(granted)]
    if as_json:
        click.echo(json.dumps({"grants_file": str(store.path), "capsules": entries}, indent=2))
        return
    if not entries:
        _say(f"no grants in {store.path}; grant with `astrid capsule grant NAME SPEC`")
        return
    _say(f"the grants in {store.path}:")
    for entry in entries:
        for line in _entry_lines(entry):
            click.echo(line)


def _capsules_under(roots: list[Path]) -> list[dict[str, str]]:
    """Every capsule under `roots` a server would load: its name, folder, grant identity and who it is."""
    from astrid.host.capsule.discovery import discover_capsules
    from astrid.host.capsule.manifest import ManifestError, load_manifest
    from astrid.host.errors import AstridError
    from astrid.host.identity.trust import TrustStore, default_trust_file
    from astrid.host.identity.vetting import vetter

    vet = vetter(TrustStore(default_trust_file()))
    found = []
    for folder in discover_capsules(roots):
        try:
            name = load_manifest(folder).name
            provenance = vet(folder)
        except (ManifestError, AstridError):
            continue  # it would not load: no capsule to hold grants
        identity = provenance.grant_key(name, folder)
        found.append({"name": name, "folder": str(folder), "identity": identity, "who": provenance.label()})
    return found


def _grant_entry(name: str, grants: Any, found: list[dict[str, str]]) -> dict[str, Any]:
    """One capsule's line in `grants list --json`."""
    from astrid.host.capabilities.plugins.fs import FS, PRINCIPAL_PLACEHOLDER

    named = [capsule for capsule in found if capsule["name"] == name]
    own = [c for c in named if grants.identity is None or c["identity"] == grants.identity]
    missing = [p for _, p in grants.of(FS) if PRINCIPAL_PLACEHOLDER not in p and not Path(p).is_dir()]
    return {
        "name": name,
        "grants": grants.specs(),
        "identity": grants.identity,  # None: not bound yet, the first capsule of that name to load takes them
        "found": bool(own),
        "capsule": own[0] if own else None,
        "others": [c for c in named if c not in own],  # same name, another identity: they get none of these
        "missing_folders": missing,
    }


def _entry_lines(entry: dict[str, Any]) -> list[str]:
    name = entry["name"]
    lines = [f"{name}: {', '.join(entry['grants']) or 'nothing'}"]
    identity = entry["identity"]
    if identity is None:
        lines.append(f"  bound to: nobody yet (the first capsule named {name} that loads takes these grants)")
    else:
        lines.append(f"  bound to: {identity}")
    capsule = entry["capsule"]
    if capsule is not None:
        lines.append(f"  found: the capsule at {capsule['folder']} ({capsule['who']})")
    elif entry["others"]:
        lines.append(f"  found: no capsule named {name} with this identity")
    else:
        lines.append(f"  found: no capsule named {name} in the capsule home or the --capsules paths")
    for other in entry["others"]:
        lines.append(f"  another capsule named {name}, at {other['folder']} ({other['who']}), gets none of these")
    for folder in entry["missing_folders"]:
        lines.append(f"  warning: the folder {folder} does not exist (yet)")
    return lines


@capsule.command("revoke", epilog="SPEC is fs:MOUNT, kv, http:HOST[:PORT], bus:request, or all.")
@click.argument("name")
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@_capsule_option(
    "Where to find capsule NAME besides the capsule home (as for grant): nothing is revoked unless the grants "
    "of NAME belong to the capsule found there."
)
@grants_option
def capsule_revoke(name: str, specs: tuple[str, ...], capsule_dirs: tuple[Path, ...], grants_file: Path | None) -> None:
    """Take back what SPEC names from capsule NAME.

    The grants of NAME belong to one capsule's identity; with --capsules, only
    when that is the capsule found under NAME there.
    """
    store = grant_store(grants_file)
    if capsule_dirs:
        _say(f"the grants of {name} belong to {_owner_found(store, name, capsule_dirs)}")
    for spec in specs:
        if store.revoke(name, spec):
            _say(f"revoked {spec} from {name}; a running server refuses it from the next call")
        else:
            _say(f"{name} held no grant {spec}; nothing changed")


def _owner_found(store: Any, name: str, capsule_dirs: tuple[Path, ...]) -> str:
    """Who the capsule named `name` under `capsule_dirs` is, when the grants of `name` are its own;
    else the one-line error of a revoke that would take them from another capsule."""
    from astrid.cli.errors import UserError

    identity, label = _identity_of(name, capsule_dirs)
    if identity is None:
        raise UserError(
            f"no capsule named {name} in the --capsules paths or the capsule home: nothing revoked "
            f"(without --capsules, `astrid capsule revoke {name} ...` revokes whatever is granted under that name)"
        )
    bound = store.all().get(name)
    if bound is not None and bound.identity not in (None, identity):
        raise UserError(
            f"the grants of {name} belong to another capsule of that name ({bound.identity}), not to {label}: "
            "nothing revoked (without --capsules, revoke takes them from the one they belong to)"
        )
    return label


def capability_lines(name: str, asked: Any, granted: Any, bus: Any = None) -> list[str]:
    """`capsule list -v`: each capability the manifest asks for, and whether it is granted.

    `bus` is what its `[publish]` and `[subscribe]` declare that needs
    `bus:request` (`astrid.host.contract.bus_asks.BusAsks`; None: nothing)."""
    from astrid.host.capabilities.grants import usable
    from astrid.host.capabilities.registry import capabilities

    lines = [
        f"  {line}"
        for capability in capabilities()
        for line in capability.explain(name, asked.of(capability), granted.of(capability))
    ]
    if bus:
        lines.append(_bus_line(name, bus, granted.bus_request))
    used = set(usable(granted, asked, bus_request=bool(bus)).specs())
    unused = [spec for spec in granted.specs() if spec not in used]
    if unused:
        lines.append(f"  granted but not asked for (unused): {', '.join(unused)}")
    if not lines:
        lines.append("  capabilities: none asked for")
    return lines


def _bus_line(name: str, bus: Any, granted: bool) -> str:
    """The `bus:request` line: what the manifest declares, and whether the operator allows it."""
    from astrid.host.capabilities.grants import BUS_REQUEST, grant_command

    if granted:
        return f"  {BUS_REQUEST} (ask other capsules): granted: {bus.describe()}"
    return (
        f"  {BUS_REQUEST} (ask other capsules): not granted ({grant_command(name, BUS_REQUEST)}); "
        f"refused until then: {bus.describe()}"
    )
