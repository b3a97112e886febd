"""Faults under a serving `astrid mcp serve`: capsule folders vanish or rot, caches break, the home is gone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest

from astrid.host.kernel.compile_cache import CompileCache
from tests.security.hostile import make_hostile
from tests.security.mcp_stdio import TRACEBACK, mcp_session
from tests.security.servers import assert_bundled_serve
from tests.support.capsules import BUNDLED_URIS
from tests.support.processes import server_env

pytestmark = pytest.mark.slow
RELOAD_WAIT_S = 20  # the folders are polled about once a second and a change must settle


def copy_capsule(source: Path, parent: Path) -> Path:
    target = parent / source.name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


async def wait_changed(served) -> None:
    with anyio.fail_after(RELOAD_WAIT_S):
        await served.changed.wait()
    served.rearm()


async def settled(served, predicate) -> set[str]:
    """The listed URIs once `predicate` holds (bounded): a late notification of
    the previous change may have woken `wait_changed` before this one landed."""
    with anyio.fail_after(RELOAD_WAIT_S):
        while True:
            uris = set(await served.uris())
            if predicate(uris):
                return uris
            await anyio.sleep(0.1)


@pytest.mark.anyio
async def test_capsules_that_vanish_or_rot_while_serving_leave_the_rest_serving(bundled, hostile_wasm, tmp_path):
    root = tmp_path / "capsules"
    root.mkdir()
    for folder in bundled:
        copy_capsule(folder, root)
    doomed = make_hostile(root, "doomed", "honest", hostile_wasm)
    rotten = make_hostile(root, "rotten", "honest", hostile_wasm)
    home = tmp_path / "home"
    home.mkdir()
    async with mcp_session(root, home=home, stderr_path=tmp_path / "stderr.log") as served:
        assert {"astrid://doomed/ok", "astrid://rotten/ok"} | BUNDLED_URIS <= set(await served.uris())
        with anyio.fail_after(30):  # the folder watcher has its baseline once this is logged
            while "watching the capsule folders" not in served.log():
                await anyio.sleep(0.05)

        # 1. a capsule folder is deleted
        shutil.rmtree(doomed)
        await wait_changed(served)
        uris = await settled(served, lambda uris: "astrid://doomed/ok" not in uris)
        assert "astrid://doomed/ok" not in uris and BUNDLED_URIS | {"astrid://rotten/ok"} <= uris
        assert (await served.error("astrid://doomed/ok")).code == -32002
        assert (await served.text("astrid://docs/index")).startswith("# ")

        # 2. a component is replaced by garbage
        (rotten / "hostile.wasm").write_bytes(os.urandom(64 * 1024))
        await wait_changed(served)
        uris = await settled(served, lambda uris: "astrid://rotten/ok" not in uris)
        assert not [u for u in uris if u.startswith("astrid://rotten/")] and uris >= BUNDLED_URIS
        assert (await served.text("astrid://docs/index")).startswith("# ")

        # 3. a bundled component is truncated mid-file (a copy interrupted)
        wasm = root / "introspect" / "introspect.wasm"
        wasm.write_bytes(wasm.read_bytes()[: wasm.stat().st_size // 2])
        await wait_changed(served)
        uris = await settled(served, lambda uris: "astrid://whoami" not in uris)
        assert "astrid://whoami" not in uris and "astrid://docs/index" in uris
        assert await served.text("astrid://docs/tour")

        # 4. the rotten capsule is repaired: it comes back
        shutil.copy(hostile_wasm, rotten / "hostile.wasm")
        await wait_changed(served)
        await settled(served, lambda uris: "astrid://rotten/ok" in uris)
        assert await served.text("astrid://rotten/ok") == "hostile ok for alice"
    log = served.log()
    assert "rotten" in log and "introspect" in log  # the load errors were reported
    assert not TRACEBACK.search(log), log


def _docs_entry(bundled: list[Path], cache_dir: Path) -> Path:
    cache = CompileCache(cache_dir)
    return cache.entry_for(bundled[0] / "docs.wasm")


@pytest.mark.anyio
async def test_a_corrupt_compile_cache_entry_is_recompiled(bundled, tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    entry = _docs_entry(bundled, cache_dir)
    entry.write_bytes(b"\x7fELF" + os.urandom(8192))  # garbage where the compiled docs should be
    home = tmp_path / "home"
    home.mkdir()
    env = server_env(home, ASTRID_CACHE_DIR=str(cache_dir))
    async with mcp_session(bundled[0], home=home, stderr_path=tmp_path / "stderr.log", env=env) as served:
        with anyio.fail_after(90):  # a recompile of a Python capsule: about 5-10 s
            assert (await served.text("astrid://docs/index")).startswith("# ")
    assert entry.stat().st_size > 1 << 20  # rewritten with a real compiled component
    log = served.log()
    assert "recompiling" in log and not TRACEBACK.search(log), log


def test_a_tampered_compile_cache_entry_is_never_run(serve, bundled, tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    source = _docs_entry(bundled, Path(os.environ["ASTRID_CACHE_DIR"]))
    assert source.exists()  # built by `bundled`
    data = source.read_bytes()
    needle = b"astrid runs sandboxed WebAssembly"
    assert data.count(needle) == 1
    entry = _docs_entry(bundled, cache_dir)
    entry.write_bytes(data.replace(needle, b"TAMPER runs sandboxed WebAssembly"))
    from astrid.host.runtime import Runtime, RuntimeConfig

    runtime = Runtime(RuntimeConfig(capsule_paths=[bundled[0]], principal="alice", cache_dir=cache_dir))
    try:
        runtime.start(background=False)
        reply = runtime.read_resource("astrid://docs/index")
        text = "".join(getattr(c, "text", "") for c in reply.contents)
        assert "TAMPER" not in text and text.startswith("# ")
    finally:
        runtime.close()


@pytest.mark.anyio
async def test_an_unwritable_compile_cache_still_serves(bundled, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    home = tmp_path / "home"
    home.mkdir()
    env = server_env(home, ASTRID_CACHE_DIR=str(blocker / "components"))
    async with mcp_session(bundled[1], home=home, stderr_path=tmp_path / "stderr.log", env=env) as served:
        with anyio.fail_after(90):  # compiled in memory
            who = await served.text("astrid://whoami")
        assert '"alice"' in who
        assert set(await served.uris()) >= {"astrid://whoami", "astrid://capsules", "astrid://host"}
    log = served.log()
    assert "compile cache" in log and not TRACEBACK.search(log), log


@pytest.mark.anyio
@pytest.mark.parametrize("home_kind", ["missing", "a-file", "broken-capsules"])
async def test_a_missing_or_broken_capsule_home_is_not_fatal(bundled, hostile_wasm, tmp_path, home_kind):
    home = tmp_path / "home"
    if home_kind == "a-file":
        home.write_text("not a folder")
    elif home_kind == "broken-capsules":
        home.mkdir()
        (home / "bad-toml").mkdir()
        (home / "bad-toml" / "Capsule.toml").write_text("[package\nname = ")
        (home / "no-wasm").mkdir()
        (home / "no-wasm" / "Capsule.toml").write_text(
            (bundled[0] / "Capsule.toml").read_text().replace('"docs"', '"no-wasm"')
        )
        make_hostile(home, "fine", "honest", hostile_wasm)
    async with mcp_session(*bundled, home=home, stderr_path=tmp_path / "stderr.log") as served:
        uris = set(await served.uris())
        assert uris >= BUNDLED_URIS
        assert (await served.text("astrid://docs/index")).startswith("# ")
        if home_kind == "broken-capsules":
            assert await served.text("astrid://fine/ok") == "hostile ok for alice"
        await served.said("ready in")  # the banner, with the capsules not loaded, before the client leaves
    log = served.log()
    assert not TRACEBACK.search(log), log
    if home_kind == "broken-capsules":
        assert "bad-toml" in log and "no-wasm" in log


@pytest.mark.anyio
async def test_no_capsules_at_all_is_an_empty_server_not_a_crash(tmp_path):
    home = tmp_path / "nowhere"
    async with mcp_session(home=home, stderr_path=tmp_path / "stderr.log") as served:
        assert await served.uris() == []
        assert (await served.error("astrid://docs/index")).code == -32002
    assert not TRACEBACK.search(served.log())


def test_a_capsule_folder_deleted_under_a_runtime_between_reloads(serve, bundled, hostile_wasm, tmp_path):
    """The same fault without the watcher: an explicit reload after the folder is gone."""
    root = tmp_path / "capsules"
    root.mkdir()
    for folder in bundled:
        copy_capsule(folder, root)
    gone = make_hostile(root, "gone", "honest", hostile_wasm)
    served = serve(root)
    assert "astrid://gone/ok" in served.uris()
    shutil.rmtree(gone)
    served.runtime.reload()
    assert "astrid://gone/ok" not in served.uris()
    assert_bundled_serve(served)
