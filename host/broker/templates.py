"""The pure core of a templates round, and the template routing rule.

No bus here. `merge_templates` takes the messages a templates round drained
(in arrival order) and applies docs/contract/templates.md §9.3 with the rules every
fan-out shares (`merge.merge`):

1. drop replies whose envelope principal is not the invoking principal;
2. honour at most one reply per envelope source-id (a second is dropped and
   logged);
3. parse the reply; an over-size reply (more than `templates_per_describe`
   entries) is dropped whole and logged, a bad entry (one that does not
   validate, or whose `uri_template` breaks the URI-template rules) is
   dropped alone; a capsule declaring one `uri_template` twice keeps its
   first entry;
4. dedup on `uri_template`: the lexicographically first source-id wins
   whatever the arrival order, and every collision is written to the audit
   log (logger `astrid.host.broker.audit`) naming both capsules (by name; with
   their source-ids under -v, or when they share a name);
5. sort by `uri_template` and cap at `templates_per_principal` (extras
   dropped, logged).

`pick_template` is the routing rule for a URI nobody lists: among the
templates that match it, the one with the longest literal prefix wins; on a
tie, the lexicographically first source-id (then the first `uri_template`,
so the pick never depends on arrival order).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from astrid.host.broker.authority import OPEN, UriAuthority
from astrid.host.broker.merge import NO_LOCAL, Collision, FanOut, LocalEntries, RoundOf, merge
from astrid.host.broker.names import NO_NAMES, CapsuleNames
from astrid.host.bus import Message, Principal
from astrid.host.contract.template import ResourceTemplate, TemplatesResponse
from astrid.host.contract.uri_template import UriTemplate
from astrid.host.limits import Limits

TemplateCollision = Collision  # a templates round's collisions, by their old name


class TemplatesResult(RoundOf[ResourceTemplate]):
    """What one templates round produced for one principal (its `items` are its templates)."""

    @property
    def templates(self) -> list[ResourceTemplate]:
        return self.items


@dataclass(frozen=True)
class TemplateRoute:
    """One template as the router sees it: who owns it and what it matches."""

    template: UriTemplate
    owner: str

    @property
    def key(self) -> tuple[int, str, str]:
        # longest literal prefix first, then the first source-id, then the first text
        return (-len(self.template.literal_prefix), self.owner, self.template.text)


def _one_template(entry: object, context: dict[str, Any]) -> ResourceTemplate:
    # Through TemplatesResponse, so the reply-level rules and the per-entry limits come from the one model.
    return TemplatesResponse.model_validate({"templates": [entry]}, context=context).templates[0]


TEMPLATES = FanOut[ResourceTemplate](
    round="templates",
    array="templates",
    key_name="uri_template",
    listed_twice="declares",
    audit_label="resource template collision",
    validate=_one_template,
    key=lambda template: template.uri_template,
    authorized=lambda authority, source, template: authority.may_cover(
        source, UriTemplate.parse(template.uri_template).literal_prefix
    ),
    per_reply=lambda limits: limits.templates_per_describe,
    per_principal=lambda limits: limits.templates_per_principal,
)


def merge_templates(
    principal: Principal,
    messages: Iterable[Message],
    limits: Limits,
    authority: UriAuthority = OPEN,
    names: CapsuleNames = NO_NAMES,
    local: LocalEntries[ResourceTemplate] = NO_LOCAL,
) -> TemplatesResult:
    return TemplatesResult.of(principal, merge(TEMPLATES, principal, messages, limits, authority, names, local))


def template_routes(owners: Mapping[str, str]) -> tuple[TemplateRoute, ...]:
    """The routing table of a templates snapshot, in the order `pick_template` tries it."""
    routes = [TemplateRoute(UriTemplate.parse(text), owner) for text, owner in owners.items()]
    return tuple(sorted(routes, key=lambda route: route.key))


def pick_template(routes: Iterable[TemplateRoute], uri: str) -> TemplateRoute | None:
    """The route that serves `uri`: the first match in `template_routes` order (see the module docstring)."""
    for route in routes:
        if route.template.match(uri) is not None:
            return route
    return None
