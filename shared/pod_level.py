"""KEP-5526 pod-level resource managers: who is exclusive, how big the pod shared pool is, when it is empty.

The one home of these rules (``pod-level-resource-managers.md`` R1.1, R2.2-R2.5, §5 V1-V6): the node's
CPU and memory managers decide with them, and the admission webhook predicts the node's decision with
the same functions, so the plan annotation and the node cannot disagree about a pod's shape. Messages
are the callers' business (the kubelet's rejection strings on the node, advice in the webhook); this
module returns values.

Pure: no I/O, no feature-gate objects (callers pass the gates as booleans).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from shared.resources import CPU, ContainerKind, ContainerResources, PodResources


def managers_apply(pod: PodResources, *, managers_enabled: bool) -> bool:
    """R1.1: the pod sets ``spec.resources`` and the node runs the pod-level resource managers.

    ``managers_enabled``: both gates KEP-5526 needs (PodLevelResources and PodLevelResourceManagers).
    """
    return pod.pod_level_resources_set and managers_enabled


def never_pinned(pod: PodResources, *, managers_enabled: bool) -> bool:
    """R1.5 / R1.8: pod-level resources on a node without the pod-level managers: no hints, no pinning."""
    return pod.pod_level_resources_set and not managers_enabled


def may_be_exclusive(pod: PodResources, container: ContainerResources, *, pod_level_resource_managers: bool) -> bool:
    """R2.2 / R2.3: under pod-level resources only a Guaranteed-equivalent container gets exclusive resources.

    As upstream, only the PodLevelResourceManagers gate is consulted here; the others share a pool.
    """
    return not (
        pod_level_resource_managers and pod.pod_level_resources_set and not container.is_guaranteed_equivalent()
    )


def whole_cpus(millis: int) -> int:
    """The exclusive CPU count of a cpu request: whole CPUs only (a fractional request shares a pool)."""
    return millis // 1000 if millis > 0 and millis % 1000 == 0 else 0


def container_exclusive_cpus(
    pod: PodResources, container: ContainerResources, *, pod_level_resource_managers: bool
) -> int:
    """``guaranteedCPUs`` of a container of a Guaranteed pod: its whole CPUs, 0 when it shares a pool."""
    if not may_be_exclusive(pod, container, pod_level_resource_managers=pod_level_resource_managers):
        return 0
    return whole_cpus(container.resources.request(CPU))


def pod_cpu_budget(pod: PodResources) -> int:
    """R2.4: the whole CPUs of the pod-level cpu request (0 for a fractional or missing one)."""
    if pod.pod is None:
        return 0
    return whole_cpus(pod.pod.requests.get(CPU, 0))


def aggregate_exclusive_cpus(counts: Iterable[tuple[ContainerKind, int]]) -> int:
    """``podGuaranteedCPUs`` without a budget (R5.5): max(largest init + sidecars before it, apps + sidecars).

    ``counts``: each container's kind and exclusive CPU count, in the pod's container order.
    """
    by_init = by_sidecars = by_apps = 0
    for kind, count in counts:
        if kind == "sidecar":
            by_sidecars += count
        elif kind == "init":
            by_init = max(by_init, by_sidecars + count)
        else:
            by_apps += count
    return max(by_init, by_apps + by_sidecars)


# -- the pod shared pool ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolMember:
    """One container as the empty-pool rule sees it: what it takes exclusively from the pod budget.

    ``exclusive`` is None when the container shares the pod shared pool; otherwise its exclusive amount
    per resource (a resource it does not ask for counts as 0).
    """

    name: str
    kind: ContainerKind
    exclusive: Mapping[str, int] | None


EmptyPoolRule = Literal["V1", "V2", "V5"]


@dataclass(frozen=True, slots=True)
class EmptyPoolViolation:
    """Why the pod cannot run on any node (§5), for the caller to word.

    * V1: an exclusive regular init container asks ``requested`` of ``resource``; only ``available`` is left
      after the sidecars before it;
    * V2: a shared regular init container finds no ``resource`` left after the sidecars before it;
    * V5: the exclusive long-running containers take the whole budget of ``resource`` and some long-running
      container shares the pool (``container`` is None).
    """

    rule: EmptyPoolRule
    resource: str
    container: str | None = None
    requested: int = 0
    available: int = 0


@dataclass(frozen=True, slots=True)
class PoolCheck:
    """The result of :func:`check_pod_shared_pool`."""

    violation: EmptyPoolViolation | None
    shared_long_running: tuple[str, ...]
    exclusive_long_running: Mapping[str, int]

    def pool_size(self, budget: Mapping[str, int], resource: str) -> int:
        """The pod shared pool of ``resource``: the budget less the long-running exclusive slices (>= 0)."""
        return max(0, budget.get(resource, 0) - self.exclusive_long_running.get(resource, 0))

    def unused(self, budget: Mapping[str, int], resource: str) -> int:
        """V6: budget left over with no container to share it (legal, but reserved for nothing)."""
        if self.violation is not None or self.shared_long_running:
            return 0
        return self.pool_size(budget, resource)


def check_pod_shared_pool(budget: Mapping[str, int], members: Sequence[PoolMember]) -> PoolCheck:
    """§5 V1-V5 (``validatePodScopeResources``): the first rule the pod breaks, in container order.

    ``budget``: the pod budget per resource; ``members``: the pod's containers in its container order
    (init containers, sidecars among them, then app containers). Sizes are plain integers, so a budget
    smaller than the sidecars' slices reports a negative availability instead of Go's unsigned wrap.
    """
    exclusive_long_running: dict[str, int] = {}
    shared: list[str] = []
    violation: EmptyPoolViolation | None = None
    for member in members:
        if member.kind == "init":
            if violation is None:
                violation = _init_violation(budget, exclusive_long_running, member)
            continue
        if member.exclusive is None:
            shared.append(member.name)
            continue
        for name, size in member.exclusive.items():
            exclusive_long_running[name] = exclusive_long_running.get(name, 0) + size
    if violation is None and shared:
        for name, total in budget.items():  # V5
            if exclusive_long_running.get(name, 0) >= total:
                violation = EmptyPoolViolation("V5", name)
                break
    return PoolCheck(violation, tuple(shared), exclusive_long_running)


def _init_violation(
    budget: Mapping[str, int], exclusive_long_running: Mapping[str, int], member: PoolMember
) -> EmptyPoolViolation | None:
    if member.exclusive is not None:
        for name, total in budget.items():  # V1
            available = total - exclusive_long_running.get(name, 0)
            requested = member.exclusive.get(name, 0)
            if requested > available:
                return EmptyPoolViolation("V1", name, member.name, requested, available)
        return None
    for name, total in budget.items():  # V2
        if exclusive_long_running.get(name, 0) >= total:
            return EmptyPoolViolation("V2", name, member.name)
    return None
