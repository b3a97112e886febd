"""`astrid capsule install|remove`: capsules from artifact files and OCI registries into the capsule home.

Install verifies before it writes anything, refuses a version older than
one of the same publisher installed here before (`--allow-downgrade` lets it
through, loudly), shows the operator what the capsule is and asks for, and
installs on `--yes` or an interactive yes. It records each install in
`capsules.lock`; `install --locked` installs exactly those bytes again (by
digest, signed by the locked key) or nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from astrid.cli.errors import UserError
from astrid.cli.main import capsule
from astrid.cli.trust_cmd import trust_option, trust_store


def _say(message: str) -> None:
    click.echo(f"astrid: {message}", err=True)


def _lock(lock_file: Path | None):
    from astrid.host.identity.lockfile import LockFile, default_lock_file

    return LockFile(lock_file.expanduser() if lock_file is not None else default_lock_file())


def _versions():
    from astrid.host.identity.versions import VersionMemory, default_versions_file

    return VersionMemory(default_versions_file())


def _home() -> Path:
    from astrid.host.settings import default_capsule_home

    return default_capsule_home()


lock_option = click.option(
    "--lock",
    "lock_file",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    default=None,
    help="The lock file (default: $ASTRID_CONFIG_DIR/capsules.lock, else the user config dir's).",
)


@capsule.command("install")
@click.argument("source", required=False, metavar="SOURCE")
@click.option("--yes", "-y", is_flag=True, help="Install without asking (what it asks for is still shown).")
@click.option("--locked", is_flag=True, help="Install exactly what the lock file pins, by digest, and nothing else.")
@click.option("--allow-unsigned", is_flag=True, help="Also install an artifact nobody signed (loudly).")
@click.option(
    "--allow-downgrade",
    is_flag=True,
    help="Also install a version older than one installed before, or the same version with other bytes (loudly).",
)
@click.option("--plain-http", is_flag=True, help="Speak plain HTTP to a registry that is not on loopback.")
@lock_option
@trust_option
def capsule_install(
    source: str | None,
    yes: bool,
    locked: bool,
    allow_unsigned: bool,
    allow_downgrade: bool,
    plain_http: bool,
    lock_file: Path | None,
    trust_file: Path | None,
) -> None:
    """Install a signed capsule from SOURCE into the capsule home.

    SOURCE is an artifact file (`astrid capsule pack`), `oci://HOST[:PORT]/REPO:TAG`
    or `oci://HOST[:PORT]/REPO@sha256:DIGEST`. The signature is checked against
    your trusted publishers (`astrid trust add`) before anything is written;
    then you see the publisher, digest, namespaces and what it asks for, and
    approve. A version older than one of the same publisher installed here
    before (or the same version with other bytes) is refused unless
    --allow-downgrade. A registry on localhost is spoken to over plain HTTP,
    any other over HTTPS. A running `astrid mcp serve` picks the capsule up by
    itself.
    """
    from astrid.host.identity.install import fetch, plan_install

    trust, lock, home, versions = trust_store(trust_file), _lock(lock_file), _home(), _versions()
    if locked:
        if source is not None:
            raise UserError("--locked installs what the lock file pins: give no SOURCE with it")
        _install_locked(
            trust,
            lock,
            home,
            versions,
            yes=yes,
            allow_unsigned=allow_unsigned,
            allow_downgrade=allow_downgrade,
            plain_http=plain_http,
        )
        return
    if source is None:
        raise UserError("give a SOURCE (a .capsule file or oci://HOST/REPO:TAG), or --locked")
    _say(f"fetching {source} ...")
    fetched = fetch(source, plain_http=plain_http)
    plan = plan_install(fetched, trust, home, versions, allow_unsigned=allow_unsigned, allow_downgrade=allow_downgrade)
    _approve([plan], yes)
    _install(plan, trust, lock, versions)


def _install_locked(
    trust, lock, home: Path, versions, *, yes: bool, allow_unsigned: bool, allow_downgrade: bool, plain_http: bool
) -> None:
    from astrid.host.identity.install import fetch_locked, installed_as_locked, plan_install

    entries = lock.entries()
    if not entries:
        raise UserError(f"{lock.path} pins no capsules: install some first, or give --lock FILE")
    plans = []
    for entry in entries:
        if installed_as_locked(home / entry.name, entry):
            _say(f"{entry.name} {entry.version}: installed as locked")
            continue
        _say(f"fetching {entry.name} {entry.version} from {entry.source} ...")
        fetched = fetch_locked(entry, allow_unsigned=allow_unsigned, plain_http=plain_http)
        plans.append(
            plan_install(
                fetched,
                trust,
                home,
                versions,
                allow_unsigned=allow_unsigned,
                allow_downgrade=allow_downgrade,
                locked=entry,
            )
        )
    if plans:
        _approve(plans, yes)
        for plan in plans:
            _install(plan, trust, lock, versions)


def _approve(plans, yes: bool) -> None:
    for plan in plans:
        click.echo("", err=True)
        for line in plan.summary():
            click.echo(f"  {line}", err=True)
        click.echo(f"  skills      {_skills_of(plan)}", err=True)
        if not plan.capsule.signed:
            _say("WARNING: this capsule is UNSIGNED (--allow-unsigned): nothing says who wrote it")
        if plan.downgrade is not None:
            _say(
                f"WARNING: this is a DOWNGRADE (--allow-downgrade): {plan.downgrade}; "
                f"the grants of {plan.capsule.name} now apply to this code"
            )
    click.echo("", err=True)
    if yes:
        return
    if not sys.stdin.isatty():
        raise UserError("not installed: add --yes to install without a terminal to ask at")
    if not click.confirm("install?", default=False, err=True):
        raise UserError("not installed")


def _skills_of(plan) -> str:
    """The Agent Skills the component serves (docs/skills.md), asked of it in the sandbox before it is
    installed, from a private copy of its two files; the reply is part of what the operator approves."""
    import tempfile

    from astrid.host.build.skills import declared_skills
    from astrid.host.capsule.manifest import MANIFEST_NAME

    with tempfile.TemporaryDirectory(prefix="astrid-review-") as scratch:
        folder = Path(scratch)
        (folder / MANIFEST_NAME).write_bytes(plan.verified.artifact.manifest)
        (folder / plan.verified.manifest.component_file).write_bytes(plan.verified.artifact.component)
        try:
            uris = declared_skills(folder)
        except Exception as exc:  # the review must still show the rest: it says why instead
            return f"unknown (asking the component failed: {exc})"
    return ", ".join(uris) or "none"


def _install(plan, trust, lock, versions) -> None:
    from astrid.host.identity.install import install

    target = install(plan, trust, lock, versions)
    capsule = plan.capsule
    _say(f"installed {capsule.name} {capsule.version} into {target} ({capsule.signer_text()})")
    asks = capsule.capabilities.specs()
    if asks:
        _say(f"it asks for {', '.join(asks)}: grant what you agree to with `astrid capsule grant {capsule.name} ...`")


@capsule.command("remove")
@click.argument("name")
@lock_option
def capsule_remove(name: str, lock_file: Path | None) -> None:
    """Remove the installed capsule NAME from the capsule home (and the lock file).

    Its publisher keeps the namespaces it claimed; its grants stay until you
    revoke them (`astrid capsule revoke NAME ...`).
    """
    from astrid.host.identity.install import remove_installed

    folder = remove_installed(_home(), name, _lock(lock_file))
    _say(f"removed {name} ({folder})")
