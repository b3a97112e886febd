"""The SDK's reserved action `astrid.facts`: what the code declares, for the host's manifest check.

Driven natively with a recording host (the SDK is plain Python); the host
side (`read_built`, which asks a built component in the sandbox) is covered
in tests/host/build/test_code_check.py and tests/security.
"""

from __future__ import annotations

import json

import pytest

from astrid.host.build import code_check
from astrid_sdk import Capsule, DefinitionError, NotFound, _capsule
from tests.capsules.test_sdk_native import Caller, RecordingHost


def declared() -> Capsule:
    capsule = Capsule("facts")

    @capsule.resource("astrid://facts/a", name="a", visible=lambda ctx: False)
    def a(ctx):
        raise AssertionError("no handler runs for the facts")

    @capsule.resource_family("astrid://facts/notes/")
    def note(ctx, uri):
        raise NotFound(uri)

    @note.lister
    def notes(ctx):
        raise AssertionError("no lister runs for the facts")

    @capsule.template("astrid://facts/{+path}", name="file")
    def file(ctx):
        return "x"

    @file.complete("path")
    def paths(ctx, prefix):
        return []

    @capsule.on("tick")
    def tick(ctx, payload):
        raise AssertionError("no handler runs for the facts")

    return capsule


def test_the_host_asks_what_the_sdk_answers():
    assert code_check.FACTS_ACTION == _capsule.FACTS_ACTION == "astrid.facts"
    assert code_check.FACTS_VERSION == _capsule.FACTS_VERSION


@pytest.mark.parametrize("caller", [Caller(), Caller(attribution="system", principal=None), None])
def test_facts_answer_before_any_principal_check_and_the_same_for_everyone(caller):
    capsule = declared()
    host = RecordingHost(caller_value=caller)
    action, data = capsule.dispatch("astrid.facts", b"", host)
    assert action == "final"
    assert data is not None
    assert json.loads(data) == capsule.facts()
    assert host.published == [] and host.logs == []  # answered, nothing sent, nothing logged


def test_facts_are_the_static_declarations_with_where_they_are():
    facts = declared().facts()
    sites = facts.pop("sites")
    assert facts == {
        "facts": 1,
        "name": "facts",
        "resources": ["astrid://facts/a"],
        "families": ["astrid://facts/notes/"],
        "templates": [
            {"uri_template": "astrid://facts/{+path}", "literal_prefix": "astrid://facts/", "completes": ["path"]}
        ],
        "handlers": ["tick"],
    }
    assert set(sites) == {"astrid://facts/a", "astrid://facts/notes/", "astrid://facts/{+path}"}
    assert all(site.startswith("test_sdk_facts.py:") for site in sites.values())
    # What the host makes of them: the same, field by field.
    parsed = code_check.parse_facts(json.dumps(declared().facts()))
    assert parsed.resources == ("astrid://facts/a",)
    assert parsed.templates == (code_check.TemplateFacts("astrid://facts/{+path}", "astrid://facts/", ("path",)),)
    assert parsed.handlers == ("tick",) and parsed.name == "facts"


def test_the_reserved_name_cannot_be_a_handler():
    capsule = Capsule("facts")
    with pytest.raises(DefinitionError, match="served by the SDK itself"):

        @capsule.on("astrid.facts")
        def sneaky(ctx, payload):
            return None


@pytest.mark.parametrize(
    "data",
    [
        '{"facts": 1, "resources": "astrid://x/a"}',
        '{"facts": 1, "templates": [{"uri_template": "astrid://x/{a}"}]}',
        '{"facts": 1, "sites": {"a": 1}}',
        '{"facts": 1, "name": 7}',
        "[1]",
    ],
)
def test_malformed_facts_are_refused(data: str):
    with pytest.raises(ValueError):
        code_check.parse_facts(data)
