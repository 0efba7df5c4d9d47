"""``GET /replica``: the engine snapshot a scheduler extender replicates, with a generation number.

The extender (:mod:`extender`) keeps a copy of every enforced node's engine and runs the real
admission on it (``NodeEngine.admit`` on a copy), so it must see exactly what the engine holds: the
engine snapshot document (``NodeEngine.snapshot()``: topology, kubelet configuration, manager states,
pod records), not the durable state file, whose envelope is the store's business.

The answer carries ``incarnation`` (random, new for every enforcer process) and ``generation``
(from 1, raised whenever the snapshot served differs from the one served before, within one
incarnation), so a replica can tell a newer state from an older one and notice a restart.  The
``ETag`` is ``"<incarnation>.<generation>"``; a poll that sends it back in ``If-None-Match`` gets
``304 Not Modified`` without a body, which is what keeps a 1-second poll of every node cheap.
Snapshots are taken under the service's lock through ``NodeService.read`` and recomputed only when
the engine's state object changed (every admission, release and accepted resize replaces it; an unchanged
state's snapshot is reused), so an idle node answers a poll without serialising anything.  The
export includes decisions not yet durable: they are made durable within milliseconds or rolled
back, and the binding webhook stays the authority either way.

Authenticated like the other reads (client certificate or the bearer token).
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response

from enforcer.engine.node import NodeEngine
from enforcer.service.deps import Reader, Service
from enforcer.service.node_service import NodeService
from shared import contract

PATH = "/replica"
EXPORT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Export:
    generation: int
    etag: str
    body: bytes


class ReplicaExporter:
    """Numbers the snapshots of one service; thread-safe (reads run in FastAPI's thread pool)."""

    def __init__(self, service: NodeService) -> None:
        self.service = service
        self.incarnation = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._state: object | None = None  # the engine state the cached export was taken from (held: ids stay unique)
        self._digest: str | None = None
        self._export: Export | None = None
        self._generation = 0

    def current(self) -> Export | None:
        """The export of the engine as it is now; None while the enforcer has no usable state."""
        with self._lock:
            taken = self.service.read(self._take)
            if taken is None:
                return None
            state, snapshot = taken
            if snapshot is None and self._export is not None:
                return self._export  # same state object: nothing changed since the last export
            assert snapshot is not None
            content = json.dumps(snapshot, sort_keys=True, separators=(",", ":"))
            digest = hashlib.sha256(content.encode()).hexdigest()
            if digest != self._digest or self._export is None:
                self._generation += 1
                self._digest = digest
                document = {
                    "version": EXPORT_VERSION,
                    "node": self.service.node_name,
                    "incarnation": self.incarnation,
                    "generation": self._generation,
                    "snapshot": snapshot,
                }
                body = json.dumps(document, separators=(",", ":")).encode()
                self._export = Export(self._generation, f'"{self.incarnation}.{self._generation}"', body)
            self._state = state
            return self._export

    def _take(self, engine: NodeEngine) -> tuple[object, dict[str, Any] | None]:
        """Under the service's lock: the state object and, when it is not the cached one, its snapshot."""
        state = engine.state
        if state is self._state and self._export is not None:
            return state, None
        return state, engine.snapshot()


_EXPORTERS_LOCK = threading.Lock()


def exporter_for(request: Request, service: NodeService) -> ReplicaExporter:
    """One exporter per service, kept on the app (a new service after a restart gets a new incarnation)."""
    with _EXPORTERS_LOCK:
        exporter: ReplicaExporter | None = getattr(request.app.state, "replica_exporter", None)
        if exporter is None or exporter.service is not service:
            exporter = ReplicaExporter(service)
            request.app.state.replica_exporter = exporter
        return exporter


router = APIRouter()


@router.get(
    PATH,
    tags=["node"],
    summary="The engine snapshot with its generation, for scheduler extenders (ETag / If-None-Match)",
    response_class=Response,
    responses={
        200: {"content": {"application/json": {}}, "description": "{version, node, incarnation, generation, snapshot}"},
        304: {"description": "Not modified since the ETag sent in If-None-Match"},
        401: {"model": contract.ErrorBody, "description": "No client certificate and no bearer token"},
        403: {"model": contract.ErrorBody, "description": "Credentials not valid for this call"},
        503: {"model": contract.ErrorBody, "description": "No usable state (StateUnavailable)"},
    },
)
def replica(
    request: Request,
    service: Service,
    _: Reader,
    if_none_match: Annotated[str | None, Header(alias="If-None-Match")] = None,
) -> Response:
    export = exporter_for(request, service).current()
    if export is None:
        body = contract.ErrorBody(
            reason="StateUnavailable", message="the enforcer's state is unavailable; nothing to replicate"
        )
        return Response(body.model_dump_json(by_alias=True), status_code=503, media_type="application/json")
    headers = {"ETag": export.etag, "Cache-Control": "no-cache"}
    if if_none_match is not None and export.etag in (t.strip() for t in if_none_match.split(",")):
        return Response(status_code=304, headers=headers)
    return Response(export.body, media_type="application/json", headers=headers)
