"""The API server's defaulting of pod resources (``SetDefaults_Pod``, R5.1-R5.5).

The webhook sees pods the API server already defaulted, but the plan simulator
reads raw manifests that never were, and resize checks re-run defaulting on the
new spec exactly as decoding a ``/resize`` body does.  Defaulting is idempotent,
so both services simply always apply it.

The rules are written once over :data:`~shared.resources.Amount` (engine
integers or exact :class:`~shared.quantity.Quantity` values) so the integer
engine view and the quantity view used for API-server-style messages cannot
drift apart.  Pure functions: nothing here parses manifests or does I/O.

Upstream order (``pkg/apis/core/v1/defaults.go``): container requests := limits,
then, with the PodLevelResources gate, ``defaultHugePagePodLimits``,
``defaultPodRequests``, ``defaultPodLimits``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic

from shared import qos
from shared.resources import (
    Amount,
    ContainerKind,
    ContainerResources,
    PodResources,
    Resources,
    is_hugepages,
    is_overcommit_allowed,
    is_supported_pod_level_resource,
    names_pod_level_resource,
)


@dataclass(frozen=True, slots=True)
class Requirements(Generic[Amount]):
    """One ``resources`` stanza: ``requests`` and ``limits`` by resource name."""

    requests: Mapping[str, Amount] = field(default_factory=dict)
    limits: Mapping[str, Amount] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ContainerRequirements(Generic[Amount]):
    """A container's stanza with the role that decides how it aggregates (R1.3)."""

    kind: ContainerKind
    requirements: Requirements[Amount]


def default_container(requirements: Requirements[Amount]) -> Requirements[Amount]:
    """R5.1: every limit without a request gives that request the limit's value."""
    if requirements.limits.keys() <= requirements.requests.keys():  # every limit has its request: nothing to do
        return requirements
    requests = dict(requirements.requests)
    for name, limit in requirements.limits.items():
        requests.setdefault(name, limit)
    return Requirements(requests=requests, limits=requirements.limits)


@dataclass(frozen=True, slots=True)
class Defaulted(Generic[Amount]):
    """What :func:`defaulted_requirements` gives: the defaulted stanzas, and the container aggregates it used.

    ``aggregate`` is ``None`` when defaulting needed none (no ``spec.resources``, or the gate off); otherwise it is
    :func:`shared.qos.aggregate` of the defaulted containers' requests and limits, which validation compares with
    the pod-level stanza (V6-V7) instead of summing the same containers again.
    """

    containers: list[ContainerRequirements[Amount]]
    pod: Requirements[Amount] | None
    aggregate: Requirements[Amount] | None = None


def default_requirements(
    containers: Sequence[ContainerRequirements[Amount]],
    pod: Requirements[Amount] | None,
    *,
    pod_level_resources: bool = True,
) -> tuple[list[ContainerRequirements[Amount]], Requirements[Amount] | None]:
    """Default every container (R5.1), then ``spec.resources`` (R5.2-R5.5) when the gate is on.

    ``containers`` are init containers (regular and sidecars) in spec order and
    app containers; ``pod`` is ``spec.resources`` or ``None`` when absent.
    """
    done = defaulted_requirements(containers, pod, pod_level_resources=pod_level_resources)
    return done.containers, done.pod


def defaulted_requirements(
    containers: Sequence[ContainerRequirements[Amount]],
    pod: Requirements[Amount] | None,
    *,
    pod_level_resources: bool = True,
) -> Defaulted[Amount]:
    """:func:`default_requirements`, with the container aggregates it computed on the way (:class:`Defaulted`)."""
    defaulted = [_defaulted_container(c) for c in containers]
    if not pod_level_resources or pod is None:
        return Defaulted(defaulted, pod)
    agg_requests = qos.aggregate((c.kind, c.requirements.requests) for c in defaulted)
    agg_limits = qos.aggregate((c.kind, c.requirements.limits) for c in defaulted)
    aggregate = Requirements(requests=agg_requests, limits=agg_limits)
    # Upstream defaults at every decode, so the stored pod is defaulted again whenever it
    # is read, and one pass is not idempotent: limits derived by defaultPodLimits make
    # defaultPodRequests apply on the next read.  Every reader after the first (kubelet,
    # scheduler, our enforcer) sees the fixpoint, reached by the second pass.
    while True:
        again = _default_hugepage_pod_limits(pod, agg_limits)
        again = _default_pod_requests(again, agg_requests)
        again = _default_pod_limits(again, agg_limits, defaulted)
        if again is pod or again == pod:  # each step returns its input when it changes nothing
            return Defaulted(defaulted, pod, aggregate)
        pod = again


def _defaulted_container(container: ContainerRequirements[Amount]) -> ContainerRequirements[Amount]:
    requirements = default_container(container.requirements)
    return container if requirements is container.requirements else ContainerRequirements(container.kind, requirements)


def _default_hugepage_pod_limits(pod: Requirements[Amount], agg_limits: Mapping[str, Amount]) -> Requirements[Amount]:
    """R5.3: a hugepages limit the containers set but the pod does not becomes the aggregate."""
    if not pod.limits and not pod.requests:
        return pod
    # upstream leaves the limit alone when the pod already requests that size
    added = {
        name: value
        for name, value in agg_limits.items()
        if is_hugepages(name) and name not in pod.requests and name not in pod.limits
    }
    return replace(pod, limits={**pod.limits, **added}) if added else pod  # unchanged: the same value, no copy


def _default_pod_requests(pod: Requirements[Amount], agg_requests: Mapping[str, Amount]) -> Requirements[Amount]:
    """R5.2/R5.5: only with pod-level limits; the aggregate first, then the pod limit."""
    if not pod.limits:
        return pod
    requests = dict(pod.requests)
    for name, value in agg_requests.items():
        if name not in requests and is_supported_pod_level_resource(name) and is_overcommit_allowed(name):
            requests[name] = value
    for name, value in pod.limits.items():
        if name not in requests and is_supported_pod_level_resource(name):
            requests[name] = value
    return replace(pod, requests=requests) if len(requests) != len(pod.requests) else pod


def _default_pod_limits(
    pod: Requirements[Amount],
    agg_limits: Mapping[str, Amount],
    containers: Sequence[ContainerRequirements[Amount]],
) -> Requirements[Amount]:
    """R5.4 (``PodLevelResourcesFixUpdateDefaulting``): requests-only pods get the container limit sum.

    Only for cpu/memory that EVERY container (init, sidecar and app: the upstream
    helper ``AllContainersHaveLimitForResource`` was not readable, so "every" is
    taken literally) limits; otherwise the pod stays bounded by the node only.
    """
    if names_pod_level_resource(pod.limits):
        return pod
    if not names_pod_level_resource(pod.requests):
        return pod
    limits = dict(pod.limits)
    for name, value in agg_limits.items():
        if (
            name not in limits
            and is_supported_pod_level_resource(name)
            and is_overcommit_allowed(name)
            and all(name in c.requirements.limits for c in containers)
        ):
            limits[name] = value
    return replace(pod, limits=limits) if len(limits) != len(pod.limits) else pod


def apply_defaults(pod: PodResources, *, pod_level_resources: bool = True) -> PodResources:
    """The integer view of :func:`default_requirements`, for callers that build ``PodResources`` directly."""
    containers = [
        ContainerRequirements(c.kind, Requirements(c.resources.requests, c.resources.limits)) for c in pod.containers
    ]
    stanza = None if pod.pod is None else Requirements(pod.pod.requests, pod.pod.limits)
    defaulted, pod_stanza = default_requirements(containers, stanza, pod_level_resources=pod_level_resources)
    new_containers = tuple(
        ContainerResources(
            name=c.name,
            kind=c.kind,
            resources=Resources(requests=dict(d.requirements.requests), limits=dict(d.requirements.limits)),
        )
        for c, d in zip(pod.containers, defaulted, strict=True)
    )
    new_pod = (
        None if pod_stanza is None else Resources(requests=dict(pod_stanza.requests), limits=dict(pod_stanza.limits))
    )
    return replace(pod, containers=new_containers, pod=new_pod)
