"""Which template serves a URI nobody lists (docs/contract/templates.md §9.3).

`pick_template` is the routing rule: among the templates that match the URI,
the one with the longest literal prefix wins; on a tie, the lexicographically
first source-id (then the first `uri_template`, so the pick never depends on
arrival order).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from astrid.host.contract.uri_template import UriTemplate


@dataclass(frozen=True)
class TemplateRoute:
    """One template as the router sees it: who owns it and what it matches."""

    template: UriTemplate
    owner: str

    @property
    def key(self) -> tuple[int, str, str]:
        # longest literal prefix first, then the first source-id, then the first text
        return (-len(self.template.literal_prefix), self.owner, self.template.text)


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
