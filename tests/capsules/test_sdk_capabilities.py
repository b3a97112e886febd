"""The SDK's side of live data, on the host's CPython: ctx.fs / ctx.kv / ctx.http, their errors,
and template listers. The real-component path is in tests/e2e/test_live_data.py."""

from __future__ import annotations

import json

import pytest

from astrid.host.contract import DescribeResponse
from astrid_sdk import (
    Capsule,
    Denied,
    FileNotFound,
    HostError,
    InvalidArgument,
    NotFound,
    NotGranted,
    QuotaExceeded,
    Resource,
    TooLarge,
)
from astrid_sdk._errors import capability_error
from tests.capsules.test_sdk_native import RecordingHost, only_reply, read


class CapabilityHost(RecordingHost):
    """A recording host that also serves fs, kv and http from memory (or refuses with `refuse_with`)."""

    def __init__(self, files=None, refuse_with: tuple[str, str] | None = None) -> None:
        super().__init__()
        self.files = files or {}
        self.store: dict[str, bytes] = {}
        self.fetched: list[tuple] = []
        self.refuse_with = refuse_with

    def _check(self) -> None:
        if self.refuse_with:
            raise capability_error(*self.refuse_with)

    def fs_read(self, path):
        self._check()
        if path not in self.files:
            raise capability_error("not-found")
        return self.files[path]

    def fs_list(self, path):
        self._check()
        return [(name.rsplit("/", 1)[-1], "file", len(data), 1_700_000_000_000) for name, data in self.files.items()]

    def fs_stat(self, path):
        self._check()
        return ("file", len(self.files[path]), 1_700_000_000_000)

    def kv_get(self, key):
        self._check()
        return self.store.get(key)

    def kv_set(self, key, value):
        self._check()
        self.store[key] = value

    def kv_delete(self, key):
        self.store.pop(key, None)

    def kv_keys(self, prefix):
        return sorted(k for k in self.store if k.startswith(prefix))

    def http_fetch(self, method, url, headers, body):
        self._check()
        self.fetched.append((method, url, headers, body))
        return 200, [("Content-Type", "application/json")], b'{"ok": true}'


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("capability-denied", NotGranted),
        ("boundary-escape", Denied),
        ("address-denied", Denied),
        ("access", Denied),
        ("not-found", FileNotFound),
        ("too-large", TooLarge),
        ("body-too-large", TooLarge),
        ("quota", QuotaExceeded),
        ("invalid-path", InvalidArgument),
        ("invalid-key", InvalidArgument),
        ("timeout", HostError),
    ],
)
def test_each_refusal_is_its_own_host_error(code: str, kind: type) -> None:
    error = capability_error(code, "why")
    assert type(error) is kind and isinstance(error, HostError) and error.code == code and "why" in str(error)


def test_a_missing_file_is_also_a_not_found() -> None:
    assert isinstance(capability_error("not-found"), NotFound)


def test_a_handler_reads_files_keeps_state_and_fetches() -> None:
    capsule = Capsule("live")

    @capsule.resource("astrid://live/one", name="one")
    def one(ctx):
        ctx.kv.set("visits", str(int((ctx.kv.get("visits") or b"0").decode()) + 1))
        answer = ctx.http.get("https://api.example.com/x", headers={"Accept": "application/json"})
        names = [entry.name for entry in ctx.fs.list("notes")]
        return f"{ctx.fs.read_text('notes/a.md')}|{ctx.kv.get('visits').decode()}|{answer.json()['ok']}|{names}"

    host = CapabilityHost(files={"notes/a.md": b"# A"})
    read(capsule, "astrid://live/one", host)
    read(capsule, "astrid://live/one", host)
    replies = [json.loads(payload) for _, payload in host.published]
    assert replies[-1]["contents"][0]["text"] == "# A|2|True|['a.md']"
    assert host.fetched[0][:3] == ("GET", "https://api.example.com/x", [("Accept", "application/json")])


def test_an_uncaught_refusal_is_a_read_error_naming_the_fix() -> None:
    capsule = Capsule("live")
    capsule.resource("astrid://live/one", name="one")(lambda ctx: ctx.fs.read_text("notes/a.md"))
    host = CapabilityHost(
        refuse_with=("capability-denied", "the operator runs `astrid capsule grant live fs:notes=PATH`")
    )
    read(capsule, "astrid://live/one", host)
    reply = json.loads(host.published[-1][1])
    assert "NotGranted" in reply["error"] and "astrid capsule grant live fs:notes=PATH" in reply["error"]


def test_an_uncaught_missing_file_leaves_the_uri_unserved() -> None:
    capsule = Capsule("live")
    capsule.resource("astrid://live/one", name="one")(lambda ctx: ctx.fs.read("notes/gone.md"))
    outcome, host = read(capsule, "astrid://live/one", CapabilityHost())
    assert outcome == ("continue", "not found") and host.published == []


def test_a_template_lister_lists_only_uris_the_template_serves() -> None:
    capsule = Capsule("files")
    template = capsule.template("astrid://files/{+path}", name="file")(lambda ctx: "x")
    template.lister(lambda ctx: [Resource("astrid://files/a/b.md", "b"), Resource("astrid://other/c", "c"), "nope"])
    host = CapabilityHost()
    capsule.dispatch("describe", b"{}", host)
    _, described = only_reply(host, DescribeResponse)
    assert [r.uri for r in described.resources] == ["astrid://files/a/b.md"]
    assert sum("dropped" in message for _, message in host.logs) == 2


# -- ctx.updated (astrid-bus:resource-events, docs/contract/subscriptions.md §11) ----------------


def test_ctx_updated_publishes_the_event_after_the_write_and_defaults_to_the_uri_being_read():
    capsule = Capsule("counter")

    @capsule.resource("astrid://counter/hits", name="hits")
    def hits(ctx):
        ctx.kv.set("hits", "1")
        ctx.updated()  # the URI being read
        ctx.updated("astrid://counter/other")
        return "1"

    host = CapabilityHost()
    read(capsule, "astrid://counter/hits", host)
    events = [(topic, json.loads(payload)) for topic, payload in host.published if ".event." in topic]
    assert events == [
        ("resource.v1.event.updated", {"uri": "astrid://counter/hits"}),
        ("resource.v1.event.updated", {"uri": "astrid://counter/other"}),
    ]
    assert host.store == {"hits": b"1"}
    assert host.published[-1][0].startswith("resource.v1.response.read.")  # the reply comes after


def test_ctx_updated_without_the_publish_line_names_the_line_to_add():
    capsule = Capsule("counter")

    @capsule.resource("astrid://counter/hits", name="hits")
    def hits(ctx):
        try:
            ctx.updated()
        except NotGranted as exc:
            return str(exc)
        return "no error"

    host = CapabilityHost()
    original = host.publish

    def publish(topic, payload):
        if ".event." in topic:
            raise HostError("capability-denied")
        original(topic, payload)

    host.publish = publish
    read(capsule, "astrid://counter/hits", host)
    text = json.loads(host.published[-1][1])["contents"][0]["text"]
    assert "resource.v1.event.updated" in text and "astrid-bus:resource-events@1.0.0" in text and "[publish]" in text
