"""Legality of an in-place resize (``ValidatePodResize``, L1-L11) and what a resize changes.

:func:`resize_violations` answers what the API server answers for a
``pods/resize`` request: may the resources go from ``old`` to ``new``.  Whether
the NODE can honour it (Deferred / Infeasible) is the enforcer's question, not
this module's.  :func:`resource_changes` lists, per container and for the pod,
what a resize actually changes, in engine units, for the enforcer and the webhook.

Both pods are defaulted first, as decoding a ``/resize`` body does.  Rule ids
refer to ``../shared/spec/in-place-resize.md``; messages are upstream's where
upstream has the rule (``pkg/apis/core/validation/validation.go``).

Pure: no I/O, no clocks, no node state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from shared import defaults, qos, quantity, validation
from shared.pod import Pod, ResourceRequirements
from shared.resources import QOS_RESOURCES, ContainerKind
from shared.validation import FieldViolation

Requirement = Literal["requests", "limits"]
Operation = Literal["add", "remove", "increase", "decrease"]

QOS_MESSAGE = "Pod QOS Class may not change as a result of resizing"
CPU_MEMORY_MESSAGE = "only cpu and memory resources are mutable"
SIDECAR_CPU_MEMORY_MESSAGE = "only cpu and memory resources for sidecar containers are mutable"
INIT_IMMUTABLE_MESSAGE = "resources for non-sidecar init containers are immutable"


@dataclass(frozen=True, slots=True)
class ResourceChange:
    """One requirement of one resource that a resize changes.

    ``container`` is ``None`` for the pod-level stanza (``spec.resources``).
    ``old`` / ``new`` are engine units (cpu millicores, bytes); ``None`` is "unset".
    """

    container: str | None
    kind: ContainerKind | None
    requirement: Requirement
    resource: str
    old: int | None
    new: int | None

    @property
    def operation(self) -> Operation:
        """The kubelet's ``kubelet_container_requested_resizes_total`` operation label."""
        if self.old is None:
            return "add"
        if self.new is None:
            return "remove"
        return "increase" if self.new > self.old else "decrease"


def resource_changes(old: Pod, new: Pod, *, pod_level_resources: bool = True) -> list[ResourceChange]:
    """What differs between the defaulted resources of ``old`` and ``new``.

    Containers are matched by name; containers present on one side only are not
    resource changes (they make the resize illegal, L6).  Raises ``QuantityError``
    for an unparsable quantity.
    """
    before = old.to_resources(pod_level_resources=pod_level_resources)
    after = new.to_resources(pod_level_resources=pod_level_resources)
    previous = {c.name: c for c in before.containers}
    changes: list[ResourceChange] = []
    for container in after.containers:
        was = previous.get(container.name)
        if was is None:
            continue
        changes += _diff(
            container.name, container.kind, "requests", was.resources.requests, container.resources.requests
        )
        changes += _diff(container.name, container.kind, "limits", was.resources.limits, container.resources.limits)
    pod_before = before.pod.requests if before.pod else {}, before.pod.limits if before.pod else {}
    pod_after = after.pod.requests if after.pod else {}, after.pod.limits if after.pod else {}
    changes += _diff(None, None, "requests", pod_before[0], pod_after[0])
    changes += _diff(None, None, "limits", pod_before[1], pod_after[1])
    return changes


def _diff(
    container: str | None,
    kind: ContainerKind | None,
    requirement: Requirement,
    old: Mapping[str, int],
    new: Mapping[str, int],
) -> list[ResourceChange]:
    names = list(old) + [n for n in new if n not in old]
    return [
        ResourceChange(container, kind, requirement, name, old.get(name), new.get(name))
        for name in names
        if old.get(name) != new.get(name)
    ]


def increases_requests(changes: Sequence[ResourceChange]) -> bool:
    """Whether any request grows (R4.5: resizes that do not are retried first)."""
    return any(c.requirement == "requests" and c.operation in ("add", "increase") for c in changes)


def resize_violations(
    old: Pod,
    new: Pod,
    *,
    pod_level_resources: bool = True,
    pod_level_resize: bool = True,
) -> list[FieldViolation]:
    """Everything the API server would reject in a ``pods/resize`` from ``old`` to ``new``.

    ``pod_level_resources`` is the PodLevelResources gate, ``pod_level_resize`` the
    InPlacePodLevelResourcesVerticalScaling gate (KEP-5419, beta and on in v1.36).
    ``old`` must have parseable quantities (it is the stored pod); an unparsable
    quantity in ``new`` is reported as a violation.
    """
    unparsable = validation.quantity_syntax_violations(new)
    if unparsable:
        return unparsable  # nothing else can be judged without the values
    violations = validation.validate_pod_resources(new, pod_level_resources=pod_level_resources)  # L1
    # Upstream answers these three with a single error and stops.
    if not pod_level_resize and (_declares_pod_resources(old) or _declares_pod_resources(new)):
        return [FieldViolation("", "Forbidden", "pods with pod-level resources cannot be resized", "L11")]
    if old.is_mirror:
        return [FieldViolation("", "Forbidden", "static pods cannot be resized", "L7")]
    if old.is_windows:
        return [FieldViolation("", "Forbidden", "windows pods cannot be resized", "L7")]

    violations += _qos_violations(old, new, pod_level_resources)
    if not _node_reports_resources(old):
        violations.append(FieldViolation("spec", "Forbidden", "Pod running on node without support for resize", "L8"))

    old_containers, old_stanza = old.requirement_quantities(pod_level_resources=pod_level_resources)
    new_containers, new_stanza = new.requirement_quantities(pod_level_resources=pod_level_resources)
    old_init = [r for r in old_containers if r.kind != "app"]
    new_init = [r for r in new_containers if r.kind != "app"]
    old_app = [r for r in old_containers if r.kind == "app"]
    new_app = [r for r in new_containers if r.kind == "app"]

    # L6 (validatePodResizeContainerOrdering): the rest assumes the containers line up, so stop here if not.
    ordering = _ordering_violations(old, new)
    if ordering:
        return violations + ordering

    # L3: nothing set before may disappear (sidecars, then app containers, as upstream walks them)
    for ix, (before, after) in enumerate(zip(old_init, new_init, strict=True)):
        if old.spec.init_containers[ix].is_sidecar:
            violations += _removal_violations(before.requirements, after.requirements, f"spec.initContainers[{ix}]")
    for ix, (before, after) in enumerate(zip(old_app, new_app, strict=True)):
        violations += _removal_violations(before.requirements, after.requirements, f"spec.containers[{ix}]")
    if pod_level_resize and old_stanza is not None:
        violations += _removal_violations(old_stanza, new_stanza or defaults.Requirements(), "spec")

    # L4/L5 for init containers first (upstream's loop over initContainers), one error per container
    for ix, (before, after) in enumerate(zip(old_init, new_init, strict=True)):
        raw_before = _raw_containers(old, "initContainers")[ix]
        raw_after = _raw_containers(new, "initContainers")[ix]
        if new.spec.init_containers[ix].is_sidecar:
            if not _same_apart_from_cpu_memory(raw_before, raw_after, before, after):
                violations.append(FieldViolation("spec", "Forbidden", SIDECAR_CPU_MEMORY_MESSAGE, "L4"))
        elif not _same_apart_from_cpu_memory(raw_before, raw_after, before, after, resources_mutable=False):
            violations.append(FieldViolation("spec", "Forbidden", INIT_IMMUTABLE_MESSAGE, "L5"))
    # L4 for app containers (upstream deep-compares the munged spec once; the texts are the same and
    # the webhook words each distinct violation once)
    for ix, (before, after) in enumerate(zip(old_app, new_app, strict=True)):
        if not _same_apart_from_cpu_memory(
            _raw_containers(old, "containers")[ix], _raw_containers(new, "containers")[ix], before, after
        ):
            violations.append(FieldViolation("spec", "Forbidden", CPU_MEMORY_MESSAGE, "L4"))
    if pod_level_resize and not _pod_level_same_apart_from_cpu_memory(old, new, old_stanza, new_stanza):
        # KEP-5419: pod-level cpu/memory may change; hugepages (and claims) may not
        violations.append(FieldViolation("spec", "Forbidden", CPU_MEMORY_MESSAGE, "L11"))
    return violations


def _ordering_violations(old: Pod, new: Pod) -> list[FieldViolation]:
    return ordering_violations(
        {
            "containers": [c.name for c in old.spec.containers],
            "initContainers": [c.name for c in old.spec.init_containers],
        },
        {
            "containers": [c.name for c in new.spec.containers],
            "initContainers": [c.name for c in new.spec.init_containers],
        },
    )


def ordering_violations(old: Mapping[str, Sequence[str]], new: Mapping[str, Sequence[str]]) -> list[FieldViolation]:
    """L6, upstream ``validatePodResizeContainerOrdering``: no container added, removed, renamed or reordered.

    ``old`` / ``new`` map ``containers`` and ``initContainers`` to the names in order.  A count change is
    one error on the list; same count, one error per position whose name changed (a swap names both),
    with the list's own name in the message, as upstream words it."""
    violations: list[FieldViolation] = []
    for key in ("containers", "initContainers"):
        before, after = old.get(key, ()), new.get(key, ())
        if len(before) != len(after):
            violations.append(
                FieldViolation(f"spec.{key}", "Forbidden", f"{key} may not be added or removed on resize", "L6")
            )
            continue
        for ix, (was, now) in enumerate(zip(before, after, strict=True)):
            if was != now:
                violations.append(
                    FieldViolation(
                        f"spec.{key}[{ix}].name", "Forbidden", f"{key} may not be renamed or reordered on resize", "L6"
                    )
                )
    return violations


def _declares_pod_resources(pod: Pod) -> bool:
    # upstream's own check here counts any name, supported or not
    resources = pod.spec.resources
    return resources is not None and bool(resources.requests or resources.limits)


def _qos_violations(old: Pod, new: Pod, pod_level_resources: bool) -> list[FieldViolation]:
    """L2: ``GetPodQOS(old) != ComputePodQOS(new)``; the printed value is the new object's status."""
    old_qos = old.status.qos_class or qos.compute_qos_class(
        old.to_resources(pod_level_resources=pod_level_resources), pod_level_resources_gate=pod_level_resources
    )
    new_qos = qos.compute_qos_class(
        new.to_resources(pod_level_resources=pod_level_resources), pod_level_resources_gate=pod_level_resources
    )
    if old_qos == new_qos:
        return []
    return [FieldViolation("spec", "Invalid", QOS_MESSAGE, "L2", value=new.status.qos_class or "")]


def _node_reports_resources(pod: Pod) -> bool:
    """``isPodResizeRequestSupported`` (L8): the first running container shows its applied resources."""
    for status in pod.status.container_statuses:
        if status.state.running is not None:
            return status.resources is not None
    # nothing running: the node's support cannot be told, so it is assumed
    return True


def _removal_violations(
    before: defaults.Requirements[quantity.Quantity], after: defaults.Requirements[quantity.Quantity], path: str
) -> list[FieldViolation]:
    """L3: requests or limits present before must still be present."""
    violations: list[FieldViolation] = []
    stanza = f"{path}.resources"
    if any(name not in after.requests for name in before.requests):
        violations.append(
            FieldViolation(f"{stanza}.requests", "Forbidden", "resource requests cannot be removed", "L3")
        )
    if any(name not in after.limits for name in before.limits):
        violations.append(FieldViolation(f"{stanza}.limits", "Forbidden", "resource limits cannot be removed", "L3"))
    return violations


def _same_apart_from_cpu_memory(
    raw_before: Mapping[str, Any],
    raw_after: Mapping[str, Any],
    before: defaults.ContainerRequirements[quantity.Quantity],
    after: defaults.ContainerRequirements[quantity.Quantity],
    *,
    resources_mutable: bool = True,
) -> bool:
    """Upstream munges cpu/memory back to their old values and deep-compares the container."""
    if _without(raw_before, "resources") != _without(raw_after, "resources"):
        return False
    ignored = QOS_RESOURCES if resources_mutable else ()
    return _same_values(before.requirements.requests, after.requirements.requests, ignored) and _same_values(
        before.requirements.limits, after.requirements.limits, ignored
    )


def _pod_level_same_apart_from_cpu_memory(
    old: Pod,
    new: Pod,
    before: defaults.Requirements[quantity.Quantity] | None,
    after: defaults.Requirements[quantity.Quantity] | None,
) -> bool:
    if _claims(old.spec.resources) != _claims(new.spec.resources):
        return False
    empty: defaults.Requirements[quantity.Quantity] = defaults.Requirements()
    before, after = before or empty, after or empty
    return _same_values(before.requests, after.requests, QOS_RESOURCES) and _same_values(
        before.limits, after.limits, QOS_RESOURCES
    )


def _claims(resources: ResourceRequirements | None) -> object:
    return None if resources is None else resources.claims


def _same_values(
    before: Mapping[str, quantity.Quantity], after: Mapping[str, quantity.Quantity], ignored: Sequence[str]
) -> bool:
    """Semantic equality (``"1"`` equals ``"1000m"``) of every resource not in ``ignored``."""
    kept_before = {n: q for n, q in before.items() if n not in ignored}
    kept_after = {n: q for n, q in after.items() if n not in ignored}
    return kept_before.keys() == kept_after.keys() and all(q.same_value(kept_after[n]) for n, q in kept_before.items())


def _without(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k != key}


def _raw_containers(pod: Pod, key: Literal["containers", "initContainers"]) -> list[Mapping[str, Any]]:
    """The containers as the object carried them (every field, not just the modelled ones)."""
    spec = pod.raw.get("spec")
    if isinstance(spec, Mapping) and isinstance(spec.get(key), list):
        return list(spec[key])
    # a Pod built without parse_pod: compare what the model knows
    models = pod.spec.containers if key == "containers" else pod.spec.init_containers
    return [m.model_dump(by_alias=True, exclude_none=True) for m in models]
