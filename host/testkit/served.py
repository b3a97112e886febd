"""One capsule folder served as `astrid mcp serve` serves it, in this process, for a test session.

Built first (a content-hash cache hit when nothing changed: a fraction of a second), then loaded by a
`Runtime` of its own: the real kernel, broker, sandbox and limits, on the in-memory bus. The grants
file, the kv store and the trust file are the session's own (under `state_dir`), never the user's, so
a test sees what it granted and nothing else. Every request names its principal.
"""

from __future__ import annotations

import builtins
from pathlib import Path

from astrid.host.build.builder import build_capsule
from astrid.host.build.steps import Progress
from astrid.host.build.toolchain import toolchains
from astrid.host.capsule.manifest import load_manifest
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate
from astrid.host.errors import CapsuleLoadError, RequestFailed
from astrid.host.runtime import CapsuleSummary, Runtime, RuntimeConfig
from astrid.host.testkit.grants import KitGrants
from astrid.host.testkit.results import Completion, ReadResult

DEFAULT_PRINCIPAL = "alice"


class ServedCapsule:
    def __init__(self, runtime: Runtime, capsule: CapsuleSummary, grants: KitGrants) -> None:
        self._runtime = runtime
        self.name = capsule.name
        self.folder = capsule.folder
        self.source_id = capsule.source_id
        self._grants = grants

    @classmethod
    def start(cls, folder: Path, state_dir: Path, progress: Progress | None = None) -> ServedCapsule:
        """Build `folder` when its sources changed, and serve it; an `AstridError` says why it cannot."""
        folder = Path(folder).resolve()
        manifest = load_manifest(folder)  # ManifestError: the key, the cause and the fix
        if any(toolchain.detects(folder) for toolchain in toolchains()):  # else: a built component, served as is
            build_capsule(folder, progress=progress)
        runtime = Runtime(
            RuntimeConfig(
                capsule_paths=[folder],
                principal=None,  # every request names its own
                grants_file=state_dir / "grants.json",
                kv_file=state_dir / "kv.sqlite3",
                trust_file=state_dir / "trust.json",  # none: a local capsule owns its namespaces as on a fresh host
            )
        )
        try:
            runtime.start(background=False)
            capsule = _loaded(runtime, folder)
        except BaseException:
            runtime.close()
            raise
        assert capsule.provenance is not None  # a real kernel says who each capsule is
        identity = capsule.provenance.grant_key(capsule.name, folder)
        kernel = runtime.kernel
        assert kernel is not None  # started
        # A grant changes what capsules list: every principal's lists are described again, as a server
        # does on seeing the grants file change (here at once, not on the watcher's next poll).
        grants = KitGrants(state_dir / "grants.json", capsule.name, identity, manifest.capabilities, kernel.announce)
        return cls(runtime, capsule, grants)

    def close(self) -> None:
        self._runtime.close()

    def __repr__(self) -> str:
        return f"<capsule {self.name} served from {self.folder}>"

    # -- requests, as `principal` ----------------------------------------------------------------

    def read(self, uri: str, *, principal: str = DEFAULT_PRINCIPAL) -> ReadResult:
        """The read of `uri`; `RequestFailed` (code: message) when the broker answers a failure."""
        __tracebackhide__ = True  # a failed test shows the test's line, not the kit's
        outcome = self._runtime.client_for(principal).read(uri).result()
        if outcome.error is not None:
            raise RequestFailed(outcome.error.code.value, outcome.error.message)
        return ReadResult(uri, outcome.contents)

    def list(self, *, principal: str = DEFAULT_PRINCIPAL) -> builtins.list[ResourceDefinition]:
        """The resources `principal` is listed (every capsule's describe, merged as for a client)."""
        return self._runtime.client_for(principal).list_resources()

    def templates(self, *, principal: str = DEFAULT_PRINCIPAL) -> builtins.list[ResourceTemplate]:
        return self._runtime.client_for(principal).list_templates()

    def complete(
        self,
        uri_template: str,
        argument: str,
        prefix: str = "",
        *,
        principal: str = DEFAULT_PRINCIPAL,
        context: dict[str, str] | None = None,
    ) -> Completion:
        """Values for `argument` of `uri_template` that start with `prefix`; `RequestFailed` on a failure."""
        __tracebackhide__ = True  # a failed test shows the test's line, not the kit's
        outcome = self._runtime.client_for(principal).complete(uri_template, argument, prefix, context)
        if outcome.error is not None:
            raise RequestFailed(outcome.error.code.value, outcome.error.message)
        return Completion(list(outcome.values), outcome.total, outcome.has_more)

    # -- grants (every principal's; taken back when the test ends) ------------------------------------

    def grant_files(self, folder: Path | str, mount: str | None = None) -> str:
        """`folder` as the fs mount `mount` (default: the one its Capsule.toml asks for); the grant, as typed."""
        return self._grants.files(folder, mount)

    def grant_kv(self) -> str:
        return self._grants.kv()

    def grant_http(self, url: str) -> str:
        """Outbound HTTP to the scheme, host and port of `url` (e.g. a loopback server the test started)."""
        return self._grants.http(url)

    def revoke_grants(self) -> None:
        self._grants.clear()


def _loaded(runtime: Runtime, folder: Path) -> CapsuleSummary:
    """The capsule `runtime` loaded from `folder`; `CapsuleLoadError` with the kernel's reason otherwise."""
    status = runtime.status
    if status.failures:
        raise CapsuleLoadError(f"{status.failures[0].folder} does not load: {status.failures[0].error}")
    if not status.capsules:
        raise CapsuleLoadError(f"{folder}: no capsule loaded from it (is Capsule.toml's [[component]] file built?)")
    return status.capsules[0]
