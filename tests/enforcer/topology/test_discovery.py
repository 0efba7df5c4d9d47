"""Discovery of the machine model from sysfs trees: fixture machines, round trips, broken trees, this host."""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from enforcer.errors import TopologyError
from enforcer.topology import discovery, machine

REPO = Path(__file__).resolve().parents[3]
SYSFS_FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
BUNDLED = REPO / "enforcer" / "topology" / "fixtures"
SHARED = REPO.parent / "shared"
GiB = 1024**3
MiB = 1024**2


def _load_make_tree() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sysfs_make_tree", SYSFS_FIXTURES / "make_tree.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_tree = _load_make_tree()
SOURCES = sorted((SYSFS_FIXTURES / "sources").glob("*.yaml"))
# Sources whose tree shows every CPU, L3 id and NUMA node: discovery must give back the document itself.
PLAIN_SOURCES = [s for s in SOURCES if set(make_tree.load_source(s).get("sysfs") or {}) <= {"bundled"}]


def cores(topology: machine.CPUTopology) -> set[frozenset[int]]:
    """Cores as sets of logical CPUs: comparable whatever the core ids are."""
    return {frozenset(c.id for c in topology.cpus if c.core == core) for core in topology.core_ids}


def placement(topology: machine.CPUTopology) -> dict[int, tuple[int, int, int]]:
    return {c.id: (c.socket, c.numa, c.uncore) for c in topology.cpus}


# -- the committed fixture machines ---------------------------------------------------------------


def test_single_socket_machine_pairs_siblings_and_reads_memory_and_both_hugepage_sizes() -> None:
    topology = discovery.discover(SYSFS_FIXTURES / "single-socket-ht-8")
    assert [(c.id, c.core) for c in topology.cpus] == [(i, i % 4) for i in range(8)]
    assert set(placement(topology).values()) == {(0, 0, 0)}
    assert topology.memory_capacity(0) == {"memory": 16 * GiB, "hugepages-1Gi": 2 * GiB, "hugepages-2Mi": 1 * GiB}
    assert topology.distances == {0: (10,)}


def test_offline_cpu_is_left_out_and_its_sibling_core_keeps_one_thread() -> None:
    topology = discovery.discover(SYSFS_FIXTURES / "dual-socket-ht-16-offline")
    assert str(topology.all_cpus) == "0-14"
    assert cores(topology) == {frozenset({i, i + 8}) for i in range(7)} | {frozenset({7})}
    assert topology.numa_masks == {0: 0x0F0F, 1: 0x70F0}


def test_kernel_core_ids_repeating_on_each_socket_become_unique_lowest_thread_ids() -> None:
    tree = SYSFS_FIXTURES / "dual-socket-ht-16-offline" / "devices" / "system" / "cpu"
    assert (tree / "cpu0/topology/core_id").read_text() == (tree / "cpu4/topology/core_id").read_text() == "0\n"
    topology = discovery.discover(SYSFS_FIXTURES / "dual-socket-ht-16-offline")
    assert (topology.cpu(0).core, topology.cpu(4).core, topology.cpu(12).core) == (0, 4, 4)
    assert topology.distances == {0: (10, 21), 1: (21, 10)}
    assert topology.memory_capacity(1) == {"memory": 32 * GiB, "hugepages-2Mi": 0}


def test_kernel_without_numa_gives_one_node_and_socket_wide_uncore(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        8000000 kB\nMemFree:         1000 kB\n")
    topology = discovery.discover(SYSFS_FIXTURES / "no-numa-4", meminfo_fallback=meminfo)
    assert topology.numa_ids == (0,) and topology.numa_masks == {0: 0b1111}
    assert {c.uncore for c in topology.cpus} == {0} and topology.uncore_masks == topology.socket_masks
    assert topology.memory_capacity(0) == {"memory": 8_000_000 * 1024, "hugepages-2Mi": 128 * MiB}
    assert topology.distances is None


def test_kernel_without_numa_and_no_meminfo_has_no_regular_memory_figure() -> None:
    topology = discovery.discover(SYSFS_FIXTURES / "no-numa-4")
    assert topology.memory_capacity(0) == {"hugepages-2Mi": 128 * MiB}


def test_bundled_snc_machine_has_an_uncore_cache_and_numa_node_per_half_socket() -> None:
    topology = discovery.discover(BUNDLED / "sysfs-4numa-32cpu")
    assert (topology.num_cpus, topology.num_cores, topology.num_sockets) == (32, 16, 2)
    assert topology.uncore_masks == topology.numa_masks
    assert topology.sockets_of_numa == {0: (0,), 1: (0,), 2: (1,), 3: (1,)}
    assert topology.distance(0, 1) == 11 and topology.distance(1, 2) == 21
    assert topology.memory_capacity(3) == {"memory": 8 * GiB, "hugepages-1Gi": 2 * GiB, "hugepages-2Mi": 512 * MiB}


@pytest.mark.parametrize("source", PLAIN_SOURCES, ids=lambda s: s.stem)
def test_plain_fixture_trees_discover_exactly_their_source_document(source: Path) -> None:
    doc = make_tree.load_source(source)
    assert discovery.discover(make_tree.tree_dir(source, doc)) == machine.from_document(doc)


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.stem)
def test_committed_trees_are_what_make_tree_writes_from_their_source(source: Path, tmp_path: Path) -> None:
    doc = make_tree.load_source(source)
    make_tree.write_tree(doc, tmp_path)
    committed = make_tree.tree_dir(source, doc)

    def files(root: Path) -> dict[str, str]:
        return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}

    assert files(committed) == files(tmp_path), "regenerate with: python tests/fixtures/sysfs/make_tree.py --all"


# -- round trips over the brief's machines ------------------------------------------------------


SHARED_MACHINES = [
    pytest.param(json.loads(p.read_text()), id=p.name)
    for p in [*sorted(SHARED.glob("topologies/*.json")), *sorted(SHARED.glob("bench/topology-*.json"))]
]
_CONFORMANCE = SHARED / "conformance" / "topologies.json"
KUBELET_FIXTURES = [
    pytest.param(doc, id=name)
    for name, doc in sorted(json.loads(_CONFORMANCE.read_text()).items() if _CONFORMANCE.exists() else [])
]


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory for big generated trees: in memory when /dev/shm is there (thousands of small files)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        with tempfile.TemporaryDirectory(dir=shm, prefix="numaguard-sysfs-") as directory:
            yield Path(directory)
    else:
        yield tmp_path


@pytest.mark.skipif(not SHARED_MACHINES, reason="the brief's shared/ directory is not beside the repo")
@pytest.mark.parametrize("doc", SHARED_MACHINES)
def test_shared_machines_survive_a_round_trip_through_sysfs(doc: dict[str, Any], scratch: Path) -> None:
    make_tree.write_tree(doc, scratch)
    assert discovery.discover(scratch) == machine.from_document(doc)


@pytest.mark.skipif(not KUBELET_FIXTURES, reason="the brief's conformance topologies are not beside the repo")
@pytest.mark.parametrize("doc", KUBELET_FIXTURES)
def test_kubelet_fixture_machines_keep_their_cores_sockets_numa_and_uncore(doc: dict[str, Any], scratch: Path) -> None:
    make_tree.write_tree(doc, scratch)
    discovered, expected = discovery.discover(scratch), machine.from_document(doc)
    assert placement(discovered) == placement(expected)
    assert cores(discovered) == cores(expected)


# -- kernel variations --------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    make_tree.write_tree(make_tree.load_source(SYSFS_FIXTURES / "sources" / "single-socket-ht-8.yaml"), tmp_path)
    return tmp_path


def cpu_file(tree: Path, relative: str) -> Path:
    return tree / "devices" / "system" / "cpu" / relative


def node_file(tree: Path, relative: str) -> Path:
    return tree / "devices" / "system" / "node" / relative


def test_unknown_package_id_means_the_single_package(tree: Path) -> None:
    for cpu in range(8):
        cpu_file(tree, f"cpu{cpu}/topology/physical_package_id").write_text("-1\n")
    assert discovery.discover(tree).socket_ids == (0,)


def test_an_l3_directory_without_an_id_falls_back_to_the_socket(tree: Path) -> None:
    for cpu in range(8):
        cpu_file(tree, f"cpu{cpu}/topology/physical_package_id").write_text("3\n")
        cpu_file(tree, f"cpu{cpu}/cache/index3/id").unlink()
    assert {c.uncore for c in discovery.discover(tree).cpus} == {3}


def test_without_an_online_file_every_present_cpu_counts(tree: Path) -> None:
    cpu_file(tree, "online").unlink()
    assert discovery.discover(tree).num_cpus == 8


def test_nodes_without_distance_files_have_no_distance_table(tree: Path) -> None:
    node_file(tree, "node0/distance").unlink()
    assert discovery.discover(tree).distances is None


@dataclass(frozen=True)
class BrokenTree:
    description: str
    damage: Callable[[Path], None]
    names_file: str


def _write(path_of: Callable[[Path], Path], text: str) -> Callable[[Path], None]:
    def damage(tree: Path) -> None:
        path_of(tree).write_text(text)

    return damage


def _remove(path_of: Callable[[Path], Path]) -> Callable[[Path], None]:
    return lambda tree: path_of(tree).unlink()


BROKEN_TREES = [
    BrokenTree("missing core_id", _remove(lambda t: cpu_file(t, "cpu1/topology/core_id")), "cpu1/topology/core_id"),
    BrokenTree(
        "core_id not a number", _write(lambda t: cpu_file(t, "cpu2/topology/core_id"), "two\n"), "cpu2/topology/core_id"
    ),
    BrokenTree(
        "negative core_id", _write(lambda t: cpu_file(t, "cpu2/topology/core_id"), "-4\n"), "cpu2/topology/core_id"
    ),
    BrokenTree(
        "missing package id",
        _remove(lambda t: cpu_file(t, "cpu3/topology/physical_package_id")),
        "cpu3/topology/physical_package_id",
    ),
    BrokenTree(
        "uncore id garbage", _write(lambda t: cpu_file(t, "cpu0/cache/index3/id"), "L3\n"), "cpu0/cache/index3/id"
    ),
    BrokenTree(
        "online list names a cpu without a directory", _write(lambda t: cpu_file(t, "online"), "0-8\n"), "cpu/online"
    ),
    BrokenTree("online list garbage", _write(lambda t: cpu_file(t, "online"), "0-3,x\n"), "cpu/online"),
    BrokenTree("node cpulist garbage", _write(lambda t: node_file(t, "node0/cpulist"), "7-3\n"), "node0/cpulist"),
    BrokenTree("missing node cpulist", _remove(lambda t: node_file(t, "node0/cpulist")), "node0/cpulist"),
    BrokenTree(
        "online cpu in no node", _write(lambda t: node_file(t, "node0/cpulist"), "0-6\n"), "devices/system/node"
    ),
    BrokenTree(
        "meminfo without MemTotal",
        _write(lambda t: node_file(t, "node0/meminfo"), "Node 0 MemFree: 1 kB\n"),
        "node0/meminfo",
    ),
    BrokenTree("missing meminfo", _remove(lambda t: node_file(t, "node0/meminfo")), "node0/meminfo"),
    BrokenTree(
        "hugepage count garbage",
        _write(lambda t: node_file(t, "node0/hugepages/hugepages-2048kB/nr_hugepages"), "many\n"),
        "hugepages-2048kB/nr_hugepages",
    ),
    BrokenTree("distance row too long", _write(lambda t: node_file(t, "node0/distance"), "10 21\n"), "node0/distance"),
    BrokenTree("distance row garbage", _write(lambda t: node_file(t, "node0/distance"), "ten\n"), "node0/distance"),
]


@pytest.mark.parametrize("case", BROKEN_TREES, ids=lambda c: c.description)
def test_a_broken_tree_raises_topology_error_naming_the_file(tree: Path, case: BrokenTree) -> None:
    case.damage(tree)
    with pytest.raises(TopologyError) as raised:
        discovery.discover(tree)
    assert case.names_file in str(raised.value)
    assert raised.value.reason == "InvalidTopology"


def test_a_cpu_claimed_by_two_nodes_is_an_error_naming_the_second_cpulist(tree: Path) -> None:
    second = node_file(tree, "node1")
    second.mkdir()
    (second / "cpulist").write_text("7\n")
    (second / "meminfo").write_text("Node 1 MemTotal: 1024 kB\n")
    with pytest.raises(TopologyError, match="node1/cpulist: CPU 7 is also listed by node0"):
        discovery.discover(tree)


def test_a_directory_that_is_not_sysfs_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=str(tmp_path)):
        discovery.discover(tmp_path)


# -- this machine ---------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/sys/devices/system/cpu/online").exists(), reason="no sysfs CPU topology on this host")
def test_this_host_is_discovered_without_error() -> None:
    topology = discovery.discover_host()
    assert topology.num_cpus == os.sysconf("SC_NPROCESSORS_ONLN")
    assert all(node.memory.get("memory", 0) > 0 for node in topology.numa_nodes if topology.numa_masks.get(node.id))
