"""The CPU manager's in-place resize refusals (KEP-5554 reason strings; messages from its implementation branch).

Each is an :class:`~enforcer.errors.AdmissionRejected`, so the engine reports its reason as the resize's
Infeasible reason; "not now" is :class:`~enforcer.errors.ResizeDeferred`, raised by the placement.
"""

from __future__ import annotations

from enforcer.errors import AdmissionRejected


class ProhibitedCPUAllocationError(AdmissionRejected):
    """A resize below the container's original (promised) CPUs (R6.3)."""

    reason = "prohibitedCPUAllocationError"

    @classmethod
    def below_original(
        cls, requested: str, allocated: str, promised: int, guaranteed: int
    ) -> ProhibitedCPUAllocationError:
        return cls(
            "prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively allocated pool "
            f"below promised, (requested CPUs = {requested}, allocated CPUs = {allocated}, "
            f"promised CPUs = {promised}, guaranteed CPUs = {guaranteed})"
        )


class InconsistentCPUAllocationError(AdmissionRejected):
    """A container moving between exclusive and shared CPUs (R6.4)."""

    reason = "inconsistentCPUAllocationError"

    @classmethod
    def to_shared(cls, requested: str, allocated: str) -> InconsistentCPUAllocationError:
        # The double space is upstream's.
        return cls(
            "inconsistentCPUAllocation Error: Not allowed to move a container from  exclusively allocated pool to "
            f"shared pool, not allowed (requested CPUs = {requested}, allocated CPUs = {allocated})"
        )

    @classmethod
    def to_exclusive(cls, requested: str, allocated: str) -> InconsistentCPUAllocationError:
        return cls(
            "inconsistentCPUAllocation Error: Not allowed to move a container from shared pool to exclusively "
            f"allocated pool, (requested CPUs = {requested}, allocated CPUs = {allocated})"
        )


class GetOriginalCPUSetError(AdmissionRejected):
    """An exclusive container whose original CPUs are not in the state (R6.4)."""

    reason = "getOriginalCPUSetError"

    @classmethod
    def missing(cls, pod_uid: str, container_name: str) -> GetOriginalCPUSetError:
        return cls(
            "getOriginalCPUSet Error: Skip resize, unable to get OriginalCPUSet, nothing to be done, "
            f"(podUID = {pod_uid}, containerName {container_name})"
        )


class ResizeAllocateCPUsError(AdmissionRejected):
    """The new size can never be placed under the Topology Manager policy, or CPU selection failed (R6.4)."""

    reason = "resizeAllocateCPUsError"

    @classmethod
    def because(cls, cause: str) -> ResizeAllocateCPUsError:
        return cls(f"resizeAllocateCPUs Error: {cause}")
