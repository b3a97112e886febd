"""`astrid mcp serve` through a real MCP client over stdio, against real capsules."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import time
import warnings
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client

from astrid.host.capsule.provenance import source_id_for
from tests.e2e.builds import build, write_variant
from tests.support.capsules import BUNDLED
from tests.support.processes import astrid_exe, serve_args, server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

READ_WINDOW_S = 2.5


def source_id(folder: Path) -> str:
    name = folder.name if not folder.name.startswith("mutable") else "mutable"
    wasm = folder / f"{name}.wasm"
    return source_id_for(name, hashlib.sha256(wasm.read_bytes()).hexdigest())


async def wait_until(predicate, timeout: float = 30.0) -> None:
    """A bounded wait on a condition the server brings about (never a bare sleep)."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)


def list_changed(served) -> int:
    return sum(isinstance(n, types.ResourceListChangedNotification) for n in served.notifications)


def bundled(capsules) -> list[Path]:
    return [capsules[name] for name in BUNDLED]


# -- handshake, list, read ----------------------------------------------------------------------


async def test_initialize_answers_at_once_with_the_resource_capability(capsules, capsule_home, stderr_file):
    started = time.perf_counter()
    async with stdio_session(
        *bundled(capsules), principal="alice", capsule_home=capsule_home, stderr=stderr_file
    ) as served:
        elapsed = time.perf_counter() - started
        init = served.init
        assert init.protocol_version == "2025-11-25"
        assert init.server_info.name == "astrid"
        resources = init.capabilities.resources
        assert resources is not None and resources.list_changed is True
        assert resources.subscribe is True  # resource subscriptions (docs/contract/subscriptions.md §11)
        assert init.capabilities.tools is None and init.capabilities.prompts is None
        with anyio.fail_after(30), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK marks subscribe deprecated
            await served.session.subscribe_resource("astrid://docs/index")
        with anyio.fail_after(30), pytest.raises(MCPError) as caught, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await served.session.subscribe_resource("astrid://docs/no-such-page")
        assert caught.value.code == -32002  # as a read of it: resource not found
        with anyio.fail_after(30):
            templates = await served.session.list_resource_templates()
        assert templates.resource_templates == []
        # on stderr: what is served and how to connect a client
        await wait_until(lambda: "astrid mcp config" in served.log())
    print(f"\nspawn + initialize: {elapsed * 1000:.0f} ms")
    log = served.log()
    assert "principal 'alice'" in log and "2 capsules (docs, introspect)" in log


async def test_list_offers_every_bundled_resource_with_all_its_fields(capsules, capsule_home, stderr_file):
    expected = json.loads(
        subprocess.run(
            [
                astrid_exe(),
                "resources",
                "list",
                "--json",
                "--principal",
                "alice",
                *sum((["--capsules", str(p)] for p in bundled(capsules)), []),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=server_env(capsule_home),
            check=True,
        ).stdout
    )
    assert {"astrid://docs/index", "astrid://docs/logo.png", "astrid://docs/tour", "astrid://whoami"} <= {
        r["uri"] for r in expected
    }
    async with stdio_session(
        *bundled(capsules), principal="alice", capsule_home=capsule_home, stderr=stderr_file
    ) as served:
        with anyio.fail_after(30):
            started = time.perf_counter()
            listed = await served.session.list_resources()
            first = time.perf_counter() - started
            started = time.perf_counter()
            await served.session.list_resources()
            second = time.perf_counter() - started
    print(f"\nresources/list: first {first * 1000:.1f} ms, cached {second * 1000:.1f} ms")
    assert listed.next_cursor is None
    got = [r.model_dump(by_alias=True, mode="json", exclude_none=True) for r in listed.resources]
    assert [r["uri"] for r in got] == [r["uri"] for r in expected]
    for wire, record in zip(got, expected, strict=True):
        assert wire["name"] == record["name"]
        for ours, theirs in (
            ("title", "title"),
            ("description", "description"),
            ("mimeType", "mime_type"),
            ("size", "size"),
        ):
            assert wire.get(ours) == record.get(theirs), (record["uri"], ours)
        if "annotations" in record:
            a = record["annotations"]
            assert wire["annotations"].get("audience") == (a.get("audience") or None)
            assert wire["annotations"].get("priority") == pytest.approx(a.get("priority")) if "priority" in a else True
            assert wire["annotations"].get("lastModified") == a.get("last_modified")
        if record.get("icons"):
            assert [i["src"] for i in wire["icons"]] == [i["src"] for i in record["icons"]]
        if "meta" in record:
            meta = {
                k: v
                for k, v in json.loads(record["meta"]).items()
                if k.split("/")[0].split(".")[1:2] not in (["mcp"], ["modelcontextprotocol"])
            }
            assert wire.get("_meta") == (meta or None)


async def test_read_text_blob_and_multi_chunk(capsules, capsule_home, stderr_file):
    async with stdio_session(
        *bundled(capsules), principal="alice", capsule_home=capsule_home, stderr=stderr_file
    ) as served:
        timings = {}
        with anyio.fail_after(30):
            for uri in ("astrid://docs/index", "astrid://docs/logo.png", "astrid://docs/tour", "astrid://whoami"):
                started = time.perf_counter()
                result = await served.session.read_resource(uri)
                timings[uri] = (time.perf_counter() - started) * 1000
                if uri == "astrid://docs/index":
                    [page] = result.contents
                    assert isinstance(page, types.TextResourceContents)
                    assert page.mime_type == "text/markdown" and page.text.startswith("# ")
                elif uri == "astrid://docs/logo.png":
                    [logo] = result.contents
                    assert isinstance(logo, types.BlobResourceContents) and logo.mime_type == "image/png"
                    assert base64.b64decode(logo.blob).startswith(b"\x89PNG\r\n\x1a\n")
                elif uri == "astrid://docs/tour":
                    kinds = {type(c) for c in result.contents}
                    assert len(result.contents) > 1
                    assert kinds == {types.TextResourceContents, types.BlobResourceContents}
                    assert "alice" in result.contents[0].text
                else:
                    who = json.loads(result.contents[0].text)
                    assert who["principal"] == "alice" and who["attribution"] == "verified"
    print("\nresources/read: " + ", ".join(f"{u} {ms:.1f} ms" for u, ms in timings.items()))


async def test_unknown_uri_is_minus_32002_on_2025_11_25(capsules, capsule_home, stderr_file):
    async with stdio_session(
        *bundled(capsules), principal="alice", capsule_home=capsule_home, stderr=stderr_file
    ) as served:
        with anyio.fail_after(30), pytest.raises(MCPError) as caught:
            started = time.perf_counter()
            await served.session.read_resource("astrid://nowhere/at-all")
        elapsed = time.perf_counter() - started
    assert caught.value.code == -32002
    assert caught.value.data["uri"] == "astrid://nowhere/at-all"
    assert elapsed < READ_WINDOW_S, "not found must end when every capsule finished, not at the window"
    print(f"\nnot found (-32002): {elapsed * 1000:.1f} ms")


async def test_unknown_uri_is_minus_32602_on_2026_07_28(capsules, capsule_home, stderr_file):
    args = serve_args(*bundled(capsules), principal="alice")
    params = StdioServerParameters(command=astrid_exe(), args=args, env=server_env(capsule_home))
    with stderr_file.open("w") as errlog, anyio.fail_after(120):
        async with Client(stdio_client(params, errlog=errlog), mode="2026-07-28") as client:
            assert client.protocol_version == "2026-07-28"
            with anyio.fail_after(30):
                listed = await client.list_resources()
                assert any(r.uri == "astrid://docs/index" for r in listed.resources)
                page = await client.read_resource("astrid://docs/index")
                assert page.contents[0].text.startswith("# ")
            with anyio.fail_after(30), pytest.raises(MCPError) as caught:
                await client.read_resource("astrid://nowhere/at-all")
    assert caught.value.code == -32602
    assert caught.value.data["uri"] == "astrid://nowhere/at-all"


# -- faults ---------------------------------------------------------------------------------------


async def test_a_hanging_capsule_is_minus_32603_within_the_window_and_the_server_keeps_serving(
    capsules, capsule_home, stderr_file
):
    folders = (*bundled(capsules), capsules["probe"])
    async with stdio_session(*folders, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as served:
        session = served.session
        with anyio.fail_after(30):
            await session.list_resources()
        outcome: dict = {}

        async def hang() -> None:
            started = time.perf_counter()
            try:
                await session.read_resource("astrid://probe/forever")
            except MCPError as exc:
                outcome["error"] = exc
            outcome["elapsed"] = time.perf_counter() - started

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(hang)
                # meanwhile, other reads are served
                started = time.perf_counter()
                page = await session.read_resource("astrid://docs/index")
                during = time.perf_counter() - started
                assert page.contents[0].text.startswith("# ")
        assert outcome["error"].code == -32603
        assert outcome["error"].data["uri"] == "astrid://probe/forever"
        assert outcome["elapsed"] < READ_WINDOW_S + 0.5
        assert during < 1.0
        with anyio.fail_after(30):
            note = await session.read_resource("astrid://probe/note")
        assert note.contents[0].text == "the private note of alice"
    print(
        f"\nhanging capsule: -32603 after {outcome['elapsed'] * 1000:.0f} ms; "
        f"a read meanwhile took {during * 1000:.1f} ms"
    )


async def test_two_capsules_claiming_one_uri_first_source_id_wins_every_time(capsules, capsule_home, tmp_path):
    a, b = capsules["clash-a"], capsules["clash-b"]
    winner = min((source_id(a), "clash-a"), (source_id(b), "clash-b"))
    loser = max((source_id(a), "clash-a"), (source_id(b), "clash-b"))
    for round_no, order in enumerate(((a, b), (b, a), (a, b))):
        stderr = tmp_path / f"stderr-{round_no}.log"
        async with stdio_session(*order, principal="alice", capsule_home=capsule_home, stderr=stderr) as served:
            with anyio.fail_after(30):
                listed = await served.session.list_resources()
                read = await served.session.read_resource("astrid://clash/shared")
        by_uri = {r.uri: r for r in listed.resources}
        assert set(by_uri) == {"astrid://clash/shared", "astrid://clash/only-a", "astrid://clash/only-b"}
        assert by_uri["astrid://clash/shared"].name == f"shared-from-{winner[1]}"
        assert read.contents[0].text == f"served by {winner[1]}"
        audit = [line for line in served.log().splitlines() if "collision" in line]
        assert audit, served.log()
        for needle in ("astrid://clash/shared", f"winner={winner[1]} loser={loser[1]}", "alice"):
            assert needle in audit[0]
        assert winner[0] not in audit[0] and loser[0] not in audit[0]  # by name; source-ids only with -v


# -- principals ----------------------------------------------------------------------------------


async def test_alice_and_bob_each_see_only_their_own(capsules, capsule_home, tmp_path):
    folders = (capsules["introspect"], capsules["probe"])
    async with stdio_session(
        *folders, principal="alice", capsule_home=capsule_home, stderr=tmp_path / "a.log"
    ) as alice:
        async with stdio_session(
            *folders, principal="bob", capsule_home=capsule_home, stderr=tmp_path / "b.log"
        ) as bob:
            with anyio.fail_after(60):
                for _ in range(2):  # interleaved, twice: caches never cross
                    a_list = {r.uri for r in (await alice.session.list_resources()).resources}
                    b_list = {r.uri for r in (await bob.session.list_resources()).resources}
                    a_note = (await alice.session.read_resource("astrid://probe/note")).contents[0].text
                    b_note = (await bob.session.read_resource("astrid://probe/note")).contents[0].text
                    a_who = json.loads((await alice.session.read_resource("astrid://whoami")).contents[0].text)
                    b_who = json.loads((await bob.session.read_resource("astrid://whoami")).contents[0].text)
                    assert "astrid://probe/alice-only" in a_list
                    assert "astrid://probe/alice-only" not in b_list
                    assert a_note == "the private note of alice" and b_note == "the private note of bob"
                    assert a_who["principal"] == "alice" and b_who["principal"] == "bob"
                    with pytest.raises(MCPError) as caught:
                        await bob.session.read_resource("astrid://probe/alice-only")
                    assert caught.value.code == -32002


# -- hot reload and list_changed ---------------------------------------------------------------


async def test_rebuilding_a_capsule_notifies_once_when_its_uris_change_and_never_otherwise(
    capsules, capsule_home, tmp_path, stderr_file
):
    live = tmp_path / "live"
    folder = live / "mutable"
    shutil.copytree(capsules["mutable-v1"], folder)

    async def rebuild(variant: str) -> None:
        write_variant(folder, variant)
        await anyio.to_thread.run_sync(build, folder)  # a build-cache hit: the variants were built before

    async with stdio_session(live, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as served:
        session = served.session

        async def uris() -> list[str]:
            return [r.uri for r in (await session.list_resources()).resources]

        with anyio.fail_after(30):
            assert await uris() == ["astrid://mutable/one"]
        # let the server finish its start-up (the watcher and its baseline)
        await wait_until(lambda: "watching the capsule folders" in served.log())

        # a new uri: exactly one list_changed
        started = time.perf_counter()
        await rebuild("v2")
        await wait_until(lambda: list_changed(served) == 1)
        print(f"\nrebuild -> list_changed after {time.perf_counter() - started:.2f} s")
        with anyio.fail_after(30):
            assert await uris() == ["astrid://mutable/one", "astrid://mutable/two"]

        # new contents, same uris: the capsule is reloaded, but no notification
        await rebuild("v3")

        async def body() -> str:
            return (await session.read_resource("astrid://mutable/two")).contents[0].text

        with anyio.fail_after(30):
            while not (await body()).startswith("version 3"):
                await anyio.sleep(0.1)

        # and back to one uri: the second notification, and no other in between
        await rebuild("v1")
        await wait_until(lambda: list_changed(served) == 2)
        with anyio.fail_after(30):
            assert await uris() == ["astrid://mutable/one"]
        assert list_changed(served) == 2
