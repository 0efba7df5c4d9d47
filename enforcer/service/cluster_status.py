"""In a cluster, tell the API what this node decided: NodeResourceTopology and resize status.

Two outputs, refreshed by one periodic loop (and after changes, through :meth:`ClusterStatus.poke`):

* the node's free resources per NUMA node as a NodeResourceTopology object
  (:mod:`enforcer.service.nrt_publisher`), so a topology-aware scheduler places
  pods before the binding check ever has to deny one;
* each pod's pending or in-progress resize as the ``numaguard.io/resize``
  annotation (removed once the resize is done), because annotations a webhook
  adds to a ``pods/resize`` request are dropped by the API server
  (admission-and-api.md K5): the node has to patch the pod's metadata itself.

Failures are logged and retried on the next round; they never affect decisions.
Must not: decide anything, or hold the service lock while talking to the API.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from enforcer.service import nrt
from enforcer.service.node_service import NodeService
from shared import contract

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS = 5.0


class DocumentSink(Protocol):
    """Where the NodeResourceTopology document goes (``NodeResourceTopologyPublisher.submit``)."""

    def submit(self, document: Mapping[str, Any]) -> Any: ...


class PodAnnotator(Protocol):
    """Patches one annotation of a pod's metadata; ``None`` removes it."""

    def annotate(self, namespace: str, name: str, key: str, value: str | None) -> None: ...


class KubernetesPodAnnotator:
    """The real annotator: a JSON merge patch of ``metadata.annotations`` through the ``kubernetes`` client."""

    def __init__(self, *, kubeconfig: str | None = None) -> None:
        from kubernetes import client, config

        if kubeconfig is None:
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=kubeconfig)
        self._api = client.CoreV1Api()

    def annotate(self, namespace: str, name: str, key: str, value: str | None) -> None:
        self._api.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {key: value}}})


class ClusterStatus:
    """Publishes what changed since the last round; one instance per enforcer."""

    def __init__(
        self,
        service: NodeService,
        *,
        documents: DocumentSink | None,
        annotator: PodAnnotator | None,
        interval: float = DEFAULT_INTERVAL_SECONDS,
    ) -> None:
        self._service = service
        self._documents = documents
        self._annotator = annotator
        self._interval = interval
        self._wake = threading.Event()
        self._annotated: dict[str, tuple[str, str, str]] = {}  # uid -> (namespace, name, annotation value)

    def poke(self) -> None:
        """Something changed: publish on the loop's next turn rather than after the full interval."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.publish_once()
            self._wake.wait(self._interval)
            self._wake.clear()

    def publish_once(self) -> None:
        documents = self._documents
        if documents is not None:
            document = self._service.read(
                lambda engine: nrt.build_node_resource_topology(self._service.node_name, engine.topology, engine)
            )
            if document is not None:
                try:
                    documents.submit(document)
                except Exception as err:  # the publisher logs its own API errors; anything else must not kill the loop
                    log.warning("NodeResourceTopology update failed", extra={"error": f"{type(err).__name__}: {err}"})
        if self._annotator is not None:
            resizes = {
                item.uid: (item.namespace, item.name, item.resize.to_json())
                for item in self._service.allocations().items
                if item.resize is not None and item.resize.state != "Accepted"
            }
            self._annotate(resizes)

    def _annotate(self, current: dict[str, tuple[str, str, str]]) -> None:
        annotator = self._annotator
        assert annotator is not None
        for uid, wanted in current.items():
            if self._annotated.get(uid) != wanted and _quietly(
                "resize annotation", annotator, wanted[0], wanted[1], wanted[2]
            ):
                self._annotated[uid] = wanted
        for uid in [u for u in self._annotated if u not in current]:
            namespace, name, _ = self._annotated[uid]
            if _quietly("resize annotation removal", annotator, namespace, name, None):
                del self._annotated[uid]


def _quietly(what: str, annotator: PodAnnotator, namespace: str, name: str, value: str | None) -> bool:
    try:
        annotator.annotate(namespace, name, contract.RESIZE_ANNOTATION, value)
    except Exception as err:  # the API's errors are many and all mean "try again next round"
        log.warning("cluster status update failed", extra={"what": what, "error": f"{type(err).__name__}: {err}"})
        return False
    return True
