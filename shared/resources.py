"""Integer views of what a pod asks for: the only pod shape the engine reads.

Quantities are parsed once, at the edge (:meth:`shared.pod.Pod.to_resources`,
after the API server's defaulting), into integers: ``cpu`` in millicores, every other
resource (``memory``, ``hugepages-*``, extended resources) in its base unit
(bytes for memory).  Maps hold only the keys the pod spec names, so "absent"
and "zero" stay distinguishable, as the QoS rules need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from shared import quantity

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
HUGEPAGES_PREFIX = "hugepages-"
QOS_RESOURCES = (CPU, MEMORY)
# ``sets.List(SupportedPodLevelResources())`` as upstream prints it in NotSupported errors.
SUPPORTED_POD_LEVEL_RESOURCES = (CPU, HUGEPAGES_PREFIX, MEMORY)

ContainerKind = Literal["init", "sidecar", "app"]
QOSClass = Literal["Guaranteed", "Burstable", "BestEffort"]
QOS_CLASSES: tuple[QOSClass, ...] = ("Guaranteed", "Burstable", "BestEffort")

# Resource amounts the pure rules work on: engine integers, or exact quantities
# where the API server's formatting of a sum matters (validation messages).
Amount = TypeVar("Amount", int, quantity.Quantity)


def is_hugepages(name: str) -> bool:
    return name.startswith(HUGEPAGES_PREFIX)


def is_supported_pod_level_resource(name: str) -> bool:
    """``IsSupportedPodLevelResource`` (R1.1): cpu, memory and hugepages-*."""
    return name in QOS_RESOURCES or name.startswith(HUGEPAGES_PREFIX)  # is_hugepages, inlined: a hot check


def names_pod_level_resource(names: Iterable[str]) -> bool:
    """Whether any of ``names`` is a supported pod-level resource (the ``IsPodLevel*Set`` helpers)."""
    return any(map(is_supported_pod_level_resource, names))  # no generator frame: pods name few resources


def is_native_resource(name: str) -> bool:
    """``IsNativeResource``: unprefixed names, or names in a ``kubernetes.io/`` domain."""
    return "/" not in name or "kubernetes.io/" in name


def is_overcommit_allowed(name: str) -> bool:
    """``IsOvercommitAllowed``: native and not hugepages (request may differ from limit)."""
    return is_native_resource(name) and not is_hugepages(name)


def is_memory_resource(name: str) -> bool:
    """Resources the memory manager accounts per NUMA node."""
    return name == MEMORY or is_hugepages(name)


# apimachinery's Quantity: "no quantity may represent a number greater than 2^63-1 in magnitude ... Numbers
# larger or more precise will be capped" (k8s.io/apimachinery/pkg/api/resource/quantity.go); the kubelet reads
# requests as int64 (Value, MilliValue).  Capping here keeps every integer the engine holds formattable as a
# quantity the parser takes back (a "1e200" request once made a resize answer fail to serialise: a 500).
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


def quantity_to_int(name: str, q: quantity.Quantity) -> int:
    """A parsed quantity in the engine's integer unit for ``name`` (cpu: millicores), capped to int64."""
    number = q.milli() if name == CPU else q.integer()
    if INT64_MIN <= number <= INT64_MAX:  # the usual case, without two builtin calls
        return number
    return INT64_MAX if number > 0 else INT64_MIN


def to_int(name: str, value: object, *, field: str | None = None) -> int:
    """One quantity to the engine's integer unit for ``name``, capped to int64 as the API server caps it."""
    return quantity_to_int(name, quantity.parse(value, field=field))


@dataclass(frozen=True, slots=True)
class Resources:
    """``requests`` / ``limits`` as integers (cpu millicores, other resources in base units)."""

    requests: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)

    def request(self, name: str) -> int:
        return self.requests.get(name, 0)

    def limit(self, name: str) -> int:
        return self.limits.get(name, 0)

    def is_empty(self) -> bool:
        return not self.requests and not self.limits


def resources_from_maps(
    requests: Mapping[str, object] | None, limits: Mapping[str, object] | None, *, field: str
) -> Resources:
    """Parse a ``resources`` stanza; errors name ``<field>.requests[<name>]``."""
    return Resources(
        requests={k: to_int(k, v, field=f"{field}.requests[{k}]") for k, v in (requests or {}).items()},
        limits={k: to_int(k, v, field=f"{field}.limits[{k}]") for k, v in (limits or {}).items()},
    )


@dataclass(frozen=True, slots=True)
class ContainerResources:
    """One container's resources and the role that decides its lifetime."""

    name: str
    kind: ContainerKind
    resources: Resources = field(default_factory=Resources)

    @property
    def is_sidecar(self) -> bool:
        return self.kind == "sidecar"

    @property
    def is_init(self) -> bool:
        """Init containers of either kind (regular and restartable)."""
        return self.kind in ("init", "sidecar")

    @property
    def is_long_running(self) -> bool:
        """Runs for the pod's lifetime: app containers and sidecars."""
        return self.kind in ("app", "sidecar")

    def is_guaranteed_equivalent(self) -> bool:
        """KEP-5526 ``IsContainerEquivalentQOSGuaranteed``: cpu and memory requests equal non-zero limits."""
        requests, limits = self.resources.requests, self.resources.limits
        for name in QOS_RESOURCES:
            request = requests.get(name, 0)
            if request == 0 or request != limits.get(name, 0):
                return False
        return True


@dataclass(frozen=True, slots=True)
class PodResources:
    """A pod as the engine sees it.

    ``containers`` lists init containers (regular and sidecars) in spec order,
    then app containers in spec order: the order the kubelet admits them in.
    ``pod`` is ``spec.resources`` when the spec has that stanza.  ``qos_class``
    is ``status.qosClass`` when the API server already set it (it is immutable
    and wins over recomputation, as ``GetPodQOS`` does).
    """

    uid: str
    namespace: str
    name: str
    containers: tuple[ContainerResources, ...]
    pod: Resources | None = None
    qos_class: QOSClass | None = None
    priority: int = 0
    overhead: Mapping[str, int] = field(default_factory=dict)
    memo: dict[object, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Values derived from this pod alone by pure functions of it (:attr:`pod_level_resources_set`,
    :func:`shared.contract.spec_hash`, ``qos.effective_pod_requests`` / ``_limits``, the memory
    manager's requests), computed once per object, keyed by the function and its other arguments.
    Why: the scheduler extender dry-runs one pod object on every node of a call, and these were
    recomputed per node, tens of times per dry run.  Only immutable values are kept (bools, strings,
    tuples of items; a function returning a dict returns a new one per call), as a pod is a value
    nobody changes once built; not compared, not printed, and a ``dataclasses.replace`` copy starts empty."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def init_containers(self) -> tuple[ContainerResources, ...]:
        return tuple(c for c in self.containers if c.is_init)

    def app_containers(self) -> tuple[ContainerResources, ...]:
        return tuple(c for c in self.containers if c.kind == "app")

    def container(self, name: str) -> ContainerResources:
        for c in self.containers:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def pod_level_resources_set(self) -> bool:
        """``IsPodLevelResourcesSet``: ``spec.resources`` names a supported resource (R1.2)."""
        found = self.memo.get("pod_level_resources_set")
        if found is None:
            pod = self.pod
            found = self.memo["pod_level_resources_set"] = pod is not None and (
                names_pod_level_resource(pod.requests) or names_pod_level_resource(pod.limits)
            )
        return bool(found)

    @property
    def pod_level_requests_set(self) -> bool:
        """``IsPodLevelRequestsSet``: pod-level requests name a supported resource."""
        return self.pod is not None and names_pod_level_resource(self.pod.requests)

    @property
    def pod_level_limits_set(self) -> bool:
        """``IsPodLevelLimitsSet``: pod-level limits name a supported resource."""
        return self.pod is not None and names_pod_level_resource(self.pod.limits)
