"""Group commit: callers are answered once their change is on disk, and one write covers every change waiting.

Each change is numbered under the service's lock (:meth:`GroupCommit.changed`).
A caller then waits until its number is durable.  The first waiter with no
write in flight becomes the leader: it asks the :class:`Writer` to prepare a
write of every change decided so far (under the lock), writes it *without* the
lock (so decisions go on meanwhile), and settles it under the lock again; every
waiter whose change the write covered is answered at once.  Threads (the pod
watch) wait on a condition (:meth:`GroupCommit.await_durable`); the API's
handlers wait on the event loop without holding a thread
(:meth:`GroupCommit.await_durable_async`); both share the same writes.

Where a coroutine's write runs: on the loop's executor thread, so that the loop
goes on deciding (and the next write gathers those changes) while the disk
syncs, except when the service says nothing else is in flight
(``write_on_loop``): then the loop writes itself.  Why: alone, the two thread
hand-offs (loop to executor, executor back to loop, each a wake-up and a turn
for the interpreter lock) cost more than they let happen meanwhile, and on a
two-core node every system call of the executor thread also waited for the
lock: at 1,024 CPUs a lone allocation's median durable wait is ~0.1 ms shorter on
the loop with the host quiet and 0.2-0.3 ms shorter when it is busy (BENCHMARKS.md,
"Enforcer").  The loop is then blocked for
one append and its ``fdatasync``; a request arriving meanwhile is read right
after it, and from then on two are in flight, so the next write goes to the
executor again.  A slow disk must not freeze the API (probes, reads, other
decisions): after a write that took :data:`LOOP_WRITE_MAX_SECONDS` or more, writes
go to the executor until one is fast again (:mod:`enforcer.service.loop_work`).

A failed write is handed back to the writer (which rolls the engine back to
what is durable), and every change after the last durable one is marked lost:
its waiters get ``StateWriteError``.

Must not: decide anything, or know what is written (the :class:`Writer` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Final, Generic, Literal, Protocol, TypeVar

from enforcer.service.errors import StateWriteError
from enforcer.service.loop_work import LoopWorkGuard
from enforcer.service.metrics import EnforcerMetrics
from enforcer.state import errors as state_errors

LEADER_ROUNDS: Final = 3
"""Event loop rounds a coroutine lets pass before it prepares and leads a write.

Requests the loop has already received reach their decision meanwhile and ride on
the same write.  On an idle loop the rounds take microseconds; under load each round
is longer and more changes join, so writes are fewer and larger (measured at 16
clients: about 14 changes per write instead of 7, a quarter less CPU per request).
"""

LOOP_WRITE_MAX_SECONDS: Final = 0.002
"""A write runs on the event loop only while the last write took less than this.

The loop is blocked for as long as a write on it takes: on this machine kind the journal append
alone has a median of 0.2-0.35 ms and a p99 under 1 ms (``python -m bench --only journal``), so
2 ms is a disk in trouble (a saturated device, a network volume); the executor then keeps the
loop serving, and the first fast write brings lone writes back to the loop."""

_Job = TypeVar("_Job")

WriteThread = Literal["caller", "event_loop", "executor"]
"""Where a write ran: a waiting thread's own (:meth:`GroupCommit.await_durable`), the event loop's or its executor's."""


def _never() -> bool:
    return False


class Writer(Protocol[_Job]):
    """What a group commit writes; ``prepare`` and ``settle`` run under the lock, ``write`` without it."""

    def prepare(self) -> _Job: ...

    def write(self, job: _Job) -> None:
        """Raises CheckpointError."""
        ...

    def settle(self, job: _Job, failure: state_errors.CheckpointError | None) -> None: ...


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    """On the waiters' event loop: let each look at the durable state again."""
    for waiter in waiters:
        if not waiter.done():  # a cancelled waiter's request is gone
            waiter.set_result(None)


class GroupCommit(Generic[_Job]):
    """Change numbers, the write in flight and its waiters; see the module docstring."""

    def __init__(
        self,
        lock: threading.Lock,
        writer: Writer[_Job],
        metrics: EnforcerMetrics,
        *,
        write_on_loop: Callable[[], bool] = _never,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``write_on_loop``: asked, on the loop, as a coroutine is about to lead a write; True runs the write
        on the loop's thread instead of the executor, unless the last write was slow (see the module
        docstring).  ``clock``: seconds, for the writes' durations (tests script it)."""
        self._lock = lock
        self._write_on_loop = write_on_loop
        self._clock = clock
        self._loop_guard = LoopWorkGuard(LOOP_WRITE_MAX_SECONDS)
        self._commit = threading.Condition(lock)
        self._writer = writer
        self._metrics = metrics
        self._change_seq = 0  # changes decided
        self._durable_seq = 0  # changes on disk
        self._saving = False
        self._async_waiters: list[asyncio.Future[None]] = []  # coroutines waiting for the write in flight
        self._lost: list[tuple[int, int, str]] = []  # (after, upto, why): change numbers a failed write rolled back

    @property
    def condition(self) -> threading.Condition:
        """The lock as a condition: hold it while deciding and calling :meth:`await_durable`."""
        return self._commit

    @property
    def last(self) -> int:
        """The number of the last change decided (a retry of it is answered once that is durable).  Lock held."""
        return self._change_seq

    @property
    def undurable(self) -> int:
        """Changes decided but not on disk.  Lock held."""
        return self._change_seq - self._durable_seq

    def changed(self) -> int:
        """Number the change just decided (lock held); its caller answers once it is durable."""
        self._change_seq += 1
        return self._change_seq

    def await_durable(self, seq: int) -> None:
        """Return once change ``seq`` is on disk; raise StateWriteError if it was rolled back.  Lock held."""
        while True:
            if self._is_durable(seq):
                return
            if self._saving:
                self._commit.wait()
                continue
            covered, job = self._begin()
            self._lock.release()
            try:
                failure = self._write(job, "caller")
            finally:
                self._lock.acquire()
                self._end()
            self._settle(covered, job, failure)

    async def await_durable_async(self, seq: int) -> None:
        """:meth:`await_durable` for a coroutine on the event loop: no thread is held while it waits.  Lock NOT held.

        A waiter parks a future that the end of the write in flight resolves; a leader runs
        the write in the loop's executor (the thread settles it, so a cancelled leader
        leaves nothing half done), or on the loop itself when ``write_on_loop`` says so
        (nothing to cancel then: the coroutine does not yield until the write is settled).
        Before leading, a coroutine lets the loop run :data:`LEADER_ROUNDS` rounds (see there).
        """
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._is_durable(seq):
                    return
                idle = not self._saving
            if idle:
                for _ in range(LEADER_ROUNDS):
                    await asyncio.sleep(0)
            with self._lock:
                if self._is_durable(seq):
                    return
                if self._saving:
                    woken: asyncio.Future[None] = loop.create_future()
                    self._async_waiters.append(woken)
                    begun = None
                else:
                    begun = self._begin()
            if begun is None:
                await woken
            elif self._loop_guard.allows() and self._write_on_loop():
                self._write_and_settle(*begun, where="event_loop")
            else:
                await loop.run_in_executor(None, self._write_and_settle, *begun)

    def _is_durable(self, seq: int) -> bool:
        for after, upto, message in self._lost:
            if after < seq <= upto:
                raise StateWriteError(f"the change was not made durable and was rolled back: {message}")
        return seq <= self._durable_seq

    def _begin(self) -> tuple[int, _Job]:
        """Prepare a write of every change decided so far, as the write in flight.  Lock held, none in flight."""
        job = self._writer.prepare()
        self._saving = True
        return self._change_seq, job

    def _write(self, job: _Job, where: WriteThread) -> state_errors.CheckpointError | None:
        started = self._clock()
        try:
            self._writer.write(job)
        except state_errors.CheckpointError as err:
            return err
        finally:
            seconds = self._clock() - started
            self._loop_guard.record(seconds)
            self._metrics.state_write_seconds.observe(seconds)
            self._metrics.child(self._metrics.state_writes, where).inc()
        return None

    def _end(self) -> None:
        """No write in flight any more: wake every waiter to look again (one may lead the next).  Lock held."""
        self._saving = False
        self._commit.notify_all()
        waiters, self._async_waiters = self._async_waiters, []
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for waiter in waiters:
            by_loop.setdefault(waiter.get_loop(), []).append(waiter)
        for loop, futures in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to answer
                loop.call_soon_threadsafe(_wake, futures)

    def _settle(self, covered: int, job: _Job, failure: state_errors.CheckpointError | None) -> None:
        """Record what the finished write made durable, or mark its changes lost.  Lock held."""
        if failure is None:
            self._durable_seq = covered
        else:
            self._metrics.state_write_errors.inc()
            self._lost.append((self._durable_seq, self._change_seq, failure.message))
        self._writer.settle(job, failure)

    def _write_and_settle(self, covered: int, job: _Job, where: WriteThread = "executor") -> None:
        """A write led from the event loop, in an executor thread (or on the loop's, ``where`` says)."""
        try:
            failure = self._write(job, where)
        except BaseException:
            with self._lock:
                self._end()
            raise
        with self._lock:
            self._end()
            self._settle(covered, job, failure)
