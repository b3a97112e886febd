"""The bundled capsules build from a clean checkout and answer describe and read exactly per the contract."""

from __future__ import annotations

import base64
import json

import pytest

from astrid.host.contract import DescribeResponse, ReadResponse
from astrid.host.contract.events import CapsuleInfo
from astrid.host.limits import DEFAULT_LIMITS
from tests.support.busclient import ALICE, BOB, Client

pytestmark = pytest.mark.slow


def exact(model, payload: str):
    """Validate a bus payload with the contract model and check nothing was lost or reshaped."""
    parsed = model.model_validate_json(payload)
    assert parsed.to_wire() == json.loads(payload)
    return parsed


@pytest.fixture(scope="module")
def kernel(kernel_for, built_docs, built_introspect):
    return kernel_for(built_docs.folder, built_introspect.folder)


@pytest.fixture(scope="module")
def client(kernel) -> Client:
    return Client(kernel)


def by_source(kernel, messages):
    names = {c.source_id: c.name for c in kernel.loaded()}
    return {names[m.source_id]: m for m in messages}


def test_both_capsules_build_from_a_clean_checkout(built_docs, built_introspect):
    for built in (built_docs, built_introspect):
        assert built.result.output == built.folder / f"{built.result.name}.wasm"
        assert built.result.output.stat().st_size > 1_000_000
        assert built.result.precompiled is not None and built.result.precompiled.exists()


def test_describe_replies_validate_exactly(kernel, client):
    replies = by_source(kernel, client.describe())
    assert set(replies) == {"docs", "introspect"}
    for name, message in replies.items():
        assert message.topic == f"resource.v1.response.describe.{name}"
        assert message.principal == ALICE
        exact(DescribeResponse, message.payload)


def test_introspect_lists_its_three_resources(kernel, client):
    described = exact(DescribeResponse, by_source(kernel, client.describe())["introspect"].payload)
    assert [r.uri for r in described.resources] == ["astrid://whoami", "astrid://capsules", "astrid://host"]
    assert all(r.mime_type == "application/json" for r in described.resources)


def test_docs_lists_pages_image_and_tour_with_full_fields(kernel, client):
    described = exact(DescribeResponse, by_source(kernel, client.describe())["docs"].payload)
    uris = {r.uri: r for r in described.resources}
    assert {"astrid://docs/index", "astrid://docs/resources", "astrid://docs/capsules"} <= set(uris)
    logo = uris["astrid://docs/logo.png"]
    assert logo.mime_type == "image/png" and logo.size and logo.title and logo.description
    assert logo.annotations.audience == ["user"] and logo.annotations.last_modified
    assert logo.icons[0].theme == "light" and logo.icons[0].sizes == ["16x16"]
    assert json.loads(logo.meta)["dev.astrid/kind"] == "image"
    page = uris["astrid://docs/index"]
    assert page.title == "astrid" and page.mime_type == "text/markdown" and page.size and page.icons


def test_whoami_is_the_verified_caller(kernel, client):
    for principal in (ALICE, BOB):
        reply = exact(ReadResponse, json.dumps(client.read("astrid://whoami", principal)))
        facts = json.loads(reply.contents[0].text)
        assert facts["principal"] == principal.name
        assert facts["attribution"] == "verified"
        assert facts["caller_source_id"] == client.participant.source_id


def test_capsules_lists_the_inventory_for_this_principal(kernel, client):
    reply = exact(ReadResponse, json.dumps(client.read("astrid://capsules", BOB)))
    assert reply.error is None
    inventory = json.loads(reply.contents[0].text)
    assert inventory["principal"] == "bob"
    assert {c["name"]: c["source_id"] for c in inventory["capsules"]} == {c.name: c.source_id for c in kernel.loaded()}
    for entry in inventory["capsules"]:
        CapsuleInfo.model_validate(entry)


def test_host_reports_versions_and_limits(kernel, client):
    reply = exact(ReadResponse, json.dumps(client.read("astrid://host")))
    facts = json.loads(reply.contents[0].text)
    assert facts["wasmtime_version"].startswith("50.")
    assert facts["limits"]["bytes_per_read"] == DEFAULT_LIMITS.bytes_per_read
    assert facts["sdk_version"]


def test_docs_pages_read_as_markdown(kernel, client):
    reply = exact(ReadResponse, json.dumps(client.read("astrid://docs/resources")))
    assert reply.contents[0].mime_type == "text/markdown"
    assert reply.contents[0].text.startswith("# The resource contract")


def test_logo_is_a_png_blob(kernel, client):
    reply = exact(ReadResponse, json.dumps(client.read("astrid://docs/logo.png")))
    (chunk,) = reply.contents
    assert chunk.type == "blob" and chunk.mime_type == "image/png"
    assert base64.b64decode(chunk.blob).startswith(b"\x89PNG\r\n\x1a\n")


def test_tour_reads_as_mixed_chunks(kernel, client):
    reply = exact(ReadResponse, json.dumps(client.read("astrid://docs/tour")))
    kinds = [c.type for c in reply.contents]
    assert kinds.count("text") >= 2 and kinds.count("blob") == 1
    assert "alice" in reply.contents[0].text
    assert {c.uri for c in reply.contents} >= {"astrid://docs/tour", "astrid://docs/logo.png", "astrid://docs/index"}


def test_unknown_page_and_traversal_stay_silent(kernel, client):
    for uri in ("astrid://docs/nope", "astrid://docs/..", "astrid://docs/a/b", "astrid://elsewhere"):
        assert client.read_raw(uri) == [], uri


def test_the_index_page_says_clients_may_subscribe(kernel, client):
    """Issue 36: the page said resources were pull-only, while subscriptions exist (docs/contract/subscriptions.md)."""
    reply = exact(ReadResponse, json.dumps(client.read("astrid://docs/index")))
    page = reply.contents[0].text
    assert "pull-only" not in page
    assert "subscribe" in page and "notifications/resources/updated" in page and "list_changed" in page
