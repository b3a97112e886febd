"""The guest SDK's logic on the host's CPython (fast): encoding, limits, routing, fail-closed.

The SDK is plain Python; only `Capsule.world()` and `_host` need the
componentize-py bindings. These tests drive `Capsule.dispatch` with a
recording host; the real-component tests (test_bundled, test_faults) cover
the same paths through wasmtime and the kernel's bus.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

import astrid_sdk
from astrid.host.contract import DescribeResponse, ReadResponse
from astrid.host.limits import DEFAULT_LIMITS
from astrid_sdk import (
    Annotations,
    Capsule,
    DefinitionError,
    HostError,
    Icon,
    Resource,
    _checks,
    _limits,
    _template,
    _uri,
    blob,
    text,
)
from astrid_sdk._capsule import _flat_key


@dataclass
class Caller:
    attribution: str = "verified"
    principal: str | None = "alice"
    source_id: str = "broker-1"
    timestamp: str = "2026-12-01T00:00:00.000Z"


@dataclass
class RecordingHost:
    """What the guest sees of the host: a caller, a publish sink, config and a clock."""

    caller_value: Caller | None = field(default_factory=Caller)
    published: list[tuple[str, str]] = field(default_factory=list)
    logs: list[tuple[str, str]] = field(default_factory=list)
    config_values: dict[str, str] = field(default_factory=dict)
    refuse: str | None = None

    def caller(self):
        return self.caller_value

    def publish(self, topic: str, payload: str) -> None:
        if self.refuse:
            raise HostError(self.refuse)
        self.published.append((topic, payload))

    def log(self, level: str, message: str) -> None:
        self.logs.append((level, message))

    def config(self, key: str):
        return self.config_values.get(key)

    def clock_ms(self) -> int:
        return 1_700_000_000_000


def read(capsule: Capsule, uri: str, host: RecordingHost | None = None, correlation_id: str = "c-1"):
    host = host or RecordingHost()
    outcome = capsule.dispatch("read", json.dumps({"uri": uri, "correlation_id": correlation_id}).encode(), host)
    return outcome, host


def only_reply(host: RecordingHost, model):
    ((topic, payload),) = host.published
    parsed = model.model_validate_json(payload)
    assert parsed.to_wire() == json.loads(payload)  # exact: nothing dropped or reshaped
    return topic, parsed


def test_sdk_limits_match_the_host_limits():
    assert DEFAULT_LIMITS.resources_per_describe == _limits.MAX_RESOURCES_PER_DESCRIBE
    assert DEFAULT_LIMITS.uri_bytes == _limits.MAX_URI_BYTES
    assert DEFAULT_LIMITS.title_bytes == _limits.MAX_TITLE_BYTES
    assert DEFAULT_LIMITS.description_bytes == _limits.MAX_DESCRIPTION_BYTES
    assert DEFAULT_LIMITS.meta_bytes == _limits.MAX_META_BYTES
    assert DEFAULT_LIMITS.icons_per_definition == _limits.MAX_ICONS
    assert DEFAULT_LIMITS.chunks_per_read == _limits.MAX_CHUNKS_PER_READ
    assert DEFAULT_LIMITS.bytes_per_read == _limits.MAX_BYTES_PER_READ
    assert DEFAULT_LIMITS.bus_message_bytes == _limits.MAX_MESSAGE_BYTES


def full_capsule() -> Capsule:
    capsule = Capsule("Full Fields!")

    @capsule.resource(
        "astrid://full/one",
        name="one",
        title="One",
        description="every field",
        mime_type="text/plain",
        size=3,
        annotations=Annotations(audience=["user", "assistant"], priority=1, last_modified="2026-12-01T00:00:00Z"),
        icons=[
            Icon("data:image/png;base64,AA==", mime_type="image/png", sizes=["16x16"], theme="dark"),
            "https://x/y.svg",
        ],
        meta={"k": [1, 2]},
    )
    def one(ctx):
        return "one"

    @capsule.resource("astrid://full/bare")
    def bare(ctx):
        return [
            text("t", meta='{"a":1}'),
            blob(b"\x00\xff", uri="astrid://full/other", mime_type="application/octet-stream"),
        ]

    return capsule


def test_describe_encodes_every_field_exactly():
    host = RecordingHost()
    assert full_capsule().dispatch("describe", b"{}", host)[0] == "final"
    topic, described = only_reply(host, DescribeResponse)
    assert topic == "resource.v1.response.describe.full-fields-"
    wire = json.loads(host.published[0][1])
    one, bare = wire["resources"]
    assert one["annotations"] == {
        "audience": ["user", "assistant"],
        "priority": 1.0,
        "last_modified": "2026-12-01T00:00:00Z",
    }
    assert one["icons"][1] == {"src": "https://x/y.svg", "sizes": []}
    assert one["meta"] == '{"k":[1,2]}'
    assert bare == {"uri": "astrid://full/bare", "name": "bare", "icons": []}  # options left out


def test_read_encodes_text_and_blob_chunks():
    outcome, host = read(full_capsule(), "astrid://full/bare")
    assert outcome == ("final", None)
    topic, reply = only_reply(host, ReadResponse)
    assert topic == "resource.v1.response.read.c-1"
    text_chunk, blob_chunk = json.loads(host.published[0][1])["contents"]
    assert text_chunk == {"type": "text", "uri": "astrid://full/bare", "text": "t", "meta": '{"a":1}'}
    assert blob_chunk == {
        "type": "blob",
        "uri": "astrid://full/other",
        "mime_type": "application/octet-stream",
        "blob": "AP8=",
    }


def test_a_bare_return_takes_the_resource_mime_type():
    _, host = read(full_capsule(), "astrid://full/one")
    assert json.loads(host.published[0][1])["contents"][0]["mime_type"] == "text/plain"


@pytest.mark.parametrize("caller", [None, Caller("claimed"), Caller("system", None)])
def test_fail_closed_without_a_verified_principal(caller):
    host = RecordingHost(caller_value=caller)
    assert full_capsule().dispatch("describe", b"{}", host)[0] == "deny"
    assert host.published == []
    outcome, host = read(full_capsule(), "astrid://full/one", RecordingHost(caller_value=caller))
    assert outcome[0] == "deny"
    _, reply = only_reply(host, ReadResponse)
    assert reply.error == "principal not verified" and not reply.contents


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[]",
        b'{"uri": "astrid://full/one"}',
        b'{"uri": "astrid://full/one", "correlation_id": "a.b"}',
        b'{"uri": 3, "correlation_id": "ok"}',
        b'{"uri": "astrid://full/one", "correlation_id": "' + b"a" * 300 + b'"}',
    ],
)
def test_malformed_read_requests_are_ignored(payload):
    host = RecordingHost()
    assert full_capsule().dispatch("read", payload, host)[0] == "continue"
    assert host.published == []


def test_user_code_runs_only_after_the_principal_check():
    capsule = Capsule("x")
    calls = []

    @capsule.resource("astrid://x/a")
    def a(ctx):
        calls.append(ctx.principal)
        return "a"

    read(capsule, "astrid://x/a", RecordingHost(caller_value=Caller("claimed", "mallory")))
    assert calls == []


def test_a_refused_publish_is_reported_not_raised():
    outcome, _ = read(full_capsule(), "astrid://full/one", RecordingHost(refuse="capability-denied"))
    assert outcome[0] == "error" and "capability-denied" in outcome[1]


def test_a_reply_over_the_bus_limit_becomes_an_error():
    capsule = Capsule("x")

    @capsule.resource("astrid://x/a")
    def a(ctx):  # 200 KB of content, 1.2 MB of JSON: every control byte is escaped as \u00XX
        return "\x01" * 200_000

    _, host = read(capsule, "astrid://x/a")
    _, reply = only_reply(host, ReadResponse)
    assert "1 MiB" in reply.error


def test_describe_caps_at_256_resources():
    capsule = Capsule("many")
    family = capsule.resource_family("astrid://many/")(lambda ctx, uri: "x")
    family.lister(lambda ctx: [str(i) for i in range(300)])
    host = RecordingHost()
    capsule.dispatch("describe", b"{}", host)
    _, described = only_reply(host, DescribeResponse)
    assert len(described.resources) == 256
    assert any("only the first 256" in message for _, message in host.logs)


def test_a_static_only_describe_is_encoded_once_and_still_refuses_the_unverified():
    capsule = full_capsule()
    first, second = RecordingHost(), RecordingHost(caller_value=Caller(principal="bob"))
    assert capsule.dispatch("describe", b"{}", first) == ("final", "2 resources")
    assert capsule.dispatch("describe", b"{}", second) == ("final", "2 resources")
    assert first.published == second.published  # the same reply, whoever asks
    assert first.published[0][1] is second.published[0][1]  # encoded once: the very same string
    unverified = RecordingHost(caller_value=Caller(attribution="claimed"))
    assert capsule.dispatch("describe", b"{}", unverified)[0] == "deny" and not unverified.published


def test_a_visible_filter_or_a_lister_makes_every_describe_fresh():
    capsule = Capsule("filtered")
    capsule.resource("astrid://filtered/alice-only", visible=lambda ctx: ctx.principal == "alice")(lambda ctx: "x")
    alice, bob = RecordingHost(), RecordingHost(caller_value=Caller(principal="bob"))
    capsule.dispatch("describe", b"{}", alice)
    capsule.dispatch("describe", b"{}", bob)
    assert len(only_reply(alice, DescribeResponse)[1].resources) == 1
    assert only_reply(bob, DescribeResponse)[1].resources == []
    listed = Capsule("listed")
    names = ["a"]
    listed.resource_family("astrid://listed/")(lambda ctx, uri: "x").lister(lambda ctx: list(names))
    before, after = RecordingHost(), RecordingHost()
    listed.dispatch("describe", b"{}", before)
    names.append("b")
    listed.dispatch("describe", b"{}", after)
    assert [r.uri for r in only_reply(after, DescribeResponse)[1].resources] == [
        "astrid://listed/a",
        "astrid://listed/b",
    ]


def test_a_raising_lister_does_not_hide_the_rest():
    capsule = full_capsule()
    family = capsule.resource_family("astrid://full/f/")(lambda ctx, uri: "x")
    family.lister(lambda ctx: 1 / 0)
    host = RecordingHost()
    capsule.dispatch("describe", b"{}", host)
    _, described = only_reply(host, DescribeResponse)
    assert len(described.resources) == 2
    assert any("ZeroDivisionError" in message for _, message in host.logs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"uri": "astrid://" + "x" * 2048}, "uri is 2057 bytes"),
        ({"uri": ""}, "uri is empty"),
        ({"title": "t" * 4097}, "title is 4097 bytes"),
        ({"description": "d" * 4097}, "description is 4097 bytes"),
        ({"meta": [1]}, "meta must be a dict"),
        ({"meta": "[1]"}, "meta must be a JSON object"),
        ({"meta": {"k": "v" * 5000}}, "meta is"),
        ({"size": -1}, "size must be"),
        ({"annotations": {"audience": ["robot"]}}, "audience role 'robot'"),
        ({"annotations": {"priority": 2}}, "outside 0.0-1.0"),
        ({"icons": [{"src": "a", "theme": "neon"}]}, "icon theme 'neon'"),
        ({"icons": ["a"] * 9}, "9 icons"),
    ],
)
def test_bad_definitions_fail_at_import_time(kwargs, message):
    arguments = {"uri": "astrid://x/a", **kwargs}
    with pytest.raises(DefinitionError, match=message.replace("(", r"\(").replace(".", r"\.")):
        Resource(arguments.pop("uri"), "a", **arguments)


def test_duplicate_uris_are_refused():
    capsule = Capsule("x")
    capsule.resource("astrid://x/a")(lambda ctx: "a")
    with pytest.raises(DefinitionError, match="declared twice"):
        capsule.resource("astrid://x/a")(lambda ctx: "b")


@pytest.mark.parametrize("key", ["a", "a.b", "a-b_c", "%41", "a?b=c", "..."])
def test_flat_keys(key):
    assert _flat_key(key)


@pytest.mark.parametrize("key", ["", ".", "..", "a/b", "a\\b", "%2e%2e", "%2E.", "a%2fb", "a\nb", "a%5cb"])
def test_non_flat_keys(key):
    assert not _flat_key(key)


def families_and_templates() -> tuple:
    capsule = Capsule("enc")
    family = capsule.resource_family("astrid://enc/f/")(lambda ctx, uri: "x")
    template = capsule.template("astrid://enc/t/{id}")(lambda ctx: ctx.params["id"])
    return family, template


def test_family_keys_and_template_values_share_one_percent_decoder():
    assert _template.percent_decode is _uri.percent_decode


@pytest.mark.parametrize(("key", "decoded"), [("caf%C3%A9", "café"), ("%E2%82%AC", "€"), ("na%C3%AFve", "naïve")])
def test_a_non_ascii_percent_encoded_key_decodes_as_utf8_for_a_family_and_a_template_alike(key, decoded):
    family, template = families_and_templates()
    assert _uri.percent_decode(key) == decoded  # no longer byte by byte into Latin-1 ("cafÃ©") for families
    assert family.key_of("astrid://enc/f/" + key) == key
    assert template.match("astrid://enc/t/" + key) == {"id": decoded}


@pytest.mark.parametrize("key", ["caf%E9", "%FF", "%C0%AE", "%C0%AE%C0%AE", "%C0%AF"])
def test_escapes_that_are_not_utf8_are_refused_by_a_family_and_a_template_alike(key):
    """Latin-1 `é`, a stray byte, overlong `.`, `..` and `/`: a family once served them, a template never did."""
    family, template = families_and_templates()
    assert not _flat_key(key)
    assert family.key_of("astrid://enc/f/" + key) is None
    assert template.match("astrid://enc/t/" + key) is None


def test_correlation_ids_are_clean_and_distinct_per_principal():
    capsule = Capsule("Intro Spect")
    host = RecordingHost()
    ids = {capsule._mint_id(host, "alice"), capsule._mint_id(host, "alice"), capsule._mint_id(host, "bob")}
    assert len(ids) == 3
    assert all(_checks.is_clean_segment(i) for i in ids)


def test_world_outside_a_build_is_a_clear_error():
    with pytest.raises(RuntimeError, match="componentize-py build"):
        Capsule("x").world()


def test_public_api():
    assert {"Capsule", "NotFound", "Resource", "text", "blob", "Annotations", "Icon"} <= set(astrid_sdk.__all__)


def test_spliced_read_json_is_the_same_document_as_the_plain_encoding():
    from astrid_sdk._chunks import base64_of
    from astrid_sdk._encoding import dumps
    from astrid_sdk._responses import read_response, read_response_json

    chunks = [
        text('quote " and \\u00e9 \n', mime_type="text/plain", meta={"a": 1}),
        blob(bytes(range(256)) * 40, uri="astrid://x/sub"),
        blob(b"\x00\x01"),
    ]
    spliced = read_response_json("astrid://x", chunks)
    assert json.loads(spliced) == json.loads(dumps(read_response("astrid://x", chunks)))
    big = chunks[1].data
    assert base64_of(big) is base64_of(big)  # cached by identity
