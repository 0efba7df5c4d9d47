"""The kubelet's exhaustive hint generation, for differential tests (never imported by production code).

``exhaustive()`` is a context manager under which every provider hint list is the full
``IterateBitMasks`` enumeration and the merge folds over all of it, as the kubelet does:

* :class:`LayeredHints` hands out its complete list whatever layer is asked for;
* ``merge_layered`` merges the complete lists, skipping every shortcut of the production driver;
* the Memory Manager's ``best_hint`` becomes ``findBestHint`` over the complete list of its hints.

The complete lists come from the providers' per-mask rules (pinned by the upstream-case tests), applied
to every non-empty NUMA set; the list merge is pinned against a literal port of the Go fold in
``test_merge.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import pytest

from enforcer.memorymanager import placement
from enforcer.memorymanager.state import NUMANodeState
from enforcer.topology import hint_masks
from enforcer.topology.hints import TopologyHint

_up_to = hint_masks.LayeredHints.up_to


def _complete(self: hint_masks.LayeredHints, size: int) -> list[TopologyHint]:
    return _up_to(self, self.numa_count)


def _merge_complete(
    dimensions: Sequence[Sequence[TopologyHint]],
    merge: hint_masks.Merge,
    key: hint_masks.MaskKey,
    *,
    budget: int = hint_masks.EXACT_MASK_BUDGET,
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
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hint_masks.LayeredHints, "up_to", _complete)
        patch.setattr(hint_masks, "merge_layered", _merge_complete)
        patch.setattr(placement, "best_hint", _best_hint_complete)
        yield
