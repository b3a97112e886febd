"""Bad MCP input on a real stdio session with `astrid mcp serve`, written as raw JSON-RPC lines.

One server serves the whole module (that it survives every test is part of
the point); each test ends with a valid request that must still be answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.security.hostile import make_hostile
from tests.security.mcp_stdio import TRACEBACK, RawServer, raw_server

pytestmark = pytest.mark.slow

NOT_FOUND_2025 = -32002
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
PARSE_ERROR = -32700


@pytest.fixture(scope="module")
def server(bundled, tmp_path_factory) -> Iterator[RawServer]:
    tmp = tmp_path_factory.mktemp("raw")
    home = tmp / "home"
    home.mkdir()
    served = raw_server(*bundled, home=home, stderr_path=tmp / "stderr.log", extra=("--no-watch",))
    served.initialize()
    yield served
    assert served.close() == 0
    assert not TRACEBACK.search(served.stderr()), served.stderr()


def still_serving(server: RawServer) -> None:
    reply = server.request("resources/read", {"uri": "astrid://docs/index"})
    assert reply["result"]["contents"][0]["text"].startswith("# ")
    assert server.process.poll() is None


def error_for(server: RawServer, line: str | bytes, request_id: object) -> dict:
    server.send(line)
    reply, _ = server.until_id(request_id)
    assert "error" in reply, reply
    return reply["error"]


# -- answered with the right error -------------------------------------------------------------


def test_unknown_methods_are_method_not_found(server):
    calls = (
        (101, "no/such/method", {}),
        # logging/setLevel: not offered (resources/subscribe is: docs/contract/subscriptions.md §11)
        (102, "logging/setLevel", {"level": "info"}),
        (103, "tools/call", {"name": "x", "arguments": {}}),
        (104, "prompts/get", {"name": "x"}),
    )
    for request_id, method, params in calls:
        error = error_for(
            server, json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}), request_id
        )
        assert error["code"] == METHOD_NOT_FOUND, (method, error)
    still_serving(server)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("resources/read", {"uri": 42}),
        ("resources/read", {"uri": None}),
        ("resources/read", {}),
        ("resources/read", {"uri": ["astrid://docs/index"]}),
        ("resources/list", {"cursor": 5}),
        ("resources/list", {"cursor": "not-ours"}),
    ],
)
def test_wrong_param_types_are_invalid_params(server, method, params):
    request_id = f"{method}-{json.dumps(params)}"
    error = error_for(
        server, json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}), request_id
    )
    assert error["code"] == INVALID_PARAMS
    still_serving(server)


@pytest.mark.parametrize(
    "uri",
    [
        "astrid://docs/../etc/passwd",
        "astrid://docs/%2e%2e/%2e%2e/etc/passwd",
        "astrid://docs/index/../../introspect",
        "astrid://docs/index\u0000",
        "astrid://docs/\u0000../whoami",
        "file:///etc/passwd",
        "astrid://",
        "\u202eastrid://docs/index",
    ],
)
def test_traversal_nul_and_foreign_uris_are_not_found(server, uri):
    request_id = f"uri-{uri!r}"
    error = error_for(
        server,
        json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "resources/read", "params": {"uri": uri}}),
        request_id,
    )
    assert error["code"] == NOT_FOUND_2025 and error["data"]["uri"] == uri
    still_serving(server)


def test_non_utf8_bytes_in_a_uri_are_not_found(server):
    line = b'{"jsonrpc":"2.0","id":"bytes","method":"resources/read","params":{"uri":"astrid://docs/\xff\xfe\xc0\xaf"}}'
    error = error_for(server, line, "bytes")
    assert error["code"] == NOT_FOUND_2025
    still_serving(server)


@pytest.mark.parametrize("size", [3_000, 200_000, 3_000_000])
def test_huge_uris_are_refused_as_over_a_limit(server, size):
    uri = "astrid://docs/" + "x" * size
    request_id = f"huge-{size}"
    error = error_for(
        server,
        json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "resources/read", "params": {"uri": uri}}),
        request_id,
    )
    assert error["code"] == INTERNAL_ERROR  # docs/contract/resources.md §5.6: over a limit is -32603
    still_serving(server)


# -- ignored, and the session goes on -----------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"   ",
        b"this is not json",
        b"{",
        b"[1, 2, 3]",
        b"[]",
        b"null",
        b'"just a string"',
        b"\xff\xfe\xfd",
        b'{"jsonrpc": "2.0", "method": "notifications/bogus", "params": {"x": 1}}',
        b'{"jsonrpc": "2.0", "id": "stray", "result": {}}',
        b'{"jsonrpc": "2.0", "id": null, "method": "resources/list"}',
        b"[" * 100_000 + b"]" * 100_000,
        b"x" * 5_000_000,
    ],
    ids=lambda line: repr(line[:24]),
)
def test_junk_lines_never_stop_the_session(server, line):
    server.send(line)
    server.send({"jsonrpc": "2.0", "id": "after-junk", "method": "ping"})
    reply, before = server.until_id("after-junk")
    assert reply["result"] == {}
    # whatever came back for the junk is a JSON-RPC error, never a result
    assert all("result" not in message for message in before), before
    still_serving(server)


# -- requests that carry an id must be answered -------------------------------------------------------


def test_a_parse_error_is_answered_with_minus_32700(server):
    server.send(b"this is not json")
    server.send({"jsonrpc": "2.0", "id": "after-parse-error", "method": "ping"})
    _, before = server.until_id("after-parse-error")
    assert any(m.get("id") is None and m.get("error", {}).get("code") == PARSE_ERROR for m in before), before


@pytest.mark.parametrize(
    ("line", "request_id", "codes"),
    [
        (
            '{"jsonrpc":"2.0","id":"p-str","method":"resources/read","params":"nope"}',
            "p-str",
            {INVALID_REQUEST, INVALID_PARAMS},
        ),
        (
            '{"jsonrpc":"2.0","id":"p-arr","method":"resources/read","params":[1,2]}',
            "p-arr",
            {INVALID_REQUEST, INVALID_PARAMS},
        ),
        ('{"jsonrpc":"2.0","id":"m-int","method":5}', "m-int", {INVALID_REQUEST}),
        ('{"jsonrpc":"1.0","id":"v1","method":"resources/list"}', "v1", {INVALID_REQUEST}),
    ],
    ids=["params-string", "params-array", "method-int", "jsonrpc-1.0"],
)
def test_a_malformed_request_with_an_id_is_answered(server, line, request_id, codes):
    server.send(line)
    server.send({"jsonrpc": "2.0", "id": f"after-{request_id}", "method": "ping"})
    _, before = server.until_id(f"after-{request_id}")
    answers = [m for m in before if m.get("id") == request_id]
    assert answers and answers[0].get("error", {}).get("code") in codes, before


# -- session lifecycle ---------------------------------------------------------------------------------


def test_requests_before_initialize_are_refused_and_initialize_still_works(bundled, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    served = raw_server(*bundled, home=home, stderr_path=tmp_path / "stderr.log", extra=("--no-watch",))
    try:
        early = served.request("resources/read", {"uri": "astrid://docs/index"}, request_id="early-read")
        assert "error" in early
        early = served.request("resources/list", request_id="early-list")
        assert "error" in early
        assert served.request("ping", request_id="early-ping")["result"] == {}
        init = served.initialize()
        # subscribe: offered since resource subscriptions (docs/contract/subscriptions.md §11)
        assert init["result"]["capabilities"]["resources"] == {"listChanged": True, "subscribe": True}
        assert served.request("resources/read", {"uri": "astrid://docs/index"})["result"]["contents"]
        # a second initialize does not break the session
        served.initialize()
        assert served.request("resources/list")["result"]["resources"]
    finally:
        code = served.close()
    assert code == 0
    assert not TRACEBACK.search(served.stderr()), served.stderr()


def test_a_client_that_disconnects_mid_read_leaves_a_clean_exit(bundled, hostile_wasm, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    spinner = make_hostile(tmp_path / "caps", "spinner", "spin", hostile_wasm)
    served = raw_server(bundled[0], spinner, home=home, stderr_path=tmp_path / "stderr.log")
    try:
        served.initialize()
        assert served.request("resources/list")["result"]["resources"]
        served.send(
            {"jsonrpc": "2.0", "id": "mid-read", "method": "resources/read", "params": {"uri": "astrid://spinner/spin"}}
        )
        served.send(
            {"jsonrpc": "2.0", "id": "mid-read-2", "method": "resources/read", "params": {"uri": "astrid://docs/index"}}
        )
        served.until_id("mid-read-2")  # the slow read is in flight; the fast one was served meanwhile
    finally:
        code = served.close(timeout_s=20)  # the client goes away mid-read
    assert code == 0
    log = served.stderr()
    assert not TRACEBACK.search(log), log


def test_an_idle_client_that_disconnects_leaves_a_clean_exit(bundled, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    served = raw_server(*bundled, home=home, stderr_path=tmp_path / "stderr.log")
    served.initialize()
    assert served.close(timeout_s=10) == 0
    assert not TRACEBACK.search(served.stderr())


def test_stdout_carries_only_json_rpc(server):
    # everything the module's server wrote to stdout so far parsed as JSON-RPC (until_id would
    # have raised otherwise); one more exchange with a capsule-side failure to be sure
    error = error_for(
        server,
        json.dumps({"jsonrpc": "2.0", "id": "nf", "method": "resources/read", "params": {"uri": "astrid://nowhere"}}),
        "nf",
    )
    assert error["code"] == NOT_FOUND_2025
    assert server.stderr()  # the logs went to stderr
    assert "astrid:" in server.stderr()
