"""The ``none`` policy (kubelet ``policy_none.go``): no alignment, every pod admitted.

The kubelet does not even gather hints under this policy (the none scope
short-circuits); ``merge`` exists so that every policy has the same shape.
It must never look at the hints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from enforcer.topology import hints, options
from enforcer.topology.numa_info import NUMAInfo
from enforcer.topology.policy import TopologyPolicy


class NonePolicy:
    """Admits everything with the empty hint ``{nil, false}`` (P1)."""

    name: ClassVar[str] = options.POLICY_NONE

    def __init__(self, numa_info: NUMAInfo, opts: options.TopologyManagerOptions) -> None:
        self.numa_info = numa_info
        self.options = opts

    def merge(self, providers_hints: Sequence[hints.ProviderHints]) -> tuple[hints.TopologyHint, bool]:
        return hints.TopologyHint(None, False), True


_check: type[TopologyPolicy] = NonePolicy
