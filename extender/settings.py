"""The extender's settings: defaults < ``--config FILE`` (YAML or JSON, camelCase keys) < flags.

A setting that cannot work is a :class:`ConfigError` naming the field, raised before anything is served.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from servicekit import config_file


class ConfigError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ExtenderSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    listen: str = "0.0.0.0:8444"
    tls_cert: Path | None = None  # the extender's serving certificate (kube-scheduler: enableHTTPS + tlsConfig)
    tls_key: Path | None = None
    cert_check_interval: float = Field(default=30.0, gt=0)
    enforcer_discovery: Literal["static", "daemonset"] = "static"
    enforcers_file: Path | None = None  # static: node -> enforcer URL (manifests/base/config/enforcers.yaml's format)
    enforcer_namespace: str = "numaguard"  # daemonset: where the enforcer pods run
    enforcer_selector: str = "app.kubernetes.io/name=numaguard-enforcer"
    enforcer_port: int = Field(default=8443, gt=0, lt=65536)
    enforcer_server_name: str | None = None  # SNI and certificate name when URLs are pod IPs
    discovery_interval_seconds: float = Field(default=10.0, gt=0)
    enforcer_ca: Path | None = None  # CA of the enforcers' serving certificates
    client_cert: Path | None = None  # a client certificate the enforcers accept (reads need no more)
    client_key: Path | None = None
    token_file: Path | None = None  # or the enforcers' read-only bearer token
    poll_interval_seconds: float = Field(default=1.0, gt=0)
    freshness_seconds: float = Field(default=5.0, gt=0)  # a replica older than this is not used for answers
    poll_timeout_seconds: float = Field(default=2.0, gt=0)
    poll_workers: int = Field(default=4, ge=1, le=64)
    enforcer_down: Literal["filter", "pass"] = "filter"  # match the webhook's failureMode: deny -> filter
    max_body_bytes: int = Field(default=16 << 20, gt=0)
    log_level: str = "INFO"

    @model_validator(mode="after")
    def _consistent(self) -> ExtenderSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tlsCert and tlsKey go together")
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("clientCert and clientKey go together")
        if self.enforcer_discovery == "static" and self.enforcers_file is None:
            raise ValueError("enforcersFile is required with enforcerDiscovery: static")
        if self.freshness_seconds < self.poll_interval_seconds:
            raise ValueError("freshnessSeconds must be at least pollIntervalSeconds, or every replica is stale")
        return self

    def listen_address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        if not port.isdigit():
            raise ConfigError(f"listen: expected HOST:PORT, got {self.listen!r}")
        return host.strip("[]") or "0.0.0.0", int(port)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        document = config_file.read_mapping(path)
    except config_file.ConfigFileError as err:
        raise ConfigError(str(err)) from None
    base = path.parent
    resolved: dict[str, Any] = {}
    for key, value in document.items():
        field = _canonical(str(key))
        info = ExtenderSettings.model_fields.get(field)
        is_path = info is not None and "Path" in str(info.annotation)
        if is_path and isinstance(value, str) and not Path(value).is_absolute():
            value = str(base / value)  # relative paths are relative to the file
        resolved[field] = value
    return resolved


def _canonical(key: str) -> str:
    by_alias = {field.alias or name: name for name, field in ExtenderSettings.model_fields.items()}
    return by_alias.get(key, key.replace("-", "_"))


def load(config_file: Path | None = None, *, overrides: Mapping[str, Any] | None = None) -> ExtenderSettings:
    merged: dict[str, Any] = {}
    if config_file is not None:
        merged.update(_read_file(config_file))
    merged.update({_canonical(k): v for k, v in (overrides or {}).items() if v is not None})
    try:
        return ExtenderSettings.model_validate(merged)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise ConfigError(f"invalid extender settings: {problems}") from None
