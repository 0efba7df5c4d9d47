"""``compatibility: kubelet`` resizes of Guaranteed pods: the kubelet's ``guaranteedPodResourceResizeRequired``.

The kubelet refuses a resize under the static CPU policy only when it changes the CPU request of an app
container or restartable sidecar, and under the Static memory policy only when it changes one's memory
request; pod-level values are not compared (in-place-resize.md R4.2).  A pod the pod-level resource
managers hold is never resized (R5.4).  Everything else is decided by the normal fit, and a resize the
kubelet accepts leaves the managers' state as it was.  Cases replay the kubelet's own e2e expectations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from resize_builders import container, dual_socket_ht_32, kubelet, pod

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine
from shared.resources import PodResources

CPU_REFUSED = 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'
MEMORY_REFUSED = 'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"'


def app_and_sidecar(app_cpu: str, app_memory: str, sidecar_cpu: str = "1", **kw: Any) -> PodResources:
    return pod(
        "db",
        container("proxy", sidecar_cpu, "1Gi", kind="sidecar"),
        container("pg", app_cpu, app_memory),
        **kw,
    )


@dataclass(frozen=True)
class Case:
    name: str
    node: dict[str, Any]
    before: PodResources
    after: PodResources
    status: str
    message: str | None = None
    gates: dict[str, Any] = field(default_factory=dict)


STATIC_CPU: dict[str, Any] = {}
STATIC_MEMORY: dict[str, Any] = {"cpu_policy": "none", "reserved": "", "memory": True}
BOTH: dict[str, Any] = {"memory": True}

CASES = [
    Case(
        "static CPU: a CPU change is refused",
        STATIC_CPU,
        app_and_sidecar("2", "2Gi"),
        app_and_sidecar("4", "2Gi"),
        "Infeasible",
        CPU_REFUSED,
    ),
    Case(
        "static CPU: a memory-only change is accepted",
        STATIC_CPU,
        app_and_sidecar("2", "2Gi"),
        app_and_sidecar("2", "3Gi"),
        "Accepted",
    ),
    Case(
        "static CPU: a sidecar's CPU change is refused",
        STATIC_CPU,
        app_and_sidecar("2", "2Gi"),
        app_and_sidecar("2", "2Gi", sidecar_cpu="2"),
        "Infeasible",
        CPU_REFUSED,
    ),
    Case(
        "Static memory: a memory change is refused",
        STATIC_MEMORY,
        app_and_sidecar("2", "2Gi"),
        app_and_sidecar("2", "3Gi"),
        "Infeasible",
        MEMORY_REFUSED,
    ),
    Case(
        "Static memory: a CPU-only change is accepted",
        STATIC_MEMORY,
        app_and_sidecar("2", "2Gi"),
        app_and_sidecar("3", "2Gi"),
        "Accepted",
    ),
    Case(
        "both: a memory-only change is refused by the Memory Manager rule",
        BOTH,
        app_and_sidecar("2", "2Gi"),
        app_and_sidecar("2", "3Gi"),
        "Infeasible",
        MEMORY_REFUSED,
    ),
    Case(
        "both: a CPU change is refused by the CPU Manager rule first",
        BOTH,
        app_and_sidecar("2", "2Gi"),
        app_and_sidecar("4", "3Gi"),
        "Infeasible",
        CPU_REFUSED,
    ),
    Case(
        "static CPU, PodLevelResourceManagers off: a pod-level-only change is accepted",
        {"plr": True, "plr_managers": False},
        app_and_sidecar("2", "2Gi", pod_cpu="4", pod_memory="4Gi"),
        app_and_sidecar("2", "2Gi", pod_cpu="5", pod_memory="4Gi"),
        "Accepted",
    ),
    Case(
        "static CPU, PodLevelResourceManagers on: a pod-level pod is never resized (R5.4)",
        {"plr": True},
        app_and_sidecar("2", "2Gi", pod_cpu="4", pod_memory="4Gi"),
        app_and_sidecar("2", "2Gi", pod_cpu="4", pod_memory="5Gi"),
        "Infeasible",
        CPU_REFUSED,
    ),
]


def _node(fields: dict[str, Any]) -> NodeEngine:
    fields = dict(fields)
    managers = fields.pop("plr_managers", True)
    raw = kubelet(topology_policy="none", **fields)
    if not managers:
        raw["featureGates"] = {"PodLevelResources": True}
    return builder.build(dual_socket_ht_32(), from_kubelet(raw, compatibility="kubelet"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_kubelet_mode_refuses_only_what_guaranteed_pod_resource_resize_required_refuses(case: Case) -> None:
    node = _node(case.node)
    assert node.admit(case.before).admitted
    before = node.snapshot()
    result = node.resize(case.after)
    assert (result.status, result.message) == (case.status, case.message)
    after = node.snapshot()
    for doc in (before, after):
        for key in ("infeasibleResizes", "sequence", "pods", "pendingResizes"):
            doc.pop(key, None)
    assert after == before  # the managers' state never changes in kubelet mode
