"""Static describes taken without a bus message are still checked as a capsule's reply.

A broker beside the kernel reads the static replies from the kernel's
directory. These are the attacks that would pass if that path trusted them:
a capsule squatting a URI namespace another publisher owns, and a principal
that is not verified getting a listing. Real kernel, real components.
"""

from __future__ import annotations

import logging

import pytest

from astrid.host.broker.broker import Broker
from astrid.host.bus import Principal
from astrid.host.kernel.kernel import Kernel, KernelConfig
from tests.support.capsules import Built

pytestmark = pytest.mark.slow

ALICE = Principal.verified("alice")
OWNED = "astrid://host"  # one of the URIs introspect lists, owned here by another publisher


class OwnedElsewhere:
    """`astrid://host...` belongs to a publisher none of the loaded capsules is."""

    def may_serve(self, source_id: str, uri: str) -> bool:
        return not uri.startswith(OWNED)

    def may_cover(self, source_id: str, prefix: str) -> bool:
        return not (prefix.startswith(OWNED) or OWNED.startswith(prefix))


@pytest.fixture
def kernel(built_introspect: Built):
    kernel = Kernel(KernelConfig(capsule_paths=[built_introspect.folder]))
    assert all(r.ok for r in kernel.start())
    yield kernel
    kernel.close()


def test_a_static_capsule_squatting_an_owned_namespace_is_dropped_without_a_bus_message(kernel, caplog):
    assert kernel.static_directory.replies("describe")  # introspect's describe is static
    broker = Broker(kernel.bus, authority=OwnedElsewhere(), local_replies=kernel.static_directory).start()
    with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
        listed = [r.uri for r in broker.listings.snapshot(ALICE).resources]
        again = [r.uri for r in broker.listings.snapshot(Principal.verified("bob")).resources]
    assert listed and OWNED not in listed and listed == again
    dropped = [r.getMessage() for r in caplog.records if "outside the URI namespaces" in r.getMessage()]
    assert len(dropped) == 2 and "(alice)" in dropped[0] and "(bob)" in dropped[1]  # every round


def test_a_principal_that_is_not_verified_lists_nothing(kernel):
    broker = Broker(kernel.bus, local_replies=kernel.static_directory).start()
    for claimed in (Principal.claimed("alice"), Principal.system(), Principal.verified("")):
        assert broker.listings.snapshot(claimed).resources == ()
        assert broker.listings.template_snapshot(claimed).templates == ()
    assert broker.listings.snapshot(ALICE).resources
