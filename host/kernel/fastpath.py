"""Optional speed-ups for wasmtime-py 50.0.1's component values.

wasmtime-py rebuilds the type tree over FFI on every call (~24 type objects
per host import) and converts `list<u8>` byte by byte. This module:

- memoizes the type properties (fields, cases, element, payload, ...) and
  `_tagged()` on each type object, so a kept type tree costs nothing to walk
  again;
- keeps each export function's type on its `Func` (a Func lives in one Store);
- lowers `list<u8>` from bytes in one pass, in place, instead of byte by byte;
- lowers a string with one copy, not two, in one C call, written straight into its value cell;
- encodes a record's field names and a variant's case names once per type object, and lifts a
  record without decoding each field's name back (the type gives the fields, in order);
- lifts a string by decoding the C buffer itself (no bytearray copy first);
- keeps the GIL across the C API's memory helpers that conversions call (`KEEP_GIL`);
- caches a host import's parameter and result types per (import, component),
  so a component's types are computed once. Keying by component keeps it safe
  even for a component that imports a host function with another signature;
  the component of a Store comes from the host ABI's store registry.

None of this changes what a call does, only what it costs: the correctness
fixes (thread-safe variant lowering, host exceptions that never park) live in
`wasmtime_patches`, are installed first and stay installed whatever this
module does. Its host-call trampoline is made by
`wasmtime_patches.host_trampoline`, so it keeps the exception fix.

It touches private modules, hence the exact wasmtime pin in pyproject.toml.
`install()` is idempotent and `ASTRID_NO_FASTPATH=1` turns it off.
"""

from __future__ import annotations

import codecs
import ctypes
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from wasmtime import StoreContext, _bindings
from wasmtime import _ffi as ffi
from wasmtime.component import _func, _linker
from wasmtime.component import _types as T

from astrid.host.kernel import wasmtime_patches

DISABLE_ENV = "ASTRID_NO_FASTPATH"

_installed = False
_install_lock = threading.Lock()
# Names the component instantiated in a Store (the host ABI's registry); set by `install()`.
_component_of: Callable[[Any], Any] | None = None


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


def _list_to_c(self: Any, store: Any, val: Any, ptr: Any) -> None:
    """`list<u8>` from bytes in one pass (stock code converts byte by byte).

    The C API wants one 32-byte value cell per byte; the cells are filled in
    place (two strided writes), with no staging copy of that 32x image.
    """
    if not (type(val) is bytes and self._is_bytes()):
        return _ORIGINAL_LIST_TO_C(self, store, val, ptr)
    count = len(val)
    raw = ffi.wasmtime_component_vallist_t()
    ffi.wasmtime_component_vallist_new_uninit(raw, count)
    if count:
        cells = (ctypes.c_ubyte * (count * _CELL_SIZE)).from_address(ctypes.addressof(raw.data.contents))
        view = memoryview(cells).cast("B")
        view[_KIND_OFFSET::_CELL_SIZE] = _U8_KIND * count
        view[_U8_OFFSET::_CELL_SIZE] = val
    ptr.contents.kind = ffi.WASMTIME_COMPONENT_LIST
    ptr.contents.of.list = raw
    return None


# `wasm_byte_vec_new` declared to take the bytes object's own buffer (`c_char_p`): one C call
# copies it, where the stock declaration needs a cast or a staging array first. It keeps the
# GIL (a malloc and a copy): a release would wake a thread waiting for it, for nothing.
_byte_vec_from = ctypes.PYFUNCTYPE(None, ctypes.POINTER(ffi.wasm_byte_vec_t), ctypes.c_size_t, ctypes.c_char_p)(
    ("wasm_byte_vec_new", ffi.dll)
)


def _str_to_capi(s: str) -> ffi.wasm_byte_vec_t:
    """A string as a wasm byte vector, copied once, in one C call (stock code stages it in a ctypes
    array first)."""
    if not isinstance(s, str):
        raise TypeError("expected a string")
    data = s.encode("utf-8")
    vec = ffi.wasm_byte_vec_t()
    _byte_vec_from(ctypes.byref(vec), len(data), data)
    return vec


def _string_to_c(self: Any, store: Any, val: Any, ptr: Any) -> None:
    """A string lowered into the value cell itself (stock code builds a byte vector, then copies it in)."""
    if not isinstance(val, str):
        raise TypeError("expected string type")
    data = val.encode("utf-8")
    cell = ptr.contents
    cell.kind = ffi.WASMTIME_COMPONENT_STRING
    _byte_vec_from(ctypes.byref(cell.of.string), len(data), data)


def _string_from_c(self: Any, c: Any) -> str:
    """A string lifted with one copy, decoded from the C buffer (stock code copies it to a bytearray first)."""
    if c.kind != _STRING_KIND:
        raise TypeError("expected a string value")
    vec = c.of.string
    size = vec.size
    try:
        if not size:
            return ""
        view = (ctypes.c_char * size).from_address(ctypes.addressof(vec.data.contents))
        return codecs.utf_8_decode(view, "strict", True)[0]  # final: a cut sequence raises, as bytes.decode does
    finally:
        ffi.wasm_byte_vec_delete(ctypes.byref(vec))


def _encoded_fields(self: Any) -> list[tuple[str, bytes, Any]]:
    """A record type's fields with their names' UTF-8, computed once per type object."""
    try:
        return self.__dict__["_astrid_encoded_fields"]
    except KeyError:
        fields = [(name, name.encode("utf-8"), ty) for name, ty in self.fields]
        self.__dict__["_astrid_encoded_fields"] = fields
        return fields


def _record_to_c(self: Any, store: Any, val: Any, ptr: Any) -> None:
    """`RecordType.convert_to_c` with each field name's bytes encoded once per type, written in place."""
    fields = _encoded_fields(self)
    raw = ffi.wasmtime_component_valrecord_t()
    ffi.wasmtime_component_valrecord_new_uninit(raw, len(fields))
    entries = raw.data
    done = 0
    try:
        for name, encoded, ty in fields:
            entry = entries[done]
            ty.convert_to_c(store, getattr(val, name), ctypes.pointer(entry.val))
            _byte_vec_from(ctypes.byref(entry.name), len(encoded), encoded)
            done += 1
    except BaseException:
        # As the stock code does: what was not filled becomes a plain bool, then the record is freed.
        for j in range(done, len(fields)):
            entries[j].val.kind = ffi.WASMTIME_COMPONENT_BOOL
            entries[j].val.of.boolean = False
        ffi.wasmtime_component_valrecord_delete(ctypes.byref(raw))
        raise
    cell = ptr.contents
    cell.kind = ffi.WASMTIME_COMPONENT_RECORD
    cell.of.record = raw


def _record_from_c(self: Any, c: Any) -> Any:
    """`RecordType.convert_from_c` without decoding each field's name (the type gives the fields, in order)."""
    if c.kind != _RECORD_KIND:
        raise TypeError("expected a record value")
    record = c.of.record
    try:
        lifted = T.Record()
        entries = record.data
        for i, (name, _, ty) in zip(range(record.size), _encoded_fields(self), strict=False):
            value = entries[i].val
            setattr(lifted, name, ty.convert_from_c(value))
            value.kind = ffi.WASMTIME_COMPONENT_BOOL  # lifted: the record's delete must not free it again
            value.of.boolean = False
        return lifted
    finally:
        ffi.wasmtime_component_valrecord_delete(record)


def _variant_to_c(self: Any, store: Any, val: Any, ptr: Any) -> None:
    """`VariantType.convert_to_c` with the case name's bytes encoded once per type, written in place."""
    name, raw = self._lower(store, val)
    encoded = _case_names(self)[name]
    cell = ptr.contents
    cell.kind = ffi.WASMTIME_COMPONENT_VARIANT
    variant = cell.of.variant
    _byte_vec_from(ctypes.byref(variant.discriminant), len(encoded), encoded)
    variant.val = raw


def _case_names(self: Any) -> dict[str, bytes]:
    try:
        return self.__dict__["_astrid_case_names"]
    except KeyError:
        names = {name: name.encode("utf-8") for name, _ in self.cases}
        self.__dict__["_astrid_case_names"] = names
        return names


def _field_offset(struct: type, name: str) -> int:
    """A ctypes field's byte offset (read off the class: the stubs know only the instance attribute)."""
    return int(getattr(struct, name).offset)


_U8_OFFSET = _field_offset(ffi.wasmtime_component_val_t, "of") + _field_offset(ffi.wasmtime_component_valunion_t, "u8")
_KIND_OFFSET = _field_offset(ffi.wasmtime_component_val_t, "kind")
_CELL_SIZE = ctypes.sizeof(ffi.wasmtime_component_val_t)
_U8_KIND = bytes([ffi.WASMTIME_COMPONENT_U8.value])
_STRING_KIND = ffi.WASMTIME_COMPONENT_STRING.value
_RECORD_KIND = ffi.WASMTIME_COMPONENT_RECORD.value


def _func_type(self: Any, store: Any) -> Any:
    try:
        return self.__dict__["_astrid_type"]
    except KeyError:
        value = _ORIGINAL_FUNC_TYPE(self, store)
        self.__dict__["_astrid_type"] = value
        return value


# (host function index) -> {component: (param types, result type)}
_host_types: dict[int, weakref.WeakKeyDictionary[Any, tuple[list[Any], Any]]] = {}


def _cached_signature(idx: int, store: StoreContext, ty_raw: Any) -> tuple[list[Any], Any]:
    component = _component_of(store) if _component_of is not None else None
    if component is not None:
        per_component = _host_types.setdefault(idx, weakref.WeakKeyDictionary())
        cached = per_component.get(component)
        if cached is not None:
            return cached
    # Owned copies of the types (ty_raw itself is valid during this call only), so they can be kept.
    signature = wasmtime_patches.fresh_signature(idx, store, ty_raw)
    if component is not None:
        per_component[component] = signature
    return signature


_fast_func_impl = wasmtime_patches.host_trampoline(_cached_signature)

# The C API's pure memory helpers that a call's conversions use (a value, a vector, a record
# made or freed: no wasm runs, nothing calls back into Python). ctypes releases the GIL around
# every foreign call, and a release signals a thread waiting for the GIL (the event loop, while
# a capsule's call converts its values), which wakes for nothing: these keep it instead.
KEEP_GIL = (
    "wasm_byte_vec_new_uninitialized",
    "wasm_byte_vec_delete",
    "wasmtime_component_val_new",
    "wasmtime_component_val_delete",
    "wasmtime_component_vallist_new_uninit",
    "wasmtime_component_vallist_delete",
    "wasmtime_component_valrecord_new_uninit",
    "wasmtime_component_valrecord_delete",
    "wasmtime_component_valtuple_new_uninit",
    "wasmtime_component_valtuple_delete",
    "wasmtime_context_set_epoch_deadline",
)


def _keep_gil(name: str) -> None:
    """Rebind `_bindings`' foreign function `name` to one with the same signature that keeps the GIL."""
    slot = "_" + name
    stock = getattr(_bindings, slot)
    keeping = ctypes.PYFUNCTYPE(stock.restype, *stock.argtypes)((name, _bindings.dll))
    setattr(_bindings, slot, keeping)


_ORIGINAL_TAGGED = T.VariantLikeType._tagged
_ORIGINAL_FUNC_TYPE = _func.Func.type
_ORIGINAL_LIST_TO_C = T.ListType.convert_to_c
# wasmtime-py's own conversions that `install` replaces (the tests check the two agree)
STOCK_CONVERSIONS = {
    (T.String, "convert_to_c"): T.String.convert_to_c,
    (T.String, "convert_from_c"): T.String.convert_from_c,
    (T.RecordType, "convert_to_c"): T.RecordType.convert_to_c,
    (T.RecordType, "convert_from_c"): T.RecordType.convert_from_c,
    (T.VariantType, "convert_to_c"): T.VariantType.convert_to_c,
}


def install(component_of: Callable[[Any], Any] | None = None) -> bool:
    """Apply the speed-ups once (after the required `wasmtime_patches`); False when disabled.

    `component_of(store)` names the component instantiated in a Store (the
    host ABI's registry); without it host signatures are not cached.
    Raises `wasmtime_patches.WasmtimeVersionError` on an unexpected wasmtime.
    """
    global _installed, _component_of
    wasmtime_patches.install()  # first: the speed-ups build on its lowering and trampoline
    with _install_lock:
        if component_of is not None:
            _component_of = component_of
        if _installed:
            return True
        if os.environ.get(DISABLE_ENV) == "1":
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
        # setattr: mypy refuses assigning to a method
        setattr(T.VariantLikeType, "_tagged", _tagged)  # noqa: B010
        setattr(_func.Func, "type", _func_type)  # noqa: B010
        setattr(T.ListType, "convert_to_c", _list_to_c)  # noqa: B010
        setattr(T.String, "convert_to_c", _string_to_c)  # noqa: B010
        setattr(T.String, "convert_from_c", _string_from_c)  # noqa: B010
        setattr(T.RecordType, "convert_to_c", _record_to_c)  # noqa: B010
        setattr(T.RecordType, "convert_from_c", _record_from_c)  # noqa: B010
        setattr(T.VariantType, "convert_to_c", _variant_to_c)  # noqa: B010
        ffi.str_to_capi = _str_to_capi  # the component types call it through the module
        for name in KEEP_GIL:
            _keep_gil(name)
        _linker.func_impl = _fast_func_impl  # picked up by LinkerInstance.add_func
        _installed = True
        return True
