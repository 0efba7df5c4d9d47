"""servicekit.telemetry: FastAPI's per-request OpenTelemetry check runs only where an operator asked for telemetry."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi import FastAPI
from opentelemetry import trace

from enforcer.service import main as enforcer_main
from enforcer.service.settings import EnforcerSettings
from extender import main as extender_main
from extender.decide import Extender
from extender.directory import EnforcerDirectory
from extender.replica import ReplicaStore
from servicekit import telemetry
from webhook import discovery
from webhook import main as webhook_main
from webhook.settings import WebhookSettings

WANTED = [
    ({"FASTAPI_OTEL_AUTO_CONFIGURE": "true"}, True),
    ({"FASTAPI_OTEL_AUTO_CONFIGURE": "TRUE"}, True),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_METRICS_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),  # the OTel spelling of "export nothing"
    ({"OTEL_TRACES_EXPORTER": " None "}, False),
    ({"OTEL_TRACES_EXPORTER": ""}, False),
    ({"FASTAPI_OTEL_AUTO_CONFIGURE": "false"}, False),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),  # the operator's off switch wins
    ({"OTEL_SERVICE_NAME": "webhook"}, False),  # a name alone exports nothing
    ({}, False),
]


@pytest.mark.parametrize(("environ", "wanted"), WANTED)
def test_the_environment_decides_whether_telemetry_is_wanted(environ: dict[str, str], wanted: bool) -> None:
    assert telemetry.operator_wants_telemetry(environ) is wanted
    assert telemetry.fastapi_telemetry(environ) == (None if wanted else telemetry.OFF)


def test_a_provider_installed_before_start_keeps_fastapis_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """``opentelemetry-instrument`` installs an SDK provider before our code runs: FastAPI must keep tracing."""
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    assert telemetry.operator_wants_telemetry({}) is True


def _webhook() -> FastAPI:
    directory = discovery.StaticDirectory({})
    return webhook_main.create_app(WebhookSettings(), components=webhook_main.Components(directory=directory))


def _enforcer() -> FastAPI:
    return enforcer_main.create_app(EnforcerSettings(node_name="node-a"))


def _extender() -> FastAPI:
    return extender_main.create_app(
        extender_main.Components(extender=Extender(ReplicaStore(freshness=60.0), EnforcerDirectory({})))
    )


APPS = [
    pytest.param(_webhook, id="webhook"),
    pytest.param(_enforcer, id="enforcer"),
    pytest.param(_extender, id="extender"),
]


@pytest.mark.parametrize("make", APPS)
def test_every_service_turns_the_signals_off_unless_asked(
    make: Callable[[], FastAPI], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("FASTAPI_OTEL_AUTO_CONFIGURE", "OTEL_SDK_DISABLED", *telemetry.EXPORT_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    off = make()._telemetry  # FastAPI's resolved config (no public accessor)
    assert (off["tracing"], off["metrics"], off["logs"]) == (False, False, False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    on = make()._telemetry
    assert (on["tracing"], on["metrics"], on["logs"]) == (True, True, True)  # FastAPI's defaults, untouched
