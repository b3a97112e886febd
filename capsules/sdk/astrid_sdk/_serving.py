"""Serving: the SDK's side of the resource protocol, answered from a capsule's declarations.

The host calls `astrid-hook-trigger(handler, payload)` with the handler name
bound in `Capsule.toml`: "describe" for `resource.v1.request.describe`,
"read" for `resource.v1.request.read`, and for templates (docs/contract/templates.md
§9) "templates" for `resource.v1.request.templates` and "complete" for
`resource.v1.request.complete`. The SDK answers by publishing:

- describe: a describe-response on `resource.v1.response.describe.<name>`,
  listing what the calling principal sees;
- read: for a URI this capsule owns, a read-response on
  `resource.v1.response.read.<correlation_id>`; for any other URI, nothing.
  A static resource owns its URI, then a family its flat keys, then the
  matching template with the longest literal prefix;
- templates: a templates-response on `resource.v1.response.templates.<name>`,
  listing the templates the calling principal sees;
- complete: for one of this capsule's templates, a complete-response on
  `resource.v1.response.complete.<correlation_id>`; for any other, nothing.

Two more actions are reserved. Both run no handler, need no principal and
are the same for every caller:

- `astrid.facts` (`FACTS_ACTION`) answers `("final", <JSON>)` with what the
  code declares (`Capsule.facts()`: the name, resources, families, templates
  with their completers, `@capsule.on` handlers and where each is declared):
  the host asks it of a built component, in the sandbox, to check
  Capsule.toml (`astrid capsule build`, `capsule list -v`);
- `astrid.static` (`STATIC_ACTION`) answers `("final", <JSON>)` with the
  describe and templates replies this capsule gives *any* verified principal,
  when its declarations make them the same for everyone
  (`Capsule.static_replies()`): the exact topic and payload the describe and
  templates handlers publish, or null for one that depends on the caller (a
  `visible` filter, a lister). The host asks it once per build and then
  answers those requests itself, without running the capsule
  (docs/capsules.md, "Static describes").

The principal comes only from `get-caller()`; anything but a `verified`
principal fails closed before user code runs. Nothing a handler does (raise,
return the wrong type, return too much) escapes as a trap: it becomes a read
error naming the cause, and the instance keeps serving.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from astrid_sdk import _limits, _output
from astrid_sdk._checks import is_clean_segment, utf8_len
from astrid_sdk._chunks import check_read_limits, to_chunks
from astrid_sdk._completion import complete_request, completion_values
from astrid_sdk._context import Context
from astrid_sdk._encoding import dumps
from astrid_sdk._errors import DefinitionError, HostError, NotFound
from astrid_sdk._records import Resource, ResourceTemplate
from astrid_sdk._responses import (
    complete_response,
    describe_response,
    read_response,
    read_response_json,
    templates_response,
)
from astrid_sdk._site import definition_site, describe_exception

if TYPE_CHECKING:
    from astrid_sdk._capsule import Capsule

DESCRIBE_HANDLER = "describe"
READ_HANDLER = "read"
TEMPLATES_HANDLER = "templates"
COMPLETE_HANDLER = "complete"
SDK_HANDLERS = (DESCRIBE_HANDLER, READ_HANDLER, TEMPLATES_HANDLER, COMPLETE_HANDLER)
# Reserved: the host asks it of a built component (docs/capsules.md, "The manifest check").
FACTS_ACTION = "astrid.facts"
# Reserved: the host asks it once per build, to answer static describes itself (docs/capsules.md).
STATIC_ACTION = "astrid.static"
STATIC_VERSION = 1
RESERVED_ACTIONS = (FACTS_ACTION, STATIC_ACTION)
DESCRIBE_REPLY_PREFIX = "resource.v1.response.describe."
READ_REPLY_PREFIX = "resource.v1.response.read."
TEMPLATES_REPLY_PREFIX = "resource.v1.response.templates."
COMPLETE_REPLY_PREFIX = "resource.v1.response.complete."
NOT_VERIFIED = "principal not verified"
MAX_ERROR_CHARS = 1000


class Server:
    """Answers one capsule's hook calls from its declarations (`Registry`); never raises."""

    def __init__(self, capsule: Capsule) -> None:
        self.capsule = capsule
        self.registry = capsule._registry
        # The describe and templates replies when they cannot differ between calls
        # (no `visible`, no lister): encoded once, then reused (docs/performance.md).
        self._constant_describe: tuple[str, int] | None = None
        self._constant_templates: tuple[str, int] | None = None

    def static_replies(self, host) -> dict:
        """`Capsule.static_replies()`: the answer to `astrid.static`."""
        describe = self._constant_describe_reply(host)
        templates = self._constant_templates_reply(host)
        suffix = self.capsule.reply_suffix
        return {
            "static": STATIC_VERSION,
            "describe": None if describe is None else {"topic": DESCRIBE_REPLY_PREFIX + suffix, "payload": describe[0]},
            "templates": None
            if templates is None
            else {"topic": TEMPLATES_REPLY_PREFIX + suffix, "payload": templates[0]},
        }

    def dispatch(self, action: str, payload, host) -> tuple[str, str | None]:
        """Handle one hook call; never raises. Returns (capsule-result action, data).

        What the call prints goes to `host.log` (`_output`), bounded per call.
        """
        _output.begin(host)
        try:
            return self._dispatch(action, payload, host)
        finally:
            _output.end()

    def _dispatch(self, action: str, payload, host) -> tuple[str, str | None]:
        try:
            if action == FACTS_ACTION:  # static declarations only: before (and without) any principal check
                return "final", dumps(self.capsule.facts())
            if action == STATIC_ACTION:  # the same for every caller: before (and without) any principal check
                return "final", dumps(self.capsule.static_replies(host))
            if action == DESCRIBE_HANDLER:
                return self._describe(host)
            if action == READ_HANDLER:
                return self._read(payload, host)
            if action == TEMPLATES_HANDLER:
                return self._list_templates(host)
            if action == COMPLETE_HANDLER:
                return self._complete(payload, host)
            custom = self.registry.handlers.get(action)
            if custom is not None:
                return self._custom(custom, payload, host)
            bound = ", ".join(SDK_HANDLERS)
            log(host, "warn", f"no handler named {action!r} (bind {bound} or a @capsule.on name)")
            return "continue", f"unknown handler {action}"
        except BaseException as exc:
            text = describe_exception(exc, host)
            log(host, "error", f"{action}: {text}")
            return "error", short(text)

    def _verified(self, host):
        caller = host.caller()
        if caller is None or caller.attribution != "verified" or not caller.principal:
            return None
        return caller

    def _describe(self, host) -> tuple[str, str | None]:
        caller = self._verified(host)
        if caller is None:
            return "deny", NOT_VERIFIED
        constant = self._constant_describe_reply(host)
        if constant is not None:
            host.publish(DESCRIBE_REPLY_PREFIX + self.capsule.reply_suffix, constant[0])
            return "final", f"{constant[1]} resources"
        ctx = Context(self.capsule, host, caller)
        listed: list[Resource] = []
        seen: set[str] = set()

        def add(resource: Resource) -> None:
            if resource.uri not in seen:
                seen.add(resource.uri)
                listed.append(resource)

        for uri, static in self.registry.static.items():
            try:
                if static.visible is None or static.visible(ctx):
                    add(static.definition)
            except Exception as exc:
                log(host, "error", f"describe: visible() of {uri} raised {describe_exception(exc, host)}; not listed")
        for family in self.registry.families:
            if family._lister is None:
                continue
            try:
                items = list(family._lister(ctx) or ())
            except Exception as exc:
                log(host, "error", f"describe: lister of {family.prefix} raised {describe_exception(exc, host)}")
                continue
            for item in items:
                try:
                    add(family._member(item))
                except DefinitionError as exc:
                    log(host, "warn", f"describe: dropped a member of {family.prefix}: {exc}")
        for template in self.registry.templates:
            if template._lister is None or not self._visible(host, template, ctx, f"describe {template.uri_template}"):
                continue
            try:
                members = list(template._lister(ctx) or ())
            except Exception as exc:
                where = template.uri_template
                log(host, "error", f"describe: lister of {where} raised {describe_exception(exc, host)}")
                continue
            for member in members:
                if isinstance(member, Resource) and template.match(member.uri) is not None:
                    add(member)
                else:
                    dropped = f"describe: dropped {member!r}, not a Resource {template.uri_template} serves"
                    log(host, "warn", dropped)
        body, count = _describe_body(host, listed)
        host.publish(DESCRIBE_REPLY_PREFIX + self.capsule.reply_suffix, body)
        return "final", f"{count} resources"

    def _constant_describe_reply(self, host) -> tuple[str, int] | None:
        """The describe reply (JSON, count) when it is the same for every verified principal, else None."""
        if self._constant_describe is None and self.registry.describe_is_constant():
            statics = [static.definition for static in self.registry.static.values()]
            self._constant_describe = _describe_body(host, statics)
        return self._constant_describe

    def _constant_templates_reply(self, host) -> tuple[str, int] | None:
        """The templates reply (JSON, count) when it is the same for every verified principal, else None."""
        if self._constant_templates is None and self.registry.templates_are_constant():
            self._constant_templates = _templates_body(host, [t.definition for t in self.registry.templates])
        return self._constant_templates

    def _answering(self, host, prefix: str, correlation_id: str, refusal):
        """(reply topic, verified caller, None), or the outcome when the request gets no answer of its own:
        a reply topic over the topic limit is not answered; a caller that is not verified gets `refusal()`
        (made only then: a read pays nothing for it)."""
        topic = prefix + correlation_id
        if utf8_len(topic) > _limits.MAX_TOPIC_BYTES:
            return topic, None, ("continue", "correlation_id too long")
        caller = self._verified(host)
        if caller is None:
            return topic, None, self._reply(host, topic, refusal(), "deny")
        return topic, caller, None

    def _visible(self, host, target, ctx: Context, what: str) -> bool:
        """`target.visible(ctx)`, failing closed: an exception hides it (and is logged)."""
        if target.visible is None:
            return True
        try:
            return bool(target.visible(ctx))
        except Exception as exc:
            log(host, "error", f"{what}: visible() raised {describe_exception(exc, host)}; hidden")
            return False

    @staticmethod
    def _request(payload) -> dict | None:
        """The request payload as a JSON object, or None."""
        try:
            request = json.loads(payload.decode("utf-8") if isinstance(payload, (bytes, bytearray)) else payload)
        except (ValueError, UnicodeDecodeError, AttributeError, TypeError, RecursionError):
            return None
        return request if isinstance(request, dict) else None

    def _read(self, payload, host) -> tuple[str, str | None]:
        request = self._request(payload)
        if request is None:
            log(host, "warn", "read: the request is not a JSON object; ignored")
            return "continue", "bad request"
        uri = request.get("uri")
        correlation_id = request.get("correlation_id")
        if not isinstance(uri, str) or not isinstance(correlation_id, str) or not is_clean_segment(correlation_id):
            log(host, "warn", "read: the request lacks a uri or a clean correlation_id; ignored")
            return "continue", "bad request"
        route = self.registry.route(uri)
        if route is None:
            return "continue", "not mine"
        refusal = lambda: read_response(uri, error=NOT_VERIFIED)  # noqa: E731
        topic, caller, outcome = self._answering(host, READ_REPLY_PREFIX, correlation_id, refusal)
        if outcome is not None:
            return outcome
        kind, target, key = route
        ctx = Context(self.capsule, host, caller, uri, key)
        if kind == "template":
            chosen = next(
                ((t, params) for t, params in target if self._visible(host, t, ctx, f"read {t.uri_template}")), None
            )
            if chosen is None:
                return "continue", "not visible"
            target, ctx.params = chosen
            ctx.template = target.uri_template
        try:
            if kind == "static":
                if target.visible is not None and not target.visible(ctx):
                    return "continue", "not visible"
                mime_type = target.definition.mime_type
                value = target.handler(ctx)
            elif kind == "family":
                mime_type = target.mime_type
                value = target.handler(ctx, uri)
            else:
                mime_type = target.definition.mime_type
                value = target.handler(ctx)
            chunks = to_chunks(value, mime_type)
            check_read_limits(chunks)
        except NotFound:
            return "continue", "not found"
        except DefinitionError as exc:
            name = getattr(target.handler, "__name__", "handler")
            where = definition_site(target.handler)
            return self._fail(
                host,
                topic,
                uri,
                f"handler {name} {exc}{where}" if str(exc).startswith("returned") else f"handler {name}: {exc}{where}",
            )
        except Exception as exc:
            name = getattr(target.handler, "__name__", "handler")
            return self._fail(host, topic, uri, f"handler {name} raised {describe_exception(exc, host)}")
        try:
            body = read_response_json(uri, chunks)
        except (TypeError, ValueError) as exc:
            return self._fail(host, topic, uri, f"cannot encode the reply: {exc}")
        size = utf8_len(body)
        if size > _limits.MAX_MESSAGE_BYTES:
            return self._fail(host, topic, uri, f"the reply is {size} bytes of JSON, over the 1 MiB bus message limit")
        return self._publish(host, topic, uri, body)

    def _fail(self, host, topic: str, uri: str, error: str) -> tuple[str, str | None]:
        error = short(error)
        log(host, "error", f"read {uri}: {error}")
        return self._reply(host, topic, read_response(uri, error=error), "error")

    def _publish(self, host, topic: str, uri: str, body: str) -> tuple[str, str | None]:
        try:
            host.publish(topic, body)
        except HostError as exc:
            return self._fail(host, topic, uri, f"the host refused the reply: {exc}")
        return "final", None

    def _reply(self, host, topic: str, reply: dict, outcome: str) -> tuple[str, str | None]:
        try:
            host.publish(topic, dumps(reply))
        except HostError as exc:
            log(host, "error", f"cannot publish on {topic}: {exc}")
            return "error", short(str(exc))
        return outcome, reply.get("error")

    # -- templates and completion (docs/contract/templates.md §9) ---------------

    def _list_templates(self, host) -> tuple[str, str | None]:
        caller = self._verified(host)
        if caller is None:
            return "deny", NOT_VERIFIED
        constant = self._constant_templates_reply(host)
        if constant is None:
            ctx = Context(self.capsule, host, caller)
            listed = [
                t.definition
                for t in self.registry.templates
                if self._visible(host, t, ctx, f"templates {t.uri_template}")
            ]
            constant = _templates_body(host, listed)
        body, count = constant
        host.publish(TEMPLATES_REPLY_PREFIX + self.capsule.reply_suffix, body)
        return "final", f"{count} templates"

    def _complete(self, payload, host) -> tuple[str, str | None]:
        request = complete_request(self._request(payload))
        if request is None:
            log(host, "warn", "complete: the request is not a complete-request with a clean correlation_id")
            return "continue", "bad request"
        uri_template, argument_name, argument_value, arguments, correlation_id = request
        template = self.registry.template(uri_template)
        if template is None:
            return "continue", "not mine"
        refusal = lambda: complete_response(error=NOT_VERIFIED)  # noqa: E731
        topic, caller, outcome = self._answering(host, COMPLETE_REPLY_PREFIX, correlation_id, refusal)
        if outcome is not None:
            return outcome
        ctx = Context(self.capsule, host, caller)
        ctx.template = uri_template
        ctx.arguments = arguments
        if not self._visible(host, template, ctx, f"complete {uri_template}"):
            return "continue", "not visible"
        if argument_name not in template.parsed.names:
            return self._complete_failed(host, topic, f"{uri_template} has no variable {argument_name!r}")
        completer = template._completers.get(argument_name)
        if completer is None:
            return self._reply(host, topic, complete_response((), total=0), "final")
        name = getattr(completer, "__name__", "completer")
        try:
            values = completion_values(completer(ctx, argument_value), argument_value)
        except DefinitionError as exc:
            return self._complete_failed(host, topic, f"completer {name} {exc}")
        except Exception as exc:
            return self._complete_failed(host, topic, f"completer {name} raised {describe_exception(exc, host)}")
        total = len(values)
        limit = _limits.MAX_COMPLETION_VALUES
        body = dumps(complete_response(values[:limit], total=total, has_more=total > limit))
        size = utf8_len(body)
        if size > _limits.MAX_MESSAGE_BYTES:
            return self._complete_failed(
                host, topic, f"completer {name}: the reply is {size} bytes of JSON, over the 1 MiB bus message limit"
            )
        try:
            host.publish(topic, body)
        except HostError as exc:
            return self._complete_failed(host, topic, f"the host refused the reply: {exc}")
        return "final", None

    def _complete_failed(self, host, topic: str, error: str) -> tuple[str, str | None]:
        error = short(error)
        log(host, "error", f"complete: {error}")
        return self._reply(host, topic, complete_response(error=error), "error")

    def _custom(self, function, payload, host) -> tuple[str, str | None]:
        caller = self._verified(host)
        ctx = Context(self.capsule, host, caller) if caller is not None else None
        try:
            result = function(ctx, bytes(payload) if payload is not None else b"")
        except Exception as exc:
            text = describe_exception(exc, host)
            log(host, "error", f"handler {getattr(function, '__name__', '?')} raised {text}")
            return "error", short(text)
        return "continue", None if result is None else short(str(result))


def _describe_body(host, listed: list[Resource]) -> tuple[str, int]:
    """The describe reply's JSON and how many resources it lists, within the contract's limits."""
    return _bounded(host, listed, "describe", "resources", _limits.MAX_RESOURCES_PER_DESCRIBE, describe_response)


def _templates_body(host, listed: list[ResourceTemplate]) -> tuple[str, int]:
    """The templates reply's JSON and how many templates it lists, within the contract's limits."""
    return _bounded(host, listed, "templates", "templates", _limits.MAX_TEMPLATES_PER_DESCRIBE, templates_response)


def _bounded(host, listed: list, what: str, noun: str, most: int, response) -> tuple[str, int]:
    """`response(listed)` as JSON, `listed` cut to `most` and then below the bus message limit (logged)."""
    if len(listed) > most:
        log(host, "warn", f"{what}: {len(listed)} {noun}, only the first {most} are listed")
        del listed[most:]
    body = dumps(response(listed))
    while utf8_len(body) > _limits.MAX_MESSAGE_BYTES and listed:
        drop = max(1, len(listed) // 10)
        log(host, "warn", f"{what}: reply over 1 MiB, dropping the last {drop} {noun}")
        del listed[-drop:]
        body = dumps(response(listed))
    return body, len(listed)


def short(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def log(host, level: str, message: str) -> None:
    """A line in the host's log; a failing log never stops serving."""
    try:
        host.log(level, message)
    except Exception:
        pass
