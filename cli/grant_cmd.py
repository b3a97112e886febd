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
@grants_option
def capsule_grant(name: str, specs: tuple[str, ...], grants_file: Path | None) -> None:
    """Let capsule NAME use what SPEC names, when its manifest asks for it."""
    store = grant_store(grants_file)
    for spec in specs:
        granted = store.grant(name, spec)
        _say(f"granted {granted} to {name} (in {store.path})")
    _say(
        "a running server applies it to the next call; the capsule must also ask for it in its Capsule.toml "
        "([capabilities], or for bus:request the requests and replies in [publish] and [subscribe])"
    )


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
