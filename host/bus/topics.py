"""The bus topic grammar (docs/contract/bus.md §2).

A topic is 1-8 dot-separated segments of `[a-z0-9_-]+`, at most 256 bytes.
A subscription pattern is a topic whose last segment may be `*`, matching one
or more trailing segments.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

MAX_TOPIC_BYTES = 256
MAX_SEGMENTS = 8
WILDCARD = "*"

_SEGMENT = re.compile(r"[a-z0-9_-]+")


def topic_problem(topic: object, *, pattern: bool = False) -> str | None:
    """Why `topic` is not a valid topic (or pattern), or None when it is."""
    if not isinstance(topic, str):
        return f"{'pattern' if pattern else 'topic'} must be a string"
    if len(topic) > MAX_TOPIC_BYTES:  # at least as many bytes as characters; never kept below
        return f"{'pattern' if pattern else 'topic'} is longer than {MAX_TOPIC_BYTES} bytes"
    return _short_string_problem(topic, pattern)


@functools.lru_cache(maxsize=4096)  # every publish checks its topic; most topics recur
def _short_string_problem(topic: str, pattern: bool) -> str | None:
    kind = "pattern" if pattern else "topic"
    if not topic:
        return f"{kind} is empty"
    if len(topic.encode("utf-8", "surrogatepass")) > MAX_TOPIC_BYTES:
        return f"{kind} is longer than {MAX_TOPIC_BYTES} bytes"
    segments = topic.split(".")
    if len(segments) > MAX_SEGMENTS:
        return f"{kind} has more than {MAX_SEGMENTS} segments"
    for index, segment in enumerate(segments):
        if segment == WILDCARD and pattern:
            if index != len(segments) - 1:
                return "`*` is allowed only as the last segment"
            if index == 0:
                return "a pattern needs at least one segment before `*`"
            continue
        if not segment:
            return f"{kind} has an empty segment"
        if not _SEGMENT.fullmatch(segment):
            return f"segment {segment!r} is not [a-z0-9_-]+"
    return None


def is_valid_topic(topic: object) -> bool:
    return topic_problem(topic) is None


def is_valid_pattern(pattern: object) -> bool:
    return topic_problem(pattern, pattern=True) is None


def pattern_matches(pattern: str, topic: str) -> bool:
    """Does a valid `pattern` match a valid `topic`?

    Exact match, or a trailing `*` standing for one or more segments.
    """
    if not pattern.endswith("." + WILDCARD):
        return pattern == topic
    prefix = pattern[:-1]  # keeps the trailing dot
    return topic.startswith(prefix) and len(topic) > len(prefix)


def is_clean_segment(value: object) -> bool:
    """Can `value` be used as one topic segment (e.g. a correlation id)?"""
    return isinstance(value, str) and len(value) <= MAX_TOPIC_BYTES and bool(_SEGMENT.fullmatch(value))


@dataclass(frozen=True)
class ClusterTopics:
    """The bus's own topics between hosts (named in the topic registry, `contract/topics.py`)."""

    pattern: str  # all of them: what every host listens to
    heartbeat: str
    done_prefix: str  # + the asking host's id

    @property
    def ping_prefix(self) -> str:
        """+ a host's id: is it still there? (it answers on the asker's done topic)"""
        return self.heartbeat.rpartition(".")[0] + ".ping."
