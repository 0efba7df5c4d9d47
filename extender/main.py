"""The extender's HTTP shell: ``POST /filter``, ``POST /prioritize``, ``GET /replicas``, probes, metrics.

Bodies are read and decoded here and handed to :class:`extender.decide.Extender`.  A body that is not
``ExtenderArgs`` (not JSON, wrong shape, a pod that does not parse) is ``400`` with an ``ErrorBody``
message, never a 500: kube-scheduler counts any non-200 as the extender failing, and with
``ignorable: true`` goes on without it.  An unexpected failure inside ``filter`` is answered 200 with
``ExtenderFilterResult.Error`` set (the scheduler's documented channel for an extender's error), and
logged.  Handlers are coroutines that decide inline: the decisions are CPU-bound and short, and the
scheduler calls an extender one pod at a time.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, Response

from extender import wire
from extender.decide import Extender
from extender.metrics import CONTENT_TYPE, ExtenderMetrics
from extender.poller import Poller
from servicekit import telemetry
from shared import contract

log = logging.getLogger(__name__)


@dataclass
class Components:
    extender: Extender
    poller: Poller | None = None  # started and stopped with the app when given


def create_app(components: Components, *, max_body_bytes: int = 16 << 20) -> FastAPI:
    metrics = ExtenderMetrics()
    extender = components.extender

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if components.poller is not None:
            components.poller.start()
        try:
            yield
        finally:
            if components.poller is not None:
                components.poller.stop()

    app = FastAPI(
        title="numaguard scheduler extender",
        version="1",
        description="kube-scheduler HTTP extender (k8s.io/kube-scheduler/extender/v1): filter and prioritize "
        "by the enforcers' own admission, run on replicas of their state.",
        lifespan=lifespan,
        telemetry=telemetry.fastapi_telemetry(),
    )
    app.state.metrics = metrics

    async def _args(request: Request) -> object:
        body = await request.body()
        if len(body) > max_body_bytes:
            raise wire.MalformedArgs(f"ExtenderArgs larger than {max_body_bytes} bytes")
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise wire.MalformedArgs(f"ExtenderArgs is not JSON: {err}") from None

    def _bad(verb: str, err: wire.MalformedArgs, started: float) -> Response:
        metrics.request_seconds.labels(verb=verb, status="400").observe(time.perf_counter() - started)
        log.warning("malformed extender args", extra={"verb": verb, "error": err.message})
        body = contract.ErrorBody(reason="MalformedExtenderArgs", message=err.message)
        return Response(body.model_dump_json(), status_code=400, media_type="application/json")

    def _ok(verb: str, payload: Any, started: float) -> Response:
        metrics.request_seconds.labels(verb=verb, status="200").observe(time.perf_counter() - started)
        return Response(json.dumps(payload, separators=(",", ":")), media_type="application/json")

    @app.post("/filter", tags=["extender"], summary="ExtenderArgs -> ExtenderFilterResult")
    async def filter_nodes(request: Request) -> Response:
        started = time.perf_counter()
        try:
            args = await _args(request)
            result = extender.filter(args)
        except wire.MalformedArgs as err:
            return _bad("filter", err, started)
        except Exception as err:  # the scheduler's channel for an extender's own failure
            log.exception("filter failed")
            result = {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": f"numaguard extender: {type(err).__name__}: {err}",
            }
        _count(metrics, result)
        return _ok("filter", result, started)

    @app.post("/prioritize", tags=["extender"], summary="ExtenderArgs -> HostPriorityList")
    async def prioritize_nodes(request: Request) -> Response:
        started = time.perf_counter()
        try:
            args = await _args(request)
            scores = extender.prioritize(args)
        except wire.MalformedArgs as err:
            return _bad("prioritize", err, started)
        return _ok("prioritize", scores, started)

    @app.get("/replicas", tags=["status"], summary="Every replica: freshness, age, generation, pods, last error")
    async def replicas() -> Response:
        return Response(json.dumps({"items": extender.store.status()}), media_type="application/json")

    @app.get("/healthz", tags=["probes"])
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/readyz", tags=["probes"], summary="Ready once every known enforcer was polled once")
    async def readyz() -> Response:
        ready = components.poller is None or components.poller.ready
        return Response(json.dumps({"ready": ready}), status_code=200 if ready else 503, media_type="application/json")

    @app.get("/metrics", tags=["status"], response_class=Response)
    async def metrics_endpoint() -> Response:
        counts: dict[str, int] = {}
        for item in extender.store.status():
            counts[item["freshness"]] = counts.get(item["freshness"], 0) + 1
        return Response(metrics.render(counts), media_type=CONTENT_TYPE)

    return app


def _count(metrics: ExtenderMetrics, result: dict[str, Any]) -> None:
    metrics.verdicts.labels(verdict="failed").inc(len(result.get("FailedNodes") or {}))
    metrics.verdicts.labels(verdict="unresolvable").inc(len(result.get("FailedAndUnresolvableNodes") or {}))
    passed = result.get("NodeNames")
    if passed is None and isinstance(result.get("Nodes"), dict):
        passed = result["Nodes"].get("items")
    metrics.verdicts.labels(verdict="passed").inc(len(passed or []))
