"""The CREATE plan memo: complete keys (a hit answers what planning would), bounded, never keeps a denial.

The end-to-end check is differential: every recorded CREATE review, and
variants of them that share or split a memo entry, answered by the real app
with the memo warm are byte-identical to the answers of the same app planning
every pod afresh (a memo of zero entries).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import httpx
import pytest
from webhook_testkit import AppFactory, load_review, review_names

from shared import pod as pod_model
from webhook import plan, plan_memo
from webhook.handlers import pod_create

POLICY = plan.PlanPolicy()


def fixture_pod(name: str = "create-mutate-tightly-coupled-database") -> dict[str, Any]:
    obj: dict[str, Any] = load_review(name)["request"]["object"]
    return obj


class CountingPlanner:
    """The handler's own planning, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, pod: pod_model.Pod, policy: plan.PlanPolicy) -> plan.Plan:
        self.calls += 1
        return pod_create._plan(pod, policy)


def plan_twice(first: dict[str, Any], second: dict[str, Any], policy: plan.PlanPolicy = POLICY) -> int:
    """How many times planning ran for ``first`` then ``second`` through one memo."""
    memo, planner = plan_memo.PlanMemo(), CountingPlanner()
    a = memo.plan_of(pod_model.parse_pod(first), POLICY, planner)
    b = memo.plan_of(pod_model.parse_pod(second), policy, planner)
    if planner.calls == 1:
        assert a is b
    return planner.calls


def test_the_same_spec_is_planned_once_and_gives_the_computed_plan() -> None:
    memo, planner = plan_memo.PlanMemo(), CountingPlanner()
    pod = pod_model.parse_pod(fixture_pod())
    first = memo.plan_of(pod, POLICY, planner)
    again = memo.plan_of(pod_model.parse_pod(fixture_pod()), POLICY, planner)
    assert again is first and planner.calls == 1 and (memo.hits, memo.misses) == (1, 1)
    assert first.plan == pod_create._plan(pod, POLICY)
    assert first.annotation_value == first.plan.annotation_value()
    assert first.annotations() == first.plan.annotations()


def _renamed(obj: dict[str, Any]) -> None:
    obj["metadata"].update(name="another", uid="1234", labels={"app": "x"}, annotations={"a": "b"})


def _unmodelled_fields(obj: dict[str, Any]) -> None:
    # what differs between replicas, or does not touch resources: the projected token volume, env, probes
    obj["spec"]["volumes"] = [{"name": "kube-api-access-x7k2p", "projected": {"sources": []}}]
    obj["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    obj["spec"]["containers"][0]["livenessProbe"] = {"tcpSocket": {"port": 5432}}


@pytest.mark.parametrize("change", [_renamed, _unmodelled_fields], ids=["metadata", "unmodelled-spec-fields"])
def test_replicas_share_an_entry(change: Any) -> None:
    other = fixture_pod()
    change(other)
    assert plan_twice(fixture_pod(), other) == 1


def _cpu(obj: dict[str, Any]) -> None:
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"


def _pod_budget(obj: dict[str, Any]) -> None:
    obj["spec"]["resources"]["limits"]["memory"] = "17Gi"


def _sidecar_becomes_init(obj: dict[str, Any]) -> None:
    del obj["spec"]["initContainers"][0]["restartPolicy"]


def _container_name(obj: dict[str, Any]) -> None:
    obj["spec"]["containers"][0]["name"] = "db"


def _qos_status(obj: dict[str, Any]) -> None:
    obj["status"] = {"qosClass": "Burstable"}


@pytest.mark.parametrize(
    "change",
    [_cpu, _pod_budget, _sidecar_becomes_init, _container_name, _qos_status],
    ids=lambda f: f.__name__.strip("_"),
)
def test_anything_planning_reads_splits_the_entry(change: Any) -> None:
    other = fixture_pod()
    change(other)
    assert plan_twice(fixture_pod(), other) == 2


def test_a_pod_made_invalid_by_a_field_planning_reads_is_denied_after_its_valid_twin() -> None:
    memo, planner = plan_memo.PlanMemo(), CountingPlanner()
    memo.plan_of(pod_model.parse_pod(fixture_pod()), POLICY, planner)
    windows = fixture_pod()
    windows["spec"]["os"] = {"name": "windows"}  # pod-level resources are forbidden on Windows (V1)
    with pytest.raises(Exception, match="windows pod"):
        memo.plan_of(pod_model.parse_pod(windows), POLICY, planner)


def test_another_policy_splits_the_entry() -> None:
    container_scope = plan.PlanPolicy(scope="container")
    assert plan_twice(fixture_pod(), fixture_pod(), container_scope) == 2


def test_a_denied_pod_is_planned_every_time_and_never_kept() -> None:
    memo, planner = plan_memo.PlanMemo(), CountingPlanner()
    obj = load_review("create-mutate-invalid-plr-aggregate")["request"]["object"]
    for _ in range(2):
        with pytest.raises(Exception, match="is invalid"):
            memo.plan_of(pod_model.parse_pod(obj), POLICY, planner)
    assert planner.calls == 2 and len(memo) == 0


def test_the_least_recently_used_entry_leaves_first() -> None:
    memo, planner = plan_memo.PlanMemo(entries=2), CountingPlanner()
    pods = []
    for cpu in ("1", "2", "3"):
        obj = fixture_pod()
        obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
        pods.append(pod_model.parse_pod(obj))
    memo.plan_of(pods[0], POLICY, planner)
    memo.plan_of(pods[1], POLICY, planner)
    memo.plan_of(pods[0], POLICY, planner)  # 0 is now the most recent: 1 leaves when 2 arrives
    memo.plan_of(pods[2], POLICY, planner)
    assert len(memo) == 2 and planner.calls == 3
    memo.plan_of(pods[0], POLICY, planner)
    assert planner.calls == 3
    memo.plan_of(pods[1], POLICY, planner)
    assert planner.calls == 4


def test_a_spec_beyond_the_key_limit_is_planned_every_time() -> None:
    obj = fixture_pod()
    obj["spec"]["containers"][0]["image"] = "x" * plan_memo.MAX_KEY_CHARS
    assert plan_twice(obj, copy.deepcopy(obj)) == 2


def test_a_spec_pydantic_cannot_encode_is_planned_without_the_memo() -> None:
    obj = fixture_pod()
    obj["spec"]["containers"][0]["image"] = "\ud800"
    assert plan_twice(obj, copy.deepcopy(obj)) == 2


def test_a_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match="zero or more"):
        plan_memo.PlanMemo(entries=-1)


# -- differential, end to end -----------------------------------------------------------------------------


def _variants() -> list[bytes]:
    """Every recorded CREATE review, then each again renamed (an entry hit) and with its first cpu changed."""
    bodies = []
    for name in review_names("create-"):
        document = load_review(name)
        bodies.append(json.dumps(document).encode())
        obj = document["request"].get("object")
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            continue
        renamed = copy.deepcopy(document)
        renamed["request"]["uid"] = "another-request"
        renamed["request"]["object"]["metadata"]["name"] = "another-name"
        bodies.append(json.dumps(renamed).encode())
        containers = obj.get("spec", {}).get("containers") if isinstance(obj.get("spec"), dict) else None
        if isinstance(containers, list) and containers and isinstance(containers[0], dict):
            changed = copy.deepcopy(document)
            changed["request"]["object"]["spec"]["containers"][0]["resources"] = {
                "requests": {"cpu": "3", "memory": "1Gi"},
                "limits": {"cpu": "3", "memory": "1Gi"},
            }
            bodies.append(json.dumps(changed).encode())
    return bodies


async def _answers(make_app: AppFactory, bodies: list[bytes], *, memo: plan_memo.PlanMemo) -> list[bytes]:
    app = make_app()
    app.state.services = dataclasses.replace(app.state.services, plans=memo)
    answers = []
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http,
    ):
        for body in bodies:
            for path in ("/mutate", "/validate"):
                answer = await http.post(path, content=body, headers={"Content-Type": "application/json"})
                answers.append(b"%d " % answer.status_code + answer.content)
    return answers


@pytest.mark.anyio
async def test_answers_with_a_warm_memo_are_byte_identical_to_planning_every_pod(make_app: AppFactory) -> None:
    bodies = _variants()
    twice = bodies + bodies  # the second pass answers every plannable pod from the memo
    memo = plan_memo.PlanMemo()
    fresh = await _answers(make_app, twice, memo=plan_memo.PlanMemo(entries=0))
    memoised = await _answers(make_app, twice, memo=memo)
    assert len(fresh) == 4 * len(bodies)
    assert memo.hits > 2 * len(bodies)  # the test compares answers from the memo, not just misses
    assert memoised == fresh
