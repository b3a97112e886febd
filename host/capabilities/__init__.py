"""Host capabilities a capsule may ask for and the operator may grant: read-only
files (`fs`), per-principal key-value state (`kv`) and allowlisted outbound
HTTP (`http`). See docs/capabilities.md.

Each capability is a plug-in (`capability.Capability`, one class each in
`plugins/`, listed in `registry.py`): how a manifest asks for it, how the
operator grants it, and its host functions. The modules here are plain
Python with no wasm in them: the kernel's ABI (`host/kernel/capability_abi.py`)
links each registered capability and turns a `CapabilityError` into the WIT
`error-code` case of the same name.
"""

from astrid.host.capabilities.errors import CapabilityError

__all__ = ["CapabilityError"]
