"""Which resizes the enforcer refuses as illegal (HTTP 422) before asking the engine whether they fit.

The API server's full check (:func:`shared.resize.resize_violations`) compares
two whole Pod objects; the enforcer keeps only the integer view it admitted
(:class:`~shared.resources.PodResources`, persisted in its state), so it applies
the rules that view can decide, with upstream's messages:

* L6: the same containers, with the same roles, in the same order;
* L5: regular init containers keep their resources;
* L4/L11: only ``cpu`` and ``memory`` change (hugepages and extended resources do not);
* L3: a request or limit that was set stays set;
* L2: the QoS class does not change.

Whether the node can honour a legal resize (Accepted / Deferred / Infeasible)
is the engine's answer, not this module's.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared import qos
from shared import resize as resize_rules
from shared.resources import QOS_RESOURCES, PodResources, Resources


@dataclass(frozen=True, slots=True)
class Violation:
    field: str
    message: str
    rule: str


def _others(values: Mapping[str, int]) -> dict[str, int]:
    return {name: v for name, v in values.items() if name not in QOS_RESOURCES}


def _stanza_violations(before: Resources, after: Resources, path: str, *, mutable: bool) -> list[Violation]:
    found: list[Violation] = []
    if any(name not in after.requests for name in before.requests):
        found.append(Violation(f"{path}.requests", "resource requests cannot be removed", "L3"))
    if any(name not in after.limits for name in before.limits):
        found.append(Violation(f"{path}.limits", "resource limits cannot be removed", "L3"))
    if not mutable:
        if dict(before.requests) != dict(after.requests) or dict(before.limits) != dict(after.limits):
            found.append(Violation("spec", resize_rules.INIT_IMMUTABLE_MESSAGE, "L5"))
    elif _others(before.requests) != _others(after.requests) or _others(before.limits) != _others(after.limits):
        found.append(Violation("spec", resize_rules.CPU_MEMORY_MESSAGE, "L4"))
    return found


def _names(pod: PodResources) -> dict[str, list[str]]:
    return {
        "containers": [c.name for c in pod.containers if c.kind == "app"],
        "initContainers": [c.name for c in pod.containers if c.kind != "app"],
    }


def resize_violations(current: PodResources, desired: PodResources, *, pod_level_resources: bool) -> list[Violation]:
    """Every rule in the module docstring that ``current`` -> ``desired`` breaks; empty when legal.

    Paths and messages are the API server's (``ValidatePodResize``): containers by index in their list."""
    ordering = resize_rules.ordering_violations(_names(current), _names(desired))
    if ordering:
        return [Violation(v.path, v.message, v.rule) for v in ordering]
    found: list[Violation] = []
    index = {"app": 0, "init": 0}
    for before, after in zip(current.containers, desired.containers, strict=True):
        section = "app" if before.kind == "app" else "init"
        ix = index[section]
        index[section] += 1
        if before.kind != after.kind:
            # an init container turned sidecar or back: upstream's munged-spec comparison judges the new role
            message = (
                resize_rules.SIDECAR_CPU_MEMORY_MESSAGE
                if after.kind == "sidecar"
                else resize_rules.INIT_IMMUTABLE_MESSAGE
            )
            found.append(Violation("spec", message, "L4" if after.kind == "sidecar" else "L5"))
            continue
        path = f"spec.containers[{ix}].resources" if section == "app" else f"spec.initContainers[{ix}].resources"
        found += _stanza_violations(before.resources, after.resources, path, mutable=before.kind != "init")
    if current.pod is not None or desired.pod is not None:
        found += _stanza_violations(
            current.pod or Resources(), desired.pod or Resources(), "spec.resources", mutable=True
        )
    old_qos = qos.qos_class(current, pod_level_resources_gate=pod_level_resources)
    new_qos = qos.compute_qos_class(desired, pod_level_resources_gate=pod_level_resources)
    if old_qos != new_qos:
        found.append(Violation("spec", resize_rules.QOS_MESSAGE, "L2"))
    return found
