"""What a pod or container asks the memory manager for, and the KEP-5526 empty-pool check.

Ports ``getContainerRequestedResources``, ``getPodRequestedResources`` and
``validatePodScopeResources`` of the kubelet's ``policy_static.go``.  Rule numbers
refer to ``memory-manager.md`` (R3.x) and ``pod-level-resource-managers.md``
(R2.3, R2.5, §5 V1-V7).  Maps are ordered ``memory`` first, then hugepages by
name, where Go iterates a map in random order (the first failing type is the
one named in a message).

Pure functions over :class:`~shared.resources.PodResources`; nothing here reads
or changes memory state.
"""

from __future__ import annotations

from collections.abc import Mapping

from enforcer.features import FeatureGates
from enforcer.memorymanager.state import Block, ordered_types
from shared import pod_level
from shared.resources import ContainerResources, PodResources, is_memory_resource

Requests = dict[str, int]


def container_requests(pod: PodResources, container: ContainerResources, gates: FeatureGates) -> Requests:
    """R3.2 / R2.3: the container's ``memory`` and ``hugepages-*`` requests, in bytes (a new dict per call).

    Under pod-level resources only a Guaranteed-equivalent container asks for
    anything; the others live in the pod (or node) shared pool.  Like upstream,
    only the PodLevelResourceManagers gate is consulted here.  Kept in ``pod.memo``
    for the container object it was computed for.
    """
    key = ("memory.container_requests", container.name, gates.pod_level_resource_managers)
    found = pod.memo.get(key)
    if found is not None and found[0] is container:
        return dict(found[1])
    result = _container_requests(pod, container, gates)
    pod.memo[key] = (container, tuple(result.items()))
    return result


def _container_requests(pod: PodResources, container: ContainerResources, gates: FeatureGates) -> Requests:
    if not pod_level.may_be_exclusive(pod, container, pod_level_resource_managers=gates.pod_level_resource_managers):
        return {}
    requests = container.resources.requests
    return {name: requests[name] for name in ordered_types(n for n in requests if is_memory_resource(n))}


def pod_requests(pod: PodResources, gates: FeatureGates) -> Requests:
    """R3.4 / R2.5: what the whole pod asks for (pod scope).

    With pod-level resources: the pod-level requests for memory and hugepages
    that are > 0.  Otherwise the sidecar-aware aggregate
    ``max(max over regular init of (sidecars so far + own), sum(app) + sum(sidecars))``.
    As upstream, only types some app container requests appear in the aggregate.  A new dict per call
    (the value is kept in ``pod.memo``).
    """
    key = ("memory.pod_requests", gates.pod_level_resource_managers)
    found = pod.memo.get(key)
    if found is None:
        found = pod.memo[key] = tuple(_pod_requests(pod, gates).items())
    return dict(found)


def _pod_requests(pod: PodResources, gates: FeatureGates) -> Requests:
    if gates.pod_level_resource_managers and pod.pod_level_resources_set and pod.pod is not None:
        plr = pod.pod.requests
        return {n: plr[n] for n in ordered_types(plr) if is_memory_resource(n) and plr[n] > 0}

    init_max: Requests = {}
    sidecars: Requests = {}
    for ctr in pod.init_containers():
        for name, size in container_requests(pod, ctr, gates).items():
            init_max.setdefault(name, 0)
            if ctr.is_sidecar:
                sidecars[name] = sidecars.get(name, 0) + size
            elif sidecars.get(name, 0) + size > init_max[name]:
                init_max[name] = sidecars.get(name, 0) + size
    apps: Requests = {}
    for ctr in pod.app_containers():
        for name, size in container_requests(pod, ctr, gates).items():
            apps[name] = apps.get(name, 0) + size
    return {name: max(apps[name] + sidecars.get(name, 0), init_max.get(name, 0)) for name in ordered_types(apps)}


def empty_pool_violation(pod: PodResources, gates: FeatureGates) -> str | None:
    """§5: why the pod's exclusive slices leave its shared containers nothing, or ``None``.

    Sizes are compared in plain integers; a budget smaller than the sidecars'
    slices (which pod-level validation already forbids) therefore reports a
    negative availability instead of Go's unsigned wrap-around.
    """
    total = pod_requests(pod, gates)
    members = [
        pod_level.PoolMember(ctr.name, ctr.kind, container_requests(pod, ctr, gates) or None)
        for ctr in (*pod.init_containers(), *pod.app_containers())
    ]
    violation = pod_level.check_pod_shared_pool(total, members).violation
    if violation is None:
        return None
    if violation.rule == "V1":
        return (
            f"pod rejected, largest exclusive init container requests {violation.requested} "
            f"of {violation.resource}, but only {violation.available} available"
        )
    if violation.rule == "V2":
        return f"pod rejected, pod has shared init containers but no {violation.resource} available for them"
    return (
        f"pod rejected, sum of exclusive container {violation.resource} requests equals pod budget, "
        "leaving no memory for shared containers"
    )


def partition(
    pod: PodResources, total: Mapping[str, int], bits: tuple[int, ...], gates: FeatureGates
) -> dict[str, list[Block]]:
    """PLR §4 memory steps 3-5: every container's blocks carved out of the pod budget ``total``.

    Used by admission (``allocate_pod``) and by pod-budget resize, so both partition identically.
    """

    def blocks_of(sizes: Mapping[str, int]) -> list[Block]:
        return [Block(bits, name, size) for name, size in sizes.items() if size > 0]

    own: dict[str, list[Block]] = {}
    sidecar_memory: dict[str, int] = {}
    for ctr in pod.init_containers():
        wanted = container_requests(pod, ctr, gates)
        if not wanted:
            if not ctr.is_sidecar:
                own[ctr.name] = blocks_of({n: s - sidecar_memory.get(n, 0) for n, s in total.items()})
            continue
        own[ctr.name] = blocks_of(wanted)
        if ctr.is_sidecar:
            for name, size in wanted.items():
                sidecar_memory[name] = sidecar_memory.get(name, 0) + size
    app_pool = {name: size - sidecar_memory.get(name, 0) for name, size in total.items()}
    for ctr in pod.app_containers():
        wanted = container_requests(pod, ctr, gates)
        if not wanted:
            continue
        own[ctr.name] = blocks_of(wanted)
        for name, size in wanted.items():
            if name in app_pool and size > 0:
                app_pool[name] -= size
    shared = blocks_of(app_pool)
    return {ctr.name: own.get(ctr.name, shared) for ctr in pod.containers}
