"""A new pod's cgroup pass on the event loop (Reconciler.run_here), and what it leaves to the worker."""

from __future__ import annotations

import contextlib
import logging
import threading

import pytest

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import recording
from enforcer.service import reconciler as reconciler_module
from enforcer.service.node_service import NodeService
from enforcer.service.reconciler import LOOP_PASS_MAX_SECONDS_PER_POD, PODS_PER_STEP, ResizeJob
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, PodResources, Resources

ONE_CPU = Resources({"cpu": 1000, "memory": 64 << 20}, {"cpu": 1000, "memory": 64 << 20})


def one_cpu_pod(index: int) -> PodResources:
    main = ContainerResources("main", "c", ONE_CPU)
    return PodResources(uid=f"pod-{index:03d}", namespace="ns", name=f"pod-{index}", containers=(main,))


def recorder(service: NodeService) -> recording.RecordingCgroupDriver:
    driver = service.reconciler.driver
    assert isinstance(driver, recording.RecordingCgroupDriver)
    return driver


def programmed(service: NodeService, uid: str) -> bool:
    """Whether the pod's cgroup got its cpuset (no container has an id yet: the pod cgroup is its only one)."""
    return any(uid.replace("-", "_") in w.path and w.field == "cpus" for w in recorder(service).writes)


def passes(service: NodeService, thread: str) -> float:
    value = service.metrics.registry.get_sample_value(
        "numaguard_enforcer_reconcile_runs_total", {"trigger": "change", "thread": thread}
    )
    return value or 0.0


def allocated_for_run_here(service: NodeService, *pods: PodResources) -> None:
    """Allocate and queue ``pods`` as the API does for a request alone in flight: the worker left asleep."""
    for pod in pods:
        service.allocate(pod)  # queues the pod (and wakes the worker, as a thread's allocation does)
    service.reconciler._wake.clear()


def worker_woken(service: NodeService) -> bool:
    return service.reconciler._wake.is_set()


@pytest.fixture
def quiet(service: NodeService) -> NodeService:
    """The service with what its start-up queued done: the worker (stopped) has nothing to be woken for.

    Its passes take no time by the reconciler's clock, so a loaded machine never makes them "slow"
    (the slow-cgroupfs test scripts its own clock)."""
    service.reconciler._timer = lambda: 0.0
    service.reconciler.run_requested()
    service.reconciler._wake.clear()
    return service


@pytest.mark.parametrize(
    ("request_kwargs", "wakes"),
    [
        ({}, False),
        ({"default_changed": True}, True),  # the worker must start the followers' delay
        ({"everything": True}, True),
    ],
    ids=["a pod", "a new default-set change", "a full pass"],
)
def test_a_request_for_run_here_wakes_the_worker_only_for_what_only_it_does(
    quiet: NodeService, request_kwargs: dict[str, bool], wakes: bool
) -> None:
    quiet.reconciler.request(["pod-000"], wake=False, **request_kwargs)
    assert worker_woken(quiet) is wakes


def test_a_default_set_change_already_held_does_not_wake_the_worker_again(quiet: NodeService) -> None:
    quiet.reconciler.request(["pod-000"], default_changed=True, wake=False)
    quiet.reconciler._wake.clear()
    quiet.reconciler.request(["pod-001"], default_changed=True, wake=False)
    assert not worker_woken(quiet)


def test_run_here_programs_the_queued_pod_on_the_calling_thread(
    quiet: NodeService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="enforcer.service.reconciler")  # the pass's log line is built
    allocated_for_run_here(quiet, one_cpu_pod(0))
    assert quiet.reconciler.run_here() is True
    assert [r.__dict__.get("ran_on") for r in caplog.records if r.getMessage() == "cgroup pass"] == ["event_loop"]
    assert programmed(quiet, "pod-000") and passes(quiet, "event_loop") == 1
    assert not worker_woken(quiet)
    assert quiet.reconciler.status("pod-000") is not None
    assert quiet.reconciler.run_here() is True and passes(quiet, "event_loop") == 1  # nothing queued: no pass


@pytest.mark.parametrize("why", ["request in flight", "resize queued", "more than a step of pods", "full pass queued"])
def test_run_here_leaves_to_the_worker_what_would_make_the_loop_wait_or_work_long(quiet: NodeService, why: str) -> None:
    pods = [one_cpu_pod(i) for i in range(PODS_PER_STEP + 1 if why == "more than a step of pods" else 1)]
    allocated_for_run_here(quiet, *pods)
    if why == "resize queued":
        (desired,) = quiet.desired_state(["pod-000"]).pods
        quiet.reconciler.request(resize=ResizeJob(desired, desired))
        quiet.reconciler._wake.clear()
    if why == "full pass queued":
        quiet.reconciler.request(everything=True)
        quiet.reconciler._wake.clear()
    with quiet.in_flight.track() if why == "request in flight" else contextlib.nullcontext():
        assert quiet.reconciler.run_here() is False
    assert worker_woken(quiet)
    assert not any(programmed(quiet, p.uid) for p in pods) and passes(quiet, "event_loop") == 0
    quiet.reconciler.run_requested()  # the worker's pass: nothing queued was lost
    assert all(programmed(quiet, p.uid) for p in pods)


class BlockingDriver(recording.RecordingCgroupDriver):
    """A recorder whose cpuset writes wait for the test: a pass holds the run lock meanwhile."""

    def __init__(self) -> None:
        super().__init__(auto_create=True, v1_hierarchy=False)
        self.entered = threading.Event()
        self.release = threading.Event()

    def write_cpus(self, path: str, cpus: CPUSet) -> None:
        self.entered.set()
        self.release.wait()
        super().write_cpus(path, cpus)


def test_the_loop_never_waits_for_a_pass_that_holds_the_run_lock(quiet: NodeService) -> None:
    blocking = BlockingDriver()
    quiet.reconciler.driver = blocking
    quiet.allocate(one_cpu_pod(0))
    worker = threading.Thread(target=quiet.reconciler.run_requested)
    worker.start()
    blocking.entered.wait()  # the worker's pass is inside a write, holding the run lock
    try:
        allocated_for_run_here(quiet, one_cpu_pod(1))
        assert quiet.reconciler.run_here() is False  # at once: the loop never waits for the lock
        assert worker_woken(quiet)
    finally:
        blocking.release.set()
        worker.join()
    quiet.reconciler.run_requested()
    assert any("pod_001" in w.path for w in blocking.writes)


class SlowCgroupfs(recording.RecordingCgroupDriver):
    """A recorder whose writes take ``seconds_per_write`` by a scripted clock."""

    def __init__(self) -> None:
        super().__init__(auto_create=True, v1_hierarchy=False)
        self.now = 0.0
        self.seconds_per_write = 0.0

    def clock(self) -> float:
        return self.now

    def write_cpus(self, path: str, cpus: CPUSet) -> None:
        self.now += self.seconds_per_write
        super().write_cpus(path, cpus)

    def write_cpu_quota(self, path: str, quota: cgdriver.CPUQuota) -> None:
        self.now += self.seconds_per_write
        super().write_cpu_quota(path, quota)


def test_after_a_slow_pass_the_worker_takes_every_pass_until_one_is_quick_again(quiet: NodeService) -> None:
    slow = SlowCgroupfs()
    quiet.reconciler.driver = slow
    quiet.reconciler._timer = slow.clock
    for index, seconds_per_write in enumerate([0.0001, LOOP_PASS_MAX_SECONDS_PER_POD, 0.0001]):
        slow.seconds_per_write = seconds_per_write
        allocated_for_run_here(quiet, one_cpu_pod(index))
        on_loop = quiet.reconciler.run_here()
        if not on_loop:
            quiet.reconciler.run_requested()  # the woken worker's pass, quick or not, is timed too
        # the first pass is quick (on the loop), the second slow (still on the loop: nothing was slow before
        # it), the third finds the last one slow and goes to the worker, whose quick pass frees the loop again
        assert (on_loop, worker_woken(quiet)) == ((True, False) if index < 2 else (False, True))
    slow.seconds_per_write = 0.0001
    allocated_for_run_here(quiet, one_cpu_pod(3))
    assert quiet.reconciler.run_here() is True
    assert all(programmed(quiet, f"pod-{i:03d}") for i in range(4))
    assert passes(quiet, "event_loop") == 3 and passes(quiet, "caller") >= 1


def test_the_pass_on_the_loop_does_not_run_the_followers_it_holds(
    quiet: NodeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconciler_module, "FOLLOWERS_DELAY_SECONDS", 0.0)  # due at once: still not run_here's
    web = ContainerResources("web", "c", Resources({"cpu": 100, "memory": 64 << 20}, {}))
    quiet.allocate(PodResources(uid="web-000", namespace="ns", name="web", containers=(web,)))
    quiet.reconciler.run_requested()
    follower_writes = len([w for w in recorder(quiet).writes if "web_000" in w.path])
    allocated_for_run_here(quiet, one_cpu_pod(0))  # an exclusive CPU leaves the default set: the follower is due
    assert quiet.reconciler.run_here() is True and programmed(quiet, "pod-000")
    assert len([w for w in recorder(quiet).writes if "web_000" in w.path]) == follower_writes
    quiet.reconciler.run_requested(hold_followers=True)  # the worker's pass takes the due change
    assert len([w for w in recorder(quiet).writes if "web_000" in w.path]) > follower_writes


class BrokenDriver(recording.RecordingCgroupDriver):
    """A recorder with a bug: its cpuset writes raise what no cgroup error handler expects."""

    def write_cpus(self, path: str, cpus: CPUSet) -> None:
        raise RuntimeError("a bug in the driver")


def test_a_pass_that_crashes_on_the_loop_leaves_its_pods_to_the_worker(quiet: NodeService) -> None:
    """A callback on the loop has nobody above it to count or retry a failure: run_here does both."""
    working = quiet.reconciler.driver
    quiet.reconciler.driver = BrokenDriver(auto_create=True, v1_hierarchy=False)
    allocated_for_run_here(quiet, one_cpu_pod(0))
    assert quiet.reconciler.run_here() is False
    assert worker_woken(quiet)
    crashes = quiet.metrics.registry.get_sample_value("numaguard_enforcer_reconcile_errors_total", {"kind": "internal"})
    assert crashes == 1
    quiet.reconciler.driver = working
    quiet.reconciler.run_requested()  # the worker's pass finds the pod queued again
    assert programmed(quiet, "pod-000")
