"""What the extender answers for one node, as ``filter`` and ``prioritize`` read it.

Its own module so that a replica (:class:`~extender.replica.NodeReplica`) can keep the answers given
on it without importing the decisions (:mod:`extender.decide`), which import the replicas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from extender import scoring
from extender.engine_adapter import DryRun

Verdict = Literal["passed", "failed", "unresolvable", "no_alignment_needed", "no_opinion"]


@dataclass(frozen=True, slots=True)
class NodeAnswer:
    verdict: Verdict
    message: str | None = None
    outcome: DryRun | None = None
    holds: bool = False  # the node already holds an allocation for this pod uid (a retried scheduling)
    score: int = scoring.NO_OPINION  # what ``prioritize`` answers for the node


def known(outcome: DryRun) -> NodeAnswer:
    """A fresh replica's answer for a dry run, its ``prioritize`` score included.

    Built once per dry run and kept (in the decisions' cache and on the replica), so a call answered
    from them allocates and scores nothing per node: scoring every node on every ``prioritize`` call
    was about a quarter of that call's CPU."""
    if outcome.admitted:
        return NodeAnswer("passed", outcome=outcome, score=scoring.score(outcome))
    return NodeAnswer("failed", refusal(outcome), outcome)


def refusal(outcome: DryRun) -> str:
    """The kubelet's reason and message, as ``FailedNodes`` carries them."""
    return f"{outcome.reason}: {outcome.message}" if outcome.message else str(outcome.reason)
