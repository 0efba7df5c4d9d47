"""Pure parts: which values an unknown container gets, pod cgroup naming, and untracked-child containment."""

from __future__ import annotations

import pytest

from enforcer.cgroups import hierarchy, recording
from enforcer.cgroups.reconcile import CgroupTarget, reconcile
from enforcer.hooks import placement
from enforcer.hooks.protocol import HookRequest
from enforcer.service.reconciler import CgroupLayout, DesiredState
from shared.cpuset import CPUSet

UID = "0b6f3c1e-2d4a-4f5b-8c7d-9e0f1a2b3c4d"
LAYOUT = CgroupLayout(driver="cgroupfs", runtime="containerd", all_numa_nodes=(0,))


def _request(kind: str = "container", name: str = "app") -> HookRequest:
    return HookRequest("c1", 42, UID, name if kind == "container" else "", kind, "containerd")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "owned"),
    [
        (f"/kubepods/burstable/pod{UID}", True),
        (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice", True),
        ("/kubepods/burstable", False),
        (f"/system.slice/pod{UID}-other", False),
    ],
)
def test_the_pod_cgroup_is_recognised_by_its_name(path: str, owned: bool) -> None:
    assert placement.is_pod_cgroup(path, UID) is owned


def test_an_unknown_pod_gets_the_node_shared_pool_in_container_and_pod_cgroup() -> None:
    state = DesiredState(pods=(), default_cpus=CPUSet([0, 2, 3]))
    placed = placement.place(_request(), f"/kubepods/besteffort/pod{UID}/c1", state, LAYOUT)
    assert placed.pool == "node-shared"
    assert placed.container.cpus == CPUSet([0, 2, 3]) and placed.container.cpu_quota is None
    assert placed.pod is not None and placed.pod.path == f"kubepods/besteffort/pod{UID}"


def test_a_container_outside_a_pod_cgroup_leaves_the_parent_alone() -> None:
    state = DesiredState(pods=(), default_cpus=CPUSet([0]))
    placed = placement.place(_request(), "/machine.slice/libpod-c1.scope", state, LAYOUT)
    assert placed.pod is None


def test_without_usable_state_there_is_nothing_to_give() -> None:
    with pytest.raises(placement.PlacementError) as raised:
        placement.place(_request(), f"/kubepods/pod{UID}/c1", DesiredState(pods=(), default_cpus=CPUSet()), LAYOUT)
    assert raised.value.reason == "StateUnavailable"


def _tree() -> recording.RecordingCgroupDriver:
    driver = recording.RecordingCgroupDriver(v1_hierarchy=True)
    for path in (
        "kubepods",
        "kubepods/pod1",
        "kubepods/pod1/sandbox",
        "kubepods/pod1/sandbox/inner",
        "kubepods/pod1/app",
    ):
        driver.add(path, cpus=CPUSet([0, 1, 2, 3]), mems=(0, 1))
    return driver


def test_untracked_descendants_are_narrowed_children_first() -> None:
    driver = _tree()
    targets = [
        CgroupTarget(path="kubepods/pod1", cpus=CPUSet([2, 3]), mems=(1,)),
        CgroupTarget(path="kubepods/pod1/app", cpus=CPUSet([3]), mems=(1,)),
    ]
    assert not reconcile(targets, driver).ok  # the sandbox blocks it (EBUSY in the emulator too)
    report = reconcile(hierarchy.with_untracked_children(targets, driver), driver)
    assert report.ok, report.failures
    assert driver.snapshot("kubepods/pod1/sandbox").cpus == CPUSet([2, 3])
    assert driver.snapshot("kubepods/pod1/sandbox/inner").mems == (1,)


def test_containment_is_a_no_op_without_nested_cpusets() -> None:
    driver = recording.RecordingCgroupDriver(v1_hierarchy=False)
    driver.add("p", cpus=CPUSet([0, 1]))
    driver.add("p/child", cpus=CPUSet([0, 1]))
    targets = [CgroupTarget(path="p", cpus=CPUSet([1]))]
    assert hierarchy.with_untracked_children(targets, driver) == targets
