"""The bundled capsules, and building capsules through the content-hash caches.

`tests/conftest.py` points the build cache (`ASTRID_BUILD_CACHE_DIR`) and the
compile cache (`ASTRID_CACHE_DIR`) at `.cache/`, so only the first run on a
machine pays for a componentize-py build (~8 s) or a compile (~5 s).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from astrid.host.build import BuildResult, build_capsule
from tests.support.files import clean_copy

# The capsules shipped in capsules/, in the order the tests index them (docs first).
BUNDLED = ("docs", "introspect")
# What they list for any principal.
BUNDLED_URIS = {
    "astrid://docs/index",
    "astrid://docs/logo.png",
    "astrid://docs/tour",
    "astrid://whoami",
    "astrid://capsules",
    "astrid://host",
}


@dataclass
class Built:
    folder: Path
    result: BuildResult


def build_clean(source: Path, target: Path) -> Built:
    """`source` copied clean to `target` and built there with `astrid capsule build`'s code path."""
    folder = clean_copy(source, target)
    return Built(folder, build_capsule(folder))


def build_cache_dir() -> Path:
    """The build cache the tests share (created if missing), for builds outside `build_capsule`."""
    path = Path(os.environ["ASTRID_BUILD_CACHE_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path
