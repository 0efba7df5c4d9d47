"""Composition root: ``create_app(settings)`` wires settings into services and returns the FastAPI app.

What gets built, from :class:`~webhook.settings.WebhookSettings`:

* the enforcer client: mutual TLS with ``client_cert``/``client_key``, trusting
  ``enforcer_ca``, checking ``enforcer_server_name`` when dialing pod IPs;
* the enforcer directory: the static ``enforcers_file``, or (``daemonset``)
  one fed by a watch of the enforcer pods;
* the pod sources: the pods this replica admitted, plus (``pod_source:
  kubernetes``) a watch of pending pods and a GET as the last resort;
* the metrics registry (one per app);
* who may send reviews (``client_ca``, ``allowed_clients``: :mod:`webhook.callers`); the TLS server
  that verifies the apiserver's client certificate is built by ``numaguard webhook`` from the same
  settings (:func:`server_tls_files`).

Watches start in the app's lifespan and stop with it; the HTTP client is
closed there too.  :class:`Components` lets tests hand in fakes (a
``MockTransport``, a directory, extra pod sources) without touching the
cluster.  Nothing happens at import time: run with
``uvicorn --factory webhook.main:app_factory`` or ``numaguard webhook``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from servicekit import telemetry, tls
from webhook import discovery, enforcer_client, errors, pod_cache, review_app, routes
from webhook import settings as settings_module
from webhook.handlers import pod_binding
from webhook.metrics import WebhookMetrics
from webhook.services import Services
from webhook.settings import WebhookSettings

log = logging.getLogger("webhook.main")


@dataclass
class Components:
    """Replacements for what ``create_app`` would build from settings (tests, embedding)."""

    enforcer_transport: httpx.AsyncBaseTransport | None = None
    directory: discovery.EnforcerDirectory | None = None
    extra_pod_sources: Sequence[pod_cache.PodLookup] = field(default_factory=tuple)
    # A Kubernetes ApiClient; None builds one when settings ask for cluster sources.
    kube_api: Any = None


def _client(
    settings: WebhookSettings, metrics: WebhookMetrics, transport: httpx.AsyncBaseTransport | None
) -> enforcer_client.EnforcerClient:
    ssl_context = None
    if transport is None and settings.enforcer_ca is not None:
        try:
            ssl_context = tls.client_context(settings.enforcer_ca, cert=settings.client_cert, key=settings.client_key)
        except tls.TLSConfigError as err:
            raise errors.ConfigError(str(err)) from None
    elif transport is None:
        log.warning("no enforcer_ca configured: enforcer certificates are checked against the system trust store")
    server_name = settings.enforcer_server_name
    if server_name is None and settings.enforcer_discovery == "daemonset":
        server_name = f"numaguard-enforcer.{settings.enforcer_namespace}.svc"  # pod IPs are not in the certificate
    return enforcer_client.EnforcerClient(
        ssl_context=ssl_context,
        server_name=server_name,
        retries=settings.enforcer_retries,
        concurrency=settings.enforcer_concurrency,
        metrics=metrics,
        transport=transport,
    )


@dataclass
class _ClusterParts:
    directory: discovery.EnforcerDirectory | None = None
    pod_sources: list[pod_cache.PodLookup] = field(default_factory=list)
    watches: list[Any] = field(default_factory=list)  # kube.ListWatch, started by the lifespan


def _cluster_parts(settings: WebhookSettings, parts: Components) -> _ClusterParts:
    """What only a cluster provides: enforcer pods by node, pending pods by uid."""
    found = _ClusterParts()
    want_directory = parts.directory is None and settings.enforcer_discovery == "daemonset"
    if not want_directory and settings.pod_source != "kubernetes":
        return found
    from webhook import kube  # the client library costs a quarter second to import: only clusters pay it

    api = parts.kube_api if parts.kube_api is not None else kube.api_client()
    if want_directory:
        directory = discovery.DaemonSetDirectory(
            settings.enforcer_port, absent_grace_seconds=settings.enforcer_absent_grace_seconds
        )
        found.watches.append(
            kube.enforcer_pods_watch(
                api, directory, namespace=settings.enforcer_namespace, selector=settings.enforcer_selector
            )
        )
        found.directory = directory
    if settings.pod_source == "kubernetes":
        index = pod_cache.PodIndex()
        found.watches.append(kube.pending_pods_watch(api, index))
        found.pod_sources += [index, kube.ApiPodReader(api)]
    return found


def create_app(settings: WebhookSettings, *, components: Components | None = None) -> FastAPI:
    parts = components or Components()
    metrics = WebhookMetrics()
    seen = pod_cache.SeenPods(settings.pod_cache_size)
    cluster = _cluster_parts(settings, parts)
    directory = parts.directory if parts.directory is not None else cluster.directory
    if directory is None:
        if settings.enforcers_file is None:
            raise errors.ConfigError("no enforcer discovery: give enforcers_file or enforcer_discovery: daemonset")
        directory = discovery.StaticDirectory.from_file(settings.enforcers_file)
    client = _client(settings, metrics, parts.enforcer_transport)
    watches = cluster.watches
    sources: list[pod_cache.PodLookup] = [seen, *parts.extra_pod_sources, *cluster.pod_sources]

    services = Services(
        settings=settings,
        plan_policy=settings.plan_policy(),
        seen_pods=seen,
        pods=pod_cache.ChainedLookup(sources),
        enforcers=directory,
        client=client,
        metrics=metrics,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        for watch in watches:
            watch.start()
        try:
            yield
        finally:
            for watch in watches:
                await asyncio.to_thread(watch.stop)  # joins the watch thread: keep the loop free meanwhile
            await pod_binding.finish_pending_releases()  # before the client they use is closed
            await client.aclose()

    fastapi_telemetry = telemetry.fastapi_telemetry()
    app = review_app.WebhookApp(
        title="numaguard webhook",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        telemetry=fastapi_telemetry,
        direct_routes=routes.REVIEW_ENDPOINTS,
        direct=fastapi_telemetry is telemetry.OFF,  # traces the operator asked for need the whole stack
    )
    app.state.services = services
    # The review routes are the app's own, matched first: behind an included router every review would be matched
    # twice (FastAPI's included-router layer), a few percent of its CPU.  The probes and /metrics stay in the
    # router, whose routes honour app.dependency_overrides.
    routes.add_review_routes(app)
    app.include_router(routes.router)

    async def bad_review(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, errors.WebhookError)
        metrics.bad_requests.inc()
        log.info("bad admission request", extra={"path": request.url.path, "error": exc.message})
        return JSONResponse({"reason": exc.reason, "message": exc.message}, status_code=exc.status_code)

    app.add_exception_handler(errors.WebhookError, bad_review)
    return app


def server_tls_files(settings: WebhookSettings) -> tls.TLSFiles | None:
    """The serving files, with ``client_ca`` as the CA client certificates are verified against; None: plain HTTP."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    return tls.TLSFiles(settings.tls_cert, settings.tls_key, settings.client_ca)


def app_factory() -> FastAPI:
    """For ``uvicorn --factory``: settings from the environment (``WEBHOOK_*``)."""
    return create_app(settings_module.load())
