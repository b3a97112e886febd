"""Templates and completion in the guest SDK (docs/contract/templates.md §9, docs/capsules.md).

Most tests drive `Capsule.dispatch` on the host's CPython with the recording
host of test_sdk_native; the slow ones build the real `templated` capsule
(tests/e2e/capsules/templated) and ask it over a real kernel's bus.
"""

from __future__ import annotations

import json

import pytest

from astrid.host.bus import Principal
from astrid.host.contract import ReadResponse
from astrid.host.contract import topics as host_topics
from astrid.host.contract.template import CompleteResponse, TemplatesResponse
from astrid.host.limits import DEFAULT_LIMITS
from astrid_sdk import Capsule, DefinitionError, NotFound, Template, _capsule, _limits, text
from tests.capsules.test_sdk_native import Caller, RecordingHost, only_reply, read
from tests.support.busclient import ALICE, BOB, WAIT_S, Client
from tests.support.capsules import Built, build_clean
from tests.support.paths import REPO

FILES = {"README.md": "read me", "notes/today.md": "today", "notes/later.md": "later", "a b/c": "spaced"}


def files_capsule(calls: list | None = None) -> Capsule:
    capsule = Capsule("Files Too")
    seen = calls if calls is not None else []

    @capsule.resource("astrid://files/static", mime_type="text/plain")
    def static(ctx):
        return "static wins"

    @capsule.template("test://template/{id}/data", name="data", mime_type="application/json")
    def data(ctx):
        seen.append(dict(ctx.params))
        return json.dumps({"id": ctx.params["id"], "uri": ctx.uri, "template": ctx.template})

    @capsule.template(
        "astrid://files/{+path}",
        name="files",
        title="Files",
        description="fake files",
        mime_type="text/plain",
        annotations={"audience": ["user"], "priority": 0.5, "last_modified": "2026-12-01T00:00:00Z"},
        icons=["https://x/icon.svg"],
        meta={"k": 1},
    )
    def files(ctx):
        seen.append(dict(ctx.params))
        if ctx.params["path"] not in FILES:
            raise NotFound(ctx.uri)
        return FILES[ctx.params["path"]]

    @files.complete("path")
    def paths(ctx, prefix):
        return sorted(FILES)

    return capsule


def templates(capsule: Capsule, host: RecordingHost | None = None) -> tuple[tuple[str, str | None], RecordingHost]:
    host = host or RecordingHost()
    return capsule.dispatch("templates", b"{}", host), host


def complete(
    capsule: Capsule,
    uri_template: str,
    name: str,
    value: str = "",
    context: dict[str, str] | None = None,
    host: RecordingHost | None = None,
    correlation_id: str = "k-1",
) -> tuple[tuple[str, str | None], RecordingHost]:
    host = host or RecordingHost()
    payload = {
        "uri_template": uri_template,
        "argument_name": name,
        "argument_value": value,
        "context_arguments": [{"name": k, "value": v} for k, v in (context or {}).items()],
        "correlation_id": correlation_id,
    }
    return capsule.dispatch("complete", json.dumps(payload).encode(), host), host


def completion(capsule: Capsule, *args, **kwargs) -> CompleteResponse:
    _, host = complete(capsule, *args, **kwargs)
    topic, reply = only_reply(host, CompleteResponse)
    assert topic == "resource.v1.response.complete." + kwargs.get("correlation_id", "k-1")
    return reply


def contents(host: RecordingHost) -> list[dict]:
    _, reply = only_reply(host, ReadResponse)
    assert reply.error is None, reply.error
    return json.loads(host.published[0][1])["contents"]


# -- the wire ---------------------------------------------------------------------------


def test_the_sdk_speaks_the_registered_topics_and_limits():
    assert _capsule.TEMPLATES_REPLY_PREFIX == host_topics.TEMPLATES_REPLY_PREFIX
    assert _capsule.COMPLETE_REPLY_PREFIX == host_topics.COMPLETE_REPLY_PREFIX
    assert _limits.MAX_TEMPLATES_PER_DESCRIBE == DEFAULT_LIMITS.templates_per_describe
    assert _limits.MAX_COMPLETION_VALUES == DEFAULT_LIMITS.completion_values


def test_templates_lists_every_field_exactly():
    outcome, host = templates(files_capsule())
    assert outcome == ("final", "2 templates")
    topic, reply = only_reply(host, TemplatesResponse)
    assert topic == "resource.v1.response.templates.files-too"
    data, files = json.loads(host.published[0][1])["templates"]
    assert data == {
        "uri_template": "test://template/{id}/data",
        "name": "data",
        "mime_type": "application/json",
        "icons": [],
    }
    assert files == {
        "uri_template": "astrid://files/{+path}",
        "name": "files",
        "title": "Files",
        "description": "fake files",
        "mime_type": "text/plain",
        "annotations": {"audience": ["user"], "priority": 0.5, "last_modified": "2026-12-01T00:00:00Z"},
        "icons": [{"src": "https://x/icon.svg", "sizes": []}],
        "meta": '{"k":1}',
    }
    assert [t.parsed.literal_prefix for t in reply.templates] == ["test://template/", "astrid://files/"]


def test_a_capsule_without_templates_answers_with_none():
    outcome, host = templates(Capsule("plain"))
    assert outcome == ("final", "0 templates")
    assert host.published == [("resource.v1.response.templates.plain", '{"templates":[]}')]


def test_templates_are_cut_at_64():
    capsule = Capsule("many")
    for i in range(70):
        capsule.template(f"x://{i}/{{v}}")(lambda ctx: "x")
    _, host = templates(capsule)
    _, reply = only_reply(host, TemplatesResponse)
    assert len(reply.templates) == 64
    assert any("only the first 64" in message for _, message in host.logs)


# -- reads --------------------------------------------------------------------------------


def test_a_one_segment_variable_reaches_the_handler_decoded():
    calls: list = []
    outcome, host = read(files_capsule(calls), "test://template/a%20b/data")
    assert outcome == ("final", None)
    (chunk,) = contents(host)
    assert chunk["mime_type"] == "application/json" and chunk["uri"] == "test://template/a%20b/data"
    assert json.loads(chunk["text"]) == {
        "id": "a b",
        "uri": "test://template/a%20b/data",
        "template": "test://template/{id}/data",
    }
    assert calls == [{"id": "a b"}]


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("astrid://files/README.md", "read me"),
        ("astrid://files/notes/today.md", "today"),
        ("astrid://files/a%20b/c", "spaced"),
        ("astrid://files/static", "static wins"),  # a static resource before any template
    ],
)
def test_a_reserved_variable_spans_segments(uri, expected):
    _, host = read(files_capsule(), uri)
    assert contents(host)[0]["text"] == expected


@pytest.mark.parametrize(
    "uri",
    [
        "astrid://files/../etc/passwd",
        "astrid://files/a/../b",
        "astrid://files/notes/%2e%2e/README.md",
        "astrid://files/notes%2F..%2FREADME.md",
        "astrid://files/./README.md",
        "astrid://files/README.md%00",
        "astrid://files/README.md%0A",
        "astrid://files/%ff",
        "astrid://files/README.md?x=1",
        "astrid://files/README.md#top",
        "astrid://files/",
        "test://template/1/2/data",
        "test://template/a%2Fb/data",
        "test://template/%2e%2e%2F/data",
        "test://template//data",
        "test://other/1/data",
        "astrid://files/" + "x" * 2100,
    ],
)
def test_an_unsafe_or_foreign_uri_never_reaches_a_handler(uri):
    calls: list = []
    outcome, host = read(files_capsule(calls), uri)
    assert outcome == ("continue", "not mine")
    assert host.published == [] and calls == []


def test_not_found_from_a_template_handler_is_silence():
    calls: list = []
    outcome, host = read(files_capsule(calls), "astrid://files/missing.md")
    assert outcome == ("continue", "not found")
    assert host.published == [] and calls == [{"path": "missing.md"}]


@pytest.mark.parametrize(
    ("returns", "cause"),
    [
        (lambda ctx: 1 / 0, "handler broken raised ZeroDivisionError"),
        (lambda ctx: 42, "handler broken returned int"),
        (lambda ctx: ["x"] * 65, "65 chunks"),
        (lambda ctx: b"\0" * (700 * 1024 + 1), "716801 bytes"),
    ],
)
def test_a_faulty_template_handler_is_a_read_error(returns, cause):
    capsule = Capsule("x")

    def broken(ctx):
        return returns(ctx)

    capsule.template("x://t/{v}")(broken)
    outcome, host = read(capsule, "x://t/1")
    assert outcome[0] == "error"
    _, reply = only_reply(host, ReadResponse)
    assert not reply.contents and cause in (reply.error or "")


def test_the_longest_literal_prefix_serves_then_declaration_order():
    capsule = Capsule("x")
    capsule.template("x://{+all}")(lambda ctx: "all " + ctx.params["all"])
    capsule.template("x://a/{+rest}")(lambda ctx: "a " + ctx.params["rest"])
    capsule.template("x://a/{first}/z")(lambda ctx: "first " + ctx.params["first"])
    capsule.template("x://a/{second}/z/")(lambda ctx: "second")
    capsule.resource_family("x://a/f/")(lambda ctx, uri: "family " + ctx.key)
    assert contents(read(capsule, "x://b/c")[1])[0]["text"] == "all b/c"
    assert contents(read(capsule, "x://a/b/c")[1])[0]["text"] == "a b/c"
    assert contents(read(capsule, "x://a/b/z")[1])[0]["text"] == "a b/z"  # same prefix: the first declared
    assert contents(read(capsule, "x://a/f/k")[1])[0]["text"] == "family k"  # a family before any template


def test_chunks_and_blobs_from_a_template_handler():
    capsule = Capsule("x")
    capsule.template("x://t/{v}", mime_type="image/png")(lambda ctx: [b"\x89PNG", text("t", mime_type="text/plain")])
    blob_chunk, text_chunk = contents(read(capsule, "x://t/1")[1])
    assert blob_chunk == {"type": "blob", "uri": "x://t/1", "mime_type": "image/png", "blob": "iVBORw=="}
    assert text_chunk["text"] == "t"


# -- completion ---------------------------------------------------------------------------


def test_completion_keeps_the_values_that_start_with_the_prefix():
    reply = completion(files_capsule(), "astrid://files/{+path}", "path", "notes/")
    assert reply == CompleteResponse(values=["notes/later.md", "notes/today.md"], total=2, has_more=False)
    assert completion(files_capsule(), "astrid://files/{+path}", "path", "").values == sorted(FILES)
    assert completion(files_capsule(), "astrid://files/{+path}", "path", "zzz").values == []


def test_completion_is_capped_at_100_with_total_and_has_more():
    capsule = Capsule("x")
    template = capsule.template("x://{n}/v")(lambda ctx: "x")
    template.complete("n")(lambda ctx, prefix: [f"{i:04d}" for i in range(250)] + ["0001", "0002"])
    reply = completion(capsule, "x://{n}/v", "n", "0")
    assert reply.values == [f"{i:04d}" for i in range(100)]
    assert reply.total == 250 and reply.has_more is True
    reply = completion(capsule, "x://{n}/v", "n", "01")  # 0100-0199: exactly 100
    assert len(reply.values) == 100 and reply.total == 100 and reply.has_more is False


def test_completion_sees_the_context_arguments_and_the_principal():
    capsule = Capsule("x")
    template = capsule.template("x://{user}/notes/{note}")(lambda ctx: "x")
    notes = {"ann": ["todo", "trip"], "bob": ["taxes"]}

    @template.complete("note")
    def note(ctx, prefix):
        return notes.get(ctx.arguments.get("user", ""), []) + [ctx.principal]

    assert completion(capsule, "x://{user}/notes/{note}", "note", "t", {"user": "ann"}).values == ["todo", "trip"]
    assert completion(capsule, "x://{user}/notes/{note}", "note", "", {"user": "bob"}).values == ["taxes", "alice"]
    assert completion(capsule, "x://{user}/notes/{note}", "note", "").values == ["alice"]


def test_a_variable_without_a_completer_completes_to_nothing():
    reply = completion(files_capsule(), "test://template/{id}/data", "id", "1")
    assert reply == CompleteResponse(values=[], total=0, has_more=False)


@pytest.mark.parametrize(
    ("completer", "cause"),
    [
        (lambda ctx, prefix: 1 / 0, "completer broken raised ZeroDivisionError"),
        (lambda ctx, prefix: None, "completer broken returned NoneType"),
        (lambda ctx, prefix: "abc", "completer broken returned str"),
        (lambda ctx, prefix: {"a": 1}, "completer broken returned dict"),
        (lambda ctx, prefix: 42, "completer broken returned int"),
        (lambda ctx, prefix: ["a", 2], "returned a int as item 1"),
        (lambda ctx, prefix: ["a", b"b"], "returned a bytes as item 1"),
        (lambda ctx, prefix: ["a\ud800"], "not valid UTF-8"),
        (lambda ctx, prefix: (1 / 0 for _ in range(1)), "ZeroDivisionError"),
        (lambda ctx, prefix: ["x" * 20_000] * 1 + [f"x{i}" + "y" * 20_000 for i in range(99)], "over the 1 MiB"),
    ],
)
def test_a_faulty_completer_is_a_completion_error_not_a_trap(completer, cause):
    capsule = Capsule("x")
    template = capsule.template("x://{v}/w")(lambda ctx: "x")

    def broken(ctx, prefix):
        return completer(ctx, prefix)

    template.complete("v")(broken)
    (outcome, _), host = complete(capsule, "x://{v}/w", "v", "")
    assert outcome == "error"
    _, reply = only_reply(host, CompleteResponse)
    assert reply.values == [] and reply.has_more is False and reply.total is None
    assert cause in (reply.error or "")


def test_an_unknown_variable_is_a_completion_error():
    reply = completion(files_capsule(), "astrid://files/{+path}", "nope")
    assert reply.values == [] and "has no variable 'nope'" in (reply.error or "")


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[]",
        b'{"uri_template": "astrid://files/{+path}", "argument_name": "path", "argument_value": ""}',
        b'{"uri_template": "astrid://files/{+path}", "argument_name": "path", "argument_value": "",'
        b' "correlation_id": "Not.Clean"}',
        b'{"uri_template": "astrid://files/{+path}", "argument_name": "path", "argument_value": 3,'
        b' "correlation_id": "k"}',
        b'{"uri_template": "astrid://files/{+path}", "argument_name": "path", "argument_value": "",'
        b' "correlation_id": "k", "context_arguments": [{"name": "a"}]}',
        b'{"uri_template": "astrid://files/{+path}", "argument_name": "path", "argument_value": "",'
        b' "correlation_id": "k", "context_arguments": {"a": "b"}}',
        b'{"uri_template": "x://{other}", "argument_name": "other", "argument_value": "", "correlation_id": "k"}',
    ],
)
def test_malformed_or_foreign_completions_are_ignored(payload):
    host = RecordingHost()
    assert files_capsule().dispatch("complete", payload, host)[0] == "continue"
    assert host.published == []


# -- who sees what ----------------------------------------------------------------------


def private_capsule(calls: list) -> Capsule:
    capsule = Capsule("x")

    def only_alice(ctx):
        return ctx.principal == "alice"

    @capsule.template("x://{+any}")
    def general(ctx):
        calls.append("general")
        return "general"

    @capsule.template("x://private/{name}", visible=only_alice)
    def private(ctx):
        calls.append("private")
        return "for alice"

    @private.complete("name")
    def names(ctx, prefix):
        calls.append("names")
        return ["diary"]

    @capsule.template("x://broken/{name}", visible=lambda ctx: 1 / 0)
    def broken(ctx):
        calls.append("broken")
        return "never"

    return capsule


def test_a_template_visible_to_one_principal():
    calls: list = []
    capsule = private_capsule(calls)
    bob = RecordingHost(caller_value=Caller(principal="bob"))

    def listed(host):
        templates(capsule, host)
        return [t.uri_template for t in only_reply(host, TemplatesResponse)[1].templates]

    assert listed(RecordingHost()) == ["x://{+any}", "x://private/{name}"]
    assert listed(RecordingHost(caller_value=Caller(principal="bob"))) == ["x://{+any}"]
    # alice reads the private template; bob's read falls to the template he may see
    assert contents(read(capsule, "x://private/diary")[1])[0]["text"] == "for alice"
    assert contents(read(capsule, "x://private/diary", bob)[1])[0]["text"] == "general"
    assert completion(capsule, "x://private/{name}", "name").values == ["diary"]
    outcome, host = complete(
        capsule, "x://private/{name}", "name", host=RecordingHost(caller_value=Caller("verified", "bob"))
    )
    assert outcome == ("continue", "not visible") and host.published == []
    assert calls == ["private", "general", "names"]


def test_a_raising_visible_hides_the_template():
    calls: list = []
    host = RecordingHost()
    templates(private_capsule(calls), host)
    assert "x://broken/{name}" not in host.published[0][1]
    assert any("ZeroDivisionError" in message for _, message in host.logs)
    assert contents(read(private_capsule(calls), "x://broken/a")[1])[0]["text"] == "general"
    assert "broken" not in calls


@pytest.mark.parametrize("caller", [None, Caller("claimed", "alice"), Caller("system", None)])
def test_an_unverified_principal_gets_nothing_and_no_user_code_runs(caller):
    calls: list = []
    capsule = private_capsule(calls)
    outcome, host = templates(capsule, RecordingHost(caller_value=caller))
    assert outcome == ("deny", "principal not verified") and host.published == []
    outcome, host = read(capsule, "x://private/diary", RecordingHost(caller_value=caller))
    assert outcome[0] == "deny"
    assert only_reply(host, ReadResponse)[1].error == "principal not verified"
    (outcome, _), host = complete(capsule, "x://private/{name}", "name", host=RecordingHost(caller_value=caller))
    assert outcome == "deny"
    reply = only_reply(host, CompleteResponse)[1]
    assert reply.error == "principal not verified" and reply.values == []
    assert calls == []


# -- definitions --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri_template", "kwargs", "message"),
    [
        ("x://plain", {}, "no variable"),
        ("x://{a}{b}", {}, "no literal between"),
        ("x://{#a}", {}, "not supported"),
        ("x://{a}/" + "x" * 2048, {}, "uri_template is"),
        ("x://{a}", {"title": "t" * 4097}, "title is 4097 bytes"),
        ("x://{a}", {"meta": [1]}, "meta must be a dict"),
        ("x://{a}", {"icons": ["a"] * 9}, "9 icons"),
        ("x://{a}", {"visible": True}, "visible= of"),
    ],
)
def test_bad_templates_fail_at_import_time(uri_template, kwargs, message):
    with pytest.raises(DefinitionError, match=message):
        Capsule("x").template(uri_template, **kwargs)(lambda ctx: "x")


def test_completers_and_names_are_checked_at_import_time():
    capsule = Capsule("x")
    template = capsule.template("x://{a}/b")(lambda ctx: "x")
    assert isinstance(template, Template) and template(None) == "x"
    with pytest.raises(DefinitionError, match="declared twice"):
        capsule.template("x://{a}/b")(lambda ctx: "y")
    with pytest.raises(DefinitionError, match="no variable 'b' to complete"):
        template.complete("b")
    template.complete("a")(lambda ctx, prefix: [])
    with pytest.raises(DefinitionError, match="two completers"):
        template.complete("a")
    for name in ("templates", "complete"):
        with pytest.raises(DefinitionError, match="served by the SDK"):
            capsule.on(name)(lambda ctx, payload: None)


# -- the real capsule, over a real kernel ----------------------------------------------------


@pytest.fixture(scope="module")
def built_templated(tmp_path_factory: pytest.TempPathFactory) -> Built:
    source = REPO / "tests" / "e2e" / "capsules" / "templated"
    return build_clean(source, tmp_path_factory.mktemp("templated") / "templated")


@pytest.fixture(scope="module")
def bus_client(kernel_for, built_templated) -> Client:
    return Client(kernel_for(built_templated.folder))


def ask(client: Client, topic: str, replies: str, payload: dict, principal: Principal = ALICE) -> list:
    bus = client.kernel.bus
    with bus.subscribe(client.participant, replies) as subscription:
        delivery = bus.publish(client.participant, topic, json.dumps(payload), principal)
        assert delivery.wait(WAIT_S), f"{topic} did not finish"
        return subscription.poll()


def ask_completion(client: Client, uri_template: str, name: str, value: str, principal=ALICE, **context) -> list:
    payload = {
        "uri_template": uri_template,
        "argument_name": name,
        "argument_value": value,
        "context_arguments": [{"name": k, "value": v} for k, v in context.items()],
        "correlation_id": "done-1",
    }
    return ask(client, host_topics.COMPLETE_TOPIC, host_topics.COMPLETE_REPLY_PREFIX + "done-1", payload, principal)


@pytest.mark.slow
def test_the_templated_capsule_over_a_real_kernel(bus_client):
    # templates: per principal
    (message,) = ask(bus_client, host_topics.TEMPLATES_TOPIC, host_topics.TEMPLATES_REPLIES, {})
    assert message.topic == "resource.v1.response.templates.templated"
    listed = TemplatesResponse.model_validate_json(message.payload).templates
    assert [t.uri_template for t in listed] == [
        "test://template/{id}/data",
        "astrid://files/{+path}",
        "test://users/{user}/notes/{note}",
        "astrid://private/{name}",
    ]
    (message,) = ask(bus_client, host_topics.TEMPLATES_TOPIC, host_topics.TEMPLATES_REPLIES, {}, BOB)
    assert "astrid://private/{name}" not in message.payload
    assert (
        ask(bus_client, host_topics.TEMPLATES_TOPIC, host_topics.TEMPLATES_REPLIES, {}, Principal.claimed("alice"))
        == []
    )

    # reads: the conformance fixtures, exactly
    (chunk,) = ReadResponse.model_validate(bus_client.read("test://template/123/data")).contents
    assert chunk.mime_type == "application/json"
    assert chunk.text == '{"id":"123","templateTest":true,"data":"Data for ID: 123"}'
    (chunk,) = ReadResponse.model_validate(bus_client.read("test://static-text")).contents
    assert (chunk.mime_type, chunk.text) == ("text/plain", "This is the content of the static text resource.")
    (chunk,) = ReadResponse.model_validate(bus_client.read("test://static-binary")).contents
    assert chunk.mime_type == "image/png" and chunk.blob
    (chunk,) = ReadResponse.model_validate(bus_client.read("astrid://files/notes/today.md")).contents
    assert chunk.text == "today: write tests\n"
    (chunk,) = ReadResponse.model_validate(bus_client.read("astrid://files/a%20b/c.txt")).contents
    assert chunk.text == "a space in a directory name\n"
    # a traversal would reach the handler as a read error: silence means it never ran
    for uri in ("astrid://files/a/../b", "astrid://files/notes/%2e%2e/README.md", "astrid://files/README.md%00"):
        assert bus_client.read_raw(uri) == [], uri
    assert bus_client.read_raw("astrid://private/diary", BOB) == []
    assert ReadResponse.model_validate(bus_client.read("astrid://private/diary")).contents[0].text == (
        "diary, for alice only"
    )

    # completion
    (message,) = ask_completion(bus_client, "astrid://files/{+path}", "path", "notes/")
    assert CompleteResponse.model_validate_json(message.payload) == CompleteResponse(
        values=["notes/later.md", "notes/today.md"], total=2, has_more=False
    )
    (message,) = ask_completion(bus_client, "test://template/{id}/data", "id", "12")
    assert CompleteResponse.model_validate_json(message.payload).values == ["12", "123", "1234"]
    (message,) = ask_completion(bus_client, "test://users/{user}/notes/{note}", "note", "t", user="ann")
    assert CompleteResponse.model_validate_json(message.payload).values == ["todo", "trip"]
    assert ask_completion(bus_client, "astrid://private/{name}", "name", "", BOB) == []
    assert ask_completion(bus_client, "x://not/{mine}", "mine", "") == []
