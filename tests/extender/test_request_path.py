"""What keeps engine dry runs off ``filter``'s request path: prepared shapes and shared machine models.

Counted in dry runs (``Extender.cache_stats``: a miss is one engine admission), never in time.
"""

from __future__ import annotations

import copy

import pytest

from extender import engine_adapter
from extender.decide import PREPARED_SHAPES
from shared.pod import parse_pod
from tests.extender.extender_kit import args, engine, export, extender_over, guaranteed


def _shapes(count: int) -> list[dict[str, object]]:
    """``count`` pods of distinct shapes (1, 2, ... CPUs), each fitting a 2 x 8-core node."""
    return [guaranteed(f"shape-{cpus}", str(cpus), "1Gi") for cpus in range(1, count + 1)]


def _misses(ext: object) -> int:
    return ext.cache_stats[1]  # type: ignore[attr-defined, no-any-return]


def test_a_new_replica_arrives_with_every_recent_shape_answered() -> None:
    node = engine(2, 8, name="n0")
    ext = extender_over({"n0": node})
    pods = _shapes(PREPARED_SHAPES)
    for pod in pods:
        ext.filter(args(pod, ["n0"]))
    # the node's state changes (a binding elsewhere in the burst landed here) and the poller installs it
    assert node.admit(parse_pod(guaranteed("landed", "2")).to_resources(pod_level_resources=True)).admitted
    assert ext.store.update("n0", export("n0", node, generation=2))
    before = _misses(ext)
    for pod in pods:  # the next pod of each workload
        again = copy.deepcopy(pod)
        again["metadata"]["uid"] = again["metadata"]["uid"][::-1]
        ext.filter(args(again, ["n0"]))
    assert _misses(ext) == before  # no dry run on the request path: all answered on the poller's side


def test_the_oldest_shape_beyond_the_bound_is_not_prepared() -> None:
    node = engine(2, 8, name="n0")
    ext = extender_over({"n0": node})
    pods = _shapes(PREPARED_SHAPES + 1)
    for pod in pods:
        ext.filter(args(pod, ["n0"]))
    assert node.admit(parse_pod(guaranteed("landed", "2")).to_resources(pod_level_resources=True)).admitted
    ext.store.update("n0", export("n0", node, generation=2))
    before = _misses(ext)
    ext.filter(args(pods[-1], ["n0"]))
    assert _misses(ext) == before
    ext.filter(args(pods[0], ["n0"]))  # asked about before the last PREPARED_SHAPES: one dry run now
    assert _misses(ext) == before + 1


def test_prepared_answers_are_the_dry_runs_answers() -> None:
    node = engine(2, 4, name="n0")
    for i in range(2):
        assert node.admit(parse_pod(guaranteed(f"filler-{i}", "3")).to_resources(pod_level_resources=True)).admitted
    prepared = extender_over({"n0": engine(2, 4, name="n0")})
    pods = _shapes(4)
    for pod in pods:
        prepared.filter(args(pod, ["n0"]))
    prepared.store.update("n0", export("n0", node, generation=2))  # answered ahead, on the new state
    fresh = extender_over({"n0": node})  # the same state, every answer computed on the request path
    for pod in pods:
        assert prepared.filter(args(pod, ["n0"])) == fresh.filter(args(pod, ["n0"]))
        assert prepared.prioritize(args(pod, ["n0"])) == fresh.prioritize(args(pod, ["n0"]))


def test_replicas_of_one_machine_kind_share_one_machine_model() -> None:
    a, b, other = engine(2, 8, name="a"), engine(2, 8, name="b"), engine(4, 4, name="c")
    assert b.admit(parse_pod(guaranteed("x", "2")).to_resources(pod_level_resources=True)).admitted
    decoded = [engine_adapter.engine_from_snapshot(export(n, e)["snapshot"]) for n, e in (("a", a), ("b", b))]
    assert decoded[0].topology is decoded[1].topology  # one object: the engine's per-machine indexes are shared
    assert decoded[0].topology == a.topology
    third = engine_adapter.engine_from_snapshot(export("c", other)["snapshot"])
    assert third.topology is not decoded[0].topology and third.topology == other.topology


def test_an_invalid_topology_is_still_refused_when_a_valid_one_is_known() -> None:
    snapshot = export("a", engine(2, 8, name="a"))["snapshot"]
    engine_adapter.engine_from_snapshot(snapshot)
    broken = copy.deepcopy(snapshot)
    broken["topology"]["cpus"][3]["numa"] = "one"
    with pytest.raises(engine_adapter.SnapshotError, match=r"topology\.cpus\[3\]\.numa"):
        engine_adapter.engine_from_snapshot(broken)
