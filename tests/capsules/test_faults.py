"""A handler that raises, returns the wrong type or too much yields a read error; the capsule keeps serving."""

from __future__ import annotations

import shutil

import pytest

from astrid.host.bus import Principal
from astrid.host.contract import DescribeResponse, ReadResponse
from astrid.host.kernel.abi import HostAbi
from tests.support.busclient import ALICE, BOB, Client

pytestmark = pytest.mark.slow
BASE = "astrid://faulty/"


@pytest.fixture(scope="module")
def kernel(kernel_for, built_faulty):
    return kernel_for(built_faulty.folder)


@pytest.fixture(scope="module")
def client(kernel) -> Client:
    return Client(kernel)


def read_error(client: Client, uri: str) -> str:
    reply = client.read(uri)
    parsed = ReadResponse.model_validate(reply)
    assert parsed.to_wire() == reply
    assert not parsed.contents and parsed.error, reply
    assert parsed.uri == uri
    return parsed.error


def test_a_working_resource_reads_config(client):
    reply = ReadResponse.model_validate(client.read(BASE + "ok"))
    assert reply.contents[0].text == "Ahoy, alice; answer=42; missing=None"
    assert reply.contents[0].mime_type == "text/plain"


def test_config_is_asked_once_per_sandbox_and_a_changed_manifest_is_seen(
    kernel_for, built_faulty, tmp_path, monkeypatch
):
    # The SDK keeps what get-config answered: a sandbox's config cannot change while it lives
    # (a changed Capsule.toml replaces the capsule and its sandboxes).
    asked: list[str] = []
    stock = HostAbi._get_config

    def counted(self, store, key):
        asked.append(key)
        return stock(self, store, key)

    monkeypatch.setattr(HostAbi, "_get_config", counted)  # before the kernel binds its imports
    folder = tmp_path / "faulty"
    shutil.copytree(built_faulty.folder, folder)
    kernel = kernel_for(folder)
    client = Client(kernel)
    for _ in range(3):
        assert ReadResponse.model_validate(client.read(BASE + "ok")).contents[0].text.startswith("Ahoy, alice;")
    assert sorted(asked) == ["answer", "greeting", "missing"]  # the first read asked, once per key
    ReadResponse.model_validate(client.read(BASE + "ok", BOB))
    assert len(asked) == 6  # bob's own sandbox asks for itself

    manifest = folder / "Capsule.toml"
    manifest.write_text(manifest.read_text().replace('greeting = "Ahoy"', 'greeting = "Hello"'))
    kernel.reload()
    reply = ReadResponse.model_validate(client.read(BASE + "ok"))
    assert reply.contents[0].text == "Hello, alice; answer=42; missing=None"


@pytest.mark.parametrize(
    ("path", "cause"),
    [
        ("raises", "RuntimeError: kaboom"),
        ("wrong-type", "returned int"),
        ("returns-none", "returned NoneType"),
        ("huge", "2097152 bytes"),
        ("huge-blob", "716801 bytes"),
        ("many-chunks", "65 chunks"),
        ("bad-meta", "meta must be a JSON object"),
        ("bad-item", "item 1 of the returned list is float"),
    ],
)
def test_a_fault_is_a_read_error_naming_the_cause_and_serving_goes_on(kernel, client, path, cause):
    discarded = kernel.sandboxes.stats.instances_discarded
    error = read_error(client, BASE + path)
    assert cause in error
    # no trap: the host saw a normal call and kept the instance
    assert kernel.sandboxes.health("faulty").failures == 0
    assert kernel.sandboxes.stats.instances_discarded == discarded
    # the same instance keeps serving other URIs
    assert ReadResponse.model_validate(client.read(BASE + "ok")).contents[0].text.startswith("Ahoy")


def test_the_error_points_at_the_handler(client):
    error = read_error(client, BASE + "raises")
    assert "handler raises raised" in error and "app.py:" in error


def test_content_just_under_the_limits_is_served(client):
    reply = ReadResponse.model_validate(client.read(BASE + "near-limit"))
    assert reply.error is None
    assert sum(c.raw_size() for c in reply.contents) == 700 * 1024


def test_unverified_principals_fail_closed(kernel, client):
    for principal in (Principal.claimed("alice"), Principal.system()):
        assert client.describe(principal) == []
        error = read_error_for(client, BASE + "ok", principal)
        assert error == "principal not verified"


def read_error_for(client: Client, uri: str, principal: Principal) -> str:
    (message,) = client.read_raw(uri, principal)
    reply = ReadResponse.model_validate_json(message.payload)
    assert not reply.contents
    assert reply.error is not None
    return reply.error


def test_describe_is_per_principal_and_drops_bad_family_members(client):
    def uris(principal):
        (message,) = client.describe(principal)
        return [r.uri for r in DescribeResponse.model_validate_json(message.payload).resources]

    alice, bob = uris(ALICE), uris(BOB)
    assert BASE + "alice-only" in alice and BASE + "alice-only" not in bob
    assert [u for u in alice if "/items/" in u] == [BASE + "items/a", BASE + "items/b", BASE + "items/dot.ted"]


def test_hidden_resources_are_not_served_to_others(client):
    assert client.read_raw(BASE + "alice-only", BOB) == []
    assert ReadResponse.model_validate(client.read(BASE + "alice-only", ALICE)).contents[0].text == "for alice"


def test_family_members_and_non_members(client):
    assert ReadResponse.model_validate(client.read(BASE + "items/b", BOB)).contents[0].text == "item b for bob"
    for uri in (BASE + "items/zzz", BASE + "items/..", BASE + "items/%2e%2e", BASE + "items/a/b", BASE + "items/"):
        assert client.read_raw(uri) == [], uri


def test_requests_without_a_clean_correlation_id_are_ignored(client):
    assert client.read_raw(BASE + "ok", correlation_id="Not.Clean") == []
    assert client.read_raw(BASE + "ok", correlation_id="UPPER") == []
