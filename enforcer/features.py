"""Kubelet feature gates that change the engine's decisions.

Defaults are the kubelet v1.36 defaults: PodLevelResources is beta (on),
PodLevelResourceManagers is alpha (off), InPlacePodVerticalScaling is GA.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from enforcer.errors import ConfigError

_FIELDS = {
    "PodLevelResources": "pod_level_resources",
    "PodLevelResourceManagers": "pod_level_resource_managers",
    "InPlacePodVerticalScaling": "in_place_pod_vertical_scaling",
    "InPlacePodLevelResourcesVerticalScaling": "in_place_pod_level_resources_vertical_scaling",
    "CPUManagerPolicyAlphaOptions": "cpu_manager_policy_alpha_options",
    "CPUManagerPolicyBetaOptions": "cpu_manager_policy_beta_options",
    "TopologyManagerPolicyAlphaOptions": "topology_manager_policy_alpha_options",
    "TopologyManagerPolicyBetaOptions": "topology_manager_policy_beta_options",
    "TopologyManagerPolicyOptions": "topology_manager_policy_options",
    "DisableCPUQuotaWithExclusiveCPUs": "disable_cpu_quota_with_exclusive_cpus",
}

# Gates earlier versions parsed (and recorded in saved states) but no decision read.
# ``InPlacePodVerticalScalingExclusiveCPUs`` is KEP-5554's, an alpha target of v1.37 that a v1.36
# kubelet does not have; exclusive CPUs are resized by the ``extended`` compatibility mode instead, so a
# gate for it would be a second switch for one thing. Like any gate of another component it is ignored.
RETIRED_GATES = frozenset({"InPlacePodVerticalScalingExclusiveCPUs"})


@dataclass(frozen=True, slots=True)
class FeatureGates:
    pod_level_resources: bool = True
    pod_level_resource_managers: bool = False
    in_place_pod_vertical_scaling: bool = True
    in_place_pod_level_resources_vertical_scaling: bool = True
    cpu_manager_policy_alpha_options: bool = False
    cpu_manager_policy_beta_options: bool = True
    topology_manager_policy_alpha_options: bool = False
    topology_manager_policy_beta_options: bool = True
    topology_manager_policy_options: bool = True
    disable_cpu_quota_with_exclusive_cpus: bool = True

    @property
    def pod_level_managers_enabled(self) -> bool:
        """Both gates KEP-5526 needs (R1.1)."""
        return self.pod_level_resources and self.pod_level_resource_managers

    @classmethod
    def from_map(cls, gates: Mapping[str, object] | None) -> FeatureGates:
        """Read ``featureGates`` from a KubeletConfiguration; unknown gates are ignored as the
        kubelet ignores gates of other components, but values must be booleans."""
        values: dict[str, bool] = {}
        for name, value in (gates or {}).items():
            if not isinstance(value, bool):
                raise ConfigError(f"featureGates.{name}: expected true or false, got {value!r}")
            attr = _FIELDS.get(str(name))
            if attr is not None:
                values[attr] = value
        return cls(**values)

    def to_map(self) -> dict[str, bool]:
        return {name: getattr(self, attr) for name, attr in _FIELDS.items()}
