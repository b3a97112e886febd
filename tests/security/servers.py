"""The kernel, broker and a broker client in-process (`Runtime`), and what the bundled capsules still serve."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from astrid.host.broker import BrokerClient
from astrid.host.kernel.kernel import Kernel
from astrid.host.limits import Limits
from astrid.host.runtime import Runtime, RuntimeConfig
from tests.support.capsules import BUNDLED_URIS


@dataclass
class InProcessServer:
    """A started Runtime (kernel + broker + broker client) for one principal."""

    runtime: Runtime

    @property
    def kernel(self) -> Kernel:
        kernel = self.runtime.kernel
        assert isinstance(kernel, Kernel), "the runtime has not started"
        return kernel

    @property
    def broker(self):
        return self.runtime.broker

    def _client(self) -> BrokerClient:
        client = self.runtime.client
        assert client is not None, "the runtime has not started"
        return client

    def as_(self, name: str) -> BrokerClient:
        """The broker client of another (verified) principal, as the MCP server holds one."""
        return self.runtime.client_for(name)

    def uris(self, name: str | None = None) -> list[str]:
        client = self._client() if name is None else self.as_(name)
        return [r.uri for r in client.list_resources()]

    def read(self, uri: str, name: str | None = None):
        client = self._client() if name is None else self.as_(name)
        return client.read(uri).result()

    def text(self, uri: str, name: str | None = None) -> str:
        reply = self.read(uri, name)
        assert reply.error is None, f"read of {uri}: {reply.error}"
        return "".join(getattr(c, "text", "") for c in reply.contents)

    def source_id(self, capsule: str) -> str:
        return next(c.source_id for c in self.kernel.loaded() if c.name == capsule)


class InProcessServers:
    """`servers(*folders, principal="alice", limits=None)`: a started Runtime; `close()` closes every one."""

    def __init__(self) -> None:
        self.runtimes: list[Runtime] = []

    def __call__(
        self,
        *folders: Path,
        principal: str = "alice",
        limits: Limits | None = None,
        expect_ok: bool = True,
        grants_file: Path | None = None,
        kv_file: Path | None = None,
    ) -> InProcessServer:
        config = RuntimeConfig(
            capsule_paths=[Path(f) for f in folders], principal=principal, grants_file=grants_file, kv_file=kv_file
        )
        if limits is not None:
            config.limits = limits
        runtime = Runtime(config)
        self.runtimes.append(runtime)
        runtime.start(background=False)
        if expect_ok:
            assert not runtime.status.failures, runtime.status.failures
        return InProcessServer(runtime)

    def close(self) -> None:
        for runtime in self.runtimes:
            runtime.close()


def assert_bundled_serve(served: InProcessServer, principal: str | None = None) -> None:
    """docs and introspect still list and answer, for the right principal."""
    name = principal or served.runtime.principal
    uris = set(served.uris(principal))
    assert uris >= BUNDLED_URIS, sorted(BUNDLED_URIS - uris)
    assert served.text("astrid://docs/index", principal).startswith("# ")
    who = json.loads(served.text("astrid://whoami", principal))
    assert who["principal"] == name and who["attribution"] == "verified"
