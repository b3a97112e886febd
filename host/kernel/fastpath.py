"""Speed-ups and a thread-safety fix for wasmtime-py 50.0.1's component values.

wasmtime-py rebuilds the type tree over FFI on every call (~24 type objects
per host import) and lowers untagged variants through one module-global set
that every thread clears and refills: under parallel Stores a thread can see
another thread's case classes and pick the wrong case. This module:

- memoizes the type properties (fields, cases, element, payload, ...) on each
  type object, so a kept type tree costs nothing to walk again;
- lowers variants with per-type case-class tuples (no shared set);
- keeps each export function's type on its `Func` (a Func lives in one Store);
- lowers `list<u8>` from bytes in one pass instead of byte by byte;
- caches a host import's parameter and result types per (import, component),
  so a component's types are computed once. Keying by component keeps it safe
  even for a component that imports a host function with another signature.

It touches private modules, hence the exact wasmtime pin in pyproject.toml.
`install()` is idempotent and `ASTRID_NO_FASTPATH=1` turns it off.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any

import wasmtime
from wasmtime import StoreContext
from wasmtime import _ffi as ffi
from wasmtime.component import _func, _linker
from wasmtime.component import _types as T
from wasmtime.component._enter import catch_exceptions

EXPECTED_VERSION = "50.0.1"
_installed = False
_install_lock = threading.Lock()

# Store identity -> the Component instantiated in it (kept by the host ABI).
_store_components: dict[int, Any] = {}


def store_key(store: Any) -> int:
    """Identity of a Store, the same from a host callback and from outside."""
    return ctypes.cast(store._context(), ctypes.c_void_p).value or 0


def bind_store(store: Any, component: Any) -> None:
    _store_components[store_key(store)] = component


def unbind_store(store: Any) -> None:
    _store_components.pop(store_key(store), None)


def _memoize_property(cls: type, name: str) -> None:
    getter = cls.__dict__[name].fget
    slot = "_astrid_" + name

    def cached(self: Any) -> Any:
        try:
            return self.__dict__[slot]
        except KeyError:
            value = getter(self)
            self.__dict__[slot] = value
            return value

    setattr(cls, name, property(cached, doc=getattr(getter, "__doc__", None)))


def _tagged(self: Any) -> bool:
    try:
        return self.__dict__["_astrid_tagged"]
    except KeyError:
        value = _ORIGINAL_TAGGED(self)
        self.__dict__["_astrid_tagged"] = value
        return value


def _case_table(self: Any) -> list[tuple[str, Any, tuple[type, ...] | None]]:
    try:
        return self.__dict__["_astrid_case_table"]
    except KeyError:
        table = []
        for name, ty in self._cases():
            classes: set[type] = set()
            if ty is not None:
                ty.add_classes(classes)
            table.append((name, ty, tuple(classes) if ty is not None else None))
        self.__dict__["_astrid_case_table"] = table
        return table


def _lower(self: Any, store: Any, val: Any) -> tuple[str, Any]:
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


def _list_to_c(self: Any, store: Any, val: Any, ptr: Any) -> None:
    """`list<u8>` from bytes in one pass (stock code converts byte by byte)."""
    if not (type(val) is bytes and self._is_bytes()):
        return _ORIGINAL_LIST_TO_C(self, store, val, ptr)
    count = len(val)
    raw = ffi.wasmtime_component_vallist_t()
    ffi.wasmtime_component_vallist_new_uninit(raw, count)
    if count:
        template = ffi.wasmtime_component_val_t()
        template.kind = ffi.WASMTIME_COMPONENT_U8
        template.of.u8 = 0
        size = ctypes.sizeof(template)
        image = bytearray(bytes(template) * count)
        image[_U8_OFFSET::size] = val  # every element's value byte at once
        ctypes.memmove(raw.data, (ctypes.c_char * len(image)).from_buffer(image), len(image))
    ptr.contents.kind = ffi.WASMTIME_COMPONENT_LIST
    ptr.contents.of.list = raw
    return None


_U8_OFFSET = ffi.wasmtime_component_val_t.of.offset + ffi.wasmtime_component_valunion_t.u8.offset


def _func_type(self: Any, store: Any) -> Any:
    try:
        return self.__dict__["_astrid_type"]
    except KeyError:
        value = _ORIGINAL_FUNC_TYPE(self, store)
        self.__dict__["_astrid_type"] = value
        return value


# (host function index) -> {component: (param types, result type)}
_host_types: dict[int, "weakref.WeakKeyDictionary[Any, tuple[list[Any], Any]]"] = {}


def _host_signature(idx: int, store: StoreContext, ty_raw: Any) -> tuple[list[Any], Any]:
    component = _store_components.get(store_key(store))
    if component is not None:
        per_component = _host_types.setdefault(idx, weakref.WeakKeyDictionary())
        cached = per_component.get(component)
        if cached is not None:
            return cached
    # Take owned copies of the types: ty_raw is only valid during this call.
    fty = T.FuncType._from_ptr(ty_raw, owner=store)
    signature = ([ty for _, ty in fty.params], fty.result)
    if component is not None:
        per_component[component] = signature
    return signature


@ffi.wasmtime_component_func_callback_t
def _fast_func_impl(idx, context, ty_raw, args, nargs, results, nresults):  # type: ignore[no-untyped-def]
    def run(store: StoreContext) -> None:
        func = _linker.FUNCTIONS.get(idx or 0)
        param_tys, result_ty = _host_signature(idx or 0, store, ty_raw)
        if len(param_tys) != nargs or nresults != (0 if result_ty is None else 1):
            raise wasmtime.WasmtimeError("host function called with an unexpected signature")
        try:
            result = func(store, *[ty.convert_from_c(args[i]) for i, ty in enumerate(param_tys)])
            if result_ty is not None:
                result_ty.convert_to_c(store, result, results)
        except wasmtime.WasmtimeError:
            raise
        except Exception as exc:
            # A WasmtimeError traps only this guest; any other exception would
            # be parked in wasmtime-py's module-global slot and re-raised on
            # whichever thread enters wasm next.
            raise wasmtime.WasmtimeError(f"host call failed: {type(exc).__name__}: {exc}") from None

    return catch_exceptions(context, run)


_ORIGINAL_TAGGED = T.VariantLikeType._tagged
_ORIGINAL_FUNC_TYPE = _func.Func.type
_ORIGINAL_LIST_TO_C = T.ListType.convert_to_c


def install() -> bool:
    """Apply the patches once; False when disabled or on an unexpected wasmtime."""
    global _installed
    with _install_lock:
        if _installed:
            return True
        if os.environ.get("ASTRID_NO_FASTPATH") == "1":
            return False
        from importlib.metadata import version

        if version("wasmtime") != EXPECTED_VERSION:
            return False
        for cls, names in (
            (T.FuncType, ("params", "result")),
            (T.ListType, ("element",)),
            (T.RecordType, ("fields",)),
            (T.TupleType, ("elements",)),
            (T.VariantType, ("cases",)),
            (T.EnumType, ("names",)),
            (T.OptionType, ("payload",)),
            (T.ResultType, ("ok", "err")),
        ):
            for name in names:
                _memoize_property(cls, name)
        T.VariantLikeType._tagged = _tagged
        T.VariantLikeType._lower = _lower
        _func.Func.type = _func_type
        T.ListType.convert_to_c = _list_to_c
        _linker.func_impl = _fast_func_impl  # picked up by LinkerInstance.add_func
        _installed = True
        return True
