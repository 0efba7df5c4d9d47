from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from cgroup_tree import CONTAINER_A, POD, V2Group, build_v2_tree, read

from enforcer.cgroups import driver, errors, v2
from shared.cpuset import CPUSet


def test_v2_reads_what_a_fresh_kernel_tree_shows(v2_driver: v2.V2CgroupDriver) -> None:
    assert v2_driver.read_cpus(POD) == CPUSet.parse("0-7")
    assert v2_driver.read_mems(POD) == (0, 1)
    assert v2_driver.read_cpu_quota(POD) == driver.CPUQuota(None, 100_000)
    assert v2_driver.read_memory_limit(POD) is None
    assert v2_driver.read_memory_usage(POD) == 0


def test_v2_writes_cpuset_files_in_linux_list_syntax(v2_driver: v2.V2CgroupDriver, v2_root: Path) -> None:
    v2_driver.write_cpus(CONTAINER_A, CPUSet([0, 1, 2, 3, 6]))
    v2_driver.write_mems(CONTAINER_A, (1, 0, 1))

    assert read(v2_root, CONTAINER_A, "cpuset.cpus") == "0-3,6"
    assert read(v2_root, CONTAINER_A, "cpuset.mems") == "0-1"
    assert v2_driver.read_cpus(CONTAINER_A) == CPUSet([0, 1, 2, 3, 6])


@pytest.mark.parametrize(
    ("quota", "file_content"),
    [
        (driver.CPUQuota(None, 100_000), "max 100000"),
        (driver.CPUQuota(50_000, 100_000), "50000 100000"),
        (driver.CPUQuota(250_000, 50_000), "250000 50000"),
    ],
    ids=["unlimited keeps the period", "half a cpu", "five cpus with a short period"],
)
def test_v2_writes_cpu_max_as_quota_and_period(
    v2_driver: v2.V2CgroupDriver, v2_root: Path, quota: driver.CPUQuota, file_content: str
) -> None:
    v2_driver.write_cpu_quota(POD, quota)

    assert read(v2_root, POD, "cpu.max") == file_content
    assert v2_driver.read_cpu_quota(POD) == quota


def test_v2_writes_memory_max_in_bytes_and_max_for_unlimited(v2_driver: v2.V2CgroupDriver, v2_root: Path) -> None:
    v2_driver.write_memory_limit(POD, 512 * 1024 * 1024)
    assert read(v2_root, POD, "memory.max") == "536870912"
    assert v2_driver.read_memory_limit(POD) == 536870912

    v2_driver.write_memory_limit(POD, None)
    assert read(v2_root, POD, "memory.max") == "max"
    assert v2_driver.read_memory_limit(POD) is None


def test_v2_reads_memory_current_as_usage(tmp_path: Path) -> None:
    root = build_v2_tree(tmp_path, {"pod": V2Group(memory_current=123456)})

    assert v2.V2CgroupDriver(root).read_memory_usage("pod") == 123456


def test_v2_exists_only_for_directories_under_its_root(v2_driver: v2.V2CgroupDriver) -> None:
    assert v2_driver.exists(POD)
    assert v2_driver.exists("/" + POD)
    assert not v2_driver.exists(f"{POD}/not-started-yet")


def test_v2_write_to_a_missing_cgroup_is_a_typed_missing_error(v2_driver: v2.V2CgroupDriver, v2_root: Path) -> None:
    with pytest.raises(errors.CgroupMissingError) as caught:
        v2_driver.write_cpus(f"{POD}/not-started-yet", CPUSet([1]))

    assert caught.value.file.endswith("not-started-yet/cpuset.cpus")
    assert not (v2_root / POD / "not-started-yet").exists()


def test_v2_never_creates_a_missing_controller_file(v2_driver: v2.V2CgroupDriver, v2_root: Path) -> None:
    (v2_root / POD / "memory.max").unlink()

    with pytest.raises(errors.CgroupWriteError) as caught:
        v2_driver.write_memory_limit(POD, 1 << 30)

    assert not isinstance(caught.value, errors.CgroupMissingError)
    assert caught.value.errno == errno.ENOENT
    assert "memory.max" in str(caught.value)
    assert not (v2_root / POD / "memory.max").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_v2_translates_a_refused_write_into_a_write_error_naming_the_file(
    v2_driver: v2.V2CgroupDriver, v2_root: Path
) -> None:
    (v2_root / POD / "cpuset.cpus").chmod(0o444)

    with pytest.raises(errors.CgroupWriteError, match=r"cpuset\.cpus.*EACCES"):
        v2_driver.write_cpus(POD, CPUSet([1]))


def test_v2_translates_a_write_into_a_directory_into_a_write_error(v2_driver: v2.V2CgroupDriver, v2_root: Path) -> None:
    target = v2_root / POD / "cpuset.cpus"
    target.unlink()
    target.mkdir()

    with pytest.raises(errors.CgroupWriteError, match="EISDIR") as caught:
        v2_driver.write_cpus(POD, CPUSet([1]))

    assert caught.value.value == "1"


@pytest.mark.parametrize(
    ("file", "content", "reader"),
    [
        ("cpu.max", "max", "read_cpu_quota"),
        ("cpu.max", "lots 100000", "read_cpu_quota"),
        ("cpu.max", "50000 5", "read_cpu_quota"),
        ("memory.max", "12k", "read_memory_limit"),
        ("cpuset.cpus", "0-", "read_cpus"),
        ("memory.current", "", "read_memory_usage"),
    ],
    ids=[
        "cpu.max without period",
        "cpu.max non numeric",
        "cpu.max period out of range",
        "memory.max with suffix",
        "cpuset open range",
        "empty memory.current",
    ],
)
def test_v2_reports_content_the_kernel_never_writes_as_a_read_error(
    v2_driver: v2.V2CgroupDriver, v2_root: Path, file: str, content: str, reader: str
) -> None:
    (v2_root / POD / file).write_text(content + "\n")

    with pytest.raises(errors.CgroupReadError, match=file.replace(".", r"\.")):
        getattr(v2_driver, reader)(POD)


def test_v2_read_of_a_missing_cgroup_is_a_read_error_with_enoent(v2_driver: v2.V2CgroupDriver) -> None:
    with pytest.raises(errors.CgroupReadError) as caught:
        v2_driver.read_cpus("kubepods/nope")

    assert caught.value.errno == errno.ENOENT


@pytest.mark.parametrize("path", ["../etc", "kubepods/../../etc", "kubepods/./x", "a/\x00/b"])
def test_v2_refuses_paths_that_could_leave_the_root(v2_driver: v2.V2CgroupDriver, path: str) -> None:
    with pytest.raises(errors.CgroupNameError):
        v2_driver.write_cpus(path, CPUSet([0]))


def test_v2_refuses_a_memory_limit_that_is_not_a_positive_byte_count(v2_driver: v2.V2CgroupDriver) -> None:
    with pytest.raises(errors.InvalidCgroupValue):
        v2_driver.write_memory_limit(POD, 0)
