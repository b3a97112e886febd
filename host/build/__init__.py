"""Building capsules: a toolchain per language (Python: componentize-py), a content-hash build cache,
and scaffolding."""

from astrid.host.build.builder import (
    BUILD_CACHE_ENV,
    BuildError,
    BuildResult,
    build_capsule,
    default_build_cache_dir,
)
from astrid.host.build.python_toolchain import ENTRY_MODULE, content_hash
from astrid.host.build.scaffold import ScaffoldError, scaffold_capsule
from astrid.host.build.toolchain import Toolchain, toolchain_for

__all__ = [
    "BUILD_CACHE_ENV",
    "ENTRY_MODULE",
    "BuildError",
    "BuildResult",
    "ScaffoldError",
    "build_capsule",
    "content_hash",
    "default_build_cache_dir",
    "scaffold_capsule",
    "Toolchain",
    "toolchain_for",
]
