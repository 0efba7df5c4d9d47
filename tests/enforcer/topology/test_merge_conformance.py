"""The kubelet's own merge answers, case by case (tests/fixtures/kubelet/, copied from the brief material).

* ``topology_merge.json``: the kubelet unit-test tables (TestPolicy*Merge, 107 cases);
* ``merge_cases.json``: the 8-NUMA benchmark cases, with the answers the kubelet's code returned.

In the JSON, ``null`` as a provider is a nil map, ``null`` as a resource's list is a nil list and
``[]`` is an empty list: the three mean different things (R2.1) and are kept apart here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from enforcer.engine.builder import new_topology_policy
from enforcer.topology import bitmask, hints, options

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kubelet"


@dataclass(frozen=True)
class KubeletMergeCase:
    description: str
    policy_name: str
    numa_ids: tuple[int, ...]
    prefer_closest: bool
    distances: dict[int, tuple[int, ...]]
    providers: tuple[hints.ProviderHints, ...]
    expected: hints.TopologyHint
    expected_admit: bool


def _mask(ids: list[int] | None) -> int | None:
    return None if ids is None else bitmask.from_ids(ids)


def _providers(raw: list[Any], mask_field: str) -> tuple[hints.ProviderHints, ...]:
    providers: list[hints.ProviderHints] = []
    for provider in raw:
        if provider is None:
            providers.append(None)
            continue
        providers.append(
            {
                resource: None
                if hint_list is None
                else [hints.TopologyHint(_mask(h[mask_field]), h["preferred"]) for h in hint_list]
                for resource, hint_list in provider.items()
            }
        )
    return tuple(providers)


def _conformance_cases() -> list[KubeletMergeCase]:
    raw = json.loads((FIXTURES / "topology_merge.json").read_text())
    return [
        KubeletMergeCase(
            description=case["id"],
            policy_name=case["policy"],
            numa_ids=tuple(case["numaNodes"]),
            prefer_closest=case["options"].get(options.PREFER_CLOSEST_NUMA_NODES) == "true",
            distances={int(k): tuple(v) for k, v in (case.get("distances") or {}).items()},
            providers=_providers(case["providersHints"], "mask"),
            expected=hints.TopologyHint(_mask(case["expect"]["mask"]), case["expect"]["preferred"]),
            expected_admit=case["expectAdmit"],
        )
        for case in raw
    ]


def _bench_cases() -> list[KubeletMergeCase]:
    raw = json.loads((FIXTURES / "merge_cases.json").read_text())
    topology = json.loads((FIXTURES / raw["topologyFile"]).read_text())
    distances = {int(k): tuple(v) for k, v in topology["distances"].items()}
    cases = []
    for case in raw["cases"]:
        expected = case["expected"]
        cases.append(
            KubeletMergeCase(
                description=case["name"],
                policy_name=case["policy"],
                numa_ids=tuple(raw["numaNodes"]),
                prefer_closest=case["options"]["preferClosestNUMA"],
                distances=distances,
                providers=_providers(raw["hintSets"][case["hintSet"]]["providersHints"], "numaNodeAffinity"),
                expected=hints.TopologyHint(_mask(expected["numaNodeAffinity"]), expected["preferred"]),
                expected_admit=expected["admit"],
            )
        )
    return cases


CONFORMANCE_CASES = _conformance_cases()
BENCH_CASES = _bench_cases()


def _merge(case: KubeletMergeCase) -> tuple[hints.TopologyHint, bool]:
    opts = options.TopologyManagerOptions(prefer_closest_numa=case.prefer_closest)
    merger = new_topology_policy(case.policy_name, case.numa_ids, opts, case.distances)
    return merger.merge(case.providers)


def test_every_kubelet_table_is_present() -> None:
    assert len(CONFORMANCE_CASES) == 107
    assert len(BENCH_CASES) == 10


@pytest.mark.parametrize("case", CONFORMANCE_CASES, ids=lambda c: c.description)
def test_merge_gives_the_kubelet_unit_test_answer(case: KubeletMergeCase) -> None:
    assert _merge(case) == (case.expected, case.expected_admit)


@pytest.mark.parametrize("case", BENCH_CASES, ids=lambda c: c.description)
def test_merge_gives_the_kubelet_benchmark_answer(case: KubeletMergeCase) -> None:
    assert _merge(case) == (case.expected, case.expected_admit)
