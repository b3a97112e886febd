"""Issue 20: print() and sys.stdout/sys.stderr in a capsule are lines in the host's log (the SDK's side, fast).

The SDK's streams, driven on the host's CPython with a recording host, as
`Capsule.dispatch` drives them in the guest. test_printing.py runs the same
through a real componentize-py build and the kernel.
"""

from __future__ import annotations

import io
import json
import linecache
import sys

import pytest

from astrid_sdk import Capsule, _output
from astrid_sdk._output import MAX_BYTES_PER_CALL, MAX_LINE_BYTES, MAX_LINES_PER_CALL, CapsuleOutput
from tests.capsules.test_sdk_native import RecordingHost


def install(monkeypatch: pytest.MonkeyPatch) -> tuple[CapsuleOutput, CapsuleOutput, io.StringIO, io.StringIO]:
    """`_output.install()` over fresh call state, with stand-ins for the interpreter's streams.

    Called in the test's body: pytest resets sys.stdout between a test's
    phases. Everything it changes (sys, linecache) is restored after the test.
    """
    monkeypatch.setattr(_output, "_CALL", _output._Call())
    build_out, build_err = io.StringIO(), io.StringIO()
    for name in ("__stdout__", "__stderr__"):
        monkeypatch.setattr(sys, name, getattr(sys, name))
    monkeypatch.setattr(linecache, "checkcache", linecache.checkcache)
    monkeypatch.setattr(linecache, "updatecache", linecache.updatecache)
    monkeypatch.setattr(sys, "stdout", build_out)
    monkeypatch.setattr(sys, "stderr", build_err)
    _output.install()
    assert isinstance(sys.stdout, CapsuleOutput) and isinstance(sys.stderr, CapsuleOutput)
    return sys.stdout, sys.stderr, build_out, build_err


def call(host: RecordingHost, body) -> None:
    _output.begin(host)
    try:
        body()
    finally:
        _output.end()


def test_install_replaces_both_streams_and_the_originals(monkeypatch):
    out, err, _, _ = install(monkeypatch)
    assert isinstance(out, CapsuleOutput) and isinstance(err, CapsuleOutput)
    assert sys.__stdout__ is out and sys.__stderr__ is err
    assert out.name == "<stdout>" and out.encoding == "utf-8" and not out.isatty()
    with pytest.raises(io.UnsupportedOperation):
        out.fileno()
    _output.install()  # idempotent
    assert sys.stdout is out


def test_at_build_time_output_goes_to_the_interpreter_streams(monkeypatch):
    _, _, build_out, build_err = install(monkeypatch)
    print("top level")
    print("top level, stderr", file=sys.stderr)
    assert build_out.getvalue() == "top level\n" and build_err.getvalue() == "top level, stderr\n"


def test_in_a_call_each_line_is_a_log_line_stdout_info_stderr_warn(monkeypatch):
    _, _, build_out, _ = install(monkeypatch)
    host = RecordingHost()

    def body():
        print("hello", "world")
        print("a\nb", end="")  # "b" waits for the rest of its line
        print("to stderr", file=sys.stderr)
        sys.stdout.buffer.write(b"bytes\r\n")
        sys.stdout.writelines(["x", "y\n"])

    call(host, body)
    assert host.logs == [
        ("info", "hello world"),
        ("info", "a"),
        ("warn", "to stderr"),
        ("info", "bbytes"),  # the partial "b", then the bytes (a \r\n ends a line too)
        ("info", "xy"),
    ]
    assert build_out.getvalue() == ""  # nothing reached the interpreter's stream


def test_after_the_build_output_outside_a_call_is_dropped_not_written(monkeypatch):
    _, _, build_out, _ = install(monkeypatch)
    call(RecordingHost(), lambda: None)
    print("outside any call")  # cannot happen in the guest; must not reach the trapping stream
    assert build_out.getvalue() == ""


def test_a_long_line_is_cut_and_the_excess_reported_once(monkeypatch):
    install(monkeypatch)
    host = RecordingHost()
    call(host, lambda: print("x" * 10_000))
    (level, line), (report_level, report) = host.logs
    assert level == "info" and line.endswith("…") and len(line.encode()) <= MAX_LINE_BYTES
    assert report_level == "info" and "output cut" in report
    assert f"{10_000 - (MAX_LINE_BYTES - 3)} more bytes (0 lines)" in report


def test_a_call_logs_at_most_the_caps_then_one_report(monkeypatch):
    install(monkeypatch)
    host = RecordingHost()

    def body():
        print("y" * 1_000_000)
        for number in range(1000):
            print("line", number)
        print("z" * 100, file=sys.stderr)

    call(host, body)
    lines, (report_level, report) = host.logs[:-1], host.logs[-1]
    assert len(lines) == MAX_LINES_PER_CALL
    assert sum(len(text.encode()) for _, text in lines) <= MAX_BYTES_PER_CALL
    assert report_level == "warn"  # stderr was cut too
    assert "output cut" in report and f"({1000 + 2 - MAX_LINES_PER_CALL} lines)" in report
    # the next call has a budget of its own
    again = RecordingHost()
    call(again, lambda: print("fresh"))
    assert again.logs == [("info", "fresh")]


def test_the_byte_budget_ends_logging_before_the_line_budget(monkeypatch):
    install(monkeypatch)
    host = RecordingHost()
    call(host, lambda: [print("w" * 4000) for _ in range(40)])
    lines = [text for _, text in host.logs if not text.startswith("output cut")]
    assert len(lines) == MAX_BYTES_PER_CALL // 4000
    assert "output cut" in host.logs[-1][1]


def test_odd_text_never_raises(monkeypatch):
    install(monkeypatch)
    host = RecordingHost()

    def body():
        print("lone surrogate \ud800 and ☃")
        sys.stdout.close()
        print("after close")
        sys.stdout.flush()

    call(host, body)
    assert host.logs == [("info", "lone surrogate ? and ☃"), ("info", "after close")]
    with pytest.raises(TypeError):
        sys.stdout.write(b"bytes to a text stream")  # as any text stream refuses them


def test_a_host_that_fails_never_breaks_print(monkeypatch):
    install(monkeypatch)

    class Refusing(RecordingHost):
        def log(self, level, message):
            raise RuntimeError("the host refused the log line")

    call(Refusing(), lambda: print("lost, quietly"))


def test_dispatch_sends_a_handler_s_prints_to_the_host_log(monkeypatch):
    install(monkeypatch)
    capsule = Capsule("printer")

    @capsule.resource("astrid://printer/a", mime_type="text/plain")
    def printed(ctx):
        print("read by", ctx.principal)
        print("half a line", end="")
        return "ok"

    host = RecordingHost()
    outcome = capsule.dispatch("read", json.dumps({"uri": "astrid://printer/a", "correlation_id": "c-1"}), host)
    assert outcome == ("final", None)
    assert host.logs == [("info", "read by alice"), ("info", "half a line")]


def test_when_serving_linecache_reads_no_file(monkeypatch, tmp_path):
    install(monkeypatch)
    source = tmp_path / "module.py"
    source.write_text("first line\n")
    assert linecache.getline(str(source), 1) == "first line\n"  # the build may read sources
    linecache.clearcache()
    call(RecordingHost(), lambda: None)  # from the first call on: no file (it would trap in the guest)
    assert linecache.getline(str(source), 1) == ""
    linecache.checkcache(str(source))  # no stat either
