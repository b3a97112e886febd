"""Attacks on static bearer-token auth; each fails only because of a defence in `astrid.host.auth.tokens`.

- a token file others may read or write (or whose folder they may write) is
  refused: whoever can write it can let themselves in;
- a principal name that breaks the grammar cannot be added, nor slipped in by
  editing the file, nor passed through by a verifier source;
- a revoked token stops verifying in a running server, without a restart;
- one principal's token never verifies as another's, and the stored digest is
  not itself a credential;
- tokens are compared with `hmac.compare_digest`, against every entry.
"""

from __future__ import annotations

import hmac
import json
import os
import subprocess
from pathlib import Path

import pytest

from astrid.host.auth.tokens import TokenStore
from astrid.host.errors import TokenError
from astrid.host.mcp.auth import BearerVerifier
from astrid.host.settings import CONFIG_DIR_ENV
from astrid.host.toolpaths import tool_path

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX owners and modes")


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return tmp_path / "config" / "tokens.json"


@pytest.fixture
def store(token_file: Path) -> TokenStore:
    return TokenStore(token_file)


# -- who may touch the file -----------------------------------------------------------------


@posix_only
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o666])
def test_a_token_file_open_to_others_is_refused(store: TokenStore, token_file: Path, mode: int) -> None:
    token = store.add("alice")
    token_file.chmod(mode)
    for action in (lambda: store.principal_for(token), store.list, lambda: store.add("mallory")):
        with pytest.raises(TokenError, match=r"open to other users .*chmod 600"):
            action()
    token_file.chmod(0o600)  # the fix the message names
    assert store.principal_for(token) == "alice"


@posix_only
@pytest.mark.anyio
async def test_the_server_refuses_every_token_while_the_file_is_open_to_others(
    store: TokenStore, token_file: Path
) -> None:
    token = store.add("alice")
    verifier = BearerVerifier(TokenStore(token_file))
    assert await verifier.verify_token(token) is not None
    token_file.chmod(0o666)
    assert await verifier.verify_token(token) is None  # fail closed, no exception into the transport


@posix_only
def test_a_folder_others_may_write_is_refused(store: TokenStore, token_file: Path) -> None:
    token = store.add("alice")
    token_file.parent.chmod(0o777)  # anyone could put their own tokens.json in its place
    with pytest.raises(TokenError, match=r"may be written by other users .*chmod 700"):
        store.principal_for(token)
    with pytest.raises(TokenError, match="chmod 700"):
        store.add("mallory")


@posix_only
def test_no_token_file_is_created_in_a_folder_others_may_write(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(TokenError, match="chmod 700"):
        TokenStore(folder / "tokens.json").add("alice")
    assert not (folder / "tokens.json").exists()


@posix_only
def test_a_token_file_owned_by_someone_else_is_refused(store: TokenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    token = store.add("alice")
    owner = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: owner + 4242)  # as if another user wrote the file
    with pytest.raises(TokenError, match="not to you"):
        store.principal_for(token)


def test_the_file_holds_no_token(store: TokenStore, token_file: Path) -> None:
    issued = [store.add(name) for name in ("alice", "bob")]
    content = token_file.read_bytes()
    assert all(token.encode() not in content for token in issued)


# -- principal names -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", " admin", "admin ", "admin\n", "ali\x1b[31mce", "ali\x00ce", "a\u202eecila", "x" * 129]
)
def test_a_name_that_breaks_the_grammar_cannot_be_added(store: TokenStore, token_file: Path, name: str) -> None:
    with pytest.raises(TokenError, match="printable characters"):
        store.add(name)
    assert not token_file.exists()


def test_a_bad_name_edited_into_the_file_is_refused(store: TokenStore, token_file: Path) -> None:
    token = store.add("alice")
    document = json.loads(token_file.read_text())
    document["tokens"][0]["name"] = "alice\nINFO forged log line"
    token_file.write_text(json.dumps(document))
    with pytest.raises(TokenError, match="corrupt"):
        store.principal_for(token)


@pytest.mark.anyio
async def test_a_source_cannot_pass_a_bad_principal_through_the_adapter() -> None:
    class Lenient:
        def principal_for(self, token: str) -> str | None:
            return "root\n"

    assert await BearerVerifier(Lenient()).verify_token("anything") is None


# -- revocation ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_revoked_token_stops_verifying_in_a_running_server(tmp_path: Path) -> None:
    config = tmp_path / "config"
    env = {**os.environ, CONFIG_DIR_ENV: str(config)}

    def astrid(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([tool_path("astrid"), "mcp", "token", *args], capture_output=True, text=True, env=env)

    token = astrid("add", "alice").stdout.strip()
    server = BearerVerifier(TokenStore(config / "tokens.json"))  # started before the revoke
    assert (await server.verify_token(token)) is not None
    assert astrid("revoke", "alice").returncode == 0
    assert await server.verify_token(token) is None
    assert astrid("add", "alice").returncode == 0  # a new token for the same name...
    assert await server.verify_token(token) is None  # ...does not revive the old one


# -- one principal, one token ----------------------------------------------------------------


def test_a_token_verifies_only_as_its_own_principal(store: TokenStore, token_file: Path) -> None:
    alice, bob = store.add("alice"), store.add("bob")
    assert (store.principal_for(alice), store.principal_for(bob)) == ("alice", "bob")
    digests = [entry["sha256"] for entry in json.loads(token_file.read_text())["tokens"]]
    near_misses = [
        alice[:-1],
        alice + "A",
        alice.swapcase(),
        " " + alice,
        alice + bob,
        f"Bearer {alice}",
        *digests,  # the stored digest is not a credential
    ]
    for forged in near_misses:
        assert store.principal_for(forged) is None, forged


# -- constant time ---------------------------------------------------------------------------


def test_tokens_are_compared_with_compare_digest_against_every_entry(
    store: TokenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    issued = [store.add(f"user{i}") for i in range(5)]
    calls: list[str] = []
    real = hmac.compare_digest

    def counting(a: str, b: str) -> bool:
        calls.append(b)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    assert store.principal_for(issued[0]) == "user0"
    assert len(calls) == 5  # a match on the first entry does not stop the scan


def test_the_decision_is_compare_digests_not_an_equality_test(
    store: TokenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = store.add("alice")
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: False)
    assert store.principal_for(token) is None  # an `==` anywhere would still let the token in
