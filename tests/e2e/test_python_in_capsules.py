"""Ordinary Python in a capsule, through a real MCP client over stdio (issue 36, item 1).

The host links WASI deny-by-default (host/kernel/wasi.py): a handler's
`time.time()`, `datetime.now()`, `random`, `uuid4()`, `time.sleep` and
`print` work, at the documented 1 ms clock resolution; `open()`,
`os.environ[...]` and sockets raise an exception that names what to use
instead, reported with the capsule's file and line, which the client sees; a
handler that never returns is stopped at its window and the client is told so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp import MCPError

from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

APP = Path(__file__).resolve().parent / "capsules" / "pythonic" / "app.py"


def line_of(text: str) -> int:
    """The line of app.py holding `text`: what an error must point at."""
    for number, line in enumerate(APP.read_text(encoding="utf-8").splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} is not in {APP}")


async def refusal(session, uri: str) -> MCPError:
    with pytest.raises(MCPError) as caught, anyio.fail_after(60):
        await session.read_resource(uri)
    return caught.value


async def test_the_standard_library_works_and_what_is_missing_says_so(capsules, capsule_home, stderr_file) -> None:
    async with stdio_session(capsules["pythonic"], capsule_home=capsule_home, stderr=stderr_file) as served:
        session = served.session
        with anyio.fail_after(60):
            read = await session.read_resource("astrid://pythonic/everyday")
        opened = await refusal(session, "astrid://pythonic/open")
        environ = await refusal(session, "astrid://pythonic/environ")
        socket = await refusal(session, "astrid://pythonic/socket")
        spin = await refusal(session, "astrid://pythonic/spin")
        hoard = await refusal(session, "astrid://pythonic/hoard")

    (chunk,) = read.contents
    assert isinstance(chunk, types.TextResourceContents)
    everyday = json.loads(chunk.text)
    assert abs(everyday["time"] - time.time()) < 600  # the host's wall clock, not a baked-in one
    assert everyday["now"][:4].isdigit() and len(everyday["uuid4"]) == 36 and 0 <= everyday["random"] < 1
    assert everyday["slept_s"] >= 0.04  # time.sleep waits
    # the documented resolution: 1 ms, for the wall clock and the monotonic one alike
    assert everyday["time_ns"] % 1_000_000 == 0
    assert all(ns % 1_000_000 == 0 for ns in everyday["monotonic_ns"])
    log = stderr_file.read_text()
    assert "[pythonic] everyday: a warning line" in log  # stderr: the capsule's log, at warn

    assert "open('/etc/hostname'): a capsule has no file system: read files with ctx.fs" in opened.error.message
    assert f"(app.py:{line_of('with open(')} in opened)" in opened.error.message
    assert "'HOME': a capsule has no environment variables" in environ.error.message
    assert f"(app.py:{line_of('os.environ[')} in environ)" in environ.error.message
    assert "socket.create_connection: a capsule has no sockets: reach the network with ctx.http" in socket.error.message
    assert f"(app.py:{line_of('socket.create_connection')} in connect)" in socket.error.message
    assert "ran past its 2 s read window and was stopped" in spin.error.message
    assert "MemoryError: exceeded 64 MiB, the sandbox's memory limit" in hoard.error.message
    assert f"(app.py:{line_of('bytearray(512')} in hoard)" in hoard.error.message
    for refused in (opened, environ, socket, spin, hoard):  # the same words in the error's data, for clients showing it
        assert refused.error.data["detail"] == refused.error.message
