"""The SDK's reserved action `astrid.static`: the describe and templates replies every principal gets.

Driven natively with a recording host (the SDK is plain Python). The point:
the static payload is byte for byte what the describe (templates) handler
publishes, for any verified principal, and null whenever the reply may
depend on the caller. The host side (asking a built component, keeping the
answer, answering describes itself) is in tests/host/kernel/test_static_replies.py.
"""

from __future__ import annotations

import json

import pytest

from astrid.host.build import code_check
from astrid.host.contract import DescribeResponse
from astrid.host.contract.template import TemplatesResponse
from astrid.host.kernel import static_replies
from astrid.host.limits import DEFAULT_LIMITS
from astrid_sdk import Annotations, Capsule, DefinitionError, Icon, NotFound, Resource, _capsule, _limits
from tests.capsules.test_sdk_native import Caller, RecordingHost

CALLERS = [Caller(principal="alice"), Caller(principal="bob"), Caller(principal="x" * 200)]


def static_capsule(name: str = "static") -> Capsule:
    """Resources without `visible`, a family without a lister, templates without `visible`: all static."""
    capsule = Capsule(name)

    @capsule.resource(
        "astrid://static/a",
        title="Ä title ☃",
        description='with "quotes" and \\ and \n',
        mime_type="text/plain",
        size=3,
        annotations=Annotations(audience=["user"], priority=0.25, last_modified="2026-12-01T00:00:00Z"),
        icons=[Icon("data:image/png;base64,AAAA", mime_type="image/png", sizes=["16x16"], theme="dark")],
        meta={"dev.astrid/kind": "page", "n": 1},
        max_age_s=60,
    )
    def a(ctx):
        raise AssertionError("no handler runs for a describe")

    @capsule.resource("astrid://static/b")
    def b(ctx):
        raise AssertionError("no handler runs for a describe")

    @capsule.resource_family("astrid://static/items/")
    def item(ctx, uri):
        raise NotFound(uri)

    @capsule.template("astrid://static/t/{id}", name="t", mime_type="text/plain", max_age_s=5)
    def t(ctx):
        return "x"

    @t.complete("id")
    def ids(ctx, prefix):
        raise AssertionError("no completer runs for a templates list")

    return capsule


def answer(capsule: Capsule, caller: Caller | None = None) -> dict:
    host = RecordingHost(caller_value=caller)
    action, data = capsule.dispatch("astrid.static", b"", host)
    assert action == "final" and data is not None
    assert host.published == []  # it answers, it sends nothing
    return json.loads(data)


def published(capsule: Capsule, handler: str, caller: Caller) -> tuple[str, str]:
    host = RecordingHost(caller_value=caller)
    action, _ = capsule.dispatch(handler, b"{}", host)
    assert action == "final"
    ((topic, payload),) = host.published
    return topic, payload


def test_the_host_asks_what_the_sdk_answers():
    assert static_replies.STATIC_ACTION == _capsule.STATIC_ACTION == "astrid.static"
    assert static_replies.STATIC_VERSION == _capsule.STATIC_VERSION
    assert static_replies.DESCRIBE_HANDLER == _capsule.DESCRIBE_HANDLER
    assert static_replies.TEMPLATES_HANDLER == _capsule.TEMPLATES_HANDLER
    assert set(code_check.RESERVED_ACTIONS) == set(_capsule.RESERVED_ACTIONS)  # the build refuses binding them


@pytest.mark.parametrize("caller", [Caller(), Caller(attribution="system", principal=None), None])
def test_answered_before_any_principal_check_and_the_same_for_everyone(caller):
    capsule = static_capsule()
    assert answer(capsule, caller) == answer(static_capsule(), Caller()) == capsule.static_replies(RecordingHost())


@pytest.mark.parametrize("caller", CALLERS, ids=lambda c: c.principal[:8])
def test_the_static_payload_is_byte_for_byte_what_the_handlers_publish(caller):
    static = answer(static_capsule())  # asked first, in its own instance: as the host does
    fresh = static_capsule()  # another instance that never answered astrid.static
    assert published(fresh, "describe", caller) == (static["describe"]["topic"], static["describe"]["payload"])
    assert published(fresh, "templates", caller) == (static["templates"]["topic"], static["templates"]["payload"])
    # ... and the same after a describe has run in the instance that answers the static action
    assert answer(fresh) == static


def test_the_static_payload_is_a_valid_reply_that_the_host_uses_as_is():
    static = answer(static_capsule())
    describe = DescribeResponse.model_validate_json(static["describe"]["payload"], context={"limits": DEFAULT_LIMITS})
    assert [r.uri for r in describe.resources] == ["astrid://static/a", "astrid://static/b"]
    templates = TemplatesResponse.model_validate_json(static["templates"]["payload"])
    assert [t.uri_template for t in templates.templates] == ["astrid://static/t/{id}"]
    assert static["describe"]["topic"] == "resource.v1.response.describe.static"
    assert static["templates"]["topic"] == "resource.v1.response.templates.static"
    parsed = static_replies.parse_answer(json.dumps(static), DEFAULT_LIMITS)
    assert parsed.describe == static_replies.StaticReply(static["describe"]["topic"], static["describe"]["payload"])
    assert parsed.templates == static_replies.StaticReply(static["templates"]["topic"], static["templates"]["payload"])


def test_the_reply_topic_folds_the_capsule_name_as_the_handlers_do():
    capsule = static_capsule("My Notes.v2")
    static = answer(capsule)
    assert published(capsule, "describe", Caller())[0] == static["describe"]["topic"]
    assert static_replies.parse_answer(json.dumps(static), DEFAULT_LIMITS).describe is not None


def test_an_over_limit_describe_is_cut_the_same_way():
    capsule = Capsule("many")
    for n in range(_limits.MAX_RESOURCES_PER_DESCRIBE + 5):
        capsule.resource(f"astrid://many/{n:04d}")(lambda ctx: "x")
    static = answer(capsule)
    assert published(static_capsule_like(capsule), "describe", Caller()) == (
        static["describe"]["topic"],
        static["describe"]["payload"],
    )
    assert len(json.loads(static["describe"]["payload"])["resources"]) == _limits.MAX_RESOURCES_PER_DESCRIBE


def static_capsule_like(capsule: Capsule) -> Capsule:
    """A second instance with the same declarations (the host asks one instance, serves from another)."""
    other = Capsule(capsule.name)
    for uri in capsule._static:
        other.resource(uri)(lambda ctx: "x")
    return other


def visible_resource() -> Capsule:
    capsule = Capsule("dyn")

    @capsule.resource("astrid://dyn/a", visible=lambda ctx: ctx.principal == "alice")
    def a(ctx):
        return "a"

    return capsule


def family_lister() -> Capsule:
    capsule = Capsule("dyn")

    @capsule.resource_family("astrid://dyn/items/")
    def item(ctx, uri):
        raise NotFound(uri)

    @item.lister
    def items(ctx):
        raise AssertionError("no lister runs for the static answer")

    return capsule


def template_lister() -> Capsule:
    capsule = Capsule("dyn")

    @capsule.template("astrid://dyn/{id}")
    def t(ctx):
        return "x"

    @t.lister
    def listed(ctx):
        raise AssertionError("no lister runs for the static answer")

    return capsule


def template_visible() -> Capsule:
    capsule = Capsule("dyn")

    @capsule.resource("astrid://dyn/plain")
    def plain(ctx):
        return "p"

    @capsule.template("astrid://dyn/{id}", visible=lambda ctx: False)
    def t(ctx):
        return "x"

    return capsule


@pytest.mark.parametrize(
    ("make", "describe_static", "templates_static"),
    [
        (visible_resource, False, True),
        (family_lister, False, True),
        (template_lister, False, True),
        (template_visible, True, False),
    ],
    ids=["visible resource", "family lister", "template lister", "template visible"],
)
def test_anything_that_depends_on_the_caller_is_dynamic(make, describe_static, templates_static):
    static = answer(make())
    assert (static["describe"] is not None) is describe_static
    assert (static["templates"] is not None) is templates_static
    for kind, is_static in (("describe", describe_static), ("templates", templates_static)):
        if is_static:  # still byte for byte what the handler publishes
            assert published(make(), kind, Caller()) == (static[kind]["topic"], static[kind]["payload"])


def test_a_dynamic_describe_still_differs_per_principal():
    capsule = visible_resource()
    alice = json.loads(published(capsule, "describe", Caller(principal="alice"))[1])
    bob = json.loads(published(capsule, "describe", Caller(principal="bob"))[1])
    assert alice != bob


def test_no_reply_for_anyone_not_verified_whatever_the_static_answer():
    capsule = static_capsule()
    answer(capsule)
    for caller in (Caller(attribution="claimed"), Caller(attribution="system", principal=None), None):
        host = RecordingHost(caller_value=caller)
        assert capsule.dispatch("describe", b"{}", host)[0] == "deny"
        assert capsule.dispatch("templates", b"{}", host)[0] == "deny"
        assert host.published == []


def test_the_reserved_name_cannot_be_a_handler():
    capsule = Capsule("static")
    with pytest.raises(DefinitionError, match="served by the SDK itself"):

        @capsule.on("astrid.static")
        def sneaky(ctx, payload):
            return None


def test_a_capsule_with_nothing_declared_answers_empty_replies():
    static = answer(Capsule("empty"))
    assert json.loads(static["describe"]["payload"]) == {"resources": []}
    assert json.loads(static["templates"]["payload"]) == {"templates": []}


def test_a_family_member_resource_is_not_a_reason_to_be_dynamic():
    capsule = Capsule("fam")

    @capsule.resource_family("astrid://fam/")
    def member(ctx, uri):
        return Resource(uri, "m")

    assert answer(capsule)["describe"] is not None
