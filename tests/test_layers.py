"""The layers talk over the bus only: each may import just the layers below it.

The rules (docs/design.md, "Layer rules"):

- `bus` (the interface and the in-memory bus) imports no other layer;
- `contract` (wire models, the topic registry, which topics need
  `bus:request`) builds on the bus only;
- `kernel`, `broker` and `mcp` never import each other, nor the composition
  root (`runtime`) that wires them together;
- `serving` (stdio and HTTP serving, `--workers`, `astrid host run`,
  telemetry and signals) assembles processes from the runtime, the MCP
  server and the rest; no other layer imports it (the CLI does);
- `auth` (principal names, bearer-token sources) imports no other layer, and
  only `mcp` and the composition root may import it;
- `capabilities` (fs, kv, http and the operator's grants) imports no other
  layer; only the kernel, which links them into capsules, and the composition
  root use it;
- `capsule` (what a capsule folder is: its manifest, its provenance,
  finding capsule folders) builds on the bus's topic grammar and the
  capabilities' asks only; the kernel, identity, the build and the CLI read
  capsules through it;
- `identity` (capsule artifacts, signatures, keys, the trust store, OCI
  transfer) reads capsules through `capsule` and imports no other layer (not
  the kernel);
- `telemetry` (spans, metrics, JSON log lines) imports no other layer: the
  layers that say what they do import it;
- `testkit` (`astrid capsule test`: a capsule built and served for pytest)
  sits on the composition root as the CLI does: it imports neither the
  kernel, the broker, the MCP layer, the watchers, the bus, auth nor identity,
  and no layer imports it (the CLI does);
- the foundation modules beside them (errors, limits, tuning, settings,
  version, toolpaths, owner_file, bounded_lru, log_throttle, event_stream,
  connection_guard, addresses) import no layer at all;
- the guest SDK runs inside wasm and imports nothing of the host;
- the CLI (`cli/`) keeps options and printing: no module of it imports the
  kernel, the broker, the MCP layer or the watchers; it asks the composition
  roots what they know (`runtime.CapsuleChecker`: does a capsule folder
  load, and who is it) and has `serving` assemble what it runs;
- module by module: the bus's implementations are the composition root's
  choice. Only the roots (`runtime`, `serving`) import the NATS bus, the package
  `bus.nats` or any of its modules (inside the bus layer, only the
  package's own modules import them), and the layers that talk over the
  bus (`contract`, `broker`, `mcp`) never import the in-memory one: they
  see the interface (`bus.base`, `bus.topics`, the package's names).

Imports inside functions and under TYPE_CHECKING count too: a layer that
needs another one "only lazily" still depends on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HOST = REPO / "host"
SDK = REPO / "capsules" / "sdk"

LAYERS = (
    "bus",
    "capsule",
    "contract",
    "kernel",
    "broker",
    "mcp",
    "build",
    "runtime",
    "watch",
    "auth",
    "capabilities",
    "identity",
    "telemetry",
    "serving",
    "testkit",
)
FORBIDDEN: dict[str, set[str]] = {
    "bus": {
        "capsule",
        "contract",
        "kernel",
        "broker",
        "mcp",
        "build",
        "runtime",
        "watch",
        "auth",
        "capabilities",
        "identity",
    },
    "capsule": {"contract", "kernel", "broker", "mcp", "build", "runtime", "watch", "auth", "identity", "telemetry"},
    "contract": {"capsule", "kernel", "broker", "mcp", "build", "runtime", "watch", "auth", "capabilities", "identity"},
    "kernel": {"broker", "mcp", "build", "runtime", "watch", "auth"},
    "broker": {"capsule", "kernel", "mcp", "build", "runtime", "watch", "auth", "capabilities"},
    "mcp": {"capsule", "kernel", "broker", "build", "runtime", "watch", "capabilities"},
    "build": {"broker", "mcp", "runtime", "watch", "auth", "capabilities"},
    "auth": {"capsule", "kernel", "broker", "mcp", "build", "runtime", "watch", "capabilities", "identity"},
    "capabilities": {
        "bus",
        "capsule",
        "contract",
        "kernel",
        "broker",
        "mcp",
        "build",
        "runtime",
        "watch",
        "auth",
        "identity",
    },
    "identity": {"bus", "contract", "kernel", "broker", "mcp", "build", "runtime", "watch", "auth", "capabilities"},
    "telemetry": set(LAYERS) - {"telemetry"},
    "testkit": {"kernel", "broker", "mcp", "watch", "bus", "auth", "identity"},
    **{
        foundation: set(LAYERS)
        for foundation in (
            "errors",
            "limits",
            "tuning",
            "settings",
            "version",
            "toolpaths",
            "owner_file",
            "bounded_lru",
            "log_throttle",
            "event_stream",
            "connection_guard",
            "addresses",
        )
    },
}

# The process assembly and the test kit sit on top of every layer: none of them imports either (the CLI does).
TOPS = {"serving", "testkit"}
FORBIDDEN = {layer: FORBIDDEN.get(layer, set()) | (TOPS - {layer}) for layer in {*FORBIDDEN, *LAYERS}}


# Modules (not layers) a layer must not import, on top of FORBIDDEN.
NATS_BUS, MEMORY_BUS = "astrid.host.bus.nats", "astrid.host.bus.memory"
FORBIDDEN_MODULES: dict[str, set[str]] = {
    **{layer: {NATS_BUS} for layer in LAYERS if layer not in ("runtime", "serving")},
    **{layer: {NATS_BUS, MEMORY_BUS} for layer in ("contract", "broker", "mcp")},
}


def imported_modules(source: str) -> set[str]:
    """Every absolute module name a source file imports, wherever the import sits."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def host_layer(module: str) -> str | None:
    """`astrid.host.broker.client` -> `broker`; a module outside the host's layers -> None."""
    parts = module.split(".")
    if parts[:2] != ["astrid", "host"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in LAYERS else None


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(layer: str, source: str, module: str = "") -> list[str]:
    """The imports in `source` (`module`, of `layer`) that the rules forbid; a package's own
    modules may import each other."""
    forbidden = FORBIDDEN.get(layer, set())
    modules = {bad for bad in FORBIDDEN_MODULES.get(layer, set()) if not within(module, bad)}
    return sorted(
        m for m in imported_modules(source) if host_layer(m) in forbidden or any(within(m, bad) for bad in modules)
    )


def layer_of(path: Path) -> str:
    relative = path.relative_to(HOST)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def module_name(path: Path) -> str:
    """`host/bus/nats/bus.py` -> `astrid.host.bus.nats.bus`; a package's `__init__.py` -> the package."""
    parts = path.relative_to(HOST).with_suffix("").parts
    return ".".join(("astrid", "host", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def host_modules() -> list[Path]:
    return sorted(HOST.rglob("*.py"))


def test_the_rules_cover_every_layer_folder() -> None:
    folders = {p.name for p in HOST.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(LAYERS), f"a new layer folder needs its rules in {__file__}: {folders - set(LAYERS)}"


@pytest.mark.parametrize("path", host_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_layer_imports_one_it_must_not(path: Path) -> None:
    found = violations(layer_of(path), path.read_text(encoding="utf-8"), module_name(path))
    assert found == [], f"{path.relative_to(REPO)} ({layer_of(path)}) must not import {found}"


@pytest.mark.parametrize("path", sorted(SDK.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_the_guest_sdk_imports_nothing_of_the_host(path: Path) -> None:
    found = sorted(m for m in imported_modules(path.read_text(encoding="utf-8")) if m.split(".")[0] == "astrid")
    assert found == [], f"{path.relative_to(REPO)} runs inside wasm and must not import {found}"


@pytest.mark.parametrize(
    ("layer", "source"),
    [
        ("kernel", "from astrid.host.broker.broker import Broker"),
        ("kernel", "def f():\n    import astrid.host.mcp.server\n"),
        ("broker", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from astrid.host.kernel import kernel\n"),
        ("broker", "from astrid.host import runtime"),
        ("runtime", "from astrid.host.serving.stdio import StdioServing"),
        ("mcp", "from astrid.host.serving import signals"),
        ("mcp", "from astrid.host.broker.client import BrokerClient"),
        ("bus", "from astrid.host.contract.topics import BROKER"),
        ("errors", "from astrid.host.bus import Principal"),
        ("auth", "from astrid.host.mcp.auth import BearerVerifier"),
        ("broker", "from astrid.host.auth import TokenStore"),
        ("telemetry", "from astrid.host.bus import Principal"),
        ("contract", "from astrid.host.bus.nats import ClusterTopics"),
        ("broker", "from astrid.host.bus.memory import InMemoryBus"),
        ("kernel", "import astrid.host.bus.nats"),
        ("kernel", "from astrid.host.bus.nats.membership import Membership"),
        ("mcp", "from astrid.host.bus.nats import subjects"),
        ("bus", "from astrid.host.bus.nats.rounds import ClusterDelivery"),
        ("testkit", "from astrid.host.kernel.kernel import Kernel"),
        ("testkit", "from astrid.host.broker.client import BrokerClient"),
        ("runtime", "from astrid.host.testkit import ServedCapsule"),
        ("serving", "from astrid.host.testkit.plugin import capsule"),
    ],
)
def test_a_forbidden_import_is_caught(layer: str, source: str) -> None:
    assert violations(layer, source) != []


def test_allowed_imports_pass() -> None:
    source = "from astrid.host.bus import Bus\nfrom astrid.host.contract.topics import BROKER\nimport json\n"
    assert violations("broker", source) == []


def test_the_test_kit_builds_grants_and_asks_the_composition_root() -> None:
    source = (
        "from astrid.host.runtime import Runtime\nfrom astrid.host.build.builder import build_capsule\n"
        "from astrid.host.capabilities.grants import GrantStore\n"
    )
    assert violations("testkit", source) == []


def test_only_the_nats_bus_itself_imports_its_modules() -> None:
    source = "from astrid.host.bus.nats.tracking import Tracker\n"
    assert violations("bus", source, "astrid.host.bus.memory") != []
    assert violations("bus", source, "astrid.host.bus.nats.bus") == []
    assert violations("runtime", source, "astrid.host.runtime") == []


# -- the CLI ------------------------------------------------------------------------------------

CLI = REPO / "cli"
# What the CLI must not reach into: it asks the composition roots instead (`runtime`, `serving`).
CLI_FORBIDDEN = ("astrid.host.kernel", "astrid.host.broker", "astrid.host.mcp", "astrid.host.watch")


def cli_violations(source: str) -> list[str]:
    """The kernel, broker, MCP and watcher modules a CLI source file imports."""
    return sorted(m for m in imported_modules(source) if any(within(m, bad) for bad in CLI_FORBIDDEN))


@pytest.mark.parametrize("path", sorted(CLI.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_the_cli_reaches_into_no_layer_the_roots_assemble(path: Path) -> None:
    found = cli_violations(path.read_text(encoding="utf-8"))
    assert found == [], (
        f"{path.relative_to(REPO)} must not import {found}: the CLI keeps options and printing, asks the "
        "composition root (astrid.host.runtime) what the kernel or the broker knows, and has "
        "astrid.host.serving assemble the MCP server"
    )


@pytest.mark.parametrize(
    "source",
    [
        "from astrid.host.kernel.loader import load_capsule\n",
        "def f():\n    from astrid.host.kernel.compile_cache import CompileCache\n",
        "import astrid.host.broker.client\n",
        "from astrid.host.broker import Broker\n",
        "from astrid.host.mcp.server import AstridMcpServer\n",
        "from astrid.host.watch import FolderWatcher\n",
    ],
)
def test_a_cli_import_of_what_the_roots_assemble_is_caught(source: str) -> None:
    assert cli_violations(source) != []


def test_the_cli_may_ask_the_composition_root_and_the_capsule_package() -> None:
    source = (
        "from astrid.host.runtime import CapsuleChecker\nfrom astrid.host.contract.bus_asks import bus_asks\n"
        "from astrid.host.serving.stdio import StdioServing\n"
    )
    assert cli_violations(source) == []
