"""`Capsule`: resources declared with decorators, then served (`world()`, `dispatch`).

The declarations live in a `Registry` (`_registry`: resources, families,
templates, `@capsule.on` handlers); the hook calls are answered by a `Server`
(`_serving`, which documents the protocol: describe, read, templates,
complete, and the reserved actions `astrid.facts` and `astrid.static`);
handlers get a `Context` (`_context`).
"""

from __future__ import annotations

from astrid_sdk import _output
from astrid_sdk._checks import clean_segment
from astrid_sdk._context import Context, mint_correlation_id
from astrid_sdk._errors import DefinitionError
from astrid_sdk._records import Resource, ResourceTemplate
from astrid_sdk._registry import FACTS_VERSION, Family, Registry, Template, _Static, check_handler, refuse_twice
from astrid_sdk._serving import (
    COMPLETE_REPLY_PREFIX,
    DESCRIBE_HANDLER,
    DESCRIBE_REPLY_PREFIX,
    FACTS_ACTION,
    READ_REPLY_PREFIX,
    RESERVED_ACTIONS,
    SDK_HANDLERS,
    STATIC_ACTION,
    STATIC_VERSION,
    TEMPLATES_HANDLER,
    TEMPLATES_REPLY_PREFIX,
    Server,
)
from astrid_sdk._site import call_site, declare, subject
from astrid_sdk._skills import add_skills, dynamic_skill, load_index, skill_resources
from astrid_sdk._uri import flat_key as _flat_key

# Besides Capsule, the names the agreement tests read here (`_capsule.STATIC_ACTION`);
# each is at home in the module it is imported from.
__all__ = [
    "COMPLETE_REPLY_PREFIX",
    "DESCRIBE_HANDLER",
    "DESCRIBE_REPLY_PREFIX",
    "FACTS_ACTION",
    "FACTS_VERSION",
    "READ_REPLY_PREFIX",
    "RESERVED_ACTIONS",
    "STATIC_ACTION",
    "STATIC_VERSION",
    "TEMPLATES_HANDLER",
    "TEMPLATES_REPLY_PREFIX",
    "Capsule",
    "Context",
    "Family",
    "Template",
    "_flat_key",
]


def _checked_skill(uri, description, frontmatter, handler, visible) -> _Static:
    check_handler(handler, visible)
    return dynamic_skill(uri, description, frontmatter, handler, visible)


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
        self._registry = Registry()
        self._server = Server(self)
        self._counter = 0
        self._skills_served = False

    @property
    def _static(self) -> dict[str, _Static]:
        """The static resources by URI, in declaration order."""
        return self._registry.static

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
        (docs/contract/resources.md §5.7).
        """

        def decorate(handler):
            site = call_site()
            what = subject("resource", uri, handler)

            def define() -> Resource:
                check_handler(handler, visible)
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
                refuse_twice(self._registry.static.get(definition.uri))
                return definition

            definition = declare(site, what, define)
            self._registry.add_resource(_Static(definition, handler, visible, site))
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
                check_handler(handler)
                family = Family(prefix, handler, mime_type, annotations, icons, meta, max_age_s)
                refuse_twice(self._registry.family(family.prefix))
                return family

            family = declare(site, subject("resource family", prefix, handler), define)
            family.site = site
            self._registry.add_family(family)
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
                refuse_twice(self._registry.template(definition.uri_template))
                return Template(definition, handler, visible)

            template = declare(site, subject("template", uri_template, handler), define)
            template.site = site
            self._registry.add_template(template)
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
            self._registry.handlers[handler_name] = function
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
        return self._registry.facts(self.name)

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
        return self._server.static_replies(host)

    def skills(self, *, prefix: str | None = None, visible=None) -> None:
        """Serve the Agent Skills of the capsule's `skills/` folder (docs/skills.md), each file a static
        resource at `prefix + <name>/<path>` (default prefix `skill://<capsule name>/`).

        Optional: `world()` serves them with the defaults when this was not called. `visible(ctx) -> bool`
        hides every skill from principals it returns False for, as `visible=` of a resource does.
        """
        site = call_site()
        if self._skills_served:
            raise DefinitionError("skills are served once (call capsule.skills() at most once)", site=site)
        chosen = prefix if prefix is not None else f"skill://{self.name}/"
        if not isinstance(chosen, str) or not chosen.startswith("skill://") or not chosen.endswith("/"):
            raise DefinitionError(f"skills prefix {chosen!r} must start with skill:// and end with /", site=site)
        if visible is not None and not callable(visible):
            raise DefinitionError("visible= must be a function of ctx", site=site)
        self._skills_served = True
        index, root = load_index()
        if index is not None:
            declare(site, "skills", lambda: add_skills(self._registry, skill_resources(index, root, chosen, visible)))

    def skill(self, uri: str, *, description: str, frontmatter=None, visible=None):
        """Decorate `handler(ctx) -> str` writing the body of a skill's SKILL.md per call (per principal):
        a dynamic skill (docs/skills.md), its entry `"resources": "dynamic"`. `uri` is its SKILL.md's
        (`skill://notes/daily/SKILL.md`, the folder being the skill's name); the SDK writes the frontmatter
        (`name`, `description`, then `frontmatter`'s fields) above the body."""

        def decorate(handler):
            site = call_site()
            static = declare(
                site,
                subject("skill", uri, handler),
                lambda: _checked_skill(uri, description, frontmatter, handler, visible),
            )
            static.site = site
            refuse = self._registry.static.get(static.definition.uri)
            declare(site, subject("skill", uri, handler), lambda: refuse_twice(refuse))
            self._registry.add_resource(static)
            return handler

        return decorate

    def world(self):
        """The `WitWorld` class componentize-py exports (assign it to `WitWorld` in app.py)."""
        if not self._skills_served:
            self.skills()
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
        return self._server.dispatch(action, payload, host)

    def _mint_id(self, host, principal: str | None) -> str:
        """A correlation id for `ctx.request`: host clock + per-instance counter + a principal hash."""
        self._counter += 1
        return mint_correlation_id(self.reply_suffix, host.clock_ms(), self._counter, principal)
