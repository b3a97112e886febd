"""`--http-limit NAME=VALUE`: the front-door limits from the command line, and the errors for bad ones."""

from __future__ import annotations

import pytest

from astrid.cli.errors import UserError
from astrid.cli.http_limits import limit_names, with_overrides
from astrid.host.limits import HttpLimits
from tests.support.processes import run_astrid


def test_overrides_change_only_the_named_limits():
    overrides = ["sessions-per-principal=4", "header-timeout=2.5", "connections-per-client=0"]
    limits = with_overrides(HttpLimits(), overrides)
    assert (limits.sessions_per_principal, limits.header_timeout_s, limits.connections_per_client) == (4, 2.5, 0)
    assert limits.connections == HttpLimits().connections


def test_the_in_flight_cap_per_principal_is_a_limit_too():
    # one user's heavy client (or a benchmark) may need more than 16 requests in flight
    limits = with_overrides(HttpLimits(), ["requests-per-principal=64"])
    assert limits.requests_per_principal == 64 and HttpLimits().requests_per_principal == 16


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("sessions", "give NAME=VALUE"),
        ("nonsense=3", "give NAME=VALUE"),
        ("sessions=many", "is not a number"),
        ("sessions=1.5", "is not a number"),
        ("header-timeout=0", "positive"),
        ("body-timeout=inf", "positive"),
        ("connections=-1", "positive"),
    ],
)
def test_a_bad_override_names_itself_and_the_fix(override, says):
    with pytest.raises(UserError) as refused:
        with_overrides(HttpLimits(), [override])
    assert says in refused.value.message and override in refused.value.message


def test_the_help_lists_every_limit_with_its_default(tmp_path):
    assert "sessions-per-principal=16" in limit_names()
    done = run_astrid("mcp", "serve", "--help", cwd=tmp_path)
    flat = " ".join(done.stdout.split()).replace("- ", "-")  # click wraps at hyphens
    assert "--http-limit" in flat and "connections-per-client=128" in flat


def test_a_limit_without_http_is_an_error(tmp_path):
    done = run_astrid("mcp", "serve", "--http-limit", "sessions=4", cwd=tmp_path)
    assert done.returncode != 0
    assert "--http-limit: HTTP options, give them with --http" in done.stderr
