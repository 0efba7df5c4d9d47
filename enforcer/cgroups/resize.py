"""The kubelet's in-place resize actuation order, as an explicit write plan.

``plan_resize(pod, containers)`` turns old/new limits of a pod cgroup and its
container cgroups into ordered :class:`ResizeStep` s; ``apply_step`` /
``apply_resize_plan`` execute them.  The order is the kubelet's
(``doPodResizeAction``, in-place-resize.md R4.6), per resource, memory first
then CPU:

1. ``pod-increase``: the pod cgroup grows (so containers have room);
2. ``container-decrease``: containers shrink;
3. ``pod-decrease``: the pod cgroup shrinks (its containers already fit);
4. ``container-increase``: containers grow.

The plan adds what the kubelet leaves to runc, because the enforcer writes
cpusets itself:

* cpus/mems follow the same stages.  A pod cpuset that gains and loses CPUs is
  widened to the union in stage 1 and narrowed in stage 3.  A container cpuset
  that loses any CPU is written in stage 2 (before the pod shrinks; after it
  grew), one that only gains in stage 4;
* a cpuset never shrinks before its quota allows: in decrease stages the quota
  is written before the cpuset, in increase stages the cpuset before the quota;
* a memory limit decrease is guarded: ``apply_step`` reads current usage first
  and holds the write back (outcome ``held``) while usage is above the new
  limit (R4.6: skip that container, report the resize as in progress with an
  error; the same check applies to the pod cgroup).

Must not: decide whether a resize is allowed (legality, Deferred/Infeasible
belong to the engine), or read the old values itself (the caller passes what
was actuated, e.g. from the checkpoint).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import errors, reconcile
from shared.cpuset import CPUSet

log = logging.getLogger(__name__)

Resource = Literal["memory", "cpu"]
Stage = Literal["pod-increase", "container-decrease", "pod-decrease", "container-increase"]
Outcome = Literal["written", "held", "pending", "failed", "skipped"]

STAGES: Final[tuple[Stage, ...]] = ("pod-increase", "container-decrease", "pod-decrease", "container-increase")
RESOURCES: Final[tuple[Resource, ...]] = ("memory", "cpu")
_RESOURCE_OF: Final[dict[cgdriver.CgroupField, Resource]] = {
    "memory_limit": "memory",
    "mems": "memory",
    "cpu_quota": "cpu",
    "cpus": "cpu",
}
# Inside one cgroup and stage: limits before sets when shrinking, sets before limits when growing.
_DECREASE_RANK: Final[dict[cgdriver.CgroupField, int]] = {"memory_limit": 0, "mems": 1, "cpu_quota": 0, "cpus": 1}
_INCREASE_RANK: Final[dict[cgdriver.CgroupField, int]] = {"mems": 0, "memory_limit": 1, "cpus": 0, "cpu_quota": 1}


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    """The managed values of one cgroup; ``None`` (``UNSET`` for memory) leaves a field out of the plan."""

    cpus: CPUSet | None = None
    mems: tuple[int, ...] | None = None
    cpu_quota: cgdriver.CPUQuota | None = None
    memory_limit: int | None | reconcile.Unset = reconcile.UNSET


@dataclass(frozen=True, slots=True)
class LimitsChange:
    """Old (actuated) and new (allocated) limits of one cgroup."""

    path: str
    old: CgroupLimits
    new: CgroupLimits


@dataclass(frozen=True, slots=True)
class ResizeStep:
    resource: Resource
    stage: Stage
    path: str
    field: cgdriver.CgroupField
    value: cgdriver.FieldValue
    previous: cgdriver.FieldValue
    guard_memory_usage: bool = False
    """A memory limit decrease: written only while usage is at or below ``value``."""

    def __str__(self) -> str:
        shown = cgdriver.format_value(self.field, self.value)
        return f"{self.resource}/{self.stage}: {self.path} {self.field}={shown}"


@dataclass(frozen=True, slots=True)
class ResizePlan:
    steps: tuple[ResizeStep, ...]


@dataclass(frozen=True, slots=True)
class StepResult:
    step: ResizeStep
    outcome: Outcome
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ResizeReport:
    results: tuple[StepResult, ...]

    @property
    def complete(self) -> bool:
        """Every step was written (the kubelet would clear ``PodResizeInProgress``)."""
        return all(r.outcome == "written" for r in self.results)

    def with_outcome(self, outcome: Outcome) -> tuple[StepResult, ...]:
        return tuple(r for r in self.results if r.outcome == outcome)


@dataclass(frozen=True, slots=True)
class _Planned:
    resource_index: int
    stage_index: int
    cgroup_index: int
    rank: int
    step: ResizeStep


def plan_resize(pod: LimitsChange, containers: Sequence[LimitsChange]) -> ResizePlan:
    """The ordered writes taking ``pod`` and ``containers`` from their old to their new limits."""
    planned: list[_Planned] = []
    for cgroup_index, change in enumerate((pod, *containers)):
        is_pod = cgroup_index == 0
        for field_name, value, stage in _field_writes(change, is_pod=is_pod):
            resource = _RESOURCE_OF[field_name]
            decreasing = stage in ("container-decrease", "pod-decrease")
            rank = (_DECREASE_RANK if decreasing else _INCREASE_RANK)[field_name]
            previous = _value(change.old, field_name)
            step = ResizeStep(
                resource=resource,
                stage=stage,
                path=change.path,
                field=field_name,
                value=value,
                previous=previous,
                guard_memory_usage=field_name == "memory_limit" and decreasing,
            )
            planned.append(_Planned(RESOURCES.index(resource), STAGES.index(stage), cgroup_index, rank, step))
    planned.sort(key=lambda p: (p.resource_index, p.stage_index, p.cgroup_index, p.rank))
    return ResizePlan(tuple(p.step for p in planned))


def _value(limits: CgroupLimits, field_name: cgdriver.CgroupField) -> cgdriver.FieldValue:
    if field_name == "cpus":
        return limits.cpus
    if field_name == "mems":
        return limits.mems
    if field_name == "cpu_quota":
        return limits.cpu_quota
    return None if limits.memory_limit == reconcile.UNSET else limits.memory_limit


def _field_writes(
    change: LimitsChange, *, is_pod: bool
) -> list[tuple[cgdriver.CgroupField, cgdriver.FieldValue, Stage]]:
    grow: Stage = "pod-increase" if is_pod else "container-increase"
    shrink: Stage = "pod-decrease" if is_pod else "container-decrease"
    old, new = change.old, change.new
    writes: list[tuple[cgdriver.CgroupField, cgdriver.FieldValue, Stage]] = []

    def missing_old(field_name: cgdriver.CgroupField) -> errors.InvalidCgroupValue:
        detail = f"the resize plan needs the old {field_name} to order its writes"
        return errors.InvalidCgroupValue(f"{change.path}: {detail}")

    if new.memory_limit != reconcile.UNSET:
        if old.memory_limit == reconcile.UNSET:
            raise missing_old("memory_limit")
        old_limit, new_limit = old.memory_limit, new.memory_limit
        if old_limit != new_limit:
            decrease = new_limit is not None and (old_limit is None or new_limit < old_limit)
            writes.append(("memory_limit", new_limit, shrink if decrease else grow))
    if new.cpu_quota is not None:
        if old.cpu_quota is None:
            raise missing_old("cpu_quota")
        if old.cpu_quota != new.cpu_quota:
            writes.append(("cpu_quota", new.cpu_quota, shrink if old.cpu_quota.exceeds(new.cpu_quota) else grow))
    set_fields: tuple[tuple[cgdriver.CgroupField, CPUSet | None, CPUSet | None], ...] = (
        ("cpus", old.cpus, new.cpus),
        ("mems", _as_set(old.mems), _as_set(new.mems)),
    )
    for field_name, old_set, new_set in set_fields:
        if new_set is None:
            continue
        if not new_set:
            raise errors.InvalidCgroupValue(f"{change.path}: an empty {field_name} set is never written")
        if old_set is None:
            raise missing_old(field_name)
        kind = reconcile.classify_set_change(old_set.mask, new_set.mask)
        if kind == "same":
            continue
        if kind == "grow":
            writes.append((field_name, _as_field(field_name, new_set), grow))
        elif kind == "shrink" or not is_pod:
            # A container losing any CPU moves before its pod shrinks (and after it grew).
            writes.append((field_name, _as_field(field_name, new_set), shrink))
        else:
            writes.append((field_name, _as_field(field_name, old_set | new_set), grow))
            writes.append((field_name, _as_field(field_name, new_set), shrink))
    return writes


def _as_set(mems: tuple[int, ...] | None) -> CPUSet | None:
    return None if mems is None else CPUSet(mems)


def _as_field(field_name: cgdriver.CgroupField, cpus: CPUSet) -> cgdriver.FieldValue:
    return cpus if field_name == "cpus" else tuple(cpus)


def apply_step(step: ResizeStep, driver: cgdriver.CgroupDriver) -> StepResult:
    """Execute one step; never raises for kernel refusals (they become ``failed`` with the message)."""
    try:
        if step.guard_memory_usage and isinstance(step.value, int):
            usage = driver.read_memory_usage(step.path)
            if usage > step.value:
                log.warning(
                    "memory limit decrease held",
                    extra={"cgroup": step.path, "limit": step.value, "usage": usage},
                )
                return StepResult(step, "held", f"memory usage {usage} is above the new limit {step.value}")
        cgdriver.write_field(driver, step.path, step.field, step.value)
    except errors.CgroupMissingError as error:
        return StepResult(step, "pending", error.message)
    except errors.CgroupError as error:
        if not driver.exists(step.path):
            return StepResult(step, "pending", error.message)
        log.error("resize write failed", extra={"cgroup": step.path, "field": step.field, "error": error.message})
        return StepResult(step, "failed", error.message)
    return StepResult(step, "written")


def apply_resize_plan(plan: ResizePlan, driver: cgdriver.CgroupDriver) -> ResizeReport:
    """Execute the steps in order; the first failure stops the plan (later steps are ``skipped``).

    As the kubelet does: a failed write aborts the resize, which is retried as a
    whole on the next sync, because later stages assume earlier ones happened
    (a pod cpuset may only shrink once its containers did).  Held and pending
    steps do not stop the plan: they concern one cgroup and break no ordering.
    """
    results: list[StepResult] = []
    failed = False
    for step in plan.steps:
        if failed:
            results.append(StepResult(step, "skipped", "not attempted: an earlier step failed"))
            continue
        result = apply_step(step, driver)
        failed = result.outcome == "failed"
        results.append(result)
    return ResizeReport(tuple(results))
