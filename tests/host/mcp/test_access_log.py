"""The access log's pieces: failed logins counted past their rate, fields that cannot forge a line."""

from __future__ import annotations

import logging

import pytest

from astrid.host.mcp.access import FailureLog, _field, _target


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failed_logins_past_the_rate_are_counted_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    failures = FailureLog(every_s=10, per_window=2, clock=clock)
    with caplog.at_level(logging.INFO, logger="astrid.events"):
        for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.3", "10.0.0.4"):
            failures.failed(address, "unknown or revoked token")
        clock.now += 10
        failures.failed("10.0.0.5", "no credential (no Authorization header)")
    assert [r.getMessage() for r in caplog.records] == [
        "authentication failed from 10.0.0.1: unknown or revoked token",
        "authentication failed from 10.0.0.2: unknown or revoked token",
        "3 more failed authentications in 10 s, from 2 client addresses (not logged one by one)",
        "authentication failed from 10.0.0.5: no credential (no Authorization header)",
    ]


@pytest.mark.parametrize(
    "value, shown",
    [
        (None, "-"),
        ("", "-"),
        ("astrid://docs/index", "astrid://docs/index"),
        ("a b", "a%20b"),
        ("x\n2026-01-01 forged 200", "x%0A2026-01-01%20forged%20200"),
        ("100%", "100%25"),
        ("é", "%C3%A9"),
    ],
)
def test_a_field_is_one_token_of_the_line(value, shown) -> None:
    assert _field(value) == shown


def test_a_long_field_is_cut() -> None:
    assert _field("a" * 500) == "a" * 200 + "..."


@pytest.mark.parametrize(
    "method, params, target",
    [
        ("resources/read", {"uri": "astrid://whoami"}, "astrid://whoami"),
        ("tools/call", {"name": "read_resource", "arguments": {"uri": "astrid://x"}}, "read_resource(astrid://x)"),
        ("tools/call", {"name": "list_resources", "arguments": {}}, "list_resources"),
        ("completion/complete", {"ref": {"type": "ref/resource", "uri": "astrid://t/{x}"}}, "astrid://t/{x}"),
        ("resources/list", {}, None),
        ("ping", None, None),
    ],
)
def test_the_target_of_a_request(method, params, target) -> None:
    assert _target(method, params) == target
