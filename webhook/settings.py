"""The webhook's configuration: one frozen model, read from a file, the environment and flags.

Precedence, lowest first: defaults < config file (YAML or JSON, snake_case or
camelCase keys) < environment (``WEBHOOK_<FIELD>``, e.g. ``WEBHOOK_FAILURE_MODE``)
< explicit overrides (command-line flags).  Everything is validated once, at
startup, and a setting that cannot work is a :class:`~webhook.errors.ConfigError`
naming the field, never a surprise at the first admission request.

This module reads the config file and nothing else; it must not open sockets
or load certificates (``main`` does, from the paths given here).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from servicekit import config_file
from shared import quantity
from shared.errors import QuantityError
from webhook import errors, plan

ENV_PREFIX = "WEBHOOK_"
DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024

FailureMode = Literal["deny", "allow"]


class WebhookSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    # -- serving
    listen: str = "0.0.0.0:8443"
    tls_cert: Path | None = None  # serving certificate; without it the webhook speaks plain HTTP (local runs only)
    tls_key: Path | None = None
    cert_check_interval: float = Field(default=30.0, gt=0)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0)
    log_level: str = "info"
    # Who may send admission reviews: the kube-apiserver presents a client certificate (AdmissionConfiguration
    # kubeConfigFile) signed by ``client_ca``; /mutate and /validate then refuse callers without one, with
    # another CA's, or without the clientAuth usage.  ``allowed_clients`` narrows it to these names (CN or DNS
    # SAN); empty: any certificate of that CA.  Without ``client_ca`` nobody is authenticated (see README).
    client_ca: Path | None = None
    allowed_clients: tuple[str, ...] = ()

    # -- calling the enforcers (mutual TLS)
    client_cert: Path | None = None
    client_key: Path | None = None
    enforcer_ca: Path | None = None
    enforcer_discovery: Literal["static", "daemonset"] = "static"
    enforcers_file: Path | None = None  # static: node name -> enforcer URL
    enforcer_namespace: str = "numaguard"
    enforcer_selector: str = "app.kubernetes.io/name=numaguard-enforcer"
    enforcer_port: int = Field(default=8443, gt=0, lt=65536)
    # The name the enforcer's certificate must carry when we dial a pod IP; None: the URL's host.
    enforcer_server_name: str | None = None
    # The MutatingWebhookConfiguration's timeoutSeconds (W5) and the share of it one enforcer call may use.
    timeout_seconds: int = Field(default=10, ge=1, le=30)
    # An enforcer pod that vanished keeps its node enforced this long (rolling update, crash loop).
    enforcer_absent_grace_seconds: float = Field(default=600.0, ge=0)
    enforcer_budget_seconds: float = Field(default=3.0, gt=0)
    enforcer_retries: int = Field(default=1, ge=0, le=5)
    # Calls in flight to one node's enforcer; the others wait for a slot inside their budget (or give up
    # without touching the network).  A node decides one change at a time: more only adds TLS churn and load.
    enforcer_concurrency: int = Field(default=16, ge=1, le=1024)
    failure_mode: FailureMode = "deny"  # an unreachable enforcer: deny the binding/resize, or allow with a warning

    # -- pods
    pod_source: Literal["seen", "kubernetes"] = "seen"  # kubernetes: a watch of unscheduled pods (in cluster)
    pod_cache_size: int = Field(default=10_000, gt=0)
    # A binding for a pod no source knows, on an enforced node; None: deny with podSource kubernetes (the
    # API itself does not know it), allow with a warning with podSource seen (pods created before a restart).
    unknown_pod_mode: FailureMode | None = None

    # -- the plan
    topology_manager_scope: plan.Scope = "pod"
    pod_level_resource_managers: bool = True
    numa_cpus: int | None = Field(default=None, gt=0)
    numa_memory: str | None = None  # a quantity, e.g. "64Gi"

    @model_validator(mode="after")
    def _consistent(self) -> WebhookSettings:
        if self.enforcer_budget_seconds > self.timeout_seconds / 2:
            raise ValueError(
                f"enforcer_budget_seconds {self.enforcer_budget_seconds} must stay well inside timeout_seconds "
                f"{self.timeout_seconds} (at most half of it)"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if self.allowed_clients and self.client_ca is None:
            raise ValueError("allowed_clients needs client_ca (the CA that signed the apiserver's client certificate)")
        if self.client_ca is not None and self.tls_cert is None:
            raise ValueError("client_ca needs tls_cert and tls_key: client certificates exist only over TLS")
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("client_cert and client_key go together")
        if (self.numa_cpus is None) != (self.numa_memory is None):
            raise ValueError("numa_cpus and numa_memory go together (the size of one NUMA node)")
        if self.numa_memory is not None:
            try:
                if quantity.to_bytes(self.numa_memory) <= 0:
                    raise ValueError(f"numa_memory must be positive, got {self.numa_memory!r}")
            except QuantityError as err:
                raise ValueError(f"numa_memory: {err.message}") from None
        self.listen_address()
        return self

    def listen_address(self) -> tuple[str, int]:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"listen must be HOST:PORT, got {self.listen!r}")
        return host.strip("[]") or "0.0.0.0", int(port)

    def effective_unknown_pod_mode(self) -> FailureMode:
        if self.unknown_pod_mode is not None:
            return self.unknown_pod_mode
        return "deny" if self.pod_source == "kubernetes" else "allow"

    def plan_policy(self) -> plan.PlanPolicy:
        numa = None
        if self.numa_cpus is not None and self.numa_memory is not None:
            numa = plan.NUMANodeSize(self.numa_cpus, quantity.to_bytes(self.numa_memory))
        return plan.PlanPolicy(
            scope=self.topology_manager_scope,
            numa_node=numa,
            pod_level_resource_managers=self.pod_level_resource_managers,
        )


def _read_file(path: Path) -> dict[str, Any]:
    try:
        return config_file.read_mapping(path)
    except config_file.ConfigFileError as err:
        raise errors.ConfigError(str(err)) from None


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in WebhookSettings.model_fields:
        value = env.get(ENV_PREFIX + name.upper())
        if value is not None:
            found[name] = value
    return found


def _canonical_keys(values: Mapping[str, Any]) -> dict[str, Any]:
    """Config files may spell keys camelCase; later sources must override earlier ones whatever the spelling."""
    by_alias = {field.alias or name: name for name, field in WebhookSettings.model_fields.items()}
    return {by_alias.get(key, key.replace("-", "_")): value for key, value in values.items()}


def load(
    config_file: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> WebhookSettings:
    """Defaults < ``config_file`` < ``env`` (``os.environ`` when None) < ``overrides`` (None values are skipped)."""
    merged: dict[str, Any] = {}
    if config_file is not None:
        merged.update(_canonical_keys(_read_file(config_file)))
    merged.update(_from_env(os.environ if env is None else env))
    merged.update({k: v for k, v in _canonical_keys(overrides or {}).items() if v is not None})
    try:
        return WebhookSettings.model_validate(merged)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise errors.ConfigError(f"invalid webhook settings: {problems}") from None
