"""Cgroup passes in steps that step aside for the API's requests in flight (enforcer.service.in_flight)."""

from __future__ import annotations

import threading
from collections.abc import Collection

import pytest

from enforcer.cgroups import recording
from enforcer.service import reconciler as reconciler_module
from enforcer.service.in_flight import RequestsInFlight
from enforcer.service.node_service import NodeService
from enforcer.service.reconciler import DesiredState
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, PodResources, Resources

ONE_CPU = Resources({"cpu": 1000, "memory": 64 << 20}, {"cpu": 1000, "memory": 64 << 20})


def one_cpu_pod(index: int) -> PodResources:
    main = ContainerResources("main", "c", ONE_CPU)
    return PodResources(uid=f"pod-{index:03d}", namespace="ns", name=f"pod-{index}", containers=(main,))


class CountingInFlight:
    """A real RequestsInFlight that also tells a test when a pass has come to step aside."""

    def __init__(self) -> None:
        self.requests = RequestsInFlight()
        self.calls: list[float] = []
        self.looks = 0
        self.asked = threading.Event()

    @property
    def count(self) -> int:
        self.looks += 1
        return self.requests.count

    def wait_idle(self, timeout: float) -> float:
        self.calls.append(timeout)
        self.asked.set()
        return self.requests.wait_idle(timeout)


def with_step_aside(service: NodeService, step_aside: CountingInFlight) -> None:
    service.reconciler._in_flight = step_aside


def pod_paths(service: NodeService) -> set[str]:
    driver = service.reconciler.driver
    assert isinstance(driver, recording.RecordingCgroupDriver)
    return {w.path for w in driver.writes if "-pod" in w.path}


def test_wait_idle_returns_at_once_when_nothing_is_in_flight() -> None:
    assert RequestsInFlight().wait_idle(60.0) == 0.0


def test_wait_idle_blocks_until_the_last_request_leaves() -> None:
    in_flight = RequestsInFlight()
    waited: list[float] = []
    entered = threading.Event()
    with in_flight.track():
        with in_flight.track():
            waiter = threading.Thread(target=lambda: (entered.set(), waited.append(in_flight.wait_idle(60.0))))
            waiter.start()
            entered.wait()
        assert in_flight.count == 1 and not waited  # one request still in flight: the waiter still waits
    waiter.join()
    assert in_flight.count == 0 and len(waited) == 1 and waited[0] < 60.0


def test_wait_idle_gives_up_after_its_timeout_and_never_blocks_without_one() -> None:
    in_flight = RequestsInFlight()
    with in_flight.track():
        assert in_flight.wait_idle(0.0) == 0.0
        assert in_flight.wait_idle(0.01) >= 0.01  # the request is still in flight: the budget ran out
        assert in_flight.count == 1


def test_a_change_pass_reads_and_drives_its_pods_a_few_at_a_time(service: NodeService) -> None:
    pods = [one_cpu_pod(i) for i in range(10)]
    for pod in pods:
        service.allocate(pod)
    reads: list[Collection[str] | None] = []
    desired = service.reconciler._desired

    def recorded(uids: Collection[str] | None) -> DesiredState:
        reads.append(None if uids is None else list(uids))
        return desired(uids)

    service.reconciler._desired = recorded
    step_aside = CountingInFlight()
    with_step_aside(service, step_aside)
    service.reconciler.run_requested()
    step = reconciler_module.PODS_PER_STEP
    assert reads == [sorted(p.uid for p in pods)[i : i + step] for i in range(0, len(pods), step)]
    assert step_aside.looks == len(reads) and not step_aside.calls  # one look before each step; nothing in flight
    assert all(service.reconciler.status(p.uid) is not None for p in pods)
    assert len(pod_paths(service)) == len(pods)  # every pod cgroup written (no container has an id yet)


def test_a_pass_waits_for_a_request_in_flight_before_it_touches_a_cgroup(
    service: NodeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconciler_module, "STEP_ASIDE_BUDGET_SECONDS", 3600.0)  # only the request's end lets it go
    service.allocate(one_cpu_pod(0))
    step_aside = CountingInFlight()
    with_step_aside(service, step_aside)
    finished = threading.Event()
    with step_aside.requests.track():
        worker = threading.Thread(target=lambda: (service.reconciler.run_requested(), finished.set()))
        worker.start()
        step_aside.asked.wait()
        assert not pod_paths(service) and not finished.is_set()  # stepped aside: nothing written yet
        # and while it waits, the runtime hook's writes (Reconciler.program) are not held up behind it
        assert service.reconciler._run_lock.acquire(blocking=False)
        service.reconciler._run_lock.release()
    worker.join()
    assert finished.is_set() and len(pod_paths(service)) == 1


def test_under_sustained_requests_a_pass_still_ends_once_its_budget_is_spent(
    service: NodeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconciler_module, "STEP_ASIDE_BUDGET_SECONDS", 0.02)
    for i in range(9):
        service.allocate(one_cpu_pod(i))
    step_aside = CountingInFlight()
    with_step_aside(service, step_aside)
    with step_aside.requests.track():  # a request that never ends while the pass runs
        service.reconciler.run_requested()
        assert len(pod_paths(service)) == 9
    assert step_aside.calls[0] == 0.02
    assert all(later < 0.02 for later in step_aside.calls[1:])  # each wait takes what the earlier ones left
    waited = service.metrics.registry.get_sample_value("numaguard_enforcer_reconcile_step_aside_seconds_total")
    assert waited is not None and waited >= 0.02


def test_a_full_pass_in_steps_forgets_pods_released_since_the_last_one(service: NodeService) -> None:
    for i in range(9):
        service.allocate(one_cpu_pod(i))
    service.reconciler.run_all()
    with service._group.condition:  # the release without its own follow-up, as if the pass raced it
        released = service._decide_release("pod-004")
        assert released is not None
        service._group.await_durable(released.seq)
    assert service.reconciler.status("pod-004") is not None
    service.reconciler.run_all()
    assert service.reconciler.status("pod-004") is None
    assert all(service.reconciler.status(f"pod-{i:03d}") is not None for i in range(9) if i != 4)


def shared_pod(index: int) -> PodResources:
    """A Burstable pod: its container runs on the node's default set, so it follows every change of that set."""
    web = ContainerResources("web", "c", Resources({"cpu": 100, "memory": 64 << 20}, {}))
    return PodResources(uid=f"web-{index:03d}", namespace="ns", name=f"web-{index}", containers=(web,))


def cpus_of(service: NodeService, uid: str) -> str:
    driver = service.reconciler.driver
    assert isinstance(driver, recording.RecordingCgroupDriver)
    path = next(p for p in driver.paths() if uid.replace("-", "_") in p)
    return str(driver.snapshot(path).cpus)


def test_the_worker_holds_a_default_set_change_for_the_followers_but_not_the_pod_it_is_for(
    service: NodeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconciler_module, "FOLLOWERS_DELAY_SECONDS", 3600.0)  # held whatever the machine's pace
    service.allocate(shared_pod(0))
    service.reconciler.run_requested()
    before = cpus_of(service, "web-000")
    service.allocate(one_cpu_pod(0))  # takes an exclusive CPU out of the default set
    service.reconciler.run_requested(hold_followers=True)
    assert cpus_of(service, "pod-000") != before  # the new pod is programmed at once
    assert cpus_of(service, "web-000") == before  # the follower waits for the held change
    assert service.reconciler.run_requested(hold_followers=True) is None  # nothing else is due yet
    monkeypatch.setattr(reconciler_module, "FOLLOWERS_DELAY_SECONDS", 0.0)
    assert service.reconciler.run_requested(hold_followers=True) is not None
    assert cpus_of(service, "web-000") != before
    assert CPUSet.parse(cpus_of(service, "pod-000")).isdisjoint(CPUSet.parse(cpus_of(service, "web-000")))


def test_a_direct_pass_and_a_full_pass_never_hold_the_followers(
    service: NodeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconciler_module, "FOLLOWERS_DELAY_SECONDS", 3600.0)
    service.allocate(shared_pod(0))
    service.reconciler.run_requested()
    before = cpus_of(service, "web-000")
    service.allocate(one_cpu_pod(0))
    service.reconciler.run_requested()  # the operator's or a test's pass: everything due now
    after_direct = cpus_of(service, "web-000")
    assert after_direct != before
    service.allocate(one_cpu_pod(1))
    service.reconciler.run_requested(hold_followers=True)
    assert cpus_of(service, "web-000") == after_direct
    service.reconciler.run_all()  # a full pass re-programs every pod, and settles the held change
    assert cpus_of(service, "web-000") != after_direct
    assert service.reconciler.run_requested() is None


@pytest.mark.parametrize("followers_delay", [0.0, 3600.0], ids=["followers-at-once", "followers-held"])
def test_with_the_worker_running_beside_concurrent_requests_every_cgroup_converges(
    service: NodeService, monkeypatch: pytest.MonkeyPatch, followers_delay: float
) -> None:
    """Passes that step aside, let the run lock go and hold followers lose no change: after a burst of
    allocations and releases from four threads (each marked in flight, as the API marks its requests)
    with the worker thread running, one more requested pass leaves every cgroup at its desired value,
    whether the worker re-programmed the followers as it went or held them all along."""
    monkeypatch.setattr(reconciler_module, "FOLLOWERS_DELAY_SECONDS", followers_delay)
    for i in range(4):
        service.allocate(shared_pod(i))
    service.reconciler.start(0)

    def churn(worker: int) -> None:
        held: list[str] = []
        for round_ in range(9):  # at most 7 held at once per thread: 28 of the seed node's 30 exclusive CPUs
            pod = one_cpu_pod(100 * worker + round_)
            with service.in_flight.track():
                service.allocate(pod)
            held.append(pod.uid)
            if round_ % 3 == 2:
                with service.in_flight.track():
                    service.release(held.pop(0))

    threads = [threading.Thread(target=churn, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    service.reconciler.stop()
    service.reconciler.run_requested(hold_followers=True)  # the worker's last pass, whenever it came
    service.reconciler.run_requested()  # and what the stopped worker had not come to yet
    driver = service.reconciler.driver
    assert isinstance(driver, recording.RecordingCgroupDriver)
    state = service.desired_state(None)
    assert len(state.pods) == 4 + 4 * 6  # the shared pods and each thread's 6 kept pods
    for pod in state.pods:
        (target, *_) = reconciler_module.pod_targets(
            pod, layout=service.reconciler.layout, default_cpus=state.default_cpus
        )
        assert driver.snapshot(target.path).cpus == target.cpus, pod.uid
