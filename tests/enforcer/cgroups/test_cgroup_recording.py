from __future__ import annotations

import errno
import logging

import pytest

from enforcer.cgroups import driver, errors, recording
from shared.cpuset import CPUSet


def test_recording_driver_records_every_write_in_order() -> None:
    rec = recording.RecordingCgroupDriver()
    rec.add("kubepods", cpus=CPUSet.parse("0-7"), mems=(0,))
    rec.add("kubepods/pod1", cpus=CPUSet.parse("0-7"), mems=(0,))

    rec.write_cpus("kubepods/pod1", CPUSet.parse("2-3"))
    rec.write_cpu_quota("/kubepods/pod1/", driver.CPUQuota(200_000))
    rec.write_memory_limit("kubepods/pod1", None)

    assert [str(w) for w in rec.writes] == [
        "kubepods/pod1 cpus=2-3",
        "kubepods/pod1 cpu_quota=200000 100000",
        "kubepods/pod1 memory_limit=max",
    ]
    assert rec.read_cpus("kubepods/pod1") == CPUSet.parse("2-3")


def test_recording_driver_rounds_memory_limits_down_to_pages_like_the_kernel() -> None:
    rec = recording.RecordingCgroupDriver(page_size=4096)
    rec.add("g")

    rec.write_memory_limit("g", 1_000_000)

    assert rec.read_memory_limit("g") == 999_424
    assert rec.writes[-1].value == 1_000_000


def test_recording_driver_refuses_a_child_cpuset_outside_its_parent_like_cgroup_v1() -> None:
    rec = recording.RecordingCgroupDriver()
    rec.add("p", cpus=CPUSet.parse("0-1"))
    rec.add("p/c", cpus=CPUSet.parse("0"))

    with pytest.raises(errors.CgroupWriteError) as caught:
        rec.write_cpus("p/c", CPUSet.parse("2"))

    assert caught.value.errno == errno.EACCES
    assert rec.writes == []


def test_recording_driver_refuses_a_parent_shrinking_under_its_child_like_cgroup_v1() -> None:
    rec = recording.RecordingCgroupDriver()
    rec.add("p", mems=(0, 1))
    rec.add("p/c", mems=(1,))

    with pytest.raises(errors.CgroupWriteError) as caught:
        rec.write_mems("p", (0,))

    assert caught.value.errno == errno.EBUSY


def test_recording_driver_without_v1_rules_accepts_any_cpuset() -> None:
    rec = recording.RecordingCgroupDriver(v1_hierarchy=False)
    rec.add("p", cpus=CPUSet.parse("0"))
    rec.add("p/c", cpus=CPUSet.parse("0"))

    rec.write_cpus("p/c", CPUSet.parse("5"))

    assert rec.read_cpus("p/c") == CPUSet.parse("5")


def test_recording_driver_knows_only_added_cgroups_unless_auto_create() -> None:
    strict = recording.RecordingCgroupDriver()
    assert not strict.exists("kubepods/pod1")
    with pytest.raises(errors.CgroupMissingError):
        strict.write_cpus("kubepods/pod1", CPUSet([1]))
    with pytest.raises(errors.CgroupReadError):
        strict.read_cpus("kubepods/pod1")

    dry_run = recording.RecordingCgroupDriver(auto_create=True)
    assert dry_run.exists("kubepods/pod1")
    assert dry_run.read_cpu_quota("kubepods/pod1") == driver.CPUQuota.unlimited()
    dry_run.write_cpus("kubepods/pod1", CPUSet([1]))
    assert dry_run.paths() == ["kubepods/pod1"]


def test_recording_driver_injected_failure_fails_once_and_names_the_field() -> None:
    rec = recording.RecordingCgroupDriver()
    rec.add("g")
    rec.fail_next_write("g", "memory_limit", errno.EBUSY)

    with pytest.raises(errors.CgroupWriteError, match="EBUSY") as caught:
        rec.write_memory_limit("g", 1 << 20)
    rec.write_memory_limit("g", 1 << 20)

    assert "memory_limit" in caught.value.file
    assert [w.field for w in rec.writes] == ["memory_limit"]


def test_recording_driver_in_dry_run_logs_each_write(caplog: pytest.LogCaptureFixture) -> None:
    rec = recording.RecordingCgroupDriver(auto_create=True, log_writes=True)

    with caplog.at_level(logging.INFO, logger="enforcer.cgroups.recording"):
        rec.write_mems("kubepods/pod1", (1, 0))

    assert [r.getMessage() for r in caplog.records] == ["cgroup write (dry run)"]
    assert caplog.records[0].__dict__["value"] == "kubepods/pod1 mems=0-1"


def test_recording_driver_snapshot_is_a_copy() -> None:
    rec = recording.RecordingCgroupDriver()
    rec.add("g", memory_usage=10)

    snapshot = rec.snapshot("g")
    rec.set_memory_usage("g", 20)

    assert snapshot.memory_usage == 10
    assert rec.read_memory_usage("g") == 20


def test_recording_driver_in_dry_run_does_not_treat_unknown_parents_as_empty() -> None:
    rec = recording.RecordingCgroupDriver(auto_create=True)
    rec.read_memory_limit("kubepods/pod1")  # auto-creates the pod with an unknown (empty) cpuset

    rec.write_cpus("kubepods/pod1/c", CPUSet.parse("3"))

    assert rec.read_cpus("kubepods/pod1/c") == CPUSet.parse("3")
