"""The topic grammar (docs/contract/bus.md §2), with property tests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from astrid.host.bus.topics import is_valid_pattern, is_valid_topic, pattern_matches, topic_problem

segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=20)
topic = st.lists(segment, min_size=1, max_size=8).map(".".join).filter(lambda t: len(t) <= 256)


@given(topic)
def test_generated_topics_are_valid_and_match_themselves(t: str) -> None:
    assert is_valid_topic(t)
    assert pattern_matches(t, t)


@given(topic, st.lists(segment, min_size=1, max_size=3))
def test_trailing_star_matches_one_or_more_extra_segments(prefix: str, rest: list[str]) -> None:
    full = prefix + "." + ".".join(rest)
    if is_valid_topic(full):
        assert pattern_matches(prefix + ".*", full)
    assert not pattern_matches(prefix + ".*", prefix)


@given(topic, topic)
def test_exact_pattern_matches_only_equal_topic(a: str, b: str) -> None:
    assert pattern_matches(a, b) == (a == b)


@given(st.text(max_size=300))
def test_validation_never_raises(text: str) -> None:
    for pattern in (False, True):
        problem = topic_problem(text, pattern=pattern)
        assert problem is None or isinstance(problem, str)


@given(topic)
def test_star_only_valid_at_end(t: str) -> None:
    segments = t.split(".")
    if len(segments) < 8:
        assert is_valid_pattern(t + ".*")
    if len(segments) >= 2:
        assert not is_valid_pattern("*." + t)
        assert not is_valid_topic(t + ".*")


@pytest.mark.parametrize(
    "bad",
    ["", ".", "a..b", "a.", "A.b", "a.b c", "a/b", "a." * 8 + "a", "x" * 257, "a.*.b", "*", "a.b*"],
)
def test_bad_topics_and_patterns_are_refused(bad: str) -> None:
    assert not is_valid_topic(bad)
    assert topic_problem(bad)  # a reason, said to whoever sent it


@pytest.mark.parametrize("bad", ["*", "a.*.b", "*.a", "a.b*", "a..*"])
def test_bad_patterns_are_refused(bad: str) -> None:
    assert not is_valid_pattern(bad)
