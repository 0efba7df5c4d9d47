"""Who depends on numaguard (issue 12, findings 1, 2 and 4): a table of pod kind x node state, in process.

A pod that needs no exclusive resources (Burstable, BestEffort, no resources)
is never refused because an enforcer cannot be asked; a node numaguard does not
enforce is never asked; a Guaranteed pod on an enforced node whose enforcer is
down is refused with the reason.  A pod already bound is refused as the
apiserver would, without an allocation on the node.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from webhook_testkit import NODE, NODE_URL, FakeEnforcer, load_review

from webhook import discovery, main, pod_cache
from webhook.settings import WebhookSettings

pytestmark = pytest.mark.anyio

PODS = {
    "guaranteed": "tightly-coupled-database",
    "burstable": "burstable-web",
    "besteffort": "besteffort-batch",
}
DOWN = "node-down"  # enforced (in the map) but its enforcer refuses connections


def app_for(fake: FakeEnforcer, *sources: pod_cache.PodLookup) -> Any:
    def transport(request: httpx.Request) -> httpx.Response:
        if request.url.host == "node-down.enforcers.test":
            raise httpx.ConnectError("connection refused", request=request)
        return fake.handle(request)

    directory = discovery.StaticDirectory({NODE: NODE_URL, DOWN: "https://node-down.enforcers.test:8443"})
    components = main.Components(
        enforcer_transport=httpx.MockTransport(transport), directory=directory, extra_pod_sources=sources
    )
    return main.create_app(WebhookSettings(enforcer_retries=0), components=components)


async def bind(app: Any, fixture: str, node: str) -> dict[str, Any]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http,
    ):
        create = load_review(f"create-validate-{fixture}")
        created = await http.post("/validate", json=create)
        assert created.json()["response"]["allowed"] is True
        pod = create["request"]["object"]["metadata"]
        review = load_review("binding-tightly-coupled-database")
        review["request"]["name"] = pod["name"]
        review["request"]["object"]["metadata"].update(name=pod["name"], uid=pod["uid"])
        review["request"]["object"]["target"]["name"] = node
        answer: dict[str, Any] = (await http.post("/mutate", json=review)).json()["response"]
        return answer


CASES = [
    # pod kind, node, allowed, asked the healthy node
    ("guaranteed", NODE, True, True),
    ("burstable", NODE, True, True),
    ("besteffort", NODE, True, True),
    ("guaranteed", DOWN, False, False),
    ("burstable", DOWN, True, False),
    ("besteffort", DOWN, True, False),
    ("guaranteed", "not-enforced", True, False),
    ("burstable", "not-enforced", True, False),
]


@pytest.mark.parametrize(("kind", "node", "allowed", "asked"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
async def test_who_is_refused_when(kind: str, node: str, allowed: bool, asked: bool) -> None:
    fake = FakeEnforcer()
    answer = await bind(app_for(fake), PODS[kind], node)
    assert answer["allowed"] is allowed, answer
    if not allowed:
        assert answer["status"]["reason"] == "EnforcerUnavailable"
    elif node != NODE:
        assert answer["warnings"], "an unchecked binding says so"
    assert bool(fake.requests) is asked


class BoundElsewhere:
    """The API's view of a pod already bound (what ApiPodReader returns once spec.nodeName is set)."""

    def __init__(self, fixture: str) -> None:
        review = load_review(f"create-validate-{fixture}")["request"]
        pod = dict(review["object"])
        pod["spec"] = {**pod["spec"], "nodeName": "node-z"}
        self.seen = pod_cache.trimmed(pod, namespace=review["namespace"], source="api")

    async def find(self, *, namespace: str, name: str, uid: str) -> pod_cache.SeenPod | None:
        return self.seen

    def is_ready(self) -> bool:
        return True


async def test_a_binding_of_an_already_bound_pod_allocates_nothing() -> None:
    """Finding 4: the apiserver refuses it (409) after admission; asking the node left an allocation behind."""
    fake = FakeEnforcer()
    app = app_for(fake, BoundElsewhere("tightly-coupled-database"))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http,
    ):
        answer = (await http.post("/mutate", json=load_review("binding-tightly-coupled-database"))).json()["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 409
    assert 'already assigned to node "node-z"' in answer["status"]["message"]
    assert fake.requests == []
