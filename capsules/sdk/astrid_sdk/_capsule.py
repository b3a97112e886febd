"""`Capsule`: resources declared with decorators, served over the bus.

The host calls `astrid-hook-trigger(handler, payload)` with the handler name
bound in `Capsule.toml`: "describe" for `resource.v1.request.describe`,
"read" for `resource.v1.request.read`, and for templates (docs/contract.md
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
from collections.abc import Callable

from astrid_sdk import _output, _wire
from astrid_sdk._capabilities import Files, Http, KeyValue
from astrid_sdk._errors import DefinitionError, HostError, NotFound, NotGranted, RequestError
from astrid_sdk._site import call_site, declare, exception_site, subject
from astrid_sdk._wire import Resource, ResourceTemplate, check_uri, clean_segment, dumps, is_clean_segment

DESCRIBE_HANDLER = "describe"
READ_HANDLER = "read"
TEMPLATES_HANDLER = "templates"
COMPLETE_HANDLER = "complete"
SDK_HANDLERS = (DESCRIBE_HANDLER, READ_HANDLER, TEMPLATES_HANDLER, COMPLETE_HANDLER)
# Reserved: the host asks it of a built component (docs/capsules.md, "The manifest check").
FACTS_ACTION = "astrid.facts"
FACTS_VERSION = 1
# Reserved: the host asks it once per build, to answer static describes itself (docs/capsules.md).
STATIC_ACTION = "astrid.static"
STATIC_VERSION = 1
RESERVED_ACTIONS = (FACTS_ACTION, STATIC_ACTION)
DESCRIBE_REPLY_PREFIX = "resource.v1.response.describe."
READ_REPLY_PREFIX = "resource.v1.response.read."
TEMPLATES_REPLY_PREFIX = "resource.v1.response.templates."
COMPLETE_REPLY_PREFIX = "resource.v1.response.complete."
# astrid-bus:resource-events@1.0.0 (docs/contract.md §11): `ctx.updated(uri)` publishes here.
UPDATED_TOPIC = "resource.v1.event.updated"
UPDATED_WIT = "astrid-bus:resource-events@1.0.0"
NOT_VERIFIED = "principal not verified"
REQUEST_TIMEOUT_MS = 1000  # well inside the 2 s call budget and the 2.5 s read window
MAX_ERROR_CHARS = 1000


class Context:
    """What a handler knows about the call: the verified principal and the host services."""

    def __init__(self, capsule: Capsule, host, caller, uri: str | None = None, key: str | None = None) -> None:
        self._capsule = capsule
        self._host = host
        self.principal: str = caller.principal
        self.attribution: str = caller.attribution
        self.source_id: str = caller.source_id  # who sent the request (e.g. the broker)
        self.timestamp: str = caller.timestamp
        self.capsule: str = capsule.name
        self.uri = uri  # the URI being read (None in describe and completion)
        self.key = key  # the part of `uri` after a family's prefix
        self.template: str | None = None  # the uri template being read or completed
        self.params: dict[str, str] = {}  # a template read: the URI's decoded variables
        self.arguments: dict[str, str] = {}  # a completion: the template's variables already given

    @property
    def fs(self) -> Files:
        """Read-only files under the mounts granted to this capsule (docs/capabilities.md)."""
        return Files(self._host)

    @property
    def kv(self) -> KeyValue:
        """This capsule's durable key-value state for the calling principal."""
        return KeyValue(self._host)

    @property
    def http(self) -> Http:
        """Outbound HTTP to the hosts granted to this capsule."""
        return Http(self._host)

    def config(self, key: str) -> str | None:
        """A `[config]` value from Capsule.toml as a string, or None when not set."""
        return self._host.config(key)

    def log(self, message: str, level: str = "info") -> None:
        """A line in the host's log, attributed to this capsule."""
        self._host.log(level, str(message))

    def clock_ms(self) -> int:
        """Host wall-clock milliseconds (the guest has no clock of its own)."""
        return self._host.clock_ms()

    def updated(self, uri: str | None = None) -> None:
        """Tell this principal's clients subscribed to `uri` that it changed (docs/contract.md §11).

        `uri` defaults to the URI being read. Call it once the change is
        made (after `ctx.kv.set`, say): the host drops any kept read of it,
        then clients read it again. It goes to the calling principal's
        subscribers only, and the host forwards it only for a URI this
        capsule serves that principal (it lists it, or its template covers
        it); announcements are rate-limited. Needs one line in Capsule.toml:

            [publish]
            "resource.v1.event.updated" = { wit = "astrid-bus:resource-events@1.0.0" }

        Raises `NotGranted` without that line, `DefinitionError` for a bad
        URI, another `HostError` when the host refuses it.
        """
        target = self.uri if uri is None else uri
        if not isinstance(target, str) or not target:
            raise DefinitionError("updated(): name the URI that changed (no URI is being read here)")
        check_uri(target)
        try:
            self._host.publish(UPDATED_TOPIC, dumps({"uri": target}))
        except HostError as exc:
            if exc.code == "capability-denied":
                raise NotGranted(
                    exc.code,
                    f"{self.capsule} may not announce updates: add "
                    f'"{UPDATED_TOPIC}" = {{ wit = "{UPDATED_WIT}" }} under [publish] in its Capsule.toml',
                ) from None
            raise

    def request(
        self, topic: str, reply_prefix: str, payload: dict | None = None, timeout_ms: int = REQUEST_TIMEOUT_MS
    ) -> dict:
        """Request/response over the bus: the reply to `payload` on `topic`, as a dict.

        Mints a correlation id (host clock + a counter), subscribes to
        `<reply_prefix>.<correlation_id>` first, then publishes
        `{**payload, "correlation_id": ...}` on `topic`. Both topics must be
        declared in Capsule.toml. Raises RequestError on refusal or timeout.
        """
        correlation_id = self._capsule._mint_id(self._host, self.principal)
        body = dict(payload or {})
        body["correlation_id"] = correlation_id
        try:
            subscription = self._host.subscribe(f"{reply_prefix}.{correlation_id}")
        except HostError as exc:
            raise RequestError(f"cannot subscribe to {reply_prefix}.*: {exc} (declare it in [subscribe])") from None
        try:
            try:
                self._host.publish(topic, dumps(body))
            except HostError as exc:
                raise RequestError(f"cannot publish on {topic}: {exc} (declare it in [publish])") from None
            try:
                messages = subscription.recv(timeout_ms)
            except HostError as exc:
                raise RequestError(f"no reply on {reply_prefix}.*: {exc}") from None
        finally:
            subscription.close()
        if not messages:
            raise RequestError(f"no reply to {topic} within {timeout_ms} ms")
        try:
            reply = json.loads(messages[0].payload)
        except ValueError:
            raise RequestError(f"the reply to {topic} is not JSON") from None
        if not isinstance(reply, dict):
            raise RequestError(f"the reply to {topic} is not a JSON object")
        return reply


class _Static:
    __slots__ = ("definition", "handler", "visible", "site")

    def __init__(self, definition: Resource, handler, visible, site: str | None = None) -> None:
        self.definition = definition
        self.handler = handler
        self.visible = visible
        self.site = site  # where it was declared (`app.py:12`), for a later duplicate's error


class Family:
    """A URI family `prefix + key`, served without listing every member.

    Keys are flat: one non-empty segment with no `/`, `\\`, control
    characters, and never `.` or `..` (also when percent-encoded). A read of a
    URI under the prefix whose key breaks that rule is not served (the SDK
    stays silent, so the broker reports an unknown URI).
    """

    def __init__(
        self, prefix: str, handler, mime_type=None, annotations=None, icons=(), meta=None, max_age_s=None
    ) -> None:
        self.prefix = check_uri(prefix)
        self.handler = handler
        self.mime_type = mime_type
        self.annotations = annotations
        self.icons = icons
        self.meta = meta
        self.max_age_s = max_age_s
        self.site: str | None = None  # where it was declared (`app.py:12`)
        self._lister = None
        # Validate the defaults once, at import (= build) time.
        Resource(
            self.prefix + "x",
            "x",
            mime_type=mime_type,
            annotations=annotations,
            icons=icons,
            meta=meta,
            max_age_s=max_age_s,
        )

    def __call__(self, ctx, uri):
        return self.handler(ctx, uri)

    def lister(self, function):
        """Decorate `function(ctx) -> iterable of Resource | str` listing this family's members.

        A str is a member's key or full URI; its name is the key and the
        family's mime type, annotations, icons and meta apply.
        """
        self._lister = function
        return function

    members = lister

    def key_of(self, uri: str) -> str | None:
        """The flat key of `uri` in this family, or None when it is not a member."""
        if not uri.startswith(self.prefix) or _wire.utf8_len(uri) > _wire.MAX_URI_BYTES:
            return None
        key = uri[len(self.prefix) :]
        return key if _flat_key(key) else None

    def _member(self, item) -> Resource:
        if isinstance(item, Resource):
            if self.key_of(item.uri) is None:
                raise DefinitionError(f"{item.uri} is not a member of the family {self.prefix}")
            if self.max_age_s is not None and item.max_age_s is None:
                return item.with_max_age(self.max_age_s)  # the family's freshness covers its members
            return item
        if isinstance(item, str):
            uri = item if item.startswith(self.prefix) else self.prefix + item
            key = self.key_of(uri)
            if key is None:
                raise DefinitionError(f"{item!r} is not a flat key of the family {self.prefix}")
            return Resource(
                uri,
                key,
                mime_type=self.mime_type,
                annotations=self.annotations,
                icons=self.icons,
                meta=self.meta,
                max_age_s=self.max_age_s,
            )
        raise DefinitionError(f"a family member must be Resource or str, not {type(item).__name__}")


class Template:
    """A URI template (`resource-template`): reads of matching URIs, and completion of its variables.

    The handler gets `ctx.params` (the URI's variables, percent-decoded and
    checked: see `UriTemplate`) and `ctx.uri`. A URI that breaks the rules
    never reaches it.
    """

    def __init__(self, definition: ResourceTemplate, handler, visible=None) -> None:
        if not callable(handler):
            raise DefinitionError(f"the handler of {definition.uri_template} is not callable")
        if visible is not None and not callable(visible):
            raise DefinitionError(f"visible= of {definition.uri_template} must be a function of ctx")
        self.definition = definition
        self.uri_template = definition.uri_template
        self.parsed = definition.parsed
        self.handler = handler
        self.visible = visible
        self._completers: dict[str, Callable[..., object]] = {}
        self.site: str | None = None  # where it was declared (`app.py:12`)
        self._lister = None

    def __call__(self, ctx):
        return self.handler(ctx)

    def lister(self, function):
        """Decorate `function(ctx) -> iterable of Resource` listing URIs this template
        serves, so describe lists them (a URI it does not match is dropped, logged)."""
        self._lister = function
        return function

    def complete(self, variable: str):
        """Decorate `function(ctx, prefix) -> list[str]` completing `variable`.

        `ctx.arguments` holds the template's variables already given. The SDK
        keeps the strings that start with `prefix`, drops duplicates and
        sends at most 100 (with `total` and `has_more`).
        """
        site = call_site()
        what = subject("template", self.uri_template)
        if variable not in self.parsed.names:
            raise DefinitionError(f"no variable {variable!r} to complete", site=site, subject=what)
        if variable in self._completers:
            raise DefinitionError(f"{variable!r} has two completers", site=site, subject=what)

        def decorate(function):
            if not callable(function):
                raise DefinitionError(f"the completer of {variable!r} is not callable", site=call_site(), subject=what)
            self._completers[variable] = function
            return function

        return decorate

    def match(self, uri: str) -> dict[str, str] | None:
        """The decoded variables of `uri` when this template serves it, else None."""
        if not isinstance(uri, str) or len(uri.encode("utf-8", "surrogatepass")) > _wire.MAX_URI_BYTES:
            return None
        return self.parsed.match(uri)

    def __repr__(self) -> str:
        return f"Template({self.uri_template!r})"


def _check_handler(handler, visible=None) -> None:
    if not callable(handler):
        raise DefinitionError(f"the handler is {type(handler).__name__}, not a function")
    if visible is not None and not callable(visible):
        raise DefinitionError("visible= must be a function of ctx")


def _first_at(site: str | None, handler) -> str:
    """` (first at app.py:12 on readme())`, for a duplicate declaration's error."""
    name = getattr(handler, "__name__", None)
    parts = ([f"at {site}"] if site else []) + ([f"on {name}()"] if isinstance(name, str) else [])
    return f" (first {' '.join(parts)})" if parts else ""


def _flat_key(key: str) -> bool:
    if not key or "/" in key or "\\" in key:
        return False
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        return False
    decoded = _percent_decode(key)
    return decoded not in (".", "..") and "/" not in decoded and "\\" not in decoded


def _percent_decode(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        if text[i] == "%" and i + 2 < len(text) and _is_hex(text[i + 1 : i + 3]):
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair)


def _describe_exception(exc: BaseException) -> str:
    """`ValueError: boom (app.py:12 in readme)` without reading any file.

    The place is the last frame in the author's code, not one inside the SDK
    (a refused `ctx.fs.read` points at the handler's line that called it).
    """
    where = exception_site(exc)
    message = str(exc)
    return f"{type(exc).__name__}: {message}{where}" if message else f"{type(exc).__name__}{where}"


def _short(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _complete_request(request: dict | None):
    """(uri_template, argument_name, argument_value, context arguments, correlation_id), or None when malformed."""
    if request is None:
        return None
    fields = [request.get(key) for key in ("uri_template", "argument_name", "argument_value", "correlation_id")]
    if not all(isinstance(value, str) for value in fields) or not is_clean_segment(fields[3]):
        return None
    given = request.get("context_arguments", [])
    if given is None:
        given = []
    if not isinstance(given, list):
        return None
    arguments: dict[str, str] = {}
    for argument in given:
        if not isinstance(argument, dict):
            return None
        name, value = argument.get("name"), argument.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            return None
        arguments[name] = value
    return fields[0], fields[1], fields[2], arguments, fields[3]


def _completion_values(returned, prefix: str) -> list[str]:
    """What a completer returned: its distinct strings that start with `prefix`, in order.

    DefinitionError (starting "returned ...") when it is not a list of strings.
    """
    if returned is None or isinstance(returned, (str, bytes, bytearray, memoryview, dict)):
        raise DefinitionError(f"returned {type(returned).__name__}; return a list of strings")
    try:
        items = iter(returned)
    except TypeError:
        raise DefinitionError(f"returned {type(returned).__name__}; return a list of strings") from None
    values: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise DefinitionError(f"returned a {type(item).__name__} as item {index}; values must be strings")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            raise DefinitionError(f"returned item {index}, which is not valid UTF-8 (a lone surrogate)") from None
        if item.startswith(prefix) and item not in seen:
            seen.add(item)
            values.append(item)
    return values


class Capsule:
    """A resource-serving capsule: declare resources, then `WitWorld = capsule.world()`."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise DefinitionError(
                "a capsule needs a name (use the package name from Capsule.toml)",
                site=call_site(),
                subject=f"Capsule({name!r})",
            )
        self.name = name
        self.reply_suffix = clean_segment(name)
        self._static: dict[str, _Static] = {}
        self._families: list[Family] = []
        self._templates: list[Template] = []  # in declaration order (templates lists them so)
        self._by_prefix: list[Template] = []  # longest literal prefix first, then declaration order
        self._handlers: dict[str, object] = {}
        self._counter = 0
        # The describe and templates replies when they cannot differ between calls
        # (no `visible`, no lister): encoded once, then reused (docs/performance.md).
        self._constant_describe: tuple[str, int] | None = None
        self._constant_templates: tuple[str, int] | None = None

    # -- declaring ----------------------------------------------------------

    def resource(
        self,
        uri: str,
        name: str | None = None,
        *,
        title=None,
        description=None,
        mime_type=None,
        size=None,
        annotations=None,
        icons=(),
        meta=None,
        visible=None,
        max_age_s=None,
    ):
        """Decorate `handler(ctx)` serving one URI, listed in describe.

        `visible(ctx) -> bool` (optional) hides the resource from principals
        it returns False for: not listed, and reads stay unanswered.
        `max_age_s` (optional) lets the host serve a successful read again,
        per principal, for that many seconds without calling the handler
        (docs/contract.md §5.7).
        """

        def decorate(handler):
            site = call_site()
            what = subject("resource", uri, handler)

            def define() -> Resource:
                _check_handler(handler, visible)
                definition = Resource(
                    uri,
                    name if name is not None else getattr(handler, "__name__", uri),
                    title=title,
                    description=description,
                    mime_type=mime_type,
                    size=size,
                    annotations=annotations,
                    icons=icons,
                    meta=meta,
                    max_age_s=max_age_s,
                )
                first = self._static.get(definition.uri)
                if first is not None:
                    raise DefinitionError("declared twice" + _first_at(first.site, first.handler))
                return definition

            definition = declare(site, what, define)
            self._static[definition.uri] = _Static(definition, handler, visible, site)
            return handler

        return decorate

    def resource_family(self, prefix: str, *, mime_type=None, annotations=None, icons=(), meta=None, max_age_s=None):
        """Decorate `handler(ctx, uri)` serving every flat URI `prefix + key`.

        Returns a `Family`; list members for a principal with `@family.lister`.
        Raise `NotFound` from the handler for a key that does not exist.
        `max_age_s` applies to every listed member (one that is not listed is
        never kept by the host).
        """

        def decorate(handler) -> Family:
            site = call_site()

            def define() -> Family:
                _check_handler(handler)
                family = Family(prefix, handler, mime_type, annotations, icons, meta, max_age_s)
                first = next((f for f in self._families if f.prefix == family.prefix), None)
                if first is not None:
                    raise DefinitionError("declared twice" + _first_at(first.site, first.handler))
                return family

            family = declare(site, subject("resource family", prefix, handler), define)
            family.site = site
            self._families.append(family)
            # longest prefix first, so a narrower family wins over a wider one
            self._families.sort(key=lambda f: len(f.prefix), reverse=True)
            return family

        return decorate

    def template(
        self,
        uri_template: str,
        name: str | None = None,
        *,
        title=None,
        description=None,
        mime_type=None,
        annotations=None,
        icons=(),
        meta=None,
        visible=None,
        max_age_s=None,
    ):
        """Decorate `handler(ctx)` serving every URI that matches `uri_template`.

        `{var}` is one path segment, `{+var}` may span `/` (never a `.` or
        `..` segment); the handler reads the decoded values in `ctx.params`.
        Returns a `Template`; complete a variable with `@template.complete("var")`.
        Raise `NotFound` for a URI that does not exist. `visible(ctx) -> bool`
        hides the template from some principals: not listed, reads and
        completions unanswered. `max_age_s` (optional) applies to every URI
        the template serves, as for a resource.
        """

        def decorate(handler) -> Template:
            site = call_site()

            def define() -> Template:
                definition = ResourceTemplate(
                    uri_template,
                    name if name is not None else getattr(handler, "__name__", uri_template),
                    title=title,
                    description=description,
                    mime_type=mime_type,
                    annotations=annotations,
                    icons=icons,
                    meta=meta,
                    max_age_s=max_age_s,
                )
                first = next((t for t in self._templates if t.uri_template == definition.uri_template), None)
                if first is not None:
                    raise DefinitionError("declared twice" + _first_at(first.site, first.handler))
                return Template(definition, handler, visible)

            template = declare(site, subject("template", uri_template, handler), define)
            template.site = site
            self._templates.append(template)
            # sorted() is stable: equal prefixes keep declaration order
            self._by_prefix = sorted(self._templates, key=lambda t: len(t.parsed.literal_prefix), reverse=True)
            return template

        return decorate

    def on(self, handler_name: str):
        """Decorate `function(ctx, payload: bytes)` run for another handler bound in Capsule.toml.

        `ctx` is None when the message has no verified principal.
        """

        def decorate(function):
            if handler_name in SDK_HANDLERS or handler_name in RESERVED_ACTIONS:
                raise DefinitionError(
                    "served by the SDK itself (bind another handler name in Capsule.toml)",
                    site=call_site(),
                    subject=subject("handler", repr(handler_name), function),
                )
            self._handlers[handler_name] = function
            return function

        return decorate

    def facts(self) -> dict:
        """What the code declares, as the JSON object the reserved action `astrid.facts` answers.

        Static declarations only, the same for every principal (no handler,
        lister or `visible` runs):

            {"facts": 1, "name": "notes",
             "resources": [uri, ...], "families": [prefix, ...],
             "templates": [{"uri_template", "literal_prefix", "completes": [variable, ...]}, ...],
             "handlers": [@capsule.on name, ...],
             "sites": {uri | prefix | uri_template: "app.py:12", ...}}
        """
        sites: dict[str, str] = {}  # what -> where the author declared it, when known
        declared: list[tuple[str, str | None]] = [(uri, static.site) for uri, static in self._static.items()]
        declared += [(family.prefix, family.site) for family in self._families]
        declared += [(template.uri_template, template.site) for template in self._templates]
        for what, site in declared:
            if isinstance(site, str) and site:
                sites[what] = site
        return {
            "facts": FACTS_VERSION,
            "name": self.name,
            "resources": list(self._static),
            "families": [family.prefix for family in self._families],
            "templates": [
                {
                    "uri_template": template.uri_template,
                    "literal_prefix": template.parsed.literal_prefix,
                    "completes": sorted(template._completers),
                }
                for template in self._templates
            ],
            "handlers": sorted(self._handlers),
            "sites": sites,
        }

    def static_replies(self, host) -> dict:
        """The describe and templates replies every verified principal gets, as the
        JSON object the reserved action `astrid.static` answers:

            {"static": 1,
             "describe": {"topic": "resource.v1.response.describe.<name>", "payload": "<JSON>"} | null,
             "templates": {"topic": "resource.v1.response.templates.<name>", "payload": "<JSON>"} | null}

        `payload` is the very text the describe (templates) handler publishes,
        from the same code path. null when the reply may depend on the caller:
        for describe, a resource with `visible` or a family or template with a
        lister; for templates, a template with `visible`. No handler, lister or
        `visible` runs; `host` only takes the log lines of an over-limit reply.
        """
        describe = self._constant_describe_reply(host)
        templates = self._constant_templates_reply(host)
        return {
            "static": STATIC_VERSION,
            "describe": None
            if describe is None
            else {"topic": DESCRIBE_REPLY_PREFIX + self.reply_suffix, "payload": describe[0]},
            "templates": None
            if templates is None
            else {"topic": TEMPLATES_REPLY_PREFIX + self.reply_suffix, "payload": templates[0]},
        }

    def world(self):
        """The `WitWorld` class componentize-py exports (assign it to `WitWorld` in app.py)."""
        try:
            import wit_world
            from wit_world.imports import lifecycle

            from astrid_sdk._host import WitHost
        except ImportError:
            raise RuntimeError(
                "Capsule.world() works only inside a componentize-py build (astrid capsule build)"
            ) from None

        _output.install()  # print() and sys.stdout/stderr go to the host's log (normally done at SDK import)
        capsule = self
        host = WitHost()

        class WitWorld(wit_world.WitWorld):
            def astrid_hook_trigger(self, action: str, payload: bytes) -> lifecycle.CapsuleResult:
                outcome, data = capsule.dispatch(action, payload, host)
                return lifecycle.CapsuleResult(outcome, data)

        return WitWorld

    # -- serving ------------------------------------------------------------

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
                return "final", dumps(self.facts())
            if action == STATIC_ACTION:  # the same for every caller: before (and without) any principal check
                return "final", dumps(self.static_replies(host))
            if action == DESCRIBE_HANDLER:
                return self._describe(host)
            if action == READ_HANDLER:
                return self._read(payload, host)
            if action == TEMPLATES_HANDLER:
                return self._list_templates(host)
            if action == COMPLETE_HANDLER:
                return self._complete(payload, host)
            custom = self._handlers.get(action)
            if custom is not None:
                return self._custom(custom, payload, host)
            bound = ", ".join(SDK_HANDLERS)
            self._log(host, "warn", f"no handler named {action!r} (bind {bound} or a @capsule.on name)")
            return "continue", f"unknown handler {action}"
        except BaseException as exc:
            text = _describe_exception(exc)
            self._log(host, "error", f"{action}: {text}")
            return "error", _short(text)

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
            host.publish(DESCRIBE_REPLY_PREFIX + self.reply_suffix, constant[0])
            return "final", f"{constant[1]} resources"
        ctx = Context(self, host, caller)
        listed: list[Resource] = []
        seen: set[str] = set()

        def add(resource: Resource) -> None:
            if resource.uri not in seen:
                seen.add(resource.uri)
                listed.append(resource)

        for uri, static in self._static.items():
            try:
                if static.visible is None or static.visible(ctx):
                    add(static.definition)
            except Exception as exc:
                self._log(host, "error", f"describe: visible() of {uri} raised {_describe_exception(exc)}; not listed")
        for family in self._families:
            if family._lister is None:
                continue
            try:
                items = list(family._lister(ctx) or ())
            except Exception as exc:
                self._log(host, "error", f"describe: lister of {family.prefix} raised {_describe_exception(exc)}")
                continue
            for item in items:
                try:
                    add(family._member(item))
                except DefinitionError as exc:
                    self._log(host, "warn", f"describe: dropped a member of {family.prefix}: {exc}")
        for template in self._templates:
            if template._lister is None or not self._visible(host, template, ctx, f"describe {template.uri_template}"):
                continue
            try:
                members = list(template._lister(ctx) or ())
            except Exception as exc:
                where = template.uri_template
                self._log(host, "error", f"describe: lister of {where} raised {_describe_exception(exc)}")
                continue
            for member in members:
                if isinstance(member, Resource) and template.match(member.uri) is not None:
                    add(member)
                else:
                    dropped = f"describe: dropped {member!r}, not a Resource {template.uri_template} serves"
                    self._log(host, "warn", dropped)
        body, count = self._describe_body(host, listed)
        host.publish(DESCRIBE_REPLY_PREFIX + self.reply_suffix, body)
        return "final", f"{count} resources"

    def _constant_describe_reply(self, host) -> tuple[str, int] | None:
        """The describe reply (JSON, count) when it is the same for every verified principal, else None."""
        if self._constant_describe is None and self._describe_is_constant():
            statics = [static.definition for static in self._static.values()]
            self._constant_describe = self._describe_body(host, statics)
        return self._constant_describe

    def _constant_templates_reply(self, host) -> tuple[str, int] | None:
        """The templates reply (JSON, count) when it is the same for every verified principal, else None."""
        if self._constant_templates is None and all(t.visible is None for t in self._templates):
            self._constant_templates = self._templates_body(host, [t.definition for t in self._templates])
        return self._constant_templates

    def _describe_is_constant(self) -> bool:
        """Static resources only, none with `visible`, no lister: every principal gets the same reply."""
        listers = [f._lister for f in self._families] + [t._lister for t in self._templates]
        return all(s.visible is None for s in self._static.values()) and all(lister is None for lister in listers)

    def _describe_body(self, host, listed: list[Resource]) -> tuple[str, int]:
        """The describe reply's JSON and how many resources it lists, within the contract's limits."""
        if len(listed) > _wire.MAX_RESOURCES_PER_DESCRIBE:
            self._log(
                host,
                "warn",
                f"describe: {len(listed)} resources, only the first {_wire.MAX_RESOURCES_PER_DESCRIBE} are listed",
            )
            del listed[_wire.MAX_RESOURCES_PER_DESCRIBE :]
        body = dumps(_wire.describe_response(listed))
        while _wire.utf8_len(body) > _wire.MAX_MESSAGE_BYTES and listed:
            drop = max(1, len(listed) // 10)
            self._log(host, "warn", f"describe: reply over 1 MiB, dropping the last {drop} resources")
            del listed[-drop:]
            body = dumps(_wire.describe_response(listed))
        return body, len(listed)

    def _route(self, uri: str):
        """(handler kind, target, key) for a URI this capsule serves, else None.

        A static resource first, then a family, then the templates that match
        (as a list of (template, params), longest literal prefix first: which
        one serves depends on what the caller may see).
        """
        static = self._static.get(uri)
        if static is not None:
            return "static", static, None
        for family in self._families:
            key = family.key_of(uri)
            if key is not None:
                return "family", family, key
        matches = []
        for template in self._by_prefix:
            params = template.match(uri)
            if params is not None:
                matches.append((template, params))
        if matches:
            return "template", matches, None
        return None

    def _visible(self, host, target, ctx: Context, what: str) -> bool:
        """`target.visible(ctx)`, failing closed: an exception hides it (and is logged)."""
        if target.visible is None:
            return True
        try:
            return bool(target.visible(ctx))
        except Exception as exc:
            self._log(host, "error", f"{what}: visible() raised {_describe_exception(exc)}; hidden")
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
            self._log(host, "warn", "read: the request is not a JSON object; ignored")
            return "continue", "bad request"
        uri = request.get("uri")
        correlation_id = request.get("correlation_id")
        if not isinstance(uri, str) or not isinstance(correlation_id, str) or not is_clean_segment(correlation_id):
            self._log(host, "warn", "read: the request lacks a uri or a clean correlation_id; ignored")
            return "continue", "bad request"
        route = self._route(uri)
        if route is None:
            return "continue", "not mine"
        topic = READ_REPLY_PREFIX + correlation_id
        if _wire.utf8_len(topic) > _wire.MAX_TOPIC_BYTES:
            return "continue", "correlation_id too long"
        caller = self._verified(host)
        if caller is None:
            return self._reply(host, topic, _wire.read_response(uri, error=NOT_VERIFIED), "deny")
        kind, target, key = route
        ctx = Context(self, host, caller, uri, key)
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
            chunks = _wire.to_chunks(value, mime_type)
            _wire.check_read_limits(chunks)
        except NotFound:
            return "continue", "not found"
        except DefinitionError as exc:
            name = getattr(target.handler, "__name__", "handler")
            return self._fail(
                host,
                topic,
                uri,
                f"handler {name} {exc}" if str(exc).startswith("returned") else f"handler {name}: {exc}",
            )
        except Exception as exc:
            name = getattr(target.handler, "__name__", "handler")
            return self._fail(host, topic, uri, f"handler {name} raised {_describe_exception(exc)}")
        try:
            body = _wire.read_response_json(uri, chunks)
        except (TypeError, ValueError) as exc:
            return self._fail(host, topic, uri, f"cannot encode the reply: {exc}")
        size = _wire.utf8_len(body)
        if size > _wire.MAX_MESSAGE_BYTES:
            return self._fail(host, topic, uri, f"the reply is {size} bytes of JSON, over the 1 MiB bus message limit")
        return self._publish(host, topic, uri, body)

    def _fail(self, host, topic: str, uri: str, error: str) -> tuple[str, str | None]:
        error = _short(error)
        self._log(host, "error", f"read {uri}: {error}")
        return self._reply(host, topic, _wire.read_response(uri, error=error), "error")

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
            self._log(host, "error", f"cannot publish on {topic}: {exc}")
            return "error", _short(str(exc))
        return outcome, reply.get("error")

    # -- templates and completion (docs/contract.md §9) -------------------------

    def _list_templates(self, host) -> tuple[str, str | None]:
        caller = self._verified(host)
        if caller is None:
            return "deny", NOT_VERIFIED
        constant = self._constant_templates_reply(host)
        if constant is None:
            ctx = Context(self, host, caller)
            listed = [
                t.definition for t in self._templates if self._visible(host, t, ctx, f"templates {t.uri_template}")
            ]
            constant = self._templates_body(host, listed)
        body, count = constant
        host.publish(TEMPLATES_REPLY_PREFIX + self.reply_suffix, body)
        return "final", f"{count} templates"

    def _templates_body(self, host, listed: list[ResourceTemplate]) -> tuple[str, int]:
        """The templates reply's JSON and how many templates it lists, within the contract's limits."""
        if len(listed) > _wire.MAX_TEMPLATES_PER_DESCRIBE:
            self._log(
                host,
                "warn",
                f"templates: {len(listed)} templates, only the first {_wire.MAX_TEMPLATES_PER_DESCRIBE} are listed",
            )
            del listed[_wire.MAX_TEMPLATES_PER_DESCRIBE :]
        body = dumps(_wire.templates_response(listed))
        while _wire.utf8_len(body) > _wire.MAX_MESSAGE_BYTES and listed:
            drop = max(1, len(listed) // 10)
            self._log(host, "warn", f"templates: reply over 1 MiB, dropping the last {drop} templates")
            del listed[-drop:]
            body = dumps(_wire.templates_response(listed))
        return body, len(listed)

    def _template_named(self, uri_template: str) -> Template | None:
        for template in self._templates:
            if template.uri_template == uri_template:
                return template
        return None

    def _complete(self, payload, host) -> tuple[str, str | None]:
        request = _complete_request(self._request(payload))
        if request is None:
            self._log(host, "warn", "complete: the request is not a complete-request with a clean correlation_id")
            return "continue", "bad request"
        uri_template, argument_name, argument_value, arguments, correlation_id = request
        template = self._template_named(uri_template)
        if template is None:
            return "continue", "not mine"
        topic = COMPLETE_REPLY_PREFIX + correlation_id
        if _wire.utf8_len(topic) > _wire.MAX_TOPIC_BYTES:
            return "continue", "correlation_id too long"
        caller = self._verified(host)
        if caller is None:
            return self._reply(host, topic, _wire.complete_response(error=NOT_VERIFIED), "deny")
        ctx = Context(self, host, caller)
        ctx.template = uri_template
        ctx.arguments = arguments
        if not self._visible(host, template, ctx, f"complete {uri_template}"):
            return "continue", "not visible"
        if argument_name not in template.parsed.names:
            return self._complete_failed(host, topic, f"{uri_template} has no variable {argument_name!r}")
        completer = template._completers.get(argument_name)
        if completer is None:
            return self._reply(host, topic, _wire.complete_response((), total=0), "final")
        name = getattr(completer, "__name__", "completer")
        try:
            values = _completion_values(completer(ctx, argument_value), argument_value)
        except DefinitionError as exc:
            return self._complete_failed(host, topic, f"completer {name} {exc}")
        except Exception as exc:
            return self._complete_failed(host, topic, f"completer {name} raised {_describe_exception(exc)}")
        total = len(values)
        limit = _wire.MAX_COMPLETION_VALUES
        body = dumps(_wire.complete_response(values[:limit], total=total, has_more=total > limit))
        size = _wire.utf8_len(body)
        if size > _wire.MAX_MESSAGE_BYTES:
            return self._complete_failed(
                host, topic, f"completer {name}: the reply is {size} bytes of JSON, over the 1 MiB bus message limit"
            )
        try:
            host.publish(topic, body)
        except HostError as exc:
            return self._complete_failed(host, topic, f"the host refused the reply: {exc}")
        return "final", None

    def _complete_failed(self, host, topic: str, error: str) -> tuple[str, str | None]:
        error = _short(error)
        self._log(host, "error", f"complete: {error}")
        return self._reply(host, topic, _wire.complete_response(error=error), "error")

    def _custom(self, function, payload, host) -> tuple[str, str | None]:
        caller = self._verified(host)
        ctx = Context(self, host, caller) if caller is not None else None
        try:
            result = function(ctx, bytes(payload) if payload is not None else b"")
        except Exception as exc:
            text = _describe_exception(exc)
            self._log(host, "error", f"handler {getattr(function, '__name__', '?')} raised {text}")
            return "error", _short(text)
        return "continue", None if result is None else _short(str(result))

    def _mint_id(self, host, principal: str | None) -> str:
        """A correlation id: host clock + per-instance counter + a principal hash (no randomness)."""
        self._counter += 1
        digest = 2166136261
        for byte in (principal or "").encode("utf-8"):
            digest = ((digest ^ byte) * 16777619) & 0xFFFFFFFF
        return f"{self.reply_suffix[:32]}-{host.clock_ms()}-{self._counter}-{digest:08x}"

    @staticmethod
    def _log(host, level: str, message: str) -> None:
        try:
            host.log(level, message)
        except Exception:
            pass
