"""Shared key-value state for capsules on NATS JetStream: every replica sees the same state.

With `--bus nats://...`, `astrid:kv` keeps its state in one JetStream
key-value bucket (`BUCKET`) instead of the host's SQLite file, with the same
namespaces, limits and quotas as `kv.KvStore`:

- a namespace (principal, capsule) is two tokens of the NATS key, each the
  base64url of the name (no `.`, `*` or `>` can appear in one), and a
  capsule's key is a third: `v.<principal>.<capsule>.<key>`. Keys in
  different namespaces never meet, and a listing watches `v.<p>.<c>.>` only;
- the quota (keys and bytes per namespace) is a counter entry
  `m.<principal>.<capsule>`, changed only by an optimistic revision update
  (compare-and-set on its last revision) before the value is written with
  one too (create, or update at the revision read). A writer that loses
  either race undoes its counter change and starts over: no two hosts can
  both squeeze past a full quota. A host that dies between the two writes
  leaves the counter high by one value (never low): quotas stay safe.

Calls come from guest threads; they run on the bus's NATS event loop and
wait for it (`NatsBus.call`), bounded by
`CAPABILITY_TUNING.kv_nats_call_timeout_s`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from astrid.host.capabilities.errors import CapabilityError
from astrid.host.capabilities.kv import MAX_KEYS, MAX_LISTED, MAX_NAMESPACE_BYTES, MAX_VALUE_BYTES, _check_key
from astrid.host.tuning import CAPABILITY_TUNING

BUCKET = "astrid-kv"


def kv_permissions() -> list[str]:
    """What a host using the bucket must publish, and no more (nats-server permissions): JetStream's API
    for the bucket's own stream only (info, create on first use, get a message, the listing's consumer
    and its flow control), and the bucket's subjects. Never another stream, nor delete, purge or update
    of this one; found by running every kv call against a nats-server holding a host to this list."""
    stream = f"KV_{BUCKET}"
    return [
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.STREAM.CREATE.{stream}",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}",  # a bucket made by another client with direct gets
        f"$JS.API.DIRECT.GET.{stream}.>",
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.INFO.{stream}.>",
        f"$JS.API.CONSUMER.DELETE.{stream}.>",
        f"$JS.FC.{stream}.>",  # flow-control replies of a long listing
        f"$KV.{BUCKET}.>",
    ]


def token(name: str) -> str:
    """One NATS key token for a name: base64url without padding, behind a letter (never empty)."""
    return "x" + base64.urlsafe_b64encode(name.encode("utf-8")).decode("ascii").rstrip("=")


def untoken(text: str) -> str:
    body = text[1:]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")


class NatsKvStore:
    """The bucket on the NATS server of `bus` (a connected `NatsBus`); `namespace` as `KvStore`'s."""

    def __init__(self, bus: Any, *, max_keys: int = MAX_KEYS, max_bytes: int = MAX_NAMESPACE_BYTES) -> None:
        self.bus = bus
        self.max_keys = max_keys
        self.max_bytes = max_bytes
        self._kv: Any = None

    def namespace(self, principal: str, capsule: str) -> NatsKvNamespace:
        return NatsKvNamespace(self, principal, capsule)

    def close(self) -> None:
        self._kv = None  # the connection is the bus's

    def prepare(self) -> None:
        """Find (or make) the bucket now, so no guest call pays for it inside its time bound;
        CapabilityError naming the cause (no JetStream, no server)."""
        self.call(lambda kv: _nothing())

    def call(self, make: Any) -> Any:
        """Run `make(kv)` (a coroutine) on the bus's loop; CapabilityError naming the cause."""
        from nats.js.errors import KeyWrongLastSequenceError

        if not self.bus.connected:
            raise CapabilityError("unknown", "kv: the NATS server is unreachable; retry shortly")

        async def run() -> Any:
            return await make(await self._bucket())

        try:
            return self.bus.call(run(), CAPABILITY_TUNING.kv_nats_call_timeout_s)
        except (CapabilityError, KeyWrongLastSequenceError):
            raise
        except TimeoutError:
            raise CapabilityError(
                "unknown", f"kv: no answer from the NATS server in {CAPABILITY_TUNING.kv_nats_call_timeout_s:g} s"
            ) from None
        except Exception as exc:
            raise CapabilityError("unknown", f"kv: {_reason(exc)}") from None

    async def _bucket(self) -> Any:
        if self._kv is None:
            from nats.js.errors import BucketNotFoundError, ServiceUnavailableError

            js = self.bus.jetstream()
            try:
                self._kv = await js.key_value(BUCKET)
            except BucketNotFoundError:
                self._kv = await js.create_key_value(bucket=BUCKET, history=1)
            except ServiceUnavailableError:
                raise CapabilityError(
                    "unknown", "kv needs JetStream on the NATS server: start nats-server with -js"
                ) from None
        return self._kv


class NatsKvNamespace:
    """One (principal, capsule) namespace in the bucket: get, set, delete, list_keys."""

    def __init__(self, store: NatsKvStore, principal: str, capsule: str) -> None:
        self.store = store
        self.principal = principal
        self.capsule = capsule
        self._space = f"{token(principal)}.{token(capsule)}"
        self._meta = f"m.{self._space}"

    def _key(self, key: str) -> str:
        return f"v.{self._space}.{token(key)}"

    def get(self, key: str) -> bytes | None:
        _check_key(key)
        name = self._key(key)

        async def get(kv: Any) -> bytes | None:
            entry = await _entry(kv, name)
            return None if entry is None else bytes(entry.value or b"")

        return self.store.call(get)

    def set(self, key: str, value: bytes) -> None:
        _check_key(key)
        if len(value) > MAX_VALUE_BYTES:
            raise CapabilityError("too-large")
        name, size, value = self._key(key), len(key.encode()) + len(value), bytes(value)
        store = self.store

        async def set_(kv: Any) -> None:
            from nats.js.errors import KeyWrongLastSequenceError

            for _ in range(CAPABILITY_TUNING.kv_nats_max_attempts):
                old = await _entry(kv, name)
                delta = (0, size - (len(key.encode()) + len(old.value or b""))) if old else (1, size)
                if not await self._count(kv, *delta, check=True):
                    continue  # the counter moved under us: read everything again
                try:
                    if old is None:
                        await kv.create(name, value)
                    else:
                        await kv.update(name, value, last=old.revision)
                    return
                except KeyWrongLastSequenceError:  # another writer changed this key first: undo, again
                    await self._undo(kv, *delta)
            raise CapabilityError("unknown", "kv: too many concurrent writers; retry")

        store.call(set_)

    def delete(self, key: str) -> None:
        _check_key(key)
        name = self._key(key)

        async def delete(kv: Any) -> None:
            from nats.js.errors import APIError

            for _ in range(CAPABILITY_TUNING.kv_nats_max_attempts):
                old = await _entry(kv, name)
                if old is None:
                    return
                delta = (-1, -(len(key.encode()) + len(old.value or b"")))
                if not await self._count(kv, *delta, check=False):
                    continue
                try:
                    await kv.delete(name, last=old.revision)
                    return
                except APIError as exc:
                    if exc.err_code not in (10071, 10164):  # not "wrong last sequence"
                        raise
                    await self._undo(kv, *delta)
            raise CapabilityError("unknown", "kv: too many concurrent writers; retry")

        self.store.call(delete)

    def list_keys(self, prefix: str = "") -> list[str]:
        if prefix:
            _check_key(prefix)

        async def listing(kv: Any) -> list[str]:
            # The stream's own count of the namespace's subjects (filtered by the server: never
            # another namespace's), then each one's last entry: a deleted key keeps its marker.
            # (A watcher's "initial values done" could come before the values it owed.)
            info = await self.store.bus.jetstream().stream_info(
                f"KV_{BUCKET}", subjects_filter=f"$KV.{BUCKET}.v.{self._space}.>"
            )
            subjects = info.state.subjects or {}
            if len(subjects) > MAX_LISTED * 2:  # markers included: past any quota, refuse before reading each
                raise CapabilityError("too-large")
            keys: list[str] = []
            for subject in subjects:
                name = subject.removeprefix(f"$KV.{BUCKET}.")
                key = untoken(name.rsplit(".", 1)[1])
                if key.startswith(prefix) and await _entry(kv, name) is not None:
                    keys.append(key)
                    if len(keys) > MAX_LISTED:
                        raise CapabilityError("too-large")
            return sorted(keys)

        return self.store.call(listing)

    # -- the quota counter -------------------------------------------------------------

    async def _count(self, kv: Any, keys: int, size: int, *, check: bool) -> bool:
        """Add to the namespace's counter at the revision read; False when another writer won.
        With `check`, CapabilityError("quota") when the change would pass a limit."""
        from nats.js.errors import KeyWrongLastSequenceError

        entry = await _entry(kv, self._meta)
        used = json.loads(entry.value) if entry is not None else {"keys": 0, "bytes": 0}
        after = {"keys": used["keys"] + keys, "bytes": used["bytes"] + size}
        if check and (keys > 0 or size > 0):
            if after["keys"] > self.store.max_keys or after["bytes"] > self.store.max_bytes:
                raise CapabilityError("quota")
        data = json.dumps(after).encode()
        try:
            if entry is None:
                await kv.create(self._meta, data)
            else:
                await kv.update(self._meta, data, last=entry.revision)
        except KeyWrongLastSequenceError:
            return False
        return True

    async def _undo(self, kv: Any, keys: int, size: int) -> None:
        for _ in range(CAPABILITY_TUNING.kv_nats_max_attempts):
            if await self._count(kv, -keys, -size, check=False):
                return


async def _nothing() -> None:
    return None


async def _entry(kv: Any, name: str) -> Any:
    """The live entry of `name`, or None (absent or deleted)."""
    from nats.js.errors import NotFoundError

    try:
        return await kv.get(name)
    except NotFoundError:  # absent, or deleted (its marker)
        return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
