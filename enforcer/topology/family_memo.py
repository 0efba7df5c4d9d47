"""A bounded, thread-safe LRU map from a hint provider's inputs to the hint family it generated.

Why: the scheduler extender dry-runs one pod on a hundred node replicas, and again on each replica a binding
changed; replicas of one machine kind often ask the CPU and memory managers the same question (same free CPUs,
same free memory per NUMA node, same request), so each manager shares the families it generated
(``enforcer.cpumanager.policy_static``, ``enforcer.memorymanager.placement``).  A family is computed outside
the lock (two threads may both compute one: equal inputs give equal families, either will do) and kept only
when the caller says it is worth keeping.  The bound keeps what the collector has to scan small: about 4 KB
an entry with the layers a merge generated.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Family = TypeVar("Family")


class FamilyMemo(Generic[Key, Family]):
    """At most ``size`` families, least recently used out first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Key, Family] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Key, compute: Callable[[], Family], keep: Callable[[Family], bool]) -> Family:
        """The family kept for ``key``, else ``compute()`` (kept when ``keep`` of it is true)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        family = compute()
        if keep(family):
            with self._lock:
                self._items[key] = family
                if len(self._items) > self.size:
                    self._items.popitem(last=False)
        return family
