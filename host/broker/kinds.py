"""The two listings the broker merges by one code, one row each: a principal's resources (the describe
round, docs/contract/resources.md §5) and its resource templates (docs/contract/templates.md §9.3).

Both are a fan-out merged by the rules of `merge.merge`, in a fixed order:

1. drop replies whose envelope principal is not the invoking principal;
2. honour at most one reply per envelope source-id (a second is dropped and
   logged);
3. parse the reply; an over-size reply (more than `<array>_per_describe`
   entries) is dropped whole and logged, a bad entry is dropped alone (a
   template whose `uri_template` breaks the URI-template rules too), an entry
   outside what the URI authority lets its capsule serve is dropped with an
   audit line, and a reply naming one key twice keeps its first entry;
4. dedup on the key (`uri`, `uri_template`): the lexicographically first
   source-id wins whatever the arrival order, and every collision is written
   to the audit log naming both capsules;
5. sort by the key and cap at `<array>_per_principal` (extras dropped, logged).

What differs between them is the row below and nothing else: the round kept
per principal (`listings.py`), its topics, caches and metrics follow from it.
"""

from __future__ import annotations

from typing import Any

from astrid.host.broker.authority import UriAuthority
from astrid.host.broker.merge import FanOut
from astrid.host.contract.resource import DescribeResponse, ResourceDefinition
from astrid.host.contract.template import ResourceTemplate, TemplatesResponse
from astrid.host.contract.uri_template import UriTemplate


def _serves(authority: UriAuthority, source: str, definition: ResourceDefinition) -> bool:
    return authority.may_serve(source, definition.uri)


def _covers(authority: UriAuthority, source: str, template: ResourceTemplate) -> bool:
    """A template offers every URI that starts with its literal prefix."""
    return authority.may_cover(source, UriTemplate.parse(template.uri_template).literal_prefix)


# round: (reply array, key, "<verb> <key> twice" in logs, the audit line, the reply model, may a capsule offer it)
_KINDS: dict[str, tuple[Any, ...]] = {
    "describe": ("resources", "uri", "lists", "resource uri collision", DescribeResponse, _serves),
    "templates": ("templates", "uri_template", "declares", "resource template collision", TemplatesResponse, _covers),
}

DESCRIBE: FanOut[ResourceDefinition] = FanOut("describe", *_KINDS["describe"])
TEMPLATES: FanOut[ResourceTemplate] = FanOut("templates", *_KINDS["templates"])
