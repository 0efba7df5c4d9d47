"""The kubelet's Memory Manager: ``None`` and ``Static`` policies, KEP-5526 pod-level variant included.

Layout (kubelet ``pkg/kubelet/cm/memorymanager``): :mod:`.policy` is the contract
the engine calls, :mod:`.policy_none` and :mod:`.policy_static` implement it,
:mod:`.state` is the plain value the engine owns and checkpoints, :mod:`.config`
validates the kubelet's ``reservedMemory``.  :mod:`.requests`, :mod:`.placement`
and :mod:`.restore` are the static policy's pure helpers (what is asked for,
where it may go, whether a restored state fits).

Nothing in this package does I/O, holds assignment state between calls, or
knows about the Topology Manager's merge, the CPU manager or cgroups.
"""

from __future__ import annotations

from enforcer.memorymanager.config import system_reserved_memory
from enforcer.memorymanager.policy import MemoryPolicy
from enforcer.memorymanager.policy_none import NoneMemoryPolicy
from enforcer.memorymanager.policy_static import StaticMemoryPolicy
from enforcer.memorymanager.state import Block, MemoryState, MemoryTable, NUMANodeState

__all__ = [
    "Block",
    "MemoryPolicy",
    "MemoryState",
    "MemoryTable",
    "NUMANodeState",
    "NoneMemoryPolicy",
    "StaticMemoryPolicy",
    "system_reserved_memory",
]
