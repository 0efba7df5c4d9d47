from __future__ import annotations

import errno
from pathlib import Path

import pytest
from cgroup_tree import V2Group, build_v2_tree

from enforcer.cgroups import driver, errors, recording, v2
from enforcer.cgroups.resize import CgroupLimits, LimitsChange, apply_resize_plan, apply_step, plan_resize
from shared.cpuset import CPUSet

Q = driver.CPUQuota
GI = 1 << 30
MI = 1 << 20
POD = "kubepods/burstable/podr"
A = f"{POD}/a"
B = f"{POD}/b"

# The pod grows in memory but gives up CPU time and moves to CPUs 2-5; container a shrinks
# everywhere and moves, container b grows everywhere.
POD_CHANGE = LimitsChange(
    POD,
    old=CgroupLimits(cpus=CPUSet.parse("0-3"), cpu_quota=Q(400_000), memory_limit=2 * GI),
    new=CgroupLimits(cpus=CPUSet.parse("2-5"), cpu_quota=Q(300_000), memory_limit=3 * GI),
)
A_CHANGE = LimitsChange(
    A,
    old=CgroupLimits(cpus=CPUSet.parse("0-1"), cpu_quota=Q(200_000), memory_limit=1 * GI),
    new=CgroupLimits(cpus=CPUSet.parse("2"), cpu_quota=Q(100_000), memory_limit=512 * MI),
)
B_CHANGE = LimitsChange(
    B,
    old=CgroupLimits(cpus=CPUSet.parse("2-3"), cpu_quota=Q(100_000), memory_limit=1 * GI),
    new=CgroupLimits(cpus=CPUSet.parse("2-5"), cpu_quota=Q(200_000), memory_limit=2 * GI),
)

# (resource/stage, path, file, content after the step)
EXPECTED_STEPS = [
    ("memory/pod-increase", POD, "memory.max", str(3 * GI)),
    ("memory/container-decrease", A, "memory.max", str(512 * MI)),
    ("memory/container-increase", B, "memory.max", str(2 * GI)),
    ("cpu/pod-increase", POD, "cpuset.cpus", "0-5"),
    ("cpu/container-decrease", A, "cpu.max", "100000 100000"),
    ("cpu/container-decrease", A, "cpuset.cpus", "2"),
    ("cpu/pod-decrease", POD, "cpu.max", "300000 100000"),
    ("cpu/pod-decrease", POD, "cpuset.cpus", "2-5"),
    ("cpu/container-increase", B, "cpuset.cpus", "2-5"),
    ("cpu/container-increase", B, "cpu.max", "200000 100000"),
]

_FILES = ("cpuset.cpus", "cpu.max", "memory.max")


def _fixture_tree(tmp_path: Path, *, usage_a: int = 100 * MI) -> Path:
    return build_v2_tree(
        tmp_path,
        {
            POD: V2Group(cpus="0-3", cpu_max="400000 100000", memory_max=str(2 * GI)),
            A: V2Group(cpus="0-1", cpu_max="200000 100000", memory_max=str(GI), memory_current=usage_a),
            B: V2Group(cpus="2-3", cpu_max="100000 100000", memory_max=str(GI)),
        },
    )


def _files(root: Path) -> dict[tuple[str, str], str]:
    return {(p, f): (root / p / f).read_text().strip() for p in (POD, A, B) for f in _FILES}


def test_resize_plan_follows_the_kubelet_stage_order_per_resource() -> None:
    plan = plan_resize(POD_CHANGE, [A_CHANGE, B_CHANGE])

    assert [f"{s.resource}/{s.stage}" for s in plan.steps] == [e[0] for e in EXPECTED_STEPS]
    assert [s.path for s in plan.steps] == [e[1] for e in EXPECTED_STEPS]


def test_resize_plan_applied_step_by_step_changes_exactly_one_file_each_time(tmp_path: Path) -> None:
    root = _fixture_tree(tmp_path)
    cgroups = v2.V2CgroupDriver(root, page_size=4096)
    plan = plan_resize(POD_CHANGE, [A_CHANGE, B_CHANGE])

    for step, (label, path, file, content) in zip(plan.steps, EXPECTED_STEPS, strict=True):
        before = _files(root)
        result = apply_step(step, cgroups)
        after = _files(root)

        changed = {key: value for key, value in after.items() if before[key] != value}
        assert result.outcome == "written", label
        assert changed == {(path, file): content}, label


def test_resize_plan_guards_only_memory_decreases() -> None:
    plan = plan_resize(POD_CHANGE, [A_CHANGE, B_CHANGE])

    assert [(s.path, s.field) for s in plan.steps if s.guard_memory_usage] == [(A, "memory_limit")]


def test_resize_plan_holds_a_memory_decrease_while_the_container_uses_more(tmp_path: Path) -> None:
    root = _fixture_tree(tmp_path, usage_a=600 * MI)
    cgroups = v2.V2CgroupDriver(root, page_size=4096)

    report = apply_resize_plan(plan_resize(POD_CHANGE, [A_CHANGE, B_CHANGE]), cgroups)

    held = report.with_outcome("held")
    assert [(r.step.path, r.step.field) for r in held] == [(A, "memory_limit")]
    assert str(600 * MI) in held[0].detail
    assert (root / A / "memory.max").read_text().strip() == str(GI)
    assert len(report.with_outcome("written")) == len(EXPECTED_STEPS) - 1
    assert not report.complete


def test_resize_plan_writes_the_decrease_once_usage_fits(tmp_path: Path) -> None:
    root = _fixture_tree(tmp_path, usage_a=512 * MI)

    report = apply_resize_plan(plan_resize(POD_CHANGE, [A_CHANGE, B_CHANGE]), v2.V2CgroupDriver(root))

    assert report.complete


def test_resize_plan_reports_a_container_not_started_yet_as_pending_and_carries_on() -> None:
    rec = recording.RecordingCgroupDriver()
    rec.add(POD, cpus=CPUSet.parse("0-3"), cpu_quota=Q(400_000), memory_limit=2 * GI)
    rec.add(A, cpus=CPUSet.parse("0-1"), cpu_quota=Q(200_000), memory_limit=GI)

    report = apply_resize_plan(plan_resize(POD_CHANGE, [A_CHANGE, B_CHANGE]), rec)

    assert {r.step.path for r in report.with_outcome("pending")} == {B}
    assert rec.read_cpus(POD) == CPUSet.parse("2-5")
    assert rec.read_cpus(A) == CPUSet.parse("2")


def test_resize_plan_stops_at_the_first_failure_like_the_kubelet() -> None:
    rec = recording.RecordingCgroupDriver()
    rec.add(POD, cpus=CPUSet.parse("0-3"), cpu_quota=Q(400_000), memory_limit=2 * GI)
    rec.add(A, cpus=CPUSet.parse("0-1"), cpu_quota=Q(200_000), memory_limit=GI)
    rec.add(B, cpus=CPUSet.parse("2-3"), cpu_quota=Q(100_000), memory_limit=GI)
    rec.fail_next_write(POD, "cpus", errno.EINVAL)

    report = apply_resize_plan(plan_resize(POD_CHANGE, [A_CHANGE, B_CHANGE]), rec)

    outcomes = [r.outcome for r in report.results]
    assert outcomes == ["written"] * 3 + ["failed"] + ["skipped"] * 6
    assert "EINVAL" in report.results[3].detail
    assert rec.read_cpus(A) == CPUSet.parse("0-1")


def test_resize_plan_keeps_a_strict_v1_tree_consistent_at_every_step() -> None:
    rec = recording.RecordingCgroupDriver(v1_hierarchy=True)
    rec.add(POD, cpus=CPUSet.parse("0-3"), cpu_quota=Q(400_000), memory_limit=2 * GI)
    rec.add(A, cpus=CPUSet.parse("0-1"), cpu_quota=Q(200_000), memory_limit=GI)
    rec.add(B, cpus=CPUSet.parse("2-3"), cpu_quota=Q(100_000), memory_limit=GI)

    report = apply_resize_plan(plan_resize(POD_CHANGE, [A_CHANGE, B_CHANGE]), rec)

    assert report.complete


def test_resize_plan_skips_unchanged_and_unmanaged_fields() -> None:
    same = CgroupLimits(cpus=CPUSet.parse("0-1"), cpu_quota=Q(100_000), memory_limit=GI)

    plan = plan_resize(LimitsChange(POD, old=same, new=same), [LimitsChange(A, old=CgroupLimits(), new=CgroupLimits())])

    assert plan.steps == ()


def test_resize_plan_needs_the_old_value_of_every_field_it_changes() -> None:
    with pytest.raises(errors.InvalidCgroupValue, match="old cpu_quota"):
        plan_resize(LimitsChange(POD, old=CgroupLimits(), new=CgroupLimits(cpu_quota=Q(100_000))), [])


def test_resize_plan_never_plans_an_empty_cpuset() -> None:
    with pytest.raises(errors.InvalidCgroupValue, match="empty cpus"):
        plan_resize(LimitsChange(POD, old=CgroupLimits(cpus=CPUSet.parse("0")), new=CgroupLimits(cpus=CPUSet())), [])


def test_resize_plan_treats_lifting_a_memory_limit_as_an_increase() -> None:
    change = LimitsChange(A, old=CgroupLimits(memory_limit=GI), new=CgroupLimits(memory_limit=None))

    (step,) = plan_resize(LimitsChange(POD, CgroupLimits(), CgroupLimits()), [change]).steps

    assert (step.stage, step.value, step.guard_memory_usage) == ("container-increase", None, False)


def test_resize_plan_moves_mems_with_the_memory_resource() -> None:
    pod = LimitsChange(POD, old=CgroupLimits(mems=(0,)), new=CgroupLimits(mems=(1,)))
    container = LimitsChange(A, old=CgroupLimits(mems=(0,)), new=CgroupLimits(mems=(1,)))

    plan = plan_resize(pod, [container])

    assert [str(s) for s in plan.steps] == [
        f"memory/pod-increase: {POD} mems=0-1",
        f"memory/container-decrease: {A} mems=1",
        f"memory/pod-decrease: {POD} mems=1",
    ]
