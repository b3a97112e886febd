"""Capsule.toml against the code, both ways: a mismatch fails the build with the exact lines to add or remove.

What the code declares is asked of the built component, in the sandbox
(`read_built`), so these tests build for real (slow, and cached by content
hash: only the first run on a machine pays); the check's own logic is also
tested on hand-made facts (fast).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from astrid.host.build import BuildError, BuildResult, build_capsule
from astrid.host.build.code_check import (
    COMPLETE,
    DESCRIBE,
    READ,
    TEMPLATES,
    CodeFacts,
    TemplateFacts,
    check_manifest,
    read_built,
)
from astrid.host.build.scaffold import scaffold_capsule
from astrid.host.capsule.manifest import load_manifest, parse_manifest
from tests.support.paths import FIXTURES

TEMPLATE = """

@capsule.template("astrid://{name}/notes/{{id}}", name="note", mime_type="text/plain")
def note(ctx):
    return ctx.params["id"]


@note.complete("id")
def note_ids(ctx, prefix):
    return ["a", "b"]
"""


TEMPLATE_SUBSCRIBE = (TEMPLATES.subscribe_line, COMPLETE.subscribe_line)
TEMPLATE_PUBLISH = (TEMPLATES.publish_line, COMPLETE.publish_line)


def scaffolded(parent: Path, name: str = "demo") -> Path:
    return scaffold_capsule(name, parent)


def with_code(folder: Path, extra: str) -> None:
    """Insert `extra` into app.py before its last line (WitWorld = capsule.world())."""
    app = folder / "app.py"
    text = app.read_text()
    head, marker, tail = text.rpartition("# The entry point componentize-py exports")
    app.write_text(head + extra.format(name=folder.name) + "\n\n" + marker + tail)


def add_lines(folder: Path, subscribe: tuple[str, ...] = (), publish: tuple[str, ...] = ()) -> None:
    """Add entries to the scaffold's [subscribe] and [publish] tables (after their read lines)."""
    manifest = folder / "Capsule.toml"
    text = manifest.read_text()
    text = text.replace(READ.subscribe_line, "\n".join((READ.subscribe_line, *subscribe)))
    text = text.replace(READ.publish_line, "\n".join((READ.publish_line, *publish)))
    manifest.write_text(text)


def mismatch(folder: Path) -> str:
    with pytest.raises(BuildError) as caught:
        build_capsule(folder, precompile=False)
    assert not (folder / f"{folder.name}.wasm").exists(), "a build the check refuses writes no component"
    return str(caught.value)


def built(folder: Path) -> BuildResult:
    """`folder` built (from the build cache when unchanged), then checked against its component in the sandbox."""
    return build_capsule(folder, precompile=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo", "my_notes", "a-b", "x1"])
def test_the_scaffold_binds_exactly_what_the_sdk_serves_for_its_code(tmp_path: Path, name: str):
    folder = scaffolded(tmp_path, name)
    manifest = load_manifest(folder)
    assert built(folder).warnings == ()
    reading = read_built(folder)
    assert reading.status == "ok", reading.detail
    facts = reading.facts
    assert facts is not None
    assert facts.resources == (f"astrid://{name}/hello",)
    assert facts.name == name
    result = check_manifest(manifest, facts, (folder / "Capsule.toml").read_text())
    assert result.errors == [] and result.warnings == []
    # exactly the SDK's describe and read, nothing more
    assert manifest.handlers() == {DESCRIBE.topic: "describe", READ.topic: "read"}
    assert set(manifest.publish) == {DESCRIBE.publish_key, READ.publish_key}
    # the families hint covers every URI the code serves
    assert manifest.resources is not None
    assert all(uri.startswith(tuple(manifest.resources.families)) for uri in facts.resources)


@pytest.mark.slow
def test_a_uri_outside_the_families_hint_fails_with_the_new_hint_line(tmp_path: Path):
    folder = scaffolded(tmp_path)
    app = folder / "app.py"
    app.write_text(app.read_text().replace('"astrid://demo/hello"', '"astrid://elsewhere/hello"'))
    message = mismatch(folder)
    assert "Capsule.toml does not match what" in message and "app.py serves:" in message
    assert "the resource astrid://elsewhere/hello" in message
    assert 'outside the [resources] families hint ["astrid://demo/"]' in message
    assert '      families = ["astrid://demo/"]\n' in message  # the line as written, to replace
    assert 'with\n      families = ["astrid://demo/", "astrid://elsewhere/"]\n' in message
    # Doing what it says makes the build pass the check.
    manifest = folder / "Capsule.toml"
    manifest.write_text(
        manifest.read_text().replace(
            'families = ["astrid://demo/"]', 'families = ["astrid://demo/", "astrid://elsewhere/"]'
        )
    )
    assert built(folder).warnings == ()
    facts = read_built(folder).facts
    assert facts is not None
    assert check_manifest(load_manifest(folder), facts).errors == []


@pytest.mark.slow
def test_a_template_without_its_topics_fails_with_the_lines_to_add(tmp_path: Path):
    folder = scaffolded(tmp_path)
    with_code(folder, TEMPLATE)
    message = mismatch(folder)
    assert "app.py declares the template astrid://demo/notes/{id}" in message
    assert "with completion" in message and "never listed or completed" in message
    subscribe = f"Add under [subscribe]:\n      {TEMPLATES.subscribe_line}\n      {COMPLETE.subscribe_line}\n"
    assert subscribe in message, message
    assert f"and under [publish]:\n      {TEMPLATES.publish_line}\n      {COMPLETE.publish_line}" in message
    # Adding exactly those lines satisfies the check.
    add_lines(folder, TEMPLATE_SUBSCRIBE, TEMPLATE_PUBLISH)
    assert built(folder).warnings == ()
    facts = read_built(folder).facts
    assert facts is not None
    assert check_manifest(load_manifest(folder), facts).errors == []


@pytest.mark.slow
def test_a_bound_handler_the_code_lacks_fails_with_the_line_to_remove(tmp_path: Path):
    folder = scaffolded(tmp_path)
    line = '"astrid.tick" = { wit = "opaque", handler = "on-tick" }'
    add_lines(folder, (line,))
    message = mismatch(folder)
    assert '[subscribe] binds "astrid.tick" to the handler "on-tick", but app.py defines no' in message
    assert f"Remove this line from [subscribe]:\n      {line}\n" in message
    assert '      @capsule.on("on-tick")\n      def on_tick(ctx, payload): ...' in message


@pytest.mark.slow
def test_template_topics_without_a_template_fail_with_the_lines_to_remove(tmp_path: Path):
    folder = scaffolded(tmp_path)
    add_lines(folder, (TEMPLATES.subscribe_line,), (TEMPLATES.publish_line,))
    message = mismatch(folder)
    assert "binds the template topics, but app.py declares no template" in message
    assert f"Remove from [subscribe]:\n      {TEMPLATES.subscribe_line}\n" in message
    assert f"and from [publish]:\n      {TEMPLATES.publish_line}\n" in message


@pytest.mark.slow
def test_resources_without_the_resource_topics_fail_with_the_lines_to_add(tmp_path: Path):
    folder = scaffolded(tmp_path)
    manifest = folder / "Capsule.toml"
    manifest.write_text(manifest.read_text().replace(READ.subscribe_line + "\n", ""))
    message = mismatch(folder)
    assert "app.py declares astrid://demo/hello" in message
    assert f"Add under [subscribe]:\n      {READ.subscribe_line}" in message
    assert "[publish]" not in message.split("Add under [subscribe]")[1]  # the replies are declared


@pytest.mark.slow
def test_a_template_with_no_literal_prefix_needs_the_hint_removed(tmp_path: Path):
    folder = scaffolded(tmp_path)
    with_code(folder, '\n@capsule.template("{{+anything}}", name="all")\ndef everything(ctx):\n    return "x"\n')
    add_lines(folder, TEMPLATE_SUBSCRIBE, TEMPLATE_PUBLISH)
    message = mismatch(folder)
    assert "the template {+anything}" in message
    assert 'remove these lines from Capsule.toml:\n      [resources]\n      families = ["astrid://demo/"]' in message


def test_the_check_reports_warnings_it_does_not_refuse():
    manifest = parse_manifest(
        {
            "package": {"name": "w", "version": "1", "namespaces": ["astrid://w/"]},
            "component": [{"id": "w", "file": "w.wasm"}],
            "subscribe": {
                DESCRIBE.topic: {"wit": DESCRIBE.wit, "handler": "describe"},
                READ.topic: {"wit": READ.wit, "handler": "read"},
            },
            "publish": {DESCRIBE.publish_key: {"wit": DESCRIBE.wit}, READ.publish_key: {"wit": READ.wit}},
        }
    )
    facts = CodeFacts(name="w", resources=("astrid://w/a", "astrid://other/b"), handlers=("tick",))
    result = check_manifest(manifest, facts)
    assert result.errors == []
    assert any('@capsule.on("tick"), but no [subscribe] entry binds it' in w for w in result.warnings)
    assert any("astrid://other/b, outside [package] namespaces" in w for w in result.warnings)


def test_publish_patterns_are_matched_not_compared():
    """A wider publish grant (`resource.v1.response.*`) covers the reply topics: nothing to add."""
    manifest = parse_manifest(
        {
            "package": {"name": "wide", "version": "1"},
            "component": [{"id": "wide", "file": "wide.wasm"}],
            "subscribe": {
                DESCRIBE.topic: {"handler": "describe"},
                READ.topic: {"handler": "read"},
                TEMPLATES.topic: {"handler": "templates"},
                COMPLETE.topic: {"handler": "complete"},
            },
            "publish": {"resource.v1.response.*": "opaque"},
        }
    )
    facts = CodeFacts(name="wide", templates=(TemplateFacts("astrid://wide/{id}", "astrid://wide/", ("id",)),))
    assert check_manifest(manifest, facts).errors == []


@pytest.mark.slow
def test_reading_the_code(tmp_path: Path):
    folder = scaffolded(tmp_path)
    with_code(folder, '\n@capsule.on("tick")\ndef tick(ctx, payload):\n    return None\n')
    built(folder)
    reading = read_built(folder)
    assert reading.status == "ok" and reading.facts is not None
    assert reading.facts.handlers == ("tick",)
    # A capsule written against the bindings, not the SDK: nothing to check.
    probe = tmp_path / "pyprobe"
    shutil.copytree(FIXTURES / "pyprobe", probe, ignore=shutil.ignore_patterns("__pycache__", "*.wasm"))
    assert built(probe).warnings == ()
    assert read_built(probe).status == "not-sdk"
    # Nothing built: nothing to ask.
    assert read_built(scaffolded(tmp_path, "unbuilt")).status == "failed"
    # Code that does not import fails the build itself, with file and line.
    (folder / "helpers.py").write_text("X = 1\nY = missing_name\n")
    (folder / "app.py").write_text("import helpers\n" + (folder / "app.py").read_text())
    with pytest.raises(BuildError) as failed:
        built(folder)
    assert str(failed.value).endswith("helpers.py:2: NameError: name 'missing_name' is not defined"), failed.value


@pytest.mark.slow
def test_the_code_sees_no_host_packages(tmp_path: Path):
    """The code is built with the standard library, the SDK and the folder only: not this venv's packages."""
    import idna  # noqa: F401  (present on the host: the test's premise)

    folder = scaffolded(tmp_path)
    (folder / "app.py").write_text("import idna\n" + (folder / "app.py").read_text())
    with pytest.raises(BuildError, match="No module named 'idna'"):
        built(folder)
    # nothing written
    assert sorted(p.name for p in folder.iterdir()) == ["Capsule.toml", "README.md", "app.py", "tests"]


@pytest.mark.slow
def test_a_warning_is_shown_by_every_build_cached_or_not(tmp_path: Path):
    folder = scaffolded(tmp_path, "warned")
    with_code(folder, '\n@capsule.on("tick")\ndef tick(ctx, payload):\n    return None\n')
    first = build_capsule(folder, precompile=False)
    again = build_capsule(folder, precompile=False)
    assert again.cached
    for result in (first, again):
        assert len(result.warnings) == 1
        assert '@capsule.on("tick"), but no [subscribe] entry binds it' in result.warnings[0]


@pytest.mark.slow
def test_a_bundled_copy_passes_the_check(tmp_path: Path):
    """The capsules shipped and the test capsules agree with their manifests (so the check breaks none)."""
    from astrid.capsules import CAPSULES_DIR
    from tests.support.paths import REPO

    folders = [CAPSULES_DIR / n for n in ("docs", "introspect", "files", "feeds")]
    folders += sorted((REPO / "tests" / "e2e" / "capsules").iterdir()) + [FIXTURES / "faulty"]
    for source in folders:
        folder = tmp_path / source.name
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("*.wasm", "__pycache__"))
        assert built(folder).warnings == (), source
        reading = read_built(folder)
        assert reading.status == "ok", (source, reading.detail)
        assert reading.facts is not None
        result = check_manifest(load_manifest(folder), reading.facts, (folder / "Capsule.toml").read_text())
        assert result.errors == [] and result.warnings == [], (source, result)


def test_problems_point_at_the_declaration_when_the_sdk_records_it():
    manifest = parse_manifest(
        {
            "package": {"name": "s", "version": "1"},
            "component": [{"id": "s", "file": "s.wasm"}],
            "subscribe": {
                DESCRIBE.topic: {"wit": DESCRIBE.wit, "handler": "describe"},
                READ.topic: {"wit": READ.wit, "handler": "read"},
            },
            "publish": {DESCRIBE.publish_key: {"wit": DESCRIBE.wit}, READ.publish_key: {"wit": READ.wit}},
            "resources": {"families": ["astrid://s/"]},
        }
    )
    facts = CodeFacts(name="s", resources=("astrid://t/a",), sites={"astrid://t/a": "app.py:12"})
    (error,) = check_manifest(manifest, facts).errors
    assert "the resource astrid://t/a (app.py:12), outside the [resources] families hint" in error


def test_binding_the_reserved_facts_action_is_a_line_to_remove():
    manifest = parse_manifest(
        {
            "package": {"name": "r", "version": "1"},
            "component": [{"id": "r", "file": "r.wasm"}],
            "subscribe": {"r.facts": {"wit": "opaque", "handler": "astrid.facts"}},
        }
    )
    (error,) = check_manifest(manifest, CodeFacts(name="r")).errors
    assert '[subscribe] binds "r.facts" to the handler "astrid.facts", a name the SDK reserves' in error
    assert 'Remove this line from [subscribe]:\n    "r.facts" = { wit = "opaque", handler = "astrid.facts" }' in error


def test_binding_the_reserved_static_action_is_a_line_to_remove():
    manifest = parse_manifest(
        {
            "package": {"name": "r", "version": "1"},
            "component": [{"id": "r", "file": "r.wasm"}],
            "subscribe": {"r.static": {"wit": "opaque", "handler": "astrid.static"}},
        }
    )
    (error,) = check_manifest(manifest, CodeFacts(name="r")).errors
    assert '[subscribe] binds "r.static" to the handler "astrid.static", a name the SDK reserves' in error
    assert "(it tells the host the describe every principal gets)" in error


@pytest.mark.slow
def test_a_mismatch_fails_before_componentize_py_runs(tmp_path: Path):
    """The dev runner checks the sources first (`build/dev_sources.py`): no componentize phase, about a second."""
    import time
    import uuid

    from astrid.host.build.builder import default_build_cache_dir
    from astrid.host.build.dev_runner import dev_runner
    from astrid.host.kernel.compile_cache import CompileCache

    CompileCache().precompile(dev_runner(default_build_cache_dir()))  # once per astrid version, as after `dev`
    folder = scaffolded(tmp_path)
    with_code(folder, TEMPLATE + f"\n# {uuid.uuid4()}: a build no cache holds (a cached one is checked, not built)\n")
    phases: list[str] = []
    started = time.perf_counter()
    with pytest.raises(BuildError) as caught:
        build_capsule(folder, precompile=False, progress=lambda phase, elapsed: phases.append(phase))
    seconds = time.perf_counter() - started
    print(f"\nbuild pre-check: the mismatch failed after {seconds:.2f} s")
    assert "app.py declares the template astrid://demo/notes/{id}" in str(caught.value)
    assert "precheck" in phases and "componentize" not in phases, phases
    assert not (folder / "demo.wasm").exists()
