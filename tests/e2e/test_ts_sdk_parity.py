"""The TypeScript SDK beside the Python one: families, a resource's size, async handlers and completers,
`ctx.updated`, through a real MCP client over stdio.

One componentize-js build of `tests/e2e/capsules/tsparity` (shared with tests/security/test_ts_visibility.py
through the build cache).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import anyio
import pytest
from mcp import types

from tests.e2e.builds import TEST_CAPSULES
from tests.support.capsules import build_clean
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def parity(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(TEST_CAPSULES / "tsparity", tmp_path_factory.mktemp("tsparity") / "parity").folder


async def test_a_family_is_listed_by_its_lister_and_read_by_key(parity: Path, capsule_home: Path, stderr_file: Path):
    async with stdio_session(parity, capsule_home=capsule_home, stderr=stderr_file, init_timeout_s=60) as served:
        with anyio.fail_after(120):
            listed = {r.uri: r for r in (await served.session.list_resources()).resources}
        assert listed["astrid://parity/notes/a"].name == "a"
        assert listed["astrid://parity/notes/a"].mime_type == "text/plain"
        member = listed["astrid://parity/notes/b"]
        assert (member.name, member.title, member.size) == ("b", "B", 3)
        assert listed["astrid://parity/sized"].size == 5
        # a template's lister lists URIs it serves; what is not a flat member or a match is dropped
        assert listed["astrid://parity/day/monday"].title == "Monday"
        assert not [uri for uri in listed if uri.endswith(("/not/flat", "/elsewhere"))]
        assert await served.text("astrid://parity/notes/a") == "note a for alice"
        assert await served.text("astrid://parity/notes/b") == "bee for alice"
        # NotFound is silence: the broker answers that nobody serves it, no handler error
        missing = await served.error("astrid://parity/notes/gone")
        assert missing.error.data["reason"] == "not_found" and "raised" not in missing.error.message, missing


async def test_async_handlers_settle_and_their_failures_name_the_line(
    parity: Path, capsule_home: Path, stderr_file: Path
):
    async with stdio_session(parity, capsule_home=capsule_home, stderr=stderr_file, init_timeout_s=60) as served:
        with anyio.fail_after(120):
            assert await served.text("astrid://parity/async") == "awaited for alice"
        assert await served.text("astrid://parity/later") == "after a timer"  # a setTimeout inside the read
        rejected = (await served.error("astrid://parity/rejects")).error.message
        assert "raised Error: async boom (app.ts:43)" in rejected, rejected
        never = (await served.error("astrid://parity/never")).error.message
        assert "returned a Promise still pending after 750 ms with no timer left to wait for (app.ts:45)" in never
        assert "trap" not in rejected + never
        # the instance kept serving (a trap would have discarded it: the log would say so)
        assert await served.text("astrid://parity/async") == "awaited for alice"
        assert "instance discarded" not in served.log()
        completed = await served.session.complete(
            types.ResourceTemplateReference(type="ref/resource", uri="astrid://parity/day/{day}"),
            argument={"name": "day", "value": "t"},
        )
        assert completed.completion.values == ["tuesday"]


def _updates(served, uri: str) -> int:
    return sum(isinstance(n, types.ResourceUpdatedNotification) and n.params.uri == uri for n in served.notifications)


async def test_ctx_updated_reaches_the_subscribed_client(parity: Path, capsule_home: Path, stderr_file: Path):
    hits = "astrid://parity/hits"
    async with stdio_session(parity, capsule_home=capsule_home, stderr=stderr_file, init_timeout_s=60) as served:
        with anyio.fail_after(120), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated (2026-07-28 listens)
            await served.session.subscribe_resource(hits)
        assert await served.text(hits) == "0"
        assert await served.text("astrid://parity/bump") == "1"
        with anyio.fail_after(10):
            while _updates(served, hits) == 0:
                await anyio.sleep(0.02)
        assert await served.text(hits) == "1"
        assert _updates(served, "astrid://parity/bump") == 0  # not subscribed
