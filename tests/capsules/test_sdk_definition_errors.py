"""Issue 20: a definition error names the resource and points at the author's line, not the SDK's.

`@capsule.resource(...)` and the other declarations run at import, which is
build time; their errors are one message, `app.py:12: resource astrid://x/y
on fresh(): max_age_s must be ...`. Here the SDK runs on the host's CPython,
so the file is this test file; test_first_hour.py checks what `astrid
capsule build` prints for a real capsule. A handler's exception points at
the author's line too, never at the SDK frame that raised on its behalf.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from astrid_sdk import Capsule, DefinitionError, HostError
from tests.capsules.test_sdk_native import RecordingHost

HERE = __name__.rsplit(".", 1)[-1] + ".py"


def next_line() -> int:
    """The line after the caller's."""
    return sys._getframe(1).f_lineno + 1


def line_of(text: str) -> int:
    """The line of this file with the decorator that holds `text` (once)."""
    source = Path(__file__).read_text().splitlines()
    lines = [number for number, line in enumerate(source, 1) if line.strip().startswith("@") and text in line]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def test_a_bad_resource_names_it_and_its_decorator_line():
    capsule = Capsule("x")
    with pytest.raises(DefinitionError) as caught:

        @capsule.resource("astrid://x/fresh", max_age_s=0)
        def fresh(ctx):
            return "fresh"

    error = caught.value
    line = line_of('@capsule.resource("astrid://x/fresh", max_age_s=0)')
    assert str(error) == (
        f"{HERE}:{line}: resource astrid://x/fresh on fresh(): "
        "max_age_s must be more than 0 and at most 86400 seconds, not 0"
    )
    assert (error.site, error.subject) == (f"{HERE}:{line}", "resource astrid://x/fresh on fresh()")
    assert error.problem.startswith("max_age_s must be")
    assert error.__cause__ is None and error.__suppress_context__  # one message, no chained SDK error


def test_a_duplicate_uri_names_both_declarations():
    capsule = Capsule("x")

    @capsule.resource("astrid://x/a")  # first
    def readme(ctx):
        return "a"

    with pytest.raises(DefinitionError) as caught:

        @capsule.resource("astrid://x/a")  # second
        def again(ctx):
            return "b"

    first, second = line_of("# first"), line_of("# second")
    assert str(caught.value) == (
        f"{HERE}:{second}: resource astrid://x/a on again(): declared twice (first at {HERE}:{first} on readme())"
    )


@pytest.mark.parametrize(
    ("declare", "subject", "problem"),
    [
        (
            lambda c: c.template("astrid://x/{a}{b}")(lambda ctx: "x"),
            "template astrid://x/{a}{b} on <lambda>()",
            "two variables with no literal between them",
        ),
        (
            lambda c: c.template("astrid://x/{a}", meta=[1])(lambda ctx: "x"),
            "template astrid://x/{a} on <lambda>()",
            "meta must be a dict, not list",
        ),
        (
            lambda c: c.resource_family("astrid://x/f/", max_age_s=-1)(lambda ctx, uri: "x"),
            "resource family astrid://x/f/ on <lambda>()",
            "max_age_s must be more than 0",
        ),
        (
            lambda c: c.resource("astrid://x/a", annotations={"audience": ["robot"]})(lambda ctx: "x"),
            "resource astrid://x/a on <lambda>()",
            "audience role 'robot'",
        ),
        (
            lambda c: c.resource("astrid://x/a")("not a function"),
            "resource astrid://x/a",
            "the handler is str, not a function",
        ),
        (
            lambda c: c.resource("astrid://x/a", visible=True)(lambda ctx: "x"),
            "resource astrid://x/a on <lambda>()",
            "visible= must be a function of ctx",
        ),
        (
            lambda c: c.template("astrid://x/{a}")(lambda ctx: "x").complete("b"),
            "template astrid://x/{a}",
            "no variable 'b' to complete",
        ),
        (
            lambda c: c.on("read")(lambda ctx, payload: None),
            "handler 'read' on <lambda>()",
            "served by the SDK itself",
        ),
        (lambda c: Capsule(""), "Capsule('')", "a capsule needs a name"),
    ],
)
def test_every_declaration_error_names_what_and_where(declare, subject, problem):
    capsule = Capsule("x")
    with pytest.raises(DefinitionError) as caught:
        declare(capsule)
    error = caught.value
    line = declare.__code__.co_firstlineno  # the lambda calls the SDK: the first frame outside it
    assert error.site == f"{HERE}:{line}"
    assert error.subject == subject
    assert problem in error.problem
    assert str(error).startswith(f"{HERE}:{line}: {subject}: ")


def test_a_duplicate_family_prefix_is_refused():
    capsule = Capsule("x")
    capsule.resource_family("astrid://x/f/")(lambda ctx, uri: "a")
    with pytest.raises(DefinitionError, match=r"resource family astrid://x/f/ on <lambda>\(\): declared twice"):
        capsule.resource_family("astrid://x/f/")(lambda ctx, uri: "b")


def test_a_value_checked_on_its_own_keeps_its_plain_message():
    from astrid_sdk import Resource

    with pytest.raises(DefinitionError) as caught:
        Resource("astrid://x/a", max_age_s=0)
    assert caught.value.site is None and str(caught.value).startswith("max_age_s must be")


class RefusingHost(RecordingHost):
    def subscribe(self, pattern: str):
        raise HostError("denied")


def test_a_handler_error_raised_inside_the_sdk_points_at_the_handler_line():
    capsule = Capsule("x")

    @capsule.resource("astrid://x/ask", mime_type="text/plain")
    def ask(ctx):
        line.append(next_line())
        return ctx.request("some.topic", "some.reply")  # the SDK raises RequestError for the author

    line: list[int] = []
    host = RefusingHost()
    outcome = capsule.dispatch("read", json.dumps({"uri": "astrid://x/ask", "correlation_id": "c-1"}), host)
    assert outcome[0] == "error"
    assert "RequestError: cannot subscribe to some.reply.*" in outcome[1]
    assert outcome[1].endswith(f"({HERE}:{line[0]} in ask)"), outcome[1]
    assert "_capsule.py" not in outcome[1]
