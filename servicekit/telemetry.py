"""Whether FastAPI's native OpenTelemetry runs in this process: decided once, when the app is made.

Why: FastAPI asks on every request whether an OpenTelemetry provider has been
configured since the last request (``NativeTelemetry.enabled``: three provider
lookups: 7.5 µs a call by timeit on a busy 2-core machine against 0.2 µs with
the signals off; about 11,000 instructions, 1.4% of a replica review's, by
callgrind), paid on every request by every deployment that exports nothing.

The services never configure a provider themselves, and the image ships the
OpenTelemetry API without an SDK, so a provider exists only when the operator
brings one: a process started under ``opentelemetry-instrument`` (its providers
are global before our code runs), or FastAPI's own auto-configuration
(``FASTAPI_OTEL_AUTO_CONFIGURE=true`` with the ``fastapi[opentelemetry]``
packages installed), or the ``OTEL_*`` exporter variables such a set-up reads.
In each of those cases FastAPI keeps its defaults, unchanged; otherwise its
three signals are off.  What this gives up: a provider installed
programmatically *after* the app was made would be ignored; no code in this
project does that.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from fastapi.telemetry import TelemetryConfig
from opentelemetry import trace

OFF: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}
"""FastAPI's telemetry with every signal off (its per-request check then costs almost nothing)."""

EXPORT_VARIABLES = (
    # the variables an OpenTelemetry SDK set-up reads to export; "none" (any case) is the spelling of "nothing"
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
)


def operator_wants_telemetry(environ: Mapping[str, str] | None = None) -> bool:
    """True when the environment or an already installed global provider asks for OpenTelemetry."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if env.get("FASTAPI_OTEL_AUTO_CONFIGURE", "").lower() == "true":
        return True
    if any(env.get(name, "").strip().lower() not in ("", "none") for name in EXPORT_VARIABLES):
        return True
    # the API's own placeholder until someone installs an SDK provider (opentelemetry-instrument does, at start)
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def fastapi_telemetry(environ: Mapping[str, str] | None = None) -> TelemetryConfig | None:
    """The ``telemetry=`` argument for ``FastAPI()``: None (FastAPI's defaults) when wanted, else :data:`OFF`."""
    return None if operator_wants_telemetry(environ) else OFF
