"""The required wasmtime-py fixes: always installed, refused loudly on another wasmtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from wasmtime.component import _linker
from wasmtime.component import _types as T

from astrid.host.bus import Principal
from astrid.host.errors import AstridError
from astrid.host.kernel import fastpath, wasmtime_patches
from astrid.host.kernel.abi import HostAbi
from astrid.host.kernel.engine import WasmEngine
from astrid.host.kernel.wasmtime_patches import WasmtimeVersionError

from .conftest import client_for

REPO = Path(__file__).resolve().parents[3]
ALICE = Principal.verified("alice")

# Run in a fresh process: the patches are process-global. Loads the probe,
# checks that a call through the patched lowering and trampoline works, and
# what a raising host import does, then reports what is installed.
IN_A_FRESH_PROCESS = """
import json, sys
from pathlib import Path
from wasmtime.component import _linker
from wasmtime.component import _types as T
from astrid.host.bus import Principal
from astrid.host.kernel import fastpath, wasmtime_patches
from astrid.host.kernel.abi import HostAbi
from astrid.host.kernel.kernel import Kernel, KernelConfig

probe, cache_dir, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
raising = mode != "plain"
class Escape(BaseException):
    pass
if raising:
    def get_caller(self, store):
        raise RuntimeError("boom") if mode == "raising" else Escape("boom")
    HostAbi._get_caller = get_caller
kernel = Kernel(KernelConfig(capsule_paths=[probe], cache_dir=cache_dir))
kernel.start()
client = kernel.attach_host("c", publish=["probe.*"], subscribe=["test.*"])
with kernel.bus.subscribe(client, "test.whoami") as who:
    kernel.bus.publish(client, "probe.whoami", "{}", Principal.verified("alice")).wait(5)
    reply = who.recv(0.5 if raising else 2)
health = kernel.sandboxes.health("probe")
kernel.close()
print(json.dumps({
    "reply": json.loads(reply.payload) if reply is not None else None,
    "last_error": health.last_error,
    "patched_lowering": T.VariantLikeType._lower is wasmtime_patches._lower,
    "trampoline": "fast" if _linker.func_impl is fastpath._fast_func_impl
        else "patched" if _linker.func_impl is wasmtime_patches.host_call else "stock",
    "fastpath": fastpath._installed,
}))
"""


def run_fresh(probe: Path, cache_dir: Path, *, no_fastpath: bool, raising: str = "plain") -> dict:
    """`raising`: "plain", or get-caller raises ("raising": a RuntimeError, "raising-base": a BaseException)."""
    env = {k: v for k, v in os.environ.items() if k != fastpath.DISABLE_ENV}
    if no_fastpath:
        env[fastpath.DISABLE_ENV] = "1"
    args = [sys.executable, "-c", IN_A_FRESH_PROCESS, str(probe), str(cache_dir), raising]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_patches_install_on_the_pinned_wasmtime() -> None:
    assert wasmtime_patches.installed_version() == wasmtime_patches.EXPECTED_VERSION == "50.0.1"
    wasmtime_patches.install()
    wasmtime_patches.install()  # idempotent
    assert wasmtime_patches.installed()
    assert T.VariantLikeType._lower is wasmtime_patches._lower
    # the fast path's trampoline replaces the plain one, and keeps its exception fix
    assert _linker.func_impl in (wasmtime_patches.host_call, fastpath._fast_func_impl)


def test_another_wasmtime_is_refused_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wasmtime_patches, "installed_version", lambda: "51.0.0")
    with pytest.raises(WasmtimeVersionError) as refused:
        wasmtime_patches.install()
    message = str(refused.value)
    assert "astrid needs wasmtime==50.0.1" in message and "51.0.0" in message
    assert "pip install wasmtime==50.0.1" in message
    assert isinstance(refused.value, AstridError) and isinstance(refused.value, RuntimeError)
    # where the engine is set up, too (already installed or not)
    with pytest.raises(WasmtimeVersionError):
        WasmEngine()
    with pytest.raises(WasmtimeVersionError):
        fastpath.install()


def test_another_wasmtime_stops_a_fresh_kernel_before_anything_is_patched(tmp_path: Path) -> None:
    script = """
import json
from wasmtime.component import _linker
from wasmtime.component import _types as T
from astrid.host.kernel import wasmtime_patches
from astrid.host.kernel.kernel import Kernel, KernelConfig
stock = (_linker.func_impl, T.VariantLikeType._lower)
wasmtime_patches.installed_version = lambda: "49.0.0"
try:
    Kernel(KernelConfig(cache_dir=__import__("pathlib").Path(__import__("sys").argv[1])))
except wasmtime_patches.WasmtimeVersionError as exc:
    print(json.dumps({"refused": str(exc), "untouched": stock == (_linker.func_impl, T.VariantLikeType._lower)}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "astrid needs wasmtime==50.0.1" in report["refused"] and "49.0.0" in report["refused"]
    assert report["untouched"]


def test_no_fastpath_still_installs_the_correctness_patches(make_probe, component_cache_dir: Path) -> None:
    report = run_fresh(make_probe(), component_cache_dir, no_fastpath=True)
    assert report["reply"] == "alice"
    assert report["patched_lowering"] and report["trampoline"] == "patched"
    assert report["fastpath"] is False


def test_with_the_fastpath_its_trampoline_is_used(make_probe, component_cache_dir: Path) -> None:
    report = run_fresh(make_probe(), component_cache_dir, no_fastpath=False)
    assert report["reply"] == "alice"
    assert report["patched_lowering"] and report["trampoline"] == "fast"
    assert report["fastpath"] is True


@pytest.mark.parametrize("no_fastpath", [True, False], ids=["plain-trampoline", "fast-trampoline"])
def test_a_raising_host_import_traps_only_its_guest(make_probe, component_cache_dir: Path, no_fastpath: bool) -> None:
    # Stock wasmtime-py parks the exception module-globally and re-raises the
    # RuntimeError itself on whichever thread next leaves wasm with an error;
    # patched, it is a trap of this guest's call that names it.
    report = run_fresh(make_probe(), component_cache_dir, no_fastpath=no_fastpath, raising="raising")
    assert report["reply"] is None
    assert "host call failed: RuntimeError: boom" in report["last_error"]


@pytest.mark.parametrize("no_fastpath", [True, False], ids=["plain-trampoline", "fast-trampoline"])
def test_a_base_exception_in_a_host_import_traps_only_its_guest(
    make_probe, component_cache_dir: Path, no_fastpath: bool
) -> None:
    # A BaseException that escaped the ctypes callback would leave the import's
    # result unwritten (and can abort the process): it is a trap like any other.
    report = run_fresh(make_probe(), component_cache_dir, no_fastpath=no_fastpath, raising="raising-base")
    assert report["reply"] is None
    assert "host call failed: Escape: boom" in report["last_error"]


def test_a_raising_host_import_is_a_trap_of_its_guest_in_this_process(make_probe, kernel_factory, monkeypatch) -> None:
    def get_caller(self: HostAbi, store: object) -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(HostAbi, "_get_caller", get_caller)
    kernel = kernel_factory([make_probe()])
    client = client_for(kernel)
    assert kernel.bus.publish(client, "probe.whoami", "{}", ALICE).wait(5)
    health = kernel.sandboxes.health("probe")
    assert health.failures == 1 and "host call failed: RuntimeError: boom" in (health.last_error or "")


class _SharedSetUsed(set):
    def clear(self) -> None:
        raise AssertionError("lowered through wasmtime-py's module-global case set")


def test_variants_are_lowered_without_the_module_global_case_set(make_probe, kernel_factory, monkeypatch) -> None:
    # get-caller returns an untagged result<caller-context, string>: stock
    # lowering would clear and refill `case_test_cache`, which threads share.
    monkeypatch.setattr(T, "case_test_cache", _SharedSetUsed())
    kernel = kernel_factory([make_probe()])
    client = client_for(kernel)
    with kernel.bus.subscribe(client, "test.whoami") as who:
        assert kernel.bus.publish(client, "probe.whoami", "{}", ALICE).wait(5)
        reply = who.recv(2)
    assert reply is not None and json.loads(reply.payload) == "alice", kernel.sandboxes.health("probe")
