"""Composition root of the engine: the only module that names concrete policies.

It builds the kubelet's managers for one node (``NewManager`` of the CPU, memory and Topology
Managers), picking each policy by its configured name, and wires them into a :class:`NodeEngine`.

Building validates the whole configuration the way the kubelet does at
startup (reserved CPUs, policy options, reserved memory, topology manager
limits), so an impossible node is refused before it admits anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from enforcer.cpumanager import options as cpu_options
from enforcer.cpumanager.policy import CPUPolicy
from enforcer.cpumanager.policy_none import NonePolicy as CPUNonePolicy
from enforcer.cpumanager.policy_static import StaticPolicy as CPUStaticPolicy
from enforcer.engine.config import NodeConfig
from enforcer.engine.node import NodeEngine
from enforcer.errors import ConfigError
from enforcer.features import RETIRED_GATES
from enforcer.memorymanager import config as memory_config
from enforcer.memorymanager.policy import MemoryPolicy
from enforcer.memorymanager.policy_none import NoneMemoryPolicy
from enforcer.memorymanager.policy_static import StaticMemoryPolicy
from enforcer.topology import options as topology_options
from enforcer.topology.machine import CPUTopology
from enforcer.topology.manager import TopologyManager
from enforcer.topology.numa_info import NUMAInfo
from enforcer.topology.policy import TopologyPolicy
from enforcer.topology.policy_best_effort import BestEffortPolicy
from enforcer.topology.policy_none import NonePolicy as TopologyNonePolicy
from enforcer.topology.policy_restricted import RestrictedPolicy
from enforcer.topology.policy_single_numa_node import SingleNumaNodePolicy
from shared import pod_level

TopologyPolicyFactory = Callable[[NUMAInfo, topology_options.TopologyManagerOptions], TopologyPolicy]

TOPOLOGY_POLICIES: dict[str, TopologyPolicyFactory] = {
    topology_options.POLICY_NONE: TopologyNonePolicy,
    topology_options.POLICY_BEST_EFFORT: BestEffortPolicy,
    topology_options.POLICY_RESTRICTED: RestrictedPolicy,
    topology_options.POLICY_SINGLE_NUMA_NODE: SingleNumaNodePolicy,
}
"""The Topology Manager policies by ``topologyManagerPolicy`` name, in the kubelet's order."""


def new_topology_policy(
    name: str,
    numa_ids: Sequence[int],
    opts: topology_options.TopologyManagerOptions | None = None,
    distances: Mapping[int, Sequence[int]] | None = None,
) -> TopologyPolicy:
    """Build a Topology Manager policy by name (the policy part of kubelet ``topologymanager.NewManager``).

    Raises :class:`ConfigError` for an unknown name, or when prefer-closest lacks
    distances. The NUMA-count limit (P5) is :func:`topology_options.check_startup`'s job.
    """
    factory = TOPOLOGY_POLICIES.get(name)
    if factory is None:
        raise ConfigError(f'unknown policy: "{name}"')
    opts = opts or topology_options.TopologyManagerOptions()
    if name == topology_options.POLICY_NONE:
        return factory(NUMAInfo(tuple(numa_ids)), opts)
    numa_info = NUMAInfo.build(numa_ids, distances, need_distances=opts.prefer_closest_numa)
    return factory(numa_info, opts)


def build(topology: CPUTopology, config: NodeConfig) -> NodeEngine:
    """A fresh engine for this machine and configuration; raises ConfigError with the kubelet's message."""
    tm_options = topology_options.check_startup(
        policy_name=config.topology_manager_policy,
        scope_name=config.topology_manager_scope,
        numa_ids=list(topology.numa_ids),
        raw_options=config.topology_manager_policy_options or None,
        distances=topology.distances,
        policy_options_gate=config.gates.topology_manager_policy_options,
    )
    tm_policy = new_topology_policy(
        config.topology_manager_policy, list(topology.numa_ids), tm_options, topology.distances
    )
    gates = config.gates
    topology_manager = TopologyManager(
        tm_policy,
        config.topology_manager_scope,
        allocates_pod=lambda pod: pod_level.managers_apply(pod, managers_enabled=gates.pod_level_managers_enabled),
    )
    return NodeEngine(
        topology,
        config,
        cpu_policy=_cpu_policy(topology, config),
        memory_policy=_memory_policy(topology, config),
        topology_manager=topology_manager,
    )


def _cpu_policy(topology: CPUTopology, config: NodeConfig) -> CPUPolicy:
    """The CPU Manager policy by ``cpuManagerPolicy`` name, its options checked as the kubelet does."""
    if config.cpu_manager_policy == "none":
        return CPUNonePolicy(topology, config.cpu_manager_policy_options)
    if config.cpu_manager_policy == "static":
        options = cpu_options.parse(
            config.cpu_manager_policy_options,
            gates=config.gates,
            topology=topology,
            topology_manager_policy=config.topology_manager_policy,
        )
        return CPUStaticPolicy(
            topology,
            reserved_system_cpus=config.reserved_system_cpus,
            reserved_cpu_millis=config.reserved_cpu_millis,
            options=options,
            gates=config.gates,
            topology_manager_policy=config.topology_manager_policy,
            init_reuse_pins_hints=config.compatibility == "kubelet",  # kubernetes#123816 fixed in extended
        )
    raise ConfigError(f'unknown policy: "{config.cpu_manager_policy}"')


def _memory_policy(topology: CPUTopology, config: NodeConfig) -> MemoryPolicy:
    """The Memory Manager policy by ``memoryManagerPolicy`` name, its reservation checked as the kubelet does."""
    if config.memory_manager_policy == "None":
        return NoneMemoryPolicy()
    if config.memory_manager_policy == "Static":
        eviction = {"memory.available": config.eviction_hard_memory} if config.eviction_hard_memory else {}
        reserved = memory_config.system_reserved_memory(
            topology,
            list(config.reserved_memory),
            kube_reserved=config.kube_reserved,
            system_reserved=config.system_reserved,
            eviction_hard=eviction,
        )
        return StaticMemoryPolicy(topology, reserved_memory=reserved, gates=config.gates)
    raise ConfigError(f'unknown policy: "{config.memory_manager_policy}"')


def restore(topology: CPUTopology, config: NodeConfig, snapshot: dict[str, Any]) -> NodeEngine:
    """An engine holding a snapshot's state, after checking it belongs to this machine and configuration."""
    engine = build(topology, config)
    if snapshot.get("version") != 1:
        raise ConfigError(f"state snapshot version {snapshot.get('version')!r} is not supported")
    if snapshot.get("topology") != topology.to_document():
        raise ConfigError("state was saved on a different machine topology")
    if _without_retired_gates(snapshot.get("config")) != config.to_kubelet():
        raise ConfigError("state was saved under a different kubelet configuration (policies, reservations or gates)")
    cpu_state = engine.cpu_policy.state_from_dict(snapshot["cpu"])
    memory_state = engine.memory_policy.state_from_dict(snapshot["memory"])
    engine.restore(snapshot, cpu_state=cpu_state, memory_state=memory_state)
    problems = engine.check()
    if problems:
        raise ConfigError("restored state is inconsistent: " + "; ".join(problems[:5]))
    return engine


def _without_retired_gates(saved: object) -> object:
    """The saved kubelet configuration as this version records it: states written before a gate was
    retired (:data:`~enforcer.features.RETIRED_GATES`) name it in ``featureGates``; it changed nothing."""
    if not isinstance(saved, dict) or not isinstance(saved.get("featureGates"), dict):
        return saved
    gates = {name: value for name, value in saved["featureGates"].items() if name not in RETIRED_GATES}
    return {**saved, "featureGates": gates}
