"""Errors of the enforcer and its engine.

``AdmissionRejected`` subclasses carry the kubelet's reason strings, which reach
users through the enforcer API and the webhook's denials: they are a contract.
``ConfigError`` is raised when a node configuration cannot work, with the
kubelet's own message where one exists.
"""

from __future__ import annotations

from typing import ClassVar


class EnforcerError(Exception):
    """Base class of every enforcer error."""

    reason: ClassVar[str] = "EnforcerError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(EnforcerError):
    """The node configuration (kubelet fields, topology) is impossible."""

    reason = "ConfigError"


class TopologyError(ConfigError):
    """A topology document or sysfs tree cannot be read into a machine model."""

    reason = "InvalidTopology"


class AdmissionRejected(EnforcerError):
    """A pod (or resize) the node refuses; ``reason`` is the kubelet's reason string."""

    reason = "UnexpectedAdmissionError"


class TopologyAffinityError(AdmissionRejected):
    """The Topology Manager policy found no acceptable NUMA alignment."""

    reason = "TopologyAffinityError"

    def __init__(self, message: str = "Resources cannot be allocated with Topology locality") -> None:
        super().__init__(message)


class PodLevelTopologyAffinityError(TopologyAffinityError):
    """The kubelet's ``PodLevelTopologyAffinityError``: same reason, its message prefixed with ``Pod Scope``."""

    POD_SCOPE = "pod with pod-level resources failed admission under pod-scope topology manager"
    """What ``admitUsingPodResources`` says when the merge refuses a KEP-5526 pod (pod scope)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(
            f"Pod Scope {message}" if message else "Pod Scope Resources cannot be allocated with Topology locality"
        )


class SMTAlignmentError(AdmissionRejected):
    """``full-pcpus-only`` refused a request that is not whole physical cores."""

    reason = "SMTAlignmentError"

    def __init__(
        self, message: str, *, requested_cpus: int, cpus_per_core: int, available_physical_cpus: int = 0
    ) -> None:
        super().__init__(message)
        self.requested_cpus = requested_cpus
        self.cpus_per_core = cpus_per_core
        self.available_physical_cpus = available_physical_cpus

    @classmethod
    def not_multiple(cls, requested: int, per_core: int) -> SMTAlignmentError:
        return cls(
            f"SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {per_core}",
            requested_cpus=requested,
            cpus_per_core=per_core,
        )

    @classmethod
    def not_enough_physical(cls, requested: int, per_core: int, available: int) -> SMTAlignmentError:
        return cls(
            "SMT Alignment Error: not enough free physical CPUs: "
            f"available physical CPUs = {available}, requested CPUs = {requested}, CPUs per core = {per_core}",
            requested_cpus=requested,
            cpus_per_core=per_core,
            available_physical_cpus=available,
        )


class ResizeDeferred(AdmissionRejected):
    """A resize fits the node but not what is free now: queued and retried when room appears.

    The reason is the ``PodResizePending`` condition's ``Deferred``; both managers raise it."""

    reason = "Deferred"


class EmptyPodSharedPoolError(AdmissionRejected):
    """Pod-level exclusive slices leave nothing for the pod's shared containers."""

    reason = "EmptyPodSharedPoolError"


class UnexpectedAdmissionError(AdmissionRejected):
    """A provider failed to allocate after the merge admitted the pod."""

    reason = "UnexpectedAdmissionError"

    @classmethod
    def allocate_failed(cls, cause: str) -> UnexpectedAdmissionError:
        return cls(f"Allocate failed due to {cause}, which is unexpected")


class CPUAllocationError(EnforcerError):
    """takeByTopology could not satisfy a request (wrapped into an admission error by the policy)."""

    reason = "CPUAllocationError"


class MemoryAllocationError(EnforcerError):
    """The memory manager could not place a request (wrapped into an admission error by the policy)."""

    reason = "MemoryAllocationError"
