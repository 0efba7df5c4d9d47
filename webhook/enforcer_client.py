"""The webhook's HTTPS client for the node enforcers' API (mutual TLS).

Contract (``shared.contract``): ``POST /allocations`` (AllocationRequest ->
Allocation, idempotent by pod uid), ``POST /allocations/{uid}/resize``
(ResizeRequest -> ResizeResult, ``?dryRun=true`` for feasibility only).

Three rules shape this module:

* **Deadline.**  Every call, retries included, finishes inside ``budget``
  seconds, a slice of the webhook's ``timeoutSeconds`` chosen so the review can
  still answer (deny, or allow under the failure mode) before the apiserver
  gives up on us.  The budget bounds connect, TLS, send and read together.
* **Retries only when repeating is harmless.**  Allocation is idempotent by
  uid and a dry-run resize changes nothing, so both retry connection failures
  and 502/503/504 while the budget lasts; a real resize is sent once.
* **Bounded concurrency per node.**  At most ``concurrency`` calls are in
  flight to one node's enforcer (it decides one change at a time anyway); a
  call waits for a slot inside its own budget, and one that gets none gives up
  without sending anything.  In a burst this keeps connections reused (no TLS
  handshake per call) and the node's backlog short, so calls that are sent are
  answered inside their budget instead of all timing out together.
* **Typed errors.**  httpx exceptions and HTTP statuses are translated here,
  at the boundary, into :class:`~webhook.errors.EnforcerError` kinds; callers
  never see httpx.

The transport is injectable (``httpx.MockTransport`` in tests).  This module
must not decide what a refusal means for the review; the handlers do.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import TypeVar
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from shared import contract
from webhook import errors
from webhook.metrics import WebhookMetrics

log = logging.getLogger("webhook.enforcer_client")

_RETRYABLE_STATUS = frozenset({502, 503, 504})
# How long the caller will still wait, in milliseconds: the enforcer refuses to decide a request whose
# budget ran out before its turn came, so no allocation is made for a binding the webhook already denied.
BUDGET_HEADER = contract.BUDGET_HEADER
# The enforcer's own authentication refusals; every other 403 reason is a node refusing the pod.
_AUTH_REASONS = frozenset({"Unauthorized", "Forbidden"})
_MODEL = TypeVar("_MODEL", contract.Allocation, contract.ResizeResult)


class EnforcerClient:
    """One connection pool to every node's enforcer; close it with :meth:`aclose`."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_name: str | None = None,
        retries: int = 1,
        metrics: WebhookMetrics | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff_seconds: float = 0.05,
        concurrency: int = 16,
    ) -> None:
        if transport is None:
            # the per-node slots bound connections; keep every one of them alive for reuse
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=30.0)
            transport = httpx.AsyncHTTPTransport(
                verify=ssl_context if ssl_context is not None else True, retries=0, limits=limits
            )
        self._client = httpx.AsyncClient(transport=transport, follow_redirects=False, trust_env=False)
        self._concurrency = concurrency
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._server_name = server_name
        self._retries = retries
        self._metrics = metrics
        self._backoff = backoff_seconds

    async def aclose(self) -> None:
        await self._client.aclose()

    def _slot(self, node: str) -> asyncio.Semaphore:
        slot = self._slots.get(node)
        if slot is None:
            slot = self._slots[node] = asyncio.Semaphore(self._concurrency)
        return slot

    async def allocate(
        self, base_url: str, request: contract.AllocationRequest, *, node: str, budget: float, request_id: str = ""
    ) -> contract.Allocation:
        """The node's allocation of the pod (the existing one when the uid is already admitted).

        ``request_id`` (the admission request uid) is also the attempt the allocation is claimed for:
        :meth:`release` with the same ``attempt`` withdraws only this claim.
        """
        response = await self._call(
            "allocate",
            f"{base_url}/allocations",
            request.to_json(),
            params=None,
            node=node,
            budget=budget,
            idempotent=True,
            request_id=request_id,
            attempt_id=request_id,
        )
        return self._parse(response, contract.Allocation, node=node, call="allocate", ok=(200, 201))

    async def release(
        self, base_url: str, uid: str, *, node: str, budget: float, request_id: str = "", attempt: str = ""
    ) -> None:
        """Release the pod's allocation (idempotent); errors are raised like the other calls.

        With ``attempt`` only that binding attempt's claim is withdrawn (the node keeps an allocation another
        attempt, e.g. the scheduler's retry, relies on); without it the allocation goes unconditionally.
        """
        started = time.monotonic()
        headers = {"Accept": "application/json", BUDGET_HEADER: str(int(budget * 1000))}
        if request_id:
            headers["X-Request-Id"] = request_id
        extensions = {"sni_hostname": self._server_name} if self._server_name else None
        try:
            async with asyncio.timeout(budget), self._slot(node):
                response = await self._client.delete(
                    f"{base_url}/allocations/{quote(uid, safe='')}",
                    params={contract.ATTEMPT_PARAM: attempt} if attempt else None,
                    headers=headers,
                    timeout=httpx.Timeout(budget),
                    extensions=extensions,
                )
        except (TimeoutError, httpx.TimeoutException):
            failure: errors.EnforcerError = _timed_out(node, budget)
        except httpx.HTTPError as err:
            failure = errors.EnforcerUnavailable(f"the enforcer on node {node} is unreachable: {err}", node=node)
        else:
            self._observe("release", f"{response.status_code // 100}xx", started)
            if response.status_code != 200:
                raise _status_error(response, node=node)
            return
        self._observe("release", failure.kind, started, error_kind=failure.kind)
        raise failure

    async def resize(
        self,
        base_url: str,
        uid: str,
        request: contract.ResizeRequest,
        *,
        node: str,
        dry_run: bool,
        budget: float,
        request_id: str = "",
    ) -> contract.ResizeResult:
        """The node's decision on a resize; with ``dry_run`` the node only judges feasibility."""
        response = await self._call(
            "resize",
            f"{base_url}/allocations/{quote(uid, safe='')}/resize",
            request.to_json(),
            params={"dryRun": "true"} if dry_run else None,
            node=node,
            budget=budget,
            idempotent=dry_run,
            request_id=request_id,
        )
        return self._parse(response, contract.ResizeResult, node=node, call="resize", ok=(200,))

    # -- the wire ----------------------------------------------------------------------------------

    async def _call(
        self,
        call: str,
        url: str,
        body: str,
        *,
        params: dict[str, str] | None,
        node: str,
        budget: float,
        idempotent: bool,
        request_id: str,
        attempt_id: str = "",
    ) -> httpx.Response:
        started = time.monotonic()
        deadline = started + budget
        attempts = 1 + (self._retries if idempotent else 0)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if request_id:
            headers["X-Request-Id"] = request_id
        if attempt_id:
            headers[contract.ATTEMPT_HEADER] = attempt_id
        extensions = {"sni_hostname": self._server_name} if self._server_name else None
        failure: errors.EnforcerError | None = None
        for attempt in range(attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            headers[BUDGET_HEADER] = str(max(1, int(remaining * 1000)))
            try:
                async with asyncio.timeout(remaining), self._slot(node):
                    response = await self._client.post(
                        url,
                        content=body,
                        params=params,
                        headers=headers,
                        timeout=httpx.Timeout(remaining),
                        extensions=extensions,
                    )
            except (TimeoutError, httpx.TimeoutException):
                failure = _timed_out(node, budget)
            except httpx.HTTPError as err:
                failure = errors.EnforcerUnavailable(
                    f"the enforcer on node {node} is unreachable: {type(err).__name__}: {err}".rstrip(": "), node=node
                )
            else:
                if response.status_code not in _RETRYABLE_STATUS or attempt == attempts - 1:
                    self._observe(call, f"{response.status_code // 100}xx", started)
                    return response
                failure = errors.EnforcerUnavailable(
                    f"the enforcer on node {node} answered HTTP {response.status_code}", node=node
                )
            log.info(
                "enforcer call failed",
                extra={"call": call, "node": node, "attempt": attempt + 1, "error": failure.message, "uid": request_id},
            )
            pause = min(self._backoff * 2**attempt, (deadline - time.monotonic()) / 2)
            if attempt < attempts - 1 and pause > 0:
                await asyncio.sleep(pause)
        if failure is None:
            failure = _timed_out(node, budget)
        self._observe(call, failure.kind, started, error_kind=failure.kind)
        raise failure

    def _observe(self, call: str, outcome: str, started: float, *, error_kind: str | None = None) -> None:
        if self._metrics is not None:
            self._metrics.observe_enforcer_call(call, outcome, time.monotonic() - started, error_kind=error_kind)

    def _parse(
        self, response: httpx.Response, model: type[_MODEL], *, node: str, call: str, ok: tuple[int, ...]
    ) -> _MODEL:
        if response.status_code in ok:
            try:
                return model.model_validate_json(response.content)
            except ValidationError as err:
                first = err.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "body"
                message = f"node {node} sent an invalid {model.__name__}: {where}: {first['msg']}"
                raise self._count(call, errors.EnforcerProtocolError(message, node=node)) from None
        raise self._count(call, _status_error(response, node=node))

    def _count(self, call: str, error: errors.EnforcerError) -> errors.EnforcerError:
        if self._metrics is not None:
            self._metrics.enforcer_errors.labels(call=call, kind=error.kind).inc()
        return error


def _timed_out(node: str, budget: float) -> errors.EnforcerTimeout:
    return errors.EnforcerTimeout(f"the enforcer on node {node} did not answer within {budget:g}s", node=node)


def _error_body(response: httpx.Response) -> contract.ErrorBody | None:
    try:
        return contract.ErrorBody.model_validate_json(response.content)
    except ValidationError:
        return None


def _status_error(response: httpx.Response, *, node: str) -> errors.EnforcerError:
    """A non-success answer as the matching :class:`~webhook.errors.EnforcerError`."""
    status = response.status_code
    body = _error_body(response)
    if status == 404:
        return errors.EnforcerPodUnknown(body.message if body else f"node {node} holds no such pod", node=node)
    if status == 409:
        return errors.EnforcerConflict(
            body.message if body else "the node holds this pod uid with a different spec",
            node=node,
            reason=body.reason if body else "AllocationConflict",
            field=body.field if body else None,
            status_code=409,
        )
    if status == 401 or (status == 403 and body is not None and body.reason in _AUTH_REASONS):
        detail = f": {body.message}" if body else ""
        return errors.EnforcerProtocolError(
            f"the enforcer on node {node} did not accept our client certificate{detail}", node=node
        )
    if status in (400, 403, 422) and body is not None:
        return errors.EnforcerRefused(body.message, node=node, reason=body.reason, field=body.field, status_code=status)
    if status >= 500:
        detail = f": {body.reason}: {body.message}" if body else ""
        return errors.EnforcerUnavailable(f"the enforcer on node {node} answered HTTP {status}{detail}", node=node)
    return errors.EnforcerProtocolError(f"the enforcer on node {node} answered an unexpected HTTP {status}", node=node)
