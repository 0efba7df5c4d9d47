"""The collaborators a review needs, bundled once by the composition root (:mod:`webhook.main`).

Handlers receive a :class:`Services` instead of reaching for globals, so a
test builds one with fakes (a ``MockTransport`` client, a static directory, a
pre-filled pod cache) and the production app builds one from settings.
Nothing here does work of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook import discovery, enforcer_client, plan, plan_memo, pod_cache
from webhook.metrics import WebhookMetrics
from webhook.settings import WebhookSettings


@dataclass(frozen=True)
class Services:
    settings: WebhookSettings
    plan_policy: plan.PlanPolicy
    # the pods this replica admitted (written at CREATE), also the first source of ``pods``
    seen_pods: pod_cache.SeenPods
    pods: pod_cache.PodLookup
    enforcers: discovery.EnforcerDirectory
    client: enforcer_client.EnforcerClient
    metrics: WebhookMetrics
    # CREATE plans by the typed spec they were computed from (replicas share one); see webhook.plan_memo
    plans: plan_memo.PlanMemo = field(default_factory=plan_memo.PlanMemo)

    @property
    def enforcer_budget(self) -> float:
        return self.settings.enforcer_budget_seconds
