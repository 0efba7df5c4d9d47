"""API requests in flight, and background work that steps aside for them.

Why: the enforcer is one Python process, so its threads share one interpreter
lock and, on a small node, one or two cores.  A cgroup reconcile pass is pure
Python between its writes (views, targets, ordering): measured on a 1,024-CPU
node, a pass over the dozen pods a burst of allocations queues costs about
3 ms of CPU, and every allocation that ran beside one waited for it (its
durable write's thread, or its answer, got the lock only when the pass ended:
all the slow allocations of ``python -m bench.bench_enforcer --held 150``, none
of the fast half).  An allocation is on a binding's critical path, so the
kube-scheduler waits for it; a cgroup pass is not (the runtime hook pins each
container when it starts, and the pass repairs what remains).

So a request marks itself in flight while it is decided and made durable
(:meth:`RequestsInFlight.track`), and a background pass, between two small
steps, waits while any request is in flight (:meth:`RequestsInFlight.wait_idle`),
within a budget it keeps per pass, so that under sustained load cgroups still
follow.  Threads, not coroutines, wait here: the event loop only counts.

The other half is the interpreter's switch interval (see
:data:`SWITCH_INTERVAL_SECONDS`): a request arriving while a pass holds the
interpreter lock can only mark itself once it gets the lock.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Final

SWITCH_INTERVAL_SECONDS: Final = 0.0005
"""The enforcer process's ``sys.setswitchinterval``: how long a thread that wants the
interpreter lock waits before the holder must hand it over.  CPython's default of
5 ms is the longest a request could wait behind a background pass before it can
even mark itself in flight; at 0.5 ms that wait is a tenth, and a thread that
holds the lock without contention is not slowed (the interval only matters when
another thread is waiting)."""


class RequestsInFlight:
    """A count of API requests being decided or awaiting durability; see the module docstring."""

    def __init__(self) -> None:
        self._count = 0
        self._idle = threading.Condition(threading.Lock())

    @property
    def count(self) -> int:
        return self._count

    def alone(self) -> bool:
        """At most one request in flight: the caller's own (it writes its change on the event loop then)."""
        return self._count <= 1

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Count one request in flight for the duration of the block (any thread or the event loop)."""
        with self._idle:
            self._count += 1
        try:
            yield
        finally:
            with self._idle:
                self._count -= 1
                if self._count == 0:
                    self._idle.notify_all()

    def wait_idle(self, timeout: float) -> float:
        """Block until no request is in flight or ``timeout`` seconds passed; the seconds waited.

        Returns at once (0.0) when nothing is in flight; never blocks when ``timeout <= 0``."""
        with self._idle:
            if self._count == 0 or timeout <= 0:
                return 0.0
            started = time.monotonic()
            self._idle.wait_for(lambda: self._count == 0, timeout)
            return time.monotonic() - started
