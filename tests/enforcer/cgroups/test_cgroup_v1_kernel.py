"""The v1 driver, reconcile and the resize plan against the real kernel's cgroup v1 hierarchies.

Every test works only inside groups it creates (``numaguard-test-<pid>-<random>``)
and removes them in a ``finally``; existing groups are never written.  Skipped,
with the reason, where ``/sys/fs/cgroup/{cpuset,cpu,memory}`` are not writable
cgroup v1 hierarchies.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from enforcer.cgroups import driver, errors, v1
from enforcer.cgroups.reconcile import CgroupTarget, reconcile
from enforcer.cgroups.resize import CgroupLimits, LimitsChange, apply_resize_plan, apply_step, plan_resize
from shared.cpuset import CPUSet

pytestmark = pytest.mark.kernel

MOUNT = Path("/sys/fs/cgroup")
_CONTROLLER_MARKERS = {"cpuset": "cpuset.cpus", "cpu": "cpu.cfs_quota_us", "memory": "memory.limit_in_bytes"}


def _unusable(controller: str) -> str | None:
    root = MOUNT / controller
    marker = _CONTROLLER_MARKERS[controller]
    if not (root / marker).is_file():
        return f"{root} is not a cgroup v1 {controller} hierarchy (no {marker})"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable by this user"
    return None


@dataclass
class OwnGroups:
    """Groups this test created, per controller; removed deepest first."""

    name: str
    controllers: tuple[str, ...]
    created: list[Path] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def make(self, relative: str = "") -> str:
        path = f"{self.name}/{relative}".rstrip("/")
        for controller in self.controllers:
            directory = MOUNT / controller / path
            try:
                directory.mkdir()
            except OSError as error:
                pytest.skip(f"cannot create a cgroup under {MOUNT / controller}: {error}")
            self.created.append(directory)
        return path

    def start_idle_process(self) -> subprocess.Popen[bytes]:
        # ``cat`` blocks on its stdin until we close it: an idle task with no timing involved.
        process = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        self.processes.append(process)
        return process

    def cleanup(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()
        for directory in sorted(self.created, key=lambda d: len(d.parts), reverse=True):
            with contextlib.suppress(FileNotFoundError):
                directory.rmdir()


def _groups(controllers: tuple[str, ...]) -> Iterator[OwnGroups]:
    for controller in controllers:
        reason = _unusable(controller)
        if reason is not None:
            pytest.skip(reason)
    groups = OwnGroups(f"numaguard-test-{os.getpid()}-{secrets.token_hex(4)}", controllers)
    try:
        yield groups
    finally:
        groups.cleanup()


@pytest.fixture
def cpuset_groups() -> Iterator[OwnGroups]:
    yield from _groups(("cpuset",))


@pytest.fixture
def all_groups() -> Iterator[OwnGroups]:
    yield from _groups(("cpuset", "cpu", "memory"))


@pytest.fixture
def kernel_driver() -> v1.V1CgroupDriver:
    return v1.V1CgroupDriver.under(MOUNT)


def _root_cpus() -> CPUSet:
    return CPUSet.parse((MOUNT / "cpuset" / "cpuset.effective_cpus").read_text())


def _root_mems() -> tuple[int, ...]:
    return tuple(CPUSet.parse((MOUNT / "cpuset" / "cpuset.effective_mems").read_text()))


def _status(pid: int, key: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{key} not in /proc/{pid}/status")


def _attach(controller: str, path: str, pid: int) -> None:
    (MOUNT / controller / path / "cgroup.procs").write_text(str(pid))


def _two_cpus() -> tuple[int, int]:
    cpus = _root_cpus().sorted()
    if len(cpus) < 2:
        pytest.skip("ordering tests need at least two CPUs in the root cpuset")
    return cpus[0], cpus[1]


def test_kernel_pins_a_task_to_the_cpus_the_v1_driver_programmed(
    cpuset_groups: OwnGroups, kernel_driver: v1.V1CgroupDriver
) -> None:
    group = cpuset_groups.make()
    subset = CPUSet([_root_cpus().sorted()[-1]])
    mems = _root_mems()[:1]

    kernel_driver.write_cpus(group, subset)
    kernel_driver.write_mems(group, mems)
    task = cpuset_groups.start_idle_process()
    _attach("cpuset", group, task.pid)

    assert CPUSet.parse(_status(task.pid, "Cpus_allowed_list")) == subset
    assert tuple(CPUSet.parse(_status(task.pid, "Mems_allowed_list"))) == mems
    assert kernel_driver.read_cpus(group) == subset
    assert kernel_driver.read_mems(group) == mems


def test_kernel_refuses_a_child_cpuset_outside_its_parent_with_a_typed_error(
    cpuset_groups: OwnGroups, kernel_driver: v1.V1CgroupDriver
) -> None:
    first, second = _two_cpus()
    parent = cpuset_groups.make()
    child = cpuset_groups.make("child")
    kernel_driver.write_cpus(parent, CPUSet([first]))

    with pytest.raises(errors.CgroupWriteError) as caught:
        kernel_driver.write_cpus(child, CPUSet([second]))

    assert caught.value.errno == errno.EACCES
    assert caught.value.file.endswith("child/cpuset.cpus")


def _program(kernel: v1.V1CgroupDriver, paths: list[str], cpus: CPUSet, mems: tuple[int, ...]) -> None:
    for path in paths:  # parents first: the kernel requires it
        kernel.write_cpus(path, cpus)
        kernel.write_mems(path, mems)


def test_kernel_accepts_reconcile_shrinking_children_first_and_refuses_the_naive_order(
    all_groups: OwnGroups, kernel_driver: v1.V1CgroupDriver
) -> None:
    first, second = _two_cpus()
    mems = _root_mems()[:1]
    parent = all_groups.make()
    child = all_groups.make("child")
    _program(kernel_driver, [parent, child], CPUSet([first, second]), mems)
    task = all_groups.start_idle_process()
    _attach("cpuset", child, task.pid)
    desired = [CgroupTarget(parent, cpus=CPUSet([second])), CgroupTarget(child, cpus=CPUSet([second]))]

    naive = reconcile(desired, kernel_driver, order="given")
    assert [(f.path, "EBUSY" in f.message) for f in naive.failures] == [(parent, True)]

    safe = reconcile(desired, kernel_driver)
    assert safe.ok
    assert kernel_driver.read_cpus(parent) == CPUSet([second])
    assert CPUSet.parse(_status(task.pid, "Cpus_allowed_list")) == CPUSet([second])


def test_kernel_accepts_reconcile_growing_parents_first_and_moving_through_the_union(
    all_groups: OwnGroups, kernel_driver: v1.V1CgroupDriver
) -> None:
    first, second = _two_cpus()
    mems = _root_mems()[:1]
    parent = all_groups.make()
    child = all_groups.make("child")
    _program(kernel_driver, [parent, child], CPUSet([first]), mems)

    naive = reconcile(
        [CgroupTarget(child, cpus=CPUSet([first, second])), CgroupTarget(parent, cpus=CPUSet([first, second]))],
        kernel_driver,
        order="given",
    )
    assert [(f.path, "EACCES" in f.message) for f in naive.failures] == [(child, True)]
    kernel_driver.write_cpus(parent, CPUSet([first]))  # undo the parent write the naive pass made

    moved = reconcile(
        [CgroupTarget(child, cpus=CPUSet([second])), CgroupTarget(parent, cpus=CPUSet([second]))], kernel_driver
    )
    assert moved.ok
    assert [(w.path, w.value) for w in moved.applied] == [
        (parent, str(CPUSet([first, second]))),
        (child, str(second)),
        (parent, str(second)),
    ]


def test_kernel_round_trips_cfs_quota_and_period_through_the_v1_driver(
    all_groups: OwnGroups, kernel_driver: v1.V1CgroupDriver
) -> None:
    group = all_groups.make()

    for quota in (driver.CPUQuota(50_000, 100_000), driver.CPUQuota(20_000, 50_000), driver.CPUQuota.unlimited(10_000)):
        kernel_driver.write_cpu_quota(group, quota)
        assert kernel_driver.read_cpu_quota(group) == quota
    assert (MOUNT / "cpu" / group / "cpu.cfs_quota_us").read_text().strip() == "-1"


def test_kernel_rounds_memory_limits_down_to_pages_and_reconcile_accepts_that(
    all_groups: OwnGroups, kernel_driver: v1.V1CgroupDriver
) -> None:
    group = all_groups.make()
    assert kernel_driver.read_memory_limit(group) is None
    assert kernel_driver.read_memory_usage(group) >= 0

    first = reconcile([CgroupTarget(group, memory_limit=1_000_000)], kernel_driver)
    again = reconcile([CgroupTarget(group, memory_limit=1_000_000)], kernel_driver)

    assert first.ok
    assert kernel_driver.read_memory_limit(group) == 1_000_000 - 1_000_000 % kernel_driver.page_size
    assert again.in_sync
    kernel_driver.write_memory_limit(group, None)
    assert kernel_driver.read_memory_limit(group) is None


def test_kernel_accepts_the_resize_plan_where_pod_first_is_refused(
    all_groups: OwnGroups, kernel_driver: v1.V1CgroupDriver
) -> None:
    first, second = _two_cpus()
    mems = _root_mems()[:1]
    both = CPUSet([first, second])
    pod = all_groups.make()
    a = all_groups.make("a")
    b = all_groups.make("b")
    _program(kernel_driver, [pod], both, mems)
    _program(kernel_driver, [a], CPUSet([first]), mems)
    _program(kernel_driver, [b], CPUSet([second]), mems)
    kernel_driver.write_cpu_quota(pod, driver.CPUQuota(200_000))
    kernel_driver.write_cpu_quota(a, driver.CPUQuota(100_000))
    kernel_driver.write_cpu_quota(b, driver.CPUQuota(100_000))
    plan = plan_resize(
        LimitsChange(
            pod,
            CgroupLimits(cpus=both, cpu_quota=driver.CPUQuota(200_000)),
            CgroupLimits(cpus=CPUSet([second]), cpu_quota=driver.CPUQuota(80_000)),
        ),
        [
            LimitsChange(
                a,
                CgroupLimits(cpus=CPUSet([first]), cpu_quota=driver.CPUQuota(100_000)),
                CgroupLimits(cpus=CPUSet([second]), cpu_quota=driver.CPUQuota(50_000)),
            ),
            LimitsChange(
                b,
                CgroupLimits(cpus=CPUSet([second]), cpu_quota=driver.CPUQuota(100_000)),
                CgroupLimits(cpus=CPUSet([second]), cpu_quota=driver.CPUQuota(50_000)),
            ),
        ],
    )
    pod_steps = [s for s in plan.steps if s.path == pod]

    # The pod first: its quota would fall below its containers' (EINVAL), its cpus under a's (EBUSY).
    refused = [apply_step(s, kernel_driver) for s in pod_steps]
    assert [r.outcome for r in refused] == ["failed", "failed"]
    assert "EINVAL" in refused[0].detail and "EBUSY" in refused[1].detail

    report = apply_resize_plan(plan, kernel_driver)

    assert report.complete
    assert kernel_driver.read_cpu_quota(pod) == driver.CPUQuota(80_000)
    assert kernel_driver.read_cpus(pod) == CPUSet([second])
    assert kernel_driver.read_cpus(a) == CPUSet([second])
