"""Issue 20: what the broker says names capsules by name, the source-id only with -v.

The broker knows source-ids only; the composition root hands it
`name_of(source_id)`. Failures returned to clients, warnings and audit lines
say `notes`; with the broker's logger at INFO (`astrid -v`) they say
`notes (src-notes)`. A source-id nobody can name is shown as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from astrid.host.broker import Broker
from astrid.host.bus import Bus, InMemoryBus, Principal
from astrid.host.contract.outcomes import FailureCode
from tests.host.broker.asker import Asker
from tests.host.broker.fakes import ALICE, FakeCapsule, ThreadDispatcher, resource, template, text

NAMES = {"src-notes": "notes", "src-alpha": "alpha", "src-beta": "beta", "src-files": "files"}
BROKER_LOGGERS = ("astrid.host.broker", "astrid.host.broker.audit")


@pytest.fixture
def bus() -> Bus:
    return InMemoryBus(ThreadDispatcher())


@pytest.fixture
def named_broker() -> Iterator[Callable[..., Callable[[Principal], Asker]]]:
    made: list[Broker] = []

    def make(bus: Bus, names: dict[str, str] | None = None) -> Callable[[Principal], Asker]:
        lookup = NAMES if names is None else names
        broker = Broker(bus, name_of=lookup.get).start()
        made.append(broker)
        return lambda principal: Asker(broker, principal)

    yield make
    for broker in made:
        broker.close()


@pytest.fixture
def quiet() -> Iterator[None]:
    """The broker's loggers at WARNING, as without -v (whatever pytest configured)."""
    loggers = [logging.getLogger(name) for name in BROKER_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


@pytest.fixture
def verbose() -> Iterator[None]:
    """The broker's loggers at INFO, as with -v."""
    loggers = [logging.getLogger(name) for name in BROKER_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.INFO)
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def silent_owner(bus: Bus) -> FakeCapsule:
    """Lists astrid://notes/a, then finishes every read of it without answering."""
    return FakeCapsule(bus, "notes", resources={"alice": [resource("astrid://notes/a")]})


def test_a_read_failure_names_the_capsule_not_its_source_id(bus, named_broker, quiet):
    silent_owner(bus)
    client = named_broker(bus)
    reply = client(ALICE).read_resource("astrid://notes/a")
    assert reply.error is not None and reply.error.code is FailureCode.CAPSULE_ERROR
    assert reply.error.message == "capsule notes, which lists astrid://notes/a, finished without answering the read"
    assert "src-notes" not in reply.error.message


def test_with_v_the_failure_adds_the_source_id(bus, named_broker, verbose):
    silent_owner(bus)
    client = named_broker(bus)
    reply = client(ALICE).read_resource("astrid://notes/a")
    assert reply.error is not None
    assert "capsule notes (src-notes), which lists astrid://notes/a," in reply.error.message


def test_a_capsule_nobody_can_name_is_shown_by_its_source_id(bus, named_broker, quiet):
    silent_owner(bus)
    client = named_broker(bus, names={})
    reply = client(ALICE).read_resource("astrid://notes/a")
    assert reply.error is not None
    assert "capsule src-notes, which lists astrid://notes/a," in reply.error.message


def test_a_template_owner_without_the_resource_is_named(bus, named_broker, quiet):
    FakeCapsule(bus, "files", templates={"alice": [template("astrid://files/{+path}")]}, serve_template_reads=False)
    client = named_broker(bus)
    reply = client(ALICE).read_resource("astrid://files/missing.md")
    assert reply.error is not None and reply.error.code is FailureCode.NOT_FOUND
    assert reply.error.message == (
        "capsule files, whose template covers astrid://files/missing.md, has no such resource"
    )


def collide(bus: Bus, first: tuple[str, str], second: tuple[str, str]) -> str:
    """Two capsules (name, source-id) listing one URI; the shared URI."""
    uri = "astrid://shared/x"
    for name, source_id in (first, second):
        FakeCapsule(
            bus,
            name,
            source_id=source_id,
            resources={"alice": [resource(uri)]},
            contents={"alice": {uri: [text(uri, f"from {name}")]}},
        )
    return uri


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "astrid.host.broker.audit"]


def test_a_collision_audit_line_names_both_capsules(bus, named_broker, quiet, caplog):
    uri = collide(bus, ("alpha", "src-alpha"), ("beta", "src-beta"))
    client = named_broker(bus)
    with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
        assert client(ALICE).read_resource(uri).contents[0].text == "from alpha"
    [line] = audit_lines(caplog)
    assert "winner=alpha loser=beta" in line and uri in line and "alice" in line
    assert "src-alpha" not in line and "src-beta" not in line


def test_with_v_the_collision_line_adds_the_source_ids(bus, named_broker, verbose, caplog):
    uri = collide(bus, ("alpha", "src-alpha"), ("beta", "src-beta"))
    client = named_broker(bus)
    with caplog.at_level(logging.INFO, logger="astrid.host.broker.audit"):
        client(ALICE).read_resource(uri)
    [line] = audit_lines(caplog)
    assert "winner=alpha (src-alpha) loser=beta (src-beta)" in line


def test_two_capsules_of_one_name_are_told_apart_by_their_source_ids(bus, named_broker, quiet, caplog):
    uri = collide(bus, ("notes", "src-notes-1"), ("notes", "src-notes-2"))
    client = named_broker(bus, names={"src-notes-1": "notes", "src-notes-2": "notes"})
    with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
        client(ALICE).read_resource(uri)
    [line] = audit_lines(caplog)
    assert "winner=notes (src-notes-1) loser=notes (src-notes-2)" in line


def test_a_lookup_that_fails_never_breaks_a_read(bus, quiet):
    from astrid.host.broker.names import CapsuleNames

    def broken(source_id: str) -> str | None:
        raise RuntimeError("no names today")

    names = CapsuleNames(broken)
    assert names.label("src-notes") == "src-notes"
    assert CapsuleNames().label("src-notes") == "src-notes"
    assert CapsuleNames({"src-notes": ""}.get).label("src-notes") == "src-notes"
