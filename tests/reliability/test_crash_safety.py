"""Crash safety: the real enforcer is SIGKILLed at random moments under load and must come back whole.

Each round starts ``numaguard enforcer`` (TLS on a fresh loopback port, the
seed node, a state dir and a cgroup v2 fixture tree, cgroups really written),
lets several client threads allocate, resize, read and release pods with a
client certificate, and kills the process with SIGKILL from a timer thread at
a random moment (seeded RNG) while requests are in flight.  After each kill:

* the state file verifies (``CheckpointStore.load``) and the engine restored
  from it passes its own consistency check;
* the restarted enforcer serves exactly what the file holds, and every
  *acknowledged* change (a 200/201 received before the kill) is there: an
  acknowledged allocation is present with its spec, an acknowledged release or
  refusal is absent, an Accepted resize shows its new spec;
* a change with no answer is all or nothing: the pod is absent, or present
  with exactly the spec sent (and the CPU count that spec asks for);
* no CPU is held twice, none is reserved, none is in the shared pool;
* the pod cgroups hold what ``GET /allocations`` says (the restart's reconcile).

The per-pod model: each pod belongs to one client thread, so at the kill it
has at most one change in flight.  ``confirmed`` is the last acknowledged
state (a spec hash, or None for absent); ``maybe`` the states an unanswered
change, or a Deferred resize that a later release may apply, can have left.
"""

from __future__ import annotations

import contextlib
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from reliability_kit import (
    NODE,
    SEED_KUBELET,
    SEED_PODS,
    TOPOLOGY,
    EnforcerNode,
    ServiceProcess,
    allocation_request,
    burstable_pod,
    cgroup_mismatches,
    cpus_assigned_twice,
    cpus_of,
    exclusive_cpus,
    fixture_pod,
    guaranteed_pod,
    spec_hash,
    with_main_resources,
    write_results,
)

from enforcer.engine import builder
from enforcer.engine import config as engine_config
from enforcer.service import requests
from enforcer.state import journal
from enforcer.topology import machine

CLIENT_THREADS = 4
PODS_PER_THREAD = 3
KILL_DELAY_SECONDS = (0.02, 0.6)
SEED = 20260501
ABSENT = None


@dataclass
class TrackedPod:
    """One pod's acknowledged state and what an unanswered change may have made of it."""

    name: str
    resizable: bool
    spec: dict[str, Any]
    confirmed: str | None = ABSENT
    maybe: set[str | None] = field(default_factory=set)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # spec hash -> the spec sent with it

    @property
    def uid(self) -> str:
        uid: str = self.spec["metadata"]["uid"]
        return uid

    def allowed(self) -> set[str | None]:
        return {self.confirmed} | self.maybe

    def remember(self, raw: dict[str, Any]) -> str:
        digest = spec_hash(raw)
        self.specs[digest] = raw
        return digest


@dataclass
class Tally:
    """What the run did, for the report and for the assertions that the kills hit live traffic."""

    kills: int = 0
    kills_with_requests_in_flight: int = 0
    acknowledged: dict[str, int] = field(default_factory=dict)
    unresolved: int = 0
    unanswered_applied: int = 0
    problems: list[str] = field(default_factory=list)

    def ack(self, what: str) -> None:
        self.acknowledged[what] = self.acknowledged.get(what, 0) + 1


class InFlight:
    """Counts requests between send and answer, so a kill can say whether it hit live traffic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    @contextlib.contextmanager
    def request(self) -> Any:
        with self._lock:
            self.count += 1
        try:
            yield
        finally:
            with self._lock:
                self.count -= 1


def expected_exclusive_cpus(raw: dict[str, Any]) -> int:
    """How many CPUs an allocation of ``raw`` holds for itself on this node (static policy, integer CPUs)."""
    pod = requests.pod_resources(raw, pod_level_resources=True)
    if pod.qos_class != "Guaranteed":
        return 0
    if pod.pod is not None and "cpu" in pod.pod.requests:
        return pod.pod.requests["cpu"] // 1000
    return sum(c.resources.requests.get("cpu", 0) // 1000 for c in pod.containers if c.is_long_running)


class Client:
    """One client thread's pods and its loop of changes until the enforcer dies under it."""

    def __init__(
        self, index: int, round_: int, node: EnforcerNode, pods: list[TrackedPod], tally: Tally, flight: InFlight
    ) -> None:
        self.index, self.round, self.node, self.pods, self.tally, self.flight = index, round_, node, pods, tally, flight
        self.rng = random.Random(f"{SEED}/{round_}/{index}")
        self.made = 0

    def run(self, http: httpx.Client, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.step(http)
        except httpx.TransportError:
            return  # the enforcer is gone: whatever was in flight stays unanswered

    def step(self, http: httpx.Client) -> None:
        present = [p for p in self.pods if p.confirmed is not ABSENT]
        roll = self.rng.random()
        if len(self.pods) < PODS_PER_THREAD and (roll < 0.45 or not present):
            self.allocate(http)
        elif roll < 0.65 and present:
            self.read(http, self.rng.choice(present))
        elif roll < 0.85 and any(p.resizable for p in present):
            self.resize(http, self.rng.choice([p for p in present if p.resizable]))
        elif present:
            self.release(http, self.rng.choice(present))

    def new_pod(self) -> TrackedPod:
        self.made += 1
        name = f"k{self.round}-c{self.index}-{self.made}"
        kind = self.rng.random()
        if kind < 0.4:
            return TrackedPod(name, True, guaranteed_pod(name, self.rng.choice((1, 2))))
        if kind < 0.65:
            return TrackedPod(name, True, burstable_pod(name, self.rng.choice((100, 250, 500))))
        return TrackedPod(name, False, fixture_pod(self.rng.choice(SEED_PODS), name=name))

    def allocate(self, http: httpx.Client) -> None:
        pod = self.new_pod()
        digest = pod.remember(pod.spec)
        self.node.cgroups.add_pod(pod.spec)  # as the kubelet creates the pod cgroup
        pod.maybe = {digest}
        self.pods.append(pod)
        with self.flight.request():
            response = http.post("/allocations", json=allocation_request(pod.spec))
        if response.status_code in (200, 201):
            self.check(response.json()["specHash"] == digest, f"{pod.name}: allocated with another spec")
            pod.confirmed, pod.maybe = digest, set()
            self.tally.ack("allocated")
        elif response.status_code == 403:
            pod.confirmed, pod.maybe = ABSENT, set()
            self.pods.remove(pod)
            self.tally.ack("refused")
        else:
            self.check(False, f"{pod.name}: allocation answered {response.status_code} {response.text}")

    def read(self, http: httpx.Client, pod: TrackedPod) -> None:
        with self.flight.request():
            response = http.get(f"/allocations/{pod.uid}")
        self.check(response.status_code == 200, f"{pod.name}: read answered {response.status_code}")
        if response.status_code == 200:
            self.check(response.json()["specHash"] in pod.allowed(), f"{pod.name}: read shows an unknown spec")
        self.tally.ack("read")

    def resize(self, http: httpx.Client, pod: TrackedPod) -> None:
        main = pod.spec["spec"]["containers"][0]["resources"]
        if main["requests"]["cpu"] == main["limits"]["cpu"]:
            cpus = self.rng.choice([n for n in (1, 2, 3) if str(n) != main["requests"]["cpu"]])
            wanted = {"cpu": str(cpus), "memory": main["requests"]["memory"]}
            desired = with_main_resources(pod.spec, dict(wanted), dict(wanted))
        else:
            millis = self.rng.choice((100, 200, 300, 400))
            desired = with_main_resources(
                pod.spec,
                {"cpu": f"{millis}m", "memory": main["requests"]["memory"]},
                {"cpu": f"{2 * millis}m", "memory": main["limits"]["memory"]},
            )
        digest = pod.remember(desired)
        queued = set(pod.maybe)  # what an earlier Deferred resize may still do
        pod.maybe = queued | {digest}
        with self.flight.request():
            response = http.post(f"/allocations/{pod.uid}/resize", json={"pod": desired})
        if response.status_code != 200:
            self.check(False, f"{pod.name}: resize answered {response.status_code} {response.text}")
            return
        result = response.json()
        pod.confirmed = result["allocation"]["specHash"]
        if result["status"] == "Accepted":
            self.check(pod.confirmed == digest, f"{pod.name}: Accepted resize not applied")
            pod.spec, pod.maybe = desired, set()
        elif result["status"] == "Deferred":  # queued: a later release may apply it
            pod.maybe = (queued | {digest}) - {pod.confirmed}
        else:  # Infeasible: never applied by itself
            pod.maybe = queued - {pod.confirmed}
        self.tally.ack(f"resize {result['status']}")

    def release(self, http: httpx.Client, pod: TrackedPod) -> None:
        pod.maybe = pod.maybe | {ABSENT}
        with self.flight.request():
            response = http.delete(f"/allocations/{pod.uid}")
        released = response.status_code == 200 and response.json()["released"] is True
        self.check(released, f"{pod.name}: release answered {response.status_code} {response.text}")
        pod.confirmed, pod.maybe = ABSENT, set()
        self.pods.remove(pod)
        self.tally.ack("released")

    def check(self, ok: bool, problem: str) -> None:
        if not ok:
            self.tally.problems.append(f"round {self.round}: {problem}")


def verify_state_file(node: EnforcerNode) -> set[str]:
    """The state file after a kill loads, verifies and restores to a consistent engine; the uids it holds."""
    snapshot = journal.JournaledStore(node.state_path).load()
    assert snapshot is not None, "the state file is missing after a kill"
    config = engine_config.from_kubelet(SEED_KUBELET, name=NODE)
    engine = builder.restore(machine.load(TOPOLOGY), config, snapshot)
    assert engine.check() == [], engine.check()
    return set(engine.pod_uids())


def verify_restart(
    node: EnforcerNode, enforcer: ServiceProcess, pods: list[TrackedPod], saved: set[str], tally: Tally
) -> None:
    """After a restart: acknowledged changes present, unanswered ones whole or absent, no CPU twice, cgroups in step."""
    with node.writer(enforcer) as http:
        listing = http.get("/allocations").json()
        shared_pool = cpus_of(http.get("/topology").json()["sharedPool"])
    assert listing["state"]["available"] is True, listing["state"]
    items = {item["uid"]: item for item in listing["items"]}
    assert set(items) == saved, "the restarted enforcer does not serve what the state file holds"
    tracked = {pod.uid: pod for pod in pods}
    assert set(items) <= set(tracked), f"allocations nobody asked for: {set(items) - set(tracked)}"
    for pod in pods:
        item = items.get(pod.uid)
        observed = None if item is None else item["specHash"]
        assert observed in pod.allowed(), (
            f"{pod.name}: after the restart {observed!r}, acknowledged {pod.confirmed!r}, "
            f"unanswered may give {pod.maybe!r}"
        )
        if observed != pod.confirmed:
            tally.unanswered_applied += 1
        if pod.maybe - {pod.confirmed}:
            tally.unresolved += 1
        if item is not None and observed is not None:
            spec = pod.specs[observed]
            assert len(exclusive_cpus(item)) == expected_exclusive_cpus(spec), f"{pod.name} is half-allocated"
            wanted = {c["name"] for c in spec["spec"]["containers"]}
            wanted |= {c["name"] for c in spec["spec"].get("initContainers", []) if c.get("restartPolicy") == "Always"}
            assert set(item["containers"]) == wanted, f"{pod.name}: containers {set(item['containers'])}"
            assert cgroup_mismatches(node.cgroups, item, spec) == []
    assert cpus_assigned_twice(list(items.values())) == {}
    held = set().union(*(exclusive_cpus(item) for item in items.values()))
    assert held.isdisjoint(shared_pool), f"CPUs both held and shared: {sorted(held & shared_pool)}"
    # the restart is the new truth: resolve every unanswered change by what was observed
    for pod in list(pods):
        item = items.get(pod.uid)
        if item is None:
            pods.remove(pod)
            continue
        pod.confirmed = item["specHash"]
        pod.spec = pod.specs[pod.confirmed]
        deferred = item.get("resize") is not None and item["resize"]["state"] == "Deferred"
        pod.maybe = (pod.maybe - {ABSENT, pod.confirmed}) if deferred else set()


def kill_counting(enforcer: ServiceProcess, flight: InFlight, seen: list[int]) -> None:
    """The timer's action: note how many requests are in flight, then SIGKILL."""
    seen.append(flight.count)
    enforcer.kill()


def kill_loop(node: EnforcerNode, kills: int, seed: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    threads_pods: list[list[TrackedPod]] = [[] for _ in range(CLIENT_THREADS)]
    saved: set[str] = set()
    for round_ in range(kills + 1):
        enforcer = node.process().start()
        try:
            ready = enforcer.wait_serving()
            assert ready.status_code == 200, f"not ready after kill {round_}: {ready.text}"
            every_pod = [pod for pods in threads_pods for pod in pods]
            verify_restart(node, enforcer, every_pod, saved, tally)
            for pods in threads_pods:
                pods[:] = [pod for pod in pods if pod in every_pod]
            if round_ == kills:
                assert enforcer.stop() == 0
                break
            flight = InFlight()
            clients = [Client(i, round_, node, threads_pods[i], tally, flight) for i in range(CLIENT_THREADS)]
            stop = threading.Event()
            https = [node.writer(enforcer) for _ in clients]
            workers = [
                threading.Thread(target=c.run, args=(h, stop), name=f"client-{c.index}")
                for c, h in zip(clients, https, strict=True)
            ]
            in_flight_at_kill: list[int] = []
            timer = threading.Timer(
                rng.uniform(*KILL_DELAY_SECONDS), kill_counting, args=(enforcer, flight, in_flight_at_kill)
            )
            for worker in workers:
                worker.start()
            timer.start()
            timer.join()
            stop.set()
            for worker in workers:
                worker.join(timeout=60)
                assert not worker.is_alive(), "a client thread did not notice the kill"
            for http in https:
                http.close()
            tally.kills += 1
            tally.kills_with_requests_in_flight += int(in_flight_at_kill[0] > 0)
            assert not tally.problems, tally.problems
            saved = verify_state_file(node)
        finally:
            enforcer.kill()
    return tally


def run_and_report(node: EnforcerNode, kills: int, results_file: Path) -> None:
    tally = kill_loop(node, kills, SEED + kills)
    assert tally.kills == kills
    # the kills must hit live traffic, or this test proves nothing about in-flight changes
    assert tally.kills_with_requests_in_flight >= kills * 0.8, tally
    assert tally.acknowledged.get("allocated", 0) >= kills
    write_results(
        results_file,
        f"crash_safety_{kills}_kills",
        {
            "kills": tally.kills,
            "kills_with_requests_in_flight": tally.kills_with_requests_in_flight,
            "client_threads": CLIENT_THREADS,
            "acknowledged_changes": dict(sorted(tally.acknowledged.items())),
            "pods_with_an_unresolved_change": tally.unresolved,
            "unanswered_changes_found_applied": tally.unanswered_applied,
            "enforcer_starts": node.starts,
        },
    )


@pytest.mark.timeout(240)
def test_five_sigkills_under_load_lose_no_acknowledged_change_and_half_apply_nothing(
    node: EnforcerNode, results_file: Path
) -> None:
    run_and_report(node, 5, results_file)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_fifty_sigkills_under_load_lose_no_acknowledged_change_and_half_apply_nothing(
    node: EnforcerNode, results_file: Path
) -> None:
    run_and_report(node, 50, results_file)
