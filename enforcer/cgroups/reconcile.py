"""Drive cgroups to a desired state: write only what differs, in an order the kernel accepts.

``reconcile(desired, driver)`` reads every managed field of every target,
reports each difference as a :class:`Divergence`, and repairs it.  It is
idempotent: a second run over an unchanged tree writes nothing.

Safety rules, and why:

* An empty cpuset is never written (it would strand the cgroup's tasks; v1
  refuses it with ``ENOSPC`` anyway): the field is skipped and reported.
* A missing cgroup is *pending*, not an error: the runtime creates container
  cgroups after the enforcer has decided their cpus.
* Order (``order="hierarchy"``, the default).  cgroup v1 requires every child's
  cpus/mems to stay within its parent's, and a child's CFS quota ratio not to
  exceed its parent's.  So all *growing* writes go first, parents before
  children, then all *shrinking* writes, children before parents.  A cpuset
  that both gains and loses CPUs is split on cgroups that have target children
  (first the union, later the final set); a leaf is written once, after its
  ancestors grew and before they shrink.
* Within one cgroup, a CPU quota decrease is written before its cpuset shrinks,
  and a cpuset grows before its quota increases, so the cpuset never shrinks
  under a container whose quota still allows more.
* A memory limit decrease is held back (reported, not written) while the
  cgroup's current usage is above the new limit: v2 would OOM-kill, v1 refuse
  with ``EBUSY`` (the kubelet's best-effort guard for resize, R4.6).

``order="given"`` keeps the caller's target order (each target still gets the
within-cgroup order) for callers that have ordered the targets themselves.

Must not: decide desired values, or create or remove cgroups.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import errors
from shared.cpuset import CPUSet

log = logging.getLogger(__name__)

Unset = Literal["unset"]
UNSET: Final[Unset] = "unset"
"""``memory_limit=UNSET``: the target does not manage memory (``None`` means *unlimited*)."""

ReconcileOrder = Literal["hierarchy", "given"]
SetChange = Literal["same", "grow", "shrink", "mixed"]
Phase = Literal["grow", "shrink"]


def classify_set_change(old: int, new: int) -> SetChange:
    """How a cpuset (as a bitmask) changes: grow (superset), shrink (subset), mixed, or same."""
    if old == new:
        return "same"
    if new & old == old:
        return "grow"
    if new & old == new:
        return "shrink"
    return "mixed"


@dataclass(frozen=True, slots=True)
class CgroupTarget:
    """What one cgroup should hold; ``None`` (``UNSET`` for memory) leaves a field unmanaged."""

    path: str
    cpus: CPUSet | None = None
    mems: tuple[int, ...] | None = None
    cpu_quota: cgdriver.CPUQuota | None = None
    memory_limit: int | None | Unset = UNSET

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", _normalize_path(self.path))
        if self.mems is not None:
            object.__setattr__(self, "mems", cgdriver.normalize_mems(self.mems))
        if isinstance(self.cpu_quota, tuple):
            # The brief's tuple spelling (quota_us | None, period_us) is accepted too.
            object.__setattr__(self, "cpu_quota", cgdriver.CPUQuota(*self.cpu_quota))
        if self.memory_limit != UNSET:
            cgdriver.validate_memory_limit(self.memory_limit)


def _normalize_path(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise errors.CgroupNameError(path, "reconcile never writes the root cgroup")
    return "/".join(parts)


@dataclass(frozen=True, slots=True)
class Divergence:
    """A field whose actual value differs from the desired one (values as the cgroup file shows them)."""

    path: str
    field: cgdriver.CgroupField
    expected: str
    actual: str


@dataclass(frozen=True, slots=True)
class AppliedWrite:
    path: str
    field: cgdriver.CgroupField
    value: str


@dataclass(frozen=True, slots=True)
class SkippedField:
    """A field reconcile refused to write, with the rule that stopped it."""

    path: str
    field: cgdriver.CgroupField
    reason: str


@dataclass(frozen=True, slots=True)
class HeldMemoryDecrease:
    """A memory limit decrease not written because usage is above the new limit."""

    path: str
    limit: int
    usage: int


@dataclass(frozen=True, slots=True)
class WriteFailure:
    """A read or write the kernel refused; ``message`` names the file and the errno."""

    path: str
    field: cgdriver.CgroupField
    value: str
    message: str


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    applied: tuple[AppliedWrite, ...] = ()
    divergences: tuple[Divergence, ...] = ()
    pending: tuple[str, ...] = ()
    skipped: tuple[SkippedField, ...] = ()
    held: tuple[HeldMemoryDecrease, ...] = ()
    failures: tuple[WriteFailure, ...] = ()

    @classmethod
    def combined(cls, reports: Sequence[ReconcileReport]) -> ReconcileReport:
        """One report for a pass driven in several calls (their targets disjoint)."""
        if len(reports) == 1:
            return reports[0]
        return cls(
            applied=tuple(x for r in reports for x in r.applied),
            divergences=tuple(x for r in reports for x in r.divergences),
            pending=tuple(x for r in reports for x in r.pending),
            skipped=tuple(x for r in reports for x in r.skipped),
            held=tuple(x for r in reports for x in r.held),
            failures=tuple(x for r in reports for x in r.failures),
        )

    def counts(self) -> dict[str, int]:
        """What a log line says of the report."""
        return {
            "writes": len(self.applied),
            "divergences": len(self.divergences),
            "pending": len(self.pending),
            "held": len(self.held),
            "failures": len(self.failures),
        }

    @property
    def ok(self) -> bool:
        """No write failed (pending, skipped and held fields are expected states, not failures)."""
        return not self.failures

    @property
    def in_sync(self) -> bool:
        """Every existing target already held its desired values."""
        return not self.divergences and not self.failures


@dataclass(frozen=True, slots=True)
class _Step:
    phase: Phase
    target_index: int
    depth: int
    rank: int
    path: str
    field: cgdriver.CgroupField
    value: cgdriver.FieldValue
    guard_usage: bool = False


# Field order inside one cgroup for each phase (see the module docstring).
_GROW_RANK: Final[dict[cgdriver.CgroupField, int]] = {"cpus": 0, "mems": 1, "cpu_quota": 2, "memory_limit": 3}
_SHRINK_RANK: Final[dict[cgdriver.CgroupField, int]] = {"cpu_quota": 0, "memory_limit": 1, "cpus": 2, "mems": 3}


@dataclass(slots=True)
class _Collector:
    applied: list[AppliedWrite] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    skipped: list[SkippedField] = field(default_factory=list)
    held: list[HeldMemoryDecrease] = field(default_factory=list)
    failures: list[WriteFailure] = field(default_factory=list)

    def report(self) -> ReconcileReport:
        return ReconcileReport(
            applied=tuple(self.applied),
            divergences=tuple(self.divergences),
            pending=tuple(self.pending),
            skipped=tuple(self.skipped),
            held=tuple(self.held),
            failures=tuple(self.failures),
        )


def reconcile(
    desired: Sequence[CgroupTarget], driver: cgdriver.CgroupDriver, *, order: ReconcileOrder = "hierarchy"
) -> ReconcileReport:
    """Repair every difference between ``desired`` and the cgroups; see the module docstring for the rules."""
    seen: set[str] = set()
    for target in desired:
        if target.path in seen:
            raise errors.InvalidCgroupValue(f"cgroup {target.path} appears twice in the desired state")
        seen.add(target.path)
    parents = {_ancestor for t in desired for _ancestor in _ancestors(t.path)}
    out = _Collector()
    steps: list[_Step] = []
    for index, target in enumerate(desired):
        if not driver.exists(target.path):
            out.pending.append(target.path)
            continue
        steps.extend(_target_steps(index, target, driver, has_children=target.path in parents, out=out))
    if order == "hierarchy":
        steps.sort(key=_hierarchy_key)
    else:
        steps.sort(key=lambda s: (s.target_index, s.phase == "shrink", s.rank))
    _execute(steps, driver, out)
    return out.report()


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _hierarchy_key(step: _Step) -> tuple[int, int, int, int]:
    if step.phase == "grow":
        return (0, step.depth, step.target_index, step.rank)
    return (1, -step.depth, step.target_index, step.rank)


def _target_steps(
    index: int, target: CgroupTarget, driver: cgdriver.CgroupDriver, *, has_children: bool, out: _Collector
) -> list[_Step]:
    depth = target.path.count("/")
    steps: list[_Step] = []
    divergences: list[Divergence] = []

    def step(phase: Phase, field_name: cgdriver.CgroupField, value: cgdriver.FieldValue, guard: bool = False) -> None:
        rank = (_GROW_RANK if phase == "grow" else _SHRINK_RANK)[field_name]
        steps.append(_Step(phase, index, depth, rank, target.path, field_name, value, guard))

    def diverged(field_name: cgdriver.CgroupField, expected: cgdriver.FieldValue, actual: cgdriver.FieldValue) -> None:
        divergences.append(
            Divergence(
                target.path,
                field_name,
                cgdriver.format_value(field_name, expected),
                cgdriver.format_value(field_name, actual),
            )
        )

    # The quota goes first: a leaf's cpuset waits for a quota decrease.
    quota_decreases = False
    if target.cpu_quota is not None:
        current_quota = _read(driver, target, "cpu_quota", driver.read_cpu_quota, out)
        if not isinstance(current_quota, _ReadFailed) and current_quota != target.cpu_quota:
            diverged("cpu_quota", target.cpu_quota, current_quota)
            quota_decreases = current_quota.exceeds(target.cpu_quota)
            step("shrink" if quota_decreases else "grow", "cpu_quota", target.cpu_quota)

    if target.cpus is not None and not target.cpus:
        out.skipped.append(SkippedField(target.path, "cpus", "an empty cpuset is never written"))
    elif target.cpus is not None:
        current_cpus = _read(driver, target, "cpus", driver.read_cpus, out)
        if not isinstance(current_cpus, _ReadFailed):
            for phase, value in _set_steps(target.cpus.mask, current_cpus.mask, has_children, quota_decreases):
                step(phase, "cpus", CPUSet.from_mask(value))
            if current_cpus != target.cpus:
                diverged("cpus", target.cpus, current_cpus)

    if target.mems is not None and not target.mems:
        out.skipped.append(SkippedField(target.path, "mems", "an empty cpuset.mems is never written"))
    elif target.mems is not None:
        current_mems = _read(driver, target, "mems", driver.read_mems, out)
        if not isinstance(current_mems, _ReadFailed):
            wanted_mask, current_mask = CPUSet(target.mems).mask, CPUSet(current_mems).mask
            for phase, value in _set_steps(wanted_mask, current_mask, has_children, quota_decreases):
                step(phase, "mems", tuple(CPUSet.from_mask(value)))
            if current_mask != wanted_mask:
                diverged("mems", target.mems, current_mems)

    if target.memory_limit != UNSET:
        wanted_limit = target.memory_limit
        current_limit = _read(driver, target, "memory_limit", driver.read_memory_limit, out)
        if not isinstance(current_limit, _ReadFailed) and not cgdriver.memory_limit_matches(
            wanted_limit, current_limit, driver.page_size
        ):
            diverged("memory_limit", wanted_limit, current_limit)
            decrease = wanted_limit is not None and (current_limit is None or wanted_limit < current_limit)
            step("shrink" if decrease else "grow", "memory_limit", wanted_limit, guard=decrease)

    divergences.sort(key=lambda d: _GROW_RANK[d.field])
    out.divergences.extend(divergences)
    return steps


def _set_steps(wanted: int, current: int, has_children: bool, quota_decreases: bool) -> list[tuple[Phase, int]]:
    """The (phase, mask) writes that take a cpuset from ``current`` to ``wanted`` safely."""
    change = classify_set_change(current, wanted)
    if change == "same":
        return []
    if change == "grow":
        return [("grow", wanted)]
    if change == "shrink":
        return [("shrink", wanted)]
    if has_children:
        # Children may still hold CPUs that are leaving: widen first, narrow after they moved.
        return [("grow", current | wanted), ("shrink", wanted)]
    # A leaf is written once; if it ends up with fewer CPUs it waits for its quota decrease.
    fewer = wanted.bit_count() < current.bit_count()
    return [("shrink" if fewer and quota_decreases else "grow", wanted)]


class _ReadFailed:
    """Marks a field whose read failed (the failure or the pending path is already reported)."""


_READ_FAILED: Final = _ReadFailed()

_T = TypeVar("_T")


def _read(
    driver: cgdriver.CgroupDriver,
    target: CgroupTarget,
    field_name: cgdriver.CgroupField,
    reader: Callable[[str], _T],
    out: _Collector,
) -> _T | _ReadFailed:
    try:
        return reader(target.path)
    except errors.CgroupError as error:
        if not driver.exists(target.path):
            if target.path not in out.pending:
                out.pending.append(target.path)
        else:
            out.failures.append(WriteFailure(target.path, field_name, "", error.message))
        return _READ_FAILED


def _execute(steps: Sequence[_Step], driver: cgdriver.CgroupDriver, out: _Collector) -> None:
    gone: set[str] = set(out.pending)
    for step in steps:
        if step.path in gone:
            continue
        shown = cgdriver.format_value(step.field, step.value)
        try:
            if step.guard_usage and isinstance(step.value, int):
                usage = driver.read_memory_usage(step.path)
                if usage > step.value:
                    out.held.append(HeldMemoryDecrease(step.path, step.value, usage))
                    log.warning(
                        "memory limit decrease held",
                        extra={"cgroup": step.path, "limit": step.value, "usage": usage},
                    )
                    continue
            cgdriver.write_field(driver, step.path, step.field, step.value)
        except errors.CgroupError as error:
            if isinstance(error, errors.CgroupMissingError) or not driver.exists(step.path):
                gone.add(step.path)
                out.pending.append(step.path)
                continue
            out.failures.append(WriteFailure(step.path, step.field, shown, error.message))
            log.error("cgroup write failed", extra={"cgroup": step.path, "field": step.field, "error": error.message})
            continue
        out.applied.append(AppliedWrite(step.path, step.field, shown))
