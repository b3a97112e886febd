"""`astrid capsule push`: a capsule artifact to an OCI registry, pinned by digest.

stdout carries only the pushed reference by digest (`oci://...@sha256:...`),
for a script or a pin; what happens goes to stderr.
"""

from __future__ import annotations

from pathlib import Path

import click

from astrid.cli.errors import UserError
from astrid.cli.main import capsule


def _say(message: str) -> None:
    click.echo(f"astrid: {message}", err=True)


@capsule.command("push")
@click.argument("artifact", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE")
@click.argument("reference", metavar="oci://HOST[:PORT]/REPO:TAG")
@click.option(
    "--plain-http",
    is_flag=True,
    help="Speak plain HTTP to a registry that is not on loopback (loopback registries always are). Unsafe.",
)
def capsule_push(artifact: Path, reference: str, plain_http: bool) -> None:
    """Push the capsule artifact FILE (NAME-VERSION.capsule) to an OCI registry tag.

    Prints the reference by digest on stdout: pin that one, a tag can move.
    Credentials come from ~/.docker/config.json (`docker login HOST` or
    `oras login HOST`); a registry on localhost, 127.0.0.1 or ::1 is spoken
    to over plain HTTP, any other over HTTPS.
    """
    from astrid.host.identity.oci import OciError, parse_ref, push

    try:
        target = parse_ref(reference)
        size = artifact.stat().st_size
        _say(f"pushing {artifact} ({size} bytes) to {target} ...")
        result = push(artifact, target, plain_http=plain_http)
    except OciError as exc:
        raise UserError(str(exc)) from None
    _say(f"pushed: artifact {result.artifact_digest}, manifest {result.manifest_digest}")
    _say("pin it by digest (the tag can be moved):")
    click.echo(str(result.ref))
