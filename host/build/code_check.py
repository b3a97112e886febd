"""Capsule.toml against the code: what the manifest binds must be what the SDK serves for the code.

The code is never run on the host's Python. What it declares is asked of the
BUILT component, in the kernel's sandbox (`kernel/oneshot.py`: no WASI, no
grants, bounded in time and memory, alone on a bus of its own, as the system
principal): the guest SDK answers the reserved action `astrid.facts` with its
static declarations (`Capsule.facts()`). Then, both ways:

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
from dataclasses import dataclass, field
from pathlib import Path

from astrid.host.bus.topics import pattern_matches
from astrid.host.capsule.manifest import MANIFEST_NAME, Manifest
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
from astrid.host.errors import CapsuleLoadError
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.kernel.oneshot import call_once
from astrid.host.kernel.sandbox import CallStatus
from astrid.host.kernel.static_replies import STATIC_ACTION

# The guest SDK's reserved action and the version of its reply (astrid_sdk._serving and _registry;
# a test checks they agree).
FACTS_ACTION = "astrid.facts"
FACTS_VERSION = 1
# Every action the SDK reserves, and what it tells the host (a manifest must not bind them).
RESERVED_ACTIONS = {FACTS_ACTION: "what the code declares", STATIC_ACTION: "the describe every principal gets"}
MAX_FACTS_CHARS = 4 << 20  # a larger reply is refused unread
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


def read_built(folder: Path, component: Path | None = None, *, cache: CompileCache | None = None) -> CodeReading:
    """What the SDK serves for the built component of `folder`, asked of it in the sandbox.

    `component` is the built file (default: the manifest's `[[component]]`
    file). `ok` with the facts; `not-sdk` when the component does not answer
    the SDK's reserved action as the SDK does (written without the SDK, or
    built with an SDK older than the action): nothing to check; `failed`
    otherwise (it does not load, or the call timed out), with why.
    Nothing of the capsule runs outside WebAssembly.
    """
    try:
        outcome = call_once(Path(folder), FACTS_ACTION, component=component, cache=cache)
    except CapsuleLoadError as exc:
        return CodeReading("failed", detail=str(exc))
    if outcome.status is CallStatus.TRAPPED:
        # The SDK turns every fault into a result, so a trap is code of its own answering: nothing to check.
        return CodeReading("not-sdk", detail=f"it traps on {FACTS_ACTION}: {outcome.error}")
    if not outcome.ok:
        return CodeReading("failed", detail=outcome.error or outcome.status.value)
    data = outcome.data if isinstance(outcome.data, str) else ""
    if outcome.action != "final" or len(data) > MAX_FACTS_CHARS or not _looks_like_facts(data):
        detail = f"it answers {FACTS_ACTION} with {outcome.action!r}, not what the SDK says"
        return CodeReading("not-sdk", detail=detail)
    try:
        return CodeReading("ok", parse_facts(data))
    except ValueError as exc:
        return CodeReading("failed", detail=f"its answer to {FACTS_ACTION} is malformed: {exc}")


def _looks_like_facts(data: str) -> bool:
    """Does `data` claim to be the SDK's facts (a JSON object with this `facts` version)?"""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and value.get("facts") == FACTS_VERSION


def parse_facts(data: str) -> CodeFacts:
    """The SDK's answer to `astrid.facts` (`Capsule.facts()`), checked field by field (ValueError if not)."""
    raw = json.loads(data)
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")

    def strings(key: str, value: object = None) -> tuple[str, ...]:
        items = raw.get(key, []) if value is None else value
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise ValueError(f"{key} is not a list of strings")
        return tuple(items)

    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise ValueError("name is not a string")
    templates = []
    listed = raw.get("templates", [])
    if not isinstance(listed, list):
        raise ValueError("templates is not a list")
    for item in listed:
        if not isinstance(item, dict):
            raise ValueError("a template is not a JSON object")
        uri_template, literal_prefix = item.get("uri_template"), item.get("literal_prefix")
        if not isinstance(uri_template, str) or not isinstance(literal_prefix, str):
            raise ValueError("a template lacks its uri_template or literal_prefix")
        templates.append(TemplateFacts(uri_template, literal_prefix, strings("completes", item.get("completes", []))))
    sites = raw.get("sites", {})
    if not isinstance(sites, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in sites.items()):
        raise ValueError("sites is not an object of strings")
    return CodeFacts(
        name=name,
        resources=strings("resources"),
        families=strings("families"),
        templates=tuple(templates),
        handlers=strings("handlers"),
        sites=dict(sites),
    )


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
        if handler in RESERVED_ACTIONS:
            result.errors.append(
                f'[subscribe] binds "{pattern}" to the handler "{handler}", a name the SDK reserves (it tells the '
                f"host {RESERVED_ACTIONS[handler]}). Remove this line from [subscribe]:\n{_block([line])}"
            )
            continue
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
