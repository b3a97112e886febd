"""`astrid capsule pack|sign|verify`: a built capsule as one signed file.

`pack` makes `NAME-VERSION.capsule` from a built capsule folder, `sign` adds
the publisher's signature to it, `verify` checks one the way install does
(`astrid.host.identity`). stdout carries only the result (the file written,
or what `verify` found); what happens goes to stderr.
"""

from __future__ import annotations

from pathlib import Path

import click

from astrid.cli.key_cmd import key_store, keys_option
from astrid.cli.main import capsule
from astrid.cli.trust_cmd import trust_option, trust_store


def _say(message: str) -> None:
    click.echo(f"astrid: {message}", err=True)


def _size(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB" if size >= 1_000_000 else f"{size / 1000:.1f} KB"


@capsule.command("pack")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False), default=".", metavar="DIR")
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the artifact here (default: NAME-VERSION.capsule in the current folder).",
)
def capsule_pack(folder: Path, out: Path | None) -> None:
    """Pack the built capsule in DIR into one artifact file.

    The file (NAME-VERSION.capsule) holds its Capsule.toml, its component and
    metadata.json (digests, imports, capabilities, topics, namespaces). The
    same built capsule always gives the same bytes. Sign the file with
    `astrid capsule sign FILE --key NAME` before you hand it out.
    """
    from astrid.host.identity.artifact import (
        ArtifactError,
        Metadata,
        default_artifact_name,
        pack_capsule,
        read_artifact,
        write_file,
    )

    data = pack_capsule(folder)
    artifact = read_artifact(data)
    metadata = Metadata.decode(artifact.metadata)
    target = out if out is not None else Path(default_artifact_name(metadata))
    try:
        existing = read_artifact(target.read_bytes()) if target.is_file() else None
    except (OSError, ArtifactError):
        existing = None
    if existing is not None and existing.with_signature(None) == artifact and existing.signature is not None:
        _say(f"{target} already holds this capsule, signed; left as it is")
    else:
        write_file(target, data)
        digest = metadata.component_sha256
        _say(f"packed {metadata.name} {metadata.version} ({_size(len(data))}, component sha256:{digest})")
        _say(f"unsigned: sign it with `astrid capsule sign {target} --key NAME`")
    click.echo(str(target))


@capsule.command("sign")
@click.argument("artifact_file", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE")
@click.option("--key", "key_name", required=True, metavar="NAME", help="The signing key (`astrid key new NAME`).")
@click.option("--replace", is_flag=True, help="Replace the signature of another key.")
@keys_option
def capsule_sign(artifact_file: Path, key_name: str, replace: bool, keys_dir: Path | None) -> None:
    """Sign the capsule artifact FILE with your key NAME.

    FILE is rewritten in place, atomically. The signature covers metadata.json, which pins the component and the
    manifest by sha256: any change to the file afterwards is refused.
    """
    from astrid.host.identity.artifact import read_file, write_file
    from astrid.host.identity.signing import sign_artifact

    signing_key = key_store(keys_dir).load(key_name)
    signed = sign_artifact(read_file(artifact_file), signing_key, replace=replace, source=str(artifact_file))
    write_file(artifact_file, signed)
    public = signing_key.public
    _say(f"signed {artifact_file} with key {key_name} (fingerprint {public.fingerprint})")
    _say(f"operators who trust you run `astrid trust add {public.text} --publisher YOUR-NAME` once")


@capsule.command("verify")
@click.argument("artifact_file", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE")
@click.option("--allow-unsigned", is_flag=True, help="Accept an artifact with no signature (its publisher is unknown).")
@trust_option
def capsule_verify(artifact_file: Path, allow_unsigned: bool, trust_file: Path | None) -> None:
    """Check the capsule artifact FILE as install would.

    Shows who published it and what it asks for. Nothing is unpacked or written. Fails unless a trusted key signed it,
    every digest matches, the metadata states what Capsule.toml asks, and the
    capsule's namespaces are free or its publisher's.
    """
    from astrid.host.identity.artifact import read_file
    from astrid.host.identity.signing import verify_artifact

    store = trust_store(trust_file)
    data = read_file(artifact_file)
    verified = verify_artifact(data, store, allow_unsigned=allow_unsigned, source=str(artifact_file)).capsule
    click.echo(f"{verified.name} {verified.version}")
    click.echo(f"  signed by: {verified.signer_text()}")
    click.echo(f"  component: {verified.digest}")
    click.echo(f"  imports: {', '.join(verified.imports) or 'none'}")
    click.echo(f"  capabilities: {', '.join(verified.capabilities.specs()) or 'none'}")
    click.echo(f"  publish: {', '.join(verified.publish) or 'none'}")
    click.echo(f"  subscribe: {', '.join(verified.subscribe) or 'none'}")
    for namespace in verified.namespaces:
        owner = store.owner_of(namespace)
        state = f"owned by {owner}" if owner else "free: the first install claims it"
        click.echo(f"  namespace {namespace}: {state}")
    if not verified.namespaces:
        click.echo("  namespaces: none")
