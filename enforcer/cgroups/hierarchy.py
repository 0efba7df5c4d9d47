"""cgroup v1: bring along the child cgroups nobody asked for, so a parent's cpuset can shrink.

On cgroup v1 a parent's ``cpuset.cpus``/``cpuset.mems`` may not shrink while a
child still holds a CPU or node that is leaving (``EBUSY``), and a child may
not hold one its parent lacks (``EACCES``).  Kubernetes pod cgroups always
have such children the enforcer did not create: the sandbox (pause)
container, which the runtime starts with a copy of the pod's whole cpuset,
containers the pod watch has not reported yet, and anything a container made
below itself.  Narrowing the pod cgroup alone therefore fails.

:func:`with_untracked_children` adds a target for every such child (and its
descendants) of a target whose set shrinks: the child keeps what it has inside
the parent's new set, or takes the parent's new set when nothing of its own
would remain.  :func:`enforcer.cgroups.reconcile.reconcile` then orders the
writes as the kernel requires: growing writes parents first, shrinking
writes children first.

No-op on cgroup v2 (a child's effective cpuset is intersected with its
parent's by the kernel) and for targets whose sets do not shrink.
Must not: create or remove cgroups, or touch a cgroup outside a target's subtree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import errors
from enforcer.cgroups.reconcile import CgroupTarget
from shared.cpuset import CPUSet

MAX_DEPTH: Final = 8
"""Deepest descendant followed below a target (containers nest cgroups a few levels at most)."""


def _key(path: str) -> str:
    return "/".join(p for p in path.split("/") if p)


def with_untracked_children(targets: Sequence[CgroupTarget], driver: cgdriver.CgroupDriver) -> list[CgroupTarget]:
    """``targets`` plus a containing target for each untracked descendant that would block a shrink."""
    if not driver.nested_cpusets:
        return list(targets)
    tracked = {_key(t.path) for t in targets}
    out = list(targets)
    for target in targets:
        if target.cpus is None and target.mems is None:
            continue
        cpus = target.cpus if target.cpus else None
        mems = CPUSet(target.mems) if target.mems else None
        _contain(_key(target.path), cpus, mems, driver, tracked, out, depth=0)
    return out


def _contain(
    path: str,
    cpus: CPUSet | None,
    mems: CPUSet | None,
    driver: cgdriver.CgroupDriver,
    tracked: set[str],
    out: list[CgroupTarget],
    *,
    depth: int,
) -> None:
    if depth >= MAX_DEPTH:
        return
    try:
        children = driver.children(path)
    except errors.CgroupError:
        return  # unreadable: the write that needs it reports the kernel's refusal
    for child in children:
        if child in tracked:
            continue
        try:
            child_cpus = driver.read_cpus(child) if cpus is not None else None
            child_mems = CPUSet(driver.read_mems(child)) if mems is not None else None
        except errors.CgroupError:
            continue  # gone meanwhile
        new_cpus = _inside(child_cpus, cpus)
        new_mems = _inside(child_mems, mems)
        if new_cpus is None and new_mems is None:
            continue  # already inside: nothing below it can be outside either
        tracked.add(child)
        out.append(CgroupTarget(path=child, cpus=new_cpus, mems=None if new_mems is None else tuple(new_mems)))
        _contain(
            child,
            new_cpus if new_cpus is not None else child_cpus,
            new_mems if new_mems is not None else child_mems,
            driver,
            tracked,
            out,
            depth=depth + 1,
        )


def _inside(current: CPUSet | None, parent: CPUSet | None) -> CPUSet | None:
    """The child's new set when ``current`` leaves ``parent``: what stays inside, else the parent's; None if inside."""
    if current is None or parent is None or current.mask & ~parent.mask == 0:
        return None
    kept = current & parent
    return kept if kept else parent
