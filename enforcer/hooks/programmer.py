"""One hook request -> the container's cgroup found from ``/proc/<pid>/cgroup`` and programmed, or a reason.

Steps: find the cgroup the kernel put the process in (exact for every cgroup
driver and runtime, :mod:`enforcer.cgroups.proc`); read the pod's desired
state; compute the container's and its pod cgroup's values
(:mod:`enforcer.hooks.placement`), together with those of the pod's other
hooked containers so a pod cgroup that shrinks keeps them inside it; drive all
of it through :meth:`Reconciler.program` (the v1 order: grow parents first,
shrink children first, untracked children contained); read back what the
container now holds and answer with it.

Must not: decide allocations, or answer success for a container whose cgroup
does not hold its values.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Literal

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import errors as cgerrors
from enforcer.cgroups import proc
from enforcer.cgroups.reconcile import CgroupTarget, ReconcileReport
from enforcer.hooks import placement
from enforcer.hooks.metrics import HookMetrics
from enforcer.hooks.protocol import HookAnswer, HookRequest
from enforcer.hooks.registry import HookedContainer, HookRegistry
from enforcer.service.reconciler import CgroupLayout, DesiredState

log = logging.getLogger(__name__)

DesiredSource = Callable[[Collection[str] | None], DesiredState]
Program = Callable[[Sequence[CgroupTarget]], ReconcileReport]


class HookProgrammer:
    def __init__(
        self,
        *,
        desired: DesiredSource,
        program: Program,
        driver: cgdriver.CgroupDriver,
        layout: CgroupLayout,
        cgroup_version: Literal["v1", "v2"],
        registry: HookRegistry,
        metrics: HookMetrics,
        proc_root: Path = proc.HOST_PROC,
        on_programmed: Callable[[HookedContainer], None] | None = None,
    ) -> None:
        self.desired = desired
        self._program = program
        self._driver = driver
        self._layout = layout
        self._version = cgroup_version
        self.registry = registry
        self._metrics = metrics
        self._proc_root = proc_root
        self.on_programmed = on_programmed

    def handle(self, request: HookRequest) -> HookAnswer:
        """Program the request's container; every failure becomes an answer with a reason, never an exception."""
        started = time.perf_counter()
        try:
            answer = self._handle(request)
        except cgerrors.CgroupError as err:
            answer = HookAnswer.failure(err.reason, err.message)
        except placement.PlacementError as err:
            answer = HookAnswer.failure(err.reason, err.message)
        except Exception as err:  # the socket must answer whatever happens; the log keeps the trace
            log.exception("hook request crashed", extra={"container": request.label})
            answer = HookAnswer.failure("InternalError", f"{type(err).__name__}: {err}")
        self._metrics.seconds.observe(time.perf_counter() - started)
        if answer.ok:
            self._metrics.requests.labels(outcome="pinned", pool=answer.pool).inc()
            log.info(
                "container pinned at start",
                extra={"container": request.label, "cgroup": answer.cgroup, "cpus": answer.cpus, "pool": answer.pool},
            )
        else:
            self._metrics.requests.labels(outcome="failed", pool="").inc()
            self._metrics.failures.labels(reason=answer.reason).inc()
            log.warning(
                "hook request failed",
                extra={"container": request.label, "reason": answer.reason, "error": answer.message},
            )
        self._metrics.hooked_containers.set(len(self.registry))
        return answer

    def _handle(self, request: HookRequest) -> HookAnswer:
        path = proc.resolve(request.pid, self._version, reported=request.cgroup_text, proc_root=self._proc_root)
        state = self.desired([request.pod_uid])
        placed = placement.place(request, path, state, self._layout)
        entry = HookedContainer(path=path, request=request, pool=placed.pool, programmed=_targets(placed))
        siblings = self.reapply_targets([e for e in self.registry.of_pod(request.pod_uid) if e.path != path], state)
        report = self._program(_merge([*entry.programmed, *(t for e in siblings for t in e.programmed)]))
        problem = _problem(report, path, placed.pod.path if placed.pod is not None else None)
        if problem is not None:
            return problem
        cpus = self._driver.read_cpus(path)
        mems = self._driver.read_mems(path)
        if placed.container.cpus is not None and cpus != placed.container.cpus:
            return HookAnswer.failure("CgroupNotProgrammed", f"{path} holds cpus {cpus}, not {placed.container.cpus}")
        self.registry.put(entry)
        for sibling in siblings:
            self.registry.put(sibling)
        if self.on_programmed is not None:
            self.on_programmed(entry)
        return HookAnswer(ok=True, cpus=str(cpus), mems=cgdriver.format_mems(mems), pool=placed.pool, cgroup=path)

    def reapply_targets(self, entries: Sequence[HookedContainer], state: DesiredState) -> list[HookedContainer]:
        """Each entry with targets recomputed from ``state``; entries that cannot be placed any more are left out."""
        out: list[HookedContainer] = []
        for entry in entries:
            try:
                placed = placement.place(entry.request, entry.path, state, self._layout)
            except placement.PlacementError:
                continue
            out.append(HookedContainer(entry.path, entry.request, placed.pool, _targets(placed)))
        return out

    def reapply(self, entries: Sequence[HookedContainer], *, trigger: str) -> ReconcileReport | None:
        """Re-program registered containers from the current desired state; drops those whose cgroup is gone."""
        live = [e for e in entries if self._driver.exists(e.path)]
        for gone in (e for e in entries if e not in live):
            self.registry.drop(gone.path)
        if not live:
            self._metrics.hooked_containers.set(len(self.registry))
            return None
        state = self.desired(sorted({e.request.pod_uid for e in live}))
        updated = self.reapply_targets(live, state)
        report = self._program(_merge([t for e in updated for t in e.programmed]))
        for entry in updated:
            self.registry.put(entry)
        if report.applied:
            self._metrics.reapplied.labels(trigger=trigger).inc(len(report.applied))
            log.warning(
                "hooked containers' cgroups re-applied",
                extra={"trigger": trigger, "writes": [f"{w.path} {w.field}={w.value}" for w in report.applied]},
            )
        self._metrics.hooked_containers.set(len(self.registry))
        return report


def _targets(placed: placement.Placement) -> tuple[CgroupTarget, ...]:
    return (placed.container,) if placed.pod is None else (placed.container, placed.pod)


def _merge(targets: Sequence[CgroupTarget]) -> list[CgroupTarget]:
    """One target per path (a pod cgroup appears once per hooked container; their values agree)."""
    seen: dict[str, CgroupTarget] = {}
    for target in targets:
        seen.setdefault(target.path, target)
    return list(seen.values())


def _problem(report: ReconcileReport, container_path: str, pod_path: str | None) -> HookAnswer | None:
    container_key = container_path.strip("/")
    keys = {container_key} | ({pod_path.strip("/")} if pod_path is not None else set())
    if container_key in {p.strip("/") for p in report.pending}:
        return HookAnswer.failure("CgroupGone", f"cgroup {container_path} disappeared before it was programmed")
    failures = [f.message for f in report.failures if f.path.strip("/") in keys]
    if failures:
        return HookAnswer.failure("CgroupWriteFailed", "; ".join(failures))
    return None
