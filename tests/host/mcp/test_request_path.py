"""A structural guard on the request path: what one read and one warm list cost, counted, not timed.

Through the real MCP server (the SDK's in-memory client against
`AstridMcpServer` on a real runtime and a real capsule), the JSON decodes,
pydantic validations and thread hand-offs of one request are counted, and so
are those of the same request against a plain `mcp` server serving a dict
(bench/baseline_server.py: the SDK's own share, client side included). The
difference is astrid's own path, and it may not grow past today's numbers:

- a read: one parse and one validation of the capsule's reply (the trust
  boundary), and one hop, to the capsule's worker: the event loop starts the
  read's round and awaits it, woken by the reply (no worker thread for the
  broker call). The request the broker publishes is made with its JSON value,
  so the bus does not parse it;
- a warm list: nothing but the hop (the snapshot is reused as it is).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import anyio
import anyio.to_thread
import pydantic
import pytest
from mcp import Client

from astrid.host.mcp.server import AstridMcpServer
from astrid.host.runtime import Runtime, RuntimeConfig
from bench.baseline_server import build as baseline_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

READ_LIMITS = {"json.loads": 1, "json.dumps": 1, "validations": 1, "to_thread": 0, "pool.submit": 1}
LIST_LIMITS = {"json.loads": 0, "json.dumps": 0, "validations": 0, "to_thread": 0, "pool.submit": 0}


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    counts: Counter[str] = Counter()

    def counted(owner: object, name: str, key: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            counts[key] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    def counted_classmethod(name: str) -> None:
        function = pydantic.BaseModel.__dict__[name].__func__

        def wrapper(cls, *args, **kwargs):
            counts["validations"] += 1
            return function(cls, *args, **kwargs)

        monkeypatch.setattr(pydantic.BaseModel, name, classmethod(wrapper))

    counted(json, "loads", "json.loads")
    counted(json, "dumps", "json.dumps")
    counted_classmethod("model_validate")
    counted_classmethod("model_validate_json")
    counted(pydantic.TypeAdapter, "validate_python", "validations")
    counted(pydantic.TypeAdapter, "validate_json", "validations")
    counted(anyio.to_thread, "run_sync", "to_thread")
    counted(ThreadPoolExecutor, "submit", "pool.submit")
    yield counts


async def _costs(server, uri: str, counts: Counter[str]) -> dict[str, Counter[str]]:
    async with Client(server) as outer:
        session = outer.session  # no client-side cache: every request reaches the server
        await session.list_resources()
        for _ in range(2):
            await session.read_resource(uri)  # warm: sandbox made, snapshot cached
        costs = {}
        for what, call in (("read", lambda: session.read_resource(uri)), ("list", session.list_resources)):
            counts.clear()
            await call()
            costs[what] = Counter(counts)
        return costs


async def test_one_read_and_one_warm_list_cost_no_more_than_today(built_docs, capsule_home, monkeypatch):
    runtime = Runtime(RuntimeConfig(capsule_paths=[built_docs.folder], principal="alice"))
    runtime.start(background=False)
    try:
        with counting(monkeypatch) as counts:
            astrid = await _costs(AstridMcpServer(runtime, limits=runtime.limits).server, "astrid://docs/index", counts)
            baseline = await _costs(baseline_server(1), "astrid://bench/00-text-0", counts)
    finally:
        runtime.close()
    for what, limits in (("read", READ_LIMITS), ("list", LIST_LIMITS)):
        ours = {key: astrid[what][key] - baseline[what][key] for key in limits}
        over = {key: (ours[key], limit) for key, limit in limits.items() if ours[key] > limit}
        assert not over, f"the {what} path grew past its budget (ours, budget): {over}; all: {ours}"
