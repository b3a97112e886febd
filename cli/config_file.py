"""`astrid.toml`: the settings of `astrid mcp serve` in a file, so a client's entry need not carry them as flags.

Which file: `astrid --config FILE ...`, else `astrid.toml` in the working
directory, else `astrid.toml` in the user config dir (`$ASTRID_CONFIG_DIR`,
else the platform's, e.g. `~/.config/astrid`). Only the first one found is
read. Its `[serve]` table holds the long options of `astrid mcp serve`
(`capsules`, `principal`, `http`, `tokens`, ...; `[serve.http-limit]` for
`--http-limit NAME=VALUE`), and becomes click's `default_map` for that
command: one code path for a value from the file and one from a flag, and a
flag given on the command line wins (`--capsules` replaces the file's list;
`--http-limit` overrides the file's limit of the same name).

A relative path in the file is relative to the file's folder. A key astrid
does not know, or a value of the wrong type, is an error of one line naming
the file, the key and the fix. On POSIX a file owned by another user, or one
anyone may write to, is refused: it decides what is served and to whom.
"""

from __future__ import annotations

import os
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from astrid.cli.errors import UserError

CONFIG_NAME = "astrid.toml"
SECTION = "serve"
# Where the context keeps the file `astrid mcp serve` read (ctx.meta is shared along the chain).
META_KEY = "astrid.config_file"


@dataclass(frozen=True)
class Key:
    """One key of `[serve]`: the click parameter it fills, what it holds, an example (the fix in errors)."""

    param: str
    kind: str  # str, principal, bool, count (int >= 1), workers (count or "auto"), address, strs,
    # folders, file, path, limits
    example: str


KEYS: dict[str, Key] = {
    "capsules": Key("capsule_dirs", "folders", 'capsules = ["capsules", "~/more-capsules"]'),
    "principal": Key("principal", "principal", 'principal = "alice"'),
    "watch": Key("watch", "bool", "watch = false"),
    "resource-tools": Key("resource_tools", "bool", "resource-tools = true"),
    "http": Key("http_address", "address", 'http = "127.0.0.1:8000"'),
    "tokens": Key("token_file", "path", 'tokens = "tokens.json"'),
    "jwks": Key("jwks", "str", 'jwks = "https://login.example.com/.well-known/jwks.json"'),
    "issuer": Key("issuer", "str", 'issuer = "https://login.example.com/"'),
    "audience": Key("audience", "str", 'audience = "astrid"'),
    "principal-claim": Key("principal_claim", "str", 'principal-claim = "email"'),
    "no-auth": Key("no_auth", "bool", "no-auth = true"),
    "allowed-origins": Key("allowed_origins", "strs", 'allowed-origins = ["https://app.example.com"]'),
    "tls-cert": Key("tls_cert", "file", 'tls-cert = "cert.pem"'),
    "tls-key": Key("tls_key", "file", 'tls-key = "key.pem"'),
    "max-sandboxes": Key("max_sandboxes", "count", "max-sandboxes = 256"),
    "http-limit": Key("http_limits", "limits", "[serve.http-limit] then e.g. sessions-per-principal = 8"),
    "bus": Key("bus_url", "str", 'bus = "nats://127.0.0.1:4222"'),
    "nats-creds": Key("nats_creds", "file", 'nats-creds = "astrid.creds"'),
    "access-log": Key("access_log", "bool", "access-log = false"),
    "otel": Key("otel", "bool", "otel = true"),
    "metrics": Key("metrics_address", "address", 'metrics = "127.0.0.1:9464"'),
    "metrics-public": Key("metrics_public", "bool", "metrics-public = true"),
    "log-format": Key("log_format", "str", 'log-format = "json"'),
    "client-trace": Key("client_trace", "str", 'client-trace = "link"'),
    "workers": Key("workers", "workers", 'workers = "auto"'),
}
# Settings that only an HTTP server uses (stdio ignores them when they come from the file).
HTTP_ONLY = (
    "access-log",
    "tokens",
    "jwks",
    "issuer",
    "audience",
    "principal-claim",
    "no-auth",
    "allowed-origins",
    "tls-cert",
    "tls-key",
    "max-sandboxes",
    "http-limit",
)


@dataclass
class ConfigFile:
    """The file read and what it sets: `values` is click's default_map for `astrid mcp serve`."""

    path: Path  # absolute
    found: str  # how it was found, for the stderr line
    values: dict[str, Any] = field(default_factory=dict)  # click parameter name -> value
    keys: dict[str, str] = field(default_factory=dict)  # click parameter name -> the key in the file

    def key_of(self, param: str) -> str:
        return self.keys.get(param, param)

    @property
    def capsule_dirs(self) -> list[Path]:
        return [Path(p) for p in self.values.get("capsule_dirs", ())]


def default_config_file() -> Path:
    """`astrid.toml` in the user config dir (`$ASTRID_CONFIG_DIR`, else e.g. `~/.config/astrid`)."""
    from astrid.host.settings import config_dir

    return config_dir() / CONFIG_NAME


def find_config_file(explicit: Path | None) -> tuple[Path, str] | None:
    """The file to read and how it was found: `--config FILE`, ./astrid.toml, the user config dir's; or None."""
    if explicit is not None:
        path = Path(os.path.abspath(explicit.expanduser()))
        if not path.is_file():
            raise UserError(f"--config {explicit}: no such file (write one: docs/cli.md shows an astrid.toml)")
        return path, "--config FILE"
    here = Path.cwd() / CONFIG_NAME
    if here.is_file():
        return here.absolute(), "found in the working directory"
    home = default_config_file()
    if home.is_file():
        return Path(os.path.abspath(home)), "found in the user config dir"
    return None


def explicit_config_file() -> Path | None:
    """`astrid --config FILE` of the command being run, if given."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return obj.get("config_file") if isinstance(obj, dict) else None


def load_config(explicit: Path | None = None) -> ConfigFile | None:
    """The config file of this run, checked; None when there is none."""
    found = find_config_file(explicit)
    if found is None:
        return None
    path, how = found
    _check_owner(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc}): fix that line") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read it ({exc})") from None
    return parse_config(data, path, how)


def parse_config(data: dict[str, Any], path: Path, how: str = "--config FILE") -> ConfigFile:
    """Check every key and value of a parsed astrid.toml and turn `[serve]` into click parameter values."""
    config = ConfigFile(path=path, found=how)
    for key in data:
        if key == SECTION:
            continue
        if key in KEYS:
            raise UserError(f"{path}: {key} belongs in the [serve] table: put a line [serve] above it")
        raise UserError(
            f"{path}: unknown table or key {key!r}{_guess(key, [SECTION])}: astrid.toml has one table, [serve]"
        )
    serve = data.get(SECTION, {})
    if not isinstance(serve, dict):
        raise UserError(f"{path}: serve must be a table: write [serve] on a line of its own, the settings below it")
    for key, value in serve.items():
        spec = KEYS.get(key)
        if spec is None:
            raise UserError(
                f"{path}: unknown key {key!r} in [serve]{_guess(key, list(KEYS))}: "
                f"the keys are the long options of `astrid mcp serve`: {', '.join(KEYS)}"
            )
        config.values[spec.param] = _value(path, key, spec, value)
        config.keys[spec.param] = key
    return config


def _guess(key: str, known: list[str]) -> str:
    import difflib  # here: only a mistake in the file needs it

    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _value(path: Path, key: str, spec: Key, value: Any) -> Any:
    def wrong(expected: str) -> UserError:
        return UserError(f"{path}: [serve] {key} = {_show(value)}: expected {expected}; write e.g. {spec.example}")

    kind = spec.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise wrong("true or false")
        return value
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise wrong("a string in quotes")
        return value
    if kind == "principal":
        from astrid.host.auth.principal import principal_problem

        if not isinstance(value, str):
            raise wrong("a user name in quotes")
        problem = principal_problem(value)
        if problem:
            raise UserError(f"{path}: [serve] {key} = {_show(value)}: {problem}; write e.g. {spec.example}")
        return value
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise wrong("a whole number of at least 1")
        return value
    if kind == "workers":  # a count, or "auto"
        if isinstance(value, str) and value.strip().lower() == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise wrong('a whole number of at least 1, or "auto"')
        return value
    if kind == "address":
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise wrong('"[HOST:]PORT" in quotes')
        _check_address(path, key, spec, value)
        return value
    if kind == "strs":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            raise wrong("a list of strings")
        return list(value)
    if kind == "folders":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            raise wrong("a list of folders in quotes")
        folders = [_path(path, item) for item in value]
        for item, folder in zip(value, folders, strict=True):
            if not folder.is_dir():
                raise UserError(
                    f"{path}: [serve] {key}: no such folder {item!r} ({folder}; a relative path is relative to "
                    f"the file's folder): fix the path, or create one with `astrid capsule new NAME`"
                )
        return [str(folder) for folder in folders]
    if kind in ("file", "path"):
        if not isinstance(value, str) or not value:
            raise wrong("a file name in quotes")
        file = _path(path, value)
        if kind == "file" and not file.is_file():
            raise UserError(
                f"{path}: [serve] {key}: no such file {value!r} ({file}; a relative path is relative to "
                "the file's folder): fix the path"
            )
        return str(file)
    if kind == "limits":
        return _limits(path, key, spec, value)
    raise AssertionError(kind)  # pragma: no cover - KEYS names only the kinds above


def _path(config: Path, value: str) -> Path:
    """`value` from the file: `~` expanded, relative to the file's folder."""
    return Path(os.path.abspath(config.parent / Path(value).expanduser()))


def _check_address(path: Path, key: str, spec: Key, value: str) -> None:
    from astrid.cli.http_serve import parse_address

    try:
        parse_address(value)
    except UserError:
        raise UserError(
            f"{path}: [serve] {key} = {_show(value)}: give [HOST:]PORT with a port of 0-65535; "
            f"write e.g. {spec.example}"
        ) from None


def _limits(path: Path, key: str, spec: Key, value: Any) -> list[str]:
    """`[serve.http-limit]` NAME = number -> the `NAME=VALUE` strings of `--http-limit`, each checked."""
    from astrid.cli.http_limits import limit_names, with_overrides
    from astrid.host.limits import HttpLimits

    names = [part.partition("=")[0] for part in limit_names().split(", ")]
    if not isinstance(value, dict):
        raise UserError(f"{path}: [serve] {key} must be a table: write {spec.example}")
    overrides = []
    for name, number in value.items():
        if name not in names:
            raise UserError(
                f"{path}: [serve.{key}] unknown limit {name!r}{_guess(name, names)}: the limits are {', '.join(names)}"
            )
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise UserError(
                f"{path}: [serve.{key}] {name} = {_show(number)}: expected a number (seconds for timeouts); "
                "write e.g. sessions-per-principal = 8"
            )
        override = f"{name}={number}"
        try:
            with_overrides(HttpLimits(), [override])
        except UserError as exc:
            reason = exc.format_message().split(": ", 1)[-1]
            raise UserError(f"{path}: [serve.{key}] {name} = {_show(number)}: {reason}") from None
        overrides.append(override)
    return overrides


def _show(value: Any) -> str:
    """A value as TOML would write it (for errors)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, dict):
        return "{...}"
    return repr(value)


def _check_owner(path: Path) -> None:
    """POSIX: the file decides what is served and to whom, so only its owner may have written it."""
    if os.name != "posix":
        return
    info = path.stat()
    if info.st_uid != os.geteuid():
        raise UserError(
            f"{path}: owned by another user (uid {info.st_uid}); astrid reads settings only from your own files: "
            "copy it, or pass --config FILE"
        )
    if info.st_mode & stat.S_IWOTH:
        raise UserError(f"{path}: anyone may write to it; astrid refuses it: chmod o-w {path}")


# -- `astrid mcp serve`: the file as click's default_map ---------------------------------------


class ConfigFileCommand(click.Command):
    """A command whose defaults come from astrid.toml's `[serve]` (click's default_map).

    The file is read when the command's context is made, before its
    parameters are parsed, so a flag on the command line wins over the file.
    With `--help` a broken file is ignored: help still shows.
    """

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            config = load_config(explicit_config_file())
        except UserError:
            if any(arg in ("--help", "-h") for arg in args):
                config = None
            else:
                raise
        if config is not None:
            extra["default_map"] = {**config.values, **(extra.get("default_map") or {})}
        ctx = super().make_context(info_name, args, parent, **extra)
        ctx.meta[META_KEY] = config
        return ctx


def serving_config() -> ConfigFile | None:
    """The config file the running `astrid mcp serve` read, if any."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(META_KEY) if ctx is not None else None


def from_file(param: str) -> bool:
    """Whether the running command's `param` came from the config file (not a flag, not the default)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    return ctx.get_parameter_source(param) is ParameterSource.DEFAULT_MAP


def from_command_line(param: str) -> bool:
    from click.core import ParameterSource

    ctx = click.get_current_context()
    return ctx.get_parameter_source(param) is ParameterSource.COMMANDLINE
