"""`--trust FILE` and the trust store it names, shared by the commands that verify signed capsules.

A module of its own so a command can take the option without importing
`trust_cmd` (and attaching `astrid trust ...`) at every start of its group.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def trust_option(function: Callable) -> Callable:
    return click.option(
        "--trust",
        "trust_file",
        type=click.Path(path_type=Path, dir_okay=False),
        metavar="FILE",
        default=None,
        help="The trust file (default: $ASTRID_CONFIG_DIR/trust.json, else the user config dir's).",
    )(function)


def trust_store(trust_file: Path | None) -> Any:
    from astrid.host.identity.trust import TrustStore, default_trust_file

    return TrustStore(trust_file.expanduser() if trust_file is not None else default_trust_file())
