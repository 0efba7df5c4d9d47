"""Load on the real services over TLS, and a burst of bindings through the webhook to a real enforcer.

* Enforcer: 16 client threads (client certificates, keep-alive connections)
  each loop allocate -> read the pod -> list -> release for the duration,
  pods' cgroups really written to a v2 fixture tree.  Zero errors: every answer
  is the expected one (201, 200, 200, released).
* Webhook: 16 client threads send ``/mutate`` CREATE reviews of the recorded
  seed pods (as the apiserver does) for the duration; every one allowed.
* Burst: N pods are created through ``/validate`` (so the webhook knows them),
  then all N ``pods/binding`` reviews are sent at once to ``/mutate``; the
  webhook asks the enforcer over mutual TLS.  Every binding must get an
  answer; an admitted one carries the enforcer's allocation; a refused one
  carries a kubelet reason (code 403), and the node as it ends up refuses it
  too (replayed on the engine restored from the state file: a pod refused
  while the node was emptier cannot fit a fuller node, so a pod this replay
  admits was wrongly refused).  The enforcer then holds exactly the admitted
  pods, no CPU twice.

Figures (p50/p90/p99/max per operation, throughput, the burst's outcome) are
printed and written as JSON: by the slow variants to
``tests/reliability/results/latest.json``, otherwise to ``tmp_path``.  Timing is
reported, never asserted.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from reliability_kit import (
    NODE,
    REVIEWS,
    SEED_KUBELET,
    SEED_PODS,
    TOPOLOGY,
    EnforcerNode,
    Pki,
    WebhookNode,
    allocation_request,
    burstable_pod,
    cpus_assigned_twice,
    fixture_pod,
    guaranteed_pod,
    https_client,
    latency_summary,
    qos_of,
    uid_for,
    write_results,
)

from enforcer.engine import builder
from enforcer.engine import config as engine_config
from enforcer.service import requests
from enforcer.state import journal
from enforcer.topology import machine
from servicekit import tls
from shared import contract

CLIENTS = 16
# What the kubelet answers when a pod does not fit (enforcer.errors; admission-and-api.md).
KUBELET_REASONS = {
    "TopologyAffinityError",
    "OutOfcpu",
    "OutOfmemory",
    "SMTAlignmentError",
    "UnexpectedAdmissionError",
    "EmptyPodSharedPoolError",
}


@dataclass
class Recorder:
    """Latencies by operation and every unexpected answer, shared by the client threads."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def timed(self, operation: str, call: Callable[[], httpx.Response], ok: Callable[[httpx.Response], bool]) -> None:
        started = time.perf_counter()
        try:
            response = call()
        except httpx.HTTPError as err:
            with self.lock:
                self.errors.append(f"{operation}: {err!r}")
            return
        elapsed = time.perf_counter() - started
        with self.lock:
            self.latencies.setdefault(operation, []).append(elapsed)
            if not ok(response):
                self.errors.append(f"{operation}: {response.status_code} {response.text[:300]}")

    def summary(self, seconds: float) -> dict[str, Any]:
        every = [s for samples in self.latencies.values() for s in samples]
        return {
            "clients": CLIENTS,
            "seconds": round(seconds, 1),
            "errors": len(self.errors),
            "requests_per_second": round(len(every) / seconds, 1),
            "all": latency_summary(every),
            **{operation: latency_summary(samples) for operation, samples in sorted(self.latencies.items())},
        }


def run_clients(duration: float, loop: Callable[[int, threading.Event, Recorder], None]) -> tuple[Recorder, float]:
    recorder, stop = Recorder(), threading.Event()
    threads = [threading.Thread(target=loop, args=(i, stop, recorder), name=f"load-{i}") for i in range(CLIENTS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    stop.wait(duration)  # the run's length, not a synchronisation: the clients stop when told
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive(), "a load client hung"
    return recorder, time.perf_counter() - started


def status(expected: int) -> Callable[[httpx.Response], bool]:
    return lambda response: response.status_code == expected


def released(response: httpx.Response) -> bool:
    return response.status_code == 200 and response.json()["released"] is True


def allowed(response: httpx.Response) -> bool:
    return response.status_code == 200 and response.json()["response"]["allowed"] is True


# -- the enforcer ---------------------------------------------------------------------------------------


def enforcer_load(node: EnforcerNode, duration: float) -> dict[str, Any]:
    with node.running() as enforcer:

        def client_loop(index: int, stop: threading.Event, recorder: Recorder) -> None:
            with node.writer(enforcer) as http:
                for n in itertools.count():
                    if stop.is_set():
                        return
                    name = f"load-{index}-{n}"
                    pod = guaranteed_pod(name, 1) if n % 2 == 0 else burstable_pod(name, 200)
                    node.cgroups.add_pod(pod)
                    uid = pod["metadata"]["uid"]
                    body = allocation_request(pod)
                    recorder.timed("allocate", partial(http.post, "/allocations", json=body), status(201))
                    recorder.timed("read", partial(http.get, f"/allocations/{uid}"), status(200))
                    recorder.timed("list", partial(http.get, "/allocations"), status(200))
                    recorder.timed("release", partial(http.delete, f"/allocations/{uid}"), released)

        recorder, seconds = run_clients(duration, client_loop)
        with node.writer(enforcer) as http:
            left = http.get("/allocations").json()["items"]
    assert recorder.errors == [], recorder.errors[:10]
    assert left == [], "every allocation was released, so none may be left"
    return recorder.summary(seconds)


# -- the webhook ----------------------------------------------------------------------------------------


def seed_create_reviews() -> list[bytes]:
    return [(REVIEWS / f"create-mutate-{name}.json").read_bytes() for name in SEED_PODS]


def webhook_load(webhook_node: WebhookNode, pki: Pki, duration: float) -> dict[str, Any]:
    reviews = seed_create_reviews()
    with webhook_node.running() as webhook:

        def client_loop(index: int, stop: threading.Event, recorder: Recorder) -> None:
            with https_client(webhook.base_url, pki.ca) as apiserver:
                for n in itertools.count(index):
                    if stop.is_set():
                        return
                    body = reviews[n % len(reviews)]
                    recorder.timed("mutate_create", partial(apiserver.post, "/mutate", content=body), allowed)

        recorder, seconds = run_clients(duration, client_loop)
    assert recorder.errors == [], recorder.errors[:10]
    return recorder.summary(seconds)


# -- the binding burst ----------------------------------------------------------------------------------


def review_for(template: str, *, uid: str, obj: dict[str, Any]) -> bytes:
    """A recorded review with another request uid and object (a Pod or a Binding)."""
    document = json.loads((REVIEWS / template).read_text())
    request = document["request"]
    metadata = obj["metadata"]
    request.update(uid=uid, name=metadata["name"], namespace=metadata["namespace"])
    request["object"] = obj
    return json.dumps(document).encode()


def binding_object(pod: dict[str, Any]) -> dict[str, Any]:
    metadata = pod["metadata"]
    return {
        "kind": "Binding",
        "apiVersion": "v1",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"]},
        "target": {"kind": "Node", "name": NODE},
    }


async def send_all_at_once(url: str, pki: Pki, bodies: list[bytes]) -> list[tuple[httpx.Response | Exception, float]]:
    """Every review on its own connection, released together: the apiserver's view of a scheduler burst."""
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    start = asyncio.Event()
    async with httpx.AsyncClient(verify=tls.client_context(pki.ca), limits=limits, timeout=60, trust_env=False) as c:

        async def one(body: bytes) -> tuple[httpx.Response | Exception, float]:
            await start.wait()
            began = time.perf_counter()
            try:
                return await c.post(f"{url}/mutate", content=body), time.perf_counter() - began
            except httpx.HTTPError as err:
                return err, time.perf_counter() - began

        tasks = [asyncio.create_task(one(body)) for body in bodies]
        await asyncio.sleep(0)  # let every task reach the start line
        start.set()
        return list(await asyncio.gather(*tasks))


def allocation_from(answer: dict[str, Any]) -> contract.Allocation:
    annotations: dict[str, Any] = {}
    for op in json.loads(base64.b64decode(answer["patch"])):
        if op["path"] == "/metadata/annotations":
            annotations.update(op["value"])
        elif op["path"].startswith("/metadata/annotations/"):
            annotations[op["path"].rsplit("/", 1)[-1].replace("~1", "/")] = op["value"]
    return contract.Allocation.model_validate_json(annotations[contract.ALLOCATION_ANNOTATION])


def lasting(allocation: contract.Allocation) -> dict[str, Any]:
    """An allocation without what moves on its own: the node's shared set (it shrinks as others are admitted)."""
    document = allocation.model_dump(exclude={"resize"})
    for container in document["containers"].values():
        if container["assignment"] == "node_shared":
            container["cpus"] = None
    return document


@dataclass
class Burst:
    """What a burst of bindings produced: the figures for the document and every problem found."""

    figures: dict[str, Any]
    problems: list[str]


def binding_burst(
    node: EnforcerNode, directory: Path, pki: Pki, count: int, webhook_settings: dict[str, Any] | None = None
) -> Burst:
    pods = [
        fixture_pod(SEED_PODS[i % len(SEED_PODS)], name=f"burst-{i}", uid=uid_for(f"burst-{i}")) for i in range(count)
    ]
    with node.running() as enforcer:
        webhook_node = WebhookNode(directory, pki, enforcer.base_url, webhook_settings or {})
        with webhook_node.running() as webhook, https_client(webhook.base_url, pki.ca) as apiserver:
            for i, pod in enumerate(pods):
                node.cgroups.add_pod(pod)
                template = f"create-validate-{SEED_PODS[i % len(SEED_PODS)]}.json"
                created = apiserver.post("/validate", content=review_for(template, uid=f"create-{i}", obj=pod))
                assert created.status_code == 200 and created.json()["response"]["allowed"] is True, created.text
            bindings = [
                review_for("binding-tightly-coupled-database.json", uid=f"bind-{i}", obj=binding_object(pod))
                for i, pod in enumerate(pods)
            ]
            started = time.perf_counter()
            answers = asyncio.run(send_all_at_once(webhook.base_url, pki, bindings))
            wall = time.perf_counter() - started
        with node.writer(enforcer) as http:
            held = {item["uid"]: item for item in http.get("/allocations").json()["items"]}

    problems: list[str] = []
    admitted: dict[str, contract.Allocation] = {}
    refused: dict[str, str] = {}
    bound_unallocated: set[str] = set()  # shared-pool pods bound without the node's answer (issue 12 scope rule)
    outcomes: Counter[str] = Counter()
    for pod, (response, _) in zip(pods, answers, strict=True):
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        if not isinstance(response, httpx.Response) or response.status_code != 200:
            problems.append(f"{name}: no answer: {response!r}")
            outcomes["lost"] += 1
            continue
        answer = response.json()["response"]
        if answer["allowed"] and "patch" not in answer:
            if qos_of(pod) == "Guaranteed":
                problems.append(f"{name}: a Guaranteed pod was bound without an allocation: {answer.get('warnings')}")
            bound_unallocated.add(uid)
            outcomes["bound_shared_without_answer"] += 1
            continue
        if answer["allowed"]:
            allocation = allocation_from(answer)
            if (allocation.uid, allocation.node) != (uid, NODE):
                problems.append(f"{name}: admitted with the allocation of {allocation.uid} on {allocation.node}")
            admitted[uid] = allocation
            outcomes["admitted"] += 1
            continue
        status = answer["status"]
        outcomes[status["reason"]] += 1
        if status["reason"] in KUBELET_REASONS and status["code"] == 403:
            refused[uid] = status["reason"]
        else:
            problems.append(f"{name}: denied without a kubelet reason: {status['code']} {status['reason']}")

    # a shared-pool pod bound without the node's answer may or may not be held: the pod runs there either way
    orphans = sorted(held.keys() - admitted.keys() - bound_unallocated)
    problems += [f"the enforcer holds {uid}, whose binding was denied" for uid in orphans]
    missing = sorted(admitted.keys() - held.keys())
    problems += [f"{uid} was admitted but the enforcer does not hold it" for uid in missing]
    for uid in sorted(admitted.keys() & held.keys()):
        if lasting(contract.Allocation.model_validate(held[uid])) != lasting(admitted[uid]):
            problems.append(f"{uid}: the binding recorded another allocation than the node holds")
    twice = cpus_assigned_twice(list(held.values()))
    if twice:
        problems.append(f"CPUs held twice: {twice}")

    engine = builder.restore(
        machine.load(TOPOLOGY),
        engine_config.from_kubelet(SEED_KUBELET, name=NODE),
        journal.JournaledStore(node.state_path).load() or {},
    )
    problems += [f"engine: {problem}" for problem in engine.check()]
    by_uid = {pod["metadata"]["uid"]: pod for pod in pods}
    for uid, reason in refused.items():
        if engine.admit(requests.pod_resources(by_uid[uid], pod_level_resources=True)).admitted:
            problems.append(f"{by_uid[uid]['metadata']['name']} was refused ({reason}) but fits the node")

    figures = {
        "bindings": count,
        "answered": count - outcomes["lost"],
        "outcomes": dict(sorted(outcomes.items())),
        "allocated_although_denied": len(orphans),
        "wall_seconds": round(wall, 2),
        "binding_latency": latency_summary([seconds for _, seconds in answers]),
        "webhook_settings": webhook_settings or "defaults (timeoutSeconds 10, enforcerBudgetSeconds 3, retries 1)",
    }
    return Burst(figures, problems)


# -- the tests ------------------------------------------------------------------------------------------


def load_figures(node: EnforcerNode, tmp_path: Path, pki: Pki, duration: float) -> dict[str, Any]:
    enforcer = enforcer_load(node, duration)
    with node.running() as running_enforcer:  # the webhook needs an enforcer to start; CREATE reviews never call it
        webhook = webhook_load(WebhookNode(tmp_path / "webhook", pki, running_enforcer.base_url), pki, duration)
    return {"enforcer_allocate_read_list_release": enforcer, "webhook_mutate_create": webhook}


@pytest.mark.timeout(180)
def test_sixteen_clients_for_five_seconds_get_no_errors(
    node: EnforcerNode, tmp_path: Path, pki: Pki, results_file: Path
) -> None:
    write_results(results_file, "load_5s", load_figures(node, tmp_path, pki, 5.0))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sixteen_clients_for_sixty_seconds_get_no_errors(
    node: EnforcerNode, tmp_path: Path, pki: Pki, results_file: Path
) -> None:
    write_results(results_file, "load_60s", load_figures(node, tmp_path, pki, 60.0))


def check_burst(burst: Burst, results_file: Path, name: str) -> None:
    write_results(results_file, name, {**burst.figures, "problems": burst.problems[:20]})
    assert burst.problems == [], f"{len(burst.problems)} problems: {burst.problems[:10]}"


@pytest.mark.timeout(180)
def test_a_burst_of_fifty_bindings_is_decided_correctly_and_none_is_lost(
    node: EnforcerNode, tmp_path: Path, pki: Pki, results_file: Path
) -> None:
    check_burst(binding_burst(node, tmp_path / "webhook", pki, 50), results_file, "binding_burst_50")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_burst_of_five_hundred_bindings_is_decided_correctly_and_none_is_lost(
    node: EnforcerNode, tmp_path: Path, pki: Pki, results_file: Path
) -> None:
    """With the deployed settings (manifests/base/config/webhook.yaml: 10 s, 3 s budget, one retry).

    A performance claim as much as a correctness one: it needs the two cores to itself. With another
    CPU-heavy job beside it the 3 s budget runs out and Guaranteed bindings are denied
    ``EnforcerUnavailable`` (RELIABILITY.md, known limits); the 30 s variant below is the one that
    holds on a loaded machine."""
    check_burst(binding_burst(node, tmp_path / "webhook", pki, 500), results_file, "binding_burst_500")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_burst_of_five_hundred_bindings_within_the_apiservers_longest_timeout_is_decided_correctly(
    node: EnforcerNode, tmp_path: Path, pki: Pki, results_file: Path
) -> None:
    """timeoutSeconds 30 (the apiserver's maximum), 15 s per enforcer call: correctness with time to spare."""
    settings = {"timeoutSeconds": 30, "enforcerBudgetSeconds": 15}
    burst = binding_burst(node, tmp_path / "webhook", pki, 500, settings)
    check_burst(burst, results_file, "binding_burst_500_timeout_30s")


def test_the_load_figures_are_nearest_rank_percentiles() -> None:
    figures = latency_summary([0.001 * n for n in range(1, 101)])
    assert (figures["p50_ms"], figures["p99_ms"], figures["max_ms"], figures["requests"]) == (50.0, 99.0, 100.0, 100)
