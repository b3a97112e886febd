"""`astrid capsule new` + `astrid capsule build`, run as a user runs them, then served by a real kernel."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from astrid.host.contract import DescribeResponse, ReadResponse, TextChunk
from astrid.host.kernel.kernel import Kernel, KernelConfig
from tests.support.busclient import ALICE, Client
from tests.support.processes import run_astrid as astrid


def test_new_scaffolds_a_capsule(tmp_path: Path):
    result = astrid("capsule", "new", "demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "demo"
    assert sorted(p.name for p in folder.iterdir()) == ["Capsule.toml", "README.md", "app.py", "tests"]
    assert [p.name for p in (folder / "tests").iterdir()] == ["test_app.py"]
    assert "astrid capsule test" in result.stdout
    from astrid.host.capsule.manifest import load_manifest

    manifest = load_manifest(folder)
    assert manifest.component_file == "demo.wasm"
    assert manifest.handlers() == {"resource.v1.request.describe": "describe", "resource.v1.request.read": "read"}
    assert set(manifest.publish) == {"resource.v1.response.describe.*", "resource.v1.response.read.*"}
    assert "WitWorld = capsule.world()" in (folder / "app.py").read_text()


def test_new_with_dir_and_refusals(tmp_path: Path):
    (tmp_path / "parent").mkdir()
    assert astrid("capsule", "new", "one", "--dir", "parent", cwd=tmp_path).returncode == 0
    assert (tmp_path / "parent" / "one" / "Capsule.toml").is_file()
    again = astrid("capsule", "new", "one", "--dir", "parent", cwd=tmp_path)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert "Traceback" not in again.stderr
    bad = astrid("capsule", "new", "Bad Name", cwd=tmp_path)
    assert bad.returncode == 1 and "not a capsule name" in bad.stderr


@pytest.mark.parametrize(("lang", "language"), [("ts", "TypeScript"), ("js", "JavaScript")])
def test_dev_mode_on_a_typescript_or_javascript_capsule_says_what_to_do_instead(
    tmp_path: Path, lang: str, language: str
):
    assert astrid("capsule", "new", "notes", "--lang", lang, cwd=tmp_path).returncode == 0
    refused = astrid("capsule", "dev", "notes", cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"error: notes: dev mode serves Python capsules, and this one is {language}: build it with "
        "`astrid capsule build notes` while `astrid mcp serve --capsules notes` runs (each build is reloaded)"
    ]


def test_a_syntax_error_is_a_one_line_error_with_file_and_line(tmp_path: Path):
    astrid("capsule", "new", "broken", cwd=tmp_path)
    app = tmp_path / "broken" / "app.py"
    app.write_text(app.read_text().replace("def hello(ctx):", "def hello(ctx)"))
    result = astrid("capsule", "build", "broken", cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: broken/app.py:") and "expected ':'" in lines[0]


def test_new_then_build_gives_a_component_the_kernel_serves(tmp_path: Path):
    assert astrid("capsule", "new", "demo", cwd=tmp_path).returncode == 0
    started = time.perf_counter()
    built = astrid("capsule", "build", "demo", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    first = time.perf_counter() - started
    assert built.stdout.startswith("demo: ") and "demo/demo.wasm" in built.stdout and " MB) in " in built.stdout

    started = time.perf_counter()
    rebuilt = astrid("capsule", "build", "demo", cwd=tmp_path)
    second = time.perf_counter() - started
    assert rebuilt.returncode == 0 and "unchanged, from the build cache" in rebuilt.stdout
    print(f"\nbuild: {first:.1f} s ({built.stdout.strip()}); rebuild: {second:.2f} s ({rebuilt.stdout.strip()})")

    kernel = Kernel(KernelConfig(capsule_paths=[tmp_path / "demo"]))
    try:
        (report,) = kernel.start()
        assert report.ok, report.error
        client = Client(kernel)
        (described,) = client.describe()
        assert described.topic == "resource.v1.response.describe.demo"
        resources = DescribeResponse.model_validate_json(described.payload).resources
        assert [r.uri for r in resources] == ["astrid://demo/hello"]
        reply = client.read("astrid://demo/hello", ALICE)
        parsed = ReadResponse.model_validate(reply)
        assert parsed.to_wire() == reply
        assert isinstance(parsed.contents[0], TextChunk)
        assert parsed.contents[0].text == "Hello, alice!"
    finally:
        kernel.close()
