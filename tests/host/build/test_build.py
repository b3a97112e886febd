"""`astrid.host.build`: manifest and syntax checks, the content hash, the build cache, failures."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from astrid.host.build import BuildError, build_capsule, content_hash
from astrid.host.build.python_toolchain import explain_failure

MANIFEST = """\
[package]
name = "tiny"
version = "0.1.0"

[[component]]
id = "tiny"
file = "tiny.wasm"

[subscribe]
"resource.v1.request.read" = { wit = "x", handler = "read" }

[publish]
"resource.v1.response.read.*" = "x"
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST)
    (folder / "app.py").write_text(
        "from astrid_sdk import Capsule\ncapsule = Capsule('tiny')\nWitWorld = capsule.world()\n"
    )
    return folder


def test_a_syntax_error_is_one_line_with_file_and_line(tiny: Path):
    (tiny / "helpers.py").write_text("x = 1\n\ndef broken(:\n    pass\n")
    with pytest.raises(BuildError) as caught:
        build_capsule(tiny)
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith("helpers.py:3: invalid syntax")


def test_a_manifest_error_names_the_file(tiny: Path):
    (tiny / "Capsule.toml").write_text(MANIFEST.replace('name = "tiny"', 'name = "Tiny Capsule"'))
    with pytest.raises(BuildError, match=r"Capsule.toml: package.name: must be"):
        build_capsule(tiny)


def test_a_missing_entry_module_is_explained(tiny: Path):
    (tiny / "app.py").rename(tiny / "main.py")
    with pytest.raises(BuildError, match=r"app.py: not found .*entry module is app.py"):
        build_capsule(tiny)


def test_not_a_capsule_folder(tmp_path: Path):
    with pytest.raises(BuildError, match="Capsule.toml: not found"):
        build_capsule(tmp_path)


def test_the_content_hash_tracks_sources_only(tiny: Path):
    first = content_hash(tiny)
    (tiny / "__pycache__").mkdir()
    (tiny / "__pycache__" / "app.cpython-314.pyc").write_bytes(b"junk")
    (tiny / "tiny.wasm").write_bytes(b"old build")
    (tiny / ".hidden").write_text("editor state")
    assert content_hash(tiny) == first
    (tiny / "app.py").write_text((tiny / "app.py").read_text() + "# changed\n")
    assert content_hash(tiny) != first
    (tiny / "app.py").write_text((tiny / "app.py").read_text().replace("# changed\n", ""))
    assert content_hash(tiny) == first
    (tiny / "pages").mkdir()
    (tiny / "pages" / "a.md").write_text("# a")
    assert content_hash(tiny) != first


def test_the_capsules_tests_folder_is_not_its_source(tiny: Path):
    # `astrid capsule test` runs tests/ on the host: editing a test must not miss the build cache,
    # make the component stale, or fail the build with the test's syntax error.
    from astrid.host.capsule.discovery import stale_component

    first = content_hash(tiny)
    (tiny / "tiny.wasm").write_bytes(b"built")
    (tiny / "tests").mkdir()
    time.sleep(0.01)  # the test file is newer than the build
    (tiny / "tests" / "test_app.py").write_text("def test_broken(:\n")
    assert content_hash(tiny) == first
    assert stale_component(tiny) is None
    (tiny / "lib" / "tests").mkdir(parents=True)  # a package's own tests/ is source like any folder
    (tiny / "lib" / "tests" / "x.py").write_text("X = 1\n")
    assert content_hash(tiny) != first
    assert stale_component(tiny) is not None


def test_explain_failure_keeps_the_last_meaningful_line(tiny: Path):
    output = (
        'Traceback (most recent call last):\n  File "/x/bin/componentize-py", line 6, in <module>\n'
        "AssertionError: AttributeError: module 'app' has no attribute 'WitWorld'\n\n\n"
        "Caused by:\n    AttributeError: module 'app' has no attribute 'WitWorld'\n\nStack backtrace:\n   0: x\n"
    )
    message = explain_failure(output, tiny)
    assert message.endswith(
        "app.py: AttributeError: module 'app' has no attribute 'WitWorld' "
        "(end app.py with `WitWorld = capsule.world()`)"
    )


def test_a_missing_module_whose_package_cannot_work_is_not_hinted_in(tiny: Path):
    output = (
        'Traceback (most recent call last):\n  File "/0/app.py", line 1, in <module>\n'
        "ModuleNotFoundError: No module named 'requests'\n"
    )
    message = explain_failure(output, tiny)
    assert message.endswith(
        "app.py:1: ModuleNotFoundError: No module named 'requests' (requests cannot work in a capsule: it reaches "
        "the network through sockets, and a capsule has none: call ctx.http after the operator grants http)"
    ), message
    assert "requirements.txt" not in message


@pytest.mark.slow
def test_an_import_error_points_at_the_guest_file_and_line(tiny: Path):
    (tiny / "helpers.py").write_text("VALUE = 1\nOTHER = undefined_name + 1\n")
    (tiny / "app.py").write_text("import helpers\n" + (tiny / "app.py").read_text())
    started = time.perf_counter()
    with pytest.raises(BuildError) as caught:
        build_capsule(tiny, precompile=False)
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith("helpers.py:2: NameError: name 'undefined_name' is not defined"), message
    print(f"failed componentize-py build took {time.perf_counter() - started:.1f} s")


@pytest.mark.slow
def test_rebuilding_an_unchanged_capsule_is_a_cached_copy(built_faulty, tmp_path: Path):
    again = build_capsule(built_faulty.folder)
    assert again.cached and again.content_hash == built_faulty.result.content_hash
    elsewhere = tmp_path / "out" / "copy.wasm"
    copied = build_capsule(built_faulty.folder, elsewhere)
    assert copied.cached and elsewhere.read_bytes() == built_faulty.result.output.read_bytes()
    print(f"cached rebuild: {again.seconds:.3f} s, to a new path: {copied.seconds:.3f} s")
