"""The extender's HTTP protocol, with the upstream JSON of k8s.io/kube-scheduler/extender/v1.

No kube-scheduler runs here: the requests are built exactly as ``HTTPExtender.Filter`` /
``Prioritize`` marshal them (kubernetes/kubernetes pkg/scheduler/extender.go): Go field names without
JSON tags (``Pod``, ``Nodes``, ``NodeNames``), ``"Nodes": null`` with ``nodeCacheCapable: true``, and
the answers are read the way the scheduler reads them (``NodeNames`` must be a subset of the input,
a non-200 status or a non-empty ``Error`` fails the call, scores within 0..10).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from extender_kit import args, engine, extender_over, fixture_pod, guaranteed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender import main
from extender.decide import Extender
from extender.directory import EnforcerDirectory
from extender.replica import ReplicaStore

NODES = ["small", "big"]


@pytest.fixture
def extender() -> Extender:
    small = engine(2, 3, name="small")  # 2 NUMA x 3 cores x 2 threads: 6 CPUs per NUMA node
    big = engine(2, 8, name="big")  # 32 CPUs
    return extender_over({"small": small, "big": big})


@pytest.fixture
async def client(extender: Extender) -> AsyncIterator[httpx.AsyncClient]:
    app = main.create_app(main.Components(extender=extender))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender") as http,
    ):
        yield http


def scheduler_reads_filter(response: httpx.Response, sent: list[str]) -> dict[str, Any]:
    """What HTTPExtender.Filter accepts: 200, JSON, no Error, NodeNames a subset of what was sent."""
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert result["Error"] == ""
    assert set(result["NodeNames"]) <= set(sent)
    return result


@pytest.mark.anyio
async def test_pod_without_alignment_passes_every_node_at_once(client: httpx.AsyncClient) -> None:
    pod = fixture_pod("burstable-web")
    response = await client.post("/filter", json=args(pod, [*NODES, "not-enforced"]))
    result = scheduler_reads_filter(response, [*NODES, "not-enforced"])
    assert result["NodeNames"] == [*NODES, "not-enforced"]
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}


@pytest.mark.anyio
async def test_pod_level_resources_are_sized_by_the_pod_budget(client: httpx.AsyncClient) -> None:
    # The seed database: containers ask 6 CPU / 12Gi, spec.resources 8 / 16Gi. The small node's NUMA
    # nodes have 6 CPUs each: the container sum (6) would
    # fit, the pod budget (8 CPUs on one NUMA node) never can; the big node holds it on one NUMA node.
    pod = fixture_pod("tightly-coupled-database")
    response = await client.post("/filter", json=args(pod, NODES))
    result = scheduler_reads_filter(response, NODES)
    assert result["NodeNames"] == ["big"]
    assert result["FailedNodes"] == {}
    assert result["FailedAndUnresolvableNodes"] == {  # the kubelet's message for a pod-level pod in pod scope
        "small": "TopologyAffinityError: Pod Scope pod with pod-level resources failed admission "
        "under pod-scope topology manager"
    }
    scores = (await client.post("/prioritize", json=args(pod, ["big"]))).json()
    assert scores == [{"Host": "big", "Score": scores[0]["Score"]}] and 1 <= scores[0]["Score"] <= 10


@pytest.mark.anyio
async def test_a_full_node_is_failed_resolvably_with_the_kubelet_reason(extender: Extender) -> None:
    big = engine(2, 8, name="big")
    for i in range(2):  # 12 CPUs each: NUMA node 0 keeps 3 of its 15, NUMA node 1 4 of its 16
        assert big.admit(_resources(guaranteed(f"filler-{i}", "12", "2Gi"))).admitted
    ext = extender_over({"big": big})
    result = ext.filter(args(guaranteed("wants-5", "5"), ["big"]))  # 7 CPUs free, but not 5 on one NUMA node
    assert result["NodeNames"] == []
    refused = "TopologyAffinityError: Resources cannot be allocated with Topology locality"
    assert result["FailedNodes"] == {"big": refused}
    assert result["FailedAndUnresolvableNodes"] == {}  # an empty node would take it: preemption may help


@pytest.mark.anyio
async def test_smt_alignment_error_is_reported_as_the_kubelet_words_it() -> None:
    strict = engine(2, 8, name="strict", cpuManagerPolicyOptions={"full-pcpus-only": "true"})
    ext = extender_over({"strict": strict})
    result = ext.filter(args(guaranteed("odd", "3"), ["strict"]))
    assert result["FailedAndUnresolvableNodes"] == {
        "strict": "SMTAlignmentError: SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    }


@pytest.mark.anyio
async def test_unknown_nodes_pass_and_score_no_opinion(client: httpx.AsyncClient) -> None:
    pod = guaranteed("db", "4")
    sent = ["big", "not-enforced"]
    result = scheduler_reads_filter(await client.post("/filter", json=args(pod, sent)), sent)
    assert result["NodeNames"] == sent
    scores = {s["Host"]: s["Score"] for s in (await client.post("/prioritize", json=args(pod, sent))).json()}
    assert scores["not-enforced"] == 0 < scores["big"]


@pytest.mark.anyio
async def test_prioritize_prefers_one_numa_node_and_the_tighter_fit() -> None:
    # best-effort policy: the pod may spill. 'roomy' holds 10 CPUs on one NUMA node, 'tight' must spread.
    roomy = engine(2, 8, name="roomy", policy="best-effort")
    tight = engine(2, 8, name="tight", policy="best-effort")
    assert tight.admit(_resources(guaranteed("a", "10", "1Gi"))).admitted
    assert tight.admit(_resources(guaranteed("b", "10", "1Gi"))).admitted
    ext = extender_over({"roomy": roomy, "tight": tight})
    scores = {s["Host"]: s["Score"] for s in ext.prioritize(args(guaranteed("c", "10"), ["roomy", "tight"]))}
    assert scores["roomy"] > scores["tight"]
    # a 2-CPU pod: the NUMA node with exactly its room left scores higher than an empty machine (best fit)
    snug = engine(2, 8, name="snug", policy="single-numa-node")
    assert snug.admit(_resources(guaranteed("x", "13", "1Gi"))).admitted  # NUMA 0: 15 free -> 2 left
    assert snug.admit(_resources(guaranteed("y", "16", "1Gi"))).admitted  # NUMA 1: full
    empty = engine(2, 8, name="empty")
    ext = extender_over({"snug": snug, "empty": empty})
    scores = {s["Host"]: s["Score"] for s in ext.prioritize(args(guaranteed("z", "2"), ["snug", "empty"]))}
    assert scores["snug"] > scores["empty"]


@pytest.mark.anyio
async def test_the_full_node_list_form_is_answered_with_a_node_list(client: httpx.AsyncClient) -> None:
    nodes = [{"metadata": {"name": n, "labels": {"numaguard.io/enforce": "true"}}} for n in NODES]
    body = {"Pod": fixture_pod("tightly-coupled-database"), "Nodes": {"items": nodes}, "NodeNames": None}
    result = (await client.post("/filter", json=body)).json()
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["big"]


@pytest.mark.anyio
async def test_field_names_match_case_insensitively_like_go(client: httpx.AsyncClient) -> None:
    body = {"pod": guaranteed("db", "4"), "nodenames": ["big"]}
    assert (await client.post("/filter", json=body)).json()["NodeNames"] == ["big"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "ExtenderArgs is not JSON"),
        (b"[]", "ExtenderArgs must be a JSON object"),
        (b'{"NodeNames": ["a"]}', "ExtenderArgs.Pod: a v1.Pod object is required"),
        (json.dumps({"Pod": guaranteed("p", "1")}).encode(), "neither NodeNames"),
        (json.dumps({"Pod": guaranteed("p", "1"), "NodeNames": "a"}).encode(), "NodeNames: expected a list"),
        (json.dumps({"Pod": guaranteed("p", "1"), "NodeNames": [1]}).encode(), "NodeNames[0]"),
        (json.dumps({"Pod": {"spec": "x"}, "NodeNames": ["a"]}).encode(), "ExtenderArgs.Pod"),
        (json.dumps({"Pod": guaranteed("p", "one"), "NodeNames": ["big"]}).encode(), "ExtenderArgs.Pod"),
        (json.dumps({"Pod": guaranteed("p", "1"), "Nodes": {"items": [{}]}}).encode(), "metadata.name"),
    ],
)
@pytest.mark.anyio
async def test_malformed_args_are_400_with_a_message(client: httpx.AsyncClient, body: bytes, message: str) -> None:
    for verb in ("/filter", "/prioritize"):
        response = await client.post(verb, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 400, response.text
        assert response.json()["reason"] == "MalformedExtenderArgs"
        assert message in response.json()["message"]


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=12,
    )


_PODS = st.one_of(
    _json_values(),
    st.fixed_dictionaries({"spec": st.fixed_dictionaries({"containers": _json_values()})}),
    st.fixed_dictionaries(
        {
            "metadata": _json_values(),
            "spec": st.fixed_dictionaries({"containers": st.lists(_json_values(), max_size=2)}),
        }
    ),
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(pod=_PODS, names=_json_values())
def test_no_body_makes_it_answer_500(extender: Extender, pod: Any, names: Any) -> None:
    app = main.create_app(main.Components(extender=extender))

    async def send() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender") as http:
            for verb in ("/filter", "/prioritize"):
                response = await http.post(verb, json={"Pod": pod, "NodeNames": names})
                assert response.status_code in (200, 400), response.text
                if response.status_code == 200 and verb == "/filter":
                    assert response.json()["Error"] == ""

    asyncio.run(send())


def _resources(raw: dict[str, Any]) -> Any:
    from shared.pod import parse_pod

    return parse_pod(raw).to_resources(pod_level_resources=True)


def test_an_empty_store_passes_everything_as_no_opinion() -> None:
    ext = Extender(ReplicaStore(freshness=5), EnforcerDirectory({"*": "https://{node}:8443"}))
    result = ext.filter(args(guaranteed("db", "4"), ["a", "b"]))
    assert result["NodeNames"] == ["a", "b"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_stale_replica_passes_with_no_opinion_but_never_fitting_pods_stay_unresolvable() -> None:
    clock = Clock()
    full = engine(2, 8, name="full")
    for i in range(2):
        assert full.admit(_resources(guaranteed(f"filler-{i}", "15", "1Gi"))).admitted
    ext = extender_over({"full": full}, freshness=5.0, clock=clock)
    assert ext.filter(args(guaranteed("two", "2"), ["full"]))["FailedNodes"] == {
        "full": "OutOfcpu: Node didn't have enough resource: cpu, requested: 2000, used: 30000, capacity: 31000"
    }
    clock.now += 6.0  # no poll confirmed the replica since, and none failed: the poller is behind
    result = ext.filter(args(guaranteed("two", "2"), ["full"]))
    assert result["NodeNames"] == ["full"] and result["FailedNodes"] == {}
    assert ext.prioritize(args(guaranteed("two", "2"), ["full"])) == [{"Host": "full", "Score": 0}]
    # what no state of the node could change is still known: 17 CPUs never fit one 16-CPU NUMA node
    wide = ext.filter(args(guaranteed("wide", "17"), ["full"]))
    assert list(wide["FailedAndUnresolvableNodes"]) == ["full"]


def test_answers_are_cached_per_state_and_shape() -> None:
    ext = extender_over({f"n{i}": engine(2, 8, name=f"n{i}") for i in range(6)})  # six nodes, one state
    ext.filter(args(guaranteed("a", "4"), [f"n{i}" for i in range(6)]))
    hits, misses = ext.cache_stats
    assert misses == 2  # the empty twin and the one shared state: not one dry run per node
    ext.prioritize(args(guaranteed("b", "4"), [f"n{i}" for i in range(6)]))  # another pod, same shape
    assert ext.cache_stats[1] == misses


def test_a_node_already_holding_the_pods_allocation_passes_and_is_preferred() -> None:
    # the binding webhook allocated, then the binding failed: the scheduler asks again for the same pod
    tight, other = engine(2, 4, name="tight"), engine(2, 8, name="other")
    pod = guaranteed("retried", "8", "1Gi", uid="6f1c1b3e-3a55-4d43-9f4e-0d6a3a1b2c9d")
    assert tight.admit(_resources(pod)).admitted  # all 8 CPUs of NUMA node 1; NUMA node 0 keeps 7 (CPU 0 reserved)
    ext = extender_over({"tight": tight, "other": other})
    assert ext.filter(args(pod, ["tight", "other"]))["NodeNames"] == ["tight", "other"]
    scores = {s["Host"]: s["Score"] for s in ext.prioritize(args(pod, ["tight", "other"]))}
    assert scores["tight"] == 10 >= scores["other"]
    stranger = guaranteed("stranger", "8", "1Gi")
    assert "tight" in ext.filter(args(stranger, ["tight"]))["FailedNodes"]


def test_nodes_without_the_pod_level_resources_gate_read_the_pod_without_spec_resources() -> None:
    # the seed database on a node without PodLevelResources: only its containers count (6 CPUs), which
    # fit one of the small node's 6-CPU NUMA nodes... except that CPU 0 is reserved, so NUMA node 1 it is
    gated = engine(2, 3, name="gated")
    plain = engine(2, 3, name="plain", featureGates={"PodLevelResources": False})
    ext = extender_over({"gated": gated, "plain": plain})
    result = ext.filter(args(fixture_pod("tightly-coupled-database"), ["gated", "plain"]))
    assert result["NodeNames"] == ["plain"]
    assert list(result["FailedAndUnresolvableNodes"]) == ["gated"]
