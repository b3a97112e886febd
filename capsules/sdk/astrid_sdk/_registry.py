"""What a capsule declares: its resources, families and templates, and the `@capsule.on` handlers.

`Registry` keeps them in the orders serving needs (a read goes to a static
resource, then the family with the longest prefix, then the templates with
the longest literal prefix) and answers the questions asked of the
declarations alone: which one owns a URI (`route`), whether the describe and
templates replies can differ between principals, and the facts the reserved
action `astrid.facts` answers (`facts`). Declaring happens in `_capsule`
(the decorators); answering, in `_serving`.
"""

from __future__ import annotations

from collections.abc import Callable

from astrid_sdk import _limits
from astrid_sdk._checks import check_uri, utf8_len
from astrid_sdk._errors import DefinitionError
from astrid_sdk._records import Resource, ResourceTemplate
from astrid_sdk._site import call_site, subject
from astrid_sdk._uri import flat_key

FACTS_VERSION = 1


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
    characters, and never `.` or `..` (also when percent-encoded; escapes
    decode as UTF-8, as a template's values do: `_uri.flat_key`). A read of a
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
        self._resource(self.prefix + "x", "x")  # validates the defaults once, at import (= build) time

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
        if not uri.startswith(self.prefix) or utf8_len(uri) > _limits.MAX_URI_BYTES:
            return None
        key = uri[len(self.prefix) :]
        return key if flat_key(key) else None

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
            return self._resource(uri, key)
        raise DefinitionError(f"a family member must be Resource or str, not {type(item).__name__}")

    def _resource(self, uri: str, name: str) -> Resource:
        """A member with the family's mime type, annotations, icons, meta and freshness."""
        return Resource(
            uri,
            name,
            mime_type=self.mime_type,
            annotations=self.annotations,
            icons=self.icons,
            meta=self.meta,
            max_age_s=self.max_age_s,
        )


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
        if not isinstance(uri, str) or len(uri.encode("utf-8", "surrogatepass")) > _limits.MAX_URI_BYTES:
            return None
        return self.parsed.match(uri)

    def __repr__(self) -> str:
        return f"Template({self.uri_template!r})"


def check_handler(handler, visible=None) -> None:
    if not callable(handler):
        raise DefinitionError(f"the handler is {type(handler).__name__}, not a function")
    if visible is not None and not callable(visible):
        raise DefinitionError("visible= must be a function of ctx")


def refuse_twice(first: _Static | Family | Template | None) -> None:
    """DefinitionError when `first` (the same URI, prefix or template declared before) exists."""
    if first is not None:
        raise DefinitionError("declared twice" + _first_at(first.site, first.handler))


def _first_at(site: str | None, handler) -> str:
    """` (first at app.py:12 on readme())`, for a duplicate declaration's error."""
    name = getattr(handler, "__name__", None)
    parts = ([f"at {site}"] if site else []) + ([f"on {name}()"] if isinstance(name, str) else [])
    return f" (first {' '.join(parts)})" if parts else ""


class Registry:
    """One capsule's declarations."""

    def __init__(self) -> None:
        self.static: dict[str, _Static] = {}
        self.families: list[Family] = []  # longest prefix first, so a narrower family wins over a wider one
        self.templates: list[Template] = []  # in declaration order (templates lists them so)
        self.by_prefix: list[Template] = []  # longest literal prefix first, then declaration order
        self.handlers: dict[str, object] = {}

    def add_resource(self, static: _Static) -> None:
        self.static[static.definition.uri] = static

    def add_family(self, family: Family) -> None:
        self.families.append(family)
        self.families.sort(key=lambda f: len(f.prefix), reverse=True)

    def add_template(self, template: Template) -> None:
        self.templates.append(template)
        # sorted() is stable: equal prefixes keep declaration order
        self.by_prefix = sorted(self.templates, key=lambda t: len(t.parsed.literal_prefix), reverse=True)

    def family(self, prefix: str) -> Family | None:
        return next((f for f in self.families if f.prefix == prefix), None)

    def template(self, uri_template: str) -> Template | None:
        return next((t for t in self.templates if t.uri_template == uri_template), None)

    def route(self, uri: str):
        """(handler kind, target, key) for a URI this capsule serves, else None.

        A static resource first, then a family, then the templates that match
        (as a list of (template, params), longest literal prefix first: which
        one serves depends on what the caller may see).
        """
        static = self.static.get(uri)
        if static is not None:
            return "static", static, None
        for family in self.families:
            key = family.key_of(uri)
            if key is not None:
                return "family", family, key
        matches = []
        for template in self.by_prefix:
            params = template.match(uri)
            if params is not None:
                matches.append((template, params))
        if matches:
            return "template", matches, None
        return None

    def describe_is_constant(self) -> bool:
        """Static resources only, none with `visible`, no lister: every principal gets the same reply."""
        listers = [f._lister for f in self.families] + [t._lister for t in self.templates]
        return all(s.visible is None for s in self.static.values()) and all(lister is None for lister in listers)

    def templates_are_constant(self) -> bool:
        """No template with `visible`: every principal gets the same templates reply."""
        return all(t.visible is None for t in self.templates)

    def facts(self, name: str) -> dict:
        """What the code declares (`Capsule.facts()`): static declarations only, no handler runs."""
        sites: dict[str, str] = {}  # what -> where the author declared it, when known
        declared: list[tuple[str, str | None]] = [(uri, static.site) for uri, static in self.static.items()]
        declared += [(family.prefix, family.site) for family in self.families]
        declared += [(template.uri_template, template.site) for template in self.templates]
        for what, site in declared:
            if isinstance(site, str) and site:
                sites[what] = site
        return {
            "facts": FACTS_VERSION,
            "name": name,
            "resources": list(self.static),
            "families": [family.prefix for family in self.families],
            "templates": [
                {
                    "uri_template": template.uri_template,
                    "literal_prefix": template.parsed.literal_prefix,
                    "completes": sorted(template._completers),
                }
                for template in self.templates
            ],
            "handlers": sorted(self.handlers),
            "sites": sites,
        }
