"""The one error a capability raises: a WIT `error-code` case and its text."""

from __future__ import annotations

from astrid.host.errors import AstridError


class CapabilityError(AstridError):
    """A refused capability call.

    `code` is the case name in the capability's WIT `error-code` variant
    (`capability-denied`, `invalid-path`, `quota`, ...); `detail` is the text a
    case with a string payload carries (None for a case without one). The
    text never names a host path.
    """

    def __init__(self, code: str, detail: str | None = None) -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail
