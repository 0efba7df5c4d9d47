from __future__ import annotations

from pathlib import Path

import pytest
from cgroup_tree import CONTAINER_A, POD, V1Group, build_v1_tree, read

from enforcer.cgroups import driver, errors, v1
from shared.cpuset import CPUSet


def test_v1_reads_each_field_from_its_controller_hierarchy(v1_driver: v1.V1CgroupDriver) -> None:
    assert v1_driver.read_cpus(POD) == CPUSet.parse("0-7")
    assert v1_driver.read_mems(POD) == (0, 1)
    assert v1_driver.read_cpu_quota(POD) == driver.CPUQuota(None, 100_000)
    assert v1_driver.read_memory_limit(POD) is None
    assert v1_driver.read_memory_usage(POD) == 0


def test_v1_writes_cpusets_under_the_cpuset_controller(v1_driver: v1.V1CgroupDriver, v1_mount: Path) -> None:
    v1_driver.write_cpus(CONTAINER_A, CPUSet([2, 3]))
    v1_driver.write_mems(CONTAINER_A, (1,))

    assert read(v1_mount / "cpuset", CONTAINER_A, "cpuset.cpus") == "2-3"
    assert read(v1_mount / "cpuset", CONTAINER_A, "cpuset.mems") == "1"


def test_v1_writes_quota_and_minus_one_for_unlimited(v1_driver: v1.V1CgroupDriver, v1_mount: Path) -> None:
    v1_driver.write_cpu_quota(POD, driver.CPUQuota(150_000, 100_000))
    assert read(v1_mount / "cpu", POD, "cpu.cfs_quota_us") == "150000"
    assert read(v1_mount / "cpu", POD, "cpu.cfs_period_us") == "100000"

    v1_driver.write_cpu_quota(POD, driver.CPUQuota.unlimited())
    assert read(v1_mount / "cpu", POD, "cpu.cfs_quota_us") == "-1"
    assert v1_driver.read_cpu_quota(POD) == driver.CPUQuota(None, 100_000)


def test_v1_writes_a_new_period_too(v1_driver: v1.V1CgroupDriver, v1_mount: Path) -> None:
    v1_driver.write_cpu_quota(POD, driver.CPUQuota(25_000, 50_000))

    assert v1_driver.read_cpu_quota(POD) == driver.CPUQuota(25_000, 50_000)
    assert read(v1_mount / "cpu", POD, "cpu.cfs_period_us") == "50000"


def test_v1_memory_limit_round_trips_and_unlimited_reads_back_as_none(
    v1_driver: v1.V1CgroupDriver, v1_mount: Path
) -> None:
    v1_driver.write_memory_limit(POD, 1 << 30)
    assert read(v1_mount / "memory", POD, "memory.limit_in_bytes") == str(1 << 30)
    assert v1_driver.read_memory_limit(POD) == 1 << 30

    v1_driver.write_memory_limit(POD, None)
    assert read(v1_mount / "memory", POD, "memory.limit_in_bytes") == "-1"
    assert v1_driver.read_memory_limit(POD) is None


@pytest.mark.parametrize("shown", [9223372036854771712, 9223372036854710272, -1])
def test_v1_reads_the_kernels_no_limit_values_as_unlimited(tmp_path: Path, shown: int) -> None:
    mount = build_v1_tree(tmp_path, {"g": V1Group(limit_in_bytes=shown)})

    assert v1.V1CgroupDriver.under(mount).read_memory_limit("g") is None


def test_v1_reads_usage_in_bytes(tmp_path: Path) -> None:
    mount = build_v1_tree(tmp_path, {"g": V1Group(usage_in_bytes=4096 * 7)})

    assert v1.V1CgroupDriver.under(mount).read_memory_usage("g") == 4096 * 7


def test_v1_cgroup_exists_only_when_every_controller_has_it(v1_driver: v1.V1CgroupDriver, v1_mount: Path) -> None:
    assert v1_driver.exists(POD)
    (v1_mount / "memory" / CONTAINER_A / "memory.limit_in_bytes").unlink()
    (v1_mount / "memory" / CONTAINER_A / "memory.usage_in_bytes").unlink()
    (v1_mount / "memory" / CONTAINER_A / "memory.soft_limit_in_bytes").unlink()
    (v1_mount / "memory" / CONTAINER_A / "cgroup.procs").unlink()
    (v1_mount / "memory" / CONTAINER_A).rmdir()

    assert not v1_driver.exists(CONTAINER_A)


def test_v1_write_to_a_missing_cgroup_is_a_missing_error(v1_driver: v1.V1CgroupDriver) -> None:
    with pytest.raises(errors.CgroupMissingError):
        v1_driver.write_cpus(f"{POD}/later", CPUSet([1]))


@pytest.mark.parametrize(
    ("old", "new", "period_first"),
    [
        (driver.CPUQuota(50_000, 100_000), driver.CPUQuota(20_000, 50_000), False),
        (driver.CPUQuota(50_000, 100_000), driver.CPUQuota(100_000, 200_000), True),
        (driver.CPUQuota(50_000, 100_000), driver.CPUQuota(10_000, 10_000), False),
        (driver.CPUQuota(200_000, 100_000), driver.CPUQuota(150_000, 200_000), True),
        (driver.CPUQuota(None, 100_000), driver.CPUQuota(10_000, 10_000), True),
        (driver.CPUQuota(50_000, 100_000), driver.CPUQuota(None, 10_000), False),
    ],
    ids=[
        "shrinking both: quota first passes 0.2 instead of 1.0",
        "growing both at one ratio: period first passes 0.25 instead of 1.0",
        "ratio up with a shorter period: quota first passes 0.1 instead of 5.0",
        "ratio down with a longer period: period first passes 1.0 instead of 1.5",
        "from unlimited: period first keeps it unlimited in between",
        "to unlimited: quota first makes it unlimited at once",
    ],
)
def test_v1_orders_quota_and_period_writes_so_the_state_in_between_is_always_legal(
    old: driver.CPUQuota, new: driver.CPUQuota, period_first: bool
) -> None:
    assert v1.period_first(old, new) is period_first


@pytest.mark.parametrize(
    ("old", "new"),
    [((50_000, 100_000), (20_000, 50_000)), ((50_000, 100_000), (100_000, 200_000)), ((-1, 100_000), (10_000, 10_000))],
)
def test_v1_quota_with_a_new_period_ends_with_both_files_written(
    tmp_path: Path, old: tuple[int, int], new: tuple[int, int]
) -> None:
    mount = build_v1_tree(tmp_path, {"g": V1Group(cfs_quota_us=old[0], cfs_period_us=old[1])})
    quota = driver.CPUQuota(new[0], new[1])

    v1.V1CgroupDriver.under(mount).write_cpu_quota("g", quota)

    assert read(mount / "cpu", "g", "cpu.cfs_quota_us") == str(new[0])
    assert read(mount / "cpu", "g", "cpu.cfs_period_us") == str(new[1])
