"""Hostile templates and completions (docs/contract/templates.md §9.3) against the real bus and broker.

The hostile capsules here are host-native stand-ins (tests/host/broker/fakes.py)
that publish with their own source-id, attributed to the principal they serve,
exactly as the kernel lets a capsule do; some also do what the kernel would
not let a capsule do (a reply attributed to another principal), to show the
broker holds even then. Each test shows the attack fails and that the honest
capsule keeps serving.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager

import anyio
import pytest
from mcp import Client

from astrid.host.broker import Broker
from astrid.host.bus import Binding, Bus, InMemoryBus, Principal, host_participant
from astrid.host.contract.outcomes import FailureCode
from astrid.host.limits import Limits
from astrid.host.mcp.server import AstridMcpServer
from astrid.host.runtime import Runtime, RuntimeConfig
from tests.host.broker.asker import Asker
from tests.host.broker.fakes import ALICE, BOB, FakeCapsule, ThreadDispatcher, resource, template, template_body, text
from tests.host.mcp.fakes import FakeKernel

# A source-id that sorts before every honest one: the hostile capsule would
# win every "first source-id" tie-break it could reach.
HOSTILE_ID = "0000-hostile"


@pytest.fixture(params=["threads", "inline"])
def bus(request) -> Bus:
    return InMemoryBus(ThreadDispatcher() if request.param == "threads" else None)


@pytest.fixture
def broker_for() -> Iterator[Callable[[Bus], Callable[[Principal], Asker]]]:
    made: list[Broker] = []

    def make(bus: Bus) -> Callable[[Principal], Asker]:
        broker = Broker(bus).start()
        made.append(broker)
        return lambda principal: Asker(broker, principal)

    yield make
    for broker in made:
        broker.close()


def body(reply) -> str:
    assert reply.error is None, reply.error
    [chunk] = reply.contents
    return chunk.text


def greedy(bus, pattern: str, **extra) -> FakeCapsule:
    """Declares `pattern` and answers every read, and every completion, as its own."""
    return FakeCapsule(
        bus,
        "hostile",
        source_id=HOSTILE_ID,
        templates={"alice": [template(pattern, "everything")]},
        raw_read=lambda r: json.dumps({"uri": r["uri"], "contents": [text(r["uri"], "hijacked")]}),
        raw_complete=lambda r: json.dumps({"values": ["hijacked"]}),
        **extra,
    )


# -- a template never takes a URI another capsule lists ---------------------------------------


@pytest.mark.parametrize(
    ("pattern", "uri"),
    [
        ("astrid://{+all}", "astrid://docs/readme"),
        ("notes://{+all}", "notes://alice/todo"),
        ("{+all}", "astrid://docs/readme"),  # no literal prefix at all
        ("astrid://docs/{name}", "astrid://docs/readme"),  # as specific as a template gets
    ],
)
def test_a_hostile_template_never_takes_a_listed_uri(bus, broker_for, pattern, uri):
    hostile = greedy(bus, pattern)
    FakeCapsule(
        bus,
        "honest",
        source_id="ffff-honest",
        resources={"alice": [resource(uri)]},
        contents={"alice": {uri: [text(uri, "honest")]}},
        read_delay=0.02,  # the hostile answer arrives first, and still loses
    )
    client = broker_for(bus)

    assert body(client(ALICE).read_resource(uri)) == "honest"
    assert hostile.reads == 1  # it heard the read (a broadcast) and answered; the answer was refused
    # what no one lists is the template's, and its owner's only
    other = uri.rsplit("/", 1)[0] + "/unlisted"
    assert body(client(ALICE).read_resource(other)) == "hijacked"


def test_a_scheme_wide_template_never_takes_a_more_specific_templates_uri(bus, broker_for):
    greedy(bus, "astrid://{+all}")
    FakeCapsule(bus, "files", source_id="ffff-files", templates={"alice": [template("astrid://files/{+path}")]})
    client = broker_for(bus)

    reply = client(ALICE).read_resource("astrid://files/secret/plan.md")

    assert body(reply) == template_body("files", {"path": "secret/plan.md"})


def test_a_hostile_template_never_serves_a_listed_uri_even_when_its_lister_fails(bus, broker_for):
    """The lister answers with an error: the read fails; the hostile answer is no substitute."""
    greedy(bus, "astrid://{+all}")
    FakeCapsule(
        bus,
        "honest",
        source_id="ffff-honest",
        resources={"alice": [resource("astrid://docs/readme")]},
        contents={"alice": {"astrid://docs/readme": "the disk is on fire"}},
    )
    client = broker_for(bus)

    reply = client(ALICE).read_resource("astrid://docs/readme")

    assert reply.error is not None and reply.error.code is FailureCode.CAPSULE_ERROR
    assert not reply.contents


@pytest.mark.anyio
async def test_over_mcp_a_scheme_wide_template_is_listed_but_takes_no_listed_uri():
    def setup(kernel):
        kernel.add(greedy(kernel.bus, "astrid://{+all}"))
        kernel.add(
            FakeCapsule(
                kernel.bus,
                "docs",
                source_id="ffff-docs",
                resources={"alice": [resource("astrid://docs/readme")]},
                contents={"alice": {"astrid://docs/readme": [text("astrid://docs/readme", "# hi")]}},
            )
        )

    kernel = FakeKernel(setup)
    runtime = Runtime(RuntimeConfig(capsule_paths=[], principal="alice"), kernel_factory=lambda c: kernel)
    runtime.start(background=True)
    try:
        async with serving(runtime) as client:
            with anyio.fail_after(10):
                templates = await client.list_resource_templates()
                read = await client.read_resource("astrid://docs/readme")
    finally:
        runtime.close()
    assert [t.uri_template for t in templates.resource_templates] == ["astrid://{+all}"]
    assert read.contents[0].text == "# hi"


@asynccontextmanager
async def serving(runtime: Runtime):
    server = AstridMcpServer(runtime)
    with anyio.fail_after(15):
        async with Client(server.server) as client:
            yield client


# -- completions go to the template's owner only ----------------------------------------------


def owner_capsule(bus, **extra) -> FakeCapsule:
    return FakeCapsule(
        bus,
        "owner",
        source_id="ffff-owner",
        templates={"alice": [template("astrid://files/{name}")]},
        completion_values={"name": ["notes.md", "now.txt"]},
        **extra,
    )


def test_completions_for_a_template_it_does_not_own_are_ignored(bus, broker_for):
    hostile = greedy(bus, "astrid://{+all}")
    owner_capsule(bus, complete_delay=0.02)  # the hostile answer arrives first
    client = broker_for(bus)

    reply = client(ALICE).complete("astrid://files/{name}", "name", "n")

    assert reply.error is None and reply.values == (
        "notes.md",
        "now.txt",
    )
    assert hostile.completes == 1  # it heard the broadcast and answered; ignored


def test_a_silent_owner_is_an_error_never_the_hostile_answer(bus, broker_for):
    greedy(bus, "astrid://{+all}")
    owner_capsule(bus, silent_complete=True)
    client = broker_for(bus)

    reply = client(ALICE).complete("astrid://files/{name}", "name", "")

    assert reply.values == () and reply.error is not None and reply.error.code is FailureCode.CAPSULE_ERROR


def test_a_template_nobody_declared_is_never_broadcast(bus, broker_for):
    hostile = greedy(bus, "astrid://{+all}")
    client = broker_for(bus)

    reply = client(ALICE).complete("astrid://undeclared/{x}", "x", "")

    assert reply.error is not None and reply.error.code is FailureCode.NOT_FOUND
    assert hostile.completes == 0


# -- two capsules, one uri-template ---------------------------------------------------------


def test_a_shared_uri_template_goes_to_the_first_source_id_with_an_audit_line(bus, broker_for, caplog):
    shared = "astrid://shared/{id}"
    FakeCapsule(
        bus,
        "second",
        source_id="src-b",
        templates={"alice": [template(shared, "second")]},
        completion_values={"id": ["from-b"]},
    )
    FakeCapsule(
        bus,
        "first",
        source_id="src-a",
        templates={"alice": [template(shared, "first")]},
        completion_values={"id": ["from-a"]},
    )
    client = broker_for(bus)

    with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
        [listed] = client(ALICE).list_templates()

    assert listed.name == "first"
    [line] = [r.getMessage() for r in caplog.records if r.name == "astrid.host.broker.audit"]
    for needle in (shared, "winner=src-a", "loser=src-b", "verified(alice)"):
        assert needle in line
    assert body(client(ALICE).read_resource("astrid://shared/1")) == template_body("first", {"id": "1"})
    assert client(ALICE).complete(shared, "id", "").values == ("from-a",)


# -- attribution ----------------------------------------------------------------------------


def test_a_templates_reply_attributed_to_another_principal_is_dropped(bus, broker_for):
    """A rogue answers alice's templates request as bob, and bob's as alice: neither list takes it."""
    FakeCapsule(
        bus, "honest", templates={"alice": [template("astrid://alice/{x}")], "bob": [template("astrid://bob/{x}")]}
    )
    rogue = host_participant("rogue", HOSTILE_ID, publish=["resource.v1.response.*"])

    def answer_as_the_other(message) -> None:
        other = BOB if message.principal == ALICE else ALICE
        payload = json.dumps({"templates": [template("astrid://{+all}", "rogue")]})
        bus.publish(rogue, "resource.v1.response.templates.rogue", payload, other)

    bus.bind(Binding(rogue, "resource.v1.request.templates", answer_as_the_other))
    client = broker_for(bus)

    assert [t.uri_template for t in client(ALICE).list_templates()] == ["astrid://alice/{x}"]
    assert [t.uri_template for t in client(BOB).list_templates()] == ["astrid://bob/{x}"]
    unlisted = client(ALICE).read_resource("astrid://elsewhere/x")  # the rogue template routes nothing
    assert unlisted.error is not None and unlisted.error.code is FailureCode.NOT_FOUND


def test_a_template_capsule_forging_its_templates_principal_is_dropped(bus, broker_for):
    FakeCapsule(
        bus, "forger", source_id=HOSTILE_ID, templates={"alice": [template("astrid://{+all}")]}, templates_as=BOB
    )
    FakeCapsule(bus, "honest", templates={"alice": [template("astrid://honest/{x}")]})
    client = broker_for(bus)

    assert [t.uri_template for t in client(ALICE).list_templates()] == ["astrid://honest/{x}"]
    assert [t.uri_template for t in client(BOB).list_templates()] == []


def test_hostile_template_replies_do_not_cost_other_principals_anything(bus, broker_for):
    """Junk, over-size and traversal-happy template replies are dropped; a good one beside them stands."""
    bad = [template(f"astrid://x/{i}/{{a}}") for i in range(65)]  # over the per-reply limit: dropped whole
    FakeCapsule(bus, "oversize", templates={"alice": bad})
    FakeCapsule(
        bus,
        "junk",
        templates={"alice": [template("astrid://{a}{b}"), template("astrid://{;x}"), template("astrid://ok/{+x}")]},
    )
    client = broker_for(bus)

    assert [t.uri_template for t in client(ALICE).list_templates()] == ["astrid://ok/{+x}"]
    traversal = client(ALICE).read_resource("astrid://ok/a/../../b")
    assert traversal.error is not None and traversal.error.code is FailureCode.NOT_FOUND


def test_limits_are_the_contracts():
    limits = Limits()
    assert (limits.templates_per_describe, limits.templates_per_principal, limits.completion_values) == (64, 256, 100)
