"""When tracing is on, from the OTEL_* variables (and `--otel`); one clear error for a value it cannot honour."""

from __future__ import annotations

import pytest

from astrid.host.telemetry import setup, tracing
from astrid.host.telemetry.setup import TelemetryConfigError, protocol, wanted_exporters


@pytest.mark.parametrize(
    "env, forced, wanted",
    [
        ({}, False, []),  # off by default: no exporter tries a collector nobody runs
        ({}, True, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, False, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, False, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console"}, False, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, False, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, True, []),
        ({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "x"}, False, []),  # not about traces
    ],
)
def test_tracing_is_on_only_when_the_variables_say_so(env, forced, wanted) -> None:
    assert wanted_exporters(env, forced=forced) == wanted


def test_an_unknown_exporter_or_protocol_is_one_clear_error() -> None:
    with pytest.raises(TelemetryConfigError, match=r"OTEL_TRACES_EXPORTER='zipkin': .* set one of otlp, console, none"):
        wanted_exporters({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(TelemetryConfigError, match=r"OTEL_EXPORTER_OTLP_PROTOCOL='http/json': .*http/protobuf or grpc"):
        protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    assert protocol({}) == "http/protobuf"
    assert protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}) == (
        "http/protobuf"  # the traces-only variable wins
    )


def test_configure_off_leaves_everything_off() -> None:
    assert setup.configure({}) is None
    assert not tracing.on
    assert tracing.span("x") is tracing.NO_SPAN and tracing.capture() is None
    carrier: dict[str, str] = {}
    tracing.inject(carrier)
    assert carrier == {}


def test_the_service_name_comes_from_otel_service_name_else_astrids(monkeypatch) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    try:
        provider = setup.configure({}, exporter=InMemorySpanExporter(), service_name="astrid-host")
        assert provider.resource.attributes["service.name"] == "astrid-host"
        monkeypatch.setenv("OTEL_SERVICE_NAME", "team-server")  # the SDK reads it from the environment
        provider = setup.configure({}, exporter=InMemorySpanExporter())
        assert provider.resource.attributes["service.name"] == "team-server"
    finally:
        setup.shutdown()
    assert not tracing.on
