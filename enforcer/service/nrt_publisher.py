"""Keeps this node's NodeResourceTopology object in the API current, without flooding the API server.

The service calls :meth:`NodeResourceTopologyPublisher.publish` after every change of the engine
(admission, release, resize) and from its periodic loop.  A call writes only when the document
differs from what was last written, and at most once per ``min_interval`` seconds: a change inside
the interval is kept as pending and written by the first call after it (the periodic loop's call
guarantees that the last change of a burst is published).  A write is create-or-update with the
``CustomObjectsApi`` verbs the enforcer's RBAC grants (get, create, update): get, then create on 404
or replace with the stored ``resourceVersion``, once more on a 409 conflict.  A failed write is
logged and retried by the next call; it never fails the caller, whose admission already happened.

The API client is injected (anything with the three ``CustomObjectsApi`` methods): tests pass a fake,
:meth:`NodeResourceTopologyPublisher.in_cluster` builds the real one.  The ``kubernetes`` package is
imported only there, so this module imports without a cluster and without loading the client.

Must not: compute resources (that is :mod:`enforcer.service.nrt`), or read the engine outside the
caller's lock.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from enforcer.engine.node import NodeEngine
from enforcer.errors import EnforcerError
from enforcer.service import nrt

log = logging.getLogger(__name__)

DEFAULT_MIN_INTERVAL_SECONDS = 5.0

Outcome = Literal["created", "updated", "unchanged", "deferred", "failed"]


class CustomObjectsLike(Protocol):
    """The part of ``kubernetes.client.CustomObjectsApi`` the publisher uses (cluster-scoped objects)."""

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> Any: ...

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: Any) -> Any: ...

    def replace_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: Any) -> Any: ...


class NodeResourceTopologyPublishError(EnforcerError):
    """The API server refused or failed a NodeResourceTopology write (logged; the next publish retries)."""

    reason = "NodeResourceTopologyPublishFailed"


def _status(err: BaseException) -> int | None:
    """The HTTP status of a client error (``ApiException.status``), read without importing the client."""
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None


class NodeResourceTopologyPublisher:
    """Create-or-update of one node's NodeResourceTopology, rate-limited and skipping unchanged documents.

    Thread-safe: calls are serialised by an internal lock (held across the API request, so two
    threads never race on ``resourceVersion``).
    """

    def __init__(
        self,
        api: CustomObjectsLike,
        node_name: str,
        *,
        min_interval: float = DEFAULT_MIN_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._node_name = node_name
        self._min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._published: dict[str, Any] | None = None
        self._pending: dict[str, Any] | None = None
        self._last_write: float | None = None

    @classmethod
    def in_cluster(
        cls, node_name: str, *, kubeconfig: str | None = None, min_interval: float = DEFAULT_MIN_INTERVAL_SECONDS
    ) -> NodeResourceTopologyPublisher:
        """A publisher on the real API (the pod's service account, or ``kubeconfig`` outside a cluster)."""
        from kubernetes import client, config

        if kubeconfig is None:
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=kubeconfig)
        return cls(client.CustomObjectsApi(), node_name, min_interval=min_interval)

    @property
    def pending(self) -> bool:
        """A document is waiting for the interval to pass (or for a failed write to be retried)."""
        with self._lock:
            return self._pending is not None

    def publish(self, engine: NodeEngine) -> Outcome:
        """Publish the engine's current free resources.  Reads the engine: call it under the service's
        lock, or build the document there and hand it to :meth:`submit` after releasing the lock."""
        return self.submit(nrt.build_node_resource_topology(self._node_name, engine.topology, engine))

    def submit(self, document: Mapping[str, Any]) -> Outcome:
        """Write ``document`` if it changed and the interval allows; otherwise keep it pending."""
        wanted = copy.deepcopy(dict(document))
        with self._lock:
            if wanted == self._published:
                self._pending = None
                return "unchanged"
            now = self._clock()
            if self._last_write is not None and now - self._last_write < self._min_interval:
                self._pending = wanted
                return "deferred"
            try:
                outcome = self._write(wanted)
            except NodeResourceTopologyPublishError as err:
                self._pending = wanted
                log.warning(
                    "node resource topology not published",
                    extra={"node": self._node_name, "reason": err.reason, "error": err.message},
                )
                return "failed"
            finally:
                self._last_write = now
            self._published, self._pending = wanted, None
            if outcome != "unchanged":
                log.info("node resource topology published", extra={"node": self._node_name, "outcome": outcome})
            return outcome

    def _write(self, wanted: dict[str, Any]) -> Outcome:
        """One create-or-update, repeated once after a 409 (someone updated it between our get and replace)."""
        try:
            return self._create_or_update(wanted)
        except Exception as err:
            if _status(err) != 409:
                raise self._error(err) from err
        try:
            return self._create_or_update(wanted)
        except Exception as err:
            raise self._error(err) from err

    def _error(self, err: Exception) -> NodeResourceTopologyPublishError:
        return NodeResourceTopologyPublishError(f"NodeResourceTopology {self._node_name}: {type(err).__name__}: {err}")

    def _create_or_update(self, wanted: dict[str, Any]) -> Outcome:
        args = (nrt.GROUP, nrt.VERSION, nrt.PLURAL)
        try:
            current = self._api.get_cluster_custom_object(*args, self._node_name)
        except Exception as err:
            if _status(err) != 404:
                raise
            self._api.create_cluster_custom_object(*args, wanted)
            return "created"
        stored: Mapping[str, Any] = current if isinstance(current, Mapping) else {}
        metadata: Mapping[str, Any] = stored.get("metadata") or {}
        labels: Mapping[str, Any] = metadata.get("labels") or {}
        ours: Mapping[str, str] = wanted["metadata"]["labels"]
        same_content = all(stored.get(key) == value for key, value in wanted.items() if key != "metadata")
        if same_content and all(labels.get(k) == v for k, v in ours.items()):
            return "unchanged"  # e.g. after a restart: the stored object already says this
        body = copy.deepcopy(wanted)
        # keep what others put on the object (labels, annotations, owners); our labels and annotations win
        kept = {k: copy.deepcopy(v) for k, v in metadata.items() if k == "ownerReferences"}
        annotations = {**(metadata.get("annotations") or {}), **wanted["metadata"].get("annotations", {})}
        body["metadata"] = {
            **kept,
            "name": self._node_name,
            "labels": {**labels, **ours},
            "resourceVersion": metadata.get("resourceVersion"),
        }
        if annotations:
            body["metadata"]["annotations"] = annotations
        self._api.replace_cluster_custom_object(*args, self._node_name, body)
        return "updated"
