"""The kubelet's exhaustive hint enumeration, as a reference for differential tests and the bench.

Never used by the engine.  Under :func:`exhaustive`, every provider hint list is the full
``IterateBitMasks`` enumeration (one hint per fitting non-empty NUMA set) and the merge folds over all
of it, as the kubelet does, instead of the layers :mod:`enforcer.topology.hint_masks` proves enough:

* :class:`~enforcer.topology.hint_masks.LayeredHints` hands out its complete list whatever layer is
  asked for (single-numa-node's filter included);
* ``merge_layered`` merges the complete lists, skipping every shortcut of the production driver;
* the Memory Manager's ``best_hint`` becomes ``findBestHint`` over the complete list of its hints.

The complete lists come from the providers' per-mask rules (pinned by the upstream-case tests), applied
to every non-empty NUMA set; the list merge is pinned against a literal port of the Go fold
(``tests/enforcer/topology/test_merge.py``).  The cost is the kubelet's: 2^N masks per dimension, so
keep N small (16 NUMA nodes is about a second per decision).  Not thread-safe: it swaps module
attributes for the duration of the ``with`` block.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from enforcer.memorymanager import placement
from enforcer.memorymanager.state import NUMANodeState
from enforcer.topology import hint_masks
from enforcer.topology.hints import TopologyHint

_layer = hint_masks.LayeredHints.up_to


def _complete(self: hint_masks.LayeredHints, size: int) -> list[TopologyHint]:
    return _layer(self, self.numa_count)


def _merge_complete(
    dimensions: Sequence[Sequence[TopologyHint]],
    merge: hint_masks.Merge,
    key: hint_masks.MaskKey,
    *,
    closest: bool = False,
    budget: int | None = None,
) -> TopologyHint:
    return merge([list(d) for d in dimensions])


def _best_hint_complete(
    machine: Mapping[int, NUMANodeState],
    requests: Mapping[str, int],
    reusable: Mapping[int, Mapping[str, int]],
    containing: int = 0,
) -> TopologyHint | None:
    hints = placement.calculate_hints(machine, requests, reusable)
    choice = placement.hints_for_choice(hints) if hints else ()
    return placement.find_best_hint(h for h in choice if (h.mask or 0) & containing == containing)


@contextmanager
def exhaustive() -> Iterator[None]:
    """Hint generation and merging exactly as the kubelet enumerates them (every NUMA set)."""
    saved = (hint_masks.LayeredHints.up_to, hint_masks.merge_layered, placement.best_hint)
    hint_masks.LayeredHints.up_to = _complete  # type: ignore[method-assign]
    hint_masks.merge_layered = _merge_complete
    placement.best_hint = _best_hint_complete
    try:
        yield
    finally:
        hint_masks.LayeredHints.up_to, hint_masks.merge_layered, placement.best_hint = saved  # type: ignore[method-assign]
