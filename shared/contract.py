"""The wire contract between the webhook and the enforcer, and numaguard's annotation keys.

These pydantic models are the HTTP bodies the two services exchange (camelCase
JSON through aliases; Python code may use either spelling) and mirror the step
fields of the plan contract (``../shared/contracts/plan.md``), so an
:class:`Allocation` reads like a ``numaguard plan`` step.  Validators keep every
value canonical: cpusets in the Linux list syntax, sorted NUMA ids, canonical
quantities.

The models carry no behaviour beyond validation: no FastAPI, no clients, no I/O.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from shared import quantity
from shared.cpuset import CPUSet
from shared.errors import DomainError
from shared.resources import PodResources, QOSClass

ANNOTATION_PREFIX = "numaguard.io/"
# Request header: how many milliseconds the caller will still wait for this answer.  The enforcer
# does not decide a request whose budget ran out before its turn (the caller has given up on it).
BUDGET_HEADER = "X-Numaguard-Budget-Ms"
# Request header of POST /allocations (and query parameter ``attempt`` of DELETE /allocations/{uid}): the
# binding attempt (admission request uid) an allocation is made for.  A release naming an attempt only
# withdraws that attempt's claim, so a late release of a timed-out attempt never removes a retry's allocation.
ATTEMPT_HEADER = "X-Numaguard-Attempt"
ATTEMPT_PARAM = "attempt"
# The node's allocation of the pod, an :class:`Allocation` as JSON (written by the enforcer).
ALLOCATION_ANNOTATION = ANNOTATION_PREFIX + "allocation"
# The node the webhook saw the pod bound to (recorded at pods/binding, copied onto the pod: K4).
NODE_ANNOTATION = ANNOTATION_PREFIX + "node"
# :func:`spec_hash` of the resources the allocation was made for.
SPEC_HASH_ANNOTATION = ANNOTATION_PREFIX + "spec-hash"
# The last resize outcome, a :class:`ResizeStatus` as JSON (resize annotations cannot ride the
# /resize request itself, K5; the enforcer patches pod metadata).
RESIZE_ANNOTATION = ANNOTATION_PREFIX + "resize"

Assignment = Literal["node_exclusive", "pod_exclusive", "pod_shared", "node_shared"]
CFSQuota = Literal["container", "pod", "none"]
ResizeState = Literal["Accepted", "Deferred", "Infeasible", "InProgress"]
ResizeOutcome = Literal["Accepted", "Deferred", "Infeasible"]


def annotation_patch_path(key: str) -> str:
    """The JSON Pointer of an annotation for a JSONPatch (``/`` -> ``~1``, ``~`` -> ``~0``; R2.3)."""
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


def spec_hash(pod: PodResources) -> str:
    """A short stable digest of what an allocation depends on: every container's
    role and (defaulted) requests/limits, and the pod-level stanza.  Names,
    images and everything else do not change it (kept in ``pod.memo``: the pod is a value)."""
    found = pod.memo.get("spec_hash")
    if found is not None:
        return str(found)
    doc = {
        "containers": [
            [c.name, c.kind, sorted(c.resources.requests.items()), sorted(c.resources.limits.items())]
            for c in pod.containers
        ],
        "pod": None if pod.pod is None else [sorted(pod.pod.requests.items()), sorted(pod.pod.limits.items())],
    }
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    digest = pod.memo["spec_hash"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return digest


def _canonical_cpuset(value: str) -> str:
    return str(CPUSet.parse(value))


def _canonical_numa_ids(value: list[int]) -> list[int]:
    if any(i < 0 for i in value):
        raise ValueError("NUMA node ids are non-negative")
    return sorted(set(value))


def _canonical_quantities(value: dict[str, str]) -> dict[str, str]:
    return {name: quantity.canonical(text) for name, text in value.items()}


CPUList = Annotated[str, AfterValidator(_canonical_cpuset)]
NUMANodes = Annotated[list[int], AfterValidator(_canonical_numa_ids)]
QuantityMap = Annotated[dict[str, str], AfterValidator(_canonical_quantities)]


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_json(self) -> str:
        """The body as sent: camelCase keys."""
        return self.model_dump_json(by_alias=True)


class ContainerAllocation(_Wire):
    """Where one long-running container runs; one entry of a plan step's ``containers``."""

    assignment: Assignment
    memory_assignment: Assignment
    # the set the container may run on; for shared assignments the pool as it stands now
    cpus: CPUList | None = None
    # NUMA nodes its memory is bound to; None: no binding
    memory_numa_nodes: NUMANodes | None = Field(default=None, alias="memoryNUMANodes")
    cfs_quota: CFSQuota


class PodSharedPool(_Wire):
    """The KEP-5526 pod shared pool: the bubble minus exclusive slices, and the pod's memory budget.

    ``cpus`` is None when only the Memory Manager made a pool (CPU policy ``none``, or no CPU pool),
    ``memoryNUMANodes`` None when only the CPU Manager made one (plan contract item 5).
    """

    cpus: CPUList | None = None
    memory_numa_nodes: NUMANodes | None = Field(default=None, alias="memoryNUMANodes")


class RequestedResources(_Wire):
    requests: QuantityMap = Field(default_factory=dict)
    limits: QuantityMap = Field(default_factory=dict)


class ResizeStatus(_Wire):
    """The node's view of the pod's latest resize (mirrors PodResizePending / PodResizeInProgress)."""

    state: ResizeState
    reason: str | None = None
    message: str | None = None
    # desired resources by container name (canonical quantities)
    requested: dict[str, RequestedResources] = Field(default_factory=dict)
    since: datetime


class Allocation(_Wire):
    """What the node decided for one pod; the enforcer's answer and annotation value."""

    uid: str
    namespace: str
    name: str
    node: str
    qos_class: QOSClass
    numa_affinity: NUMANodes | None = None
    pod_shared_pool: PodSharedPool | None = None
    # every container that runs for the pod's lifetime (app containers and sidecars), by name
    containers: dict[str, ContainerAllocation] = Field(default_factory=dict)
    resize: ResizeStatus | None = None
    spec_hash: str


class AllocationRequest(_Wire):
    """Webhook -> enforcer: admit this pod on this node."""

    pod: dict[str, Any]
    node_name: str


class ResizeRequest(_Wire):
    """Webhook -> enforcer: the pod as the resize would leave it."""

    pod: dict[str, Any]


class ResizeResult(_Wire):
    """Enforcer -> webhook: the node's decision and the allocation after it (the old one unless Accepted)."""

    status: ResizeOutcome
    reason: str | None = None
    message: str | None = None
    allocation: Allocation


class ErrorBody(_Wire):
    """Any non-2xx answer: ``reason`` is a stable string (kubelet reason or domain error reason)."""

    reason: str
    message: str
    field: str | None = None

    @classmethod
    def from_error(cls, error: DomainError) -> ErrorBody:
        """The body for a domain error: its stable reason, its message, its field path."""
        return cls(reason=error.reason, message=error.message, field=error.field)


class AllocationList(_Wire):
    node: str
    items: list[Allocation] = Field(default_factory=list)


class CPUUsage(_Wire):
    """CPU counts of one NUMA node, with the sets they count."""

    total: int = Field(ge=0)
    reserved: int = Field(ge=0)
    exclusive: int = Field(ge=0)
    free: int = Field(ge=0)
    cpus: CPUList = ""
    reserved_cpus: CPUList = Field(default="", alias="reservedCPUs")
    exclusive_cpus: CPUList = Field(default="", alias="exclusiveCPUs")
    free_cpus: CPUList = Field(default="", alias="freeCPUs")


class MemoryUsage(_Wire):
    """One memory type (``memory``, ``hugepages-2Mi``...) of one NUMA node, in bytes."""

    allocatable: int = Field(ge=0)
    reserved: int = Field(ge=0)
    free: int = Field(ge=0)


class NUMANodeUsage(_Wire):
    id: int = Field(ge=0)
    cpus: CPUUsage
    memory: dict[str, MemoryUsage] = Field(default_factory=dict)


class TopologyView(_Wire):
    """The enforcer's node: its topology document (``contracts/topology.md``) and current usage."""

    node: str
    topology: dict[str, Any]
    numa_nodes: list[NUMANodeUsage] = Field(default_factory=list)
    shared_pool: CPUList = ""
    reserved_cpus: CPUList = Field(default="", alias="reservedCPUs")
