"""The seam between a capsule's language and the build: one `Toolchain` per language.

The build (`builder.py`) does what every capsule needs, whatever its language:
the manifest, the build cache by content hash, the compile, the manifest
check and the static replies asked of the built component (the reserved
actions every capsule answers: docs/contract/reserved-actions.md), and the
install into place. A toolchain does the rest, for its language:

- `detects(folder)`: is the folder written in this language (its entry file
  is there)?
- `prepare(folder, ...)`: check the sources (a syntax error as `file:line`),
  fetch what they pin, and hash every input of the build; the `Prepared` it
  returns builds the component (`componentize`), failing in one line that
  points at the author's file and line.

`TOOLCHAINS` lists them in the order they are tried; `toolchain_for` picks
one. Python (componentize-py), then JavaScript/TypeScript (componentize-js).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from astrid.host.build.steps import Progress
from astrid.host.capsule.manifest import Manifest
from astrid.host.errors import BuildError


class Prepared(Protocol):
    """A capsule folder checked and hashed by its toolchain, ready to build."""

    @property
    def content_hash(self) -> str:
        """sha256 over every input of the build (sources, SDK, WIT, pinned packages, tool, flags)."""
        ...

    def componentize(self, out: Path, cache: Path, progress: Progress | None) -> None:
        """Build the component into `out` (in the build cache `cache`); BuildError in one line."""
        ...


class Toolchain(Protocol):
    language: str  # "python": what `astrid capsule build` and messages call it
    entry: str  # the file an author writes first ("app.py"); messages name it

    def detects(self, folder: Path) -> bool:
        """Is `folder` a capsule in this language?"""
        ...

    def language_of(self, folder: Path) -> str:
        """The language of the capsule in `folder` as a person names it ("TypeScript"), for messages."""
        ...

    def missing(self, folder: Path) -> str:
        """What `folder` lacks to be a capsule in this language, and how to start one (for an error)."""
        ...

    def prepare(
        self, folder: Path, manifest: Manifest, *, exclude: tuple[Path, ...], cache: Path, progress: Progress | None
    ) -> Prepared:
        """Check the sources and fetch what they pin (BuildError in one line); `exclude`: the build's
        own output, never an input."""
        ...


def toolchains() -> tuple[Toolchain, ...]:
    """The toolchains, in the order they are tried."""
    from astrid.host.build.js_toolchain import JS
    from astrid.host.build.python_toolchain import PYTHON  # here: a module per language, loaded when asked

    return (PYTHON, JS)


def toolchain_for(folder: Path) -> Toolchain:
    """The toolchain of the capsule in `folder`; a BuildError saying what each language would need."""
    found = toolchains()
    for toolchain in found:
        if toolchain.detects(folder):
            return toolchain
    raise BuildError("; or ".join(toolchain.missing(folder) for toolchain in found))
