"""`TokenStore`: digests only, mode 0600, atomic writes, re-read on change, constant-time checks."""

from __future__ import annotations

import hmac
import json
import os
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from astrid.host.auth.tokens import TOKEN_MAX, TokenEntry, TokenStore
from astrid.host.errors import AstridError, TokenError
from astrid.host.owner_file import OwnerOnlyFile
from astrid.host.settings import CONFIG_DIR_ENV, PATH_SETTINGS, default_token_file


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return tmp_path / "config" / "tokens.json"


@pytest.fixture
def store(token_file: Path) -> TokenStore:
    return TokenStore(token_file)


def test_add_returns_a_long_random_token_that_verifies_as_its_principal(store: TokenStore) -> None:
    token = store.add("alice")
    assert len(token) >= 43  # 32 bytes, urlsafe base64
    assert token != store.add("bob")
    assert store.principal_for(token) == "alice"


def test_only_the_digest_is_stored(store: TokenStore, token_file: Path) -> None:
    token = store.add("alice")
    content = token_file.read_text(encoding="utf-8")
    assert token not in content
    (entry,) = json.loads(content)["tokens"]
    assert set(entry) == {"name", "sha256", "created"}
    assert entry["name"] == "alice"
    assert len(entry["sha256"]) == 64


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_the_file_is_0600_and_a_created_folder_0700(store: TokenStore, token_file: Path) -> None:
    old_umask = os.umask(0)  # even with a permissive umask
    try:
        store.add("alice")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    assert not [p.name for p in token_file.parent.iterdir() if p.name.endswith(".tmp")]  # no temp file left


def test_list_shows_names_and_utc_creation_times_in_order(store: TokenStore) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    store.add("alice")
    store.add("bob")
    entries = store.list()
    assert [e.name for e in entries] == ["alice", "bob"]
    assert all(isinstance(e, TokenEntry) and e.created.utcoffset() is not None for e in entries)
    assert all(e.created >= before for e in entries)


def test_a_second_token_for_a_name_is_refused_until_revoked(store: TokenStore) -> None:
    first = store.add("alice")
    with pytest.raises(TokenError, match="revoke it first"):
        store.add("alice")
    assert store.principal_for(first) == "alice"
    assert store.revoke("alice") is True
    second = store.add("alice")
    assert store.principal_for(first) is None
    assert store.principal_for(second) == "alice"


def test_token_error_is_an_astrid_error() -> None:
    assert issubclass(TokenError, AstridError)


def test_revoke_of_an_unknown_name_is_false(store: TokenStore) -> None:
    store.add("alice")
    assert store.revoke("bob") is False
    assert [e.name for e in store.list()] == ["alice"]


def test_a_revoke_by_another_store_takes_effect_on_the_next_check(token_file: Path) -> None:
    server, admin = TokenStore(token_file), TokenStore(token_file)
    token = admin.add("alice")
    assert server.principal_for(token) == "alice"  # the server has read and cached the file
    assert admin.revoke("alice")
    assert server.principal_for(token) is None


def test_an_add_by_another_store_takes_effect_on_the_next_check(token_file: Path) -> None:
    server, admin = TokenStore(token_file), TokenStore(token_file)
    assert server.principal_for("nothing-yet") is None
    token = admin.add("alice")
    assert server.principal_for(token) == "alice"


def test_an_unchanged_file_is_not_read_again(store: TokenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    token = store.add("alice")
    reads: list[object] = []
    real_read = OwnerOnlyFile.read

    def counting_read(self: OwnerOnlyFile) -> tuple[object, bytes | None]:
        reads.append(self.path)
        return real_read(self)

    monkeypatch.setattr(OwnerOnlyFile, "read", counting_read)
    for _ in range(5):
        assert store.principal_for(token) == "alice"
    assert len(reads) == 1


@pytest.mark.parametrize("token", ["", "x", "a" * 43, "a" * (TOKEN_MAX + 1), "ümlaut", "\ud800", "Bearer x"])
def test_unknown_tokens_are_none(store: TokenStore, token: str) -> None:
    store.add("alice")
    assert store.principal_for(token) is None


def test_a_missing_file_means_no_tokens_and_reading_creates_nothing(store: TokenStore, token_file: Path) -> None:
    assert store.list() == []
    assert store.principal_for("anything") is None
    assert store.revoke("alice") is False
    assert not token_file.parent.exists()


@pytest.mark.parametrize("entries", [1, 3, 7])
def test_every_entry_is_compared_in_constant_time(
    store: TokenStore, monkeypatch: pytest.MonkeyPatch, entries: int
) -> None:
    issued = [store.add(f"user{i}") for i in range(entries)]
    calls: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def counting(a: str, b: str) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for presented, expected in [(issued[0], "user0"), (issued[-1], f"user{entries - 1}"), ("wrong" * 9, None)]:
        calls.clear()
        assert store.principal_for(presented) == expected
        assert len(calls) == entries  # no early exit on a match, no shortcut on a miss


GOOD_DIGEST = "0" * 64
GOOD_TIME = "2025-01-01T00:00:00+00:00"


def one_entry(**fields: object) -> bytes:
    entry = {"name": "alice", "sha256": GOOD_DIGEST, "created": GOOD_TIME, **fields}
    return json.dumps({"version": 1, "tokens": [{k: v for k, v in entry.items() if v is not None}]}).encode()


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (b"{", "Expecting"),
        (b'{"version": 1, "tokens": [\xff]}', "decode"),
        (b"", "Expecting value"),
        (b"[]", "version"),
        (b'{"version": 2, "tokens": []}', "version"),
        (b'{"version": 1}', "tokens"),
        (b'{"version": 1, "tokens": ["alice"]}', "not an object"),
        (one_entry(name=" alice"), "printable"),
        (one_entry(name=7), "string"),
        (one_entry(sha256="xyz"), "sha256"),
        (one_entry(sha256="A" * 64), "sha256"),
        (one_entry(created=None), "creation time"),
        (one_entry(created="2025-01-01T00:00:00"), "time zone"),
        (one_entry(created="yesterday"), "isoformat"),
    ],
)
def test_a_corrupt_file_is_a_clear_token_error(token_file: Path, content: bytes, detail: str) -> None:
    token_file.parent.mkdir(mode=0o700)
    token_file.write_bytes(content)
    token_file.chmod(0o600)
    store = TokenStore(token_file)
    for action in (store.list, lambda: store.principal_for("x"), lambda: store.add("bob")):
        with pytest.raises(TokenError) as caught:
            action()
        message = str(caught.value)
        assert str(token_file) in message and "corrupt" in message and "astrid mcp token add" in message
        assert detail in message
    assert token_file.read_bytes() == content  # never "repaired" by guessing


def test_duplicate_names_or_digests_are_corrupt(token_file: Path) -> None:
    store = TokenStore(token_file)
    store.add("alice")
    document = json.loads(token_file.read_text())
    for twin in ({**document["tokens"][0], "name": "bob"}, {**document["tokens"][0], "sha256": "0" * 64}):
        token_file.write_text(json.dumps({"version": 1, "tokens": [document["tokens"][0], twin]}))
        with pytest.raises(TokenError, match="appears twice"):
            store.list()


def test_concurrent_adds_from_many_stores_lose_nothing(token_file: Path) -> None:
    names = [f"user{i}" for i in range(12)]
    issued: dict[str, str] = {}

    def add(name: str) -> None:
        issued[name] = TokenStore(token_file).add(name)

    threads = [threading.Thread(target=add, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    store = TokenStore(token_file)
    assert sorted(e.name for e in store.list()) == sorted(names)
    assert all(store.principal_for(token) == name for name, token in issued.items())


def test_the_default_file_follows_the_config_dir_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "cfg"))
    assert default_token_file() == tmp_path / "cfg" / "tokens.json"
    monkeypatch.delenv(CONFIG_DIR_ENV)
    assert default_token_file().name == "tokens.json"
    assert default_token_file().parent.name == "astrid"
    assert CONFIG_DIR_ENV in PATH_SETTINGS  # `astrid mcp config` hands it on
