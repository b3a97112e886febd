"""The deadline and the minimum rate of a registry transfer (`host/identity/oci_deadline.py`), in process.

The registries are real loopback servers that stall on purpose (`tests/support/slow_registry.py`);
the limits are made small by swapping the tuning the module reads, or by the user's variables.
The install through the CLI is attacked in `tests/security/test_registry_trickle.py`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from astrid.host.identity import oci, oci_deadline
from astrid.host.tuning import IDENTITY_TUNING
from tests.support.slow_registry import SlowRegistry


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No developer's ASTRID_OCI_* nor ~/.docker/config.json reaches a test."""
    monkeypatch.delenv(oci_deadline.DEADLINE_ENV, raising=False)
    monkeypatch.delenv(oci_deadline.MIN_RATE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


def tuned(monkeypatch: pytest.MonkeyPatch, **changes: float) -> None:
    monkeypatch.setattr(oci_deadline, "IDENTITY_TUNING", replace(IDENTITY_TUNING, **changes))


def refused(call, bound_s: float) -> str:
    """The one line `call` fails with, and it must fail within `bound_s`."""
    started = time.monotonic()
    with pytest.raises(oci.OciError) as failed:
        call()
    took = time.monotonic() - started
    message = str(failed.value)
    assert took < bound_s, f"took {took:.1f} s: {message}"
    assert "\n" not in message and "Traceback" not in message, message
    return message


def no_watchdog_left() -> bool:
    return not any(thread.name.startswith("astrid-oci-") for thread in threading.enumerate())


# -- the settings ------------------------------------------------------------------------------------


def test_the_defaults_are_the_tuning_and_the_variables_override_them() -> None:
    defaults = oci_deadline.TransferLimits.from_env({})
    assert (defaults.deadline_s, defaults.min_rate, defaults.rate_window_s) == (300, 8192, 60)
    assert defaults.allowance_s(8192 * 10) == 10
    chosen = oci_deadline.TransferLimits.from_env({"ASTRID_OCI_DEADLINE": "1800", "ASTRID_OCI_MIN_RATE": "0"})
    assert (chosen.deadline_s, chosen.min_rate) == (1800, 0)
    assert chosen.allowance_s(10**9) == 0  # no minimum rate: no allowance either


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ASTRID_OCI_DEADLINE", "soon"),
        ("ASTRID_OCI_DEADLINE", "0"),
        ("ASTRID_OCI_DEADLINE", "-5"),
        ("ASTRID_OCI_DEADLINE", "inf"),
        ("ASTRID_OCI_MIN_RATE", "nan"),
        ("ASTRID_OCI_MIN_RATE", "-1"),
        ("ASTRID_OCI_MIN_RATE", "8k"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(name: str, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    message = refused(lambda: oci.pull("oci://127.0.0.1:9/notes:1.0"), bound_s=5)
    assert message.startswith(f"oci://127.0.0.1:9/notes:1.0: {name}={value!r} is not a number of "), message
    assert "fix it or unset it" in message


# -- the minimum rate ------------------------------------------------------------------------------------


def test_a_trickle_behind_a_huge_declared_size_is_cut_by_the_minimum_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 MiB declared: at 1000 bytes/s that earns a deadline of days; the rate check ends it in a window
    tuned(monkeypatch, oci_min_rate_bytes_per_s=1000, oci_rate_window_s=1)
    blob = b"x" * 4096
    with SlowRegistry(blob, "blob-body", pace_s=0.1, declared_size=200 * 1024 * 1024) as registry:
        message = refused(lambda: oci.pull(registry.ref()), bound_s=20)
    assert message.startswith(f"{registry.ref()}: the registry sent "), message
    assert "(receiving the body of GET /v2/notes/blobs/sha256:" in message
    assert "under the minimum rate of 1000 bytes/s; for a slow link, lower it with ASTRID_OCI_MIN_RATE=" in message
    assert no_watchdog_left()


def test_a_minimum_rate_of_zero_leaves_only_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    tuned(monkeypatch, oci_rate_window_s=1)
    monkeypatch.setenv("ASTRID_OCI_MIN_RATE", "0")
    monkeypatch.setenv("ASTRID_OCI_DEADLINE", "2")
    with SlowRegistry(b"x" * 4096, "blob-body", pace_s=0.1, declared_size=200 * 1024 * 1024) as registry:
        started = time.monotonic()
        message = refused(lambda: oci.pull(registry.ref()), bound_s=20)
    assert time.monotonic() - started >= 2  # not the rate (a window is 1 s): the deadline
    assert "the pull did not finish within its deadline of 2 s (receiving the body of GET" in message, message


def test_a_stall_shorter_than_the_window_passes_and_a_longer_one_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 bytes every 0.05 s (4000 bytes/s), with one pause halfway; the minimum is 200 bytes/s over 2 s
    tuned(monkeypatch, oci_min_rate_bytes_per_s=200, oci_rate_window_s=2)
    blob = bytes(range(256)) * 16  # 4096 bytes
    with SlowRegistry(blob, "blob-body", pace_s=0.05, piece=200, pause_s=1.2) as registry:
        assert oci.pull(registry.ref()).data == blob
    with SlowRegistry(blob, "blob-body", pace_s=0.05, piece=200, pause_s=60) as registry:
        message = refused(lambda: oci.pull(registry.ref()), bound_s=20)
    assert "under the minimum rate of 200 bytes/s" in message, message


# -- the deadline ---------------------------------------------------------------------------------------


def test_the_deadline_grows_with_the_declared_size_of_the_artifact(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1 s alone would cut this 3072-byte blob (~1.5 s to arrive); its size at 200 bytes/s adds 15 s
    tuned(monkeypatch, oci_deadline_s=1, oci_min_rate_bytes_per_s=200, oci_rate_window_s=2)
    blob = bytes(range(256)) * 12
    with SlowRegistry(blob, "blob-body", pace_s=0.05, piece=100) as registry:
        assert oci.pull(registry.ref()).data == blob
    monkeypatch.setenv("ASTRID_OCI_MIN_RATE", "0")  # no rate: no allowance, so 1 s is the whole deadline
    with SlowRegistry(blob, "blob-body", pace_s=0.05, piece=100) as registry:
        message = refused(lambda: oci.pull(registry.ref()), bound_s=15)
    assert "did not finish within its deadline of 1 s (receiving the body of GET /v2/notes/blobs/" in message


@pytest.mark.parametrize(
    ("stall", "doing"),
    [
        ("manifest-headers", "waiting for the answer to GET /v2/notes/manifests/1.0"),
        ("silent", "waiting for the answer to GET /v2/"),
    ],
)
def test_headers_that_never_end_and_a_silent_registry_meet_the_deadline(
    stall: str, doing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASTRID_OCI_DEADLINE", "1")
    with SlowRegistry(b"x" * 100, stall) as registry:
        message = refused(lambda: oci.pull(registry.ref()), bound_s=15)
    assert message == (
        f"{registry.ref()}: the pull did not finish within its deadline of 1 s ({doing}); "
        "for a slow registry or link, allow more with ASTRID_OCI_DEADLINE=SECONDS"
    )
    assert no_watchdog_left()


def test_a_push_has_the_deadline_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASTRID_OCI_DEADLINE", "1")
    with SlowRegistry(b"", "silent") as registry:
        message = refused(lambda: oci.push(b"x" * 8192, registry.ref()), bound_s=15)
    assert message.startswith(f"{registry.ref()}: the push did not finish within its deadline of 1 s + 1.0 s for 8192")
    assert "(waiting for the answer to GET /v2/)" in message


def test_the_message_never_shows_a_query() -> None:
    """An upload's location carries the registry's session state in its query: not for a log line."""
    limits = oci_deadline.TransferLimits(deadline_s=0.05, min_rate=0, rate_window_s=1)
    with oci_deadline.Transfer(limits, "push") as transfer:
        transfer.requesting("PUT", "http://127.0.0.1:5000/v2/notes/blobs/uploads/u1?_state=SECRET&digest=sha256:0")
        transfer._watchdog.join(5)
    assert transfer.broken is not None and "PUT /v2/notes/blobs/uploads/u1)" in transfer.broken
    assert "SECRET" not in transfer.broken
    with pytest.raises(oci_deadline.TooSlow):
        transfer.check()


def test_a_request_that_fails_as_the_deadline_passes_failed_of_the_deadline() -> None:
    """A silent registry times the read out (capped at the time left) before the watchdog wakes:
    the failure is still the deadline's, not "did not answer in time"."""
    limits = oci_deadline.TransferLimits(deadline_s=0.2, min_rate=0, rate_window_s=1)
    transfer = oci_deadline.Transfer(limits, "pull")  # not entered: no watchdog, as if it had not woken yet
    transfer.requesting("GET", "http://127.0.0.1:5000/v2/")
    assert transfer.failed() is None  # early: a failure now is not the limits'
    time.sleep(0.25)
    why = transfer.failed()
    assert why is not None and "did not finish within its deadline of 0.2 s (waiting for the answer to GET /v2/)" in why
