"""Which binding attempts hold each allocation, so a late release of one attempt cannot undo another.

The webhook allocates at ``pods/binding``.  When the node answers too late,
the webhook denies that binding and releases what the attempt may have left
(``DELETE /allocations/{uid}?attempt=<id>``).  The scheduler meanwhile retries
the same pod (same uid): the retry is idempotent and gets the allocation back.
If the release of the first attempt arrives *after* the retry was admitted, an
unconditional release would remove the allocation the bound pod runs on, and
the next pod would be given its CPUs.  So every allocation made with an
attempt id (header :data:`shared.contract.ATTEMPT_HEADER`, the admission
request's uid) records that attempt as a *claim*, and a release naming an
attempt only withdraws that claim: the allocation goes when no claim is left.

Every withdrawn attempt leaves a *tombstone*: a request of that attempt still
queued behind the release (the node was frozen with both in its backlog) is
refused when its turn comes (:class:`AttemptWithdrawnError`)
instead of creating an allocation nobody will use.  Tombstones are bounded
(the oldest are dropped first); they only need to outlive a request queue.

Every conditional call on one uid runs under that uid's lock, held across the
durable write, so "withdraw the claim, then release" can never interleave with
a retry's "allocate, then claim".  Calls without an attempt (operators, the pod
watch, older webhooks) do not take part: an unconditional release is "the pod
is gone" and clears the claims.

Claims live in memory: after an enforcer restart a conditional release of an
allocation with no recorded claims releases nothing (the allocation is kept
and, in a cluster, reclaimed by the pod watch's unbound sweep if no pod uses
it).  Keeping an allocation too long is safe; removing one in use is not.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator

from enforcer.service.errors import ServiceError

DEFAULT_TOMBSTONES = 8192


class AttemptWithdrawnError(ServiceError):
    """The caller already released this attempt: its allocation is not made (HTTP 409)."""

    reason = "AttemptWithdrawn"


class AttemptClaims:
    """Claims by uid, tombstones of withdrawn attempts, and a lock per uid.  Event-loop only (not thread-safe)."""

    def __init__(self, *, max_tombstones: int = DEFAULT_TOMBSTONES) -> None:
        self._claims: dict[str, set[str]] = {}
        self._tombstones: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._max_tombstones = max_tombstones
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def serialised(self, uid: str) -> AsyncIterator[None]:
        """Hold ``uid``'s lock for the block; the lock is dropped when nobody waits for it."""
        entry = self._locks.get(uid)
        if entry is None:
            entry = self._locks[uid] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[uid]

    def check_not_withdrawn(self, uid: str, attempt: str) -> None:
        if (uid, attempt) in self._tombstones:
            raise AttemptWithdrawnError(
                f"attempt {attempt} for pod {uid} was already released by its caller; nothing was allocated"
            )

    def claim(self, uid: str, attempt: str, *, created: bool) -> None:
        """``attempt`` now relies on ``uid``'s allocation; a newly created allocation has no other claim."""
        if created:
            self._claims[uid] = {attempt}
        else:
            self._claims.setdefault(uid, set()).add(attempt)

    def withdraw(self, uid: str, attempt: str) -> bool:
        """Drop ``attempt``'s claim; True when the allocation should now be released (no claim is left)."""
        self._tombstone(uid, attempt)  # a request of this attempt still queued must not allocate afterwards
        claims = self._claims.get(uid)
        if claims is None or attempt not in claims:
            return False
        claims.discard(attempt)
        if claims:
            return False
        del self._claims[uid]
        return True

    def claims_of(self, uid: str) -> frozenset[str]:
        return frozenset(self._claims.get(uid, ()))

    def forget(self, uid: str) -> None:
        """The allocation is gone for another reason (an unconditional release)."""
        self._claims.pop(uid, None)

    def _tombstone(self, uid: str, attempt: str) -> None:
        self._tombstones[(uid, attempt)] = None
        self._tombstones.move_to_end((uid, attempt))
        while len(self._tombstones) > self._max_tombstones:
            self._tombstones.popitem(last=False)
