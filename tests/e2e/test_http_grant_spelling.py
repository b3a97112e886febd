"""The http grant as the issue-36 report tried it: `http = ["127.0.0.1:PORT"]`, the grant `capsule list -v`
suggests, pasted, then a read (tests/fixtures/weather fetches http://127.0.0.1:PORT/today).

One spelling, one meaning, in the manifest, the grant and the check: no scheme
is https, `http://` is plain http. So the suggested grant is the one that
serves what the manifest asks, and a capsule fetching a scheme its manifest
does not ask for is told to fix its manifest, not sent to grant something else.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.host.capabilities.http_server import LoopbackServer, loopback_server
from tests.support.capsules import Built, build_clean
from tests.support.paths import FIXTURES
from tests.support.processes import astrid_exe, server_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def weather(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_clean(FIXTURES / "weather", tmp_path_factory.mktemp("weather") / "weather")


@pytest.fixture
def service() -> Iterator[LoopbackServer]:
    with loopback_server() as running:
        yield running


def asking(weather: Built, entry: str) -> Path:
    """The built weather capsule with `[capabilities] http = [ENTRY]` (read when it loads)."""
    manifest = weather.folder / "Capsule.toml"
    manifest.write_text(re.sub(r"(?m)^http = .*$", f'http = ["{entry}"]', manifest.read_text()))
    return weather.folder


def astrid(*args: str, home: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = server_env(home, ASTRID_CONFIG_DIR=str(config))
    return subprocess.run([astrid_exe(), *args], capture_output=True, text=True, timeout=120, env=env)


def suggested_grant(folder: Path, home: Path, config: Path) -> list[str]:
    """The command `capsule list -v` prints for the http entry, as the operator would paste it."""
    listed = astrid("capsule", "list", "-v", str(folder), home=home, config=config)
    found = re.search(r"  http \S+: not granted \((astrid capsule grant [^)]+)\)", listed.stdout)
    assert found, listed.stdout
    return shlex.split(found.group(1))


def test_the_grant_capsule_list_suggests_serves_the_entry_when_pasted(
    weather: Built, service: LoopbackServer, capsule_home: Path, tmp_path: Path
):
    folder = asking(weather, f"http://127.0.0.1:{service.port}")
    command = suggested_grant(folder, capsule_home, tmp_path)
    assert command == ["astrid", "capsule", "grant", "weather", f"http:http://127.0.0.1:{service.port}"]
    assert astrid(*command[1:], home=capsule_home, config=tmp_path).returncode == 0
    read = astrid(
        "resources",
        "read",
        f"astrid://weather/{service.port}",
        "--capsules",
        str(folder),
        home=capsule_home,
        config=tmp_path,
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout == "hello\n"


def test_an_entry_without_a_scheme_is_https_and_a_plain_http_fetch_names_the_manifest_line(
    weather: Built, service: LoopbackServer, capsule_home: Path, tmp_path: Path
):
    """The report: `http = ["127.0.0.1:PORT"]`, its suggested grant pasted, and the fetch of http://... refused
    asking for yet another grant. Now the refusal says the manifest must ask for http:// first."""
    origin = f"127.0.0.1:{service.port}"
    folder = asking(weather, origin)
    command = suggested_grant(folder, capsule_home, tmp_path)
    assert command[-1] == f"http:{origin}"  # what the entry means: https
    assert astrid(*command[1:], home=capsule_home, config=tmp_path).returncode == 0
    read = astrid(
        "resources",
        "read",
        f"astrid://weather/{service.port}",
        "--capsules",
        str(folder),
        home=capsule_home,
        config=tmp_path,
    )
    assert read.returncode == 1
    assert "Capsule.toml does not ask for it" in read.stderr, read.stderr
    assert f'add "http://{origin}" there' in read.stderr, read.stderr
    assert len([line for line in read.stderr.splitlines() if line.startswith("error: ")]) == 1, read.stderr
    assert service.seen.requests == []  # nothing reached the service
    # A plain-http grant does not stand in for what the manifest asks (https), and the listing says so.
    astrid("capsule", "grant", "weather", f"http:http://{origin}", home=capsule_home, config=tmp_path)
    listed = astrid("capsule", "list", "-v", str(folder), home=capsule_home, config=tmp_path).stdout
    assert f"granted but not asked for (unused): http:http://{origin}" in listed, listed
