"""Work the event loop may do itself instead of handing it to a thread, while that work stays quick.

Why: on a small node a hand-off to another thread costs a wake-up and turns for the
interpreter lock, and a Python thread working beside the loop makes every system call
of the loop wait for the lock (up to the switch interval each time): the enforcer does a
lone request's durable write (:mod:`enforcer.service.group_commit`) and a new pod's
cgroup pass (:mod:`enforcer.service.reconciler`) on the loop itself.  But while the loop
works nothing else is served (probes, reads, other decisions), so a disk or a cgroupfs in
trouble must send that work back to a thread: after one slow piece of work, the loop does
no more such work until a piece done by the thread was quick again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class LoopWorkGuard:
    """Whether the last piece of one kind of work was quick enough for the event loop to do the next one.

    Every piece is recorded wherever it ran, so a thread's quick piece brings the work back to the loop.
    """

    max_seconds: float
    last_seconds: float = 0.0

    def allows(self) -> bool:
        return self.last_seconds < self.max_seconds

    def record(self, seconds: float) -> None:
        self.last_seconds = seconds
