"""Declared freshness in the guest SDK: `max_age_s=` travels in `meta` under `astrid`.

docs/contract/resources.md §5.7.
"""

from __future__ import annotations

import json

import pytest

from astrid.host.broker.read_cache import MAX_AGE_CAP_S, split_freshness
from astrid.host.contract import DescribeResponse
from astrid.host.contract.template import TemplatesResponse
from astrid_sdk import Capsule, DefinitionError, Resource, _limits
from tests.capsules.test_sdk_native import RecordingHost, only_reply, read


def describe(capsule: Capsule) -> dict[str, dict | None]:
    host = RecordingHost()
    capsule.dispatch("describe", b"{}", host)
    _, reply = only_reply(host, DescribeResponse)
    return {r.uri: json.loads(r.meta) if r.meta is not None else None for r in reply.resources}


def templates(capsule: Capsule) -> dict[str, dict | None]:
    host = RecordingHost()
    capsule.dispatch("templates", b"{}", host)
    ((_, payload),) = host.published
    reply = TemplatesResponse.model_validate_json(payload)
    return {t.uri_template: json.loads(t.meta) if t.meta is not None else None for t in reply.templates}


def test_the_sdk_cap_matches_the_host_cap():
    assert _limits.MAX_AGE_S == MAX_AGE_CAP_S


def test_a_resource_declares_max_age_in_meta_merged_with_user_meta():
    capsule = Capsule("fresh")

    @capsule.resource("astrid://fresh/a", max_age_s=60, meta={"com.example/rev": 3})
    def a(ctx):
        return "a"

    @capsule.resource("astrid://fresh/b", max_age_s=0.5)
    def b(ctx):
        return "b"

    @capsule.resource("astrid://fresh/plain", meta={"com.example/rev": 1})
    def plain(ctx):
        return "plain"

    metas = describe(capsule)
    assert metas["astrid://fresh/a"] == {"com.example/rev": 3, "astrid": {"max_age_s": 60}}
    assert metas["astrid://fresh/b"] == {"astrid": {"max_age_s": 0.5}}
    assert metas["astrid://fresh/plain"] == {"com.example/rev": 1}  # nothing declared, nothing added


def test_a_family_lends_its_max_age_to_every_listed_member():
    capsule = Capsule("fam")

    @capsule.resource_family("astrid://fam/n/", max_age_s=30, meta={"k": 1})
    def note(ctx, uri):
        return ctx.key

    @note.lister
    def members(ctx):
        return ["one", Resource("astrid://fam/n/two", "two"), Resource("astrid://fam/n/three", "three", max_age_s=5)]

    metas = describe(capsule)
    assert metas["astrid://fam/n/one"] == {"k": 1, "astrid": {"max_age_s": 30}}
    assert metas["astrid://fam/n/two"] == {"astrid": {"max_age_s": 30}}
    assert metas["astrid://fam/n/three"] == {"astrid": {"max_age_s": 5}}  # its own declaration wins


def test_a_template_declares_max_age_in_its_meta():
    capsule = Capsule("tmpl")

    @capsule.template("astrid://tmpl/{id}", max_age_s=120, meta={"x": "y"})
    def item(ctx):
        return ctx.params["id"]

    @capsule.template("astrid://tmpl/raw/{id}")
    def raw(ctx):
        return ctx.params["id"]

    metas = templates(capsule)
    assert metas["astrid://tmpl/{id}"] == {"x": "y", "astrid": {"max_age_s": 120}}
    assert metas["astrid://tmpl/raw/{id}"] is None


def test_a_read_is_unchanged_by_a_declaration():
    capsule = Capsule("fresh")

    @capsule.resource("astrid://fresh/a", max_age_s=60)
    def a(ctx):
        return "body"

    outcome, host = read(capsule, "astrid://fresh/a")
    assert outcome == ("final", None)
    ((_, payload),) = host.published
    assert json.loads(payload) == {
        "uri": "astrid://fresh/a",
        "contents": [{"type": "text", "uri": "astrid://fresh/a", "text": "body"}],
    }


@pytest.mark.parametrize(
    ("max_age_s", "message"),
    [
        (0, "more than 0"),
        (-1, "more than 0"),
        (86_401, "at most 86400"),
        (float("inf"), "more than 0"),
        (float("nan"), "more than 0"),
        (True, "number of seconds"),
        ("60", "number of seconds"),
    ],
)
def test_a_bad_max_age_is_a_build_error(max_age_s, message):
    capsule = Capsule("bad")
    with pytest.raises(DefinitionError, match=message):
        capsule.resource("astrid://bad/a", max_age_s=max_age_s)(lambda ctx: "a")
    with pytest.raises(DefinitionError, match=message):
        capsule.template("astrid://bad/{x}", max_age_s=max_age_s)(lambda ctx: "a")
    with pytest.raises(DefinitionError, match=message):
        capsule.resource_family("astrid://bad/f/", max_age_s=max_age_s)(lambda ctx, uri: "a")


@pytest.mark.parametrize("meta", [{"astrid": {"max_age_s": 5}}, '{"astrid": 1}'])
def test_user_meta_may_not_hold_the_astrid_key(meta):
    capsule = Capsule("bad")
    with pytest.raises(DefinitionError, match="reserved"):
        capsule.resource("astrid://bad/a", meta=meta)(lambda ctx: "a")
    with pytest.raises(DefinitionError, match="reserved"):
        capsule.template("astrid://bad/{x}", meta=meta)(lambda ctx: "a")


def test_the_host_reads_what_the_sdk_writes_and_strips_the_key():
    capsule = Capsule("fresh")

    @capsule.resource("astrid://fresh/a", max_age_s=60, meta={"com.example/rev": 3})
    def a(ctx):
        return "a"

    @capsule.resource("astrid://fresh/b", max_age_s=1)
    def b(ctx):
        return "b"

    host = RecordingHost()
    capsule.dispatch("describe", b"{}", host)
    _, reply = only_reply(host, DescribeResponse)
    stripped, ages = split_freshness(reply.resources, lambda d: d.uri)
    assert ages == {"astrid://fresh/a": 60.0, "astrid://fresh/b": 1.0}
    by_uri = {d.uri: d for d in stripped}
    assert json.loads(by_uri["astrid://fresh/a"].meta) == {"com.example/rev": 3}
    assert by_uri["astrid://fresh/b"].meta is None
