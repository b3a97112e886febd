"""Every tuning knob, in one place: timeouts, intervals, log throttles, pool,
queue and cache sizes, retry counts and work budgets, grouped by the part of
astrid that reads them.

Tuning is not the contract. `limits.py` holds what capsules and clients may
rely on (a reply's size, a read's window, the HTTP front door's caps); a
different `Limits` changes what they see. The knobs here only change how the
host does its work (how often it looks, how long it waits, how much it keeps
in memory): the answers stay the same, only sooner, later or cheaper.

One instance per group (`KERNEL_TUNING`, ...) is what the modules read; the
values are the ones astrid ships with. A test that needs another value (a
shorter quarantine, say) swaps the group the module holds for a
`dataclasses.replace`d copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from astrid.host.limits import MIB


@dataclass(frozen=True)
class BusTuning:
    """The in-memory bus (`bus/memory.py`)."""

    # messages one subscription queues before the oldest is dropped (and counted as lagged)
    subscription_queue_messages: int = 1024
    # live subscriptions of one participant over all its instances (one per principal): a
    # backstop, the host ABI caps each capsule instance at 128
    subscriptions_per_source: int = 8192
    # topics whose matching bindings are remembered (the topic -> bindings lookup); emptied when full
    topics_remembered: int = 4096


@dataclass(frozen=True)
class NatsTuning:
    """The bus across hosts (`bus/nats/`)."""

    # the wait for the NATS server at connect
    connect_timeout_s: float = 5.0
    # how often a host announces itself (and its capsules) to the others ...
    heartbeat_s: float = 1.0
    # ... and how long one may stay silent before it is taken for gone
    host_timeout_s: float = 3.5
    # a pinged host silent this long is taken for dead: its claims are retried
    pong_wait_s: float = 0.6
    # how long a host waits for its own handlers before reporting a message done anyway
    report_wait_s: float = 10.0
    # how often the publisher looks at claimed requests still running
    watch_s: float = 0.1
    # a claim older than this: ping its host
    probe_after_s: float = 0.3
    # a group nobody claimed by then (its replica died on receipt): retried
    unclaimed_s: float = 0.8
    # a failure that repeats every beat (a queue-group update) is logged at most this often
    failure_line_every_s: float = 60.0


@dataclass(frozen=True)
class KernelTuning:
    """Loading and running capsules (`kernel/`)."""

    # how often the engine's epoch ticks: the granularity of every call's wall-time deadline
    epoch_tick_s: float = 0.01
    # capsule folders loaded (read, vetted, compiled) at once
    load_workers: int = 4
    # components larger than this compile in a child process (an in-process compile
    # leaves ~300 MB of RSS behind); smaller ones compile in process
    in_process_compile_max_bytes: int = 1 * MIB
    # files looked at before giving up on "is the component older than its source"
    # (a capsule folder is small)
    stale_check_max_files: int = 5000
    # calls waiting in one (capsule, principal) lane; one more is dropped unrun
    lane_depth: int = 64
    # a call that waited longer than this is dropped unrun: whoever sent it stopped waiting
    stale_after_s: float = 5.0
    # live sandboxes over all (capsule, principal) pairs; the least recently used is evicted
    max_instances: int = 256
    # consecutive failed calls of one (capsule, principal) before it is quarantined ...
    quarantine_after_failures: int = 5
    # ... and for how long
    quarantine_s: float = 30.0
    # outbound HTTP gateways kept per (capsule, grants); past it (grants changed many times)
    # all are closed and made afresh
    http_gateways_kept: int = 64
    # the files a read touched, kept to update that URI when one changes: paths per read
    # (the rest is not watched), URIs per (capsule, principal), URIs in all
    tracked_paths_per_read: int = 64
    tracked_reads_per_sandbox: int = 1024
    tracked_reads: int = 16_384


@dataclass(frozen=True)
class BrokerTuning:
    """Describe and read rounds, and what the broker keeps (`broker/`)."""

    # how often a read's drain looks at the delivery between replies: bounds the extra
    # latency of a not-found answer
    read_slice_s: float = 0.004
    # replies taken from a round's subscription at once
    drain_batch_messages: int = 4096
    # declared-fresh reads kept (over all principals), and their bytes
    read_cache_entries: int = 1024
    read_cache_bytes: int = 32 * MIB
    # principals whose list reply JSON is kept for warm lists; emptied when full
    list_payloads_kept: int = 256
    # a capsule over its announcement rate is said at most once this often (per principal)
    flood_line_every_s: float = 60.0
    # (capsule, principal) pairs whose announcement rate is kept; the least recently seen go first
    announcement_buckets: int = 4096
    # capsules whose refused announcements were said once
    refused_capsules_named: int = 4096
    # describe and templates replies kept checked by their text (the same for every principal:
    # a static describe), their characters in all, and the longest reply kept
    checked_replies_kept: int = 512
    checked_reply_chars_kept: int = 4 * MIB
    checked_reply_chars_max: int = 64 * 1024
    # first reads (a subscription to a URI no read of its owner answered yet): reads at once over
    # all principals, and how many may wait (docs/contract/subscriptions.md §11.2)
    first_read_workers: int = 2
    first_reads_queued: int = 1024
    # how long a subscription's answer waits for its first reads (a read's window, and some)
    first_read_wait_s: float = 3.0


@dataclass(frozen=True)
class McpTuning:
    """The MCP layer's transports and bookkeeping (`mcp/`)."""

    # how long, at end of stdio input, answers to requests already read are waited for:
    # past the front door's worst case (two describe rounds and two read windows)
    stdio_drain_s: float = 15.0
    # a principal at its session cap is warned about at most this often
    session_cap_warn_every_s: float = 60.0
    # a bearer token refused for one reason is said at most this often (the next line counts the rest)
    refused_token_line_every_s: float = 10.0
    # failed logins: at most this many lines per window, then one summary
    failed_login_window_s: float = 10.0
    failed_login_lines_per_window: int = 5
    # descriptors kept free for everything but client connections: capsule files, the
    # kv database, outbound HTTP, NATS, logs
    reserved_fds: int = 128
    # how often open connections are checked against their head and body deadlines
    connection_sweep_every_s: float = 0.25
    # connections closed for a deadline are reported at most this often
    connection_report_every_s: float = 10.0
    # (principal, uri) pairs whose last update time is kept beyond the coalescing window
    recent_updates_kept: int = 4096


@dataclass(frozen=True)
class WatchTuning:
    """Hot reload and changes under granted mounts (`watch.py`, the runtime's lines).

    The mount caps were measured on Linux (ext4, warm cache): ~10 µs to list a
    folder, ~1 µs per name read and ~4 µs more per file (its stat). So one mount
    costs at most ~30 ms, and one poll at most ~0.1 s (each poll budget is
    overdrawn by one mount at most), a tenth of the one-second interval, however
    many folders, files, names in one folder or principals there are.
    """

    # how often the capsule folders and the mounts are polled
    interval_s: float = 1.0
    # a mount folder first polled after a read looked under it: its files modified since the
    # poll before it was wanted, less this (a file system's coarse mtime), are named as changed
    new_folder_lookback_s: float = 1.0
    # files in one capsule folder tree's signature (the folders are the operator's own)
    capsule_max_files: int = 20_000
    # folders deep in one mount: twice what the files capsule lists (8 deep); a
    # 10 000-deep chain then costs 17 listings
    mount_max_depth: int = 16
    # folders listed per mount, ~10 ms: a notes or docs tree has tens to hundreds
    mount_max_folders: int = 1_000
    # names read per mount (files or not), ~25 ms: the files capsule lists 500 files
    mount_max_entries: int = 5_000
    # folders listed per poll over all mounts: once spent, the mounts not walked yet
    # wait for the next poll
    poll_max_folders: int = 2_000
    # likewise for names read
    poll_max_entries: int = 10_000
    # a folder written to all the time (a log) prints at most one "changed" line this often
    mount_line_every_s: float = 10.0


@dataclass(frozen=True)
class CapabilityTuning:
    """The host interfaces behind fs, kv and http (`capabilities/`)."""

    # how long a kv call waits for SQLite's lock held by another process
    kv_busy_timeout_ms: int = 5000
    # how long a kv call on NATS waits for the server
    kv_nats_call_timeout_s: float = 5.0
    # compare-and-set rounds on NATS before giving up (only under a storm of writers to one namespace)
    kv_nats_max_attempts: int = 64


@dataclass(frozen=True)
class BuildTuning:
    """`astrid capsule build` (`build/`)."""

    # how long pip may take to install a capsule's requirements
    pip_timeout_s: float = 900.0


@dataclass(frozen=True)
class IdentityTuning:
    """Artifacts and their transfer (`identity/`)."""

    # how long `wasm-tools` may take on one component
    wasm_tools_timeout_s: float = 60
    # an OCI registry: to connect, then each read
    oci_connect_timeout_s: float = 10.0
    oci_read_timeout_s: float = 120.0
    # a whole pull or push, plus the time the artifact's declared size takes at the minimum
    # rate ($ASTRID_OCI_DEADLINE overrides it; `identity/oci_deadline.py`)
    oci_deadline_s: float = 300.0
    # while a registry body arrives: at least this many bytes a second ($ASTRID_OCI_MIN_RATE;
    # 0 turns it off), averaged over the window, so a shorter stall passes
    oci_min_rate_bytes_per_s: float = 8192.0
    oci_rate_window_s: float = 60.0


@dataclass(frozen=True)
class TelemetryTuning:
    """Metrics' label cardinality (`telemetry/metrics.py`) and their listener's bounds (`telemetry/listener.py`)."""

    # principals named in the session and stream gauges (the rest summed as `_other`)
    top_principals: int = 10
    # capsule names used as labels (later ones counted as `_other`)
    capsule_labels: int = 200
    # metrics connections open at once (at most a sixteenth of the open-file limit): far inside the
    # descriptors the MCP front door keeps free (`McpTuning.reserved_fds`); at the cap the oldest
    # one still waiting for its request head makes room
    metrics_connections: int = 32
    # threads answering complete requests (a scrape is one collection, milliseconds)
    metrics_threads: int = 2
    # a connection's request head must be complete this long after it was accepted ...
    metrics_header_timeout_s: float = 3.0
    # ... no longer than this (bytes) ...
    metrics_head_bytes: int = 8 * 1024
    # ... and its answer written within this
    metrics_answer_timeout_s: float = 5.0
    # how often open metrics connections are checked against the head deadline
    metrics_sweep_every_s: float = 0.25


@dataclass(frozen=True)
class CliTuning:
    """The `astrid` command (`cli/`)."""

    # HTTP worker threads: the per-principal cap (16) times a few principals, so one busy
    # principal never holds every thread
    http_worker_threads: int = 64
    # `--workers`: how long its nats-server may take to listen, its workers to host their
    # capsules (the first start may compile every capsule), and a process told to stop
    # to exit before it is killed
    nats_start_timeout_s: float = 10.0
    worker_ready_timeout_s: float = 300.0
    worker_stop_timeout_s: float = 5.0
    # folder levels below PATH searched for capsules when none is at PATH or just below it,
    # and the folders looked at in that search, at most
    capsule_search_depth: int = 4
    capsule_search_max_folders: int = 5000
    # log records of a read held back (shown with -v or after it succeeds)
    held_log_records: int = 256


@dataclass(frozen=True)
class DevTuning:
    """`astrid capsule dev` (`capsule/sources.py`, `serving/dev.py`): the sources the host reads and serves.

    A capsule folder with its pinned packages is tens to hundreds of `.py`
    files (a package such as `requests` with its dependencies: ~150 files,
    ~2 MB). The caps bound what one edit makes the host read and keep, and
    what a sandbox may ask for.
    """

    # .py files of the folder and its pinned packages, together
    max_source_files: int = 4_000
    # one file, and all of them
    max_file_bytes: int = 2 << 20
    max_total_bytes: int = 32 << 20
    # how often the folder is polled (a change is acted on when two polls agree)
    interval_s: float = 0.2


BUS_TUNING = BusTuning()
NATS_TUNING = NatsTuning()
KERNEL_TUNING = KernelTuning()
BROKER_TUNING = BrokerTuning()
MCP_TUNING = McpTuning()
WATCH_TUNING = WatchTuning()
CAPABILITY_TUNING = CapabilityTuning()
BUILD_TUNING = BuildTuning()
IDENTITY_TUNING = IdentityTuning()
TELEMETRY_TUNING = TelemetryTuning()
CLI_TUNING = CliTuning()
DEV_TUNING = DevTuning()
