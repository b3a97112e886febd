"""Both ways `astrid:fs` resolves a path beneath a mount, for tests that must hold for each."""

from __future__ import annotations

import pytest

from astrid.host.capabilities.fs import openat2_available

# use_openat2=True: the kernel's openat2 RESOLVE_BENEATH; False: the O_NOFOLLOW walk
RESOLVERS = [
    pytest.param(True, id="openat2", marks=pytest.mark.skipif(not openat2_available(), reason="no openat2 here")),
    pytest.param(False, id="walk"),
]
