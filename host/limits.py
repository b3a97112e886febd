"""Every limit, in one place: the resource contract's (docs/contract/limits.md §7), the HTTP front door's,
and those of resource subscriptions (docs/contract/subscriptions.md §11)."""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class Limits:
    resources_per_describe: int = 256
    resources_per_principal: int = 512
    uri_bytes: int = 2048
    title_bytes: int = 4096
    description_bytes: int = 4096
    meta_bytes: int = 4096
    icons_per_definition: int = 8
    chunks_per_read: int = 64
    bytes_per_read: int = 700 * KIB
    bus_message_bytes: int = 1 * MIB
    describe_window_s: float = 2.5
    read_window_s: float = 2.5
    call_wall_time_s: float = 2.0
    capsule_memory_bytes: int = 64 * MIB
    templates_per_describe: int = 64
    templates_per_principal: int = 256
    completion_values: int = 100  # as MCP's completion/complete


DEFAULT_LIMITS = Limits()


# The HTTP front door's, sized for a team server: hundreds of users behind one
# process, each with a few connections, sessions and streams. Behind a reverse
# proxy everyone comes from the proxy's address: connections_per_client=0.
@dataclass(frozen=True)
class HttpLimits:
    # open TCP connections (clamped below the file-descriptor limit at start)
    connections: int = 1024
    # open connections from one client address; 0: no per-address cap
    connections_per_client: int = 128
    # the request head must be complete this long after the connection is ready for it
    header_timeout_s: float = 10.0
    # the body must be complete this long after the head
    body_timeout_s: float = 30.0
    # an idle connection between two requests is closed after this
    keep_alive_s: float = 5.0
    # handshake-era sessions, all principals together (the last bound)
    sessions: int = 256
    # sessions of one principal: its own oldest idle session makes room
    sessions_per_principal: int = 16
    # 2026-07-28 `subscriptions/listen` streams of one principal
    streams_per_principal: int = 16
    # requests of one principal in flight at once; the next is refused as busy, never queued
    requests_per_principal: int = 16
    # a session with no request in flight this long is closed
    session_idle_s: float = 1800.0
    # how often open sessions and streams have their credential checked again
    credential_check_s: float = 2.0


# Resource subscriptions and the updates they hear (docs/contract/subscriptions.md §11), on
# stdio and HTTP alike: what one principal may hold open, how often one URI is
# announced to it, and how often one capsule may announce.
@dataclass(frozen=True)
class SubscriptionLimits:
    # URIs one principal may be subscribed to at once, over all its sessions
    # (`resources/subscribe`) and listen streams (`resourceSubscriptions`)
    subscriptions_per_principal: int = 256
    # at most one `notifications/resources/updated` per URI per principal this often
    # (a later change in the window is announced once, at its end)
    coalesce_s: float = 0.25
    # announcements one capsule may make for one principal: a burst, refilled at this rate
    # (the rest are dropped, and logged)
    announcements_burst: int = 64
    announcements_per_s: float = 16.0


DEFAULT_SUBSCRIPTION_LIMITS = SubscriptionLimits()
