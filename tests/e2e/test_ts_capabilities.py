"""A TypeScript capsule's `ctx.fs`, `ctx.kv` and `ctx.http`, through a real MCP client over stdio.

One componentize-js build (about 12 s). Without grants each read fails with the host's refusal naming
the `astrid capsule grant` command (a read error, the server keeps serving); granted while the server
runs, the next reads work.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from astrid.host.capabilities.grants import GrantStore
from astrid.host.settings import CONFIG_DIR_ENV, DATA_DIR_ENV
from tests.host.capabilities.http_server import loopback_server
from tests.support.processes import run_astrid as astrid
from tests.support.processes import server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MANIFEST = """\
[package]
name = "tscaps"
version = "0.1.0"

[[component]]
id = "tscaps"
file = "tscaps.wasm"

[capabilities]
fs = ["notes"]
kv = true
http = ["http://127.0.0.1"]

[subscribe]
"resource.v1.request.describe" = { wit = "astrid-bus:resource@1.0.0", handler = "describe" }
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0", handler = "read" }

[publish]
"resource.v1.response.describe.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.response.read.*" = { wit = "astrid-bus:resource@1.0.0" }

[config]
port = "PORT"
"""

APP = """\
import { Capsule, HostError } from '@astrid/sdk';

const capsule = new Capsule('tscaps');

capsule.resource('astrid://tscaps/note', { name: 'note' }, (ctx) => ctx.files.readText('notes/today.md'));
capsule.resource('astrid://tscaps/folder', { name: 'folder' }, (ctx) =>
  ctx.fs.list('notes').map((e) => `${e.name}:${e.kind}:${e.size}`).join(','),
);
capsule.resource('astrid://tscaps/missing', { name: 'missing' }, (ctx) => {
  try {
    return ctx.fs.readText('notes/nope.md');
  } catch (error) {
    return error instanceof HostError ? `caught ${error.code}` : 'not a HostError';
  }
});
capsule.resource('astrid://tscaps/visits', { name: 'visits' }, (ctx) => {
  const visits = Number(ctx.kv.getText('visits') ?? '0') + 1;
  ctx.kv.set('visits', String(visits));
  return String(visits);
});
capsule.resource('astrid://tscaps/forget', { name: 'forget' }, (ctx) => {
  ctx.kv.delete('visits');
  return `${ctx.kv.get('visits') === undefined} ${ctx.kv.keys().length}`;
});
capsule.resource('astrid://tscaps/echo', { name: 'echo' }, (ctx) => {
  const answer = ctx.http.request('POST', `http://127.0.0.1:${ctx.config('port')}/echo`, { body: 'ping' });
  return `${answer.status} ${answer.text()}`;
});

export const astridHookTrigger = capsule.handler();
"""


async def test_capabilities_refused_until_granted_then_served(
    tmp_path: Path, capsule_home: Path, stderr_file: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("buy milk")
    user = {CONFIG_DIR_ENV: str(tmp_path / "config"), DATA_DIR_ENV: str(tmp_path / "data")}
    grants = GrantStore(tmp_path / "config" / "grants.json")
    grants.grant("elsewhere", "kv")  # another capsule's grant gives nothing
    with loopback_server() as web:
        folder = tmp_path / "tscaps"
        folder.mkdir()
        (folder / "Capsule.toml").write_text(MANIFEST.replace("PORT", str(web.port)), encoding="utf-8")
        (folder / "app.ts").write_text(APP, encoding="utf-8")
        built = astrid("capsule", "build", "tscaps", cwd=tmp_path, timeout=600)
        assert built.returncode == 0, built.stderr
        assert "warning" not in built.stderr, built.stderr
        env = server_env(capsule_home, **user)
        async with stdio_session(folder, capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
            refused = {
                "note": "astrid capsule grant tscaps fs:notes=PATH",
                "visits": "astrid capsule grant tscaps kv",
                "echo": f"astrid capsule grant tscaps http:http://127.0.0.1:{web.port}",
            }
            for key, command in refused.items():
                with anyio.fail_after(120):
                    message = (await served.error(f"astrid://tscaps/{key}")).error.message
                assert "NotGranted: capability-denied" in message and command in message, message
                assert message.count("\n") == 0 and "app.ts:" in message, message
            grants.grant("tscaps", f"fs:notes={notes}")
            grants.grant("tscaps", "kv")
            grants.grant("tscaps", f"http:http://127.0.0.1:{web.port}")
            assert await served.text("astrid://tscaps/note") == "buy milk"
            assert await served.text("astrid://tscaps/folder") == "today.md:file:8"
            assert await served.text("astrid://tscaps/missing") == "caught not-found"
            assert [await served.text("astrid://tscaps/visits") for _ in range(2)] == ["1", "2"]
            assert await served.text("astrid://tscaps/forget") == "true 0"
            assert await served.text("astrid://tscaps/echo") == "200 ping"
    assert web.seen.requests[-1][:2] == ("POST", "/echo")
