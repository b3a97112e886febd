"""Client entries for `astrid mcp serve`, and `astrid mcp install CLIENT`: merged into the client's own config file.

An entry starts the server the way this shell would: the absolute astrid
command, the options given, `--config FILE` (absolute) when a config file was
used, and the environment astrid's paths depend on (the `ASTRID_*` settings
and the `XDG_*` base dirs platformdirs reads), because clients start servers
with a minimal environment.

Install reads the client's JSON file, refuses one that is not a JSON object
(or whose server table is not one) without touching it, and changes nothing
when the entry is already there as it would write it. Otherwise it keeps a
copy of the previous file (`FILE.bak-YYYYMMDD-HHMMSS`), sets the one entry,
leaves every other server and key as they were, and replaces the file
atomically (through a symlink: the file it points to). An entry of the same
name that differs is replaced only with `--replace`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Any
from urllib.parse import urlsplit

from astrid.cli.errors import UserError
from astrid.host.settings import PATH_SETTINGS

# The base dirs platformdirs reads on Linux (and the BSDs): the config dir (grants,
# tokens, astrid.toml), the data dir (capsule home, kv), the cache dir (compiled code).
XDG_SETTINGS = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")
CARRIED_ENV = (*PATH_SETTINGS, *XDG_SETTINGS)
TOKEN_PLACEHOLDER = "Bearer <token>"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what every client takes (Claude Code is the strictest)


# -- the entry -----------------------------------------------------------------------------------


def astrid_command() -> list[str]:
    """An absolute command that starts this astrid, whatever the client's cwd and PATH."""
    candidate = Path(sys.executable).parent / ("astrid.exe" if os.name == "nt" else "astrid")
    if candidate.is_file():
        return [str(candidate)]
    return [str(Path(sys.executable).resolve()), "-P", "-m", "astrid.cli.main"]  # -P: the cwd is no module path


def carried_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings of this shell a server started by a client must see too, paths made absolute."""
    environ = os.environ if environ is None else environ
    env = {}
    for key in CARRIED_ENV:
        value = environ.get(key)
        if value:
            env[key] = os.path.abspath(os.path.expanduser(value))
    return env


def server_entry(
    capsule_dirs: list[Path], principal: str | None, resource_tools: bool = False, config_file: Path | None = None
) -> dict[str, Any]:
    """`{"command", "args", "env"}` of `astrid [--config FILE] mcp serve ...` (paths absolute)."""
    command, *prefix = astrid_command()
    args = [*prefix]
    if config_file is not None:
        args += ["--config", str(config_file)]
    args += ["mcp", "serve"]
    for path in capsule_dirs:
        args += ["--capsules", str(path)]
    if principal:
        args += ["--principal", principal]
    if resource_tools:
        args.append("--resource-tools")
    return {"command": command, "args": args, "env": carried_env()}


def dev_entry(folder: Path, principal: str | None) -> dict[str, Any]:
    """`{"command", "args", "env"}` of `astrid capsule dev FOLDER ...` (the folder absolute)."""
    command, *prefix = astrid_command()
    args = [*prefix, "capsule", "dev", str(folder)]
    if principal:
        args += ["--principal", principal]
    return {"command": command, "args": args, "env": carried_env()}


def http_entry(url: str) -> dict[str, Any]:
    """A remote `astrid mcp serve --http` (the token stays a placeholder)."""
    return {"type": "http", "url": url, "headers": {"Authorization": TOKEN_PLACEHOLDER}}


def check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"--http {url!r}: give the server's URL, e.g. https://mcp.example.com/mcp")


def default_name(capsule_dirs: list[Path], http_url: str | None = None) -> str:
    """`astrid` plus what tells entries apart: the capsule folders' names, or the remote server's host.

    `--capsules ~/notes` -> `astrid-notes`; `--http https://mcp.example.com/mcp`
    -> `astrid-mcp-example-com`; neither (the capsule home) -> `astrid`.
    """
    if http_url is not None:
        parts = [urlsplit(http_url).netloc.rpartition("@")[2]]
    else:
        parts = [path.name for path in capsule_dirs]
    words = [word for word in (re.sub(r"[^A-Za-z0-9_]+", "-", part).strip("-") for part in parts) if word]
    return "-".join(["astrid", *words])[:64].rstrip("-")


def check_name(name: str) -> None:
    if not NAME_PATTERN.match(name):
        raise UserError(f"--name {name!r}: use 1-64 letters, digits, '-' or '_' (what every client accepts)")


# -- the clients ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Client:
    key: str  # the CLIENT argument
    title: str
    servers_key: str  # where the entries live in the file
    stdio_type: bool  # whether a stdio entry says "type": "stdio"
    http_type: bool | None  # remote entries: with "type": "http", without it, or None: not in the file
    after: str  # what to do once the file changed

    def entry(self, entry: dict[str, Any]) -> dict[str, Any]:
        """`entry` (from server_entry or http_entry) in this client's shape."""
        if "url" in entry:
            if self.http_type is None:
                raise UserError(
                    f"{self.title} takes remote servers in its app, not in its config file: "
                    "add the URL under Settings > Connectors (or install the entry in another client)"
                )
            shaped = dict(entry)
            if not self.http_type:
                shaped.pop("type")
            return shaped
        return {"type": "stdio", **entry} if self.stdio_type else dict(entry)

    def wrapped(self, name: str, entry: dict[str, Any]) -> dict[str, Any]:
        """What a config file holding only this entry looks like."""
        return {self.servers_key: {name: self.entry(entry)}}

    def config_file(self, platform: str | None = None, environ: Mapping[str, str] | None = None) -> Path:
        """The client's user-wide config file on `platform` (sys.platform's values)."""
        found = client_config_file(self.key, platform or sys.platform, os.environ if environ is None else environ)
        return Path(found)


CLIENTS: dict[str, Client] = {
    client.key: client
    for client in (
        Client("claude-desktop", "Claude Desktop", "mcpServers", False, None, "restart Claude Desktop to start it"),
        Client(
            "claude-code",
            "Claude Code",
            "mcpServers",
            True,
            True,
            "start a new `claude` session; `/mcp` shows it (user scope: every project)",
        ),
        Client("cursor", "Cursor", "mcpServers", False, False, "Cursor picks it up; see Settings > MCP"),
        Client("vscode", "VS Code", "servers", True, True, "VS Code picks it up: `MCP: List Servers` shows it"),
    )
}


def client_config_file(client: str, platform: str, environ: Mapping[str, str]) -> PurePath:
    """Where each client keeps its user-wide MCP servers, on `platform` (sys.platform's values).

    - claude-desktop: macOS `~/Library/Application Support/Claude/claude_desktop_config.json`,
      Windows `%APPDATA%\\Claude\\claude_desktop_config.json`, Linux
      `$XDG_CONFIG_HOME/Claude/claude_desktop_config.json` (default `~/.config`);
    - claude-code: `~/.claude.json` (`$CLAUDE_CONFIG_DIR/.claude.json` when that is set), `mcpServers`
      at the top: user scope;
    - cursor: `~/.cursor/mcp.json` on every platform;
    - vscode: the user profile's `mcp.json`: macOS `~/Library/Application Support/Code/User/mcp.json`,
      Windows `%APPDATA%\\Code\\User\\mcp.json`, Linux `$XDG_CONFIG_HOME/Code/User/mcp.json`.
    """
    path: type[PurePath] = PureWindowsPath if platform == "win32" else PurePosixPath
    home = path(environ.get("USERPROFILE" if platform == "win32" else "HOME") or Path.home())
    if platform == "win32":
        settings = path(environ.get("APPDATA") or home / "AppData" / "Roaming")
    elif platform == "darwin":
        settings = home / "Library" / "Application Support"
    else:
        settings = path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    if client == "claude-desktop":
        return settings / "Claude" / "claude_desktop_config.json"
    if client == "claude-code":
        folder = environ.get("CLAUDE_CONFIG_DIR")
        return (path(os.path.expanduser(folder)) if folder else home) / ".claude.json"
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if client == "vscode":
        return settings / "Code" / "User" / "mcp.json"
    raise KeyError(client)


# -- merging into the file -----------------------------------------------------------------------


@dataclass
class Installed:
    file: Path
    changed: bool  # False: the entry was already there, the file is untouched
    replaced: bool = False  # an entry of that name was there before (and differed)
    created: bool = False  # there was no file
    backup: Path | None = None


def install_entry(
    client: Client, file: Path, name: str, entry: dict[str, Any], *, replace: bool = False, explicit_file: bool = False
) -> Installed:
    """Merge `entry` as `name` into `client`'s config `file` (see the module docstring)."""
    shaped = client.entry(entry)
    target = Path(os.path.realpath(file))  # through a symlink (dotfiles): the file it points to
    if not target.parent.is_dir():
        if not explicit_file:
            raise UserError(
                f"{target.parent} does not exist: is {client.title} installed? Start it once, "
                "or pass --config-file PATH"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
    before = _read_bytes(target)
    config = _parse(client, target, before)
    servers = config.setdefault(client.servers_key, {})
    existing = servers.get(name)
    if existing == shaped:
        return Installed(target, changed=False)
    if existing is not None and not replace:
        raise UserError(
            f"{target} already has a server named {name!r} that differs: pass --name OTHER for a second entry, "
            "or --replace to overwrite it"
        )
    servers[name] = shaped
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    backup = _backup(target) if before is not None else None
    if _read_bytes(target) != before:  # the client (or anyone) wrote it meanwhile: never lose their change
        raise UserError(f"{target} changed while astrid was installing: run the command again")
    _write_atomic(target, text.encode("utf-8"))
    return Installed(target, changed=True, replaced=existing is not None, created=before is None, backup=backup)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _parse(client: Client, path: Path, raw: bytes | None) -> dict[str, Any]:
    """The file as a JSON object; anything else is refused with one line, and the file is left as it is."""
    if raw is None or not raw.strip():
        return {}
    untouched = "astrid leaves it untouched: fix it, or add the entry by hand (`astrid mcp config --client "
    untouched += f"{client.key}` prints it)"
    try:
        config = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text; {untouched}") from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); {untouched}"
        ) from None
    if not isinstance(config, dict):
        raise UserError(f"{path} holds a JSON {type(config).__name__}, not an object; {untouched}")
    servers = config.get(client.servers_key, {})
    if not isinstance(servers, dict):
        raise UserError(f"{path}: {client.servers_key!r} is not a JSON object; {untouched}")
    return config


def _backup(path: Path) -> Path:
    """A copy of the file as it was, next to it: FILE.bak-YYYYMMDD-HHMMSS (-2, -3... if taken)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = path.with_name(f"{path.name}.bak-{stamp}")
    counter = 2
    while backup.exists():
        backup = path.with_name(f"{path.name}.bak-{stamp}-{counter}")
        counter += 1
    try:
        shutil.copy2(path, backup)  # the same mode: the file may hold other servers' secrets
    except OSError as exc:
        raise UserError(f"cannot keep a copy of {path} at {backup} ({exc.strerror or exc}); nothing changed") from None
    return backup


def _write_atomic(path: Path, data: bytes) -> None:
    """A temp file in the same folder, fsynced, renamed over `path` (its mode kept; a new file is 0600)."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o600
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise UserError(f"cannot write {path} ({exc.strerror or exc}); it is unchanged") from None
