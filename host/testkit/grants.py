"""The grants a test gives the capsule under test: written to the test session's own grants file.

Each grant is checked against what the capsule's Capsule.toml asks for first: one it does not ask
for would change nothing, and the test would fail later for a reason it does not name. What the
file holds is bound to the served capsule's identity, as `astrid capsule grant` binds it, and applies
to every principal (a folder holding `{principal}` is one folder per principal, as in a real grant).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from astrid.host.capabilities.asks import Asks
from astrid.host.capabilities.grants import GrantStore
from astrid.host.capabilities.registry import for_spec, named
from astrid.host.errors import GrantError


class KitGrants:
    """Capsule `name`'s grants in the grants file at `path`; `changed()` runs after each change."""

    def __init__(self, path: Path, name: str, identity: str, asks: Asks, changed: Callable[[], None]) -> None:
        self._store = GrantStore(path)
        self._name = name
        self._identity = identity
        self._asks = asks
        self._changed = changed

    def files(self, folder: Path | str, mount: str | None = None) -> str:
        """`folder` as the read-only fs mount `mount` (default: the one mount the manifest asks for)."""
        fs = named("fs")
        assert fs is not None  # a registered capability
        asked = tuple(self._asks.of(fs))
        if mount is None:
            if len(asked) != 1:
                have = f"asks for the mounts {', '.join(asked)}: name one" if asked else "asks for no fs mount"
                raise GrantError(
                    f"grant_files: {self._name}'s Capsule.toml {have} "
                    f'(grant_files(path, mount="files") for `fs = ["files"]` under [capabilities])'
                )
            mount = asked[0]
        return self._grant(f"fs:{mount}={folder}")

    def kv(self) -> str:
        """Durable key-value state, one namespace per principal (it lasts the test session)."""
        return self._grant("kv")

    def http(self, url: str) -> str:
        """Outbound HTTP to the scheme, host and port of `url` (`http://127.0.0.1:8765/...`: plain http there)."""
        parts = urlsplit(url if "://" in url else f"https://{url}")
        if not parts.netloc:
            raise GrantError(f"grant_http({url!r}): give a URL such as http://127.0.0.1:8765")
        prefix = "http://" if parts.scheme == "http" else ""
        return self._grant(f"http:{prefix}{parts.netloc}")

    def clear(self) -> None:
        """Take back every grant (a test's grants end with it)."""
        if self._store.revoke(self._name, "all"):
            self._changed()

    def _grant(self, spec: str) -> str:
        capability = for_spec(spec)
        assert capability is not None  # the specs above name a registered capability
        try:
            grant, canonical = capability.granted(capability.nothing_granted, spec)
        except ValueError as exc:
            raise GrantError(f"grant {spec!r}: {exc}") from None
        if capability.usable(grant, self._asks.of(capability)) == capability.nothing_granted:
            raise GrantError(
                f"{self._name}'s Capsule.toml does not ask for {canonical}, so the grant would change nothing: "
                f"ask for it under [capabilities] (like `{capability.asks_like}`)"
            )
        granted = self._store.grant(self._name, spec, self._identity)
        self._changed()
        return granted
