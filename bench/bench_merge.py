"""Benchmark of the Topology Manager merge: the kubelet's 8-NUMA cases, then synthetic 16/32/64-NUMA merges.

Run: ``.venv/bin/python -m bench.bench_merge [--repeats N]``.

* Every case of ``tests/fixtures/kubelet/merge_cases.json`` (copied from the brief's bench material), timed
  against the kubelet's median for the same case (README of the brief's ``bench/``; ``go test -bench``, 2 vCPU);
  the answer must equal the one the kubelet's code returned.
* Synthetic merges on 16, 32 and 64 NUMA nodes with 3 providers (cpu, memory, hugepages-1Gi) whose hints are
  generated as the CPU and memory managers generate them: every mask with enough free capacity, preferred when
  its size is the minimal size the request needs on an empty machine, listed in ``IterateBitMasks`` order, up
  to a mask size limit and a cap on the list length (the kubelet would enumerate 2^N masks). One case lists all
  2^16-1 masks (the 16-node analogue of the kubelet's ``all255-cpu2``). The kubelet has no figure for them (it
  refuses more than 8 nodes by default and could not finish these cross products); their answers are checked
  against an independent exact oracle (candidates in rank order, each tested for exact reachability).

Timings are medians of ``repeats`` single merges on an already built policy; they measure the merge only.
This module is a measuring tool: it must not be imported by product code or by tests.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enforcer.engine.builder import new_topology_policy
from enforcer.topology import bitmask, hints, merge, options

H = hints.TopologyHint
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "kubelet"

KUBELET_MEDIAN_MS: dict[str, float] = {
    "le2-preferred/best-effort": 8.02,
    "le2-preferred/restricted": 7.75,
    "le2-conflict/best-effort": 6.29,
    "le2-conflict/restricted": 5.62,
    "all255-cpu2/best-effort": 3191.06,
    "all255-cpu2/restricted": 3466.70,
    "closest-vs-narrowest/best-effort": 5.28,
    "closest-vs-narrowest/restricted": 5.70,
    "closest-vs-narrowest/best-effort/prefer-closest": 5.99,
    "closest-vs-narrowest/restricted/prefer-closest": 5.56,
}
"""The kubelet's medians for merge_cases.json (the brief's bench/README.md, median of 5 runs on 2 vCPUs)."""

ORACLE_LIMIT = 200_000
"""The oracle gives up (answer "unchecked") rather than scan more candidate masks of one size than this."""


@dataclass(frozen=True)
class BenchCase:
    name: str
    policy_name: str
    numa_ids: tuple[int, ...]
    prefer_closest: bool
    distances: Mapping[int, tuple[int, ...]]
    providers: tuple[hints.ProviderHints, ...]
    expected: tuple[H, bool] | None = None
    kubelet_ms: float | None = None


@dataclass(frozen=True)
class Row:
    case: str
    numa_nodes: int
    hints: int
    permutations: int
    ours_ms: float
    kubelet_ms: float | None
    answer: str
    check: str

    @property
    def speedup(self) -> float | None:
        return None if self.kubelet_ms is None else self.kubelet_ms / self.ours_ms


# --- the kubelet's cases ---------------------------------------------------------------------------------------------


def kubelet_cases() -> list[BenchCase]:
    raw = json.loads((FIXTURES / "merge_cases.json").read_text())
    topology = json.loads((FIXTURES / raw["topologyFile"]).read_text())
    distances = {int(k): tuple(v) for k, v in topology["distances"].items()}
    cases = []
    for case in raw["cases"]:
        providers = tuple(
            {
                resource: [H(bitmask.from_ids(h["numaNodeAffinity"]), h["preferred"]) for h in hint_list]
                for resource, hint_list in provider.items()
            }
            for provider in raw["hintSets"][case["hintSet"]]["providersHints"]
        )
        expected = case["expected"]
        cases.append(
            BenchCase(
                name=case["name"],
                policy_name=case["policy"],
                numa_ids=tuple(raw["numaNodes"]),
                prefer_closest=case["options"]["preferClosestNUMA"],
                distances=distances,
                providers=providers,
                expected=(H(bitmask.from_ids(expected["numaNodeAffinity"]), expected["preferred"]), expected["admit"]),
                kubelet_ms=KUBELET_MEDIAN_MS.get(case["name"]),
            )
        )
    return cases


# --- synthetic machines and hints ------------------------------------------------------------------------------------

NUMA_PER_SOCKET = 8
CPU_PER_NODE, MEMORY_PER_NODE, HUGEPAGES_PER_NODE = 24, 96, 16  # cores, GiB, 1Gi pages


def socket_distances(node_count: int) -> dict[int, tuple[int, ...]]:
    """10 local, 12 within a socket of 8 NUMA nodes, 32 across sockets (the 8-NUMA bench machine, repeated)."""

    def distance(a: int, b: int) -> int:
        if a == b:
            return 10
        return 12 if a // NUMA_PER_SOCKET == b // NUMA_PER_SOCKET else 32

    return {a: tuple(distance(a, b) for b in range(node_count)) for a in range(node_count)}


def capacity_hints(
    node_count: int,
    *,
    request: int,
    per_node: int,
    free: Callable[[int], int],
    max_size: int,
    cap: int | None,
) -> list[H]:
    """Hints as the CPU/memory managers build them: every mask with enough free capacity, preferred at minimal size.

    The minimal size counts total capacity (as ``minAffinitySize`` does), so a fragmented machine yields
    non-preferred hints only. Masks come in ``IterateBitMasks`` order, up to ``max_size`` nodes and ``cap`` hints.
    """
    minimal = math.ceil(request / per_node)
    found: list[H] = []
    for size in range(1, max_size + 1):
        for subset in itertools.combinations(range(node_count), size):
            if sum(free(n) for n in subset) >= request:
                found.append(H(bitmask.from_ids(subset), size == minimal))
                if cap is not None and len(found) >= cap:
                    return found
    return found


def _providers(
    node_count: int,
    *,
    cpu: int,
    memory: int,
    hugepages: int,
    cpu_free: Callable[[int], int] = lambda n: CPU_PER_NODE,
    memory_free: Callable[[int], int] = lambda n: MEMORY_PER_NODE,
    hugepages_free: Callable[[int], int] = lambda n: HUGEPAGES_PER_NODE,
    max_size: int,
    cap: int | None,
) -> tuple[hints.ProviderHints, ...]:
    common: dict[str, Any] = {"max_size": max_size, "cap": cap}
    cpu_hints = capacity_hints(node_count, request=cpu, per_node=CPU_PER_NODE, free=cpu_free, **common)
    memory_hints = capacity_hints(node_count, request=memory, per_node=MEMORY_PER_NODE, free=memory_free, **common)
    hugepages_hints = capacity_hints(
        node_count, request=hugepages, per_node=HUGEPAGES_PER_NODE, free=hugepages_free, **common
    )
    return ({"cpu": cpu_hints}, {"memory": memory_hints, "hugepages-1Gi": hugepages_hints})


def synthetic_cases() -> list[BenchCase]:
    return [case for node_count in (16, 32, 64) for case in _machine_cases(node_count)]


def _machine_cases(node_count: int) -> list[BenchCase]:
    """One machine's scenarios; every free-capacity pattern is a realistic state of a busy node."""
    numa_ids = tuple(range(node_count))
    distances = socket_distances(node_count)
    quarter = node_count // 4

    def case(name: str, providers: tuple[hints.ProviderHints, ...], prefer_closest: bool = False) -> BenchCase:
        return BenchCase(
            name=f"{node_count}numa/{name}",
            policy_name=options.POLICY_RESTRICTED,
            numa_ids=numa_ids,
            prefer_closest=prefer_closest,
            distances=distances,
            providers=providers,
        )

    fits_one = _providers(node_count, cpu=8, memory=32, hugepages=4, max_size=2, cap=4096)
    spans_two = _providers(node_count, cpu=40, memory=32, hugepages=4, max_size=3, cap=2500)
    fragmented = _providers(
        node_count,
        cpu=40,
        memory=32,
        hugepages=4,
        cpu_free=lambda n: 0 if n < quarter else CPU_PER_NODE,
        memory_free=lambda n: 0 if n % 4 == 1 else MEMORY_PER_NODE,
        hugepages_free=lambda n: 0 if n % 3 == 2 else HUGEPAGES_PER_NODE,
        max_size=3,
        cap=2500,
    )
    no_common_node = _providers(
        node_count,
        cpu=16,
        memory=64,
        hugepages=12,
        cpu_free=lambda n: CPU_PER_NODE if n == 0 else 8,
        memory_free=lambda n: MEMORY_PER_NODE if n == 1 else 32,
        hugepages_free=lambda n: HUGEPAGES_PER_NODE if n == 2 else 6,
        max_size=2,
        cap=4096,
    )
    split_capacity = _providers(
        node_count,
        cpu=40,
        memory=32,
        hugepages=4,
        cpu_free=lambda n: CPU_PER_NODE if n < 3 * quarter else 0,
        hugepages_free=lambda n: HUGEPAGES_PER_NODE if n >= 5 * node_count // 8 else 0,
        max_size=2,
        cap=None,
    )
    disjoint_halves = _providers(
        node_count,
        cpu=40,
        memory=32,
        hugepages=4,
        cpu_free=lambda n: CPU_PER_NODE if n < 2 * quarter else 0,
        memory_free=lambda n: MEMORY_PER_NODE if n >= 2 * quarter else 0,
        max_size=2,
        cap=None,
    )
    cases = [
        case("fit-one-node", fits_one),
        case("cpu-spans-two", spans_two),
        case("fragmented", fragmented),
        case("fragmented/prefer-closest", fragmented, prefer_closest=True),
        case("no-common-node", no_common_node),
        case("split-capacity", split_capacity),
        case("split-capacity/prefer-closest", split_capacity, prefer_closest=True),
        case("disjoint-halves", disjoint_halves),
    ]
    if node_count == 16:
        all_masks = _providers(
            node_count,
            cpu=40,
            memory=32,
            hugepages=4,
            memory_free=lambda n: 24 if n < 4 else MEMORY_PER_NODE,
            max_size=node_count,
            cap=None,
        )
        cases.append(case("all-masks-cpu2", all_masks))
    return cases


# --- an independent exact oracle for the synthetic answers -----------------------------------------------------------


def oracle(case: BenchCase) -> tuple[H, bool] | None:
    """The kubelet's answer found another way: candidate masks in the kubelet's preference order, each
    tested for exact reachability; None when that would scan too many masks.

    Single-numa-node is not supported (the synthetic cases do not use it).
    """
    universe = bitmask.from_ids(case.numa_ids)
    dims: list[list[H]] = []
    for provider in case.providers:
        if not provider:
            dims.append([H(None, True)])
            continue
        for resource_hints in provider.values():
            dims.append([H(None, True)] if resource_hints is None else list(resource_hints) or [H(None, False)])
    target = max(
        (
            min(bitmask.count(h.mask) for h in d if h.mask is not None)
            for d in dims
            if any(h.mask is not None for h in d)
        ),
        default=0,
    )
    closest = case.prefer_closest

    def key(mask: int) -> tuple[int, ...]:
        ids = bitmask.ids_of(mask)
        spread = sum(case.distances[i][j] for i in ids for j in ids) if closest else 0
        return (len(ids), spread, mask)

    def preferred_reachable(raw: int | None) -> bool:
        # every dimension: a preferred hint that is nil or exactly `raw` (raw None: all nil)
        return all(any(h.preferred and (h.mask is None or h.mask == raw) for h in d) for d in dims)

    raws = {h.mask for d in dims for h in d if h.preferred and h.mask is not None and h.mask & universe}
    preferred = [universe] if preferred_reachable(None) and universe else []
    preferred += [raw & universe for raw in raws if preferred_reachable(raw)]
    if preferred:
        answer = H(min(preferred, key=key), True)
        return answer, answer.preferred or case.policy_name == options.POLICY_BEST_EFFORT

    def reachable(mask: int) -> bool:
        states = {universe}
        for d in dims:
            supersets = {
                x for x in ((universe if h.mask is None else h.mask & universe) for h in d) if x & mask == mask
            }
            if not supersets:
                return False
            states = {s & x for s in states for x in supersets}
        return mask in states

    ids = bitmask.ids_of(universe)
    sizes = [target] + list(range(target - 1, 0, -1)) + list(range(target + 1, len(ids) + 1))
    for size in sizes:
        if size < 1 or size > len(ids):
            continue
        if math.comb(len(ids), size) > ORACLE_LIMIT:
            return None
        for mask in sorted(bitmask.masks_of_size(ids, size), key=key):
            if reachable(mask):
                return H(mask, False), case.policy_name == options.POLICY_BEST_EFFORT
    return H(universe, False), case.policy_name == options.POLICY_BEST_EFFORT


# --- measuring -------------------------------------------------------------------------------------------------------


def _dimensions(providers: Sequence[hints.ProviderHints]) -> list[list[H]]:
    return merge.filter_providers_hints(providers)


def measure(case: BenchCase, repeats: int, expected: tuple[H, bool] | None) -> Row:
    opts = options.TopologyManagerOptions(prefer_closest_numa=case.prefer_closest)
    merger = new_topology_policy(case.policy_name, case.numa_ids, opts, case.distances)
    samples: list[float] = []
    result = merger.merge(case.providers)
    for _ in range(repeats):
        started = time.perf_counter()
        result = merger.merge(case.providers)
        samples.append(time.perf_counter() - started)
    dims = _dimensions(case.providers)
    hint, admit = result
    answer = f"{bitmask.format_mask(hint.mask)} {'P' if hint.preferred else 'N'} {'admit' if admit else 'reject'}"
    if expected is None:
        check = "unchecked"
    else:
        check = "ok" if result == expected else f"WRONG (want {bitmask.format_mask(expected[0].mask)})"
    return Row(
        case=case.name,
        numa_nodes=len(case.numa_ids),
        hints=sum(len(d) for d in dims),
        permutations=math.prod(len(d) for d in dims),
        ours_ms=statistics.median(samples) * 1e3,
        kubelet_ms=case.kubelet_ms,
        answer=answer,
        check=check,
    )


def run(repeats: int = 7) -> list[Row]:
    """Time every case; kubelet cases are checked against the kubelet, synthetic ones against the oracle."""
    rows = [measure(case, repeats, case.expected) for case in kubelet_cases()]
    rows += [measure(case, repeats, oracle(case)) for case in synthetic_cases()]
    return rows


def format_table(rows: Sequence[Row]) -> str:
    header = ("case", "NUMA", "hints", "kubelet perms", "ours (ms)", "kubelet (ms)", "speedup", "answer", "check")
    lines = [header]
    for row in rows:
        lines.append(
            (
                row.case,
                str(row.numa_nodes),
                str(row.hints),
                f"{row.permutations:.2e}" if row.permutations >= 1e6 else str(row.permutations),
                f"{row.ours_ms:.3f}",
                "-" if row.kubelet_ms is None else f"{row.kubelet_ms:.2f}",
                "-" if row.speedup is None else f"{row.speedup:,.0f}x",
                row.answer,
                row.check,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)) + " |" for line in lines]
    text.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=7, help="timed merges per case (median reported)")
    args = parser.parse_args(argv)
    rows = run(args.repeats)
    print(format_table(rows))
    return 0 if all(row.check in ("ok", "unchecked") for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
