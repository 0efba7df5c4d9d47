"""Node configuration in the kubelet's own field names (``KubeletConfiguration``).

Parsing here only checks shapes and turns quantities into integers; each
manager validates its own part when the engine is built (the kubelet's startup
checks), so an impossible configuration is refused before any pod is seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from enforcer.errors import ConfigError
from enforcer.features import FeatureGates
from shared import quantity
from shared.cpuset import CPUSet
from shared.errors import DomainError
from shared.resources import quantity_to_int

Compatibility = Literal["extended", "kubelet"]

DEFAULT_EVICTION_MEMORY = 100 * 1024 * 1024  # kubelet default evictionHard memory.available=100Mi

_KNOWN_FIELDS = {
    "featureGates",
    "cpuManagerPolicy",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "reservedSystemCPUs",
    "kubeReserved",
    "systemReserved",
    "evictionHard",
    "memoryManagerPolicy",
    "reservedMemory",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "cpuCFSQuotaPeriod",
    "apiVersion",
    "kind",
}


@dataclass(frozen=True)
class NodeConfig:
    """What the engine needs from the kubelet configuration, parsed."""

    name: str = "node"
    compatibility: Compatibility = "extended"
    gates: FeatureGates = field(default_factory=FeatureGates)
    cpu_manager_policy: str = "none"
    cpu_manager_policy_options: Mapping[str, str] = field(default_factory=dict)
    reserved_system_cpus: CPUSet | None = None
    kube_reserved: Mapping[str, int] = field(default_factory=dict)
    system_reserved: Mapping[str, int] = field(default_factory=dict)
    eviction_hard_memory: int = DEFAULT_EVICTION_MEMORY
    memory_manager_policy: str = "None"
    reserved_memory: tuple[Mapping[str, Any], ...] = ()
    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    topology_manager_policy_options: Mapping[str, str] = field(default_factory=dict)
    cpu_cfs_quota_period_us: int = 100_000

    @property
    def reserved_cpu_millis(self) -> int:
        """kube-reserved + system-reserved cpu (R1.2)."""
        return self.kube_reserved.get("cpu", 0) + self.system_reserved.get("cpu", 0)

    def to_kubelet(self) -> dict[str, Any]:
        """The configuration back in kubelet field names (for fingerprints and the API)."""
        doc: dict[str, Any] = {
            "featureGates": self.gates.to_map(),
            "cpuManagerPolicy": self.cpu_manager_policy,
            "cpuManagerPolicyOptions": dict(self.cpu_manager_policy_options),
            "kubeReserved": {k: _fmt(k, v) for k, v in self.kube_reserved.items()},
            "systemReserved": {k: _fmt(k, v) for k, v in self.system_reserved.items()},
            "evictionHard": {"memory.available": quantity.format_bytes(self.eviction_hard_memory)},
            "memoryManagerPolicy": self.memory_manager_policy,
            "reservedMemory": [dict(r) for r in self.reserved_memory],
            "topologyManagerPolicy": self.topology_manager_policy,
            "topologyManagerScope": self.topology_manager_scope,
            "topologyManagerPolicyOptions": dict(self.topology_manager_policy_options),
        }
        if self.reserved_system_cpus is not None:
            doc["reservedSystemCPUs"] = str(self.reserved_system_cpus)
        return doc


def _fmt(name: str, value: int) -> str:
    return quantity.format_millicores(value) if name == "cpu" else quantity.format_bytes(value)


def _resource_map(raw: object, path: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: expected a map of resource name to quantity")
    out: dict[str, int] = {}
    for name, value in raw.items():
        try:
            q = quantity.parse(value, field=f"{path}.{name}")
        except DomainError as err:
            raise ConfigError(str(err)) from None
        if q.value < 0:
            raise ConfigError(f"{path}.{name}: must not be negative")
        out[str(name)] = quantity_to_int(str(name), q)
    return out


def _string_map(raw: object, path: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: expected a map of option name to value")
    out: dict[str, str] = {}
    for k, v in raw.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        if not isinstance(v, str | int):
            raise ConfigError(f"{path}.{k}: expected a string value")
        out[str(k)] = str(v)
    return out


def _string(raw: Mapping[str, Any], key: str, default: str) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"kubelet.{key}: expected a string, got {value!r}")
    return value


def from_kubelet(raw: object, *, name: str = "node", compatibility: str = "extended") -> NodeConfig:
    """Parse a ``kubelet`` section (KubeletConfiguration field names)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError("kubelet: expected a map of KubeletConfiguration fields")
    unknown = sorted(set(raw) - _KNOWN_FIELDS)
    if unknown:
        raise ConfigError(f"kubelet: unknown or unsupported fields: {', '.join(map(str, unknown))}")
    if compatibility not in ("extended", "kubelet"):
        raise ConfigError(f"compatibility: must be 'extended' or 'kubelet', got {compatibility!r}")
    gates_raw = raw.get("featureGates")
    if gates_raw is not None and not isinstance(gates_raw, Mapping):
        raise ConfigError("kubelet.featureGates: expected a map of gate name to true/false")
    gates = FeatureGates.from_map(gates_raw)

    reserved_cpus: CPUSet | None = None
    if raw.get("reservedSystemCPUs") not in (None, ""):
        text = raw["reservedSystemCPUs"]
        try:
            reserved_cpus = CPUSet.parse(str(text))
        except DomainError as err:
            raise ConfigError(f"kubelet.reservedSystemCPUs: {err}") from None

    eviction = raw.get("evictionHard")
    eviction_memory = DEFAULT_EVICTION_MEMORY
    if eviction is not None:
        if not isinstance(eviction, Mapping):
            raise ConfigError("kubelet.evictionHard: expected a map of signal to threshold")
        threshold = eviction.get("memory.available")
        if threshold is None:
            eviction_memory = 0
        elif isinstance(threshold, str) and threshold.endswith("%"):
            raise ConfigError("kubelet.evictionHard.memory.available: percentage thresholds are not supported")
        else:
            eviction_memory = _resource_map({"memory": threshold}, "kubelet.evictionHard")["memory"]

    reserved_memory = raw.get("reservedMemory") or []
    if not isinstance(reserved_memory, list) or not all(isinstance(r, Mapping) for r in reserved_memory):
        raise ConfigError("kubelet.reservedMemory: expected a list of {numaNode, limits}")

    period = 100_000
    if raw.get("cpuCFSQuotaPeriod") is not None:
        text = str(raw["cpuCFSQuotaPeriod"])
        units = {"us": 1, "ms": 1000, "s": 1_000_000}
        for unit, factor in units.items():
            if text.endswith(unit) and text[: -len(unit)].isdigit():
                period = int(text[: -len(unit)]) * factor
                break
        else:
            raise ConfigError(f"kubelet.cpuCFSQuotaPeriod: expected a duration such as 100ms, got {text!r}")

    kube_reserved = _resource_map(raw.get("kubeReserved"), "kubelet.kubeReserved")
    system_reserved = _resource_map(raw.get("systemReserved"), "kubelet.systemReserved")
    return NodeConfig(
        name=name,
        compatibility=compatibility,  # type: ignore[arg-type]
        gates=gates,
        cpu_manager_policy=_string(raw, "cpuManagerPolicy", "none"),
        cpu_manager_policy_options=_string_map(raw.get("cpuManagerPolicyOptions"), "kubelet.cpuManagerPolicyOptions"),
        reserved_system_cpus=reserved_cpus,
        kube_reserved=kube_reserved,
        system_reserved=system_reserved,
        eviction_hard_memory=eviction_memory,
        memory_manager_policy=_string(raw, "memoryManagerPolicy", "None"),
        reserved_memory=tuple(reserved_memory),
        topology_manager_policy=_string(raw, "topologyManagerPolicy", "none"),
        topology_manager_scope=_string(raw, "topologyManagerScope", "container"),
        topology_manager_policy_options=_string_map(
            raw.get("topologyManagerPolicyOptions"), "kubelet.topologyManagerPolicyOptions"
        ),
        cpu_cfs_quota_period_us=period,
    )
