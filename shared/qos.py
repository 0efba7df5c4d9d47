"""QoS class and effective pod requests/limits, with pod-level resources.

One definition used by both services.  Rule numbers refer to
``../shared/spec/qos-and-pod-level-resources.md``.  Functions take the
*defaulted* pod (:func:`shared.defaults.apply_defaults`, or
:meth:`shared.pod.Pod.to_resources`), as the API server computes QoS after
defaulting.  Nothing here reads a raw manifest or does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shared.resources import (
    QOS_RESOURCES,
    Amount,
    ContainerKind,
    PodResources,
    QOSClass,
    is_supported_pod_level_resource,
)

_QOS_NAMES = frozenset(QOS_RESOURCES)


def compute_qos_class(pod: PodResources, *, pod_level_resources_gate: bool = True) -> QOSClass:
    """``ComputePodQOS`` (R2.1-R2.7), ignoring ``status.qosClass``."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    if pod_level_resources_gate and pod.pod_level_resources_set and pod.pod is not None:
        # R2.1/R2.3: only spec.resources counts; containers are ignored (R2.9).
        requests = {n: v for n, v in pod.pod.requests.items() if n in QOS_RESOURCES and v > 0}
        limits = {n: v for n, v in pod.pod.limits.items() if n in QOS_RESOURCES and v > 0}
        if not limits.keys() >= _QOS_NAMES:
            guaranteed = False
    else:
        # R2.4: summed over every container; each must limit both cpu and memory.
        for c in pod.containers:
            found = set()
            for n, v in c.resources.requests.items():
                if n in QOS_RESOURCES and v > 0:
                    requests[n] = requests.get(n, 0) + v
            for n, v in c.resources.limits.items():
                if n in QOS_RESOURCES and v > 0:
                    found.add(n)
                    limits[n] = limits.get(n, 0) + v
            if not found >= _QOS_NAMES:
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"  # R2.5
    if guaranteed:
        guaranteed = requests.items() <= limits.items()  # every request equals its limit (values are ints > 0)
    if guaranteed and len(requests) == len(limits):
        return "Guaranteed"  # R2.6
    return "Burstable"  # R2.7


def qos_class(pod: PodResources, *, pod_level_resources_gate: bool = True) -> QOSClass:
    """``GetPodQOS`` (R2.8): the immutable ``status.qosClass`` when set, else computed."""
    if pod.qos_class is not None:
        return pod.qos_class
    return compute_qos_class(pod, pod_level_resources_gate=pod_level_resources_gate)


def aggregate(entries: Iterable[tuple[ContainerKind, Mapping[str, Amount]]]) -> dict[str, Amount]:
    """R3.1-R3.4 over one requirement (requests or limits) of every container.

    ``max(sum(app) + sum(sidecars), max over regular init of own + sidecars declared before it)``.
    ``entries`` are ``(kind, values)`` with init containers in spec order; app
    containers may come anywhere.  Like upstream ``aggregateContainerResourcesByFn``
    app containers are summed first, then init containers are walked: with
    :class:`~shared.quantity.Quantity` amounts this decides the format of each sum
    (Go keeps the first addend's), so messages print as the API server's do.
    """
    items = list(entries)
    result: dict[str, Amount] = {}
    for kind, values in items:
        if kind == "app":
            _add_into(result, values)
    sidecars_so_far: dict[str, Amount] = {}
    init_max: dict[str, Amount] = {}
    for kind, values in items:
        if not values:
            # Changes nothing: every sidecar step leaves init_max >= sidecars_so_far, so an empty sidecar or init
            # container raises no maximum (ties keep the incumbent).  Pods carry many empty stanzas.
            continue
        if kind == "sidecar":
            _add_into(result, values)
            _add_into(sidecars_so_far, values)
            _max_into(init_max, sidecars_so_far)
        elif kind == "init":
            usage: dict[str, Amount] = {}
            _add_into(usage, values)
            _add_into(usage, sidecars_so_far)
            _max_into(init_max, usage)
    _max_into(result, init_max)
    return result


def _add_into(target: dict[str, Amount], values: Mapping[str, Amount]) -> None:
    for name, value in values.items():
        target[name] = target[name] + value if name in target else value


def _max_into(target: dict[str, Amount], values: Mapping[str, Amount]) -> None:
    # Go's maxResourceList replaces only on a strictly greater value: ties keep the incumbent.
    for name, value in values.items():
        if name not in target or value > target[name]:
            target[name] = value


def aggregate_container_requests(pod: PodResources) -> dict[str, int]:
    """Container aggregate requests (R3.1-R3.4), without pod-level override or overhead."""
    return aggregate((c.kind, c.resources.requests) for c in pod.containers)


def aggregate_container_limits(pod: PodResources) -> dict[str, int]:
    """Container aggregate limits with the same formula (R3.7)."""
    return aggregate((c.kind, c.resources.limits) for c in pod.containers)


def effective_pod_requests(
    pod: PodResources, *, pod_level_resources_gate: bool = True, include_overhead: bool = False
) -> dict[str, int]:
    """``PodRequests``: the aggregate, each supported pod-level request overriding its resource (R3.5).

    ``include_overhead`` adds ``spec.overhead`` (R3.6); the resource managers leave it out.
    """
    key = ("effective_pod_requests", pod_level_resources_gate, include_overhead)
    found = pod.memo.get(key)
    if found is None:
        found = pod.memo[key] = tuple(_effective_pod_requests(pod, pod_level_resources_gate, include_overhead).items())
    return dict(found)  # a new dict per call, as before: callers may change theirs


def _effective_pod_requests(
    pod: PodResources, pod_level_resources_gate: bool, include_overhead: bool
) -> dict[str, int]:
    result = aggregate_container_requests(pod)
    if pod_level_resources_gate and pod.pod_level_requests_set and pod.pod is not None:
        result.update((n, v) for n, v in pod.pod.requests.items() if is_supported_pod_level_resource(n))
    if include_overhead:
        for name, value in pod.overhead.items():
            result[name] = result.get(name, 0) + value
    return result


def effective_pod_limits(
    pod: PodResources, *, pod_level_resources_gate: bool = True, include_overhead: bool = False
) -> dict[str, int]:
    """``PodLimits``: the aggregate, each supported pod-level limit overriding its resource (R3.5).

    ``include_overhead`` adds ``spec.overhead`` only to limits that are already non-zero (R3.6).
    """
    key = ("effective_pod_limits", pod_level_resources_gate, include_overhead)
    found = pod.memo.get(key)
    if found is None:
        found = pod.memo[key] = tuple(_effective_pod_limits(pod, pod_level_resources_gate, include_overhead).items())
    return dict(found)  # a new dict per call, as before: callers may change theirs


def _effective_pod_limits(pod: PodResources, pod_level_resources_gate: bool, include_overhead: bool) -> dict[str, int]:
    result = aggregate_container_limits(pod)
    if pod_level_resources_gate and pod.pod_level_resources_set and pod.pod is not None:
        result.update((n, v) for n, v in pod.pod.limits.items() if is_supported_pod_level_resource(n))
    if include_overhead:
        for name, value in pod.overhead.items():
            if result.get(name, 0) != 0:
                result[name] += value
    return result
