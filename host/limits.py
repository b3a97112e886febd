"""Every limit of the resource contract (docs/contract.md §7), in one place."""

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
