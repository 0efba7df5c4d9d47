"""A bounded memo of CREATE plans, keyed on the exact bytes of everything planning reads.

The replicas of a workload share one pod template, so the webhook plans the
same resources over and over: validating them, defaulting them, turning every
quantity into integers and planning the result costs several times what the
rest of a review does.  This memo keeps the answer for a spec it has planned
before.

Why the answer can be reused (the key is complete).  Planning a CREATE
(:func:`webhook.handlers.pod_create` ``_plan``) is a pure function (no I/O, no
clock; :mod:`webhook.plan`, :mod:`shared.validation` and :mod:`shared.defaults`
say so) of the typed :class:`shared.pod.Pod` model and the
:class:`~webhook.plan.PlanPolicy`.  Of the model it reads ``spec`` (resources,
containers and their kinds, ``os``, ``overhead``, ``priority``),
``status.qosClass`` (``GetPodQOS``) and ``metadata`` only to name the pod in a
denial, and denials are never remembered.  The key is the policy, the status
QoS class and the JSON of the typed ``spec`` model (:meth:`shared.pod.Pod.spec_json`):
every field the model has is in it (a field left out is ``None``, its default),
and only those, so what numaguard does not read (volumes, env, the
service-account token volume whose name differs per pod) does not split it.
Equal keys are equal typed specs, hence equal plans.

Bounded twice: at most :data:`DEFAULT_ENTRIES` entries (least recently used
first out), and no key longer than :data:`MAX_KEY_CHARS`, so the memo holds a
few MB at worst whatever the apiserver sends.  A spec that cannot be encoded
(a lone surrogate in a string) is planned without the memo.  Not thread-safe:
the webhook calls it from its event loop only, between two awaits.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from shared import pod as pod_model
from webhook import plan

DEFAULT_ENTRIES = 512
MAX_KEY_CHARS = 16 * 1024  # a typed spec of ~50 containers; larger ones are planned every time

_Key = tuple[plan.PlanPolicy, str | None, str]


@dataclass(frozen=True, slots=True)
class PlannedPod:
    """A plan with its annotation value encoded once (both immutable, shared by every hit)."""

    plan: plan.Plan
    annotation_value: str

    def annotations(self) -> dict[str, str]:
        return {plan.PLAN_ANNOTATION: self.annotation_value}


class PlanMemo:
    """``plan_of(pod, policy, compute)``: ``compute``'s answer, computed once per distinct key."""

    def __init__(self, entries: int = DEFAULT_ENTRIES) -> None:
        if entries < 0:
            raise ValueError(f"a memo holds zero or more entries, not {entries}")
        self.entries = entries
        self._known: OrderedDict[_Key, PlannedPod] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._known)

    def plan_of(
        self,
        pod: pod_model.Pod,
        policy: plan.PlanPolicy,
        compute: Callable[[pod_model.Pod, plan.PlanPolicy], plan.Plan],
    ) -> PlannedPod:
        """The plan of ``pod``; ``compute`` runs on a miss, and whatever it raises is raised (nothing is kept)."""
        key = self._key(pod, policy)
        if key is not None:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
                self.hits += 1
                return known
        self.misses += 1
        computed = compute(pod, policy)
        planned = PlannedPod(computed, computed.annotation_value())
        if key is not None and self.entries:
            self._known[key] = planned
            if len(self._known) > self.entries:
                self._known.popitem(last=False)
        return planned

    @staticmethod
    def _key(pod: pod_model.Pod, policy: plan.PlanPolicy) -> _Key | None:
        try:
            spec = pod.spec_json()  # also the spec of the pod cache's copy (webhook.pod_cache): encoded once
        except ValueError:  # pydantic cannot encode a lone surrogate; such a spec is planned every time
            return None
        if len(spec) > MAX_KEY_CHARS:
            return None
        return (policy, pod.status.qos_class, spec)
