"""`astrid capsule grant` / `revoke`: what the operator lets a capsule reach.

A capsule's `Capsule.toml` only asks (`[capabilities]`); these commands write
the grants file (`astrid.host.capabilities.grants`). A running server reads
the file on every call, so a grant or a revoke needs no restart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from astrid.cli.main import capsule

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


@capsule.command("grant", epilog=SPEC_HELP)
@click.argument("name")
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@click.option(
    "--capsules",
    "capsule_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="Where to find capsule NAME besides the capsule home (a capsule folder or a parent of many).",
)
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
    if identity is not None:
        _say(f"the grants of {name} belong to {label}")
    else:
        _say(
            f"no capsule named {name} in the capsule home or the --capsules paths: the first capsule named {name} "
            f"that loads takes these grants (pass --capsules PATH to bind them to one now)"
        )
    _say(
        "a running server applies it to the next call; the capsule must also ask for it in its Capsule.toml "
        "([capabilities], or for bus:request the requests and replies in [publish] and [subscribe])"
    )


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
    from astrid.host.errors import AstridError
    from astrid.host.identity.trust import TrustStore, default_trust_file
    from astrid.host.identity.vetting import vetter
    from astrid.host.kernel.loader import discover_capsules
    from astrid.host.kernel.manifest import ManifestError, load_manifest

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


@capsule.command("revoke", epilog="SPEC is fs:MOUNT, kv, http:HOST[:PORT], bus:request, or all.")
@click.argument("name")
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@grants_option
def capsule_revoke(name: str, specs: tuple[str, ...], grants_file: Path | None) -> None:
    """Take back what SPEC names from capsule NAME."""
    store = grant_store(grants_file)
    for spec in specs:
        if store.revoke(name, spec):
            _say(f"revoked {spec} from {name}; a running server refuses it from the next call")
        else:
            _say(f"{name} held no grant {spec}; nothing changed")


def capability_lines(name: str, asked: Any, granted: Any, bus: Any = None) -> list[str]:
    """`capsule list -v`: each capability the manifest asks for, and whether it is granted.

    `bus` is what its `[publish]` and `[subscribe]` declare that needs
    `bus:request` (`astrid.host.kernel.reserved.BusAsks`; None: nothing)."""
    from astrid.host.capabilities.grants import covers, usable

    lines: list[str] = []
    mounts = granted.mounts
    for mount in asked.fs:
        folder = mounts.get(mount)
        state = f"granted: {folder}" if folder else f"not granted (astrid capsule grant {name} fs:{mount}=PATH)"
        lines.append(f"  fs {mount}: {state}")
    if asked.kv:
        lines.append(f"  kv: {'granted' if granted.kv else f'not granted (astrid capsule grant {name} kv)'}")
    for host in asked.http:
        reaching = [grant.text() for grant in granted.http if covers(host, grant)]
        missing = f"not granted (astrid capsule grant {name} http:{host})"
        state = f"granted: {', '.join(reaching)}" if reaching else missing
        lines.append(f"  http {host}: {state}")
    if bus:
        lines.append(_bus_line(name, bus, granted.bus_request))
    used = set(usable(granted, fs=asked.fs, kv=asked.kv, http=asked.http, bus_request=bool(bus)).specs())
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
