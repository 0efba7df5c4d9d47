"""The ``single-numa-node`` policy (kubelet ``policy_single_numa_node.go``): one NUMA node or reject.

Before merging, each dimension keeps only preferred "don't care" hints and
preferred single-node hints; a dimension left empty means no permutation at all,
hence ``{default, false}`` and a rejection. prefer-closest is ignored (a single
node has no distance to compare). A merged mask equal to the default affinity
(only "don't care" hints) is reported as the nil mask (P4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from enforcer.topology import hint_masks, hints, merge, options
from enforcer.topology.numa_info import NUMAInfo
from enforcer.topology.policy import TopologyPolicy


def filter_single_numa_hints(dimensions: Sequence[Sequence[hints.TopologyHint]]) -> list[list[hints.TopologyHint]]:
    """``filterSingleNumaHints``: keep ``{nil, true}`` and ``{one node, true}``."""
    return [
        [
            h
            for h in (dimension.up_to(1) if isinstance(dimension, hint_masks.LayeredHints) else dimension)
            if h.preferred and (h.mask is None or h.mask.bit_count() == 1)
        ]
        for dimension in dimensions
    ]


class SingleNumaNodePolicy:
    """Admits only a preferred hint on exactly one NUMA node (or a pod with no preference)."""

    name: ClassVar[str] = options.POLICY_SINGLE_NUMA_NODE

    def __init__(self, numa_info: NUMAInfo, opts: options.TopologyManagerOptions) -> None:
        self.numa_info = numa_info
        self.options = opts

    def merge(self, providers_hints: Sequence[hints.ProviderHints]) -> tuple[hints.TopologyHint, bool]:
        dimensions = filter_single_numa_hints(merge.filter_providers_hints(providers_hints))
        best = merge.merge_filtered_hints(self.numa_info, dimensions, prefer_closest=False)
        if best.mask == self.numa_info.default_affinity:
            best = hints.TopologyHint(None, best.preferred)
        return best, best.preferred


_check: type[TopologyPolicy] = SingleNumaNodePolicy
