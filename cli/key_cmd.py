"""`astrid key new|list|show`: the Ed25519 keys a publisher signs capsules with.

The private key stays in `$ASTRID_CONFIG_DIR/keys/NAME.key` (mode 0600); the
public key is one line on stdout, the string operators give to `astrid trust
add`. What happens goes to stderr.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from astrid.cli.main import key


def keys_option(function: Callable) -> Callable:
    return click.option(
        "--keys",
        "keys_dir",
        type=click.Path(path_type=Path, file_okay=False),
        metavar="DIR",
        default=None,
        help="The folder of signing keys (default: $ASTRID_CONFIG_DIR/keys, else the user config dir's).",
    )(function)


def key_store(keys_dir: Path | None) -> Any:
    from astrid.host.identity.keys import KeyStore, default_key_dir

    return KeyStore(keys_dir.expanduser() if keys_dir is not None else default_key_dir())


def _say(message: str) -> None:
    click.echo(f"astrid: {message}", err=True)


@key.command("new")
@click.argument("name")
@keys_option
def key_new(name: str, keys_dir: Path | None) -> None:
    """Make the signing key pair NAME and print its public key.

    The private key is saved, readable by you only, and never overwritten.
    Give the printed public key to the operators who install your capsules:
    they trust it with `astrid trust add PUBKEY --publisher NAME`.
    """
    store = key_store(keys_dir)
    public = store.new(name)
    click.echo(public.text)
    _say(f"key {name!r} saved in {store.path(name)} (private: keep it to yourself)")
    _say(f"fingerprint {public.fingerprint}")
    _say(f"sign with `astrid capsule sign FILE --key {name}`; operators trust the public key above with")
    _say(f"`astrid trust add {public.text} --publisher YOUR-NAME`")


@key.command("list")
@keys_option
def key_list(keys_dir: Path | None) -> None:
    """List your signing keys: name, fingerprint (shortened) and public key."""
    store = key_store(keys_dir)
    keys = store.keys()
    if not keys:
        _say(f"no signing keys in {store.folder}: make one with `astrid key new NAME`")
        return
    width = max(len(name) for name, _ in keys)
    for name, public in keys:
        click.echo(f"{name:<{width}}  {public.short}  {public.text}")


@key.command("show")
@click.argument("name")
@keys_option
def key_show(name: str, keys_dir: Path | None) -> None:
    """Print the public key of NAME (for `astrid trust add`); its full fingerprint goes to stderr."""
    public = key_store(keys_dir).load(name).public
    click.echo(public.text)
    _say(f"fingerprint {public.fingerprint}")
