from __future__ import annotations

import errno
from pathlib import Path

import pytest
from cgroup_tree import CONTAINER_A, POD, V2Group, build_v2_tree, read
from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.cgroups import driver, errors, recording, v2
from enforcer.cgroups.reconcile import CgroupTarget, Divergence, SkippedField, reconcile
from shared.cpuset import CPUSet

Q = driver.CPUQuota


def _tree(**groups: tuple[str, str]) -> recording.RecordingCgroupDriver:
    """A strict (cgroup v1 rules) recorder holding ``name=(cpus, mems)``; ``__`` in a name is a ``/``."""
    rec = recording.RecordingCgroupDriver()
    for name, (cpus, mems) in groups.items():
        rec.add(name.replace("__", "/"), cpus=CPUSet.parse(cpus), mems=tuple(CPUSet.parse(mems)))
    return rec


def _writes(rec: recording.RecordingCgroupDriver) -> list[str]:
    return [str(w) for w in rec.writes]


def test_reconcile_writes_nothing_when_the_cgroups_already_match() -> None:
    rec = _tree(p=("0-3", "0"), p__c=("2-3", "0"))
    rec.write_cpu_quota("p/c", Q(200_000))
    rec.writes.clear()

    report = reconcile([CgroupTarget("p/c", cpus=CPUSet.parse("2-3"), mems=(0,), cpu_quota=Q(200_000))], rec)

    assert rec.writes == []
    assert report.in_sync and report.ok
    assert report.applied == ()


def test_reconcile_reports_each_divergence_and_repairs_it() -> None:
    rec = _tree(p=("0-7", "0-1"), p__c=("0-7", "0-1"))
    target = CgroupTarget("p/c", cpus=CPUSet.parse("4-5"), mems=(1,), cpu_quota=Q(None), memory_limit=1 << 30)
    rec.write_cpu_quota("p/c", Q(50_000))
    rec.writes.clear()

    report = reconcile([target], rec)

    assert report.divergences == (
        Divergence("p/c", "cpus", expected="4-5", actual="0-7"),
        Divergence("p/c", "mems", expected="1", actual="0-1"),
        Divergence("p/c", "cpu_quota", expected="max 100000", actual="50000 100000"),
        Divergence("p/c", "memory_limit", expected="1073741824", actual="max"),
    )
    assert rec.read_cpus("p/c") == CPUSet.parse("4-5")
    assert rec.read_mems("p/c") == (1,)
    assert rec.read_cpu_quota("p/c") == Q(None)
    assert rec.read_memory_limit("p/c") == 1 << 30
    assert not report.in_sync and report.ok


def test_reconcile_is_idempotent() -> None:
    rec = _tree(p=("0-7", "0-1"), p__c=("0-7", "0-1"))
    desired = [
        CgroupTarget("p", cpus=CPUSet.parse("0-3")),
        CgroupTarget("p/c", cpus=CPUSet.parse("2-3"), cpu_quota=Q(150_000), memory_limit=1_000_000),
    ]
    reconcile(desired, rec)
    rec.writes.clear()

    second = reconcile(desired, rec)

    assert rec.writes == []
    assert second.in_sync


def test_reconcile_compares_memory_limits_at_page_granularity() -> None:
    rec = _tree(g=("0", "0"))
    reconcile([CgroupTarget("g", memory_limit=1_000_001)], rec)  # the kernel keeps 999424
    rec.writes.clear()

    report = reconcile([CgroupTarget("g", memory_limit=1_000_001)], rec)

    assert report.in_sync
    assert rec.writes == []


def test_reconcile_never_writes_an_empty_cpuset_and_says_so() -> None:
    rec = _tree(g=("0-1", "0"))

    report = reconcile([CgroupTarget("g", cpus=CPUSet(), mems=(), cpu_quota=Q(100_000))], rec)

    assert report.skipped == (
        SkippedField("g", "cpus", "an empty cpuset is never written"),
        SkippedField("g", "mems", "an empty cpuset.mems is never written"),
    )
    assert _writes(rec) == ["g cpu_quota=100000 100000"]
    assert rec.read_cpus("g") == CPUSet.parse("0-1")


def test_reconcile_reports_a_missing_cgroup_as_pending_not_as_a_failure() -> None:
    rec = _tree(p=("0-3", "0"))

    report = reconcile(
        [CgroupTarget("p/not-started", cpus=CPUSet.parse("1")), CgroupTarget("p", cpus=CPUSet.parse("0-1"))], rec
    )

    assert report.pending == ("p/not-started",)
    assert report.ok
    assert _writes(rec) == ["p cpus=0-1"]


def test_reconcile_treats_a_cgroup_removed_during_the_pass_as_pending() -> None:
    class Vanishing(recording.RecordingCgroupDriver):
        def write_cpus(self, path: str, cpus: CPUSet) -> None:
            self.remove(path)  # the container exited between the read and the write
            super().write_cpus(path, cpus)

    rec = Vanishing()
    rec.add("g", cpus=CPUSet.parse("0"))

    report = reconcile([CgroupTarget("g", cpus=CPUSet.parse("1"), cpu_quota=Q(100_000))], rec)

    assert report.pending == ("g",)
    assert report.ok
    assert report.applied == ()


def test_reconcile_grows_parents_before_children() -> None:
    rec = _tree(p=("0", "0"), p__c=("0", "0"))

    report = reconcile(
        [CgroupTarget("p/c", cpus=CPUSet.parse("0-3")), CgroupTarget("p", cpus=CPUSet.parse("0-3"))], rec
    )

    assert report.ok
    assert _writes(rec) == ["p cpus=0-3", "p/c cpus=0-3"]


def test_reconcile_shrinks_children_before_parents() -> None:
    rec = _tree(p=("0-3", "0-1"), p__c=("0-3", "0-1"))

    report = reconcile(
        [CgroupTarget("p", cpus=CPUSet.parse("2"), mems=(1,)), CgroupTarget("p/c", cpus=CPUSet.parse("2"), mems=(1,))],
        rec,
    )

    assert report.ok
    assert _writes(rec) == ["p/c cpus=2", "p/c mems=1", "p cpus=2", "p mems=1"]


def test_reconcile_moves_a_parent_to_disjoint_cpus_through_the_union() -> None:
    rec = _tree(p=("0-1", "0"), p__c=("0-1", "0"))

    report = reconcile([CgroupTarget("p", cpus=CPUSet.parse("2-3")), CgroupTarget("p/c", cpus=CPUSet.parse("3"))], rec)

    assert report.ok
    assert _writes(rec) == ["p cpus=0-3", "p/c cpus=3", "p cpus=2-3"]


def test_reconcile_writes_a_leaf_that_gains_and_loses_cpus_once() -> None:
    rec = _tree(p=("0-3", "0"), p__c=("0-1", "0"))

    reconcile([CgroupTarget("p/c", cpus=CPUSet.parse("1-2"))], rec)

    assert _writes(rec) == ["p/c cpus=1-2"]


def test_reconcile_in_given_order_trusts_the_caller_and_the_kernel_refuses() -> None:
    rec = _tree(p=("0-3", "0"), p__c=("0-3", "0"))
    desired = [CgroupTarget("p", cpus=CPUSet.parse("0")), CgroupTarget("p/c", cpus=CPUSet.parse("0"))]

    report = reconcile(desired, rec, order="given")

    assert not report.ok
    assert report.failures[0].path == "p"
    assert "EBUSY" in report.failures[0].message
    assert _writes(rec) == ["p/c cpus=0"]  # the later target still went through


def test_reconcile_decreases_quota_before_shrinking_the_cpuset() -> None:
    rec = _tree(p=("0-3", "0"), p__c=("0-3", "0"))
    rec.write_cpu_quota("p/c", Q(400_000))
    rec.writes.clear()

    reconcile([CgroupTarget("p/c", cpus=CPUSet.parse("0-1"), cpu_quota=Q(200_000))], rec)

    assert _writes(rec) == ["p/c cpu_quota=200000 100000", "p/c cpus=0-1"]


def test_reconcile_grows_the_cpuset_before_increasing_quota() -> None:
    rec = _tree(p=("0-3", "0"), p__c=("0-1", "0"))
    rec.write_cpu_quota("p/c", Q(200_000))
    rec.writes.clear()

    reconcile([CgroupTarget("p/c", cpus=CPUSet.parse("0-3"), cpu_quota=Q(400_000))], rec)

    assert _writes(rec) == ["p/c cpus=0-3", "p/c cpu_quota=400000 100000"]


def test_reconcile_moves_a_leaf_to_fewer_cpus_only_after_its_quota_decrease() -> None:
    rec = _tree(p=("0-3", "0"), p__c=("0-1", "0"))
    rec.write_cpu_quota("p/c", Q(200_000))
    rec.writes.clear()

    reconcile([CgroupTarget("p/c", cpus=CPUSet.parse("3"), cpu_quota=Q(100_000))], rec)

    assert _writes(rec) == ["p/c cpu_quota=100000 100000", "p/c cpus=3"]


def test_reconcile_holds_a_memory_decrease_while_usage_is_above_the_new_limit() -> None:
    rec = _tree(g=("0", "0"))
    rec.write_memory_limit("g", 1 << 30)
    rec.set_memory_usage("g", 600 << 20)
    rec.writes.clear()

    held = reconcile([CgroupTarget("g", memory_limit=512 << 20)], rec)

    assert [(h.path, h.limit, h.usage) for h in held.held] == [("g", 512 << 20, 600 << 20)]
    assert rec.writes == []
    assert rec.read_memory_limit("g") == 1 << 30
    assert held.ok

    rec.set_memory_usage("g", 500 << 20)
    released = reconcile([CgroupTarget("g", memory_limit=512 << 20)], rec)

    assert released.held == ()
    assert rec.read_memory_limit("g") == 512 << 20


def test_reconcile_always_writes_memory_increases_whatever_the_usage() -> None:
    rec = _tree(g=("0", "0"))
    rec.write_memory_limit("g", 1 << 30)
    rec.set_memory_usage("g", 1 << 30)

    report = reconcile([CgroupTarget("g", memory_limit=None)], rec)

    assert report.held == ()
    assert rec.read_memory_limit("g") is None


def test_reconcile_reports_a_refused_write_and_carries_on_with_the_others() -> None:
    rec = _tree(a=("0", "0"), b=("0", "0"))
    rec.fail_next_write("a", "cpus", errno.EINVAL)

    report = reconcile([CgroupTarget("a", cpus=CPUSet.parse("1")), CgroupTarget("b", cpus=CPUSet.parse("1"))], rec)

    assert not report.ok
    assert [(f.path, f.field, f.value) for f in report.failures] == [("a", "cpus", "1")]
    assert "EINVAL" in report.failures[0].message
    assert _writes(rec) == ["b cpus=1"]


def test_reconcile_refuses_a_desired_state_naming_a_cgroup_twice() -> None:
    with pytest.raises(errors.InvalidCgroupValue):
        reconcile([CgroupTarget("g"), CgroupTarget("/g/")], _tree(g=("0", "0")))


def test_reconcile_refuses_to_target_the_root_cgroup() -> None:
    with pytest.raises(errors.CgroupNameError):
        CgroupTarget("/", cpus=CPUSet([0]))


def test_cgroup_target_accepts_the_quota_as_a_plain_tuple() -> None:
    target = CgroupTarget("g", cpu_quota=(50_000, 100_000))  # type: ignore[arg-type]

    assert target.cpu_quota == Q(50_000, 100_000)


def test_reconcile_programs_a_v2_fixture_tree(tmp_path: Path) -> None:
    root = build_v2_tree(
        tmp_path, {POD: V2Group(cpus="0-7", mems="0-1"), CONTAINER_A: V2Group(cpus="0-7", mems="0-1", memory_current=1)}
    )
    driver_v2 = v2.V2CgroupDriver(root, page_size=4096)
    desired = [
        CgroupTarget(POD, cpus=CPUSet.parse("0-3"), cpu_quota=Q(None)),
        CgroupTarget(CONTAINER_A, cpus=CPUSet.parse("2-3"), mems=(0,), cpu_quota=Q(None), memory_limit=256 << 20),
        CgroupTarget(f"{POD}/bbb", cpus=CPUSet.parse("0-1")),
    ]

    report = reconcile(desired, driver_v2)

    assert report.ok
    assert report.pending == (f"{POD}/bbb",)
    assert read(root, CONTAINER_A, "cpuset.cpus") == "2-3"
    assert read(root, CONTAINER_A, "cpuset.mems") == "0"
    assert read(root, CONTAINER_A, "cpu.max") == "max 100000"
    assert read(root, CONTAINER_A, "memory.max") == str(256 << 20)
    assert read(root, POD, "cpuset.cpus") == "0-3"
    assert reconcile(desired, driver_v2).in_sync


# -- property: on a strict v1 tree, any consistent desired state is reachable from any consistent one --

_CPUS = 8


@st.composite
def _consistent_tree(draw: st.DrawFn) -> dict[str, tuple[int, int]]:
    """kubepods -> 2 pods -> 2 containers each; every child's cpus/mems within its parent's."""

    def subset(parent: int) -> int:
        bits = [b for b in range(_CPUS) if parent >> b & 1]
        chosen = draw(st.lists(st.sampled_from(bits), min_size=1, unique=True))
        return sum(1 << b for b in chosen)

    tree: dict[str, tuple[int, int]] = {}
    root_cpus = draw(st.integers(1, (1 << _CPUS) - 1))
    root_mems = draw(st.integers(1, 3))
    tree["kubepods"] = (root_cpus, root_mems)
    for pod in ("kubepods/p1", "kubepods/p2"):
        tree[pod] = (subset(root_cpus), subset(root_mems))
        for container in ("a", "b"):
            tree[f"{pod}/{container}"] = (subset(tree[pod][0]), subset(tree[pod][1]))
    return tree


_TREES = {"before": _consistent_tree(), "after": _consistent_tree(), "shuffle": st.randoms(use_true_random=False)}


@settings(max_examples=50)
@given(**_TREES)
def test_reconcile_in_hierarchy_order_never_trips_cgroup_v1_rules(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], shuffle: object
) -> None:
    _reconcile_in_hierarchy_order(before, after, shuffle)


@pytest.mark.slow
@settings(max_examples=500)
@given(**_TREES)
def test_reconcile_in_hierarchy_order_never_trips_cgroup_v1_rules_thoroughly(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], shuffle: object
) -> None:
    _reconcile_in_hierarchy_order(before, after, shuffle)


def _reconcile_in_hierarchy_order(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], shuffle: object
) -> None:
    rec = recording.RecordingCgroupDriver(v1_hierarchy=True)
    for path, (cpus, mems) in before.items():
        rec.add(path, cpus=CPUSet.from_mask(cpus), mems=tuple(CPUSet.from_mask(mems)))
    desired = [
        CgroupTarget(path, cpus=CPUSet.from_mask(cpus), mems=tuple(CPUSet.from_mask(mems)))
        for path, (cpus, mems) in after.items()
    ]
    shuffle.shuffle(desired)  # type: ignore[attr-defined]

    report = reconcile(desired, rec)

    assert report.failures == ()
    for path, (cpus, mems) in after.items():
        assert rec.read_cpus(path).mask == cpus
        assert CPUSet(rec.read_mems(path)).mask == mems
    assert reconcile(desired, rec).applied == ()
