"""The stdio wire's bytes, over real pipes and files: lines read on the event loop where the fd
allows it, short lines written on it, and a worker thread for everything else."""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from astrid.host.mcp.stdio_wire import INLINE_WRITE_BYTES, InputStop, WireLines, WireWriter

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(os.name == "nt", reason="POSIX pipes")]


@pytest.fixture
def thread_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many worker-thread hand-offs (`anyio.to_thread.run_sync`) were made."""
    calls: Counter[str] = Counter()
    original = anyio.to_thread.run_sync

    async def counted(function, *args, **kwargs):
        calls["to_thread"] += 1
        return await original(function, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    return calls


async def _collect(lines: WireLines) -> list[str]:
    return [line async for line in lines]


async def _lines_from_a_pipe(chunks: list[bytes], pause_s: float = 0.0) -> tuple[list[str], WireLines]:
    """What `WireLines` reads from a pipe a client thread writes `chunks` into, then closes."""
    read_fd, write_fd = os.pipe()
    lines = WireLines(read_fd)

    def client() -> None:
        for chunk in chunks:
            os.write(write_fd, chunk)
            time.sleep(pause_s)
        os.close(write_fd)

    writer = threading.Thread(target=client)
    writer.start()
    try:
        return await _collect(lines), lines
    finally:
        writer.join()
        lines.close()


async def test_lines_from_a_pipe_are_read_on_the_loop_however_the_bytes_arrive(thread_calls) -> None:
    chunks = [b'{"a": 1}\n{"b"', b": 2}\r\n", '{"c": "\u00e9"}\n'.encode(), b"\xff broken\n", b'{"last": true}']
    got, lines = await _lines_from_a_pipe(chunks, pause_s=0.02)  # each chunk a read of its own
    assert got == ['{"a": 1}\n', '{"b": 2}\r\n', '{"c": "\u00e9"}\n', "\ufffd broken\n", '{"last": true}']
    assert lines.on_loop is True
    assert thread_calls["to_thread"] == 0


async def test_a_long_line_arrives_whole_however_many_reads_it_takes() -> None:
    long = '{"params": "' + "y" * 300_000 + '"}\n'
    data = (long + '{"next": 1}\n').encode()
    got, _ = await _lines_from_a_pipe([data[start : start + 4096] for start in range(0, len(data), 4096)])
    assert got == [long, '{"next": 1}\n']


async def test_a_regular_file_cannot_be_watched_and_is_read_on_a_thread(tmp_path: Path, thread_calls) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(b'{"a": 1}\n{"b": 2}\r\n{"c": 3}')
    fd = os.open(requests, os.O_RDONLY)
    lines = WireLines(fd, InputStop())
    try:
        got = await _collect(lines)
    finally:
        lines.close()
    assert got == ['{"a": 1}\n', '{"b": 2}\r\n', '{"c": 3}']
    assert lines.on_loop is False
    assert thread_calls["to_thread"] > 0


async def test_a_stop_ends_the_input_of_a_quiet_pipe_at_once() -> None:
    read_fd, write_fd = os.pipe()
    stop = InputStop()
    lines = WireLines(read_fd, stop)
    os.write(write_fd, b'{"read": "before the stop"}\n')
    threading.Timer(0.1, stop.request).start()
    try:
        with anyio.fail_after(5):  # the client never closes its end
            got = await _collect(lines)
    finally:
        lines.close()
        os.close(write_fd)
        stop.close()
    assert got == ['{"read": "before the stop"}\n']


async def test_short_lines_to_a_pipe_are_written_on_the_loop_and_long_ones_on_a_thread(thread_calls) -> None:
    read_fd, write_fd = os.pipe()
    writer = WireWriter(write_fd)
    writer._capacity = 0  # as where the pipe's capacity cannot be known (not Linux)
    short = '{"id": 1}\n'
    long = '{"id": 2, "blob": "' + "x" * (2 * INLINE_WRITE_BYTES) + '"}\n'
    received = bytearray()

    def client() -> None:
        while chunk := os.read(read_fd, 65536):
            received.extend(chunk)

    reader = threading.Thread(target=client)
    reader.start()
    try:
        await writer.write(short)
        assert (writer.inline_writes, thread_calls["to_thread"]) == (1, 0)
        await writer.write(long)
        await writer.write(short)
        assert (writer.inline_writes, thread_calls["to_thread"]) == (2, 1)
    finally:
        writer.close()
        reader.join()
        os.close(read_fd)
    assert received.decode() == short + long + short


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe capacity and FIONREAD are Linux's")
async def test_a_long_line_to_an_empty_pipe_that_holds_it_is_written_on_the_loop(thread_calls) -> None:
    read_fd, write_fd = os.pipe()
    writer = WireWriter(write_fd)
    blob = '{"id": 2, "blob": "' + "x" * 87_000 + '"}\n'  # a 64 KiB blob's line: more than a default pipe holds
    assert writer._capacity >= len(blob), "the wire could not raise the pipe's capacity"
    try:
        await writer.write(blob)  # the pipe is empty: on the loop
        assert (writer.inline_writes, thread_calls["to_thread"]) == (1, 0)
        await writer.write(blob)  # the client has not read the first: a worker thread waits for room
        assert (writer.inline_writes, thread_calls["to_thread"]) == (1, 1)
        received = bytearray()
        while len(received) < 2 * len(blob):
            received.extend(os.read(read_fd, 1 << 20))
        await writer.write(blob)  # drained: on the loop again
        assert (writer.inline_writes, thread_calls["to_thread"]) == (2, 1)
        received.extend(os.read(read_fd, 1 << 20))
    finally:
        writer.close()
        os.close(read_fd)
    assert received.decode() == blob * 3


async def test_a_client_that_stops_reading_never_stalls_the_loop() -> None:
    read_fd, write_fd = os.pipe()
    writer = WireWriter(write_fd)  # first: it may raise the pipe's capacity
    _fill(write_fd)
    ticks = 0
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.write, '{"id": 1}\n')  # the pipe is full: this one has to wait

            for _ in range(5):  # the loop goes on meanwhile
                await anyio.sleep(0.02)
                ticks += 1
            assert writer.inline_writes == 0
            drained = bytearray()
            while not drained.endswith(b'{"id": 1}\n'):  # the client reads again: the line arrives whole
                drained.extend(await anyio.to_thread.run_sync(os.read, read_fd, 1 << 20))
    finally:
        writer.close()
        os.close(read_fd)
    assert ticks == 5


def _fill(write_fd: int) -> None:
    """Fill the pipe to the brim (the writer then blocks until its reader reads)."""
    blocking = os.get_blocking(write_fd)
    os.set_blocking(write_fd, False)
    try:
        while True:
            os.write(write_fd, b"." * 4096)
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(write_fd, blocking)
    poller = select.poll()
    poller.register(write_fd, select.POLLOUT)
    assert poller.poll(0) == []


async def test_a_descriptor_someone_made_non_blocking_still_gets_every_line_whole() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # as a parent sharing the pipe might leave it
    _fill(write_fd)
    writer = WireWriter(write_fd)
    lines = ['{"id": 1}\n', '{"id": 2, "blob": "' + "z" * 200_000 + '"}\n']
    drained = bytearray()
    try:
        async with anyio.create_task_group() as tg:

            async def write_both() -> None:
                for line in lines:
                    await writer.write(line)

            tg.start_soon(write_both)
            expected_end = lines[-1].encode()[-64:]
            while not drained.endswith(expected_end):
                drained.extend(await anyio.to_thread.run_sync(os.read, read_fd, 1 << 20))
    finally:
        writer.close()
        os.close(read_fd)
    assert drained.endswith("".join(lines).encode())
