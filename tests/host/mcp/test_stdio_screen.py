"""The line screen in front of the SDK's stdio transport."""

from __future__ import annotations

import pytest

from astrid.host.mcp.stdio import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, screen


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
