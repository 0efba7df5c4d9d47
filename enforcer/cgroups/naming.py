"""The kubelet's cgroup names for pods and containers, for both cgroup drivers and both CRI runtimes.

Pure functions, no I/O.  A cgroup *name* is the kubelet's ``CgroupName``: a
tuple of components such as ``("kubepods", "burstable", "pod<uid>")``
(pkg/kubelet/cm/cgroup_manager_linux.go, ``NewCgroupName``).  The QoS parents
come from qos_container_manager_linux.go: Guaranteed pods sit directly under
``kubepods``; Burstable and BestEffort pods under ``kubepods/burstable`` and
``kubepods/besteffort`` (pod_container_manager_linux.go, ``GetPodContainerName``).

A name becomes a *path* (what the drivers take) per cgroup driver:

* cgroupfs: ``/`` + components joined by ``/`` (``CgroupName.ToCgroupfs``);
* systemd: components with ``-`` escaped to ``_``, joined by ``-``, suffixed
  ``.slice`` and expanded to its ancestors (``CgroupName.ToSystemd`` +
  libcontainer ``ExpandSlice``): ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod1234_abcd.slice``.

Container cgroups are named by the runtime, not the kubelet:

=============  ==================================  ==================================
runtime        cgroupfs driver                     systemd driver
=============  ==================================  ==================================
containerd     ``<pod path>/<id>``                 ``<pod slice>/cri-containerd-<id>.scope``
cri-o          ``<pod path>/crio-<id>``            ``<pod slice>/crio-<id>.scope``
=============  ==================================  ==================================

(containerd ``getCgroupsPath``; cri-o ``internal/config/cgmgr``.)
Must not: look at the filesystem to guess a driver or runtime; callers pass them.
"""

from __future__ import annotations

from typing import Final, Literal

from enforcer.cgroups import errors
from shared.resources import QOSClass

CgroupDriverName = Literal["cgroupfs", "systemd"]
RuntimeName = Literal["containerd", "cri-o"]
CgroupName = tuple[str, ...]

KUBEPODS: Final = "kubepods"
POD_PREFIX: Final = "pod"
SYSTEMD_SLICE_SUFFIX: Final = ".slice"
SYSTEMD_SCOPE_SUFFIX: Final = ".scope"

_QOS_PARENT: Final[dict[QOSClass, CgroupName]] = {
    "Guaranteed": (KUBEPODS,),
    "Burstable": (KUBEPODS, "burstable"),
    "BestEffort": (KUBEPODS, "besteffort"),
}

# CRI container status ids carry the runtime as a URL scheme ("containerd://<id>").
_RUNTIME_SCHEMES: Final[dict[str, RuntimeName]] = {"containerd": "containerd", "cri-o": "cri-o"}

_SYSTEMD_SCOPE_PREFIX: Final[dict[RuntimeName, str]] = {"containerd": "cri-containerd", "cri-o": "crio"}
_CGROUPFS_PREFIX: Final[dict[RuntimeName, str]] = {"containerd": "", "cri-o": "crio-"}


def _check_component(component: str) -> None:
    # The kubelet panics on "/" and "_" (NewCgroupName): "_" is forbidden so the
    # systemd escaping "-" -> "_" stays reversible.
    if not component or component in (".", ".."):
        raise errors.CgroupNameError(component, "cgroup name components are non-empty and not '.' or '..'")
    if "/" in component or "_" in component or "\x00" in component:
        raise errors.CgroupNameError(component, "cgroup name components may not contain '/', '_' or NUL")


def qos_cgroup_name(qos: QOSClass, *, cgroup_root: CgroupName = ()) -> CgroupName:
    """The QoS-level cgroup a pod of class ``qos`` lives under (``--cgroups-per-qos``, the default)."""
    for component in cgroup_root:
        _check_component(component)
    return cgroup_root + _QOS_PARENT[qos]


def pod_cgroup_name(qos: QOSClass, pod_uid: str, *, cgroup_root: CgroupName = ()) -> CgroupName:
    """``NewCgroupName(<qos parent>, "pod" + uid)``."""
    _check_component(pod_uid)
    return qos_cgroup_name(qos, cgroup_root=cgroup_root) + (POD_PREFIX + pod_uid,)


def to_cgroupfs(name: CgroupName) -> str:
    """``CgroupName.ToCgroupfs``: ``("kubepods", "podX")`` -> ``"/kubepods/podX"``."""
    return "/" + "/".join(name)


def to_systemd(name: CgroupName) -> str:
    """``CgroupName.ToSystemd``: each ancestor becomes a ``.slice`` whose name repeats its parents'."""
    if not name or name == ("",):
        return "/"
    path = ""
    prefix = ""
    for component in name:
        escaped = component.replace("-", "_")
        path += "/" + prefix + escaped + SYSTEMD_SLICE_SUFFIX
        prefix += escaped + "-"
    return path


def to_path(name: CgroupName, driver: CgroupDriverName) -> str:
    """The cgroup path (relative to the hierarchy root, leading ``/``) for ``name`` under ``driver``."""
    if driver == "cgroupfs":
        return to_cgroupfs(name)
    return to_systemd(name)


def parse_cgroup_root(text: str, driver: CgroupDriverName) -> CgroupName:
    """The kubelet's ``--cgroup-root`` flag as a name (``"/"`` -> ``()``).

    With the systemd driver the flag is a slice (``"custom.slice"`` or its
    expanded path); its last element holds the whole name (``ParseSystemdToCgroupName``).
    """
    if driver == "cgroupfs":
        return tuple(part for part in text.split("/") if part)
    base = text.rstrip("/").rpartition("/")[2]
    if base in ("", "-" + SYSTEMD_SLICE_SUFFIX):
        return ()
    if not base.endswith(SYSTEMD_SLICE_SUFFIX):
        raise errors.CgroupNameError(text, "a systemd cgroup root is a .slice")
    return tuple(part.replace("_", "-") for part in base.removesuffix(SYSTEMD_SLICE_SUFFIX).split("-"))


def pod_cgroup_path(qos: QOSClass, pod_uid: str, *, driver: CgroupDriverName, cgroup_root: CgroupName = ()) -> str:
    """The pod cgroup path: ``/kubepods/burstable/pod<uid>`` or its systemd form."""
    return to_path(pod_cgroup_name(qos, pod_uid, cgroup_root=cgroup_root), driver)


def split_container_id(container_id: str) -> tuple[RuntimeName | None, str]:
    """``"containerd://abc"`` -> ``("containerd", "abc")``; a bare id gives ``(None, id)``."""
    scheme, separator, rest = container_id.partition("://")
    if not separator:
        return None, container_id
    runtime = _RUNTIME_SCHEMES.get(scheme)
    if runtime is None:
        supported = ", ".join(_RUNTIME_SCHEMES)
        raise errors.CgroupNameError(container_id, f"unknown container runtime {scheme!r} (supported: {supported})")
    return runtime, rest


def container_cgroup_leaf(container_id: str, *, driver: CgroupDriverName, runtime: RuntimeName | None = None) -> str:
    """The last path element of a container's cgroup (``cri-containerd-<id>.scope``, ``<id>``, ...).

    ``container_id`` may carry its runtime scheme (``containerd://<id>``, as
    pod status reports it); otherwise ``runtime`` is required.
    """
    scheme_runtime, bare_id = split_container_id(container_id)
    if scheme_runtime is not None and runtime is not None and scheme_runtime != runtime:
        raise errors.CgroupNameError(container_id, f"id is from {scheme_runtime}, not {runtime}")
    chosen = scheme_runtime or runtime
    if chosen is None:
        raise errors.CgroupNameError(container_id, "no runtime: pass runtime= or a 'containerd://' / 'cri-o://' id")
    if not bare_id or "/" in bare_id or bare_id in (".", "..") or "\x00" in bare_id:
        raise errors.CgroupNameError(container_id, "container ids are non-empty and contain no '/'")
    if driver == "systemd":
        return f"{_SYSTEMD_SCOPE_PREFIX[chosen]}-{bare_id}{SYSTEMD_SCOPE_SUFFIX}"
    return _CGROUPFS_PREFIX[chosen] + bare_id


def container_cgroup_path(
    pod_path: str, container_id: str, *, driver: CgroupDriverName, runtime: RuntimeName | None = None
) -> str:
    """``pod_path`` (from :func:`pod_cgroup_path`) joined with the runtime's container leaf."""
    leaf = container_cgroup_leaf(container_id, driver=driver, runtime=runtime)
    return pod_path.rstrip("/") + "/" + leaf
