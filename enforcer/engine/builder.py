"""Composition root of the engine: the only module that names concrete policies.

Building validates the whole configuration the way the kubelet does at
startup (reserved CPUs, policy options, reserved memory, topology manager
limits), so an impossible node is refused before it admits anything.
"""

from __future__ import annotations

from typing import Any

from enforcer.cpumanager import options as cpu_options
from enforcer.cpumanager.policy_none import NonePolicy as CPUNonePolicy
from enforcer.cpumanager.policy_static import StaticPolicy as CPUStaticPolicy
from enforcer.engine.config import NodeConfig
from enforcer.engine.node import NodeEngine
from enforcer.errors import ConfigError
from enforcer.memorymanager import config as memory_config
from enforcer.memorymanager.policy_none import NoneMemoryPolicy
from enforcer.memorymanager.policy_static import StaticMemoryPolicy
from enforcer.topology import options as topology_options
from enforcer.topology import policy as topology_policy
from enforcer.topology.machine import CPUTopology

CPU_POLICIES = ("none", "static")
MEMORY_POLICIES = ("None", "Static")


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
    tm_policy = topology_policy.new_policy(
        config.topology_manager_policy, list(topology.numa_ids), tm_options, topology.distances
    )

    cpu_policy: Any
    if config.cpu_manager_policy == "none":
        cpu_policy = CPUNonePolicy(topology, config.cpu_manager_policy_options)
    elif config.cpu_manager_policy == "static":
        options = cpu_options.parse(
            config.cpu_manager_policy_options,
            gates=config.gates,
            topology=topology,
            topology_manager_policy=config.topology_manager_policy,
        )
        cpu_policy = CPUStaticPolicy(
            topology,
            reserved_system_cpus=config.reserved_system_cpus,
            reserved_cpu_millis=config.reserved_cpu_millis,
            options=options,
            gates=config.gates,
            topology_manager_policy=config.topology_manager_policy,
        )
    else:
        raise ConfigError(f"unknown policy: \"{config.cpu_manager_policy}\"")

    memory_policy: Any
    if config.memory_manager_policy == "None":
        memory_policy = NoneMemoryPolicy()
    elif config.memory_manager_policy == "Static":
        eviction = {"memory.available": config.eviction_hard_memory} if config.eviction_hard_memory else {}
        reserved = memory_config.system_reserved_memory(
            topology,
            list(config.reserved_memory),
            kube_reserved=config.kube_reserved,
            system_reserved=config.system_reserved,
            eviction_hard=eviction,
        )
        memory_policy = StaticMemoryPolicy(topology, reserved_memory=reserved, gates=config.gates)
    else:
        raise ConfigError(f"unknown policy: \"{config.memory_manager_policy}\"")

    return NodeEngine(
        topology, config, cpu_policy=cpu_policy, memory_policy=memory_policy, topology_policy=tm_policy
    )


def restore(topology: CPUTopology, config: NodeConfig, snapshot: dict[str, Any]) -> NodeEngine:
    """An engine holding a snapshot's state, after checking it belongs to this machine and configuration."""
    engine = build(topology, config)
    if snapshot.get("version") != 1:
        raise ConfigError(f"state snapshot version {snapshot.get('version')!r} is not supported")
    if snapshot.get("topology") != topology.to_document():
        raise ConfigError("state was saved on a different machine topology")
    if snapshot.get("config") != config.to_kubelet():
        raise ConfigError("state was saved under a different kubelet configuration (policies, reservations or gates)")
    cpu_state = engine.cpu_policy.state_from_dict(snapshot["cpu"])
    memory_state = engine.memory_policy.state_from_dict(snapshot["memory"])
    engine.restore(snapshot, cpu_state=cpu_state, memory_state=memory_state)
    problems = engine.check()
    if problems:
        raise ConfigError("restored state is inconsistent: " + "; ".join(problems[:5]))
    return engine
