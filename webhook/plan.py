"""The resource plan of a pod: what the node's resource managers will do with it, decided before any node is chosen.

Given the pod's defaulted resources, the Topology Manager scope the cluster
runs and the size of one NUMA node, the plan says for every container whether
its CPUs and memory will be exclusive (``node_exclusive`` / ``pod_exclusive``)
or shared (``pod_shared`` / ``node_shared``), how many whole CPUs it pins, how
big the KEP-5526 pod shared pool is, and how many NUMA nodes the aligned part
needs.  It also finds the foot-guns a human would want to hear about at
``kubectl apply`` time: a sidecar pinning CPUs it will mostly leave idle, a
fractional CPU that can never be exclusive, exclusive slices that leave the
pod shared pool empty (every node will refuse the pod), a budget that needs
more NUMA nodes than one.

The plan assumes the node runs what numaguard enforces: the static CPU
manager, the Static memory manager, a topology policy other than ``none`` and
the pod-level resource managers (pod-level-resource-managers.md R1.2-R1.3).
It is a prediction recorded as an annotation; the node's allocation at
binding time is the authority.  Rule numbers refer to that spec file.

Pure and deterministic: no I/O, no clock; the same pod gives the same plan
and the same annotation bytes, which keeps the CREATE patch idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from shared import contract, pod_level, qos, quantity
from shared.resources import CPU, MEMORY, ContainerKind, PodResources, QOSClass
from webhook import compact_json, wording

PLAN_ANNOTATION = contract.ANNOTATION_PREFIX + "plan"

Scope = Literal["pod", "container"]
Assignment = contract.Assignment

_EXCLUSIVE: frozenset[Assignment] = frozenset({"node_exclusive", "pod_exclusive"})


@dataclass(frozen=True, slots=True)
class NUMANodeSize:
    """What one NUMA node offers a pod: allocatable CPUs and memory bytes (both > 0)."""

    cpus: int
    memory_bytes: int

    def __post_init__(self) -> None:
        if self.cpus <= 0 or self.memory_bytes <= 0:
            raise ValueError(f"a NUMA node needs CPUs and memory, got {self.cpus} CPUs and {self.memory_bytes} bytes")

    def nodes_for(self, cpus: int, memory_bytes: int) -> int:
        """The fewest NUMA nodes that hold ``cpus`` CPUs and ``memory_bytes`` (at least one)."""
        return max(1, -(-cpus // self.cpus), -(-memory_bytes // self.memory_bytes))


@dataclass(frozen=True, slots=True)
class PlanPolicy:
    """The cluster facts the plan depends on (from the webhook's settings)."""

    scope: Scope = "pod"
    numa_node: NUMANodeSize | None = None
    # False mirrors a kubelet with the PodLevelResourceManagers gate off (R1.5): PLR pods are never pinned.
    pod_level_resource_managers: bool = True


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    """One container's predicted assignment; sizes are 0 for shared assignments."""

    name: str
    kind: ContainerKind
    cpu_assignment: Assignment
    memory_assignment: Assignment
    exclusive_cpus: int = 0
    exclusive_memory_bytes: int = 0

    def to_json(self) -> compact_json.PlainObject:
        doc: compact_json.PlainObject = {"kind": self.kind, "cpu": self.cpu_assignment}
        if self.exclusive_cpus:
            doc["exclusiveCPUs"] = self.exclusive_cpus
        doc["memory"] = self.memory_assignment
        if self.exclusive_memory_bytes:
            doc["exclusiveMemory"] = quantity.format_bytes(self.exclusive_memory_bytes)
        return doc


@dataclass(frozen=True, slots=True)
class Alignment:
    """The largest unit the Topology Manager aligns at once: the pod budget (pod scope) or one container."""

    cpus: int
    memory_bytes: int
    container: str | None = None  # None: the whole pod
    numa_nodes: int | None = None  # None: NUMA node size not configured

    def to_json(self) -> compact_json.PlainObject:
        doc: compact_json.PlainObject = {"cpus": self.cpus, "memory": quantity.format_bytes(self.memory_bytes)}
        if self.container is not None:
            doc["container"] = self.container
        doc["numaNodes"] = self.numa_nodes
        return doc


@dataclass(frozen=True, slots=True)
class SharedPool:
    """The pod shared pool: the pod budget minus the exclusive slices of long-running containers."""

    cpus: int
    memory_bytes: int

    def to_json(self) -> compact_json.PlainObject:
        return {"cpus": self.cpus, "memory": quantity.format_bytes(self.memory_bytes)}


@dataclass(frozen=True, slots=True)
class Plan:
    scope: Scope
    qos_class: QOSClass
    containers: tuple[ContainerPlan, ...]
    alignment: Alignment | None
    pod_shared_pool: SharedPool | None
    warnings: tuple[str, ...]

    @property
    def numa_nodes(self) -> int | None:
        return None if self.alignment is None else self.alignment.numa_nodes

    def container(self, name: str) -> ContainerPlan:
        for c in self.containers:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> compact_json.PlainObject:
        return {
            "scope": self.scope,
            "qosClass": self.qos_class,
            "alignment": None if self.alignment is None else self.alignment.to_json(),
            "podSharedPool": None if self.pod_shared_pool is None else self.pod_shared_pool.to_json(),
            "containers": {c.name: c.to_json() for c in self.containers},
        }

    def annotation_value(self) -> str:
        return compact_json.dumps_plain(self.to_json())

    def annotations(self) -> dict[str, str]:
        return {PLAN_ANNOTATION: self.annotation_value()}


def plan_pod(pod: PodResources, policy: PlanPolicy) -> Plan:
    """The plan of a defaulted pod (``shared.pod.Pod.to_resources()``) under ``policy``."""
    qos_class = qos.qos_class(pod)
    if qos_class != "Guaranteed":
        return _unpinned(pod, policy, qos_class, _not_guaranteed_warnings(pod, qos_class))
    if pod.pod_level_resources_set:
        if not policy.pod_level_resource_managers:
            note = "pod-level resources are set but the pod-level resource managers are off: nothing is pinned"
            return _unpinned(pod, policy, qos_class, [note])
        if policy.scope == "pod":
            return _pod_scope_with_budget(pod, policy)
        return _container_scope_with_budget(pod, policy)
    return _classic(pod, policy)


# -- the four shapes (pod-level-resource-managers.md §6 table) -------------------------------------


def _unpinned(pod: PodResources, policy: PlanPolicy, qos_class: QOSClass, warnings: Sequence[str]) -> Plan:
    containers = tuple(ContainerPlan(c.name, c.kind, "node_shared", "node_shared") for c in pod.containers)
    return Plan(policy.scope, qos_class, containers, None, None, tuple(wording.cap(w) for w in warnings))


def _classic(pod: PodResources, policy: PlanPolicy) -> Plan:
    """A Guaranteed pod without ``spec.resources``: every whole-CPU container is exclusive from the node."""
    containers = []
    for c in pod.containers:
        cpus = pod_level.whole_cpus(c.resources.request(CPU))
        containers.append(
            ContainerPlan(
                c.name,
                c.kind,
                "node_exclusive" if cpus else "node_shared",
                # the Static memory manager pins every container of a Guaranteed pod
                "node_exclusive",
                exclusive_cpus=cpus,
                exclusive_memory_bytes=c.resources.request(MEMORY),
            )
        )
    plans = tuple(containers)
    alignment: Alignment | None
    if policy.scope == "pod":
        memory = qos.effective_pod_requests(pod).get(MEMORY, 0)
        exclusive_cpus = pod_level.aggregate_exclusive_cpus((p.kind, p.exclusive_cpus) for p in plans)
        alignment = _aligned(policy, exclusive_cpus, memory)
    else:
        alignment = _largest_container(policy, plans)
    warnings = [
        *_fractional_warnings(pod, plans, pool="node"),
        *_sidecar_warnings(plans, remedy="a fractional cpu such as 500m shares the node pool instead"),
        *_numa_warnings(alignment),
    ]
    return Plan(policy.scope, "Guaranteed", plans, alignment, None, tuple(wording.cap(w) for w in warnings))


def _pod_scope_with_budget(pod: PodResources, policy: PlanPolicy) -> Plan:
    """KEP-5526 pod scope: the budget is one aligned bubble carved into exclusive slices and a pod shared pool."""
    assert pod.pod is not None
    budget_millis = pod.pod.requests.get(CPU, 0)
    cpu_budget = pod_level.pod_cpu_budget(pod)  # R2.4
    memory_budget = pod.pod.requests.get(MEMORY, 0)  # R2.5 (hugepages are not planned)
    containers = []
    for c in pod.containers:
        exclusive = pod_level.may_be_exclusive(pod, c, pod_level_resource_managers=True)
        # R2.2 (a container that may not be exclusive pins no CPU: no need to ask)
        cpus = pod_level.container_exclusive_cpus(pod, c, pod_level_resource_managers=True) if exclusive else 0
        cpu_assignment: Assignment = "node_shared" if not cpu_budget else ("pod_exclusive" if cpus else "pod_shared")
        memory_assignment: Assignment = "node_shared"
        memory = 0
        if memory_budget:
            memory_assignment = "pod_exclusive" if exclusive else "pod_shared"  # R2.3
            memory = c.resources.request(MEMORY) if memory_assignment == "pod_exclusive" else 0
        containers.append(
            ContainerPlan(
                c.name,
                c.kind,
                cpu_assignment,
                memory_assignment,
                exclusive_cpus=cpus if cpu_assignment == "pod_exclusive" else 0,
                exclusive_memory_bytes=memory,
            )
        )
    plans = tuple(containers)
    budget = {CPU: cpu_budget, MEMORY: memory_budget}
    cpu_pool = pod_level.check_pod_shared_pool({CPU: cpu_budget}, [_pool_member(p, CPU) for p in plans])
    memory_pool = pod_level.check_pod_shared_pool({MEMORY: memory_budget}, [_pool_member(p, MEMORY) for p in plans])
    pool = SharedPool(cpus=cpu_pool.pool_size(budget, CPU), memory_bytes=memory_pool.pool_size(budget, MEMORY))
    warnings: list[str] = []
    if budget_millis % 1000:
        warnings.append(
            f"pod cpu {quantity.format_millicores(budget_millis)} is not a whole number of CPUs: "
            f"pod scope pins no CPU for this pod"
        )
    if cpu_budget:
        warnings += _pool_warnings(cpu_pool, plans, budget, CPU)
    if memory_budget:
        warnings += _pool_warnings(memory_pool, plans, budget, MEMORY)
    warnings += _fractional_warnings(pod, plans, pool="pod" if cpu_budget else "node")
    warnings += _sidecar_warnings(plans, remedy="with no cpu/memory of its own it shares the pod pool")
    alignment = _aligned(policy, cpu_budget, memory_budget) if cpu_budget or memory_budget else None
    warnings += _numa_warnings(alignment)
    return Plan(
        "pod",
        "Guaranteed",
        plans,
        alignment,
        pool if cpu_budget or memory_budget else None,
        tuple(wording.cap(w) for w in warnings),
    )


def _container_scope_with_budget(pod: PodResources, policy: PlanPolicy) -> Plan:
    """KEP-5526 container scope: eligible containers are exclusive from the node, the rest share the node pool."""
    containers = []
    for c in pod.containers:
        eligible = pod_level.may_be_exclusive(pod, c, pod_level_resource_managers=True)
        cpus = pod_level.container_exclusive_cpus(pod, c, pod_level_resource_managers=True)
        containers.append(
            ContainerPlan(
                c.name,
                c.kind,
                "node_exclusive" if cpus else "node_shared",
                "node_exclusive" if eligible else "node_shared",
                exclusive_cpus=cpus,
                exclusive_memory_bytes=c.resources.request(MEMORY) if eligible else 0,
            )
        )
    plans = tuple(containers)
    alignment = _largest_container(policy, plans)
    warnings = [
        *_fractional_warnings(pod, plans, pool="node"),
        *_sidecar_warnings(plans, remedy="with no cpu/memory of its own it shares the node pool"),
        *_numa_warnings(alignment),
    ]
    return Plan("container", "Guaranteed", plans, alignment, None, tuple(wording.cap(w) for w in warnings))


# -- sizes -------------------------------------------------------------------------------------------


def _aligned(policy: PlanPolicy, cpus: int, memory_bytes: int, container: str | None = None) -> Alignment:
    nodes = None if policy.numa_node is None else policy.numa_node.nodes_for(cpus, memory_bytes)
    return Alignment(cpus, memory_bytes, container, nodes)


def _largest_container(policy: PlanPolicy, plans: Sequence[ContainerPlan]) -> Alignment | None:
    """Container scope aligns each container alone: the one needing most NUMA nodes (then CPUs) speaks for the pod."""
    candidates = [
        _aligned(policy, p.exclusive_cpus, p.exclusive_memory_bytes, p.name)
        for p in plans
        if p.cpu_assignment in _EXCLUSIVE or p.memory_assignment in _EXCLUSIVE
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda a: (a.numa_nodes or 0, a.cpus, a.memory_bytes))


# -- foot-guns ---------------------------------------------------------------------------------------


def _not_guaranteed_warnings(pod: PodResources, qos_class: QOSClass) -> list[str]:
    wanting = [
        c.name
        for c in pod.containers
        if c.is_guaranteed_equivalent() and pod_level.whole_cpus(c.resources.request(CPU))
    ]
    if not wanting:
        return []
    verb = "asks" if len(wanting) == 1 else "ask"
    return [
        f"the pod is {qos_class}, so no CPU is exclusive: {wording.names(wanting)} {verb} whole CPUs "
        f"with requests == limits"
    ]


def _fractional_warnings(pod: PodResources, plans: Sequence[ContainerPlan], *, pool: str) -> list[str]:
    """Containers shaped for exclusivity (Guaranteed-equivalent) whose fractional CPU keeps them shared."""
    fractional = [
        f"{p.name} ({quantity.format_millicores(c.resources.request(CPU))})"
        for c, p in zip(pod.containers, plans, strict=True)
        if c.resources.request(CPU) % 1000 and c.is_guaranteed_equivalent()
    ]
    if not fractional:
        return []
    return [f"only whole CPUs are exclusive: {wording.names(fractional)} will run in the {pool} shared pool"]


def _sidecar_warnings(plans: Sequence[ContainerPlan], *, remedy: str) -> list[str]:
    pinned = [p for p in plans if p.kind == "sidecar" and p.exclusive_cpus]
    if not pinned:
        return []
    total = sum(p.exclusive_cpus for p in pinned)
    label, verb = ("sidecar", "pins") if len(pinned) == 1 else ("sidecars", "pin")
    return [
        f"{label} {wording.names([p.name for p in pinned])} {verb} {total} exclusive CPU{'s' if total > 1 else ''} "
        f"for the pod's life; {remedy}"
    ]


def _pool_member(p: ContainerPlan, resource: str) -> pod_level.PoolMember:
    """A container of the plan as the empty-pool rule sees it, for ``cpu`` or ``memory``."""
    if resource == CPU:
        exclusive = {CPU: p.exclusive_cpus} if p.cpu_assignment == "pod_exclusive" else None
    else:
        exclusive = {MEMORY: p.exclusive_memory_bytes} if p.memory_assignment == "pod_exclusive" else None
    return pod_level.PoolMember(p.name, p.kind, exclusive)


def _pool_warnings(
    check: pod_level.PoolCheck, plans: Sequence[ContainerPlan], budget: Mapping[str, int], resource: str
) -> list[str]:
    """The empty-pod-shared-pool validation (§5, V1-V6) of one resource, as warnings.

    The node refuses such a pod (``EmptyPodSharedPoolError`` or
    ``TopologyAffinityError``) at binding; saying so at create time saves a
    scheduling loop.  V6 (budget left over with nobody to share it) is legal but wasteful.
    """

    def show(amount: int) -> str:
        return str(amount) if resource == CPU else quantity.format_bytes(amount)

    total = budget[resource]
    shown, unit, word = show(total), "CPUs" if resource == CPU else "memory", "cpus" if resource == CPU else "memory"
    violation = check.violation
    if violation is not None and violation.rule == "V1":
        return [
            f"init container {violation.container} asks {show(violation.requested)} exclusive {word} but only "
            f"{show(violation.available)} remain after sidecars: nodes will refuse the pod"
        ]
    if violation is not None and violation.rule == "V2":
        return [
            f"sidecars take all {shown} pod {unit}, none is left for init container {violation.container}: "
            f"nodes will refuse the pod"
        ]
    if violation is not None:
        return [
            f"exclusive containers take all {shown} pod {unit}, none is left for "
            f"{wording.names(list(check.shared_long_running))}: nodes will refuse the pod"
        ]
    unused = check.unused(budget, resource)
    if unused:
        return [f"{show(unused)} of the {shown} pod {unit} stay reserved and unused: no container shares them"]
    return []


def _numa_warnings(alignment: Alignment | None) -> list[str]:
    if alignment is None or alignment.numa_nodes is None or alignment.numa_nodes <= 1:
        return []
    who = "the pod" if alignment.container is None else f"container {alignment.container}"
    return [
        f"{who} needs {alignment.numa_nodes} NUMA nodes for {alignment.cpus} CPUs and "
        f"{quantity.format_bytes(alignment.memory_bytes)}: single-numa-node nodes will refuse it"
    ]
