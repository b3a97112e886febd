"""The pure core of a templates round and the template routing rule, without a bus."""

from __future__ import annotations

import itertools
import json
import logging

from astrid.host.broker.kinds import TEMPLATES
from astrid.host.broker.templates import pick_template, template_routes
from astrid.host.bus import Message, Principal
from astrid.host.limits import Limits

ALICE = Principal.verified("alice")


def reply(source: str, texts: list[str], principal: Principal = ALICE) -> Message:
    payload = json.dumps({"templates": [{"uri_template": t, "name": f"{t}@{source}"} for t in texts]})
    return Message("resource.v1.response.templates.x", payload, source, principal, "2026-01-01T00:00:00Z", 0)


def test_replies_of_other_principals_are_dropped(caplog):
    messages = [
        reply("s1", ["astrid://a/{x}"]),
        reply("s2", ["astrid://b/{x}"], Principal.verified("bob")),
        reply("s3", ["astrid://c/{x}"], Principal.claimed("alice")),
        reply("s4", ["astrid://d/{x}"], Principal.system()),
    ]
    with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
        result = TEMPLATES.merge(ALICE, messages, Limits())
    assert [t.uri_template for t in result.items] == ["astrid://a/{x}"]
    assert result.dropped_replies == 3 and result.replied == {"s1"}
    assert any("templates reply from s2 dropped: attributed to verified(bob)" in r.getMessage() for r in caplog.records)


def test_first_source_id_wins_in_every_arrival_order(caplog):
    messages = [reply(source, ["astrid://x/{id}"]) for source in ("src-c", "src-a", "src-b")]
    for order in itertools.permutations(messages):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
            result = TEMPLATES.merge(ALICE, order, Limits())
        assert result.owners == {"astrid://x/{id}": "src-a"}
        assert result.items[0].name == "astrid://x/{id}@src-a"
        assert sorted((c.winner, c.loser) for c in result.collisions) == [("src-a", "src-b"), ("src-a", "src-c")]
        assert len([r for r in caplog.records if r.name == "astrid.host.broker.audit"]) == 2


def test_a_lost_race_is_an_empty_round():
    assert TEMPLATES.merge(ALICE, [], Limits()).empty_round
    assert not TEMPLATES.merge(ALICE, [reply("s1", [])], Limits()).empty_round


def test_the_longest_literal_prefix_wins_then_the_first_source_id():
    routes = template_routes(
        {
            "astrid://{+all}": "src-0",
            "astrid://files/{+path}": "src-5",
            "astrid://files/img/{name}": "src-9",
            "astrid://t/{one}": "src-b",
            "astrid://t/{+many}": "src-a",
        }
    )

    def owner(uri: str) -> str | None:
        route = pick_template(routes, uri)
        return route.owner if route is not None else None

    assert owner("astrid://files/img/cat.png") == "src-9"
    assert owner("astrid://files/img/deep/cat.png") == "src-5"  # {name} is one segment
    assert owner("astrid://files/a") == "src-5"
    assert owner("astrid://x") == "src-0"
    assert owner("astrid://t/x") == "src-a"  # equal prefixes: the first source-id
    assert owner("astrid://files/../etc") is None  # no template takes a traversal
    assert owner("other://x") is None
