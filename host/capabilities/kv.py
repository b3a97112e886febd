"""Durable key-value state for capsules: one namespace per (principal, capsule name).

SQLite from the standard library, in WAL mode, one file for every namespace
(`settings.default_kv_file()`). The namespace is two columns of the primary
key, never a prefix glued onto the key, so no choice of names can make two
namespaces meet. Quotas (keys and bytes per namespace) are checked inside a
`BEGIN IMMEDIATE` transaction: the write lock is taken before the count, so
two threads or two server processes cannot both squeeze past a full quota.
Each thread gets its own connection (sqlite3 connections are not to be
shared between threads mid-transaction); `busy_timeout` lets one wait for
another process's write instead of failing.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path

from astrid.host.capabilities.errors import CapabilityError
from astrid.host.tuning import CAPABILITY_TUNING

MAX_KEY_BYTES = 256
MAX_VALUE_BYTES = 1 << 20
MAX_KEYS = 10_000
MAX_NAMESPACE_BYTES = 64 << 20
MAX_LISTED = 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    principal TEXT NOT NULL,
    capsule TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (principal, capsule, key)
) WITHOUT ROWID
"""


class KvStore:
    """The store file at `path`; `namespace(principal, capsule)` is what one capsule sees for one principal."""

    def __init__(self, path: Path, *, max_keys: int = MAX_KEYS, max_bytes: int = MAX_NAMESPACE_BYTES) -> None:
        self.path = Path(path)
        self.max_keys = max_keys
        self.max_bytes = max_bytes
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._connect()  # create the file and the table now: errors surface at start

    def namespace(self, principal: str, capsule: str) -> KvNamespace:
        return KvNamespace(self, principal, capsule)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for connection in connections:
            with contextlib.suppress(sqlite3.Error):  # closing at shutdown: its changes were committed already
                connection.close()

    def connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        return connection if connection is not None else self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise CapabilityError("unknown", "the kv store is closed")
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.path.exists():
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))  # private from the first byte
        connection = sqlite3.connect(
            self.path, timeout=CAPABILITY_TUNING.kv_busy_timeout_ms / 1000, isolation_level=None
        )
        connection.execute(f"PRAGMA busy_timeout = {CAPABILITY_TUNING.kv_busy_timeout_ms}")
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(_SCHEMA)
        self._local.connection = connection
        with self._lock:
            self._connections.append(connection)
        return connection


class KvNamespace:
    """One (principal, capsule) namespace: get, set, delete, list_keys."""

    def __init__(self, store: KvStore, principal: str, capsule: str) -> None:
        self.store = store
        self.principal = principal
        self.capsule = capsule

    def get(self, key: str) -> bytes | None:
        _check_key(key)
        row = self._query("SELECT value FROM kv WHERE principal = ? AND capsule = ? AND key = ?", key).fetchone()
        return None if row is None else bytes(row[0])

    def set(self, key: str, value: bytes) -> None:
        _check_key(key)
        if len(value) > MAX_VALUE_BYTES:
            raise CapabilityError("too-large")
        connection = self.store.connection()
        try:
            connection.execute("BEGIN IMMEDIATE")  # the write lock before the quota count
            try:
                self._check_quota(connection, key, value)
                connection.execute(
                    "INSERT INTO kv (principal, capsule, key, value) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (principal, capsule, key) DO UPDATE SET value = excluded.value",
                    (self.principal, self.capsule, key, bytes(value)),
                )
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        except sqlite3.Error as exc:
            raise CapabilityError("unknown", f"kv store: {type(exc).__name__}") from None

    def delete(self, key: str) -> None:
        _check_key(key)
        self._query("DELETE FROM kv WHERE principal = ? AND capsule = ? AND key = ?", key)

    def list_keys(self, prefix: str = "") -> list[str]:
        if prefix:
            _check_key(prefix)
        # substr, not LIKE: `%` and `_` in a prefix are plain characters.
        rows = self._query(
            "SELECT key FROM kv WHERE principal = ? AND capsule = ? AND substr(key, 1, ?) = ? ORDER BY key LIMIT ?",
            len(prefix),
            prefix,
            MAX_LISTED + 1,
        ).fetchall()
        if len(rows) > MAX_LISTED:
            raise CapabilityError("too-large")
        return [row[0] for row in rows]

    def _check_quota(self, connection: sqlite3.Connection, key: str, value: bytes) -> None:
        keys, used = connection.execute(
            "SELECT count(*), coalesce(sum(length(CAST(key AS BLOB)) + length(value)), 0) "
            "FROM kv WHERE principal = ? AND capsule = ?",
            (self.principal, self.capsule),
        ).fetchone()
        old = connection.execute(
            "SELECT length(value) FROM kv WHERE principal = ? AND capsule = ? AND key = ?",
            (self.principal, self.capsule, key),
        ).fetchone()
        size = len(key.encode()) + len(value)
        if old is None:
            keys, used = keys + 1, used + size
        else:  # an overwrite counts the difference
            used = used - len(key.encode()) - old[0] + size
        if keys > self.store.max_keys or used > self.store.max_bytes:
            raise CapabilityError("quota")

    def _query(self, sql: str, *args: object) -> sqlite3.Cursor:
        try:
            return self.store.connection().execute(sql, (self.principal, self.capsule, *args))
        except sqlite3.Error as exc:
            raise CapabilityError("unknown", f"kv store: {type(exc).__name__}") from None


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key:
        raise CapabilityError("invalid-key", "a key is 1-256 bytes of UTF-8")
    try:
        encoded = key.encode("utf-8")
    except UnicodeEncodeError:
        raise CapabilityError("invalid-key", "a key must be valid UTF-8 (no lone surrogates)") from None
    if len(encoded) > MAX_KEY_BYTES:
        raise CapabilityError("invalid-key", f"a key is at most {MAX_KEY_BYTES} bytes, not {len(encoded)}")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in key):
        raise CapabilityError("invalid-key", "a key may not hold NUL or control characters")
