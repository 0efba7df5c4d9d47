"""The Topology Manager policy contract (kubelet ``topologymanager/policy.go`` ``Policy``).

This module declares the Protocol only. The merge the policies share is :mod:`enforcer.topology.merge`,
the policies are the ``policy_*`` modules, and :mod:`enforcer.engine.builder` picks one by name. The
policies import this contract and it imports none of them, so the dependency runs one way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from enforcer.topology import hints


class TopologyPolicy(Protocol):
    """A Topology Manager policy (kubelet ``Policy``): one merge, one admit decision."""

    @property
    def name(self) -> str:
        """The ``topologyManagerPolicy`` value this policy implements."""
        ...

    def merge(self, providers_hints: Sequence[hints.ProviderHints]) -> tuple[hints.TopologyHint, bool]:
        """The best hint for these providers' hints and whether the pod may be admitted.

        Pure and idempotent: the same hints always give the same answer.
        """
        ...
