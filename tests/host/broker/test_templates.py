"""Templates and completion in the broker (docs/contract/templates.md §9), on the real Bus with fake capsules."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from astrid.host.bus import InMemoryBus, Principal, host_participant
from astrid.host.contract.frontdoor import CompletionReply, FailureCode
from astrid.host.contract.topics import CAPSULES_LOADED_TOPIC, FRONT_DOOR_CLIENT, FRONT_DOOR_COMPLETE, reply_topic
from astrid.host.limits import Limits
from tests.host.broker.fakes import ALICE, BOB, FakeCapsule, resource, template, template_body, text

FILES = "astrid://files/{+path}"


def texts(templates) -> list[str]:
    return [t.uri_template for t in templates]


def body(reply) -> str:
    assert reply.error is None, reply.error
    [chunk] = reply.contents
    return chunk.text


def audit_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "astrid.host.broker.audit"]


def announce(bus, principal: Principal) -> None:
    kernel = host_participant("kernel", "kernel-1", publish=[CAPSULES_LOADED_TOPIC])
    bus.publish(kernel, CAPSULES_LOADED_TOPIC, '{"status":"ready","capsules":[]}', principal).wait(5)


# -- the templates fan-out ------------------------------------------------------------------


def test_templates_merge_every_capsule_sorted(bus, make_broker):
    FakeCapsule(bus, "files", templates={"alice": [template(FILES, "file"), template("astrid://files/by-id/{id}")]})
    FakeCapsule(bus, "logs", templates={"alice": [template("astrid://logs/{day}", title="Logs")]})
    FakeCapsule(bus, "plain", resources={"alice": [resource("astrid://plain/x")]})  # knows nothing of templates
    _, client = make_broker(bus)

    listed = client(ALICE).list_templates()

    assert texts(listed) == ["astrid://files/by-id/{id}", FILES, "astrid://logs/{day}"]
    assert listed[2].title == "Logs"


def test_templates_keep_every_field(bus, make_broker):
    full = template(
        FILES,
        "files",
        title="Files",
        description="any file",
        mime_type="text/plain",
        annotations={"audience": ["assistant"], "priority": 0.25, "last_modified": "2025-01-12T15:00:58Z"},
        icons=[{"src": "data:image/png;base64,AAAA", "mime_type": "image/png", "sizes": ["any"], "theme": "light"}],
        meta=json.dumps({"com.example/kind": "fs"}),
    )
    FakeCapsule(bus, "files", templates={"alice": [full]})
    _, client = make_broker(bus)

    [listed] = client(ALICE).list_templates()

    assert listed.to_wire() == full


def test_templates_are_per_principal_and_only_for_a_verified_one(bus, make_broker):
    capsule = FakeCapsule(
        bus, "notes", templates={"alice": [template("astrid://notes/alice/{id}")], "bob": [template("astrid://b/{x}")]}
    )
    _, client = make_broker(bus)

    assert texts(client(ALICE).list_templates()) == ["astrid://notes/alice/{id}"]
    assert texts(client(BOB).list_templates()) == ["astrid://b/{x}"]
    calls = capsule.template_calls
    assert client(Principal.claimed("alice")).list_templates() == []
    assert client(Principal.system()).list_templates() == []
    assert capsule.template_calls == calls  # no capsule was asked


def test_a_templates_reply_attributed_to_another_principal_is_dropped(bus, make_broker):
    FakeCapsule(bus, "honest", templates={"alice": [template("astrid://honest/{id}")]})
    FakeCapsule(bus, "forger", templates={"alice": [template("astrid://forged/{id}")]}, templates_as=BOB)
    _, client = make_broker(bus)

    assert texts(client(ALICE).list_templates()) == ["astrid://honest/{id}"]


def test_a_second_templates_reply_from_one_source_is_dropped(bus, make_broker, caplog):
    FakeCapsule(
        bus,
        "twice",
        templates={"alice": [template("astrid://twice/{a}")]},
        templates_twice={"templates": [template("astrid://twice/second/{b}")]},
    )
    _, client = make_broker(bus)

    with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
        assert texts(client(ALICE).list_templates()) == ["astrid://twice/{a}"]
    assert any("second templates reply from src-twice" in r.getMessage() for r in caplog.records)


def test_a_bad_template_is_dropped_alone(bus, make_broker):
    entries = [
        template("astrid://ok/{a}"),
        {"uri_template": "astrid://bad/no-name/{a}"},
        template("astrid://bad/{a}{b}"),  # two variables with nothing between them
        template("astrid://bad/{#frag}"),  # another RFC 6570 operator
        template("astrid://bad/plain"),  # no variable: a resource, not a template
        template("astrid://bad/{a}/{a}"),  # a name used twice
        template("astrid://bad/title/{a}", title="x" * 5000),
        template("astrid://ok/{a}"),  # declared twice: the first entry is kept
        template("astrid://ok/meta/{a}", meta="[1]"),  # not an object: only the field goes
    ]
    FakeCapsule(bus, "mixed", templates={"alice": entries})
    _, client = make_broker(bus)

    listed = client(ALICE).list_templates()

    assert texts(listed) == ["astrid://ok/meta/{a}", "astrid://ok/{a}"]
    assert listed[0].meta is None


def test_an_over_size_templates_reply_is_dropped_whole(bus, make_broker, caplog):
    FakeCapsule(bus, "huge", templates={"alice": [template(f"astrid://huge/{i}/{{x}}") for i in range(65)]})
    FakeCapsule(bus, "fine", templates={"alice": [template("astrid://fine/{x}")]})
    _, client = make_broker(bus)

    with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
        assert texts(client(ALICE).list_templates()) == ["astrid://fine/{x}"]
    assert any("65 templates, more than the limit of 64" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("raw", ['"a string"', "[]", '{"templates": 3}', '{"resources": []}'])
def test_garbage_templates_replies_are_ignored(bus, make_broker, raw):
    FakeCapsule(bus, "junk", raw_templates=raw)
    FakeCapsule(bus, "fine", templates={"alice": [template("astrid://fine/{x}")]})
    _, client = make_broker(bus)
    assert texts(client(ALICE).list_templates()) == ["astrid://fine/{x}"]


@pytest.mark.parametrize("slow", ["src-a", "src-b"])
def test_a_shared_uri_template_goes_to_the_first_source_id_with_an_audit_line(threaded_bus, make_broker, caplog, slow):
    bus = threaded_bus
    for name, source in (("capa", "src-a"), ("capb", "src-b")):
        FakeCapsule(
            bus,
            name,
            source_id=source,
            templates={"alice": [template("astrid://shared/{id}", f"from-{source}")]},
            completion_values={"id": [f"{source}-1"]},
            templates_delay=0.05 if source == slow else 0.0,
        )
    broker, client = make_broker(bus)

    with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
        [listed] = client(ALICE).list_templates()

    assert listed.name == "from-src-a"
    [line] = audit_lines(caplog)
    for needle in ("astrid://shared/{id}", "src-a", "src-b", "verified(alice)"):
        assert needle in line
    # the winner owns it everywhere: reads and completions
    assert body(client(ALICE).read_resource("astrid://shared/7")) == template_body("capa", {"id": "7"})
    assert client(ALICE).complete("astrid://shared/{id}", "id", "").values == ["src-a-1"]
    assert broker.template_snapshot(ALICE).owner_of("astrid://shared/{id}") == "src-a"


def test_templates_are_capped_per_principal(bus, make_broker):
    FakeCapsule(bus, "many", templates={"alice": [template(f"astrid://many/{i}/{{x}}") for i in range(5)]})
    broker, client = make_broker(bus, Limits(templates_per_principal=3))

    listed = client(ALICE).list_templates()

    assert texts(listed) == [f"astrid://many/{i}/{{x}}" for i in range(3)]
    assert broker.template_snapshot(ALICE).owner_of("astrid://many/4/{x}") is None


# -- the cache ------------------------------------------------------------------------------


def test_templates_are_cached_and_invalidated_with_the_describe_snapshot(bus, make_broker):
    files = FakeCapsule(bus, "files", templates={"alice": [template(FILES)], "bob": [template(FILES)]})
    _, client = make_broker(bus)

    client(ALICE).list_templates()
    client(ALICE).list_templates()
    client(BOB).list_templates()
    assert files.template_calls == 2  # once per principal

    # a capsule-set change of alice: her templates are asked again, bob's are not
    files.templates["alice"].append(template("astrid://files/new/{x}"))
    announce(bus, ALICE)
    assert texts(client(ALICE).list_templates()) == ["astrid://files/new/{x}", FILES]
    client(BOB).list_templates()
    assert files.template_calls == 3

    # a refresh asks again; so does a forced describe round (the same refresh)
    client(ALICE).list_templates(refresh=True)
    assert files.template_calls == 4
    client(ALICE).list_resources(refresh=True)
    client(ALICE).list_templates()
    assert files.template_calls == 5


def test_a_system_wide_change_invalidates_every_principals_templates(bus, make_broker):
    files = FakeCapsule(bus, "files", templates={"alice": [template(FILES)], "bob": [template(FILES)]})
    _, client = make_broker(bus)
    client(ALICE).list_templates(), client(BOB).list_templates()

    announce(bus, Principal.system())
    client(ALICE).list_templates(), client(BOB).list_templates()

    assert files.template_calls == 4


def test_a_templates_round_with_no_usable_reply_keeps_the_previous_snapshot(bus, make_broker):
    files = FakeCapsule(bus, "files", templates={"alice": [template(FILES)]})
    _, client = make_broker(bus)
    assert texts(client(ALICE).list_templates()) == [FILES]

    files.silent_templates = True
    announce(bus, ALICE)
    assert texts(client(ALICE).list_templates()) == [FILES]  # a lost race, not "no templates"
    files.silent_templates = False
    assert texts(client(ALICE).list_templates()) == [FILES]
    assert files.template_calls == 3  # the kept snapshot is stale, so it was asked again


def test_concurrent_template_lists_share_one_round(threaded_bus, make_broker):
    files = FakeCapsule(threaded_bus, "files", templates={"alice": [template(FILES)]}, templates_delay=0.1)
    _, client = make_broker(threaded_bus)
    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda: results.append(texts(client(ALICE).list_templates()))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == [[FILES]] * 6
    assert files.template_calls == 1


def test_the_templates_reply_is_trimmed_to_one_bus_message(make_broker):
    bus = InMemoryBus(max_payload_bytes=4000)
    for half in (0, 1):
        entries = [template(f"astrid://wide/{half}{i}/{{x}}", description="d" * 300) for i in range(8)]
        FakeCapsule(bus, f"wide{half}", templates={"alice": entries})
    _, client = make_broker(bus)
    listed = client(ALICE).list_templates()
    assert 8 < len(listed) < 16
    assert texts(listed) == sorted(f"astrid://wide/{h}{i}/{{x}}" for h in (0, 1) for i in range(8))[: len(listed)]


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
    assert reply.values == ["notes.md", "now.txt"] and reply.total == 2 and reply.has_more is False
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

    assert reply.values == ["notes.md", "now.txt", "other.md"]
    assert impostor.completes == 1  # it heard the broadcast, and answered
    assert any("replies of src-a refused" in r.getMessage() for r in caplog.records)


def test_a_silent_owner_is_a_capsule_error_even_when_another_answers(bus, make_broker):
    files_capsule(bus, silent_complete=True)
    FakeCapsule(bus, "impostor", raw_complete=lambda r: json.dumps({"values": ["evil"]}), bind_templates=True)
    _, client = make_broker(bus)

    reply = client(ALICE).complete("astrid://files/{dir}/{name}", "name", "")

    assert reply.values == [] and reply.error is not None and reply.error.code is FailureCode.CAPSULE_ERROR


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

    assert reply.values == many[:100] and reply.has_more is True and reply.total == 150


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

    assert reply.values == [] and reply.error is not None
    assert reply.error.code is FailureCode.CAPSULE_ERROR and needle in reply.error.message


def test_completion_needs_a_verified_principal(bus, make_broker):
    files = files_capsule(bus)
    broker, client = make_broker(bus)

    for principal in (Principal.claimed("alice"), Principal.system()):
        reply = client(principal).complete("astrid://files/{dir}/{name}", "name", "")
        assert reply.error is not None and reply.error.code is FailureCode.DENIED
        outcome = broker.complete(principal, "astrid://files/{dir}/{name}", "name", "")
        assert outcome.error is not None and outcome.error.code is FailureCode.DENIED
    assert files.completes == 0


def test_completion_from_an_untrusted_participant_is_denied(bus, make_broker):
    files = files_capsule(bus)
    make_broker(bus)
    stranger = FRONT_DOOR_CLIENT.participant()  # right ACLs, but not the trusted ingress
    request = {
        "req_id": "r1",
        "uri_template": "astrid://files/{dir}/{name}",
        "argument_name": "name",
        "argument_value": "",
    }
    with bus.subscribe(stranger, reply_topic("r1"), principal_scope=ALICE) as replies:
        bus.publish(stranger, FRONT_DOOR_COMPLETE, json.dumps(request), ALICE)
        message = replies.recv(5)
    assert message is not None
    reply = CompletionReply.model_validate_json(message.payload)
    assert reply.error is not None and reply.error.code is FailureCode.DENIED
    assert files.completes == 0


def test_a_malformed_completion_request_is_answered_invalid(bus, make_broker):
    broker, _ = make_broker(bus)
    ingress = FRONT_DOOR_CLIENT.participant()
    broker.front_doors.trust(ingress.source_id)
    with bus.subscribe(ingress, reply_topic("r2"), principal_scope=ALICE) as replies:
        bus.publish(ingress, FRONT_DOOR_COMPLETE, json.dumps({"req_id": "r2", "argument_name": 3}), ALICE)
        message = replies.recv(5)
    assert message is not None
    reply = CompletionReply.model_validate_json(message.payload)
    assert reply.error is not None and reply.error.code is FailureCode.INVALID_REQUEST


def test_a_completion_after_the_owner_was_rebuilt_goes_to_the_new_build(bus, make_broker):
    old = files_capsule(bus)
    _, client = make_broker(bus)
    assert client(ALICE).complete("astrid://files/{dir}/{name}", "dir", "").values == ["docs"]

    old.unload()
    FakeCapsule(
        bus,
        "files2",
        templates={"alice": [template("astrid://files/{dir}/{name}")]},
        completion_values={"dir": ["rebuilt"]},
    )

    assert client(ALICE).complete("astrid://files/{dir}/{name}", "dir", "").values == ["rebuilt"]
