"""Correctness fixes for wasmtime-py 50.0.1's component layer: always installed.

wasmtime-py 50.0.1 keeps two pieces of module-global state that break a host
running Stores on several threads (as the sandbox pool does):

- **Variant lowering.** An untagged variant (and option/result, which lower
  the same way) picks its case by isinstance against the case's Python
  classes, gathered in one module-global set (`_types.case_test_cache`) that
  every lowering clears and refills. Two threads lowering at once see each
  other's classes and can lower a value as the wrong case, or refuse it.
  `_lower` here gathers each type's case classes into a table kept on the
  type object (a type never changes) and shares nothing between threads.
- **Host-import exceptions.** A Python exception raised in a host import is
  parked in the module-global `_enter.LAST_EXCEPTION` and re-raised by
  whichever thread next leaves wasm with an error: another capsule's call
  could fail with this one's exception. The host-call trampoline made by
  `host_trampoline` turns any exception into a `WasmtimeError`, which traps
  only the calling guest.

Invariants:
- Both replace private wasmtime-py code, so they are tied to the version they
  were written for: `install()` raises `WasmtimeVersionError` on any other
  version rather than let an upgrade drop them silently.
- `install()` is idempotent and runs where the engine and the host ABI are set
  up, before any `add_func` (the trampoline is bound when a function is
  added). `ASTRID_NO_FASTPATH` does not turn it off: that switch is for the
  optional speed-ups in `fastpath`, whose own trampoline is made by
  `host_trampoline` too and so keeps the exception fix.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import wasmtime
from wasmtime import StoreContext
from wasmtime import _ffi as ffi
from wasmtime.component import _linker
from wasmtime.component import _types as T
from wasmtime.component._enter import catch_exceptions

from astrid.host.errors import WasmtimeVersionError

EXPECTED_VERSION = "50.0.1"

# (host function index, the calling Store, the call's raw FuncType) -> (parameter types, result type)
SignatureLookup = Callable[[int, StoreContext, Any], tuple[list[Any], Any]]
CaseTable = list[tuple[str, Any, tuple[type, ...]]]  # (case name, payload type or None, payload classes)

_installed = False
_install_lock = threading.Lock()


def installed_version() -> str:
    try:
        return version("wasmtime")
    except PackageNotFoundError:
        return "unknown"


def check_version() -> None:
    """Raise `WasmtimeVersionError` unless the installed wasmtime is `EXPECTED_VERSION`."""
    found = installed_version()
    if found != EXPECTED_VERSION:
        raise WasmtimeVersionError(
            f"astrid needs wasmtime=={EXPECTED_VERSION}, but wasmtime {found} is installed "
            f"(astrid patches private wasmtime-py code written for that version); "
            f"reinstall with `pip install wasmtime=={EXPECTED_VERSION}`"
        )


# -- variant lowering without the shared set -------------------------------------


def _case_table(self: Any) -> CaseTable:
    """Each case's name, payload type and payload classes, computed once per type object."""
    try:
        return self.__dict__["_astrid_case_table"]
    except KeyError:
        table: CaseTable = []
        for name, ty in self._cases():
            classes: set[type] = set()
            if ty is not None:
                ty.add_classes(classes)
            table.append((name, ty, tuple(classes)))
        self.__dict__["_astrid_case_table"] = table
        return table


def _lower(self: Any, store: Any, val: Any) -> tuple[str, Any]:
    """`VariantLikeType._lower`, the same cases picked, with no module-global state."""
    tagged = self._tagged()
    if tagged and not isinstance(val, T.Variant):
        raise TypeError("expected Variant type")
    for name, ty, classes in _case_table(self):
        if tagged:
            if name != val.tag:
                continue
        elif ty is None:
            if val is not None:
                continue
        elif not isinstance(val, classes):
            continue
        if ty is None:
            return (name, None)
        raw = ffi.wasmtime_component_val_t()
        ty.convert_to_c(store, val.payload if tagged else val, ctypes.pointer(raw))
        return (name, ffi.wasmtime_component_val_new(ctypes.byref(raw)))
    raise ValueError("value not valid for this variant")


# -- host imports that never park an exception -------------------------------------


def fresh_signature(idx: int, store: StoreContext, ty_raw: Any) -> tuple[list[Any], Any]:
    """A host import's parameter and result types, read from this call's own FuncType.

    The FuncType is borrowed (valid during this call only); the types read from
    it are owned copies, which `fastpath` may keep.
    """
    fty = T.FuncType._from_ptr(ty_raw, owner=store)
    return [ty for _, ty in fty.params], fty.result


def host_trampoline(signature: SignatureLookup) -> Any:
    """A host-call trampoline for `LinkerInstance.add_func` that turns every exception into a trap.

    `signature` gives the import's types; `fastpath` passes one that caches them.
    The returned ctypes callback must stay referenced as long as functions use it.
    """

    @ffi.wasmtime_component_func_callback_t
    def trampoline(idx, context, ty_raw, args, nargs, results, nresults):
        def run(store: StoreContext) -> None:
            try:
                func = _linker.FUNCTIONS.get(idx or 0)
                param_tys, result_ty = signature(idx or 0, store, ty_raw)
                if len(param_tys) != nargs or nresults != (0 if result_ty is None else 1):
                    raise wasmtime.WasmtimeError("host function called with an unexpected signature")
                result = func(store, *[ty.convert_from_c(args[i]) for i, ty in enumerate(param_tys)])
                if result_ty is not None:
                    result_ty.convert_to_c(store, result, results)
            except wasmtime.WasmtimeError:
                raise
            except BaseException as exc:
                # A WasmtimeError traps only this guest; any other exception would
                # be parked in wasmtime-py's module-global slot and re-raised on
                # whichever thread enters wasm next, and a BaseException (a
                # KeyboardInterrupt, a SystemExit) escaping the callback aborts
                # the process: upstream catches BaseException here too.
                raise wasmtime.WasmtimeError(f"host call failed: {type(exc).__name__}: {exc}") from None

        return catch_exceptions(context, run)

    return trampoline


host_call = host_trampoline(fresh_signature)


def install() -> None:
    """Apply the fixes once; `WasmtimeVersionError` on a wasmtime they were not written for."""
    global _installed
    with _install_lock:
        check_version()  # every time: cheap, and a refusal never depends on call order
        if _installed:
            return
        setattr(T.VariantLikeType, "_lower", _lower)  # noqa: B010 (mypy refuses assigning to a method)
        _linker.func_impl = host_call  # picked up by LinkerInstance.add_func
        _installed = True


def installed() -> bool:
    return _installed
