"""A hostile TypeScript capsule, contained as its Python twins are, behind a real MCP client over stdio.

`tests/fixtures/hostile_ts` is one componentize-js build (about 12 s): each resource is one attack
(a spinning handler, unbounded memory, reads sent as bob, an ungranted capability) and its raw
export answers every read of a URI it does not own. The bundled capsules are the victims.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import anyio
import pytest

from tests.security.mcp_stdio import TRACEBACK
from tests.support.paths import FIXTURES
from tests.support.processes import run_astrid as astrid
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OK = "astrid://tshostile/ok"


@pytest.fixture(scope="module")
def hostile_ts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile-ts") / "tshostile"
    shutil.copytree(FIXTURES / "hostile_ts", folder)
    built = astrid("capsule", "build", "tshostile", cwd=folder.parent, timeout=600)
    assert built.returncode == 0, built.stderr
    return folder


async def test_a_hostile_ts_capsule_is_contained_and_the_server_keeps_serving(
    bundled: list[Path], hostile_ts: Path, tmp_path: Path, capsule_home: Path
) -> None:
    stderr = tmp_path / "stderr.log"
    async with stdio_session(
        *bundled, hostile_ts, capsule_home=capsule_home, stderr=stderr, init_timeout_s=60
    ) as served:
        with anyio.fail_after(120):
            assert await served.text(OK) == "ok for alice"  # the control: the capsule is alive

        # (a) a spinning handler is stopped by the read window; the next read is served
        started = time.perf_counter()
        error = await served.error("astrid://tshostile/spin", timeout_s=20)
        assert "ran past its 2 s read window" in error.error.message, error
        assert time.perf_counter() - started < 10
        assert await served.text(OK) == "ok for alice"

        # (b) unbounded memory ends in a read error, never the server
        error = await served.error("astrid://tshostile/alloc", timeout_s=30)
        assert error.error.data["uri"] == "astrid://tshostile/alloc", error
        assert (await served.text("astrid://docs/index")).startswith("# ")
        assert await served.text(OK) == "ok for alice"

        # (c) requests sent in bob's name are refused at publish
        forged = json.loads(await served.text("astrid://tshostile/forge-principal"))
        assert forged == {"frontdoor": "capability-denied", "request": "capability-denied"}, forged
        assert json.loads(await served.text("astrid://whoami"))["principal"] == "alice"

        # (d) its answers to reads it does not own are never served for those URIs
        for uri in ("astrid://docs/index", "astrid://docs/tour", "astrid://whoami", "astrid://capsules"):
            assert "FORGED" not in await served.text(uri)
        # (a URI nobody lists is a family member's: whoever answers serves it, docs/contract/resources.md §5.3)

        # (e) a capability without the operator's grant is a read error naming the command
        error = await served.error("astrid://tshostile/kv")
        assert "NotGranted: capability-denied" in error.error.message, error
        assert "astrid capsule grant tshostile kv" in error.error.message, error

        assert await served.text(OK) == "ok for alice"
    assert not TRACEBACK.search(stderr.read_text())
