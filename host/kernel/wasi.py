"""WASI 0.2 for capsules, deny by default: what a language runtime needs to run, nothing that reaches out.

A Python capsule's runtime (componentize-py's CPython) imports about 25 WASI
interfaces. This module serves them with host functions of its own, not
wasmtime's WASI implementation, so each one is exactly as open as written here:

- **clocks**: wall and monotonic at `CLOCK_RESOLUTION_MS` (1 ms, the
  resolution of `astrid:sys` `clock-ms`); the monotonic clock counts from the
  host's start (no uptime). A pollable of a clock is ready at its instant;
  waiting on one sleeps at most until the call's deadline, then the epoch
  interrupt ends the call ("ran past its read window");
- **random**: the host's CSPRNG (the "insecure" interfaces too);
- **stdout and stderr**: lines in the capsule's log (`info` and `warn`),
  bounded as the `log` import is; stdin is at its end;
- **environment, arguments, working folder**: none;
- **files**: no preopened folder, so nothing can be opened; **sockets**:
  creating one, or looking up a name, is refused (`access-denied`). The guest
  sees ordinary errors (ENOENT, EACCES), which the Python SDK turns into
  exceptions naming `ctx.files` and `ctx.http`;
- **exit** and every function that could only act on a file or socket the
  guest cannot have: a trap whose message says so.

One definition of WASI_VERSION satisfies a component built against any
earlier 0.2 release (wasmtime matches semver-compatible versions); the loader
refuses a WASI import this module does not define (`check_wasi_imports`).
Every function here returns, never raises, except the denied ones: their
`WasmtimeError` traps the calling guest only (`wasmtime_patches`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import wasmtime
from wasmtime.component import ResourceAny, ResourceHost, ResourceType, Variant

from astrid.host.kernel.wit_values import record

WASI_VERSION = "0.2.12"  # componentize-js 0.23 imports 0.2.12, componentize-py 0.25.1 0.2.9
CLOCK_RESOLUTION_MS = 1
RANDOM_BYTES_PER_CALL = 1 << 16  # wasi-libc asks 256 bytes at a time; a larger ask gets this much
STREAM_WINDOW = 4096  # what check-write allows at once

_NS_PER_MS = 1_000_000
_STARTED_NS = time.monotonic_ns()

# Resource type ids of this host (distinct from the ipc subscription's and the capabilities').
POLLABLE, ERROR, INPUT_STREAM, OUTPUT_STREAM = 0xA5_7E01, 0xA5_7E02, 0xA5_7E03, 0xA5_7E04
TERMINAL_INPUT, TERMINAL_OUTPUT, DESCRIPTOR, DIRECTORY_ENTRIES = 0xA5_7E05, 0xA5_7E06, 0xA5_7E07, 0xA5_7E08
NETWORK, TCP_SOCKET, UDP_SOCKET, INCOMING_DATAGRAMS = 0xA5_7E09, 0xA5_7E0A, 0xA5_7E0B, 0xA5_7E0C
OUTGOING_DATAGRAMS, ADDRESS_STREAM = 0xA5_7E0D, 0xA5_7E0E
STDIN, STDOUT, STDERR = 0, 1, 2  # the reps of the three standard streams
STREAM_LEVELS = {STDOUT: "info", STDERR: "warn"}

NO_FILES = "a capsule has no file system: read files with ctx.fs, after the operator grants fs to the capsule"
NO_SOCKETS = "a capsule has no sockets: reach the network with ctx.http, after the operator grants http"
NO_EXIT = "a capsule cannot exit its sandbox: return from the handler (or raise) instead"


@dataclass(frozen=True)
class Interface:
    """One WASI interface: the resources it defines and every function a capsule may import from it."""

    name: str
    resources: tuple[tuple[str, int], ...]
    functions: frozenset[str]

    @property
    def versioned(self) -> str:
        return f"{self.name}@{WASI_VERSION}"


def _methods(resource: str, *names: str) -> list[str]:
    return [f"[method]{resource}.{name}" for name in names]


_DESCRIPTOR_METHODS = _methods(
    "descriptor",
    *"read-via-stream write-via-stream append-via-stream advise sync-data get-flags get-type set-size set-times "
    "read write read-directory sync create-directory-at stat stat-at set-times-at link-at open-at readlink-at "
    "remove-directory-at rename-at symlink-at unlink-file-at is-same-object metadata-hash metadata-hash-at".split(),
)
_TCP_METHODS = _methods(
    "tcp-socket",
    *"start-bind finish-bind start-connect finish-connect start-listen finish-listen accept local-address "
    "remote-address is-listening address-family set-listen-backlog-size keep-alive-enabled set-keep-alive-enabled "
    "keep-alive-idle-time set-keep-alive-idle-time keep-alive-interval set-keep-alive-interval keep-alive-count "
    "set-keep-alive-count hop-limit set-hop-limit receive-buffer-size set-receive-buffer-size send-buffer-size "
    "set-send-buffer-size subscribe shutdown".split(),
)
_UDP_METHODS = [
    *_methods(
        "udp-socket",
        *"start-bind finish-bind stream local-address remote-address address-family unicast-hop-limit "
        "set-unicast-hop-limit receive-buffer-size set-receive-buffer-size send-buffer-size set-send-buffer-size "
        "subscribe".split(),
    ),
    *_methods("incoming-datagram-stream", "receive", "subscribe"),
    *_methods("outgoing-datagram-stream", "check-send", "send", "subscribe"),
]

# Functions that trap with a reason: they could only act on what a capsule never gets.
DENIED: dict[str, str] = {
    **dict.fromkeys((*_DESCRIPTOR_METHODS, "[method]directory-entry-stream.read-directory-entry"), NO_FILES),
    **dict.fromkeys((*_TCP_METHODS, *_UDP_METHODS), NO_SOCKETS),
    **dict.fromkeys(_methods("resolve-address-stream", "resolve-next-address", "subscribe"), NO_SOCKETS),
    "exit": NO_EXIT,
    "exit-with-code": NO_EXIT,
}


def _interface(name: str, resources: Iterable[tuple[str, int]], *functions: str) -> Interface:
    return Interface(name, tuple(resources), frozenset(functions))


INTERFACES: tuple[Interface, ...] = (
    _interface("wasi:io/poll", [("pollable", POLLABLE)], "[method]pollable.ready", "[method]pollable.block", "poll"),
    _interface("wasi:io/error", [("error", ERROR)], "[method]error.to-debug-string"),
    _interface(
        "wasi:io/streams",
        [("input-stream", INPUT_STREAM), ("output-stream", OUTPUT_STREAM)],
        *_methods("input-stream", "read", "blocking-read", "skip", "blocking-skip", "subscribe"),
        *_methods(
            "output-stream",
            *"check-write write blocking-write-and-flush flush blocking-flush subscribe write-zeroes "
            "blocking-write-zeroes-and-flush splice blocking-splice".split(),
        ),
    ),
    _interface("wasi:cli/environment", [], "get-environment", "get-arguments", "initial-cwd"),
    _interface("wasi:cli/exit", [], "exit", "exit-with-code"),
    _interface("wasi:cli/stdin", [], "get-stdin"),
    _interface("wasi:cli/stdout", [], "get-stdout"),
    _interface("wasi:cli/stderr", [], "get-stderr"),
    _interface("wasi:cli/terminal-input", [("terminal-input", TERMINAL_INPUT)]),
    _interface("wasi:cli/terminal-output", [("terminal-output", TERMINAL_OUTPUT)]),
    _interface("wasi:cli/terminal-stdin", [], "get-terminal-stdin"),
    _interface("wasi:cli/terminal-stdout", [], "get-terminal-stdout"),
    _interface("wasi:cli/terminal-stderr", [], "get-terminal-stderr"),
    _interface("wasi:clocks/monotonic-clock", [], "now", "resolution", "subscribe-instant", "subscribe-duration"),
    _interface("wasi:clocks/wall-clock", [], "now", "resolution"),
    _interface("wasi:random/random", [], "get-random-bytes", "get-random-u64"),
    _interface("wasi:random/insecure", [], "get-insecure-random-bytes", "get-insecure-random-u64"),
    _interface("wasi:random/insecure-seed", [], "insecure-seed"),
    _interface(
        "wasi:filesystem/types",
        [("descriptor", DESCRIPTOR), ("directory-entry-stream", DIRECTORY_ENTRIES)],
        *_DESCRIPTOR_METHODS,
        "[method]directory-entry-stream.read-directory-entry",
        "filesystem-error-code",
    ),
    _interface("wasi:filesystem/preopens", [], "get-directories"),
    _interface("wasi:sockets/network", [("network", NETWORK)], "network-error-code"),
    _interface("wasi:sockets/instance-network", [], "instance-network"),
    _interface("wasi:sockets/tcp-create-socket", [], "create-tcp-socket"),
    _interface("wasi:sockets/udp-create-socket", [], "create-udp-socket"),
    _interface("wasi:sockets/tcp", [("tcp-socket", TCP_SOCKET)], *_TCP_METHODS),
    _interface(
        "wasi:sockets/udp",
        [
            ("udp-socket", UDP_SOCKET),
            ("incoming-datagram-stream", INCOMING_DATAGRAMS),
            ("outgoing-datagram-stream", OUTGOING_DATAGRAMS),
        ],
        *_UDP_METHODS,
    ),
    _interface(
        "wasi:sockets/ip-name-lookup",
        [("resolve-address-stream", ADDRESS_STREAM)],
        "resolve-addresses",
        *_methods("resolve-address-stream", "resolve-next-address", "subscribe"),
    ),
)
BY_NAME = {interface.name: interface for interface in INTERFACES}


# -- which imports a component may have ---------------------------------------------------------


def _version(text: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return None


def wasi_import_problem(name: str, functions: Iterable[str]) -> str | None:
    """Why the WASI import `name` (`wasi:clocks/wall-clock@0.2.9`) with these functions cannot be served, or None."""
    interface_name, _, version_text = name.partition("@")
    interface = BY_NAME.get(interface_name)
    if interface is None:
        return f"{name} (not offered to capsules)"
    version = _version(version_text)
    newest = _version(WASI_VERSION)
    if version is None or newest is None or version[:2] != newest[:2] or version > newest:
        return f"{name} (this host serves WASI {WASI_VERSION}: build against 0.2.x, x <= {newest[2] if newest else 0})"
    unknown = sorted(set(functions) - interface.functions)
    if unknown:
        return f"{name}: {', '.join(unknown)} (not offered to capsules)"
    return None


# -- the host functions -----------------------------------------------------------------------


def _now_ms() -> int:
    return (time.monotonic_ns() - _STARTED_NS) // _NS_PER_MS


def _ms_after(ns: int) -> int:
    return -(-ns // _NS_PER_MS)  # rounded up: never ready before the instant asked for


def pollable_at(ms: int) -> ResourceHost:
    """A pollable ready at `ms` on the monotonic clock. Its rep holds the instant itself (no table to
    leak when a Store closes without dropping it), modulo 2**32 ms, compared within half that range."""
    return ResourceHost.own(ms & 0xFFFFFFFF, POLLABLE)


def _until(rep: int, now_ms: int) -> int:
    """Milliseconds from `now_ms` to a pollable's instant (<= 0: ready)."""
    delta = (rep - now_ms) & 0xFFFFFFFF
    return delta - (1 << 32) if delta >= 1 << 31 else delta


def _rep(store: Any, handle: ResourceAny) -> int:
    """A borrowed handle's rep (taking it ends the borrow, which must not outlive the call)."""
    return int(handle.to_host(store).rep)


class WasiHost:
    """The WASI functions of one kernel: `log(store, level, text)` takes a capsule's stdout and stderr,
    `time_left(store)` says how long the current call may still wait (0 outside a call)."""

    def __init__(self, log: Callable[[Any, str, str], None], time_left: Callable[[Any], float]) -> None:
        self._log = log
        self._time_left = time_left

    def link(self, root: Any) -> None:
        """Define every interface of `INTERFACES` under `root` (a LinkerInstance)."""
        served = self._served()
        for interface in INTERFACES:
            with root.add_instance(interface.versioned) as instance:
                for resource, type_id in interface.resources:
                    instance.add_resource(resource, ResourceType.host(type_id), _no_destructor)
                for function in sorted(interface.functions):
                    implementation = served.get((interface.name, function)) or _denied(function)
                    instance.add_func(function, implementation)

    def _served(self) -> dict[tuple[str, str], Callable[..., Any]]:
        ok = Variant("ok")
        return {
            ("wasi:io/poll", "[method]pollable.ready"): self._ready,
            ("wasi:io/poll", "[method]pollable.block"): self._block,
            ("wasi:io/poll", "poll"): self._poll,
            ("wasi:io/error", "[method]error.to-debug-string"): lambda store, error: _released(store, error, "error"),
            # stdin is at its end: every read or skip says `closed`
            **{
                ("wasi:io/streams", f"[method]input-stream.{name}"): _closed
                for name in ("read", "blocking-read", "skip", "blocking-skip")
            },
            ("wasi:io/streams", "[method]input-stream.subscribe"): _ready_pollable,
            ("wasi:io/streams", "[method]output-stream.check-write"): lambda s, h: _released(s, h, STREAM_WINDOW),
            ("wasi:io/streams", "[method]output-stream.write"): self._write,
            ("wasi:io/streams", "[method]output-stream.blocking-write-and-flush"): self._write,
            ("wasi:io/streams", "[method]output-stream.flush"): lambda s, h: _released(s, h, ok),
            ("wasi:io/streams", "[method]output-stream.blocking-flush"): lambda s, h: _released(s, h, ok),
            ("wasi:io/streams", "[method]output-stream.subscribe"): _ready_pollable,
            ("wasi:io/streams", "[method]output-stream.write-zeroes"): lambda s, h, n: _released(s, h, ok),
            ("wasi:io/streams", "[method]output-stream.blocking-write-zeroes-and-flush"): lambda s, h, n: _released(
                s, h, ok
            ),
            ("wasi:io/streams", "[method]output-stream.splice"): _splice,
            ("wasi:io/streams", "[method]output-stream.blocking-splice"): _splice,
            ("wasi:cli/environment", "get-environment"): lambda store: [],
            ("wasi:cli/environment", "get-arguments"): lambda store: [],
            ("wasi:cli/environment", "initial-cwd"): lambda store: None,
            ("wasi:cli/stdin", "get-stdin"): lambda store: ResourceHost.own(STDIN, INPUT_STREAM),
            ("wasi:cli/stdout", "get-stdout"): lambda store: ResourceHost.own(STDOUT, OUTPUT_STREAM),
            ("wasi:cli/stderr", "get-stderr"): lambda store: ResourceHost.own(STDERR, OUTPUT_STREAM),
            **{
                ("wasi:cli/terminal-" + name, "get-terminal-" + name): lambda store: None
                for name in ("stdin", "stdout", "stderr")
            },
            ("wasi:clocks/monotonic-clock", "now"): lambda store: _now_ms() * _NS_PER_MS,
            ("wasi:clocks/monotonic-clock", "resolution"): lambda store: CLOCK_RESOLUTION_MS * _NS_PER_MS,
            ("wasi:clocks/monotonic-clock", "subscribe-instant"): lambda store, ns: pollable_at(_ms_after(ns)),
            ("wasi:clocks/monotonic-clock", "subscribe-duration"): lambda store, ns: pollable_at(
                _now_ms() + _ms_after(ns)
            ),
            ("wasi:clocks/wall-clock", "now"): _wall_now,
            ("wasi:clocks/wall-clock", "resolution"): lambda store: record(
                seconds=0, nanoseconds=CLOCK_RESOLUTION_MS * _NS_PER_MS
            ),
            ("wasi:random/random", "get-random-bytes"): _random_bytes,
            ("wasi:random/random", "get-random-u64"): _random_u64,
            ("wasi:random/insecure", "get-insecure-random-bytes"): _random_bytes,
            ("wasi:random/insecure", "get-insecure-random-u64"): _random_u64,
            ("wasi:random/insecure-seed", "insecure-seed"): lambda store: (_random_u64(store), _random_u64(store)),
            ("wasi:filesystem/types", "filesystem-error-code"): lambda store, error: _released(store, error, None),
            ("wasi:filesystem/preopens", "get-directories"): lambda store: [],
            ("wasi:sockets/network", "network-error-code"): lambda store, error: _released(store, error, None),
            ("wasi:sockets/instance-network", "instance-network"): lambda store: ResourceHost.own(0, NETWORK),
            ("wasi:sockets/tcp-create-socket", "create-tcp-socket"): lambda store, family: "access-denied",
            ("wasi:sockets/udp-create-socket", "create-udp-socket"): lambda store, family: "access-denied",
            ("wasi:sockets/ip-name-lookup", "resolve-addresses"): lambda store, network, name: _released(
                store, network, "access-denied"
            ),
        }

    # -- pollables: the instant is in the rep ------------------------------------------------

    def _ready(self, store: Any, pollable: ResourceAny) -> bool:
        return _until(_rep(store, pollable), _now_ms()) <= 0

    def _block(self, store: Any, pollable: ResourceAny) -> None:
        self._sleep(store, _until(_rep(store, pollable), _now_ms()))

    def _poll(self, store: Any, pollables: list[ResourceAny]) -> list[int]:
        """The indices of the ready pollables, once one is (or once the call may wait no longer)."""
        reps = [_rep(store, pollable) for pollable in pollables]
        if not reps:
            return []
        now = _now_ms()  # one reading for all: the soonest is the earliest instant, however long the list
        waits = [_until(rep, now) for rep in reps]
        self._sleep(store, min(waits))
        now = _now_ms()
        ready = [index for index, rep in enumerate(reps) if _until(rep, now) <= 0]
        return ready or [waits.index(min(waits))]  # the call's time ran out: its deadline ends it next

    def _sleep(self, store: Any, ms: int) -> None:
        """Wait `ms`, but never past the call's deadline: the epoch interrupt ends the call there."""
        if ms > 0:
            time.sleep(min(ms / 1000, self._time_left(store)))

    # -- stdout and stderr: the capsule's log -------------------------------------------------

    def _write(self, store: Any, stream: ResourceAny, data: bytes) -> Variant:
        level = STREAM_LEVELS.get(_rep(store, stream))
        if level is not None:
            for line in bytes(data).decode("utf-8", "replace").splitlines():
                if line.strip():
                    self._log(store, level, line)
        return Variant("ok")


def _no_destructor(store: Any, rep: int) -> None:
    """Nothing to free: every resource of this host keeps its state in its rep, or has none."""


def _released(store: Any, handle: ResourceAny, value: Any) -> Any:
    """`value`, once the borrowed `handle` is let go."""
    handle.to_host(store)
    return value


def _closed(store: Any, stream: ResourceAny, size: int) -> None:
    """stdin's reads and skips: the `closed` stream error (the untagged case)."""
    stream.to_host(store)
    return None


def _ready_pollable(store: Any, stream: ResourceAny) -> ResourceHost:
    stream.to_host(store)
    return pollable_at(_now_ms())


def _splice(store: Any, target: ResourceAny, source: ResourceAny, size: int) -> None:
    target.to_host(store)
    source.to_host(store)
    return None  # the only input stream (stdin) is closed


def _wall_now(store: Any) -> Any:
    ms = time.time_ns() // _NS_PER_MS
    return record(seconds=ms // 1000, nanoseconds=(ms % 1000) * _NS_PER_MS)


def _random_bytes(store: Any, size: int) -> bytes:
    return os.urandom(min(size, RANDOM_BYTES_PER_CALL))


def _random_u64(store: Any) -> int:
    return int.from_bytes(os.urandom(8), "little")


def _denied(function: str) -> Callable[..., Any]:
    reason = DENIED.get(function, "not offered to capsules")

    def denied(store: Any, *args: Any) -> Any:
        raise wasmtime.WasmtimeError(f"{function}: {reason}")

    return denied
