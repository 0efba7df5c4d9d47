"""Start-up validation of a restored memory state (R7.2 of ``memory-manager.md``).

Ports ``validateState``, ``updateExpectedMachineState``, ``areMachineStatesEqual``
and ``areMemoryStatesEqual`` of the kubelet's ``policy_static.go``: the expected
tables are rebuilt from the entries (a KEP-5526 pod from its pod entry) and
compared with the stored ones.  Free and reserved are compared per NUMA group,
because how a multi-node block was spread over its nodes is not recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from enforcer.errors import ConfigError
from enforcer.memorymanager.state import Block, MemoryState, NUMANodeState, ordered_types

STATE_MISMATCH = "[memorymanager] the expected machine state is different from the real one"


def add_zero_size_tables(machine: Mapping[int, NUMANodeState], default: Mapping[int, NUMANodeState]) -> None:
    """Give each node of a stored state the zero-size tables of ``default`` it lacks.

    Checkpoints written before the engine kept a table per hugepages size on every node (as the
    kubelet does) have no table for a size a node has no pages of.  Such a table holds nothing
    (total, reserved and free all 0), so adding it loses nothing; without it, the comparison of
    table sets would refuse a state the kubelet's shape accepts.  Non-empty tables are never added.
    """
    for node_id, node in machine.items():
        if node_id not in default:
            continue  # validation refuses a node the machine does not have
        empty = {
            name: table.copy()
            for name, table in default[node_id].memory_map.items()
            if name not in node.memory_map and table.total == 0 and table.system_reserved == 0
        }
        if empty:
            merged = {**node.memory_map, **empty}
            node.memory_map = {name: merged[name] for name in ordered_types(merged)}


def expected_machine_state(
    default: Mapping[int, NUMANodeState], state: MemoryState, *, pod_entries_enabled: bool
) -> dict[int, NUMANodeState]:
    """The tables the entries of ``state`` imply on a machine whose empty tables are ``default``."""
    expected = {n: s.copy() for n, s in default.items()}
    for uid, ctrs in state.entries.items():
        pod_blocks = state.pod_blocks(uid) if pod_entries_enabled else None
        if pod_blocks:
            _charge_expected(expected, pod_blocks, uid, "")
            continue
        for name, blocks in ctrs.items():
            _charge_expected(expected, blocks, uid, name)
    return expected


def _charge_expected(expected: dict[int, NUMANodeState], blocks: Iterable[Block], uid: str, name: str) -> None:
    for block in blocks:
        size = block.size
        for node_id in block.numa_affinity:
            node = expected.get(node_id)
            if node is None:
                raise ConfigError(
                    f"[memorymanager] (pod: {uid}, container: {name}) the memory assignment uses the NUMA that "
                    "does not exist"
                )
            node.number_of_assignments += 1
            node.cells = list(block.numa_affinity)
            table = node.memory_map.get(block.type)
            if table is None:
                raise ConfigError(
                    f"[memorymanager] (pod: {uid}, container: {name}) the memory assignment uses memory resource "
                    "that does not exist"
                )
            if size == 0 or table.free <= 0:
                continue
            taken = min(table.free, size)
            table.reserved += taken
            table.free -= taken
            size -= taken


def machine_states_equal(actual: Mapping[int, NUMANodeState], expected: Mapping[int, NUMANodeState]) -> bool:
    """``areMachineStatesEqual``: counters, groups, sizes, and free/reserved summed over each group."""
    if sorted(actual) != sorted(expected):
        return False
    for node_id, node in actual.items():
        other = expected[node_id]
        if node.number_of_assignments != other.number_of_assignments:
            return False
        if sorted(node.cells) != sorted(other.cells):
            return False
        if set(node.memory_map) != set(other.memory_map):
            return False
        for name, table in node.memory_map.items():
            want = other.memory_map[name]
            if (table.total, table.system_reserved, table.allocatable) != (
                want.total,
                want.system_reserved,
                want.allocatable,
            ):
                return False
            if _group_sums(actual, node.cells, name) != _group_sums(expected, node.cells, name):
                return False
    return True


def _group_sums(machine: Mapping[int, NUMANodeState], cells: Iterable[int], name: str) -> tuple[int, int]:
    free = reserved = 0
    for node_id in cells:
        node = machine.get(node_id)
        table = node.memory_map.get(name) if node is not None else None
        if table is not None:
            free += table.free
            reserved += table.reserved
    return free, reserved
