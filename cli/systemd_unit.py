"""`astrid mcp install systemd`: a hardened systemd service unit for `astrid mcp serve --http`.

The unit is self-contained: the `[serve]` settings of astrid.toml become flags of
its ExecStart (paths made absolute), so the service reads no file its user does
not own (astrid refuses a config, token or grants file owned by another user).
Run the command again with `--force` after changing astrid.toml.

It runs as a dedicated system user (default `astrid`), not `DynamicUser=yes`: the
token, grants and trust files are owner-only, and the operator manages them as
that user (`sudo -u astrid ... astrid mcp token add NAME`), which needs a stable uid.
Everything the server writes lives in two folders systemd creates for that user:
the state folder (`/var/lib/astrid`: capsule home, kv state, config files) and
the cache folder (`/var/cache/astrid`: builds, compiled code); the rest of the
file system is read-only (ProtectSystem=strict), home folders are invisible
(ProtectHome=yes) and /tmp is private.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import click

from astrid.cli.errors import UserError
from astrid.host.settings import (
    BUILD_CACHE_ENV,
    CACHE_DIR_ENV,
    CACHE_KEY_ENV,
    CAPSULE_HOME_ENV,
    CONFIG_DIR_ENV,
    DATA_DIR_ENV,
)

STATE = PurePosixPath("/var/lib")
CACHE = PurePosixPath("/var/cache")
# Paths the service cannot see: home folders (ProtectHome=yes) and the host's temp folders (PrivateTmp=yes).
HIDDEN = (PurePosixPath("/home"), PurePosixPath("/root"), PurePosixPath("/run/user"))
PRIVATE = (PurePosixPath("/tmp"), PurePosixPath("/var/tmp"))
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_PLAIN = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
# The sandboxing of the service. Not MemoryDenyWriteExecute: wasmtime compiles capsules to machine code.
HARDENING = """\
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
LockPersonality=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
CapabilityBoundingSet=
SystemCallArchitectures=native
UMask=0077"""


@dataclass(frozen=True)
class Unit:
    """What the unit runs: the astrid command, as whom, under which folder name."""

    command: list[str]  # the absolute astrid command (client_install.astrid_command)
    serve_args: list[str]  # `mcp serve` and its flags
    user: str = "astrid"
    folder: str = "astrid"  # /var/lib/FOLDER, /var/cache/FOLDER
    source: str | None = None  # the astrid.toml the flags came from (a comment)

    def environment(self) -> dict[str, str]:
        state, cache = STATE / self.folder, CACHE / self.folder
        return {
            DATA_DIR_ENV: str(state),
            CAPSULE_HOME_ENV: str(state / "capsules"),
            CONFIG_DIR_ENV: str(state / "config"),
            CACHE_KEY_ENV: str(state / "config" / "compile-cache.key"),
            CACHE_DIR_ENV: str(cache / "components"),
            BUILD_CACHE_ENV: str(cache / "builds"),
            "PYTHONUNBUFFERED": "1",  # log lines reach the journal as they are written
        }

    def text(self) -> str:
        address = _flag_value(self.serve_args, "--http")
        origin = f" from {self.source}" if self.source else ""
        lines = [
            f"# Written by `astrid mcp install systemd`{origin}: write it again (--force) after changing that file.",
            "[Unit]",
            f"Description=astrid MCP server (streamable HTTP on {address})",
            "Documentation=https://github.com/astrid-project/astrid-py/blob/main/docs/operations.md",
            "Wants=network-online.target",
            "After=network-online.target",
            "",
            "[Service]",
            "Type=exec",
            f"User={self.user}",
            f"Group={self.user}",
            "ExecStart=" + " ".join(quote(arg) for arg in [*self.command, *self.serve_args]),
            *(f"Environment={quote(f'{key}={value}')}" for key, value in self.environment().items()),
            "# the only writable folders, created for the user: state (capsules, kv, config files) and cache",
            f"StateDirectory={self.folder}",
            "StateDirectoryMode=0700",
            f"CacheDirectory={self.folder}",
            "CacheDirectoryMode=0700",
            "Restart=on-failure",
            "RestartSec=5s",
            "TimeoutStopSec=30s",
            HARDENING,
            "",
            "[Install]",
            "WantedBy=multi-user.target",
        ]
        return "\n".join(lines) + "\n"

    def unseen_paths(self) -> list[str]:
        """The absolute paths of the command the service cannot see, each with why (warnings)."""
        problems = []
        for arg in [*self.command, *self.serve_args]:
            path = PurePosixPath(arg)
            if not path.is_absolute():
                continue
            if any(path.is_relative_to(root) for root in HIDDEN):
                problems.append(f"{arg}: under a home folder, hidden from the service (ProtectHome=yes)")
            elif any(path.is_relative_to(root) for root in PRIVATE):
                problems.append(f"{arg}: in /tmp, which the service sees as an empty private folder (PrivateTmp=yes)")
        return problems


def serve_flags(command: click.Command, values: dict[str, Any]) -> list[str]:
    """`values` (click parameter name -> value, as astrid.toml gives them) as `command`'s flags, in its order."""
    flags: list[str] = []
    for param in command.params:
        if param.name not in values or not isinstance(param, click.Option):
            continue
        value = values[param.name]
        option = max(param.opts, key=len)
        if param.is_flag:
            if value:
                flags.append(option)
            elif param.secondary_opts:
                flags.append(max(param.secondary_opts, key=len))
            continue
        items: Iterable[Any] = value if param.multiple else [value]
        for item in items:
            flags += [option, str(item)]
    return flags


def quote(arg: str) -> str:
    """One word of ExecStart= or Environment= as systemd reads it: `%` and `$` escaped, quoted when needed.

    A control character is refused: a newline would end the line and start a directive of its own."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in arg):
        raise UserError(f"{arg!r}: a control character (a newline, a tab, ...) cannot be in a systemd unit: rename it")
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if _PLAIN.match(escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _flag_value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1] if flag in args[:-1] else "?"
