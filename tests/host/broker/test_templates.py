"""Templates and completion in the broker (docs/contract/templates.md §9), on the real Bus with fake capsules."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from astrid.host.bus import Principal
from astrid.host.contract.outcomes import FailureCode
from astrid.host.limits import Limits
from tests.host.broker.fakes import ALICE, BOB, FakeCapsule, resource, template, template_body, text

FILES = "astrid://files/{+path}"


def body(reply) -> str:
    assert reply.error is None, reply.error
    [chunk] = reply.contents
    return chunk.text


# -- the templates fan-out (the rules it shares with describe: test_listings.py) --------------


def test_the_first_source_id_owns_a_shared_uri_template_for_reads_and_completions(bus, make_broker):
    for source in ("src-b", "src-a"):  # the winner is not the first to bind
        FakeCapsule(
            bus,
            f"cap-{source}",
            source_id=source,
            templates={"alice": [template("astrid://shared/{id}")]},
            completion_values={"id": [f"{source}-1"]},
        )
    _, client = make_broker(bus)

    assert body(client(ALICE).read_resource("astrid://shared/7")) == template_body("cap-src-a", {"id": "7"})
    assert client(ALICE).complete("astrid://shared/{id}", "id", "").values == ("src-a-1",)


# -- the cache ------------------------------------------------------------------------------


def test_a_refresh_of_either_list_asks_for_templates_again(bus, make_broker):
    files = FakeCapsule(bus, "files", templates={"alice": [template(FILES)]})
    _, client = make_broker(bus)
    client(ALICE).list_templates()
    client(ALICE).list_templates()
    assert files.template_calls == 1

    # a refresh asks again; so does a forced describe round (the same refresh)
    client(ALICE).list_templates(refresh=True)
    assert files.template_calls == 2
    client(ALICE).list_resources(refresh=True)
    client(ALICE).list_templates()
    assert files.template_calls == 3


# -- reads: listed > longest-prefix template > broadcast ------------------------------------


def precedence_capsules(bus) -> dict[str, FakeCapsule]:
    """A greedy template over the whole scheme (its source-id sorts first), a
    specific one, a lister and an unlisted family server."""
    return {
        "greedy": FakeCapsule(
            bus, "greedy", source_id="src-0-greedy", templates={"alice": [template("astrid://{+all}")]}
        ),
        "files": FakeCapsule(bus, "files", source_id="src-5-files", templates={"alice": [template(FILES)]}),
        "lister": FakeCapsule(
            bus,
            "lister",
            source_id="src-9-lister",
            resources={"alice": [resource("astrid://files/listed.md")]},
            contents={"alice": {"astrid://files/listed.md": [text("astrid://files/listed.md", "listed")]}},
        ),
        "family": FakeCapsule(
            bus,
            "family",
            source_id="src-1-family",
            contents={"alice": {"other://family/x": [text("other://family/x", "family")]}},
        ),
    }


def test_a_listed_uri_goes_to_its_lister_whatever_the_templates(bus, make_broker):
    capsules = precedence_capsules(bus)
    _, client = make_broker(bus)

    assert body(client(ALICE).read_resource("astrid://files/listed.md")) == "listed"
    assert all(c.template_calls == 0 for c in capsules.values())  # templates not even fetched


def test_an_unlisted_uri_goes_to_the_template_with_the_longest_literal_prefix(bus, make_broker):
    capsules = precedence_capsules(bus)
    _, client = make_broker(bus)

    reply = client(ALICE).read_resource("astrid://files/notes/today.md")
    assert body(reply) == template_body("files", {"path": "notes/today.md"})
    reply = client(ALICE).read_resource("astrid://elsewhere/x")
    assert body(reply) == template_body("greedy", {"all": "elsewhere/x"})
    assert capsules["greedy"].template_calls == 1  # cached: once per snapshot generation


def test_a_uri_no_template_matches_is_broadcast_as_before(bus, make_broker):
    precedence_capsules(bus)
    _, client = make_broker(bus)

    assert body(client(ALICE).read_resource("other://family/x")) == "family"
    nobody = client(ALICE).read_resource("other://nobody/home")
    assert nobody.error is not None and nobody.error.code is FailureCode.NOT_FOUND
    traversal = client(ALICE).read_resource("astrid://files/../etc/passwd")  # matches no template
    assert traversal.error is not None and traversal.error.code is FailureCode.NOT_FOUND


def test_equal_literal_prefixes_tie_to_the_first_source_id(bus, make_broker):
    FakeCapsule(bus, "seg", source_id="src-b", templates={"alice": [template("astrid://t/{one}")]})
    FakeCapsule(bus, "span", source_id="src-a", templates={"alice": [template("astrid://t/{+many}")]})
    _, client = make_broker(bus)

    assert body(client(ALICE).read_resource("astrid://t/x")) == template_body("span", {"many": "x"})


def test_a_template_read_is_served_by_the_template_owner_only(bus, make_broker):
    """The owner stays silent; another capsule serves the URI as a family member: refused."""
    FakeCapsule(bus, "owner", source_id="src-z", templates={"alice": [template(FILES)]}, serve_template_reads=False)
    FakeCapsule(
        bus,
        "squatter",
        source_id="src-a",
        contents={"alice": {"astrid://files/a.md": [text("astrid://files/a.md", "squatted")]}},
    )
    _, client = make_broker(bus)

    reply = client(ALICE).read_resource("astrid://files/a.md")

    assert reply.error is not None and reply.error.code is FailureCode.NOT_FOUND and not reply.contents
    assert "src-z" in reply.error.message and "template" in reply.error.message


def test_a_silent_template_owner_has_no_such_resource(bus, make_broker):
    FakeCapsule(bus, "owner", templates={"alice": [template(FILES)]}, serve_template_reads=False)
    _, client = make_broker(bus)
    reply = client(ALICE).read_resource("astrid://files/a.md")
    assert reply.error is not None and reply.error.code is FailureCode.NOT_FOUND
    assert "has no such resource" in reply.error.message and not reply.contents


def test_a_hanging_template_owner_times_out(threaded_bus, make_broker):
    release = threading.Event()
    FakeCapsule(threaded_bus, "owner", templates={"alice": [template(FILES)]}, hang=release)
    _, client = make_broker(threaded_bus, Limits(read_window_s=0.3, describe_window_s=0.3))
    try:
        reply = client(ALICE).read_resource("astrid://files/a.md")
    finally:
        release.set()
    assert reply.error is not None and reply.error.code is FailureCode.TIMEOUT


def test_a_template_read_after_the_owner_was_rebuilt_goes_to_the_new_build(bus, make_broker):
    old = FakeCapsule(bus, "files", source_id="src-old", templates={"alice": [template(FILES)]})
    _, client = make_broker(bus)
    assert body(client(ALICE).read_resource("astrid://files/a")) == template_body("files", {"path": "a"})

    old.unload()  # rebuilt, and no announcement yet
    FakeCapsule(bus, "files2", source_id="src-new", templates={"alice": [template(FILES)]})

    assert body(client(ALICE).read_resource("astrid://files/a")) == template_body("files2", {"path": "a"})


def test_template_routing_is_per_principal(bus, make_broker):
    FakeCapsule(bus, "mine", templates={"alice": [template("astrid://mine/{x}")]})
    _, client = make_broker(bus)
    assert body(client(ALICE).read_resource("astrid://mine/1")) == template_body("mine", {"x": "1"})
    reply = client(BOB).read_resource("astrid://mine/1")
    assert reply.error is not None and reply.error.code is FailureCode.NOT_FOUND


# -- completion -----------------------------------------------------------------------------


def files_capsule(bus, **extra) -> FakeCapsule:
    return FakeCapsule(
        bus,
        "files",
        source_id="src-m-files",
        templates={"alice": [template("astrid://files/{dir}/{name}")]},
        completion_values={"name": ["notes.md", "now.txt", "other.md"], "dir": ["docs"]},
        **extra,
    )


def test_completion_comes_from_the_templates_owner(bus, make_broker):
    files = files_capsule(bus)
    _, client = make_broker(bus)

    reply = client(ALICE).complete("astrid://files/{dir}/{name}", "name", "no", {"dir": "docs", "junk": "x"})

    assert reply.error is None
    assert (
        reply.values
        == (
            "notes.md",
            "now.txt",
        )
        and reply.total == 2
        and reply.has_more is False
    )
    [request] = files.complete_requests
    assert request["argument_name"] == "name" and request["argument_value"] == "no"
    # only the template's other variables travel on
    assert request["context_arguments"] == [{"name": "dir", "value": "docs"}]


def test_a_completion_answer_from_another_capsule_is_ignored(bus, make_broker, caplog):
    # The impostor sorts first and answers first (the owner takes its time).
    impostor = FakeCapsule(
        bus, "impostor", source_id="src-a", raw_complete=lambda r: json.dumps({"values": ["evil"]}), bind_templates=True
    )
    files_capsule(bus, complete_delay=0.05)
    _, client = make_broker(bus)

    with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
        reply = client(ALICE).complete("astrid://files/{dir}/{name}", "name", "")

    assert reply.values == (
        "notes.md",
        "now.txt",
        "other.md",
    )
    assert impostor.completes == 1  # it heard the broadcast, and answered
    assert any("replies of src-a refused" in r.getMessage() for r in caplog.records)


def test_a_silent_owner_is_a_capsule_error_even_when_another_answers(bus, make_broker):
    files_capsule(bus, silent_complete=True)
    FakeCapsule(bus, "impostor", raw_complete=lambda r: json.dumps({"values": ["evil"]}), bind_templates=True)
    _, client = make_broker(bus)

    reply = client(ALICE).complete("astrid://files/{dir}/{name}", "name", "")

    assert reply.values == () and reply.error is not None and reply.error.code is FailureCode.CAPSULE_ERROR


def test_a_slow_owner_times_out(threaded_bus, make_broker):
    files_capsule(threaded_bus, complete_delay=1.0)
    _, client = make_broker(threaded_bus, Limits(read_window_s=0.2))
    reply = client(ALICE).complete("astrid://files/{dir}/{name}", "name", "")
    assert reply.error is not None and reply.error.code is FailureCode.TIMEOUT


def test_an_unknown_template_is_not_found_and_no_capsule_is_asked(bus, make_broker):
    files = files_capsule(bus)
    _, client = make_broker(bus)

    reply = client(ALICE).complete("astrid://nobody/{x}", "x", "")

    assert reply.error is not None and reply.error.code is FailureCode.NOT_FOUND
    assert files.completes == 0


def test_a_name_that_is_not_a_variable_of_the_template_is_invalid(bus, make_broker):
    files = files_capsule(bus)
    _, client = make_broker(bus)
    reply = client(ALICE).complete("astrid://files/{dir}/{name}", "path", "")
    assert reply.error is not None and reply.error.code is FailureCode.INVALID_REQUEST
    assert files.completes == 0


def test_completion_values_are_capped(bus, make_broker):
    many = [f"v{i:03}" for i in range(150)]
    FakeCapsule(
        bus,
        "many",
        templates={"alice": [template("astrid://many/{v}")]},
        raw_complete=lambda r: json.dumps({"values": many, "total": 150}),
    )
    _, client = make_broker(bus)

    reply = client(ALICE).complete("astrid://many/{v}", "v", "")

    assert list(reply.values) == many[:100] and reply.has_more is True and reply.total == 150


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ("[1, 2]", "malformed"),
        (json.dumps({"values": [1, 2]}), "malformed"),
        (json.dumps({"values": "abc"}), "malformed"),
        (json.dumps({"values": ["a"], "error": "both"}), "malformed"),
        (json.dumps({"values": [], "error": "the index is gone"}), "the index is gone"),
    ],
)
def test_bad_completion_replies_fail_closed(bus, make_broker, raw, needle):
    FakeCapsule(bus, "bad", templates={"alice": [template("astrid://bad/{v}")]}, raw_complete=lambda r: raw)
    _, client = make_broker(bus)

    reply = client(ALICE).complete("astrid://bad/{v}", "v", "")

    assert reply.values == () and reply.error is not None
    assert reply.error.code is FailureCode.CAPSULE_ERROR and needle in reply.error.message


def test_completion_needs_a_verified_principal(bus, make_broker):
    files = files_capsule(bus)
    broker, client = make_broker(bus)

    for principal in (Principal.claimed("alice"), Principal.system()):
        reply = client(principal).complete("astrid://files/{dir}/{name}", "name", "")
        assert reply.error is not None and reply.error.code is FailureCode.DENIED
        outcome = broker.completions.complete(principal, "astrid://files/{dir}/{name}", "name", "")
        assert outcome.error is not None and outcome.error.code is FailureCode.DENIED
    assert files.completes == 0


def test_a_completion_after_the_owner_was_rebuilt_goes_to_the_new_build(bus, make_broker):
    old = files_capsule(bus)
    _, client = make_broker(bus)
    assert client(ALICE).complete("astrid://files/{dir}/{name}", "dir", "").values == ("docs",)

    old.unload()
    FakeCapsule(
        bus,
        "files2",
        templates={"alice": [template("astrid://files/{dir}/{name}")]},
        completion_values={"dir": ["rebuilt"]},
    )

    assert client(ALICE).complete("astrid://files/{dir}/{name}", "dir", "").values == ("rebuilt",)
