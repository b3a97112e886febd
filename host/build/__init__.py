"""Building capsules: componentize-py with a content-hash build cache, and scaffolding."""

from astrid.host.build.builder import (
    BUILD_CACHE_ENV,
    ENTRY_MODULE,
    BuildError,
    BuildResult,
    build_capsule,
    content_hash,
    default_build_cache_dir,
)
from astrid.host.build.scaffold import ScaffoldError, scaffold_capsule

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
]
