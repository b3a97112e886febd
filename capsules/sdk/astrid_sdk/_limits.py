"""The contract's limits, as the SDK's constants (docs/contract/limits.md §7 defaults).

The SDK enforces them on its own output so an over-limit reply becomes a read
error (or a logged drop in describe), never a message the host refuses. Tests
hold each one to the host's `Limits`.

Pure Python, no imports: this module runs inside the wasm guest.
"""

KIB = 1024
MIB = 1024 * KIB
MAX_RESOURCES_PER_DESCRIBE = 256
MAX_URI_BYTES = 2048
MAX_TITLE_BYTES = 4096
MAX_DESCRIPTION_BYTES = 4096
MAX_META_BYTES = 4096
MAX_ICONS = 8
MAX_CHUNKS_PER_READ = 64
MAX_BYTES_PER_READ = 700 * KIB
MAX_MESSAGE_BYTES = 1 * MIB
MAX_TOPIC_BYTES = 256
MAX_TEMPLATES_PER_DESCRIBE = 64  # templates per templates-response
MAX_COMPLETION_VALUES = 100  # values per complete-response (as MCP's completion/complete)
MAX_AGE_S = 86_400  # the longest declared freshness (max_age_s) the host honours: one day
