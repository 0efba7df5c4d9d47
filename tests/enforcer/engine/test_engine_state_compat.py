"""Engine snapshots written by earlier versions still load (the spec hash changed format once)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from enforcer.engine import builder, podcodec
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine, PodConflictError
from enforcer.errors import ConfigError
from enforcer.topology import machine
from shared import contract
from shared.resources import ContainerResources, PodResources, resources_from_maps

TOPOLOGY = Path(__file__).resolve().parents[2] / "scenarios" / "dual-socket-ht-32.json"
KUBELET = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0,16", "topologyManagerPolicy": "single-numa-node"}


def node() -> NodeEngine:
    return builder.build(machine.load(TOPOLOGY), from_kubelet(KUBELET))


def web(name: str = "web", priority: int = 0) -> PodResources:
    values = {"cpu": "2", "memory": "1Gi"}
    container = ContainerResources("c", "app", resources_from_maps(values, values, field="c"))
    return PodResources(uid="default/web", namespace="default", name=name, containers=(container,), priority=priority)


def legacy_spec_hash(pod: PodResources) -> str:
    """The engine's own hash before it used the contract's: ``sha256:`` + 32 hex of the pod minus its UID."""
    body: dict[str, Any] = podcodec.to_dict(pod)
    body.pop("uid")
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return "sha256:" + digest[:32]


def test_a_snapshot_with_legacy_spec_hashes_loads_and_keeps_admission_idempotent() -> None:
    engine = node()
    assert engine.admit(web()).admitted
    doc = engine.snapshot()
    for raw in doc["pods"].values():
        raw["specHash"] = legacy_spec_hash(podcodec.from_dict(raw["pod"]))
    restored = builder.restore(engine.topology, engine.config, doc)
    record = restored.record("default/web")
    assert record.spec_hash == contract.spec_hash(record.pod)
    again = restored.admit(web())  # the same pod sent again: the same answer, not a conflict
    assert again.admitted and again.view == engine.view("default/web")
    assert restored.snapshot() == engine.snapshot()


@pytest.mark.parametrize("changed", [web(name="other"), web(priority=10)], ids=["renamed", "reprioritised"])
def test_a_known_uid_sent_as_another_pod_is_a_conflict(changed: PodResources) -> None:
    engine = node()
    assert engine.admit(web()).admitted
    with pytest.raises(PodConflictError):
        engine.admit(changed)


def test_a_snapshot_naming_a_retired_gate_restores() -> None:
    """States written while InPlacePodVerticalScalingExclusiveCPUs was parsed record it; it decided nothing."""
    engine = node()
    assert engine.admit(web()).admitted
    doc = engine.snapshot()
    doc["config"]["featureGates"]["InPlacePodVerticalScalingExclusiveCPUs"] = False
    restored = builder.restore(engine.topology, engine.config, doc)
    assert restored.view("default/web") == engine.view("default/web")


def test_a_snapshot_from_another_configuration_is_still_refused() -> None:
    engine = node()
    doc = engine.snapshot()
    doc["config"]["featureGates"]["PodLevelResourceManagers"] = True
    with pytest.raises(ConfigError, match="different kubelet configuration"):
        builder.restore(engine.topology, engine.config, doc)
