"""Issue 20: a capsule that prints keeps serving, and its output is in the host's log.

A real componentize-py build of tests/fixtures/printing, served by a real
kernel: print(), sys.stdout, sys.stderr (also `.buffer`), a printed
traceback and a Python warning are lines of the `astrid.capsule` log, named
`[printing]` (stdout at INFO, stderr at WARNING); 1 MB of output is cut to
the per-call caps with one line saying so; nothing traps.
"""

from __future__ import annotations

import logging

import pytest

from astrid.host.contract import ReadResponse
from astrid.host.contract.resource import TextChunk
from tests.support.busclient import Client
from tests.support.capsules import Built, build_clean
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.slow
BASE = "astrid://printing/"
CAPSULE_LOG = "astrid.capsule"


@pytest.fixture(scope="module")
def built_printing(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_clean(FIXTURES / "printing", tmp_path_factory.mktemp("printing") / "printing")


@pytest.fixture(scope="module")
def kernel(kernel_for, built_printing):
    return kernel_for(built_printing.folder)


@pytest.fixture(scope="module")
def client(kernel) -> Client:
    return Client(kernel)


def read_text(client: Client, uri: str) -> str:
    reply = ReadResponse.model_validate(client.read(uri))
    assert reply.error is None, reply.error
    chunk = reply.contents[0]
    assert isinstance(chunk, TextChunk)
    return chunk.text


def capsule_lines(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == CAPSULE_LOG and (level is None or r.levelno == level)]


@pytest.fixture
def capsule_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=CAPSULE_LOG)
    return caplog


def no_trap(kernel) -> None:
    health = kernel.sandboxes.health("printing")
    assert health.failures == 0, health.last_error


def test_print_in_a_handler_is_an_info_line_of_the_capsule_log(kernel, client, capsule_log):
    assert read_text(client, BASE + "print") == "printed"
    assert capsule_lines(capsule_log, logging.INFO) == [
        "[printing] hello from print, alice",
        "[printing] two",
        "[printing] lines",
    ]
    no_trap(kernel)


def test_stderr_is_a_warning_and_a_partial_line_is_logged_at_the_end(kernel, client, capsule_log):
    assert read_text(client, BASE + "stderr") == "wrote to stderr"
    assert capsule_lines(capsule_log, logging.WARNING) == [
        "[printing] to stderr via print",
        "[printing] a partial stderr line",
    ]
    assert capsule_lines(capsule_log, logging.INFO) == ["[printing] bytes to stdout"]
    no_trap(kernel)


def test_a_megabyte_of_output_is_cut_to_the_caps_and_said_once(kernel, client, capsule_log):
    discarded = kernel.sandboxes.stats.instances_discarded
    assert read_text(client, BASE + "mega") == "still serving after 1 MB of output"
    lines = capsule_lines(capsule_log)
    reports = [line for line in lines if "output cut" in line]
    assert len(reports) == 1 and "lines) of print/stdout/stderr not logged" in reports[0]
    printed = [line for line in lines if "output cut" not in line]
    assert len(printed) == 256  # the SDK's line cap per call
    assert printed[0].endswith("…") and len(printed[0].encode()) <= len("[printing] ") + 4096
    assert sum(len(line.encode()) for line in printed) <= 64 * 1024 + 256 * len("[printing] ")
    assert kernel.sandboxes.stats.instances_discarded == discarded
    assert read_text(client, BASE + "print") == "printed"  # the same instance serves on
    no_trap(kernel)


def test_a_printed_traceback_and_a_warning_reach_the_log(kernel, client, capsule_log):
    assert read_text(client, BASE + "traceback") == "a traceback, printed"
    warnings = capsule_lines(capsule_log, logging.WARNING)
    assert any("UserWarning: a Python warning" in line for line in warnings), warnings
    assert "[printing] Traceback (most recent call last):" in warnings
    assert "[printing] ValueError: caught and printed" in warnings
    no_trap(kernel)


def test_control_characters_are_escaped_and_odd_text_does_not_trap(kernel, client, capsule_log):
    assert read_text(client, BASE + "odd") == "odd output survived"
    first, after_close = capsule_lines(capsule_log, logging.INFO)
    assert "\x1b" not in first and "\\x1b[31mred\\x1b[0m" in first
    assert "a lone surrogate ? and ☃" in first
    assert after_close == "[printing] printed after close"
    no_trap(kernel)


def test_output_before_a_failure_is_logged_and_the_failure_is_a_read_error(kernel, client, capsule_log):
    reply = ReadResponse.model_validate(client.read(BASE + "then-raise"))
    assert reply.error is not None and "RuntimeError: failed after printing (app.py:" in reply.error
    assert "[printing] printed before the failure" in capsule_lines(capsule_log, logging.INFO)
    no_trap(kernel)


def test_the_host_keeps_a_bounded_log_per_call(kernel, client, capsule_log):
    from astrid.host.kernel.abi import LOG_LINES_PER_CALL

    assert read_text(client, BASE + "flood") == "flooded"
    lines = capsule_lines(capsule_log)
    floods = [line for line in lines if line.startswith("[printing] flood ")]
    assert len(floods) == LOG_LINES_PER_CALL
    notes = [line for line in lines if "the rest of this call's log is dropped" in line]
    assert len(notes) == 1
    # the next call has its own budget
    capsule_log.clear()
    assert read_text(client, BASE + "print") == "printed"
    assert "[printing] hello from print, alice" in capsule_lines(capsule_log)


def test_the_build_baked_the_sdk_streams_in(client):
    assert read_text(client, BASE + "streams") == "CapsuleOutput/CapsuleOutput"
