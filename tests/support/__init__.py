"""The shared test harness: plain helpers every test package imports as `tests.support.*`.

Fixtures live in the conftests (the shared ones in `tests/conftest.py`); what
they build and start lives here, so a test module imports helpers from a
module, never from a conftest.

- `paths`: where the repository and the fixture capsules are;
- `files`: `clean_copy`, a capsule folder as a fresh checkout has it;
- `wat`: `build_wat`, a WAT capsule component in milliseconds;
- `capsules`: the bundled capsules (`BUNDLED`, `BUNDLED_URIS`) and building
  capsules through the content-hash caches (`build_clean`, `build_cache_dir`);
- `processes`: `astrid mcp serve` as a process (`astrid_exe`, `serve_args`,
  `server_env`, `run_astrid`, `LineReader`);
- `stdio`: a real MCP client on `astrid mcp serve` over stdio (`stdio_session`);
- `busclient`: a host participant that asks capsules over a real kernel's bus.
"""
