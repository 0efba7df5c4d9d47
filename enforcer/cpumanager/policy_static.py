"""The ``static`` CPU manager policy, with KEP-5526 pod-level resource managers for CPU.

A port of the kubelet's ``cpumanager/policy_static.go`` (pod-level-aware version) and the CPU parts
of ``cpu_manager.go``; rule numbers refer to ``shared/spec/cpu-manager.md`` (R*, §*) and
``shared/spec/pod-level-resource-managers.md`` (PLR R*, V*, M*).

The policy keeps four sets of logical CPUs:

- SHARED (the state's default set): Burstable, BestEffort and non-integer Guaranteed containers run
  here.  It starts as every CPU (every CPU but the reserved ones under strict-cpu-reservation) and
  shrinks and grows as exclusive assignments are made and released.
- RESERVED: never handed out exclusively; fixed for the policy's lifetime (R1.2-R1.4).
- ASSIGNABLE = SHARED - RESERVED: the only source of new exclusive CPUs (R1.6), plus the CPUs of the
  pod's finished init containers (§5).
- EXCLUSIVE: container entries in the state, and under KEP-5526 pod scope a whole-pod bubble that is
  partitioned into exclusive slices and one pod shared pool.

The policy itself holds only configuration.  It does not merge hints (the Topology Manager does), does
not decide between container and pod scope (the engine does), and does not choose individual CPUs
(:mod:`enforcer.cpumanager.assignment` does).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

from enforcer.counters import AllocationCounters
from enforcer.cpumanager import assignment
from enforcer.cpumanager import resize as cpu_resize
from enforcer.cpumanager.options import StaticPolicyOptions
from enforcer.cpumanager.policy import (
    CPUPolicy,
    CPUResizePlan,
    CPUResizer,
    IsolationLevel,
    ResizeAlignment,
)
from enforcer.cpumanager.policy_none import check_state_policy_name
from enforcer.cpumanager.state import CPUState
from enforcer.errors import (
    ConfigError,
    CPUAllocationError,
    EmptyPodSharedPoolError,
    SMTAlignmentError,
    UnexpectedAdmissionError,
)
from enforcer.features import FeatureGates
from enforcer.topology import hint_masks
from enforcer.topology.family_memo import FamilyMemo
from enforcer.topology.hints import ProviderHints, TopologyHint
from enforcer.topology.machine import CPUTopology
from shared import pod_level
from shared.contract import CFSQuota
from shared.cpuset import EMPTY, CPUSet
from shared.qos import qos_class
from shared.resources import CPU, ContainerResources, PodResources

log = logging.getLogger(__name__)

POLICY_STATIC = "static"

RESERVATION_REQUIRED = (
    "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"
)


@dataclass(frozen=True, slots=True)
class _NUMACombination:
    """One non-empty set of NUMA nodes, with what hint generation needs precomputed."""

    numa_mask: int
    cpu_mask: int
    size: int
    total_cpus: int
    sockets: int


def _numa_combinations(topology: CPUTopology, max_size: int) -> tuple[_NUMACombination, ...]:
    """The NUMA sets of at most ``max_size`` nodes, and the whole machine, in ``bitmask.IterateBitMasks`` order
    (every set from ``max_size`` = the NUMA count, as the kubelet; see :mod:`enforcer.topology.hint_masks`)."""
    numa_ids = sorted(topology.numa_masks)
    result: list[_NUMACombination] = []
    for combo in hint_masks.candidate_masks(numa_ids, max_size, always=[tuple(numa_ids)]):
        numa_mask = 0
        cpu_mask = 0
        sockets: set[int] = set()
        for numa in combo:
            numa_mask |= 1 << numa
            cpu_mask |= topology.numa_masks[numa]
            sockets.update(topology.sockets_of_numa.get(numa, ()))
        result.append(_NUMACombination(numa_mask, cpu_mask, len(combo), cpu_mask.bit_count(), len(sockets)))
    return tuple(result)


def reserved_cpu_count(reserved_system_cpus: CPUSet | None, reserved_cpu_millis: int) -> int:
    """R1.2: how many CPUs to reserve.

    ``reservedSystemCPUs`` overrides kube-/system-reserved cpu with its own size (the kubelet rewrites
    ``systemReserved.cpu`` to it at startup), so only the millicore path can be zero.
    """
    if reserved_system_cpus:
        return len(reserved_system_cpus)
    if reserved_cpu_millis <= 0:
        raise ConfigError(RESERVATION_REQUIRED)
    return math.ceil(reserved_cpu_millis / 1000)


HINT_CACHE_ENTRIES = 256
"""Distinct (machine, socket option, free CPUs, reusable CPUs, request) inputs whose hints are kept
(about 4 KB each with their generated layers: at most about 1 MB, in the enforcer too)."""

_HintKey = tuple[int, bool, int, int, int]  # id(topology), align-by-socket, available mask, reusable mask, request
_Hints = hint_masks.LayeredHints | list[TopologyHint]

# The CPU hint family of each distinct input (FamilyMemo says why).  Replicas of one machine kind share one
# topology object and often have the same CPUs free: a third of the families the extender's dry runs asked for
# had been computed before (``bench.bench_extender dry-runs``, 256 entries; 45% with 4,096).  A family reads only
# the topology (and the combinations derived from it), the align-by-socket option and the three numbers of the
# key, all immutable, so a shared one answers exactly as a new one would.  The entry holds its topology, so the
# id in the key cannot be reused while the entry lives.  ``[]`` (not even the whole machine fits) is cheap and
# not kept.
_HINTS: FamilyMemo[_HintKey, tuple[CPUTopology, _Hints]] = FamilyMemo(HINT_CACHE_ENTRIES)


def _worth_keeping(entry: tuple[CPUTopology, _Hints]) -> bool:
    return isinstance(entry[1], hint_masks.LayeredHints)


class StaticPolicy:
    """Exclusive CPUs for Guaranteed containers with integer requests, and KEP-5526 pod bubbles."""

    name: str = POLICY_STATIC

    def __init__(
        self,
        topology: CPUTopology,
        *,
        reserved_system_cpus: CPUSet | None,
        reserved_cpu_millis: int,
        options: StaticPolicyOptions | Mapping[str, object] | None = None,
        gates: FeatureGates | None = None,
        topology_manager_policy: str = "none",
        init_reuse_pins_hints: bool = True,
    ) -> None:
        """The kubelet's ``NewManager`` + ``NewStaticPolicy``: raises ConfigError on an impossible setup.

        ``init_reuse_pins_hints=False`` is the ``extended`` engine's fix of kubernetes#123816 (see
        :meth:`get_topology_hints`); the default is the kubelet's rule.
        """
        self._configure(topology, options, gates, topology_manager_policy)
        self._init_reuse_pins_hints = init_reuse_pins_hints
        count = reserved_cpu_count(reserved_system_cpus, reserved_cpu_millis)
        self._set_reserved(count, reserved_system_cpus or EMPTY)

    @classmethod
    def with_reservation(
        cls,
        topology: CPUTopology,
        *,
        num_reserved_cpus: int,
        reserved_cpus: CPUSet = EMPTY,
        options: StaticPolicyOptions | Mapping[str, object] | None = None,
        gates: FeatureGates | None = None,
        topology_manager_policy: str = "none",
    ) -> StaticPolicy:
        """``NewStaticPolicy`` alone: the reservation already resolved to a count (zero allowed here,
        as in the kubelet, whose non-zero rule lives one layer up in the manager)."""
        policy = cls.__new__(cls)
        policy._configure(topology, options, gates, topology_manager_policy)
        policy._init_reuse_pins_hints = True
        policy._set_reserved(num_reserved_cpus, reserved_cpus)
        return policy

    def _configure(
        self,
        topology: CPUTopology,
        options: StaticPolicyOptions | Mapping[str, object] | None,
        gates: FeatureGates | None,
        topology_manager_policy: str,
    ) -> None:
        self._gates = gates if gates is not None else FeatureGates()
        if isinstance(options, StaticPolicyOptions):
            opts = options
            opts.check_exclusive_pairs()
        else:
            opts = StaticPolicyOptions.from_map(options, self._gates)
        opts.validate_for_machine(topology, topology_manager_policy)
        self._topology = topology
        self._options = opts
        self._cpu_group_size = topology.cpus_per_core()
        self._take_options = assignment.TakeOptions(
            algorithm="distributed" if opts.distribute_cpus_across_numa else "packed",
            cpu_group_size=self._cpu_group_size if opts.full_pcpus_only else 1,
            spread_across_cores=opts.distribute_cpus_across_cores,
            prefer_align_uncore=opts.prefer_align_cpus_by_uncorecache,
            align_by_socket=opts.align_by_socket,
        )
        # widest layer -> the NUMA combinations of at most that many nodes (and the whole machine)
        self._combinations: dict[int, tuple[_NUMACombination, ...]] = {}
        self._num_numa = len(topology.numa_masks)
        self._numa_per_socket = self._num_numa // topology.num_sockets

    def _set_reserved(self, num_reserved: int, reserved_cpus: CPUSet) -> None:
        """R1.3/R1.4: the reserved set, its sibling closure, and the kubelet's startup errors."""
        if reserved_cpus:
            reserved = reserved_cpus
        else:
            # Lowest-numbered whole cores first, e.g. 8 CPUs with HT pairs (0,4),(1,5)...: 2 -> {0,4}.
            try:
                reserved = self._take_raw(self._topology.all_cpus, num_reserved)
            except CPUAllocationError:
                reserved = EMPTY
        if len(reserved) != num_reserved:
            raise ConfigError(
                f"[cpumanager] unable to reserve the required amount of CPUs "
                f"(size of {reserved} did not equal {num_reserved})"
            )
        unknown = reserved - self._topology.all_cpus
        if unknown:
            raise ConfigError(
                "[cpumanager] unable to build the reserved physical CPUs from the reserved set: "
                f"unknown CPU ID: {unknown.first()} (reserved CPUs not on this machine: {unknown})"
            )
        self._reserved = reserved
        self._reserved_physical = self._topology.sibling_cpus(reserved)
        log.info(
            "reserved cpus not available for exclusive assignment",
            extra={"reserved": str(reserved), "reserved_physical": str(self._reserved_physical)},
        )

    # -- configuration views -------------------------------------------------------------
    @property
    def topology(self) -> CPUTopology:
        return self._topology

    @property
    def options(self) -> StaticPolicyOptions:
        return self._options

    @property
    def gates(self) -> FeatureGates:
        return self._gates

    @property
    def reserved_cpus(self) -> CPUSet:
        return self._reserved

    @property
    def reserved_physical_cpus(self) -> CPUSet:
        """R1.4: every CPU on a core that holds a reserved CPU (used by full-pcpus-only)."""
        return self._reserved_physical

    def allocatable_cpus(self) -> CPUSet:
        """``GetAllocatableCPUs``: the machine minus the reserved set."""
        return self._topology.all_cpus - self._reserved

    def available_cpus(self, state: CPUState) -> CPUSet:
        """R1.6 ``GetAvailableCPUs``: the default set minus the reserved set."""
        return state.default - self._reserved

    def available_physical_cpus(self, state: CPUState) -> CPUSet:
        return state.default - self._reserved_physical

    # -- state lifecycle -----------------------------------------------------------------
    def _initial_default(self) -> CPUSet:
        if self._options.strict_cpu_reservation:
            return self._topology.all_cpus - self._reserved
        return self._topology.all_cpus

    def new_state(self) -> CPUState:
        """R1.5: every CPU shared (every CPU but the reserved ones under strict reservation)."""
        return CPUState(policy_name=POLICY_STATIC, default=self._initial_default())

    def validate_state(self, state: CPUState) -> None:
        """``Start``/``validateState`` (R7.3, §4.5); an empty state is initialised in place."""
        check_state_policy_name(state, POLICY_STATIC)
        all_cpus = self._initial_default()
        default = state.default
        if not default:
            if state.entries:
                raise ConfigError("default cpuset cannot be empty")
            state.default = all_cpus
            return
        reserved = self._reserved
        if self._options.strict_cpu_reservation:
            if reserved & default:
                raise ConfigError(
                    f'some of strictly reserved cpus: "{reserved & default}" are present in defaultCpuSet: "{default}"'
                )
        elif not reserved.is_subset_of(default):
            raise ConfigError(f'not all reserved cpus: "{reserved}" are present in defaultCpuSet: "{default}"')
        for pod_uid, containers in state.entries.items():
            for container_name, cpus in containers.items():
                if cpus & default:
                    raise ConfigError(
                        f'pod: {pod_uid}, container: {container_name} cpuset: "{cpus}" '
                        f'overlaps with default cpuset "{default}"'
                    )
        known = default.mask
        for containers in state.entries.values():
            for cpus in containers.values():
                known |= cpus.mask
        if self._gates.pod_level_resource_managers:
            for cpus in state.pod_entries.values():
                known |= cpus.mask
        if known != all_cpus.mask:
            raise ConfigError(
                f'current set of available CPUs "{all_cpus}" '
                f'doesn\'t match with CPUs in state "{CPUSet.from_mask(known)}"'
            )

    # -- eligibility -----------------------------------------------------------------------
    def _pod_is_guaranteed(self, pod: PodResources) -> bool:
        return qos_class(pod, pod_level_resources_gate=self._gates.pod_level_resources) == "Guaranteed"

    def guaranteed_cpus(self, pod: PodResources, container: ContainerResources) -> int:
        """R1.7 ``guaranteedCPUs``: the exclusive CPU count of a container, 0 for the shared pool."""
        if not self._pod_is_guaranteed(pod):
            return 0
        return pod_level.container_exclusive_cpus(
            pod, container, pod_level_resource_managers=self._gates.pod_level_resource_managers
        )

    def pod_guaranteed_cpus(self, pod: PodResources) -> int:
        """``podGuaranteedCPUs``: the PLR budget (PLR R2.4), else the R5.5 aggregate of eligible counts."""
        if self._gates.pod_level_resource_managers and pod.pod_level_resources_set:
            return pod_level.pod_cpu_budget(pod) if self._pod_is_guaranteed(pod) else 0
        return pod_level.aggregate_exclusive_cpus(
            (container.kind, self.guaranteed_cpus(pod, container))
            for container in pod.containers
            if CPU in container.resources.requests
        )

    def validate_pod_scope_resources(self, pod: PodResources) -> str | None:
        """PLR §5 (V1-V6): the kubelet's rejection message when the pod shared pool would be empty."""
        members = []
        for container in (*pod.init_containers(), *pod.app_containers()):
            count = self.guaranteed_cpus(pod, container)
            members.append(pod_level.PoolMember(container.name, container.kind, {CPU: count} if count > 0 else None))
        violation = pod_level.check_pod_shared_pool({CPU: self.pod_guaranteed_cpus(pod)}, members).violation
        if violation is None:
            return None
        if violation.rule == "V1":
            return (
                f"pod rejected, largest exclusive init container requests {violation.requested} cpus, "
                f"but only {violation.available} available"
            )
        if violation.rule == "V2":
            return "pod rejected, pod has shared init containers but no cpus available for them"
        return (
            "pod rejected, sum of exclusive container cpu requests equals pod budget, "
            "leaving no cpus for shared containers"
        )

    def _take_raw(self, available: CPUSet, count: int) -> CPUSet:
        if count == 0:
            return EMPTY
        return assignment.take_by_topology(self._topology, available, count, self._take_options)

    def _take(self, available: CPUSet, count: int) -> CPUSet:
        """takeByTopology, with a selection failure turned into the kubelet's admission error (R2.8)."""
        try:
            return self._take_raw(available, count)
        except CPUAllocationError as err:
            raise UnexpectedAdmissionError.allocate_failed(err.message) from err

    def _aligned_cpus(self, numa_mask: int, allocatable: CPUSet) -> CPUSet:
        """``getAlignedCPUs``: the hint's NUMA nodes, widened to whole sockets under align-by-socket."""
        topo = self._topology
        mask = 0
        numa_ids = TopologyHint(numa_mask, True).numa_ids()
        if self._options.align_by_socket:
            for socket in {s for n in numa_ids for s in topo.sockets_of_numa.get(n, ())}:
                mask |= topo.socket_masks[socket]
        else:
            for numa in numa_ids:
                mask |= topo.numa_masks.get(numa, 0)
        return CPUSet.from_mask(allocatable.mask & mask)

    def _allocate_cpus(self, state: CPUState, count: int, numa_mask: int | None, reusable: CPUSet) -> CPUSet:
        """R2.4-R2.7 ``allocateCPUs``: aligned CPUs first, then the rest anywhere; leaves the default set."""
        allocatable = self.available_cpus(state) | reusable
        result = EMPTY
        if numa_mask is not None:
            aligned = self._aligned_cpus(numa_mask, allocatable)
            result = self._take(aligned, min(count, len(aligned)))
        result = result | self._take(allocatable - result, count - len(result))
        state.default = state.default - result
        return result

    def _enforce_smt_alignment(self, state: CPUState, count: int) -> None:
        """§4.1 full-pcpus-only: whole cores only, and enough of them outside the reserved cores."""
        if not self._options.full_pcpus_only:
            return
        if count % self._cpu_group_size:
            raise SMTAlignmentError.not_multiple(count, self._cpu_group_size)
        available = len(self.available_physical_cpus(state))
        if count > available:
            raise SMTAlignmentError.not_enough_physical(count, self._cpu_group_size, available)

    def _update_reusable(self, state: CPUState, pod: PodResources, container: ContainerResources, cpus: CPUSet) -> None:
        """§5 ``updateCPUsToReuse``: one pod at a time; regular init CPUs join, sidecar/app CPUs leave."""
        for uid in [uid for uid in state.reusable if uid != pod.uid]:
            del state.reusable[uid]
        current = state.reusable.get(pod.uid, EMPTY)
        if container.kind == "init":
            state.reusable[pod.uid] = current | cpus
        else:
            state.reusable[pod.uid] = current - cpus

    # -- hints -----------------------------------------------------------------------------
    def _combinations_up_to(self, max_size: int) -> tuple[_NUMACombination, ...]:
        cached = self._combinations.get(max_size)
        if cached is None:
            cached = self._combinations[max_size] = _numa_combinations(self._topology, max_size)
        return cached

    def _generate_hints(
        self, available: CPUSet, reusable: CPUSet, request: int
    ) -> hint_masks.LayeredHints | list[TopologyHint]:
        """R6.3 ``generateCPUTopologyHints`` (:meth:`_compute_hints`), shared by every policy on the same
        machine object and socket option that asks with equal inputs (``_HINTS``)."""
        topology = self._topology
        key = (id(topology), self._options.align_by_socket, available.mask, reusable.mask, request)
        return _HINTS.get(key, lambda: (topology, self._compute_hints(available, reusable, request)), _worth_keeping)[1]

    def _compute_hints(
        self, available: CPUSet, reusable: CPUSet, request: int
    ) -> hint_masks.LayeredHints | list[TopologyHint]:
        """R6.3 ``generateCPUTopologyHints``: every NUMA combination that can hold ``request``, as layers.

        A combination fits iff it holds every reusable CPU and ``|reusable| + free CPUs in it >= request``
        (a threshold family, see :mod:`enforcer.topology.hint_masks`); preferred iff it has as few NUMA
        nodes as the fewest whose CPUs (free or not) number ``request``, or spans the fewest sockets under
        align-by-socket.  ``[]`` when not even the whole machine fits.
        """
        topo = self._topology
        numa_ids = sorted(topo.numa_masks)
        reusable_mask = reusable.mask
        reusable_count = reusable_mask.bit_count()
        available_mask = available.mask
        free = {n: (available_mask & topo.numa_masks[n]).bit_count() for n in numa_ids}
        need = request - reusable_count
        if reusable_count + sum(free.values()) < request or reusable_mask & ~topo.all_cpus.mask:
            return []
        forced = 0
        for n in numa_ids:
            if reusable_mask & topo.numa_masks[n]:
                forced |= 1 << n
        capacities = [topo.numa_masks[n].bit_count() for n in numa_ids]
        min_affinity = min(hint_masks.min_size_for(capacities, request), self._num_numa)
        min_sockets = 0
        preferred_max = min_affinity
        if self._options.align_by_socket and self._numa_per_socket:
            min_sockets = -(-min_affinity // self._numa_per_socket)
            socket_ids = {s for n in numa_ids for s in topo.sockets_of_numa.get(n, ())}
            per_socket = sorted(
                (sum(1 for n in numa_ids if s in topo.sockets_of_numa.get(n, ())) for s in socket_ids), reverse=True
            )
            preferred_max = min(self._num_numa, max(min_affinity, sum(per_socket[:min_sockets])))
        positions = {n: i for i, n in enumerate(numa_ids)}
        forced_positions = sum(1 << positions[n] for n in numa_ids if forced >> n & 1)
        min_fit = hint_masks.min_cover_size([(free[n],) for n in numa_ids], (need,), forced=forced_positions)
        assert min_fit is not None  # the whole machine fits (checked above)

        def preferred(combo: _NUMACombination) -> bool:
            return (min_sockets > 0 and combo.sockets == min_sockets) or combo.size == min_affinity

        def generate(max_size: int) -> list[TopologyHint]:
            return [
                TopologyHint(combo.numa_mask, preferred(combo))
                for combo in self._combinations_up_to(max_size)
                if not reusable_mask & ~combo.cpu_mask
                and reusable_count + (available_mask & combo.cpu_mask).bit_count() >= request
            ]

        def hint_for(numa_mask: int) -> TopologyHint | None:
            cpu_mask = 0
            sockets: set[int] = set()
            for n in numa_ids:
                if numa_mask >> n & 1:
                    cpu_mask |= topo.numa_masks[n]
                    sockets.update(topo.sockets_of_numa.get(n, ()))
            if numa_mask & ~topo_bits or reusable_mask & ~cpu_mask:
                return None
            if reusable_count + (available_mask & cpu_mask).bit_count() < request:
                return None
            size = numa_mask.bit_count()
            combo = _NUMACombination(numa_mask, cpu_mask, size, cpu_mask.bit_count(), len(sockets))
            return TopologyHint(numa_mask, preferred(combo))

        topo_bits = sum(1 << n for n in numa_ids)
        return hint_masks.LayeredHints(
            numa_count=self._num_numa,
            min_fit_size=min_fit,
            preferred_size=min_affinity,
            preferred_max=preferred_max,
            superset_slack=forced.bit_count() + hint_masks.smallest_weights_count(free.values(), need),
            superset_floor=1,
            threshold=hint_masks.Threshold(topo_bits, forced, {n: (free[n],) for n in numa_ids}, (need,)),
            explicit=(),
            hint_for=hint_for,
            generate=generate,
        )

    def get_topology_hints(self, state: CPUState, pod: PodResources, container: ContainerResources) -> ProviderHints:
        """R6.1-R6.4 ``GetTopologyHints``."""
        requested = self.guaranteed_cpus(pod, container)
        if requested == 0 or pod_level.never_pinned(pod, managers_enabled=self._gates.pod_level_managers_enabled):
            return None
        allocated = state.container_cpus(pod.uid, container.name)
        if allocated is not None:
            # Restart path: regenerate from what the container holds; a size change cannot be honoured.
            if len(allocated) != requested:
                return {CPU: []}
            return {CPU: self._generate_hints(allocated, EMPTY, requested)}
        reusable = state.reusable.get(pod.uid, EMPTY)
        if not self._init_reuse_pins_hints:
            # kubernetes#123816: the kubelet only offers NUMA sets holding every CPU the pod's init containers
            # leave for reuse, so an app container that does not fit beside them is refused although another
            # NUMA node has room.  Here those CPUs count only where the set holds them (kubernetes PR #123820):
            # a set elsewhere is offered on its own free CPUs, and allocation takes them from it first.
            return {CPU: self._generate_hints(self.available_cpus(state) | reusable, EMPTY, requested)}
        return {CPU: self._generate_hints(self.available_cpus(state), reusable, requested)}

    def get_pod_topology_hints(self, state: CPUState, pod: PodResources) -> ProviderHints:
        """R6.5 / PLR §3 ``GetPodTopologyHints``: one hint set for the pod total or the PLR budget."""
        requested = self.pod_guaranteed_cpus(pod)
        if requested == 0 or pod_level.never_pinned(pod, managers_enabled=self._gates.pod_level_managers_enabled):
            return None
        plr_managed = self._gates.pod_level_resource_managers and pod.pod_level_resources_set
        if plr_managed and self.validate_pod_scope_resources(pod) is not None:
            return {CPU: []}  # PLR R3.2: unsatisfiable, so restricted/single-numa-node reject at merge
        assigned = EMPTY
        for container in pod.containers:
            allocated = state.container_cpus(pod.uid, container.name)
            if allocated is None:
                continue
            if len(allocated) != self.guaranteed_cpus(pod, container):
                return {CPU: []}
            assigned = assigned | allocated
        if len(assigned) == requested:
            return {CPU: self._generate_hints(assigned, EMPTY, requested)}
        reusable = state.reusable.get(pod.uid, EMPTY) | assigned
        return {CPU: self._generate_hints(self.available_cpus(state), reusable, requested)}

    # -- allocation ------------------------------------------------------------------------
    def allocate(
        self,
        state: CPUState,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None:
        """R2.1-R2.8 ``Allocate`` (container level; node-level exclusive CPUs).  Idempotent."""
        count = self.guaranteed_cpus(pod, container)
        if count == 0 or pod_level.never_pinned(pod, managers_enabled=self._gates.pod_level_managers_enabled):
            return
        try:
            self._enforce_smt_alignment(state, count)
            existing = state.container_cpus(pod.uid, container.name)
            if existing is not None:
                self._update_reusable(state, pod, container, existing)
                return
            reusable = state.reusable.get(pod.uid, EMPTY)
            cpus = self._allocate_cpus(state, count, None if affinity is None else affinity.mask, reusable)
        except (SMTAlignmentError, UnexpectedAdmissionError):
            counters.error(CPU, "node")  # M4
            raise
        state.set_container_cpus(pod.uid, container.name, cpus)
        state.record_original(pod.uid, container.name, cpus)
        self._update_reusable(state, pod, container, cpus)
        counters.allocation(CPU, "node")  # M3
        counters.assignment(CPU, "node_exclusive")
        log.debug(
            "cpus allocated",
            extra={"pod_uid": pod.uid, "container": container.name, "cpuset": str(cpus)},
        )

    def allocate_pod(
        self, state: CPUState, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters
    ) -> None:
        """PLR §4 ``AllocatePod`` (steps 1-7): one bubble for the pod, partitioned among its containers.

        The engine calls this only in pod scope for a PLR pod with both gates on; ``affinity`` is the
        hint stored for the pod's first container (init containers first).  Idempotent: a pod that
        already has a bubble keeps it.
        """
        total = self.pod_guaranteed_cpus(pod)  # step 1
        if total == 0:
            return
        if state.pod_cpus(pod.uid) is not None:
            # Re-admission (restart, retried admission) keeps the checkpointed bubble and partition:
            # the upstream fix for kubernetes/kubernetes#140989, where re-allocating leaked the first bubble.
            return
        try:
            rejection = self.validate_pod_scope_resources(pod)  # step 2
            if rejection is not None:
                raise EmptyPodSharedPoolError(rejection)
            self._enforce_smt_alignment(state, total)  # step 3
            bubble = self._allocate_cpus(state, total, None if affinity is None else affinity.mask, EMPTY)  # step 4
            state.set_pod_cpus(pod.uid, bubble)
            slices, pool = self._partition_bubble(pod, bubble, counters)  # steps 5-6
        except (EmptyPodSharedPoolError, SMTAlignmentError, UnexpectedAdmissionError):
            counters.error(CPU, "pod")  # M2
            raise
        for container in pod.containers:  # step 7
            cpus = slices.get(container.name)
            if cpus is None:
                state.set_container_cpus(pod.uid, container.name, pool)
                counters.assignment(CPU, "pod_shared")
            else:
                state.set_container_cpus(pod.uid, container.name, cpus)
                if self.guaranteed_cpus(pod, container) > 0:
                    state.record_original(pod.uid, container.name, cpus)
            counters.allocation(CPU, "pod")  # M1: every container, shared ones too
        log.debug("pod cpus allocated", extra={"pod_uid": pod.uid, "cpuset": str(bubble), "pool": str(pool)})

    def _partition_bubble(
        self, pod: PodResources, bubble: CPUSet, counters: AllocationCounters
    ) -> tuple[dict[str, CPUSet], CPUSet]:
        """PLR §4 steps 5-6: the slices decided so far (container -> cpuset) and the final pod shared pool."""
        slices: dict[str, CPUSet] = {}
        sidecar_cpus = EMPTY
        for container in pod.init_containers():
            count = self.guaranteed_cpus(pod, container)
            if count > 0:
                cpus = self._take(bubble - sidecar_cpus, count)
                counters.assignment(CPU, "pod_exclusive")
                slices[container.name] = cpus
                if container.is_sidecar:
                    sidecar_cpus = sidecar_cpus | cpus
            elif not container.is_sidecar:
                # A shared regular init container may burst over everything but the sidecars before it.
                counters.assignment(CPU, "pod_shared")
                slices[container.name] = bubble - sidecar_cpus
        pool = bubble - sidecar_cpus
        for container in pod.app_containers():
            count = self.guaranteed_cpus(pod, container)
            if count > 0:
                cpus = self._take(pool, count)
                counters.assignment(CPU, "pod_exclusive")
                slices[container.name] = cpus
                pool = pool - cpus
        return slices, pool

    def remove_container(self, state: CPUState, pod_uid: str, container_name: str) -> None:
        """``RemoveContainer``; under KEP-5526 the bubble returns only with the last container (PLR R8.1-R8.2)."""
        released = state.container_cpus(pod_uid, container_name)
        if released is None:
            return
        state.delete_container(pod_uid, container_name)
        if self._gates.pod_level_resource_managers:
            bubble = state.pod_cpus(pod_uid)
            if bubble is not None:
                if pod_uid not in state.entries:
                    state.default = state.default | bubble
                    state.delete_pod(pod_uid)
                return
        in_use = EMPTY
        for cpus in state.entries.get(pod_uid, {}).values():
            in_use = in_use | cpus
        state.default = state.default | (released - in_use)

    # -- in-place resize (extended mode; the rules live in enforcer.cpumanager.resize) -------
    @property
    def resizer(self) -> CPUResizer | None:
        return self

    def plan_resize(
        self, state: CPUState, old_pod: PodResources, new_pod: PodResources, alignment: ResizeAlignment
    ) -> CPUResizePlan | None:
        """Check the resize of the pod's exclusive CPUs and bubble against every permanent rule (KEP-5554,
        KEP-5526); raises the AdmissionRejected that makes it Infeasible, None when nothing changes."""
        return cpu_resize.plan_resize(self, state, old_pod, new_pod, alignment)

    def state_from_dict(self, doc: object) -> CPUState:
        """Read a saved state back and run the restart checks on it (kubelet checkpoint restore + ``Start``)."""
        state = CPUState.from_dict(doc)
        self.validate_state(state)
        return state

    def pod_uids(self, state: CPUState) -> list[str]:
        return state.pod_uids()

    # -- read API --------------------------------------------------------------------------
    def container_cpus(self, state: CPUState, pod_uid: str, container_name: str) -> CPUSet | None:
        return state.container_cpus(pod_uid, container_name)

    def pod_cpus(self, state: CPUState, pod_uid: str) -> CPUSet | None:
        return state.pod_cpus(pod_uid)

    def default_cpus(self, state: CPUState) -> CPUSet:
        return state.default

    def _qualifies_for_exclusive_cpus(self, container: ContainerResources) -> bool:
        """``resourcesQualifyForExclusiveCPUs``: Guaranteed-equivalent with an integer cpu limit."""
        return container.is_guaranteed_equivalent() and container.resources.limit(CPU) % 1000 == 0

    def isolation_level(self, state: CPUState, pod: PodResources, container: ContainerResources) -> IsolationLevel:
        """PLR R9.1 ``GetResourceIsolationLevel``."""
        if state.container_cpus(pod.uid, container.name) is None:
            return "host"
        if (
            self._gates.pod_level_resource_managers
            and pod.pod_level_resources_set
            and not self._qualifies_for_exclusive_cpus(container)
        ):
            return "pod"
        return "container"

    def container_has_exclusive_cpus(self, state: CPUState, pod: PodResources, container: ContainerResources) -> bool:
        """PLR R9.2 ``ContainerHasExclusiveCPUs``: only the ``container`` isolation level counts."""
        return self.isolation_level(state, pod, container) == "container"

    def pod_has_exclusive_cpus(self, state: CPUState, pod: PodResources) -> bool:
        return any(self.container_has_exclusive_cpus(state, pod, c) for c in pod.containers)

    def cfs_quota_level(self, state: CPUState, pod: PodResources, container: ContainerResources) -> CFSQuota:
        """§8 / PLR R9.2: where the container's CPU time is capped.

        ``none`` for exclusive containers while ``DisableCPUQuotaWithExclusiveCPUs`` is on; otherwise
        the container's own cpu limit (``container``), else the pod-level limit (``pod``), else nothing.
        """
        if self._gates.disable_cpu_quota_with_exclusive_cpus and self.container_has_exclusive_cpus(
            state, pod, container
        ):
            return "none"
        if container.resources.limit(CPU) > 0:
            return "container"
        if pod.pod is not None and pod.pod.limit(CPU) > 0 and self._gates.pod_level_resources:
            return "pod"
        return "none"

    def pod_cfs_quota_disabled(self, state: CPUState, pod: PodResources) -> bool:
        """R8.1 upstream rule: the pod cgroup is unbounded when any container has exclusive CPUs.

        PLR R9.3 leaves this open for pods that also have a pod shared pool; this follows upstream.
        """
        return self._gates.disable_cpu_quota_with_exclusive_cpus and self.pod_has_exclusive_cpus(state, pod)


_check: type[CPUPolicy] = StaticPolicy
