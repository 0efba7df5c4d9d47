"""The ``restricted`` policy (kubelet ``policy_restricted.go``): admit only a preferred alignment.

Same merge as best-effort (prefer-closest honoured); the pod is admitted iff the
merged hint is preferred (P3). A rejection becomes ``TopologyAffinityError`` in
the caller; this module only answers the boolean.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from enforcer.topology import hints, merge, options
from enforcer.topology.numa_info import NUMAInfo
from enforcer.topology.policy import TopologyPolicy


class RestrictedPolicy:
    """Best-effort's merge with admission limited to preferred hints."""

    name: ClassVar[str] = options.POLICY_RESTRICTED

    def __init__(self, numa_info: NUMAInfo, opts: options.TopologyManagerOptions) -> None:
        self.numa_info = numa_info
        self.options = opts

    def merge(self, providers_hints: Sequence[hints.ProviderHints]) -> tuple[hints.TopologyHint, bool]:
        dimensions = merge.filter_providers_hints(providers_hints)
        best = merge.merge_filtered_hints(self.numa_info, dimensions, prefer_closest=self.options.prefer_closest_numa)
        return best, best.preferred


_check: type[TopologyPolicy] = RestrictedPolicy
