"""The enforcer's configuration: one frozen model, read from a file, the environment and flags.

Precedence, lowest first: defaults < config file (YAML or JSON) < environment
(``NUMAGUARD_ENFORCER_<FIELD>``, e.g. ``NUMAGUARD_ENFORCER_STATE_DIR``) <
explicit overrides (command-line flags).

The config file's node part has the shape of a scenario file's ``node``
section (``../shared/contracts/plan.md``), so a node described for ``numaguard
plan`` runs unchanged under the enforcer::

    node:
      name: node-a
      compatibility: extended
      kubelet: {cpuManagerPolicy: static, reservedSystemCPUs: "0,16", ...}   # KubeletConfiguration names
      topologyFile: topo.json     # relative to this file; or sysfsRoot: /sys
    listen: 0.0.0.0:8443
    tlsCert: /etc/numaguard/enforcer.crt
    ...                           # every other field below, camelCase or snake_case

Everything is validated once, at startup, including the kubelet fields (parsed
by :func:`enforcer.engine.config.from_kubelet`): a setting that cannot work is a
:class:`~enforcer.errors.ConfigError` naming the field, never a surprise at the
first request.  This module reads the config file and nothing else; it must
not open sockets, read certificates or touch the state directory.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from enforcer.engine import config as engine_config
from enforcer.errors import ConfigError
from enforcer.state import checkpoint
from servicekit import config_file

ENV_PREFIX = "NUMAGUARD_ENFORCER_"
DEFAULT_LISTEN = "0.0.0.0:8443"
HOST_SYSFS = Path("/sys")

CgroupVersion = Literal["v1", "v2"]
CgroupDriverName = Literal["systemd", "cgroupfs"]
ContainerRuntime = Literal["containerd", "cri-o"]

# Keys of a config file's ``node:`` section and the settings fields they fill.
_NODE_SECTION = {
    "name": "node_name",
    "compatibility": "compatibility",
    "kubelet": "kubelet",
    "topologyFile": "topology_file",
    "topology": "topology_document",
    "sysfsRoot": "sysfs_root",
}
_PATH_FIELDS = (
    "sysfs_root",
    "topology_file",
    "tls_cert",
    "tls_key",
    "client_ca",
    "token_file",
    "state_dir",
    "cgroup_root",
    "hook_socket",
    "kubelet_config_file",
    "proc_root",
)
ClientRole = Literal["webhook", "operator", "reader"]
# The identities `numaguard certs` issues; the roles are explained in enforcer/service/auth.py.
DEFAULT_CLIENT_IDENTITIES: Mapping[str, ClientRole] = {
    "numaguard-webhook": "webhook",
    "numaguard-operator": "operator",
    "numaguard-metrics": "reader",
}
# Fields whose environment value is a JSON/YAML document rather than a scalar.
_STRUCTURED_FIELDS = frozenset({"kubelet", "topology_document", "client_identities"})


class EnforcerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    # -- the node (KubeletConfiguration field names under ``kubelet``)
    node_name: str = Field(default_factory=socket.gethostname, min_length=1)
    compatibility: engine_config.Compatibility = "extended"
    kubelet: dict[str, Any] = Field(default_factory=dict)
    # exactly one machine source; neither means this host's /sys
    sysfs_root: Path | None = None
    topology_file: Path | None = None
    topology_document: dict[str, Any] | None = None

    # -- serving (mutual TLS)
    listen: str = DEFAULT_LISTEN
    tls_cert: Path | None = None
    tls_key: Path | None = None
    client_ca: Path | None = None  # verifies client certificates: required for state-changing calls
    token_file: Path | None = None  # bearer token accepted by read endpoints
    # Client certificate identity (CN) -> role (webhook: writes; operator: everything; reader: reads only).
    client_identities: dict[str, ClientRole] = Field(default_factory=lambda: dict(DEFAULT_CLIENT_IDENTITIES))
    # Request bodies beyond this are refused with 413 before they are read (a Pod object is at most ~1.5 MiB).
    max_body_bytes: int = Field(default=2 * 1024 * 1024, gt=0)
    header_timeout_seconds: float = Field(default=10.0, gt=0)  # connection accepted -> complete request head
    api_docs: bool = False  # serve /openapi.json, /docs, /redoc (behind the reader role) for development
    cert_check_interval: float = Field(default=30.0, gt=0)
    log_level: str = "info"

    # -- durable state
    state_dir: Path = Path(checkpoint.DEFAULT_STATE_DIR)
    state_file: str = Field(default=checkpoint.DEFAULT_STATE_FILE, min_length=1)

    # -- cgroups
    cgroup_root: Path = Path("/sys/fs/cgroup")
    cgroup_version: CgroupVersion = "v2"
    cgroup_driver: CgroupDriverName = "systemd"
    kubelet_cgroup_root: str = "/"  # the kubelet's --cgroup-root
    container_runtime: ContainerRuntime = "containerd"
    dry_run_cgroups: bool = False  # record and log cgroup writes instead of making them
    reconcile_interval: float = Field(default=30.0, ge=0)  # seconds between drift repairs; 0: only after changes

    # -- the runtime hook (docs/runtime-hook.md) and the other writers
    hook_socket: Path | None = None  # serve `numaguard oci-hook` on this unix socket (mode 0600, root only)
    hook_deadline: float = Field(default=2.0, gt=0, le=30)  # seconds a hook connection may take
    rewrite_watch: Literal["auto", "inotify", "poll"] = "auto"  # how foreign rewrites of hooked cgroups are seen
    kubelet_config_file: Path | None = None  # None: /var/lib/kubelet/config.yaml when it exists
    kubelet_config_check: bool = True  # refuse to start when the kubelet's own managers or reservations clash
    proc_root: Path = Path("/proc")  # the host's procfs (a hostPath mount of /proc without hostPID)

    # -- the cluster
    standalone: bool = False  # no Kubernetes API: allocations are released only by DELETE
    release_grace_seconds: float = Field(default=120.0, ge=0)  # an allocation whose pod never shows up here

    _node_config: engine_config.NodeConfig = PrivateAttr()

    @model_validator(mode="after")
    def _consistent(self) -> EnforcerSettings:
        sources = [s for s in (self.sysfs_root, self.topology_file, self.topology_document) if s is not None]
        if len(sources) > 1:
            raise ValueError("give one machine source: sysfs_root, topology_file or an inline topology")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if "/" in self.state_file:
            raise ValueError(f"state_file is a file name inside state_dir, got {self.state_file!r}")
        self.listen_address()
        try:
            self._node_config = engine_config.from_kubelet(
                self.kubelet, name=self.node_name, compatibility=self.compatibility
            )
        except ConfigError as err:
            raise ValueError(err.message) from None
        return self

    @property
    def node_config(self) -> engine_config.NodeConfig:
        """The kubelet fields, parsed (validated when the settings were built)."""
        return self._node_config

    @property
    def state_path(self) -> Path:
        return self.state_dir / self.state_file

    @property
    def machine_source(self) -> Path | dict[str, Any]:
        """Where the topology comes from: a topology document, a topology file, or a sysfs root."""
        if self.topology_document is not None:
            return self.topology_document
        if self.topology_file is not None:
            return self.topology_file
        return self.sysfs_root if self.sysfs_root is not None else HOST_SYSFS

    def listen_address(self) -> tuple[str, int]:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"listen must be HOST:PORT, got {self.listen!r}")
        return host.strip("[]") or "0.0.0.0", int(port)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        document = config_file.read_mapping(path)
    except config_file.ConfigFileError as err:
        raise ConfigError(str(err)) from None
    base = path.resolve().parent
    values = _canonical_keys(_flatten_node_section(document))
    # relative paths in a file are relative to the file, wherever the enforcer is started from
    for name in _PATH_FIELDS:
        value = values.get(name)
        if isinstance(value, str) and not Path(value).is_absolute():
            values[name] = str(base / value)
    return values


def _flatten_node_section(document: dict[str, Any]) -> dict[str, Any]:
    """Lift ``node.{name,compatibility,kubelet,topologyFile,...}`` into settings fields."""
    node = document.pop("node", None)
    if node is None:
        return document
    if not isinstance(node, dict):
        raise ConfigError("config file: node must be a mapping (the scenario file's node section)")
    unknown = sorted(set(map(str, node)) - set(_NODE_SECTION))
    if unknown:
        raise ConfigError(
            f"config file: node: unknown fields: {', '.join(unknown)} (known: {', '.join(_NODE_SECTION)})"
        )
    for key, value in node.items():
        document[_NODE_SECTION[str(key)]] = value
    return document


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in EnforcerSettings.model_fields:
        value = env.get(ENV_PREFIX + name.upper())
        if value is None:
            continue
        if name in _STRUCTURED_FIELDS:
            try:
                found[name] = yaml.safe_load(value)
            except yaml.YAMLError as err:
                raise ConfigError(f"{ENV_PREFIX}{name.upper()} is not a JSON/YAML document: {err}") from None
        else:
            found[name] = value
    return found


def _canonical_keys(values: Mapping[str, Any]) -> dict[str, Any]:
    """Keys in camelCase (any capitalisation: ``clientCA``), snake_case or kebab-case, as field names."""
    by_spelling = {
        spelling.lower(): name
        for name, field in EnforcerSettings.model_fields.items()
        for spelling in (name, field.alias or name)
    }
    return {
        by_spelling.get(key.lower().replace("-", "_"), by_spelling.get(key.lower(), key)): value
        for key, value in values.items()
    }


def load(
    config_file: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> EnforcerSettings:
    """Defaults < ``config_file`` < ``env`` (``os.environ`` when None) < ``overrides`` (None values are skipped)."""
    merged: dict[str, Any] = {}
    if config_file is not None:
        merged.update(_read_file(config_file))
    merged.update(_from_env(os.environ if env is None else env))
    merged.update({k: v for k, v in _canonical_keys(overrides or {}).items() if v is not None})
    try:
        return EnforcerSettings.model_validate(merged)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise ConfigError(f"invalid enforcer settings: {problems}") from None
