"""Refuse to run beside a kubelet that manages the same resources, or reserves different ones.

The enforcer replaces the kubelet's CPU, Memory and Topology Managers; with any
of them active the kubelet would pin containers itself (and undo the
enforcer's writes at every container start and resize).  And the enforcer's
allocatable CPUs and memory are computed from the reservations it was given:
if the kubelet reserves something else, the two disagree about what is free.
So at start-up the enforcer reads the kubelet's own configuration file
(``/var/lib/kubelet/config.yaml``, or ``kubeletConfigFile``) and refuses, naming
each offending field, when

* ``cpuManagerPolicy`` is not ``none``, ``memoryManagerPolicy`` not ``None``,
  ``topologyManagerPolicy`` not ``none`` (the KubeletConfiguration defaults);
* ``reservedSystemCPUs``, ``kubeReserved``/``systemReserved`` (cpu, memory) or
  ``evictionHard["memory.available"]`` differ from the enforcer's ``kubelet``
  section (they make the node's allocatable, which both must agree on;
  ``reservedMemory`` only means something to the kubelet's Static memory
  manager, which is off);
* ``cgroupDriver`` differs from the enforcer's ``cgroupDriver``.

No file at the default path (off-node runs, tests) is logged and skipped; an
explicitly given path that cannot be read is an error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from enforcer.engine import config as engine_config
from enforcer.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_KUBELET_CONFIG: Final = Path("/var/lib/kubelet/config.yaml")
_MANAGERS: Final = (("cpuManagerPolicy", "none"), ("memoryManagerPolicy", "None"), ("topologyManagerPolicy", "none"))
_RESERVED_RESOURCES: Final = ("cpu", "memory")


def load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"kubelet config {path}: cannot read: {err.strerror or err}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"kubelet config {path}: does not parse: {err}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(f"kubelet config {path}: expected a KubeletConfiguration mapping")
    return document


def _reservations(raw: Mapping[str, Any], where: str) -> engine_config.NodeConfig:
    subset: dict[str, Any] = {}
    if "reservedSystemCPUs" in raw:
        subset["reservedSystemCPUs"] = raw["reservedSystemCPUs"]
    for key in ("kubeReserved", "systemReserved"):
        value = raw.get(key)
        if isinstance(value, Mapping):
            subset[key] = {k: v for k, v in value.items() if k in _RESERVED_RESOURCES}
        elif value is not None:
            subset[key] = value
    eviction = raw.get("evictionHard")
    if isinstance(eviction, Mapping) and "memory.available" in eviction:
        subset["evictionHard"] = {"memory.available": eviction["memory.available"]}
    try:
        return engine_config.from_kubelet(subset)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err.message}") from None


def problems(
    kubelet: Mapping[str, Any], enforcer: engine_config.NodeConfig, *, cgroup_driver: str, where: str
) -> list[str]:
    """Every clash between the kubelet's file and the enforcer's settings, each naming the field."""
    found: list[str] = []
    for name, off in _MANAGERS:
        value = kubelet.get(name, off)
        if not isinstance(value, str) or value.lower() != off.lower():
            found.append(
                f"{where}: {name} is {value!r}; the kubelet's own manager must be off ({off!r}) on a numaguard node"
            )
    real = _reservations(kubelet, where)
    pairs = (
        ("reservedSystemCPUs", str(real.reserved_system_cpus or ""), str(enforcer.reserved_system_cpus or "")),
        ("kubeReserved", _pick(real.kube_reserved), _pick(enforcer.kube_reserved)),
        ("systemReserved", _pick(real.system_reserved), _pick(enforcer.system_reserved)),
        ("evictionHard.memory.available", str(real.eviction_hard_memory), str(enforcer.eviction_hard_memory)),
    )
    for name, theirs, ours in pairs:
        if theirs != ours:
            found.append(f"{where}: {name} is {theirs or 'unset'!s} but the enforcer's is {ours or 'unset'!s}")
    driver = kubelet.get("cgroupDriver", "cgroupfs")
    if driver != cgroup_driver:
        found.append(f"{where}: cgroupDriver is {driver!r} but the enforcer's cgroupDriver is {cgroup_driver!r}")
    return found


def _pick(values: Mapping[str, int]) -> str:
    return ",".join(f"{k}={values[k]}" for k in _RESERVED_RESOURCES if values.get(k))


def check(
    path: Path | None, enforcer: engine_config.NodeConfig, *, cgroup_driver: str, default: Path = DEFAULT_KUBELET_CONFIG
) -> Path | None:
    """Raise ConfigError listing every clash; returns the file checked (None: no file at the default path)."""
    chosen = path if path is not None else default
    if path is None and not chosen.exists():
        log.info("no kubelet config file: the kubelet's managers are not checked", extra={"path": str(chosen)})
        return None
    issues = problems(load(chosen), enforcer, cgroup_driver=cgroup_driver, where=f"kubelet config {chosen}")
    if issues:
        raise ConfigError("refusing to run: " + "; ".join(issues))
    return chosen
