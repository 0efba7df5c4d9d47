"""The seam between the enforcer and cgroupfs: the ``CgroupDriver`` Protocol and its value types.

Everything above this seam (reconcile, the resize plan, the service) speaks in
values: a :class:`~shared.cpuset.CPUSet` for ``cpuset.cpus``, a sorted tuple of
NUMA node ids for ``cpuset.mems``, a :class:`CPUQuota`, and a memory limit in
bytes where ``None`` means unlimited.  Below it, :mod:`enforcer.cgroups.v2` and
:mod:`enforcer.cgroups.v1` turn those into the kernel's file formats, and
:mod:`enforcer.cgroups.recording` keeps them in memory (tests, dry-run).

A cgroup *path* is relative to the driver's root(s) and uses the kubelet's
cgroupfs spelling (``kubepods/burstable/pod<uid>/<id>``; a leading ``/`` is
accepted and ignored).  This module does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol

from enforcer.cgroups import errors
from shared.cpuset import CPUSet

CgroupField = Literal["cpus", "mems", "cpu_quota", "memory_limit"]
"""The four things the enforcer programs; reports and recordings name fields with these."""

DEFAULT_CPU_PERIOD_US: Final = 100_000
"""The kubelet's default ``cpuCFSQuotaPeriod`` (100ms)."""

# The kernel's bounds for cfs_period_us / cpu.max (kernel/sched/core.c: 1ms..1s;
# quota at least 1ms).  Checked here so a bad value fails with a clear message
# instead of a bare EINVAL from the kernel.
MIN_CPU_PERIOD_US: Final = 1_000
MAX_CPU_PERIOD_US: Final = 1_000_000
MIN_CPU_QUOTA_US: Final = 1_000


@dataclass(frozen=True, slots=True)
class CPUQuota:
    """CFS bandwidth: ``quota_us`` per ``period_us``; ``quota_us=None`` is unlimited.

    Unlimited still carries a period because cgroup v2 writes ``"max <period>"``
    (the kubelet keeps the period when it lifts the quota of exclusive containers).
    """

    quota_us: int | None
    period_us: int = DEFAULT_CPU_PERIOD_US

    def __post_init__(self) -> None:
        if not MIN_CPU_PERIOD_US <= self.period_us <= MAX_CPU_PERIOD_US:
            raise errors.InvalidCgroupValue(
                f"cpu period {self.period_us}us is outside the kernel's range "
                f"{MIN_CPU_PERIOD_US}..{MAX_CPU_PERIOD_US}us"
            )
        if self.quota_us is not None and self.quota_us < MIN_CPU_QUOTA_US:
            raise errors.InvalidCgroupValue(
                f"cpu quota {self.quota_us}us is below the kernel's minimum of {MIN_CPU_QUOTA_US}us"
            )

    @classmethod
    def unlimited(cls, period_us: int = DEFAULT_CPU_PERIOD_US) -> CPUQuota:
        return cls(None, period_us)

    def exceeds(self, other: CPUQuota) -> bool:
        """Whether this quota grants a larger share of a CPU than ``other`` (unlimited is infinite).

        Compares quota/period ratios by cross-multiplication, so integers stay exact.
        """
        if self.quota_us is None:
            return other.quota_us is not None
        if other.quota_us is None:
            return False
        return self.quota_us * other.period_us > other.quota_us * self.period_us

    def __str__(self) -> str:
        quota = "max" if self.quota_us is None else str(self.quota_us)
        return f"{quota} {self.period_us}"


def normalize_mems(mems: tuple[int, ...] | list[int] | CPUSet) -> tuple[int, ...]:
    """Sorted, de-duplicated NUMA node ids; the one spelling of ``cpuset.mems`` above the seam."""
    nodes = tuple(sorted(set(mems)))
    for node in nodes:
        if not isinstance(node, int) or isinstance(node, bool) or node < 0:
            raise errors.InvalidCgroupValue(f"NUMA node ids are non-negative integers, got {node!r}")
    return nodes


def format_mems(mems: tuple[int, ...]) -> str:
    """Linux list syntax (``"0-1,3"``), the format ``cpuset.mems`` reads and writes."""
    return str(CPUSet(mems))


def validate_memory_limit(limit: int | None) -> None:
    if limit is None:
        return
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        raise errors.InvalidCgroupValue(f"a memory limit is a positive number of bytes or None, got {limit!r}")


class CgroupDriver(Protocol):
    """Reads and writes the cgroup files the enforcer owns.

    Every ``write_*`` is idempotent: writing the value a file already holds is
    harmless, which is what lets reconcile repeat itself after a crash.  Errors
    are :class:`~enforcer.cgroups.errors.CgroupReadError` /
    :class:`~enforcer.cgroups.errors.CgroupWriteError` naming the file; a
    missing cgroup directory on write is
    :class:`~enforcer.cgroups.errors.CgroupMissingError`.
    """

    name: str
    """``"v1"``, ``"v2"`` or ``"recording"``: for logs and the enforcer API."""

    page_size: int
    """The kernel stores memory limits in pages (rounded down); compare limits at this granularity."""

    def exists(self, path: str) -> bool:
        """Whether the cgroup exists (under every controller the driver manages)."""
        ...

    def read_cpus(self, path: str) -> CPUSet: ...

    def write_cpus(self, path: str, cpus: CPUSet) -> None: ...

    def read_mems(self, path: str) -> tuple[int, ...]: ...

    def write_mems(self, path: str, mems: tuple[int, ...]) -> None: ...

    def read_cpu_quota(self, path: str) -> CPUQuota: ...

    def write_cpu_quota(self, path: str, quota: CPUQuota) -> None: ...

    def read_memory_limit(self, path: str) -> int | None:
        """Bytes, or ``None`` when unlimited."""
        ...

    def write_memory_limit(self, path: str, limit: int | None) -> None: ...

    def read_memory_usage(self, path: str) -> int:
        """Current usage in bytes (``memory.current`` / ``memory.usage_in_bytes``): the safe-decrease guard."""
        ...

    def children(self, path: str) -> list[str]:
        """Paths of the direct child cgroups of ``path`` (in its cpuset hierarchy on v1), sorted; [] if none."""
        ...

    @property
    def nested_cpusets(self) -> bool:
        """Whether a child's cpuset must stay within its parent's (cgroup v1, or the recorder emulating it)."""
        ...


def memory_limit_matches(desired: int | None, actual: int | None, page_size: int) -> bool:
    """Whether ``actual`` is what the kernel keeps after ``desired`` was written (rounded down to pages)."""
    if desired is None or actual is None:
        return desired is None and actual is None
    return actual == desired - desired % page_size


FieldValue = CPUSet | tuple[int, ...] | CPUQuota | int | None
"""A value of one :data:`CgroupField`: cpus, mems, quota, or a memory limit (``None`` = unlimited)."""


def format_value(field: CgroupField, value: FieldValue) -> str:
    """The value as its cgroup file would show it (``"0-3"``, ``"0,1"``, ``"50000 100000"``, ``"max"``)."""
    if field == "mems" and isinstance(value, tuple):
        return format_mems(value)
    if value is None:
        return "max"
    return str(value)


def read_field(driver: CgroupDriver, path: str, field: CgroupField) -> FieldValue:
    if field == "cpus":
        return driver.read_cpus(path)
    if field == "mems":
        return driver.read_mems(path)
    if field == "cpu_quota":
        return driver.read_cpu_quota(path)
    return driver.read_memory_limit(path)


def write_field(driver: CgroupDriver, path: str, field: CgroupField, value: FieldValue) -> None:
    """Dispatch one write to the driver method for ``field`` (the value's type must match the field)."""
    if field == "cpus" and isinstance(value, CPUSet):
        driver.write_cpus(path, value)
    elif field == "mems" and isinstance(value, tuple):
        driver.write_mems(path, value)
    elif field == "cpu_quota" and isinstance(value, CPUQuota):
        driver.write_cpu_quota(path, value)
    elif field == "memory_limit" and (value is None or isinstance(value, int)) and not isinstance(value, bool):
        driver.write_memory_limit(path, value)
    else:
        raise errors.InvalidCgroupValue(f"{value!r} is not a value for cgroup field {field}")
