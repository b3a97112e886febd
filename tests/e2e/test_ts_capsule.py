"""TypeScript capsules: `astrid capsule new --lang ts`, built by componentize-js, served to real clients.

The build uses the JS toolchain `make js-toolchain` installs (toolchains/js). The build time, the
component's size and its wasmtime compile time are printed (`-s` shows them), not asserted.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import anyio
import pytest
from mcp import types

from tests.support.processes import run_astrid as astrid
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MANIFEST = """\
[package]
name = "notes"
version = "0.1.0"
description = "a TypeScript test capsule"

[[component]]
id = "notes"
file = "notes.wasm"

[subscribe]
"resource.v1.request.describe" = { wit = "astrid-bus:resource@1.0.0", handler = "describe" }
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0", handler = "read" }
"resource.v1.request.templates" = { wit = "astrid-bus:resource-template@1.0.0", handler = "templates" }
"resource.v1.request.complete" = { wit = "astrid-bus:resource-template@1.0.0", handler = "complete" }

[publish]
"resource.v1.response.describe.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.response.read.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.response.templates.*" = { wit = "astrid-bus:resource-template@1.0.0" }
"resource.v1.response.complete.*" = { wit = "astrid-bus:resource-template@1.0.0" }
"""

APP = """\
import { Capsule, type Context } from '@astrid/sdk';

const DAYS = ['monday', 'tuesday', 'wednesday'];
const capsule = new Capsule('notes');

capsule.resource('astrid://notes/hello', { name: 'hello', mimeType: 'text/plain' }, (ctx) => `hi ${ctx.principal}`);

capsule.resource('astrid://notes/bytes', { name: 'bytes', mimeType: 'application/octet-stream' }, () =>
  new Uint8Array([0, 1, 2, 255]),
);

capsule.resource('astrid://notes/broken', { name: 'broken' }, () => {
  throw new Error('no notes today');
});

capsule.resource('astrid://notes/now', { name: 'now', mimeType: 'application/json' }, () => {
  console.error('now: read');  // stderr: the server's log at warn (console.log: at info, with -v)
  return JSON.stringify({ now: Date.now(), iso: new Date().toISOString(), random: Math.random() });
});

capsule.template(
  'astrid://notes/day/{day}',
  { name: 'day', mimeType: 'text/plain', complete: { day: (p: string) => DAYS.filter((d) => d.startsWith(p)) } },
  (ctx: Context) => `notes of ${ctx.params.day} for ${ctx.principal}`,
);

export const astridHookTrigger = capsule.handler();
"""


def _compile_seconds(stderr: str) -> str:
    found = re.search(r"compiling for wasmtime\.\.\. done in ([\d.]+) s", stderr)
    return found.group(1) if found else "?"


def test_new_ts_then_build_then_read_greets_the_principal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # Empty caches, so the numbers printed are a first build's: componentize-js and the wasmtime compile.
    monkeypatch.setenv("ASTRID_BUILD_CACHE_DIR", str(tmp_path / "builds"))
    monkeypatch.setenv("ASTRID_CACHE_DIR", str(tmp_path / "components"))
    made = astrid("capsule", "new", "hellots", "--lang", "ts", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "hellots"
    assert sorted(p.name for p in folder.iterdir()) == ["Capsule.toml", "app.ts", "package.json", "tests"]
    started = time.perf_counter()
    built = astrid("capsule", "build", "hellots", cwd=tmp_path, timeout=600)
    seconds = time.perf_counter() - started
    assert built.returncode == 0, built.stderr
    assert "warning" not in built.stderr, built.stderr  # the manifest check ran and found nothing
    size = (folder / "hellots.wasm").stat().st_size
    print(
        f"\nts capsule: build {seconds:.1f} s, component {size / 1e6:.1f} MB, "
        f"wasmtime compile {_compile_seconds(built.stderr)} s"
    )
    read = astrid("resources", "read", "astrid://hellots/hello", "--principal", "alice", "--capsules", ".", cwd=folder)
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == "Hello, alice!"
    # the scaffold's test passes under `astrid capsule test`, as a Python capsule's does
    tested = astrid("capsule", "test", "hellots", cwd=tmp_path, timeout=600)
    assert tested.returncode == 0 and "3 passed" in tested.stdout, tested.stdout + tested.stderr


def test_a_type_error_in_the_syntax_is_one_line_naming_app_ts(tmp_path: Path):
    assert astrid("capsule", "new", "broken", "--lang", "ts", cwd=tmp_path).returncode == 0
    app = tmp_path / "broken" / "app.ts"
    app.write_text(app.read_text().replace("const capsule = new Capsule(", "const capsule = new Capsule(("))
    built = astrid("capsule", "build", "broken", cwd=tmp_path)
    assert built.returncode == 1
    lines = built.stderr.strip().splitlines()
    assert lines[-1].startswith("error: broken/app.ts:"), built.stderr
    assert "Traceback" not in built.stderr


async def test_a_real_client_reads_resources_templates_and_completions(
    tmp_path: Path, capsule_home: Path, stderr_file: Path
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST, encoding="utf-8")
    (folder / "app.ts").write_text(APP, encoding="utf-8")
    built = astrid("capsule", "build", "notes", cwd=tmp_path, timeout=600)
    assert built.returncode == 0, built.stderr
    assert "warning" not in built.stderr, built.stderr
    async with stdio_session(folder, capsule_home=capsule_home, stderr=stderr_file, init_timeout_s=60) as served:
        with anyio.fail_after(120):
            assert await served.text("astrid://notes/hello") == "hi alice"
        assert "astrid://notes/hello" in await served.uris()
        blob = await served.session.read_resource("astrid://notes/bytes")
        assert isinstance(blob.contents[0], types.BlobResourceContents)
        assert blob.contents[0].blob == "AAEC/w=="
        assert await served.text("astrid://notes/day/tuesday") == "notes of tuesday for alice"
        listed = await served.session.list_resource_templates()
        assert [t.uri_template for t in listed.resource_templates] == ["astrid://notes/day/{day}"]
        completed = await served.session.complete(
            types.ResourceTemplateReference(type="ref/resource", uri="astrid://notes/day/{day}"),
            argument={"name": "day", "value": "t"},
        )
        assert completed.completion.values == ["tuesday"]
        error = await served.error("astrid://notes/broken")
        assert "no notes today" in error.error.message and "app.ts:13" in error.error.message, error
        # the host's deny-by-default WASI: the clock, randomness and the console work as in Node
        now = json.loads(await served.text("astrid://notes/now"))
        assert abs(now["now"] / 1000 - time.time()) < 600 and now["iso"].startswith(str(time.gmtime().tm_year))
        assert 0 <= now["random"] < 1
    assert "[notes] now: read" in stderr_file.read_text()


def test_new_js_scaffolds_plain_javascript(tmp_path: Path):
    made = astrid("capsule", "new", "hellojs", "--lang", "js", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "hellojs"
    assert sorted(p.name for p in folder.iterdir()) == ["Capsule.toml", "app.js", "package.json", "tests"]
    assert "export const astridHookTrigger = capsule.handler();" in (folder / "app.js").read_text()
    assert "app.py" not in (folder / "Capsule.toml").read_text()
