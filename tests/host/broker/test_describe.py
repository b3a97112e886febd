"""The pure core of a describe round, without a bus."""

from __future__ import annotations

import itertools
import json
import logging

from hypothesis import given
from hypothesis import strategies as st

from astrid.host.broker.kinds import DESCRIBE
from astrid.host.bus import Message, Principal
from astrid.host.limits import Limits

ALICE = Principal.verified("alice")


def reply(source: str, uris: list[str], principal: Principal = ALICE, name: str | None = None) -> Message:
    payload = json.dumps({"resources": [{"uri": u, "name": name or f"{u}@{source}"} for u in uris]})
    return Message("resource.v1.response.describe.x", payload, source, principal, "2026-01-01T00:00:00Z", 0)


def test_replies_of_other_principals_are_dropped(caplog):
    messages = [
        reply("s1", ["astrid://a"]),
        reply("s2", ["astrid://b"], Principal.verified("bob")),
        reply("s3", ["astrid://c"], Principal.claimed("alice")),
        reply("s4", ["astrid://d"], Principal.system()),
    ]
    with caplog.at_level(logging.WARNING):
        result = DESCRIBE.merge(ALICE, messages, Limits())
    assert [r.uri for r in result.items] == ["astrid://a"]
    assert result.dropped_replies == 3
    assert result.replied == {"s1"}


def test_first_source_id_wins_in_every_arrival_order():
    messages = [
        reply("src-c", ["astrid://x"]),
        reply("src-a", ["astrid://x"]),
        reply("src-b", ["astrid://x", "astrid://y"]),
    ]
    for order in itertools.permutations(messages):
        result = DESCRIBE.merge(ALICE, order, Limits())
        assert result.owners == {"astrid://x": "src-a", "astrid://y": "src-b"}
        assert [r.name for r in result.items] == ["astrid://x@src-a", "astrid://y@src-b"]
        assert sorted((c.winner, c.loser) for c in result.collisions) == [("src-a", "src-b"), ("src-a", "src-c")]


@given(
    st.lists(st.tuples(st.sampled_from("abcde"), st.lists(st.sampled_from("uvwxyz"), max_size=4)), max_size=6),
    st.randoms(),
)
def test_the_result_never_depends_on_arrival_order(replies, random):
    messages = [reply(f"src-{s}", [f"astrid://{u}" for u in uris]) for s, uris in replies]
    shuffled = list(messages)
    random.shuffle(shuffled)
    # the same source twice: only its first reply counts, so compare on distinct sources
    first_only = {}
    for m in messages:
        first_only.setdefault(m.source_id, m)
    distinct = list(first_only.values())
    shuffled_distinct = [m for m in shuffled if first_only[m.source_id] is m]
    one = DESCRIBE.merge(ALICE, distinct, Limits())
    two = DESCRIBE.merge(ALICE, shuffled_distinct, Limits())
    assert one.items == two.items and one.owners == two.owners
    assert [r.uri for r in one.items] == sorted(r.uri for r in one.items)


def test_empty_round_versus_empty_reply():
    assert DESCRIBE.merge(ALICE, [], Limits()).empty_round
    assert not DESCRIBE.merge(ALICE, [reply("s1", [])], Limits()).empty_round
