"""The cgroup v1 driver: one hierarchy per controller, each with its own root.

=================  ======================================================  ==================
field              file (under the controller's root)                       unlimited
=================  ======================================================  ==================
cpus               cpuset: ``cpuset.cpus``                                 --
mems               cpuset: ``cpuset.mems``                                 --
cpu quota          cpu: ``cpu.cfs_quota_us`` + ``cpu.cfs_period_us``       quota ``-1``
memory limit       memory: ``memory.limit_in_bytes``                       ``-1`` (reads back huge)
memory usage       memory: ``memory.usage_in_bytes`` (read only)           --
=================  ======================================================  ==================

v1 is stricter than v2 in two ways the callers must respect (reconcile and the
resize plan do): a child's ``cpuset.cpus``/``cpuset.mems`` must stay a subset of
its parent's (the kernel answers ``EACCES`` for a child outside its parent and
``EBUSY`` for a parent shrinking under a child), and a child's CFS quota/period
ratio may not exceed its parent's (``EINVAL``).

File I/O goes through :mod:`enforcer.cgroups.v2`'s primitives; this module only
knows v1 file names and formats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from enforcer.cgroups import driver, errors, v2
from shared.cpuset import CPUSet

# The kernel shows "no limit" as PAGE_COUNTER_MAX pages (LONG_MAX rounded down to
# the page size: 9223372036854771712 with 4KiB pages).  Any value at or above 2**62
# bytes (4EiB) cannot be a real limit, whatever the page size.
_UNLIMITED_MEMORY_THRESHOLD: Final = 1 << 62
_UNLIMITED_WRITE: Final = "-1"


class V1CgroupDriver:
    """Programs cgroup v1 files; ``cpuset_root``, ``cpu_root`` and ``memory_root`` are the controller mounts."""

    name = "v1"

    def __init__(
        self,
        *,
        cpuset_root: Path | str,
        cpu_root: Path | str,
        memory_root: Path | str,
        page_size: int | None = None,
    ) -> None:
        self.cpuset_root = Path(cpuset_root)
        self.cpu_root = Path(cpu_root)
        self.memory_root = Path(memory_root)
        self.page_size = page_size if page_size is not None else v2.default_page_size()

    @classmethod
    def under(cls, mount_root: Path | str = "/sys/fs/cgroup", *, page_size: int | None = None) -> V1CgroupDriver:
        """The usual layout: ``<mount_root>/{cpuset,cpu,memory}`` (``cpu`` is often a link to ``cpu,cpuacct``)."""
        root = Path(mount_root)
        return cls(cpuset_root=root / "cpuset", cpu_root=root / "cpu", memory_root=root / "memory", page_size=page_size)

    def exists(self, path: str) -> bool:
        return all(v2.cgroup_dir(root, path).is_dir() for root in (self.cpuset_root, self.cpu_root, self.memory_root))

    # -- cpuset -------------------------------------------------------------------
    def read_cpus(self, path: str) -> CPUSet:
        return v2.read_list(v2.cgroup_dir(self.cpuset_root, path) / "cpuset.cpus")

    def write_cpus(self, path: str, cpus: CPUSet) -> None:
        v2.write_file(v2.cgroup_dir(self.cpuset_root, path) / "cpuset.cpus", str(cpus))

    def read_mems(self, path: str) -> tuple[int, ...]:
        return tuple(v2.read_list(v2.cgroup_dir(self.cpuset_root, path) / "cpuset.mems"))

    def write_mems(self, path: str, mems: tuple[int, ...]) -> None:
        file = v2.cgroup_dir(self.cpuset_root, path) / "cpuset.mems"
        v2.write_file(file, driver.format_mems(driver.normalize_mems(mems)))

    # -- cpu ----------------------------------------------------------------------
    def read_cpu_quota(self, path: str) -> driver.CPUQuota:
        directory = v2.cgroup_dir(self.cpu_root, path)
        quota_file = directory / "cpu.cfs_quota_us"
        quota = v2.read_int(quota_file)
        period = v2.read_int(directory / "cpu.cfs_period_us")
        try:
            return driver.CPUQuota(None if quota < 0 else quota, period)
        except errors.InvalidCgroupValue as error:
            raise errors.CgroupReadError(str(quota_file), error.message) from None

    def write_cpu_quota(self, path: str, quota: driver.CPUQuota) -> None:
        directory = v2.cgroup_dir(self.cpu_root, path)
        quota_value = _UNLIMITED_WRITE if quota.quota_us is None else str(quota.quota_us)
        current = self.read_cpu_quota(path)
        if current.period_us == quota.period_us:
            v2.write_file(directory / "cpu.cfs_quota_us", quota_value)
            return
        if period_first(current, quota):
            v2.write_file(directory / "cpu.cfs_period_us", str(quota.period_us))
            v2.write_file(directory / "cpu.cfs_quota_us", quota_value)
        else:
            v2.write_file(directory / "cpu.cfs_quota_us", quota_value)
            v2.write_file(directory / "cpu.cfs_period_us", str(quota.period_us))

    # -- memory -------------------------------------------------------------------
    def read_memory_limit(self, path: str) -> int | None:
        value = v2.read_int(v2.cgroup_dir(self.memory_root, path) / "memory.limit_in_bytes")
        return None if value < 0 or value >= _UNLIMITED_MEMORY_THRESHOLD else value

    def write_memory_limit(self, path: str, limit: int | None) -> None:
        driver.validate_memory_limit(limit)
        file = v2.cgroup_dir(self.memory_root, path) / "memory.limit_in_bytes"
        v2.write_file(file, _UNLIMITED_WRITE if limit is None else str(limit))

    def read_memory_usage(self, path: str) -> int:
        return v2.read_int(v2.cgroup_dir(self.memory_root, path) / "memory.usage_in_bytes")

    # -- hierarchy ----------------------------------------------------------------------
    def children(self, path: str) -> list[str]:
        return v2.child_paths(self.cpuset_root, path)

    @property
    def nested_cpusets(self) -> bool:
        return True


def period_first(current: driver.CPUQuota, new: driver.CPUQuota) -> bool:
    """Order of the two writes when the period changes, so the state in between is always legal.

    v1 accepts an unlimited quota (``-1``) under any parent, and a limited one
    only up to the parent's ratio.  If either intermediate is unlimited, take it.
    Otherwise the two candidate ratios multiply to old*new, so the smaller one is
    at most max(old, new), which the parent already allows.
    """
    if current.quota_us is None:
        return True  # intermediate (unlimited, new period)
    if new.quota_us is None:
        return False  # intermediate (unlimited, old period)
    period_first = driver.CPUQuota(current.quota_us, new.period_us)
    quota_first = driver.CPUQuota(new.quota_us, current.period_us)
    return quota_first.exceeds(period_first)


_check: type[driver.CgroupDriver] = V1CgroupDriver
