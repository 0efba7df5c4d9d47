"""``prioritize`` scores: fewest NUMA nodes first, then the placement that leaves the least fragmentation.

For a node where the dry run admitted the pod, the score (``MinExtenderPriority`` 0 ..
``MaxExtenderPriority`` 10) is ``round(10 * (0.5 * span + 0.3 * fit + 0.2 * cores))``, at least 1:

* ``span = 1 / n``, n the NUMA nodes the pod's exclusive CPUs and pinned memory land on (a pod
  aligned to one NUMA node gets the whole half; spilling over two gets a quarter);
* ``fit = 1 - left / allocatable`` over the NUMA nodes the pod landed on, ``left`` the CPUs still free
  for exclusive use there after the pod: best fit, so a pod fills a hole that is its size instead of
  opening a NUMA node a bigger pod could have used whole (0.5 when the pod takes no exclusive CPUs);
* ``cores = 1 - split / cores`` over the same NUMA nodes, ``split`` the cores with one thread held and
  another free after the pod (a split core cannot serve a ``full-pcpus-only`` pod and shares caches).

Nodes with no opinion (not enforced, no replica yet, stale) score 0, below every node known to
fit, and nodes the filter refused are scored 0 too (the scheduler only asks about filtered nodes).
The scheduler adds ``score * weight * (MaxNodeScore / MaxExtenderPriority)`` to its own plugins' sum
(``prioritizeNodes``, pkg/scheduler/schedule_one.go): the extender's ``weight`` says how much NUMA
placement counts against spreading and the other scores.
"""

from __future__ import annotations

from extender.engine_adapter import DryRun
from extender.wire import MAX_EXTENDER_PRIORITY

NO_OPINION = 0
SPAN_WEIGHT, FIT_WEIGHT, CORE_WEIGHT = 0.5, 0.3, 0.2


def score(outcome: DryRun) -> int:
    if not outcome.admitted:
        return NO_OPINION
    span = max(1, len(outcome.numa_nodes))
    touched = [u for numa_id, u in outcome.usage_after if numa_id in outcome.numa_nodes] or [
        u for _, u in outcome.usage_after
    ]
    allocatable = sum(u.allocatable_cpus for u in touched)
    left = sum(u.free_cpus for u in touched)
    fit = 0.5 if outcome.exclusive_cpus == 0 or allocatable == 0 else 1 - left / allocatable
    cores = sum(u.cores for u in touched)
    split = sum(u.partial_cores for u in touched)
    core_term = 1.0 if cores == 0 else 1 - split / cores
    value = MAX_EXTENDER_PRIORITY * (SPAN_WEIGHT / span + FIT_WEIGHT * fit + CORE_WEIGHT * core_term)
    return max(1, min(MAX_EXTENDER_PRIORITY, round(value)))
