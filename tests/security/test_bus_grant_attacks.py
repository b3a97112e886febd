"""Capability laundering over the bus (issue 18 item 4): asking other capsules takes `bus:request`.

The finding: a capsule that asks for no capability declared, in its own
manifest, publish on `resource.v1.request.read` and subscribe on
`resource.v1.response.read.*`, then read `astrid://files/...` through the
`files` capsule's operator grant and handed back a user's private note.

Here the bundled `files` capsule serves a per-principal folder the operator
granted it, and a hostile capsule (the raw-binding build, `launder` mode)
with exactly the finding's declarations tries the same. Without the
operator's `bus:request` it gets nothing; with it, it reads, still only for
the principal it serves; a revoke applies to its next call, no restart. A
wide listener (`resource.v1.*`) never hears another capsule's reply without
the grant either.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.capabilities.grants import GrantStore
from tests.security.servers import InProcessServer, assert_bundled_serve
from tests.support.capsules import build_clean

pytestmark = pytest.mark.slow

ALICE_SECRET = "ALICE-PRIVATE-NOTE-7f3a"
BOB_SECRET = "BOB-PRIVATE-NOTE-91c2"
TARGET = "astrid://files/diary.md"
GRANT_LINE = "astrid capsule grant launder bus:request"

# The finding's declarations: it serves its own URIs, and asks the others for theirs.
FINDING_TOPICS = """[subscribe]
"resource.v1.request.describe" = { wit = "astrid-bus:resource@1.0.0", handler = "describe" }
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0", handler = "read" }
"resource.v1.response.read.*" = { wit = "astrid-bus:resource@1.0.0" }

[publish]
"resource.v1.response.describe.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.response.read.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0" }

"""


@pytest.fixture(scope="module")
def files_capsule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled `files` capsule, built (content-hash cached)."""
    return build_clean(CAPSULES_DIR / "files", tmp_path_factory.mktemp("files") / "files").folder


@pytest.fixture
def grants(tmp_path: Path) -> GrantStore:
    """The operator's grants: `files` reads one folder per principal, each holding a private note."""
    for name, secret in (("alice", ALICE_SECRET), ("bob", BOB_SECRET)):
        folder = tmp_path / "notes" / name
        folder.mkdir(parents=True)
        (folder / "diary.md").write_text(f"# Diary\n\n{secret}\n")
    store = GrantStore(tmp_path / "config" / "grants.json")
    store.grant("files", f"fs:files={tmp_path / 'notes'}/{{principal}}")
    return store


def with_finding_topics(folder: Path) -> Path:
    """Swap the hostile manifest's wide ACLs for the finding's exact declarations."""
    manifest = folder / "Capsule.toml"
    head, _, rest = manifest.read_text(encoding="utf-8").partition("[subscribe]")
    _, _, config = rest.partition("[config]")
    manifest.write_text(head + FINDING_TOPICS + "[config]" + config, encoding="utf-8")
    return folder


def launder(served: InProcessServer, principal: str) -> dict:
    """The attacker's report for one attempt, made as `principal`."""
    return json.loads(served.text("astrid://launder/launder", principal))


def refused(report: dict) -> bool:
    return report["publish"] == "CapabilityDenied" and report["got"] == []


def read_back(report: dict) -> str:
    """The text of the reply the attacker got (one reply, one text chunk)."""
    [payload] = report["got"]
    return "".join(chunk.get("text", "") for chunk in json.loads(payload)["contents"])


@pytest.mark.parametrize("pattern", ["resource.v1.response.read.*", "exact"])
def test_laundering_a_granted_file_through_the_files_capsule_takes_bus_request(
    serve, bundled, files_capsule, hostile_dir, grants, caplog, pattern
) -> None:
    attacker = with_finding_topics(hostile_dir("launder", "launder", target=TARGET, pattern=pattern))
    with caplog.at_level(logging.WARNING, logger="astrid.host.kernel.kernel"):
        served = serve(*bundled, files_capsule, attacker, grants_file=grants.path)
    # The control: files serves alice's note to alice through the front door.
    assert ALICE_SECRET in served.text(TARGET, "alice")

    # No grant: the request is not published and the reply subscription is refused.
    report = launder(served, "alice")
    assert ALICE_SECRET not in json.dumps(report), "laundered through the files capsule's grant"
    assert refused(report) and report["subscribe"] == "CapabilityDenied", report
    # The load log said so: the capsule, what is refused and the command.
    [line] = [r.getMessage() for r in caplog.records if "capsule launder" in r.getMessage()]
    assert "publish resource.v1.request.read" in line and "resource.v1.response.read.*" in line
    assert GRANT_LINE in line

    # The operator grants it: the very next call asks files, as the principal it serves.
    grants.grant("launder", "bus:request")
    report = launder(served, "alice")
    assert report["publish"] == "ok" and report["subscribe"] == "ok", report
    assert ALICE_SECRET in read_back(report)
    bob = launder(served, "bob")  # per principal still: bob's instance reads bob's note, never alice's
    assert BOB_SECRET in read_back(bob) and ALICE_SECRET not in json.dumps(bob)

    # Revoked: refused again from the next call, without a restart.
    assert grants.revoke("launder", "bus:request")
    report = launder(served, "alice")
    assert refused(report) and report["subscribe"] == "CapabilityDenied", report
    # The bundled capsules never needed the grant (introspect asks the kernel's inventory).
    assert_bundled_serve(served)


def test_a_wide_manifest_gets_no_request_and_no_reply_without_the_grant(
    serve, files_capsule, hostile_dir, grants
) -> None:
    # The stock hostile manifest: `resource.v1.*` both ways. Its wide subscription is let
    # through (a pattern cannot tell its own traffic from replies), its replies are not.
    attacker = hostile_dir("launder", "launder", target=TARGET, pattern="resource.v1.*")
    served = serve(files_capsule, attacker, grants_file=grants.path)
    report = launder(served, "alice")
    assert report["subscribe"] == "ok" and refused(report), report
    grants.grant("launder", "bus:request")
    assert ALICE_SECRET in read_back(launder(served, "alice"))


def snooped_while_alice_reads(served: InProcessServer) -> list:
    """What a `resource.v1.*` listener of alice's hears while alice reads her note through the front door."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(seen=json.loads(served.text("astrid://snoop/snoop"))))
    thread.start()
    deadline = time.monotonic() + 10
    while thread.is_alive() and time.monotonic() < deadline:
        if any(s.owner.name == "snoop" for s in list(served.kernel.bus._subscriptions)):
            break
        time.sleep(0.002)  # bounded wait for the snooper's subscription
    assert ALICE_SECRET in served.text(TARGET, "alice")
    thread.join(10)
    assert not thread.is_alive()
    return result["seen"]


def test_a_wide_listener_never_hears_another_capsules_reply_without_the_grant(
    serve, files_capsule, hostile_dir, grants
) -> None:
    served = serve(files_capsule, hostile_dir("snoop", "snoop", ms=1000), grants_file=grants.path)
    seen = snooped_while_alice_reads(served)
    topics = [topic for topic, *_ in seen]
    assert "resource.v1.request.read" in topics  # it does hear the requests (it could serve them) ...
    assert not any(".response." in topic for topic in topics)  # ... but no reply
    assert ALICE_SECRET not in json.dumps(seen)
    grants.grant("snoop", "bus:request")
    seen = snooped_while_alice_reads(served)
    assert ALICE_SECRET in json.dumps(seen)  # the grant is what it took
    assert {(kind, name) for _, kind, name, _ in seen} == {("verified", "alice")}
