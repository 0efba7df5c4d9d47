"""``RecordingCgroupDriver``: an in-memory cgroup tree that records every write, in order.

Used by tests (a fake, not a mock: it keeps state, so a read returns the last
write) and by the enforcer's dry-run mode, where it logs each write instead of
touching the host.  It emulates the kernel where the emulation keeps callers
honest:

* memory limits are stored rounded down to ``page_size``, as the kernel does;
* with ``v1_hierarchy=True``, cpuset writes obey cgroup v1's rules: a child's
  cpus/mems must stay within its parent's (``EACCES``) and a parent may not
  shrink under a child (``EBUSY``).  Only cgroups the recorder knows take part.

``auto_create=True`` (dry-run) makes every path exist on first use with
kernel-like defaults; otherwise only paths added with :meth:`add` exist.  The
v1 rules default to on for explicit trees and off with ``auto_create``, where
an auto-created parent's empty cpuset means "unknown", not "no CPUs".
Must not: touch the filesystem.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, field, replace

from enforcer.cgroups import driver, errors
from shared.cpuset import EMPTY, CPUSet

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CgroupWrite:
    """One write as the driver received it (memory limits before page rounding)."""

    path: str
    field: driver.CgroupField
    value: driver.FieldValue

    def __str__(self) -> str:
        return f"{self.path} {self.field}={driver.format_value(self.field, self.value)}"


@dataclass(slots=True)
class RecordedCgroup:
    """What the recorder holds for one cgroup; defaults are those of a fresh v2 cgroup."""

    cpus: CPUSet = EMPTY
    mems: tuple[int, ...] = ()
    cpu_quota: driver.CPUQuota = field(default_factory=driver.CPUQuota.unlimited)
    memory_limit: int | None = None
    memory_usage: int = 0


def _key(path: str) -> str:
    return "/".join(p for p in path.split("/") if p)


class RecordingCgroupDriver:
    """In-memory :class:`~enforcer.cgroups.driver.CgroupDriver`; ``writes`` lists every accepted write."""

    name = "recording"

    def __init__(
        self,
        *,
        page_size: int = 4096,
        v1_hierarchy: bool | None = None,
        auto_create: bool = False,
        log_writes: bool = False,
    ) -> None:
        self.page_size = page_size
        self.v1_hierarchy = (not auto_create) if v1_hierarchy is None else v1_hierarchy
        self.auto_create = auto_create
        self.log_writes = log_writes
        self.writes: list[CgroupWrite] = []
        self._groups: dict[str, RecordedCgroup] = {}
        self._failures: dict[tuple[str, driver.CgroupField], int] = {}

    # -- test and dry-run set-up ----------------------------------------------------
    def add(
        self,
        path: str,
        *,
        cpus: CPUSet = EMPTY,
        mems: tuple[int, ...] = (),
        cpu_quota: driver.CPUQuota | None = None,
        memory_limit: int | None = None,
        memory_usage: int = 0,
    ) -> None:
        """Create (or replace) a cgroup as if the runtime had made it; not recorded as a write."""
        self._groups[_key(path)] = RecordedCgroup(
            cpus=cpus,
            mems=driver.normalize_mems(mems),
            cpu_quota=cpu_quota if cpu_quota is not None else driver.CPUQuota.unlimited(),
            memory_limit=memory_limit,
            memory_usage=memory_usage,
        )

    def remove(self, path: str) -> None:
        self._groups.pop(_key(path), None)

    def set_memory_usage(self, path: str, usage: int) -> None:
        self._group(path, for_file="memory.current").memory_usage = usage

    def fail_next_write(self, path: str, field_name: driver.CgroupField, error_number: int = errno.EIO) -> None:
        """Make the next write of ``field_name`` on ``path`` fail with ``error_number`` (then succeed again)."""
        self._failures[(_key(path), field_name)] = error_number

    def snapshot(self, path: str) -> RecordedCgroup:
        """A copy of what the recorder holds for ``path``."""
        return replace(self._group(path, for_file="*"))

    def paths(self) -> list[str]:
        return sorted(self._groups)

    # -- CgroupDriver -----------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return self.auto_create or _key(path) in self._groups

    def read_cpus(self, path: str) -> CPUSet:
        return self._group(path, for_file="cpuset.cpus").cpus

    def write_cpus(self, path: str, cpus: CPUSet) -> None:
        group = self._group_for_write(path, "cpus", str(cpus))
        self._check_hierarchy(path, "cpus", cpus.mask, str(cpus))
        group.cpus = cpus
        self._record(path, "cpus", cpus)

    def read_mems(self, path: str) -> tuple[int, ...]:
        return self._group(path, for_file="cpuset.mems").mems

    def write_mems(self, path: str, mems: tuple[int, ...]) -> None:
        nodes = driver.normalize_mems(mems)
        text = driver.format_mems(nodes)
        group = self._group_for_write(path, "mems", text)
        self._check_hierarchy(path, "mems", CPUSet(nodes).mask, text)
        group.mems = nodes
        self._record(path, "mems", nodes)

    def read_cpu_quota(self, path: str) -> driver.CPUQuota:
        return self._group(path, for_file="cpu.max").cpu_quota

    def write_cpu_quota(self, path: str, quota: driver.CPUQuota) -> None:
        group = self._group_for_write(path, "cpu_quota", str(quota))
        group.cpu_quota = quota
        self._record(path, "cpu_quota", quota)

    def read_memory_limit(self, path: str) -> int | None:
        return self._group(path, for_file="memory.max").memory_limit

    def write_memory_limit(self, path: str, limit: int | None) -> None:
        driver.validate_memory_limit(limit)
        group = self._group_for_write(path, "memory_limit", "max" if limit is None else str(limit))
        group.memory_limit = None if limit is None else limit - limit % self.page_size
        self._record(path, "memory_limit", limit)

    def read_memory_usage(self, path: str) -> int:
        return self._group(path, for_file="memory.current").memory_usage

    def children(self, path: str) -> list[str]:
        prefix = _key(path) + "/"
        return sorted(k for k in self._groups if k.startswith(prefix) and "/" not in k[len(prefix) :])

    @property
    def nested_cpusets(self) -> bool:
        return self.v1_hierarchy

    # -- internals ----------------------------------------------------------------------
    def _group(self, path: str, *, for_file: str) -> RecordedCgroup:
        key = _key(path)
        group = self._groups.get(key)
        if group is None:
            if not self.auto_create:
                raise errors.CgroupReadError(f"{key}/{for_file}", f"cgroup {key} does not exist", errno=errno.ENOENT)
            group = self._groups[key] = RecordedCgroup()
        return group

    def _group_for_write(self, path: str, field_name: driver.CgroupField, value: str) -> RecordedCgroup:
        key = _key(path)
        if key not in self._groups and not self.auto_create:
            raise errors.CgroupMissingError(f"{key}/{field_name}", value, key)
        failure = self._failures.pop((key, field_name), None)
        if failure is not None:
            raise errors.CgroupWriteError.from_os_error(
                f"{key}/{field_name}", value, OSError(failure, f"injected failure ({errno.errorcode.get(failure)})")
            )
        return self._group(path, for_file=field_name)

    def _check_hierarchy(self, path: str, field_name: driver.CgroupField, mask: int, value: str) -> None:
        if not self.v1_hierarchy:
            return
        key = _key(path)
        parent = self._groups.get(key.rpartition("/")[0]) if "/" in key else None
        if parent is not None:
            parent_mask = parent.cpus.mask if field_name == "cpus" else CPUSet(parent.mems).mask
            if mask & ~parent_mask:
                raise errors.CgroupWriteError(
                    f"{key}/{field_name}", value, "EACCES: not a subset of the parent's (cgroup v1)", errno=errno.EACCES
                )
        prefix = key + "/"
        for child_key, child in self._groups.items():
            if not child_key.startswith(prefix) or "/" in child_key[len(prefix) :]:
                continue
            child_mask = child.cpus.mask if field_name == "cpus" else CPUSet(child.mems).mask
            if child_mask & ~mask:
                raise errors.CgroupWriteError(
                    f"{key}/{field_name}",
                    value,
                    f"EBUSY: child {child_key} would leave its parent (cgroup v1)",
                    errno=errno.EBUSY,
                )

    def _record(self, path: str, field_name: driver.CgroupField, value: driver.FieldValue) -> None:
        write = CgroupWrite(_key(path), field_name, value)
        self.writes.append(write)
        if self.log_writes:
            log.info("cgroup write (dry run)", extra={"cgroup": write.path, "field": field_name, "value": str(write)})


_check: type[driver.CgroupDriver] = RecordingCgroupDriver
