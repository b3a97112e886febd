"""The URI authority at the broker: entries, templates and read replies outside what a capsule may serve."""

from __future__ import annotations

import json
import logging

from astrid.host.broker import Broker
from astrid.host.broker.kinds import DESCRIBE, TEMPLATES
from astrid.host.bus import InMemoryBus, Message, Principal
from astrid.host.limits import Limits
from tests.host.broker.asker import Asker
from tests.host.broker.fakes import FakeCapsule, ThreadDispatcher, resource, text

ALICE = Principal.verified("alice")


ACME = "astrid://acme/"


class Owned:
    """`astrid://acme/` belongs to the capsule `src-acme`, which serves only there; the others serve the rest."""

    def may_serve(self, source_id: str, uri: str) -> bool:
        return uri.startswith(ACME) == (source_id == "src-acme")

    def may_cover(self, source_id: str, prefix: str) -> bool:
        if source_id == "src-acme":
            return prefix.startswith(ACME)
        return not (prefix.startswith(ACME) or ACME.startswith(prefix))


def _reply(source: str, key: str, entries: list[dict]) -> Message:
    return Message("resource.v1.response.x.y", json.dumps({key: entries}), source, ALICE, "2026-01-01T00:00:00Z", 0)


def test_describe_entries_outside_what_their_capsule_may_serve_are_dropped_with_an_audit_line(caplog):
    messages = [
        _reply("src-acme", "resources", [resource("astrid://acme/a"), resource("astrid://other/x")]),
        _reply("src-squat", "resources", [resource("astrid://acme/b"), resource("astrid://squat/y")]),
    ]
    with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
        result = DESCRIBE.merge(ALICE, messages, Limits(), Owned())
    assert result.owners == {"astrid://acme/a": "src-acme", "astrid://squat/y": "src-squat"}
    assert result.dropped_entries == 2
    assert sum("outside the URI namespaces" in r.getMessage() for r in caplog.records) == 2


def test_a_template_reaching_into_an_owned_namespace_is_dropped():
    templates = [
        {"uri_template": "astrid://{+path}", "name": "everything"},
        {"uri_template": "astrid://squat/{id}", "name": "mine"},
    ]
    result = TEMPLATES.merge(ALICE, [_reply("src-squat", "templates", templates)], Limits(), Owned())
    assert [t.uri_template for t in result.items] == ["astrid://squat/{id}"]


def test_a_read_reply_from_a_capsule_that_may_not_serve_the_uri_is_never_taken():
    bus = InMemoryBus(ThreadDispatcher())
    broker = Broker(bus, authority=Owned()).start()
    # an unlisted family URI inside acme's namespace, answered only by a squatter
    FakeCapsule(bus, "squat", contents={"alice": {"astrid://acme/secret": [text("astrid://acme/secret", "forged")]}})
    outcome = Asker(broker, ALICE).read_resource("astrid://acme/secret")
    assert outcome.error is not None and not outcome.contents
    # acme itself answers it
    FakeCapsule(bus, "acme", contents={"alice": {"astrid://acme/secret": [text("astrid://acme/secret", "real")]}})
    outcome = Asker(broker, ALICE).read_resource("astrid://acme/secret")
    assert outcome.error is None and outcome.contents[0].text == "real"
    broker.close()
