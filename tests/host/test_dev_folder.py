"""`DevFolder` (serving/dev.py) on the real runtime, in-process: which version of a folder dev mode serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from astrid.host.runtime import Runtime, RuntimeConfig
from astrid.host.serving.dev import DevFolder
from tests.e2e.test_capsule_dev import URI, hello

pytestmark = pytest.mark.slow


def text(runtime: Runtime) -> str:
    outcome = runtime.read_resource(URI)
    assert outcome.error is None, outcome.error
    return "".join(getattr(chunk, "text", "") for chunk in outcome.contents)


@pytest.fixture
def served(dev_runner_built: Path, tmp_path: Path, component_cache_dir: Path):
    folder = hello(tmp_path / "hello")
    config = RuntimeConfig(capsule_paths=[], principal="alice", cache_dir=component_cache_dir)
    config.grants_file, config.kv_file = tmp_path / "grants.json", tmp_path / "kv.sqlite3"
    config.trust_file = tmp_path / "trust.json"
    DevFolder.prepare(config, folder)
    runtime = Runtime(config)
    runtime.start(background=False)
    yield runtime, folder
    runtime.close()


def test_a_save_before_the_watcher_starts_is_served_once_it_does(served) -> None:
    runtime, folder = served
    assert text(runtime) == "hello, version 1"
    (folder / "greeting.py").write_text('TEXT = "saved before watching"\n', encoding="utf-8")
    runtime.watch_folders(interval_s=60)  # its baseline holds the save: only the reload at start serves it
    assert text(runtime) == "saved before watching"


def test_a_failing_version_keeps_the_last_good_one_and_the_source_id(served) -> None:
    runtime, folder = served
    before = runtime.status.capsules[0]
    assert before.dev
    (folder / "greeting.py").write_text("TEXT = (\n", encoding="utf-8")
    runtime.reload()
    assert runtime.status.capsules[0].source_id == before.source_id
    assert text(runtime) == "hello, version 1"
    (folder / "greeting.py").write_text('TEXT = "fixed"\n', encoding="utf-8")
    runtime.reload()
    assert runtime.status.capsules[0].source_id != before.source_id
    assert text(runtime) == "fixed"
