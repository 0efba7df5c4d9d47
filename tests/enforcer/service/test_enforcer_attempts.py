"""Binding attempts and conditional releases: a late release of one attempt never removes another's allocation.

Finding 4 of issue 12: a binding timed out (the node was slow), the webhook
denied it and released "the pod" later; meanwhile the scheduler's retry of the
same pod (same uid, another admission request) was admitted, and the delayed
release removed the allocation the retry had just recorded on the pod.  Here
the three requests a frozen node finds in its backlog (allocate for attempt 1,
the release of attempt 1, allocate for attempt 2) are served in every order,
through the real app (in process), and the node must end holding the pod
exactly when attempt 2 was answered with its allocation.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from service_fixtures import allocation_request, guaranteed_pod, make_settings

from enforcer.cgroups import recording
from enforcer.service import attempts, auth, deps, main
from shared import contract

pytestmark = pytest.mark.anyio

POD = guaranteed_pod("retried", 4)
UID = POD["metadata"]["uid"]
STEPS = ("allocate-1", "release-1", "allocate-2")


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = main.create_app(
        make_settings(tmp_path / "state"), cgroup_driver=recording.RecordingCgroupDriver(auto_create=True)
    )
    app.dependency_overrides[deps.require_writer] = lambda: auth.Caller("certificate", "numaguard-webhook")
    app.dependency_overrides[deps.require_reader] = lambda: auth.Caller("certificate", "numaguard-operator")
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://x") as client:
        yield client


async def step(api: httpx.AsyncClient, name: str) -> httpx.Response:
    action, attempt = name.split("-")
    if action == "allocate":
        return await api.post(
            "/allocations", json=allocation_request(POD), headers={contract.ATTEMPT_HEADER: f"attempt-{attempt}"}
        )
    return await api.delete(f"/allocations/{UID}", params={contract.ATTEMPT_PARAM: f"attempt-{attempt}"})


@pytest.mark.parametrize("order", list(itertools.permutations(STEPS)), ids="|".join)
async def test_the_node_holds_the_pod_exactly_when_the_retry_got_its_allocation(
    api: httpx.AsyncClient, order: tuple[str, ...]
) -> None:
    answers = {name: await step(api, name) for name in order}
    retry = answers["allocate-2"]
    assert retry.status_code in (200, 201), retry.text
    held = await api.get(f"/allocations/{UID}")
    assert held.status_code == 200, f"{order}: the retry's allocation was lost"
    assert held.json()["containers"] == retry.json()["containers"]
    late_first = answers["allocate-1"]
    if order.index("allocate-1") > order.index("release-1"):
        # the first attempt was withdrawn before its turn: it must not allocate (it would be an orphan otherwise)
        assert late_first.status_code == 409
        assert late_first.json()["reason"] == "AttemptWithdrawn"


@pytest.mark.parametrize("order", list(itertools.permutations((*STEPS, "release-2"))), ids="|".join)
async def test_when_both_attempts_are_released_nothing_is_left_behind(
    api: httpx.AsyncClient, order: tuple[str, ...]
) -> None:
    for name in order:
        answer = await step(api, name)
        assert answer.status_code in (200, 201, 409), answer.text
    assert (await api.get(f"/allocations/{UID}")).status_code == 404, f"{order}: an orphan allocation was left"


async def test_an_unconditional_release_still_releases_and_clears_the_claims(api: httpx.AsyncClient) -> None:
    assert (await step(api, "allocate-1")).status_code == 201
    assert (await api.delete(f"/allocations/{UID}")).json()["released"] is True
    assert (await step(api, "allocate-2")).status_code == 201
    assert (await step(api, "release-2")).json()["released"] is True


async def test_a_conditional_release_of_an_allocation_no_attempt_claims_keeps_it(api: httpx.AsyncClient) -> None:
    # made by an operator without an attempt id, or claims lost in a restart: keeping it is the safe side
    assert (await api.post("/allocations", json=allocation_request(POD))).status_code == 201
    assert (await step(api, "release-1")).json()["released"] is False
    assert (await api.get(f"/allocations/{UID}")).status_code == 200


def test_tombstones_are_bounded() -> None:
    claims = attempts.AttemptClaims(max_tombstones=3)
    for n in range(10):
        claims.withdraw("uid", f"attempt-{n}")
    claims.check_not_withdrawn("uid", "attempt-0")  # forgotten: the oldest go first
    with pytest.raises(attempts.AttemptWithdrawnError):
        claims.check_not_withdrawn("uid", "attempt-9")
