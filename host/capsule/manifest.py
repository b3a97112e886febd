"""`Capsule.toml`: the capsule manifest (upstream's new-style shape).

    [package]            name, version, description, namespaces (the URI
                         prefixes the capsule claims, e.g. ["astrid://notes/"]:
                         the first trusted publisher to install one owns it)
    [[component]]        id, file  (the .wasm, relative to the capsule folder)
    [subscribe]          "topic-pattern" = { wit = "...", handler = "..." }
                         with `handler`: messages on the topic invoke
                         astrid-hook-trigger(handler, payload); without it the
                         entry only grants the subscribe ACL.
    [publish]            "topic-pattern" = { wit = "..." }   (the publish ACL)
    [config]             key = value, read with get-config
    [resources]          families = ["astrid://docs/"]  (optional routing hint:
                         the URI prefixes this capsule can own; reads for other
                         URIs skip it)
    [capabilities]       fs = ["notes"], kv = true, http = ["api.example.com"]
                         (what the capsule asks for, each key a capability
                         of `capabilities/registry.py`; nothing is usable
                         until the operator grants it: docs/capabilities.md)

Unknown tables are an error naming them; names and topics use the bus grammar.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from astrid.host.bus.topics import topic_problem
from astrid.host.capabilities.asks import NOTHING_ASKED, Asks
from astrid.host.errors import ManifestError

MANIFEST_NAME = "Capsule.toml"
# get-config keys starting with this are answered by the host (the sandbox's facts), never by [config].
HOST_CONFIG_PREFIX = "astrid:"
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


MAX_NAMESPACES = 16
MAX_NAMESPACE_CHARS = 256
# scheme://host/ then path segments, each ending in "/": no query, fragment, percent-escape, port or user
_NAMESPACE = re.compile(r"[a-z][a-z0-9+.-]*://[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?/(?:[A-Za-z0-9._~!$&'()*+,;=:@-]+/)*")


def namespace_problem(value: str) -> str | None:
    """Why `value` cannot be a URI namespace (`[package] namespaces`), or None when it can."""
    if len(value) > MAX_NAMESPACE_CHARS:
        return f"longer than {MAX_NAMESPACE_CHARS} characters"
    if not _NAMESPACE.fullmatch(value):
        return (
            "must be an absolute URI prefix ending in '/', like astrid://notes/ "
            "(lowercase scheme and host; no port, query, fragment, %-escape or empty segment)"
        )
    if ".." in value or "/./" in value:
        return "must not hold '.' or '..' segments"
    return None


class Package(_Strict):
    name: str
    version: str = Field(min_length=1)
    description: str | None = None
    namespaces: list[str] = Field(default=[], max_length=MAX_NAMESPACES)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("must be 1-64 characters of [a-z0-9_-], starting with a letter or digit")
        return value

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: list[str]) -> list[str]:
        for namespace in value:
            problem = namespace_problem(namespace)
            if problem:
                raise ValueError(f"namespace {namespace!r} {problem}")
        if len(set(value)) != len(value):
            raise ValueError("lists a namespace twice")
        return value


class ComponentEntry(_Strict):
    id: str
    file: str
    type: str | None = None

    @field_validator("file")
    @classmethod
    def _relative(cls, value: str) -> str:
        path = Path(value)
        if path.is_absolute() or ".." in path.parts:
            raise ValueError("must be a path inside the capsule folder")
        return value


class TopicEntry(_Strict):
    wit: str = "opaque"
    handler: str | None = None
    priority: int | None = None


class ResourceHints(_Strict):
    families: list[str] = []


# What a capsule asks of each host capability, checked by that capability (`capabilities/asks.py`).
CapabilityAsks = Annotated[Asks, BeforeValidator(Asks.parse)]


def _check_patterns(table: dict[str, Any], what: str) -> None:
    for pattern in table:
        problem = topic_problem(pattern, pattern=True)
        if problem:
            raise ValueError(f"[{what}] key {pattern!r}: {problem}")


class Manifest(_Strict):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, arbitrary_types_allowed=True)

    package: Package
    component: list[ComponentEntry] = Field(min_length=1, max_length=1)
    subscribe: dict[str, TopicEntry] = {}
    publish: dict[str, TopicEntry] = {}
    config: dict[str, Any] = {}
    resources: ResourceHints | None = None
    capabilities: CapabilityAsks = NOTHING_ASKED

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        # `"topic" = "<wit-ref>"` is shorthand for `{ wit = "<wit-ref>" }`.
        if isinstance(data, dict):
            for table in ("subscribe", "publish"):
                entries = data.get(table)
                if isinstance(entries, dict):
                    data = {**data, table: {k: {"wit": v} if isinstance(v, str) else v for k, v in entries.items()}}
        return data

    @model_validator(mode="after")
    def _topics(self) -> Manifest:
        _check_patterns(self.subscribe, "subscribe")
        _check_patterns(self.publish, "publish")
        return self

    @model_validator(mode="after")
    def _config_keys(self) -> Manifest:
        reserved = sorted(key for key in self.config if key.startswith(HOST_CONFIG_PREFIX))
        if reserved:
            raise ValueError(
                f"[config] key {reserved[0]!r}: keys starting {HOST_CONFIG_PREFIX!r} are the host's; rename it"
            )
        return self

    @property
    def name(self) -> str:
        return self.package.name

    @property
    def component_file(self) -> str:
        return self.component[0].file

    def handlers(self) -> dict[str, str]:
        """Topic pattern -> handler name, for the entries that bind one."""
        return {pattern: entry.handler for pattern, entry in self.subscribe.items() if entry.handler}

    def config_value(self, key: str) -> str | None:
        """A `[config]` value as get-config returns it: strings raw, the rest as JSON."""
        import json

        if key not in self.config:
            return None
        value = self.config[key]
        return value if isinstance(value, str) else json.dumps(value)


def load_manifest(folder: Path) -> Manifest:
    path = Path(folder) / MANIFEST_NAME
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: not found (a capsule folder needs a {MANIFEST_NAME})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read: {exc}") from None
    return parse_manifest(raw, path)


def parse_manifest(raw: dict[str, Any], path: Path | str = MANIFEST_NAME) -> Manifest:
    unknown = sorted(set(raw) - set(Manifest.model_fields))
    if unknown:
        known = ", ".join(f"[{name}]" for name in Manifest.model_fields)
        raise ManifestError(f"{path}: unknown table(s) {', '.join(unknown)}; allowed: {known}")
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        explained = _explain_structure(raw, path, first["type"], tuple(first["loc"]))
        if explained is not None:
            raise ManifestError(f"{path}: {explained}") from None
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "not a key this table has (check the spelling; docs/capsules.md lists the manifest's keys)"
        raise ManifestError(f"{path}: {where}: {message}") from None


def _suggested_name(raw: dict[str, Any], path: Path | str) -> str:
    """The capsule's name for the lines an error suggests: [package] name, else the folder's name."""
    package = raw.get("package")
    name = package.get("name") if isinstance(package, dict) else None
    if isinstance(name, str) and _NAME.fullmatch(name):
        return name
    folder = Path(path).parent.name.lower()
    return folder if _NAME.fullmatch(folder) else "my-capsule"


def _lines(*lines: str) -> str:
    """TOML lines inside a one-line message: `[package]` / `name = "x"`."""
    return " / ".join(f"`{line}`" for line in lines)


def _explain_structure(raw: dict[str, Any], path: Path | str, kind: str, loc: tuple) -> str | None:
    """A missing or misshapen table or key, named, with the exact lines that fix it (None: not such an error)."""
    name = _suggested_name(raw, path)
    component = ("[[component]]", f'id = "{name}"', f'file = "{name}.wasm"')
    package = ("[package]", f'name = "{name}"', 'version = "0.1.0"')
    if loc == ("component",):
        if kind == "missing":
            return (
                "the [[component]] table is missing (it names the component file `astrid capsule build` writes "
                f"and the host loads). Add these lines: {_lines(*component)}"
            )
        if kind in ("list_type", "dict_type"):
            return (
                "[component] must be written [[component]] (double brackets: an array of tables, with exactly "
                f"one entry). Write: {_lines(*component)}"
            )
        if kind == "too_short":
            return f"[[component]] needs exactly one entry, and it has none. Add: {_lines(*component)}"
        if kind == "too_long":
            return "a capsule has exactly one component: keep one [[component]] table, remove the others"
    if loc == ("package",) and kind == "missing":
        return f"the [package] table is missing. Add these lines: {_lines(*package)}"
    if kind == "missing" and len(loc) >= 2 and loc[0] == "package" and loc[-1] in ("name", "version"):
        line = package[1] if loc[-1] == "name" else package[2]
        return f"package.{loc[-1]}: [package] has no `{loc[-1]}`. Add this line under [package]: {_lines(line)}"
    if kind == "missing" and len(loc) == 3 and loc[0] == "component" and loc[-1] in ("id", "file"):
        line = component[1] if loc[-1] == "id" else component[2]
        return f"component.{loc[-1]}: [[component]] has no `{loc[-1]}`. Add this line under it: {_lines(line)}"
    return None
