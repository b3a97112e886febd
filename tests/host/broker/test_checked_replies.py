"""A reply the same for every principal is parsed and validated once; what depends on the round is not."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from astrid.host.broker.kinds import DESCRIBE
from astrid.host.broker.merge import CheckedReplies
from astrid.host.bus import Message, Principal
from astrid.host.limits import Limits

LIMITS = Limits()


def message(payload: str, principal: Principal, source: str = "s1") -> Message:
    return Message("resource.v1.response.describe.x", payload, source, principal, "2026-01-01T00:00:00Z", 0)


def counting_describe(calls: list[object]) -> Any:
    """DESCRIBE whose reply model counts the entries it validates (one at a time)."""

    class Counting:
        @staticmethod
        def model_validate(data: Any, *, context: dict[str, Any]) -> Any:
            calls.extend(data["resources"])
            return DESCRIBE.response.model_validate(data, context=context)

    return dataclasses.replace(DESCRIBE, response=Counting)


def test_the_same_reply_for_two_principals_is_validated_once():
    payload = json.dumps({"resources": [{"uri": "astrid://a", "name": "a"}, {"uri": "astrid://b", "name": "b"}]})
    calls: list[object] = []
    kind = counting_describe(calls)
    replies = CheckedReplies()
    first = replies.checked(kind, message(payload, Principal.verified("alice")), LIMITS)
    second = replies.checked(kind, message(payload, Principal.verified("bob")), LIMITS)
    assert len(calls) == 2  # two entries, validated for the first principal only
    assert first is second
    assert not isinstance(first, str) and [e.item.uri for e in first if e.item] == ["astrid://a", "astrid://b"]


def test_another_text_or_other_limits_is_checked_again():
    calls: list[object] = []
    kind = counting_describe(calls)
    replies = CheckedReplies()
    alice = Principal.verified("alice")
    replies.checked(kind, message(json.dumps({"resources": [{"uri": "astrid://a", "name": "a"}]}), alice), LIMITS)
    replies.checked(kind, message(json.dumps({"resources": [{"uri": "astrid://a", "name": "b"}]}), alice), LIMITS)
    tight = Limits(resources_per_describe=0)
    over = replies.checked(kind, message(json.dumps({"resources": [{"uri": "astrid://a", "name": "b"}]}), alice), tight)
    assert len(calls) == 2
    assert over == "1 resources, more than the limit of 0"


def test_what_it_keeps_is_bounded_in_replies_and_characters():
    replies = CheckedReplies(max_replies=3, max_chars=10_000, max_reply_chars=1_000)
    alice = Principal.verified("alice")
    for index in range(10):
        replies.checked(DESCRIBE, message(json.dumps({"resources": [{"uri": f"astrid://{index}"}]}), alice), LIMITS)
    assert len(replies._kept) == 3
    big = json.dumps({"resources": [{"uri": "astrid://big", "name": "x" * 2_000}]})
    calls: list[object] = []
    kind = counting_describe(calls)
    replies.checked(kind, message(big, alice), LIMITS)
    replies.checked(kind, message(big, alice), LIMITS)
    assert len(calls) == 2  # over the per-reply size: checked every time, never kept


def test_each_round_still_logs_its_own_dropped_entries(caplog):
    payload = json.dumps({"resources": [{"uri": "astrid://ok", "name": "ok"}, {"uri": 7}]})
    with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
        for name in ("alice", "bob"):
            principal = Principal.verified(name)
            result = DESCRIBE.merge(principal, [message(payload, principal)], LIMITS)
            assert [r.uri for r in result.items] == ["astrid://ok"] and result.dropped_entries == 1
    dropped = [r.getMessage() for r in caplog.records if "entry 1 dropped" in r.getMessage()]
    assert len(dropped) == 2
