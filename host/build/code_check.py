"""Capsule.toml against app.py: what the manifest binds must be what the SDK serves for the code.

The code is read by importing app.py in a separate, isolated host Python
(`_code_facts.py`: the standard library, the capsule folder, the guest SDK
and the capsule's pinned packages, nothing else), with the SDK's
`Capsule.world()` replaced. Then, both ways:

- resources, families or templates in the code need the describe and read
  topics (`[subscribe]` bound to the SDK's `describe`/`read`, `[publish]` on
  their reply topics);
- templates need the templates and complete topics; bound template topics
  with no template in the code are lines to remove;
- with a `[resources] families` hint, every resource URI, family prefix and
  template literal prefix must lie under one of its prefixes (reads of any
  other URI never reach the capsule);
- a `[subscribe]` entry binding a handler the code does not define
  (`@capsule.on`) is a line to remove.

Each problem names the exact lines to add or remove. Warnings (not errors):
an `@capsule.on` handler no entry binds, and URIs outside `[package]
namespaces`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from astrid.capsules import SDK_DIR
from astrid.host.bus.topics import pattern_matches
from astrid.host.contract.topics import (
    COMPLETE_REPLY_PREFIX,
    COMPLETE_TOPIC,
    DESCRIBE_REPLY_PREFIX,
    DESCRIBE_TOPIC,
    READ_REPLY_PREFIX,
    READ_REQUEST_TOPIC,
    TEMPLATES_REPLY_PREFIX,
    TEMPLATES_TOPIC,
)
from astrid.host.kernel.manifest import MANIFEST_NAME, Manifest

RUNNER = Path(__file__).resolve().with_name("_code_facts.py")
CODE_TIMEOUT_S = 60.0
RESOURCE_WIT = "astrid-bus:resource@1.0.0"
TEMPLATE_WIT = "astrid-bus:resource-template@1.0.0"
SDK_HANDLERS = ("describe", "read", "templates", "complete")
MAX_NAMED = 4  # URIs named in one problem before "and N more"


@dataclass(frozen=True)
class SdkTopic:
    """A request the SDK answers: the topic it is bound to, the handler, the reply topics it publishes on."""

    topic: str
    handler: str
    wit: str
    reply_prefix: str

    @property
    def subscribe_line(self) -> str:
        return f'"{self.topic}" = {{ wit = "{self.wit}", handler = "{self.handler}" }}'

    @property
    def publish_key(self) -> str:
        return self.reply_prefix + "*"

    @property
    def publish_line(self) -> str:
        return f'"{self.publish_key}" = {{ wit = "{self.wit}" }}'


DESCRIBE = SdkTopic(DESCRIBE_TOPIC, "describe", RESOURCE_WIT, DESCRIBE_REPLY_PREFIX)
READ = SdkTopic(READ_REQUEST_TOPIC, "read", RESOURCE_WIT, READ_REPLY_PREFIX)
TEMPLATES = SdkTopic(TEMPLATES_TOPIC, "templates", TEMPLATE_WIT, TEMPLATES_REPLY_PREFIX)
COMPLETE = SdkTopic(COMPLETE_TOPIC, "complete", TEMPLATE_WIT, COMPLETE_REPLY_PREFIX)


@dataclass(frozen=True)
class TemplateFacts:
    uri_template: str
    literal_prefix: str
    completes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CodeFacts:
    """What the SDK serves for a capsule's code."""

    name: str | None = None
    resources: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    templates: tuple[TemplateFacts, ...] = ()
    handlers: tuple[str, ...] = ()  # @capsule.on names
    sites: dict[str, str] = field(default_factory=dict)  # a URI, prefix or template -> `app.py:12`

    def at(self, what: str) -> str:
        """`what`, followed by where app.py declares it when known: `astrid://x/y (app.py:12)`."""
        site = self.sites.get(what)
        return f"{what} ({site})" if site else what

    @property
    def serves_resources(self) -> bool:
        return bool(self.resources or self.families or self.templates)


@dataclass(frozen=True)
class CodeReading:
    """The outcome of reading the code: `ok` (with facts), `not-sdk` (nothing to check), or `failed`."""

    status: str
    facts: CodeFacts | None = None
    detail: str = ""


@dataclass
class CheckResult:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def read_code(folder: Path, site_packages: Path | None = None, timeout: float = CODE_TIMEOUT_S) -> CodeReading:
    """Import `folder/app.py` in an isolated host Python and report what the SDK will serve for it."""
    folder = Path(folder).resolve()
    with tempfile.TemporaryDirectory(prefix="astrid-code-") as scratch:
        out = Path(scratch) / "facts.json"
        command = [sys.executable, "-I", "-S", "-B", str(RUNNER), str(out), str(folder), str(SDK_DIR.resolve())]
        if site_packages is not None:
            command.append(str(Path(site_packages).resolve()))
        try:
            finished = subprocess.run(
                command, cwd=scratch, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return CodeReading("failed", detail=f"importing app.py took longer than {timeout:.0f} s")
        except OSError as exc:
            return CodeReading("failed", detail=f"cannot start {sys.executable}: {exc.strerror or exc}")
        try:
            result = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            tail = finished.stderr.decode("utf-8", "replace").strip().splitlines()
            why = tail[-1] if tail else f"exit status {finished.returncode}"
            return CodeReading("failed", detail=f"app.py stopped the Python importing it ({why})")
    status = result.get("status")
    if status != "ok":
        return CodeReading(str(status), detail=str(result.get("error") or result.get("detail") or ""))
    raw = result.get("facts") or {}
    templates = tuple(
        TemplateFacts(t["uri_template"], t["literal_prefix"], tuple(t.get("completes", ())))
        for t in raw.get("templates", ())
    )
    facts = CodeFacts(
        name=raw.get("name"),
        resources=tuple(raw.get("resources", ())),
        families=tuple(raw.get("families", ())),
        templates=templates,
        handlers=tuple(raw.get("handlers", ())),
        sites={str(k): str(v) for k, v in (raw.get("sites") or {}).items()},
    )
    return CodeReading("ok", facts)


# -- the check ----------------------------------------------------------------------------------


def check_manifest(manifest: Manifest, facts: CodeFacts, manifest_text: str = "") -> CheckResult:
    """The manifest against what the SDK serves for the code: errors (with the lines to change) and warnings."""
    result = CheckResult()
    _check_topics(manifest, facts, manifest_text, result)
    _check_families(manifest, facts, manifest_text, result)
    _check_handlers(manifest, facts, manifest_text, result)
    _check_namespaces(manifest, facts, result)
    return result


def _reply_sample(topic: SdkTopic, facts: CodeFacts) -> str:
    """A reply topic the SDK publishes on for `topic` (describe and templates: the capsule's folded name)."""
    if topic in (DESCRIBE, TEMPLATES):
        name = facts.name or "capsule"
        folded = "".join(c if ("a" <= c <= "z" or "0" <= c <= "9" or c in "_-") else "-" for c in name.lower())
        return topic.reply_prefix + (folded[:64] or "capsule")
    return topic.reply_prefix + "x"


def _bound(manifest: Manifest, topic: SdkTopic) -> bool:
    return any(
        entry.handler == topic.handler and pattern_matches(pattern, topic.topic)
        for pattern, entry in manifest.subscribe.items()
    )


def _published(manifest: Manifest, topic: SdkTopic, facts: CodeFacts) -> bool:
    sample = _reply_sample(topic, facts)
    return any(pattern_matches(pattern, sample) for pattern in manifest.publish)


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_NAMED])
    return shown + (f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")


def _block(lines: list[str]) -> str:
    return "\n".join(f"    {line}" for line in lines)


def _additions(manifest: Manifest, facts: CodeFacts, needed: tuple[SdkTopic, ...]) -> tuple[list[str], list[str]]:
    """The [subscribe] and [publish] lines missing for `needed`."""
    subscribe = [t.subscribe_line for t in needed if not _bound(manifest, t)]
    publish = [t.publish_line for t in needed if not _published(manifest, t, facts)]
    return subscribe, publish


def _add_text(subscribe: list[str], publish: list[str], manifest: Manifest) -> str:
    parts = []
    if subscribe:
        table = "under [subscribe]" if manifest.subscribe else "a [subscribe] table with"
        parts.append(f"Add {table}:\n{_block(subscribe)}")
    if publish:
        table = "under [publish]" if manifest.publish else "a [publish] table with"
        parts.append(f"{'and ' if parts else 'Add '}{table}:\n{_block(publish)}")
    return "\n".join(parts)


def _check_topics(manifest: Manifest, facts: CodeFacts, text: str, result: CheckResult) -> None:
    if facts.serves_resources:
        subscribe, publish = _additions(manifest, facts, (DESCRIBE, READ))
        if subscribe or publish:
            declared = [*map(facts.at, facts.resources), *map(facts.at, facts.families), *_templates(facts)]
            result.errors.append(
                f"app.py declares {_named(declared)}, but {MANIFEST_NAME} does not bind all the topics the SDK "
                f"serves resources on, so they are never listed or read. {_add_text(subscribe, publish, manifest)}"
            )
    if facts.templates:
        subscribe, publish = _additions(manifest, facts, (TEMPLATES, COMPLETE))
        if subscribe or publish:
            completes = any(t.completes for t in facts.templates)
            what = "listed or completed" if completes else "listed"
            result.errors.append(
                f"app.py declares the template{'s' if len(facts.templates) > 1 else ''} {_named(_templates(facts))}"
                f"{' with completion' if completes else ''}, but {MANIFEST_NAME} does not bind the template "
                f"topics, so {'they are' if len(facts.templates) > 1 else 'it is'} never {what}. "
                f"{_add_text(subscribe, publish, manifest)}"
            )
        return
    # No template in the code: bound template topics are lines to remove.
    subscribe = [
        _line(text, "subscribe", pattern, _render_entry(pattern, entry.wit, entry.handler))
        for pattern, entry in manifest.subscribe.items()
        if entry.handler in (TEMPLATES.handler, COMPLETE.handler)
    ]
    publish = [
        _line(text, "publish", pattern, _render_entry(pattern, entry.wit, None))
        for pattern, entry in manifest.publish.items()
        if pattern in (TEMPLATES.publish_key, COMPLETE.publish_key)
    ]
    if subscribe:
        removal = f"Remove from [subscribe]:\n{_block(subscribe)}"
        if publish:
            removal += f"\nand from [publish]:\n{_block(publish)}"
        result.errors.append(
            f"{MANIFEST_NAME} binds the template topics, but app.py declares no template (@capsule.template), "
            f"so nothing answers them. {removal}\n(or declare a template in app.py)"
        )


def _templates(facts: CodeFacts) -> list[str]:
    return [facts.at(t.uri_template) for t in facts.templates]


def _suggested_prefix(value: str) -> str | None:
    """The prefix to add to the hint so `value` (a URI or a literal prefix) lies under it: `scheme://host/`."""
    matched = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*/", value)
    if matched:
        return matched.group(0)
    return value or None


def _check_families(manifest: Manifest, facts: CodeFacts, text: str, result: CheckResult) -> None:
    hints = manifest.resources
    if hints is None or not hints.families:
        return
    prefixes = tuple(hints.families)
    outside: list[tuple[str, str]] = []  # (what, the string that must start with a hint)
    outside += [(f"the resource {facts.at(uri)}", uri) for uri in facts.resources if not uri.startswith(prefixes)]
    outside += [(f"the family {facts.at(p)}", p) for p in facts.families if not p.startswith(prefixes)]
    outside += [
        (f"the template {facts.at(t.uri_template)}", t.literal_prefix)
        for t in facts.templates
        if not t.literal_prefix.startswith(prefixes)
    ]
    if not outside:
        return
    current = _render_families(list(prefixes))
    shown = _line(text, "resources", "families", current)
    added = list(prefixes)
    unfixable = False
    for _what, value in outside:
        suggestion = _suggested_prefix(value)
        if suggestion is None:
            unfixable = True
        elif not any(suggestion.startswith(p) for p in added):
            added.append(suggestion)
    named = _named([what for what, _ in outside])
    head = (
        f"app.py serves {named}, outside the [resources] families hint {json.dumps(list(prefixes))}: reads of "
        "those URIs never reach this capsule (they would fail although the resources are listed)."
    )
    if unfixable:
        result.errors.append(
            f"{head} A template with no literal prefix can be reached only without the hint: remove these lines "
            f"from {MANIFEST_NAME}:\n{_block(['[resources]', shown])}"
        )
        return
    result.errors.append(
        f"{head} In {MANIFEST_NAME}, replace\n{_block([shown])}\nwith\n{_block([_render_families(added)])}\n"
        "(or remove the [resources] table)"
    )


def _check_handlers(manifest: Manifest, facts: CodeFacts, text: str, result: CheckResult) -> None:
    defined = set(facts.handlers)
    for pattern, entry in manifest.subscribe.items():
        handler = entry.handler
        if handler is None or handler in SDK_HANDLERS or handler in defined:
            continue
        line = _line(text, "subscribe", pattern, _render_entry(pattern, entry.wit, handler))
        function = re.sub(r"[^A-Za-z0-9_]", "_", handler)
        function = function if function[:1].isalpha() or function[:1] == "_" else "on_" + function
        result.errors.append(
            f'[subscribe] binds "{pattern}" to the handler "{handler}", but app.py defines no '
            f'@capsule.on("{handler}"), so every message on it is dropped. Remove this line from [subscribe]:\n'
            f"{_block([line])}\nor add the handler to app.py:\n"
            f"{_block([f'@capsule.on({json.dumps(handler)})', f'def {function}(ctx, payload): ...'])}"
        )
    bound = {entry.handler for entry in manifest.subscribe.values() if entry.handler}
    for handler in facts.handlers:
        if handler not in bound:
            result.warnings.append(
                f'app.py defines @capsule.on("{handler}"), but no [subscribe] entry binds it, so it never runs '
                f'(bind it: "<topic>" = {{ wit = "opaque", handler = "{handler}" }})'
            )


def _check_namespaces(manifest: Manifest, facts: CodeFacts, result: CheckResult) -> None:
    namespaces = tuple(manifest.package.namespaces)
    if not namespaces:
        return
    values = [*facts.resources, *facts.families, *(t.literal_prefix for t in facts.templates)]
    outside = [value for value in values if not value.startswith(namespaces)]
    if outside:
        result.warnings.append(
            f"app.py serves {_named(outside)}, outside [package] namespaces {json.dumps(list(namespaces))}: "
            "once the capsule is signed and installed, those URIs are refused"
        )


# -- manifest lines -------------------------------------------------------------------------------

_TABLE = re.compile(r"\s*\[+\s*([A-Za-z0-9_.-]+)\s*\]+\s*(#.*)?$")


def _line(text: str, table: str, key: str, fallback: str) -> str:
    """The line of `text` holding `key` in `[table]` as written (one line), else `fallback`."""
    current = None
    for raw in text.splitlines():
        header = _TABLE.fullmatch(raw)
        if header:
            current = header.group(1)
            continue
        if current != table:
            continue
        stripped = raw.strip()
        for quoted in (f'"{key}"', f"'{key}'", key):
            if stripped.startswith(quoted):
                rest = stripped[len(quoted) :].lstrip()
                if rest.startswith("=") and _balanced(stripped):
                    return stripped
    return fallback


def _balanced(line: str) -> bool:
    return line.count("[") == line.count("]") and line.count("{") == line.count("}")


def _render_entry(pattern: str, wit: str, handler: str | None) -> str:
    inner = f'wit = "{wit}"' + (f', handler = "{handler}"' if handler else "")
    return f'"{pattern}" = {{ {inner} }}'


def _render_families(prefixes: list[str]) -> str:
    return "families = [" + ", ".join(json.dumps(p) for p in prefixes) + "]"


def mismatch_message(folder: Path, errors: list[str]) -> str:
    """One error naming the manifest and the code, then each problem with its lines."""
    where = _show(Path(folder) / MANIFEST_NAME)
    code = _show(Path(folder) / "app.py")
    problems = "\n".join("- " + problem.replace("\n", "\n  ") for problem in errors)
    return f"{where} does not match what {code} serves:\n{problems}"


def _show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
