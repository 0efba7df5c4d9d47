"""Group commit with a scripted writer: one write covers every change waiting; a failed one fails its changes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from enforcer.service.errors import StateWriteError
from enforcer.service.group_commit import LOOP_WRITE_MAX_SECONDS, GroupCommit
from enforcer.service.metrics import EnforcerMetrics
from enforcer.state import errors as state_errors


class ScriptedWriter:
    """Prepares the number of changes decided so far; fails the writes it is told to; records what it settled."""

    def __init__(self) -> None:
        self.group: GroupCommit[int] | None = None
        self.fail_next = False
        self.written: list[int] = []
        self.settled: list[tuple[int, bool]] = []
        self.in_write = threading.Event()
        self.release_write = threading.Event()
        self.release_write.set()

    def prepare(self) -> int:
        assert self.group is not None
        return self.group.last

    def write(self, job: int) -> None:
        self.in_write.set()
        self.release_write.wait()
        if self.fail_next:
            self.fail_next = False
            raise state_errors.CheckpointWriteError("state.json", "disk full")
        self.written.append(job)

    def settle(self, job: int, failure: state_errors.CheckpointError | None) -> None:
        self.settled.append((job, failure is None))


def make() -> tuple[GroupCommit[int], ScriptedWriter, threading.Lock]:
    lock = threading.Lock()
    writer = ScriptedWriter()
    group = GroupCommit(lock, writer, EnforcerMetrics())
    writer.group = group
    return group, writer, lock


def test_one_write_answers_every_change_decided_before_it_began() -> None:
    group, writer, lock = make()
    with group.condition:
        first, second, third = group.changed(), group.changed(), group.changed()
        group.await_durable(third)
        group.await_durable(first)
        group.await_durable(second)
    assert writer.written == [3] and writer.settled == [(3, True)]


def test_a_change_decided_during_a_write_gets_the_next_one() -> None:
    group, writer, lock = make()
    writer.release_write.clear()
    with lock:
        first = group.changed()
    leader = threading.Thread(target=lambda: _await(group, first))
    leader.start()
    assert writer.in_write.wait(10)
    with lock:
        second = group.changed()  # decided while the first write is on its way
    writer.release_write.set()
    leader.join(10)
    with group.condition:
        group.await_durable(second)
    assert writer.written == [1, 2]


def _await(group: GroupCommit[int], seq: int) -> None:
    with group.condition:
        group.await_durable(seq)


def test_a_failed_write_fails_its_changes_and_the_next_change_is_written() -> None:
    group, writer, lock = make()
    writer.fail_next = True
    with group.condition:
        lost = group.changed()
        with pytest.raises(StateWriteError, match="rolled back: disk full"):
            group.await_durable(lost)
        assert writer.settled == [(1, False)]
        kept = group.changed()
        group.await_durable(kept)
        with pytest.raises(StateWriteError):  # asking again about a lost change never says durable
            group.await_durable(lost)
    assert writer.written == [2]


def test_coroutines_and_threads_share_the_same_writes() -> None:
    group, writer, lock = make()

    async def main() -> None:
        with lock:
            seqs = [group.changed() for _ in range(5)]
        await asyncio.gather(*(group.await_durable_async(seq) for seq in seqs))

    asyncio.run(main())
    with group.condition:
        group.await_durable(group.last)
    assert writer.written == [5]


class ThreadRecordingWriter(ScriptedWriter):
    """Also records which thread ran each write."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def write(self, job: int) -> None:
        self.threads.append(threading.get_ident())
        super().write(job)


def _writes(metrics: EnforcerMetrics, thread: str) -> float:
    value = metrics.registry.get_sample_value("numaguard_enforcer_state_writes_total", {"thread": thread})
    return value or 0.0


@pytest.mark.parametrize(
    ("on_loop", "where"), [(True, "event_loop"), (False, "executor")], ids=["alone", "others-in-flight"]
)
def test_a_coroutine_leads_its_write_on_the_loop_only_when_the_service_says_so(on_loop: bool, where: str) -> None:
    lock, writer, metrics = threading.Lock(), ThreadRecordingWriter(), EnforcerMetrics()
    asked: list[int] = []

    def write_on_loop() -> bool:
        asked.append(threading.get_ident())
        return on_loop

    group = GroupCommit(lock, writer, metrics, write_on_loop=write_on_loop)
    writer.group = group

    async def main() -> int:
        with lock:
            seqs = [group.changed() for _ in range(3)]
        await asyncio.gather(*(group.await_durable_async(seq) for seq in seqs))
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert writer.written == [3]  # one write covers the three, wherever it runs
    assert asked == [loop_thread]  # asked once, by the leader, on the loop
    assert (writer.threads[0] == loop_thread) is on_loop
    assert _writes(metrics, where) == 1 and _writes(metrics, "caller") == 0


def test_a_failed_write_on_the_loop_fails_its_changes_and_the_next_write_goes_ahead() -> None:
    lock, writer = threading.Lock(), ScriptedWriter()
    group = GroupCommit(lock, writer, EnforcerMetrics(), write_on_loop=lambda: True)
    writer.group = group
    writer.fail_next = True

    async def main() -> None:
        with lock:
            lost = group.changed()
        with pytest.raises(StateWriteError, match="rolled back: disk full"):
            await group.await_durable_async(lost)
        with lock:
            kept = group.changed()
        await group.await_durable_async(kept)

    asyncio.run(main())
    assert writer.settled == [(1, False), (2, True)] and writer.written == [2]


def test_a_thread_waiting_on_the_condition_is_woken_by_a_write_on_the_loop() -> None:
    """The pod watch's thread and the API's coroutines share writes whichever thread runs them."""
    lock, writer = threading.Lock(), ScriptedWriter()
    group = GroupCommit(lock, writer, EnforcerMetrics(), write_on_loop=lambda: True)
    writer.group = group
    with lock:
        seq = group.changed()
    writer.release_write.clear()
    parked = threading.Event()

    def watch() -> None:
        assert writer.in_write.wait(10)
        with group.condition:
            # the write can settle only once this thread lets go of the lock, i.e. parks in await_durable
            writer.release_write.set()
            group.await_durable(seq)  # a write is in flight: it waits for that one instead of leading its own
        parked.set()

    waiter = threading.Thread(target=watch)
    waiter.start()
    asyncio.run(group.await_durable_async(seq))
    waiter.join(10)
    assert parked.is_set() and writer.written == [1] and writer.settled == [(1, True)]


def test_after_a_slow_write_lone_writes_go_to_the_executor_until_one_is_fast_again() -> None:
    """A slow disk must not block the event loop write after write (probes and reads wait behind it)."""
    took = [0.0001, LOOP_WRITE_MAX_SECONDS, 0.0001, 0.0001]  # seconds each write takes, by the scripted clock
    ticks = iter(t for seconds in took for t in (0.0, seconds))  # (start, end) of each write
    lock, writer, metrics = threading.Lock(), ThreadRecordingWriter(), EnforcerMetrics()
    group = GroupCommit(lock, writer, metrics, write_on_loop=lambda: True, clock=lambda: next(ticks))
    writer.group = group

    async def main() -> int:
        for _ in took:
            with lock:
                seq = group.changed()
            await group.await_durable_async(seq)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    on_loop = [thread == loop_thread for thread in writer.threads]
    assert on_loop == [True, True, False, True]  # the slow second write sends the third to the executor
    assert _writes(metrics, "event_loop") == 3 and _writes(metrics, "executor") == 1
