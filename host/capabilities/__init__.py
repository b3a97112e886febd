"""Host capabilities a capsule may ask for and the operator may grant: read-only
files (`fs`), per-principal key-value state (`kv`) and allowlisted outbound
HTTP (`http`). See docs/capabilities.md.

Each module here is plain Python with no wasm in it: the kernel's ABI
(`host/kernel/capability_abi.py`) turns guest calls into calls on these and a
`CapabilityError` into the WIT `error-code` case of the same name.
"""

from astrid.host.capabilities.errors import CapabilityError

__all__ = ["CapabilityError"]
