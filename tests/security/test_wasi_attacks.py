"""WASI, deny by default: a capsule written against the raw bindings (no SDK to soften anything)
reaches no file, environment variable, argument, input, process or socket of the host, and no clock
finer than the documented 1 ms, through the standard library or the WASI functions themselves.

The hostile capsule's WASI-linked build (`hostile_wasm_path(stub_wasi=False)`) runs its `wasi`
mode: each attempt's result goes into a JSON report. The control attempts (random bytes, print)
must work, so a refusal is the defence and not a dead capsule. The table of what the host serves
is checked too: every socket and file function traps, creating a socket is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astrid.host.kernel import wasi
from tests.security.hostile import make_hostile

SECRET = "TOP-SECRET-ENVIRONMENT"


@pytest.fixture
def report(tmp_path: Path, hostile_wasi_wasm: Path, serve, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("ASTRID_TEST_SECRET", SECRET)  # in the host's environment: must not reach the capsule
    folder = make_hostile(tmp_path / "capsules", "wasi", "wasi", hostile_wasi_wasm)
    (folder / "secret.txt").write_text(SECRET)  # beside the capsule's own files: not reachable either
    served = serve(folder)
    return json.loads(served.text("astrid://wasi/wasi", "alice"))


def test_nothing_of_the_host_is_reachable_through_wasi(report: dict[str, str]) -> None:
    assert report["random"] == "ok:32" and report["print"] == "ok:None"  # the controls work
    for attempt in ("open-passwd", "open-proc-environ", "open-relative", "write-tmp", "list-root", "list-here"):
        assert report[attempt].startswith(("raised FileNotFoundError", "raised OSError")), (attempt, report[attempt])
    assert report["environ"] == "ok:{}" and report["argv"] == "ok:[]" and report["stdin"] == "ok:"
    assert report["cwd"].startswith("raised") or report["cwd"] == "ok:/"  # no working folder to name
    for attempt in ("socket-tcp", "socket-udp", "socket-lookup"):  # CPython's own _socket, on WASI sockets
        assert report[attempt].startswith(("raised PermissionError", "raised OSError", "raised gaierror")), (
            attempt,
            report[attempt],
        )
    assert report["process"].startswith("raised")
    assert SECRET not in json.dumps(report), report


def test_no_clock_is_finer_than_a_millisecond(report: dict[str, str]) -> None:
    assert report["clock-sub-ms"] == "ok:[0]"  # 4,000 readings of both clocks, all whole milliseconds
    assert report["clock-resolution"] == "ok:[0.001, 0.001]"


def test_every_file_and_socket_function_traps_and_sockets_are_refused() -> None:
    served = wasi.WasiHost(log=lambda *args: None, time_left=lambda store: 0.0)._served()
    for interface in wasi.INTERFACES:
        for function in interface.functions:
            if interface.name.startswith(("wasi:sockets/tcp", "wasi:sockets/udp")) and function.startswith("[method]"):
                assert (interface.name, function) not in served and wasi.DENIED[function] == wasi.NO_SOCKETS
            if interface.name == "wasi:filesystem/types" and function.startswith("[method]"):
                assert (interface.name, function) not in served and wasi.DENIED[function] == wasi.NO_FILES
    for creating in (
        ("wasi:sockets/tcp-create-socket", "create-tcp-socket"),
        ("wasi:sockets/udp-create-socket", "create-udp-socket"),
    ):
        assert served[creating](None, "ipv4") == "access-denied"
    assert served[("wasi:filesystem/preopens", "get-directories")](None) == []
    assert served[("wasi:cli/environment", "get-environment")](None) == []


@pytest.mark.parametrize("version", ["0.2.0", "0.2.9", "0.2.12"])
def test_a_wasi_import_of_any_served_release_is_accepted(version: str) -> None:
    assert wasi.wasi_import_problem(f"wasi:clocks/wall-clock@{version}", ["now"]) is None
