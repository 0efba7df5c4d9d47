"""The ``best-effort`` policy (kubelet ``policy_best_effort.go``): align when possible, always admit.

Merges with the shared machinery of :mod:`enforcer.topology.merge`
(prefer-closest honoured) and admits whatever the merge returns, preferred or
not (P2). It holds no state between merges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from enforcer.topology import hints, merge, options
from enforcer.topology.numa_info import NUMAInfo
from enforcer.topology.policy import TopologyPolicy


class BestEffortPolicy:
    """Stores the best hint found, even a non-preferred one, and never rejects."""

    name: ClassVar[str] = options.POLICY_BEST_EFFORT

    def __init__(self, numa_info: NUMAInfo, opts: options.TopologyManagerOptions) -> None:
        self.numa_info = numa_info
        self.options = opts

    def merge(self, providers_hints: Sequence[hints.ProviderHints]) -> tuple[hints.TopologyHint, bool]:
        dimensions = merge.filter_providers_hints(providers_hints)
        best = merge.merge_filtered_hints(self.numa_info, dimensions, prefer_closest=self.options.prefer_closest_numa)
        return best, True


_check: type[TopologyPolicy] = BestEffortPolicy
