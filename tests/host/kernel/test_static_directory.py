"""A broker beside the kernel takes the static describes from the kernel's directory, with no bus
message per capsule, and lists exactly what a broker hearing them on the bus lists.

Real components, built through the build cache (tests/support/capsules.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.broker.broker import Broker
from astrid.host.bus import Message, Principal
from astrid.host.contract.topics import BROKER, DESCRIBE_REPLIES, DESCRIBE_TOPIC, TEMPLATES_REPLIES
from astrid.host.kernel.kernel import Kernel
from tests.support.capsules import Built, build_clean

pytestmark = pytest.mark.slow

PRINCIPALS = [Principal.verified(name) for name in ("alice", "bob", "carol")]


@pytest.fixture(scope="module")
def built_files(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The bundled `files` capsule: its templates are static (a build-cache hit after the first build)."""
    return build_clean(CAPSULES_DIR / "files", tmp_path_factory.mktemp("files") / "files")


def start(kernel_factory, *folders: Path) -> Kernel:
    """A kernel on `folders` (closed after the test), every capsule loaded."""
    kernel = kernel_factory(list(folders))
    assert all(r.ok for r in kernel.load_report), kernel.load_report
    return kernel


def beside(kernel: Kernel) -> Broker:
    """A broker wired as the runtime wires it: the kernel's static replies without a bus message."""
    return Broker(kernel.bus, local_replies=kernel.static_directory).start()


def replies_heard(kernel: Kernel, pattern: str, during) -> set[str]:
    """The source-ids of the replies on `pattern` that crossed the bus while `during()` ran."""
    observer = BROKER.participant()
    with kernel.bus.subscribe(observer, pattern) as heard:
        during()
        got: list[Message] = heard.poll()
    return {message.source_id for message in got}


def test_a_broker_beside_the_kernel_lists_what_one_on_the_bus_lists_with_no_static_reply_message(
    kernel_factory, built_introspect: Built, built_templated: Built, built_probe: Built, built_docs: Built
):
    # introspect and templated describe statically; probe (`visible`) and docs (a lister) are called
    folders = (built_introspect.folder, built_templated.folder, built_probe.folder, built_docs.folder)
    kernel = start(kernel_factory, *folders)
    ids = {capsule.name: capsule.source_id for capsule in kernel.loaded()}
    direct, over_the_bus = beside(kernel), Broker(kernel.bus).start()
    for principal in PRINCIPALS:
        heard = replies_heard(kernel, DESCRIBE_REPLIES, lambda p=principal: direct.listings.snapshot(p))
        assert heard == {ids["probe"], ids["docs"]}  # the static ones crossed no bus
        took, listed = direct.listings.snapshot(principal), over_the_bus.listings.snapshot(principal)
        assert took.resources == listed.resources and took.resources
        assert took.owners == listed.owners
        assert {ids["introspect"], ids["templated"]} <= set(took.owners.values())
        templates = direct.listings.template_snapshot(principal), over_the_bus.listings.template_snapshot(principal)
        assert templates[0].templates == templates[1].templates and templates[0].owners == templates[1].owners
    assert direct.stats.describe_rounds == len(PRINCIPALS)
    assert kernel.sandboxes.health("introspect").calls == 0  # never called for a describe


def test_static_templates_are_taken_as_static_describes_are(kernel_factory, built_files: Built):
    kernel = start(kernel_factory, built_files.folder)
    [capsule] = kernel.loaded()
    assert kernel.static_directory.replies("templates")
    direct, over_the_bus = beside(kernel), Broker(kernel.bus).start()
    for principal in PRINCIPALS:
        heard = replies_heard(kernel, TEMPLATES_REPLIES, lambda p=principal: direct.listings.template_snapshot(p))
        assert heard == set()
        took, listed = direct.listings.template_snapshot(principal), over_the_bus.listings.template_snapshot(principal)
        assert took.templates == listed.templates and took.templates
        assert took.owners == listed.owners == {t.uri_template: capsule.source_id for t in took.templates}


def test_a_request_from_anyone_else_is_still_answered_on_the_bus(kernel_factory, built_introspect: Built):
    kernel = start(kernel_factory, built_introspect.folder)
    [capsule] = kernel.loaded()
    direct = beside(kernel)
    other = BROKER.participant()  # another host's broker, a test: not reading the directory

    def ask() -> None:
        assert kernel.bus.publish(other, DESCRIBE_TOPIC, "{}", PRINCIPALS[0]).wait(10)

    assert replies_heard(kernel, DESCRIBE_REPLIES, ask) == {capsule.source_id}
    direct.close()  # a closed broker's requests are answered on the bus again
    assert kernel.static_directory.answers_on_bus(
        Message(DESCRIBE_TOPIC, "{}", direct.participant.source_id, PRINCIPALS[0], "2026-01-01T00:00:00Z", 0)
    )


def test_nobody_but_a_verified_principal_gets_a_static_reply(kernel_factory, built_introspect: Built):
    kernel = start(kernel_factory, built_introspect.folder)
    direct = beside(kernel)
    for principal in (Principal.claimed("alice"), Principal.system(), Principal.verified("")):
        assert direct.listings.snapshot(principal).resources == ()
    assert direct.stats.describe_rounds == 3  # each round ran: the directory gave them nothing
    assert direct.listings.snapshot(PRINCIPALS[0]).resources


def test_the_directory_follows_the_capsule_set(
    kernel_factory, tmp_path: Path, built_introspect: Built, built_templated: Built
):
    introspect = Path(shutil.copytree(built_introspect.folder, tmp_path / "capsules" / "introspect"))
    shutil.copytree(built_templated.folder, tmp_path / "capsules" / "templated")
    kernel = start(kernel_factory, tmp_path / "capsules")
    ids = {capsule.name: capsule.source_id for capsule in kernel.loaded()}
    direct = beside(kernel)
    assert set(direct.listings.snapshot(PRINCIPALS[0]).owners.values()) == set(ids.values())
    shutil.rmtree(introspect)
    kernel.reload()
    assert [reply.source_id for reply in kernel.static_directory.replies("describe")] == [ids["templated"]]
    assert set(direct.listings.snapshot(PRINCIPALS[0], refresh=True).owners.values()) == {ids["templated"]}
