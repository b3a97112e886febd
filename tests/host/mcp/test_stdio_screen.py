"""The line screen in front of the SDK's stdio transport."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from astrid.host.mcp.stdio import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, _Pending, inspect_line
from astrid.host.toolpaths import tool_path
from tests.support.jsonrpc import initialize_request


def screen(line: str) -> dict | None:
    """The error response the screen gives a raw line, or None when it passes it on."""
    return inspect_line(line)[0]


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc":"2.0","id":1,"method":"ping"}',
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":"x","method":"resources/read","params":{"uri":"a://b"}}',
        '{"jsonrpc":"2.0","id":3,"result":{}}',
        "   ",
    ],
)
def test_well_formed_lines_pass(line: str) -> None:
    assert screen(line) is None


@pytest.mark.parametrize(
    "line, request_id, code",
    [
        ("not json", None, PARSE_ERROR),
        ("[" * 100_000, None, PARSE_ERROR),
        ("[]", None, INVALID_REQUEST),
        ('[{"jsonrpc":"2.0","id":1,"method":"ping"}]', None, INVALID_REQUEST),
        ('"text"', None, INVALID_REQUEST),
        ('{"jsonrpc":"1.0","id":7,"method":"ping"}', 7, INVALID_REQUEST),
        ('{"jsonrpc":"2.0","id":"m","method":5}', "m", INVALID_REQUEST),
        ('{"jsonrpc":"2.0","id":true,"method":5}', None, INVALID_REQUEST),
        ('{"jsonrpc":"2.0","id":"p","method":"x","params":[1]}', "p", INVALID_PARAMS),
    ],
)
def test_malformed_lines_get_the_json_rpc_error(line: str, request_id, code: int) -> None:
    answer = screen(line)
    assert answer is not None
    assert (answer["id"], answer["error"]["code"]) == (request_id, code)


@pytest.mark.parametrize("stdin", ["pipe", "file"])
def test_requests_read_before_end_of_input_are_all_answered(tmp_path, stdin: str) -> None:
    """`printf '...' | astrid mcp serve` (read on the event loop) and `astrid mcp serve < requests`
    (a file the loop cannot watch: read on a thread): stdin ends right after the requests;
    the answers still come, then it exits."""
    requests = [
        initialize_request("pipe"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "resources/list"},
        {"jsonrpc": "2.0", "id": "three", "method": "resources/read", "params": {"uri": "astrid://nobody/here"}},
        {"jsonrpc": "2.0", "id": 4, "method": "resources/templates/list"},
    ]
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "ASTRID_CAPSULE_HOME": str(home)}
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    command = [tool_path("astrid"), "mcp", "serve", "--principal", "alice"]
    if stdin == "pipe":
        done = subprocess.run(command, input=lines, capture_output=True, text=True, env=env, timeout=60)
    else:
        (tmp_path / "requests.jsonl").write_text(lines)
        with open(tmp_path / "requests.jsonl") as requests_file:
            done = subprocess.run(command, stdin=requests_file, capture_output=True, text=True, env=env, timeout=60)
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
    assert set(answers) == {1, 2, "three", 4}, done.stderr
    assert answers[2]["result"]["resources"] == []
    assert answers["three"]["error"]["code"] == -32002
    assert done.returncode == 0


def test_pending_requests_are_settled_by_their_answer_or_their_cancellation() -> None:
    pending = _Pending()
    pending.read({"jsonrpc": "2.0", "id": 5, "method": "resources/list"})
    pending.read({"jsonrpc": "2.0", "id": 'a"b', "method": "resources/read", "params": {"uri": "x"}})
    pending.read({"jsonrpc": "2.0", "id": 6, "method": "ping"})
    pending.read({"jsonrpc": "2.0", "method": "notifications/initialized"})  # no id: nothing to wait for
    pending.read({"jsonrpc": "2.0", "id": 9, "result": {}})  # the client answering us: not a request
    assert pending.ids == {5, 'a"b', 6}
    pending.written('{"jsonrpc":"2.0","id":5,"result":{"resources":[]}}\n')
    pending.written('{"jsonrpc":"2.0","id":"a\\"b","error":{"code":-32002,"message":"m"}}\n')
    pending.written('{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}\n')
    assert pending.ids == {6}
    pending.read({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [6]}})  # junk
    pending.read({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 6}})
    assert pending.ids == set()
