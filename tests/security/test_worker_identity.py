"""A signed capsule keeps to its namespaces whichever process hosts it (issue 34, finding 2).

The finding: a signed capsule with `namespaces = ["astrid://evil/"]`, installed in the capsule home and
served with `astrid mcp serve --workers 2`, was unknown to the front end, which took it for unsigned:
its own `astrid://evil/ok` was dropped as "outside the URI namespaces" while `astrid://outside/planted`,
outside every namespace it claims, was listed and served to every principal. In one process the same
capsule was held to its namespace. Now each worker announces the signature record of every signed
capsule it runs and the front end verifies it against its own trust store: one trust decision, and the
same answers with and without workers.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.security.hostile import make_hostile
from tests.support.processes import astrid_exe, server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OWN, PLANTED = "astrid://evil/ok", "astrid://outside/planted"


def _astrid(config: Path, home: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ASTRID_CONFIG_DIR": str(config), "ASTRID_CAPSULE_HOME": str(home)}
    done = subprocess.run(
        [astrid_exe(), *map(str, args)], capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, f"astrid {' '.join(map(str, args))}:\n{done.stderr}"
    return done


@pytest.fixture
def installed_squatter(tmp_path: Path, hostile_wasm: Path) -> tuple[Path, Path]:
    """A capsule that claims `astrid://evil/` and lists a URI outside it too (and answers its reads),
    signed by publisher `evil`, trusted and installed into an empty capsule home: (config dir, home)."""
    folder = make_hostile(tmp_path / "src", "evil", "squat", hostile_wasm, base="astrid://evil/", target=PLANTED)
    manifest = folder / "Capsule.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('name = "evil"\n', 'name = "evil"\nnamespaces = ["astrid://evil/"]\n', 1))
    config, home = tmp_path / "config", tmp_path / "home"
    home.mkdir()
    artifact = tmp_path / "evil-1.0.0.capsule"
    _astrid(config, home, "key", "new", "evil")
    public = _astrid(config, home, "key", "show", "evil").stdout.strip()
    _astrid(config, home, "capsule", "pack", folder, "-o", artifact)
    _astrid(config, home, "capsule", "sign", artifact, "--key", "evil")
    _astrid(config, home, "trust", "add", public, "--publisher", "evil")
    _astrid(config, home, "capsule", "install", artifact, "--yes")
    return config, home


@pytest.mark.parametrize("workers", [None, "2"], ids=["one-process", "two-workers"])
async def test_a_signed_capsule_serves_only_inside_its_namespaces_whichever_process_hosts_it(
    installed_squatter, tmp_path, workers
) -> None:
    config, home = installed_squatter
    log = tmp_path / "serve.log"
    extra = ("--workers", workers) if workers else ()
    env = server_env(home, ASTRID_CONFIG_DIR=str(config))
    async with stdio_session(capsule_home=home, stderr=log, extra=extra, env=env, init_timeout_s=120) as served:
        uris = await served.uris()
        assert OWN in uris, served.log()  # its own namespace: it is who its signature says
        assert PLANTED not in uris, served.log()  # outside it: never, in any process
        assert await served.text(OWN) == "hostile ok for alice"
        refused = await served.error(PLANTED)
        assert "SQUATTED" not in str(refused)
    assert "SQUATTED" not in log.read_text()
