"""`--metrics`: a running HTTP server's Prometheus endpoint, scraped after real traffic, and `astrid status`.

A real `astrid mcp serve --http` with `--metrics 127.0.0.1:0`, a real MCP
client (the Python SDK's), real capsules; the scrape is parsed with
prometheus-client's own parser, and the counters must have moved exactly as
the traffic says.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import MCPError
from prometheus_client.parser import text_string_to_metric_families

from astrid.capsules import CAPSULES_DIR
from tests.support.capsules import build_clean
from tests.support.http import http_server, http_session
from tests.support.processes import astrid_exe, run_astrid, server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

METRICS_LINE = re.compile(r"metrics: (http://\S+/metrics) ")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("metrics")
    return {name: build_clean(CAPSULES_DIR / name, root / name).folder for name in ("docs", "introspect")}


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample of one scrape: (name, sorted labels) -> value, parsed by prometheus-client."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def metrics_url(log: str) -> str:
    found = METRICS_LINE.search(log)
    assert found, f"no metrics line in the banner:\n{log}"
    return found.group(1)


async def test_the_counters_move_as_the_traffic_says(built, capsule_home, tmp_path) -> None:
    with http_server(
        built["docs"],
        built["introspect"],
        capsule_home=capsule_home,
        token_dir=tmp_path,
        extra=("--metrics", "127.0.0.1:0"),
    ) as served:
        url = metrics_url(served.log())
        assert url.startswith("http://127.0.0.1:")
        before = scrape(url)
        assert value(before, "astrid_capsules_loaded") == 2
        assert value(before, "astrid_requests_total", method="resources/read", status="ok") == 0

        token = served.add_token("alice")
        async with http_session(served.url, token) as session:
            with anyio.fail_after(30):
                for _ in range(2):
                    await session.list_resources()
                for _ in range(3):
                    await session.read_resource("astrid://whoami")
                with pytest.raises(MCPError) as missing:
                    await session.read_resource("astrid://nowhere/at-all")
            during = scrape(url)
        async with httpx2.AsyncClient(timeout=30) as http:  # a wrong token: one failed login
            refused = await http.post(
                served.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"Accept": "application/json, text/event-stream", "Authorization": "Bearer wrong-SECRET"},
            )
        assert refused.status_code == 401
        after = scrape(url)

    code = str(missing.value.error.code)
    assert value(after, "astrid_requests_total", method="resources/read", status="ok") == 3
    assert value(after, "astrid_requests_total", method="resources/read", status=code) == 1
    assert value(after, "astrid_requests_total", method="resources/list", status="ok") == 2
    assert value(after, "astrid_request_duration_seconds_count", method="resources/read") == 4
    assert value(after, "astrid_request_duration_seconds_sum", method="resources/read") > 0
    assert value(after, "astrid_http_auth_failures_total") == 1
    # the introspect capsule answered the three reads (and the describe rounds); its time is counted
    assert value(after, "astrid_guest_calls_total", capsule="introspect", status="ok") >= 3
    assert value(after, "astrid_guest_call_seconds_count", capsule="introspect") >= 3
    assert value(after, "astrid_sandboxes_live") >= 1
    assert value(after, "astrid_principals") >= 1
    # the second list is answered from the snapshot the first one made
    assert value(after, "astrid_cache_lookups_total", cache="snapshot", result="hit") >= 1
    # sessions per principal: counted while open (read mid-traffic), gone once the client left
    assert value(during, "astrid_sessions", principal="alice") == 1
    assert value(after, "astrid_sessions", principal="alice") == 0
    # low cardinality: no URI, token or payload is ever a label value
    labels = {v for (_, pairs) in after for (_, v) in pairs}
    assert not [v for v in labels if "astrid://" in v or "SECRET" in v or token in v]
    assert value(after, "process_start_time_seconds") > 0  # the process collector is there too
    assert not [name for name, _ in after if name.endswith("_created")]  # no creation-time twin of each series


async def test_a_stdio_server_serves_metrics_too(built, capsule_home, tmp_path) -> None:
    """No HTTP front door, no event loop of its own: the metrics listener runs on its threads."""
    async with stdio_session(
        built["introspect"],
        capsule_home=capsule_home,
        stderr=tmp_path / "stderr.log",
        extra=("--metrics", "127.0.0.1:0"),
    ) as served:
        url = metrics_url(served.log())
        for _ in range(2):
            assert "alice" in await served.text("astrid://whoami")
        after = await anyio.to_thread.run_sync(scrape, url)
    assert value(after, "astrid_requests_total", method="resources/read", status="ok") == 2
    assert value(after, "astrid_capsules_loaded") == 1


async def test_astrid_status_summarises_a_running_server(built, capsule_home, tmp_path) -> None:
    with http_server(
        built["docs"], capsule_home=capsule_home, token_dir=tmp_path, extra=("--metrics", "127.0.0.1:0")
    ) as served:
        url = metrics_url(served.log())
        token = served.add_token("alice")
        async with http_session(served.url, token) as session:
            with anyio.fail_after(30):
                for _ in range(5):
                    await session.read_resource("astrid://docs/index")
                with pytest.raises(MCPError):
                    await session.read_resource("astrid://docs/missing")
            # the port alone is enough: the host defaults to 127.0.0.1
            port = url.split(":")[2].split("/")[0]
            done = await anyio.to_thread.run_sync(
                lambda: run_astrid("status", "--metrics", port, "--interval", "0.2", cwd=tmp_path)
            )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith(f"astrid at {url}, up ")
    assert "capsules:   1 loaded, 1 sandbox live, 0 quarantined" in out
    assert re.search(r"principals: 1 served, 1 session open", out), out
    assert re.search(r"requests:   \d+\.\d/s over the last 0\.\d s \(\d+ since start\)", out), out
    assert re.search(r"latency:    p50 \d+\.\d ms, p99 \d+\.\d ms \(since start\)", out), out
    assert re.search(r"errors:     0\.0/s over the last 0\.\d s; 1 since start \(-32002: 1\)", out), out


def test_astrid_status_says_when_nothing_serves_metrics(tmp_path) -> None:
    from tests.support.processes import free_port

    done = run_astrid("status", "--metrics", f"127.0.0.1:{free_port()}", "--interval", "0.1", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot read metrics at http://127.0.0.1:")
    assert "is `astrid mcp serve --metrics [HOST:]PORT` running?" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("address", ["0.0.0.0:9464", "10.1.2.3:9464", "[::]:9464", "example.com:9464"])
def test_the_metrics_listener_refuses_a_non_loopback_bind(built, capsule_home, tmp_path, address) -> None:
    done = subprocess.run(
        [astrid_exe(), "mcp", "serve", "--http", "127.0.0.1:0", "--metrics", address, "--no-auth"]
        + ["--capsules", str(built["docs"])],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(capsule_home),
    )
    assert done.returncode == 1
    assert f"error: --metrics {address}: refusing to serve metrics on a non-loopback address" in done.stderr
    assert "or add --metrics-public" in done.stderr


def test_metrics_public_allows_it_and_is_refused_alone() -> None:
    from astrid.cli.errors import UserError
    from astrid.cli.observe import Observability
    from astrid.host.telemetry import metrics

    Observability(False, "0.0.0.0:9464", True, "text", service="astrid")  # asked for: accepted (nothing bound yet)
    with pytest.raises(UserError, match="--metrics-public goes with --metrics"):
        Observability(False, None, True, "text", service="astrid")
    with pytest.raises(PermissionError, match="not a loopback address"):
        metrics.serve("0.0.0.0", 0)  # the library refuses too, not only the CLI
    listener = metrics.serve("::1" if _has_ipv6_loopback() else "127.0.0.1", 0)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(listener.url, timeout=5) as response:
                    assert b"astrid_requests_total" in response.read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        listener.close()
        metrics.disable()


def _has_ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False
