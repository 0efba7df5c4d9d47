"""cgroup v1 pod level on this machine's real hierarchy: a sandbox child the enforcer never created.

The runtime starts the sandbox (pause) container with a copy of the pod cgroup's
whole cpuset.  Narrowing the pod cgroup then fails with EBUSY unless that child
is narrowed first; growing needs the parent first.  Each test works inside its
own ``numaguard-test-<pid>-<hex>`` group and removes it, also on failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runc_kit import CGROUP_MOUNT, remove_cgroup_tree, unique, unusable

from enforcer.cgroups import hierarchy, v1
from enforcer.cgroups.reconcile import CgroupTarget, reconcile
from shared.cpuset import CPUSet

pytestmark = pytest.mark.kernel


@pytest.fixture
def pod_tree() -> Iterator[tuple[v1.V1CgroupDriver, str]]:
    """``<top>/kubepods/pod<uid>`` with a sandbox child (0-1, not a target) and a container child, all 0-1."""
    reason = unusable()
    if reason is not None:
        pytest.skip(reason)
    top = unique()
    pod = f"{top}/kubepods/podabc"
    try:
        for controller in ("cpuset", "cpu", "memory"):
            for path in (top, f"{top}/kubepods", pod, f"{pod}/sandbox", f"{pod}/sandbox/nested", f"{pod}/app"):
                directory = CGROUP_MOUNT / controller / path
                directory.mkdir()
                if controller == "cpuset":  # a new v1 cpuset starts empty: the runtime copies its parent's
                    (directory / "cpuset.cpus").write_text("0-1")
                    (directory / "cpuset.mems").write_text("0")
        yield v1.V1CgroupDriver.under(CGROUP_MOUNT), pod
    finally:
        remove_cgroup_tree(top)


def _cpus(path: str) -> str:
    return (Path(CGROUP_MOUNT) / "cpuset" / path / "cpuset.cpus").read_text().strip()


def test_narrowing_the_pod_fails_ebusy_without_the_untracked_sandbox(pod_tree: tuple[v1.V1CgroupDriver, str]) -> None:
    driver, pod = pod_tree
    targets = [CgroupTarget(path=pod, cpus=CPUSet([1])), CgroupTarget(path=f"{pod}/app", cpus=CPUSet([1]))]
    report = reconcile(targets, driver)
    assert [f.path for f in report.failures] == [pod]
    assert "EBUSY" in report.failures[0].message
    assert _cpus(pod) == "0-1"


def test_shrink_children_first_grow_parents_first(pod_tree: tuple[v1.V1CgroupDriver, str]) -> None:
    driver, pod = pod_tree
    narrow = [CgroupTarget(path=pod, cpus=CPUSet([1])), CgroupTarget(path=f"{pod}/app", cpus=CPUSet([1]))]
    report = reconcile(hierarchy.with_untracked_children(narrow, driver), driver)
    assert report.ok, report.failures
    assert [_cpus(p) for p in (pod, f"{pod}/app", f"{pod}/sandbox", f"{pod}/sandbox/nested")] == ["1"] * 4
    shrink_order = [w.path for w in report.applied if w.field == "cpus"]
    assert shrink_order.index(f"{pod}/sandbox/nested") < shrink_order.index(f"{pod}/sandbox")
    assert shrink_order.index(f"{pod}/sandbox") < shrink_order.index(pod)
    # a move to the other CPU: the pod grows to the union first, the children move, then the pod narrows
    move = [CgroupTarget(path=pod, cpus=CPUSet([0])), CgroupTarget(path=f"{pod}/app", cpus=CPUSet([0]))]
    report = reconcile(hierarchy.with_untracked_children(move, driver), driver)
    assert report.ok, report.failures
    assert [_cpus(p) for p in (pod, f"{pod}/app")] == ["0", "0"]
    grow = [CgroupTarget(path=pod, cpus=CPUSet([0, 1])), CgroupTarget(path=f"{pod}/app", cpus=CPUSet([0, 1]))]
    report = reconcile(hierarchy.with_untracked_children(grow, driver), driver)
    assert report.ok, report.failures
    assert [w.path for w in report.applied if w.field == "cpus"] == [pod, f"{pod}/app"]


def test_untracked_children_inside_the_new_set_are_left_alone(pod_tree: tuple[v1.V1CgroupDriver, str]) -> None:
    driver, pod = pod_tree
    targets = [CgroupTarget(path=pod, cpus=CPUSet([0, 1]))]
    assert hierarchy.with_untracked_children(targets, driver) == targets
