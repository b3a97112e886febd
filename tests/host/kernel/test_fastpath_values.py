"""The fast path's value conversions agree with wasmtime-py's own: lowered by one, lifted by the other.

The types are a real component's: get-caller's `result<caller-context, string>`
(a record of strings and a variant), as the fast path cached it on a probe's call.
"""

from __future__ import annotations

import ctypes

import pytest
from wasmtime import _ffi as ffi
from wasmtime.component import Variant, _linker

from astrid.host.kernel import fastpath
from astrid.host.kernel.wit_values import record

from .conftest import client_for
from .test_sandbox import whoami_works

NAME = "ålice ✓ \x00 \U0001f600"  # non-ASCII, a NUL and a 4-byte character


def caller_result_type(kernel, client):
    assert whoami_works(kernel, client)  # one call: get-caller's types are now cached
    for idx, per_component in fastpath._host_types.items():
        if getattr(_linker.FUNCTIONS.get(idx), "__name__", "") == "_get_caller":
            for _params, result in per_component.values():
                return result
    raise AssertionError("get-caller's types were not cached")


def convert(monkeypatch, result_ty, value, *, lower_stock: bool, lift_stock: bool):
    """`value` lowered and lifted back, each direction by the stock or the fast conversions."""
    raw = ffi.wasmtime_component_val_t()
    with monkeypatch.context() as patched:
        if lower_stock:
            for (cls, name), stock in fastpath.STOCK_CONVERSIONS.items():
                if name == "convert_to_c":
                    patched.setattr(cls, name, stock)
        result_ty.convert_to_c(None, value, ctypes.pointer(raw))
    with monkeypatch.context() as patched:
        if lift_stock:
            for (cls, name), stock in fastpath.STOCK_CONVERSIONS.items():
                if name == "convert_from_c":
                    patched.setattr(cls, name, stock)
        return result_ty.convert_from_c(raw)


@pytest.mark.parametrize(("lower_stock", "lift_stock"), [(False, False), (False, True), (True, False)])
def test_a_record_with_strings_and_a_variant_survives_both_ways(
    make_probe, kernel_factory, monkeypatch, lower_stock, lift_stock
) -> None:
    kernel = kernel_factory([make_probe()])
    result_ty = caller_result_type(kernel, client_for(kernel))
    caller = record(principal=NAME, source_id="broker-1", timestamp="", attribution=Variant("verified", NAME))
    lifted = convert(monkeypatch, result_ty, caller, lower_stock=lower_stock, lift_stock=lift_stock)
    assert (lifted.principal, getattr(lifted, "source-id"), lifted.timestamp) == (NAME, "broker-1", "")
    assert (lifted.attribution.tag, lifted.attribution.payload) == ("verified", NAME)
    system = record(principal="", source_id="s", timestamp="t", attribution=Variant("system"))
    lifted = convert(monkeypatch, result_ty, system, lower_stock=lower_stock, lift_stock=lift_stock)
    assert (lifted.attribution.tag, lifted.attribution.payload) == ("system", None)
    assert convert(monkeypatch, result_ty, NAME, lower_stock=lower_stock, lift_stock=lift_stock) == NAME  # the err


def test_a_value_of_the_wrong_shape_is_refused_and_frees_what_it_made(make_probe, kernel_factory) -> None:
    kernel = kernel_factory([make_probe()])
    result_ty = caller_result_type(kernel, client_for(kernel))
    broken = record(principal="alice", source_id=7, timestamp="t", attribution=Variant("system"))
    with pytest.raises(TypeError):
        result_ty.convert_to_c(None, broken, ctypes.pointer(ffi.wasmtime_component_val_t()))
    assert whoami_works(kernel, client_for(kernel))  # the host still serves
