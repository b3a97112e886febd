"""Static describes: the describe and templates replies a capsule gives every principal, answered by the host.

A capsule built with the guest SDK answers the reserved action
`astrid.static` (`STATIC_ACTION`) with the describe reply, and the templates
reply, it publishes for *any* verified principal when its declarations make
them the same for everyone (no `visible` filter, no lister), as the exact
topic and payload text its handlers publish, or null for one that depends on
the caller. Anything else answers something that is not such an answer, and
stays dynamic.

`StaticReplyStore.replies_for` learns a build's answer once: `astrid capsule
build` asks it right after the manifest check, and the kernel asks only a
build nobody asked yet (built elsewhere, or its record lost). The question
runs in a throwaway sandbox (`oneshot.call_loaded`: no grants, no peers, no
`[config]`, the system principal), so the answer depends on the component
alone. It is kept on disk beside the build's compile-cache entry
(`<entry key>.static.json`, naming the component's sha256), sealed like the
entry (`CacheSeal`): a start asks no guest. A record that is unsealed,
altered, unreadable or names another component is deleted and asked again; a
call that failed (timed out, refused) is not recorded. Every load checks the
answer as it checks a guest's reply: a valid describe-response
(templates-response) within the limits, one bus message, on the reply topic
the SDK uses; otherwise the capsule is called as before.

The kernel then binds a host handler on the request topic in place of the
capsule's (`Kernel._bind_handlers`): it publishes the kept payload as the
capsule's own participant (its source-id, its ACLs), attributed to the
requesting principal, and only for a verified principal, as the SDK does.
The broker treats it as any capsule's reply (window, per-principal scoping,
one reply per source-id, tie-breaks). Nothing else about the capsule
changes: reads, completions and every other handler still call it.

This is the one other place, beside `routing`, where the kernel knows the
resource contract: which request topics the SDK answers with which handler,
and what a valid reply is.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel, ValidationError

from astrid.host.bus.base import UNPARSED
from astrid.host.bus.topics import is_clean_segment, topic_problem
from astrid.host.capsule.manifest import Manifest
from astrid.host.contract.local_replies import LocalKind
from astrid.host.contract.resource import DescribeResponse
from astrid.host.contract.template import TemplatesResponse
from astrid.host.contract.topics import DESCRIBE_REPLY_PREFIX, DESCRIBE_TOPIC, TEMPLATES_REPLY_PREFIX, TEMPLATES_TOPIC
from astrid.host.kernel.compile_cache import CompileCache, write_atomically
from astrid.host.kernel.loader import LoadedCapsule
from astrid.host.kernel.oneshot import call_loaded
from astrid.host.kernel.sandbox import CallStatus
from astrid.host.limits import Limits

log = logging.getLogger(__name__)

STATIC_ACTION = "astrid.static"  # the SDK's `_serving.STATIC_ACTION` (a test holds them together)
STATIC_VERSION = 1
RECORD_VERSION = 2  # {"record", "wasm_sha256", "answer"}
RECORD_SUFFIX = ".static.json"
# The SDK's handler names for the two requests a static answer may stand in for.
DESCRIBE_HANDLER = "describe"
TEMPLATES_HANDLER = "templates"
# Which of a broker's rounds each one's reply belongs to (`contract.local_replies`).
STATIC_KINDS: dict[str, LocalKind] = {DESCRIBE_HANDLER: "describe", TEMPLATES_HANDLER: "templates"}


@dataclass(frozen=True)
class StaticReply:
    """One reply as the capsule would publish it: its topic and its payload text, byte for byte,
    with the payload's JSON value (checked once, at load: the bus does not parse it again)."""

    topic: str
    payload: str
    data: object = field(default=UNPARSED, compare=False, repr=False)


@dataclass(frozen=True)
class StaticReplies:
    """A build's static replies; None for a request the capsule must still answer itself."""

    describe: StaticReply | None = None
    templates: StaticReply | None = None

    def for_binding(self, pattern: str, handler: str) -> StaticReply | None:
        """The reply that stands in for the capsule's `handler` bound on `pattern`, if any."""
        if pattern == DESCRIBE_TOPIC and handler == DESCRIBE_HANDLER:
            return self.describe
        if pattern == TEMPLATES_TOPIC and handler == TEMPLATES_HANDLER:
            return self.templates
        return None

    def answered(self, manifest: Manifest) -> tuple[str, ...]:
        """The handlers ("describe", "templates") the host stands in for, for a capsule bound as `manifest`."""
        return tuple(h for pattern, h in manifest.handlers().items() if self.for_binding(pattern, h) is not None)

    def __bool__(self) -> bool:
        return self.describe is not None or self.templates is not None


DYNAMIC = StaticReplies()


def may_be_static(manifest: Manifest) -> bool:
    """Does the manifest bind a request a static answer could stand in for? (Else nobody asks.)"""
    handlers = manifest.handlers()
    return handlers.get(DESCRIBE_TOPIC) == DESCRIBE_HANDLER or handlers.get(TEMPLATES_TOPIC) == TEMPLATES_HANDLER


def parse_answer(data: str | None, limits: Limits) -> StaticReplies:
    """The replies in an `astrid.static` answer that may be used; DYNAMIC for anything else. Never raises."""
    if not isinstance(data, str):
        return DYNAMIC
    try:
        answer = json.loads(data)
    except (ValueError, RecursionError):
        return DYNAMIC
    if not isinstance(answer, dict) or type(answer.get("static")) is not int or answer["static"] != STATIC_VERSION:
        return DYNAMIC
    return StaticReplies(
        describe=_reply(answer.get("describe"), DESCRIBE_REPLY_PREFIX, DescribeResponse, limits),
        templates=_reply(answer.get("templates"), TEMPLATES_REPLY_PREFIX, TemplatesResponse, limits),
    )


def _reply(value: object, prefix: str, model: type[BaseModel], limits: Limits) -> StaticReply | None:
    """A usable reply: on `prefix` + one clean segment, a valid `model` within `limits`, one bus message."""
    if not isinstance(value, dict):
        return None
    topic, payload = value.get("topic"), value.get("payload")
    if not isinstance(topic, str) or not isinstance(payload, str):
        return None
    if not topic.startswith(prefix) or not is_clean_segment(topic[len(prefix) :]) or topic_problem(topic):
        return None
    try:
        size = len(payload.encode("utf-8"))
    except UnicodeEncodeError:
        return None
    if size > limits.bus_message_bytes:
        return None
    try:
        data = json.loads(payload)  # what the bus checks at publish
        model.model_validate_json(payload, context={"limits": limits})
    except (ValueError, RecursionError, ValidationError):
        return None
    return StaticReply(topic, payload, data)


@dataclass
class StaticStats:
    asked: int = 0  # guest calls made to learn an answer (one per build, unless cached on disk)
    from_disk: int = 0  # answers read from a sealed record
    answered: int = 0  # requests the host answered for a capsule


class StaticReplyStore:
    """Each build's static replies: in memory, then on disk (sealed), else asked of the build once."""

    def __init__(self, cache: CompileCache, limits: Limits) -> None:
        self.cache = cache
        self.limits = limits
        self.stats = StaticStats()
        self._memory: dict[str, StaticReplies] = {}  # by component sha256
        self._lock = threading.Lock()
        self._build_locks: dict[str, threading.Lock] = {}

    def record_path(self, wasm_sha256: str) -> Path:
        """Where a build's answer is kept: beside its compile-cache entry."""
        entry = self.cache.entry_path(wasm_sha256)
        return entry.with_name(entry.stem + RECORD_SUFFIX)

    def replies_for(self, capsule: LoadedCapsule) -> StaticReplies:
        """The static replies of `capsule`'s build (DYNAMIC when it binds nothing they could stand in for)."""
        if not may_be_static(capsule.manifest):
            return DYNAMIC
        sha = capsule.wasm_sha256
        with self._build_lock(sha):  # copies of one build loading in parallel ask once
            known = self.known(sha)
            if known is not None:
                return known
            found, data = self._read(sha)
            if found:
                self.stats.from_disk += 1
            else:
                definitive, data = self._ask(capsule)
                if definitive:
                    self._write(sha, data)
            replies = parse_answer(data, self.limits)
            with self._lock:
                self._memory[sha] = replies
        if answered := replies.answered(capsule.manifest):
            log.debug("capsule %s: %s answered by the host (static)", capsule.name, " and ".join(answered))
        return replies

    def known(self, wasm_sha256: str) -> StaticReplies | None:
        """The replies kept in memory for a build, or None when it was never asked."""
        with self._lock:
            return self._memory.get(wasm_sha256)

    def retain(self, wasm_sha256s: Iterable[str]) -> None:
        """Forget the builds no longer served (a rebuild leaves its old answer behind)."""
        keep = set(wasm_sha256s)
        with self._lock:
            for sha in [sha for sha in self._memory if sha not in keep]:
                del self._memory[sha]
                self._build_locks.pop(sha, None)

    def _build_lock(self, sha: str) -> threading.Lock:
        with self._lock:
            return self._build_locks.setdefault(sha, threading.Lock())

    def _ask(self, capsule: LoadedCapsule) -> tuple[bool, str | None]:
        """(definitive, answer): the build's answer to `astrid.static`, alone and without its `[config]`.

        Not definitive when the call failed for a reason that may pass (a
        timeout on a busy machine, a refused instance): asked again next time.
        A trap is definitive: the SDK turns every fault into a result, so it
        is code of its own (as in the manifest check).
        """
        self.stats.asked += 1
        alone = replace(capsule, manifest=capsule.manifest.model_copy(update={"config": {}}))
        try:
            outcome = call_loaded(alone, STATIC_ACTION, "{}", engine=self.cache.wasm_engine, limits=self.limits)
        except Exception as exc:  # never fail a load over it: the capsule is called as before
            log.info("capsule %s: asking for its static replies failed: %s", capsule.name, exc)
            return False, None
        if outcome.status is CallStatus.TRAPPED:
            return True, None
        if not outcome.ok:
            log.info("capsule %s: asking for its static replies failed: %s", capsule.name, outcome.error)
            return False, None
        return True, outcome.data if outcome.action == "final" else None

    def _read(self, sha: str) -> tuple[bool, str | None]:
        """(found, answer) from the build's sealed record; an unsealed, bad or misplaced record is deleted."""
        path = self.record_path(sha)
        if not path.exists():
            return False, None
        if not self.cache.seal.verify(path):
            log.warning("static reply record %s is unsealed or altered; asking the capsule again", path.name)
            self.cache.seal.discard(path)
            return False, None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError, RecursionError):
            record = None
        answer = record.get("answer") if isinstance(record, dict) else None
        # The seal says this host wrote it; the digest says for which component (a sealed record moved
        # beside another build's entry is not that build's answer).
        if (
            not isinstance(record, dict)
            or record.get("record") != RECORD_VERSION
            or record.get("wasm_sha256") != sha
            or not isinstance(answer, str | None)
        ):
            log.warning("static reply record %s is not this build's; asking the capsule again", path.name)
            self.cache.seal.discard(path)
            return False, None
        return True, answer

    def _write(self, sha: str, answer: str | None) -> None:
        """Keep the answer for the next start (best effort: an unwritable cache only costs one call)."""
        path = self.record_path(sha)
        record = json.dumps({"record": RECORD_VERSION, "wasm_sha256": sha, "answer": answer}, ensure_ascii=False)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, record.encode("utf-8"))
        except OSError as exc:
            log.info("cannot keep the static replies of %s at %s (%s)", sha[:12], path.parent, exc)
            return
        self.cache.seal.sign(path)
