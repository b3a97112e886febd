"""Where the author's code is: the call site of a declaration, and the frame an exception came from.

A definition error or a handler's exception is reported against the capsule
author's file and line, never against a line inside the SDK: the frames of
this package are skipped. Inside a componentize-py build a guest file is
`/<path index>/<relative path>` (`/0/app.py` for the capsule folder), shown
as its path relative to that folder (`app.py`, `lib/pages.py`); elsewhere (the
SDK run natively, in tests) as its file name. Stdlib only, and no file is
read: this runs inside the wasm guest.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

from astrid_sdk._errors import DefinitionError

T = TypeVar("T")

_SDK_DIR = __file__.replace("\\", "/").rsplit("/", 1)[0] + "/"
_GUEST_PATH = re.compile(r"/\d+/(.+)")
MAX_SUBJECT_CHARS = 200


def in_sdk(filename: str) -> bool:
    return filename.replace("\\", "/").startswith(_SDK_DIR)


def shown(filename: str) -> str:
    """`app.py` for `/0/app.py` (a guest path), else the file's name."""
    path = filename.replace("\\", "/")
    guest = _GUEST_PATH.fullmatch(path)
    return guest.group(1) if guest else path.rsplit("/", 1)[-1]


def call_site() -> str | None:
    """`app.py:12`: the line of the author's code that called into the SDK (the first frame outside it)."""
    frame: FrameType | None
    try:
        frame = sys._getframe(1)
    except (AttributeError, ValueError):
        return None
    while frame is not None and in_sdk(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    return f"{shown(frame.f_code.co_filename)}:{frame.f_lineno}"


def subject(kind: str, what: object, function: object = None) -> str:
    """`resource astrid://notes/a on readme()`: what a declaration declares, for its errors."""
    text = what if isinstance(what, str) else repr(what)
    if len(text) > MAX_SUBJECT_CHARS:
        text = text[: MAX_SUBJECT_CHARS - 1] + "…"
    name = getattr(function, "__name__", None) if function is not None else None
    return f"{kind} {text}" + (f" on {name}()" if isinstance(name, str) else "")


def declare(site: str | None, what: str, make: Callable[[], T]) -> T:
    """`make()`, with a DefinitionError it raises naming `site` and `what` (one message, no SDK frame)."""
    try:
        return make()
    except DefinitionError as exc:
        if exc.site is not None or exc.subject is not None:
            raise
        error = DefinitionError(exc.problem or str(exc), site=site, subject=what)
    raise error from None


def exception_site(exc: BaseException) -> str:
    """` (app.py:12 in readme)`: the last frame of `exc` in the author's code (any frame when none is)."""
    last = None
    authored = None
    tb = exc.__traceback__
    while tb is not None:
        last = tb
        if not in_sdk(tb.tb_frame.f_code.co_filename):
            authored = tb
        tb = tb.tb_next
    chosen = authored or last
    if chosen is None:
        return ""
    code = chosen.tb_frame.f_code
    return f" ({shown(code.co_filename)}:{chosen.tb_lineno} in {code.co_name})"


def definition_site(function: object) -> str:
    """` (app.py:12)`: where `function` is defined (its `def` line); "" when it has no code of its own."""
    code = getattr(function, "__code__", None)
    if code is None:
        return ""
    return f" ({shown(code.co_filename)}:{code.co_firstlineno})"


def describe_exception(exc: BaseException, host: object = None) -> str:
    """`ValueError: boom (app.py:12 in readme)` without reading any file.

    The place is the last frame in the author's code, not one inside the SDK
    (a refused `ctx.fs.read` points at the handler's line that called it).
    A bare MemoryError (the sandbox's memory limit refused a grow) names the
    limit, which `host` (the SDK's host bindings) asks of the host.
    """
    where = exception_site(exc)
    message = str(exc)
    if isinstance(exc, MemoryError) and not message:
        mib = _memory_limit_mib(host)
        message = f"exceeded {mib} MiB, the sandbox's memory limit" if mib else "exceeded the sandbox's memory limit"
    return f"{type(exc).__name__}: {message}{where}" if message else f"{type(exc).__name__}{where}"


# The host's get-config key for the sandbox's memory limit in MiB (host/kernel/abi.py).
MEMORY_LIMIT_KEY = "astrid:memory-limit-mib"


def _memory_limit_mib(host: object) -> str | None:
    """The limit in MiB as the host tells it; None from a host that does not."""
    config = getattr(host, "config", None)
    mib = config(MEMORY_LIMIT_KEY) if callable(config) else None
    return mib if isinstance(mib, str) and mib.isdigit() else None
