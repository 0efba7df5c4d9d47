"""The allocation routes' optional header and query parameters, read by hand (enforcer.service.params).

They must answer exactly what FastAPI's declared ``Header``/``Query`` parameters answered: the same
422 ``ErrorBody`` (message, field, detail), the same OpenAPI parameter documents, and authentication
still before any of them.  The expected values below were recorded from the declared parameters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_fixtures import allocation_request, guaranteed_pod, make_settings, uid_of

from enforcer.cgroups import recording
from enforcer.service import auth, deps, main

pytestmark = pytest.mark.anyio

BUDGET = "X-Numaguard-Budget-Ms"
ATTEMPT = "X-Numaguard-Attempt"
NOT_AN_INT = "Input should be a valid integer, unable to parse string as an integer"
TOO_LONG = "String should have at most 128 characters"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = main.create_app(
        make_settings(tmp_path / "state"), cgroup_driver=recording.RecordingCgroupDriver(auto_create=True)
    )
    app.dependency_overrides[deps.require_writer] = lambda: auth.Caller("certificate", "test-writer")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://enforcer") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


@pytest.mark.parametrize(
    ("headers", "status", "message", "kind"),
    [
        ({BUDGET: "abc"}, 422, f"header.{BUDGET}: {NOT_AN_INT}", "int_parsing"),
        ({BUDGET: ""}, 422, f"header.{BUDGET}: {NOT_AN_INT}", "int_parsing"),
        ({BUDGET: "1.5"}, 422, f"header.{BUDGET}: {NOT_AN_INT}", "int_parsing"),
        ({BUDGET: "0"}, 422, f"header.{BUDGET}: Input should be greater than or equal to 1", "greater_than_equal"),
        ({BUDGET.lower(): " 7 "}, 201, None, None),  # header names are case-insensitive; pydantic strips
        ({BUDGET: "60000"}, 201, None, None),
        ({ATTEMPT: "a" * 129}, 422, f"header.{ATTEMPT}: {TOO_LONG}", "string_too_long"),
        ({ATTEMPT: "a" * 128}, 201, None, None),
        ({ATTEMPT: ""}, 201, None, None),  # an empty attempt is no attempt
        ({}, 201, None, None),
    ],
)
async def test_allocation_headers(
    api: httpx.AsyncClient, headers: dict[str, str], status: int, message: str | None, kind: str | None
) -> None:
    answer = await api.post("/allocations", json=allocation_request(guaranteed_pod("p", 1)), headers=headers)
    assert answer.status_code == status, answer.text
    if message is None:
        return
    name = next(iter(headers))
    assert answer.json() == {
        "reason": "InvalidRequest",
        "message": message,
        "field": f"header.{name}",
        "detail": [{"loc": ["header", name], "msg": message.split(": ", 1)[1], "type": kind}],
    }


async def test_a_refused_parameter_leaves_nothing_allocated(api: httpx.AsyncClient) -> None:
    refused = await api.post("/allocations", json=allocation_request(guaranteed_pod("p", 1)), headers={BUDGET: "0"})
    assert refused.status_code == 422
    assert (await api.delete(f"/allocations/{uid_of('p')}")).json()["released"] is False


@pytest.mark.parametrize(
    ("attempt", "status", "body"),
    [
        (
            "a" * 129,
            422,
            {
                "reason": "InvalidRequest",
                "message": f"query.attempt: {TOO_LONG}",
                "field": "query.attempt",
                "detail": [{"loc": ["query", "attempt"], "msg": TOO_LONG, "type": "string_too_long"}],
            },
        ),
        ("", 200, {"released": True, "resizesApplied": []}),  # empty: an unconditional release
        ("someone-elses-attempt", 200, {"released": False, "resizesApplied": []}),
    ],
)
async def test_release_attempt_parameter(api: httpx.AsyncClient, attempt: str, status: int, body: Any) -> None:
    assert (await api.post("/allocations", json=allocation_request(guaranteed_pod("p", 1)))).status_code == 201
    answer = await api.delete(f"/allocations/{uid_of('p')}", params={"attempt": attempt})
    assert answer.status_code == status
    assert answer.json() == body


async def test_authentication_comes_before_the_parameters(api: httpx.AsyncClient) -> None:
    app: Any = api.app  # type: ignore[attr-defined]
    app.dependency_overrides.clear()
    refused = await api.post("/allocations", json=allocation_request(guaranteed_pod("p", 1)), headers={BUDGET: "x"})
    assert refused.status_code == 401
    assert (await api.delete(f"/allocations/{uid_of('p')}", params={"attempt": "a" * 129})).status_code == 401


async def test_the_parameters_are_documented_as_declared_parameters_were(api: httpx.AsyncClient) -> None:
    app: Any = api.app  # type: ignore[attr-defined]
    paths = app.openapi()["paths"]

    def optional(name: str, where: str, description: str, schema: dict[str, Any], title: str) -> dict[str, Any]:
        return {
            "description": description,
            "in": where,
            "name": name,
            "required": False,
            "schema": {"anyOf": [schema, {"type": "null"}], "description": description, "title": title},
        }

    assert paths["/allocations"]["post"]["parameters"] == [
        optional(BUDGET, "header", "How long the caller still waits (ms)", {"minimum": 1, "type": "integer"}, BUDGET),
        optional(
            ATTEMPT, "header", "The binding attempt (admission uid)", {"maxLength": 128, "type": "string"}, ATTEMPT
        ),
    ]
    assert paths["/allocations/{uid}"]["delete"]["parameters"] == [
        {"in": "path", "name": "uid", "required": True, "schema": {"title": "Uid", "type": "string"}},
        optional("attempt", "query", "withdraw only this attempt", {"maxLength": 128, "type": "string"}, "Attempt"),
    ]
