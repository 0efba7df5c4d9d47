"""Response bodies the enforcer adds around the ``shared.contract`` models.

The contract models (``Allocation``, ``AllocationList``, ``ResizeResult``...)
are what the webhook reads; these extend them with node-local facts an
operator needs (cgroup divergence, whether the durable state is usable) and
add the few bodies the contract does not define (release, readiness).  Extra
keys are harmless to the webhook: the contract models ignore unknown fields.

Values only: no behaviour, no I/O.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from shared import contract


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


class CgroupDivergence(_Body):
    """A cgroup file that did not hold what the allocation says (values as the file shows them)."""

    path: str
    field: str
    expected: str
    actual: str


class CgroupStatus(_Body):
    """What the last reconcile of this pod's cgroups found and did."""

    in_sync: bool
    checked_at: datetime
    divergences: list[CgroupDivergence] = Field(default_factory=list)
    # cgroups that do not exist yet (containers not started, or ids not known)
    pending: list[str] = Field(default_factory=list)
    # memory limit decreases held back while usage is above the new limit
    held: list[str] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)


class AllocationStatus(contract.Allocation):
    """An allocation plus the state of its cgroups on this node."""

    cgroups: CgroupStatus | None = None


class StateStatus(_Body):
    """Whether the durable state loaded and verified; when not, writes answer 503 until ``recover-state``."""

    available: bool
    reason: str | None = None
    message: str | None = None
    path: str


class AllocationListStatus(contract.AllocationList):
    items: list[AllocationStatus] = Field(default_factory=list)  # type: ignore[assignment]
    state: StateStatus
    # what the first reconcile after start-up found different from the saved allocations
    startup_divergences: list[CgroupDivergence] = Field(default_factory=list)


class ReleaseResult(_Body):
    """``DELETE /allocations/{uid}``: whether anything was held; queued resizes that fit now."""

    released: bool
    resizes_applied: list[str] = Field(default_factory=list)


class Readiness(_Body):
    ready: bool
    reason: str | None = None
    message: str | None = None
    checks: dict[str, bool] = Field(default_factory=dict)
