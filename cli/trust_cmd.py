"""`astrid trust add|list|remove`: whose signed capsules this machine accepts.

The trust file (`astrid.host.identity.trust`) keeps the trusted publishers'
public keys and the URI namespaces each publisher owns (the first trusted
publisher to install a capsule claiming a namespace owns it). Removing a
publisher keeps its namespaces reserved for it unless `--release`.
"""

from __future__ import annotations

from pathlib import Path

import click

from astrid.cli.main import trust
from astrid.cli.trust_options import trust_option, trust_store


def _say(message: str) -> None:
    click.echo(f"astrid: {message}", err=True)


@trust.command("add")
@click.argument("pubkey", metavar="PUBKEY")
@click.option("--publisher", required=True, metavar="NAME", help="Who this key speaks for (your name for them).")
@click.option(
    "--another-key",
    is_flag=True,
    help="NAME is trusted already: trust this key for NAME too (a new key, before the old one goes).",
)
@trust_option
def trust_add(pubkey: str, publisher: str, another_key: bool, trust_file: Path | None) -> None:
    """Accept capsules signed by PUBKEY (`ed25519:...`, as `astrid key new` prints it) as publisher NAME.

    Compare the key's fingerprint with the one the publisher gives you before
    you trust it: capsules it signs install and run here.
    """
    store = trust_store(trust_file)
    added = store.add(pubkey, publisher, another_key=another_key)
    if not added.new:
        _say(f"key {added.key.short} is already trusted as publisher {publisher}; nothing changed")
        return
    _say(f"trusted key {added.key.fingerprint} as publisher {publisher} (in {store.path})")
    if added.reserved:
        _say(f"{publisher} owns its reserved namespaces again: {', '.join(added.reserved)}")


@trust.command("list")
@trust_option
def trust_list(trust_file: Path | None) -> None:
    """List the trusted publishers: their keys (fingerprint and public key) and the namespaces they own."""
    store = trust_store(trust_file)
    publishers = store.publishers()
    if not publishers:
        _say(f"no trusted publishers in {store.path}: add one with `astrid trust add PUBKEY --publisher NAME`")
        return
    claims = {claim.namespace: claim for claim in store.namespaces()}
    for publisher in publishers:
        if publisher.trusted:
            click.echo(publisher.name)
        else:
            click.echo(
                f"{publisher.name} (not trusted; its namespaces stay reserved: `astrid trust remove "
                f"{publisher.name} --release` frees them)"
            )
        for public in publisher.keys:
            click.echo(f"  key {public.short}  {public.text}")
        for namespace in publisher.namespaces:
            capsule = claims[namespace].capsule
            click.echo(f"  namespace {namespace}" + (f"  (first installed by {capsule})" if capsule else ""))


@trust.command("remove")
@click.argument("name")
@click.option("--key", "key_prefix", metavar="FINGERPRINT", help="Remove only this key of NAME (8+ hex digits).")
@click.option("--release", is_flag=True, help="Also free NAME's namespaces: another publisher may claim them.")
@trust_option
def trust_remove(name: str, key_prefix: str | None, release: bool, trust_file: Path | None) -> None:
    """Stop trusting publisher NAME (or one of its keys).

    Capsules it signed no longer install, nor load. Its namespaces stay
    reserved for it (no other publisher can take them, and trusting NAME again
    gives them back) unless you add --release.
    """
    store = trust_store(trust_file)
    removed = store.remove(name, key=key_prefix, release=release)
    for public in removed.keys:
        _say(f"removed key {public.short} of publisher {name}")
    still_trusted = bool(store.current().publishers.get(name))
    if still_trusted:
        _say(f"{name} is still trusted with its other keys")
    elif removed.keys:
        _say(f"{name} is no longer trusted: capsules it signed no longer install or load")
    if removed.released:
        _say(f"released {name}'s namespaces: {', '.join(removed.released)}")
    if removed.reserved and not still_trusted:
        _say(
            f"{name}'s namespaces stay reserved: {', '.join(removed.reserved)} "
            f"(`astrid trust remove {name} --release` frees them)"
        )
