"""Which cgroup values a container gets when the runtime hook asks: its slice, its pod's pool, or the node's.

* A container of a pod the enforcer holds gets exactly what the reconciler would
  write (:func:`enforcer.service.reconciler.container_values`): its exclusive
  slice, the pod shared pool, or the node shared pool, with its CPU quota and
  memory limit.
* The sandbox (pause) container of such a pod, and any container the pod's spec
  does not list (an ephemeral debug container), gets the pod's pool: the pod
  shared pool where the pod has one, else the node shared pool's part of the
  pod's CPUs, else the pod's CPUs; always inside the pod cgroup's cpuset.
* Every other container (Burstable and BestEffort pods, pods of other
  schedulers, static pods) gets the node shared pool (the engine's default
  set), which never contains an exclusive CPU; only its cpuset is managed, as
  the reconciler does for pods it does not hold.

The pod cgroup (the container cgroup's parent, when it is named for the pod) is
programmed with the pod's values too, so cgroup v1's "child within parent" rule
holds.  Pure: values in, targets out.
"""

from __future__ import annotations

from dataclasses import dataclass

from enforcer.cgroups.reconcile import CgroupTarget
from enforcer.engine.view import ContainerView, PodView
from enforcer.hooks.protocol import HookRequest, Pool
from enforcer.service.reconciler import CgroupLayout, DesiredPod, DesiredState, container_values, pod_values
from shared.cpuset import CPUSet

_POOL_OF_ASSIGNMENT: dict[str, Pool] = {
    "node_exclusive": "exclusive",
    "pod_exclusive": "exclusive",
    "pod_shared": "pod-shared",
    "node_shared": "node-shared",
}


class PlacementError(Exception):
    """No values can be given (no usable state): the hook's failure mode decides."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Placement:
    pool: Pool
    container: CgroupTarget
    pod: CgroupTarget | None


def is_pod_cgroup(path: str, pod_uid: str) -> bool:
    """Whether ``path`` names the cgroup of pod ``pod_uid`` (cgroupfs ``pod<uid>``, systemd ``...-pod<uid>.slice``)."""
    leaf = path.rstrip("/").rpartition("/")[2]
    if leaf == "pod" + pod_uid:
        return True
    return leaf.endswith("pod" + pod_uid.replace("-", "_") + ".slice")


def parent_path(path: str) -> str:
    return path.rstrip("/").rpartition("/")[0] or "/"


def _pod_pool(view: PodView, pod_cpus: CPUSet, default_cpus: CPUSet) -> CPUSet:
    if view.pod_shared_pool_cpus:
        inside = view.pod_shared_pool_cpus & pod_cpus
        if inside:
            return inside
    shared = default_cpus & pod_cpus
    return shared if shared else pod_cpus


def _find(view: PodView, name: str) -> ContainerView | None:
    return next((c for c in view.containers if c.name == name), None)


def place(request: HookRequest, container_path: str, state: DesiredState, layout: CgroupLayout) -> Placement:
    """The targets for the container at ``container_path`` (and its pod cgroup); raises PlacementError."""
    pod_path = parent_path(container_path)
    owns_parent = is_pod_cgroup(pod_path, request.pod_uid)
    desired: DesiredPod | None = next((p for p in state.pods if p.uid == request.pod_uid), None)
    if desired is None or desired.view is None or desired.resources is None:
        if not state.default_cpus:
            raise PlacementError("StateUnavailable", "the enforcer has no usable state: no node shared pool to give")
        shared = state.default_cpus
        return Placement(
            pool="node-shared",
            container=CgroupTarget(path=container_path, cpus=shared),
            pod=CgroupTarget(path=pod_path, cpus=shared) if owns_parent else None,
        )
    pod_target = pod_values(desired.view, desired.resources, layout)
    pod = _at(pod_target, pod_path) if owns_parent else None
    container = _find(desired.view, request.container_name) if request.container_type == "container" else None
    if container is not None:
        values = container_values(container, layout)
        return Placement(pool=_POOL_OF_ASSIGNMENT[container.assignment], container=_at(values, container_path), pod=pod)
    pod_cpus = pod_target.cpus if pod_target.cpus is not None else state.default_cpus
    return Placement(
        pool="pod-pool",
        container=CgroupTarget(
            path=container_path, cpus=_pod_pool(desired.view, pod_cpus, state.default_cpus), mems=pod_target.mems
        ),
        pod=pod,
    )


def _at(target: CgroupTarget, path: str) -> CgroupTarget:
    return CgroupTarget(
        path=path,
        cpus=target.cpus,
        mems=target.mems,
        cpu_quota=target.cpu_quota,
        memory_limit=target.memory_limit,
    )
