"""Real containers for the runtime-hook tests and bench: OCI bundles (busybox rootfs) and ``runc run``.

Everything a test creates carries a unique name (``numaguard-test-<pid>-<hex>``)
and is removed by :meth:`Runtime.cleanup`: containers with
``runc delete --force``, cgroups deepest first in every v1 hierarchy runc
touched.  The enforcer runs in-process (``enforcer.service.runtime.start``) over
this machine's real topology and the real cgroup v1 hierarchy, with the hook
socket in the test's tmp dir.

The kubelet is not here: the bundle is what containerd's CRI plugin would hand
runc -- its annotations (``DefaultCRIAnnotations``) and a ``linux.cgroupsPath``
in the kubelet's cgroupfs layout (``<cgroup root>/kubepods[/<qos>]/pod<uid>/<id>``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from enforcer.service import settings

ROOT = Path(__file__).resolve().parents[1]
HOOK_SCRIPT = ROOT / "numaguard_cli" / "oci_hook.py"
CGROUP_MOUNT = Path("/sys/fs/cgroup")
RUNC = shutil.which("runc")
BUSYBOX = shutil.which("busybox")
# The hook runs under the host's interpreter in production (install-hook: /usr/bin/python3 -I -S).
HOOK_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def unusable() -> str | None:
    """Why real containers cannot run here (None: they can)."""
    if RUNC is None:
        return "runc is not installed (scripts/install-test-deps.sh installs it: apt-get install -y runc)"
    if BUSYBOX is None:
        return "busybox is not installed (apt-get install -y busybox-static)"
    if os.geteuid() != 0:
        return "runc needs root here (cgroup v1 hierarchy and namespaces)"
    if not (CGROUP_MOUNT / "cpuset" / "cpuset.cpus").is_file() or not os.access(CGROUP_MOUNT / "cpuset", os.W_OK):
        return f"{CGROUP_MOUNT}/cpuset is not a writable cgroup v1 cpuset hierarchy"
    if os.cpu_count() is None or (os.cpu_count() or 0) < 2:
        return "needs at least 2 CPUs (reserve one, allocate the other)"
    return None


def unique(prefix: str = "numaguard-test") -> str:
    return f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}"


def remove_cgroup_tree(name: str) -> None:
    """``rmdir`` ``/<name>`` and everything below it in every hierarchy, deepest first."""
    for hierarchy in CGROUP_MOUNT.iterdir():
        top = hierarchy / name
        if not top.is_dir():
            continue
        directories = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for directory in [*directories, top]:
            with contextlib.suppress(OSError):
                directory.rmdir()


def remove_pod_cgroup(rt_root: str, pod_uid: str, qos: str = "") -> None:
    """Remove an (empty) pod cgroup, so the next start creates it afresh from kubepods as the kubelet would."""
    middle = f"/{qos}" if qos else ""
    for hierarchy in CGROUP_MOUNT.iterdir():
        with contextlib.suppress(OSError):
            (hierarchy / f"{rt_root}/kubepods{middle}/pod{pod_uid}").rmdir()


def containerd_annotations(pod_uid: str, name: str, kind: str = "container") -> dict[str, str]:
    """What containerd's CRI plugin puts on a container (pkg/cri/annotations, DefaultCRIAnnotations)."""
    annotations = {
        "io.kubernetes.cri.container-type": kind,
        "io.kubernetes.cri.sandbox-id": "sandbox-" + pod_uid[:8],
        "io.kubernetes.cri.sandbox-namespace": "default",
        "io.kubernetes.cri.sandbox-uid": pod_uid,
        "io.kubernetes.cri.sandbox-name": "pod-" + pod_uid[:8],
    }
    if kind == "container":
        annotations["io.kubernetes.cri.container-name"] = name
        annotations["io.kubernetes.cri.image-name"] = "docker.io/library/busybox:latest"
    return annotations


def crio_annotations(pod_uid: str, name: str, kind: str = "container") -> dict[str, str]:
    """What CRI-O puts on a container: the kubelet's labels copied in (SpecAddAnnotations) plus its own keys."""
    annotations = {"io.kubernetes.cri-o.ContainerType": kind, "io.kubernetes.pod.uid": pod_uid}
    if kind == "container":
        annotations["io.kubernetes.container.name"] = name
    return annotations


@dataclass
class RuncRun:
    returncode: int
    stdout: str
    stderr: str

    def allowed(self) -> dict[str, str]:
        """``Cpus_allowed_list`` / ``Mems_allowed_list`` as the container's first process printed them."""
        found: dict[str, str] = {}
        for line in self.stdout.splitlines():
            key, _, value = line.partition(":")
            if key in ("Cpus_allowed_list", "Mems_allowed_list"):
                found[key] = value.strip()
        return found


@dataclass
class Runtime:
    """Builds bundles and runs containers; remembers every container and cgroup root to clean up."""

    work: Path
    cgroup_root: str
    containers: list[str] = field(default_factory=list)
    _rootfs: Path | None = None

    def rootfs(self) -> Path:
        if self._rootfs is None:
            rootfs = self.work / "rootfs"
            for sub in ("bin", "proc", "dev", "sys", "tmp"):
                (rootfs / sub).mkdir(parents=True, exist_ok=True)
            assert BUSYBOX is not None
            shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
            (rootfs / "bin" / "sh").symlink_to("busybox")
            self._rootfs = rootfs
        return self._rootfs

    def cgroups_path(self, pod_uid: str, container_id: str, qos: str = "") -> str:
        """The kubelet's cgroupfs layout under this test's own cgroup root."""
        middle = f"/{qos}" if qos else ""
        return f"/{self.cgroup_root}/kubepods{middle}/pod{pod_uid}/{container_id}"

    def bundle(
        self,
        container_id: str,
        *,
        annotations: Mapping[str, str],
        cgroups_path: str,
        hook_args: list[str] | None,
        args: list[str] | None = None,
        hook_stage: str = "createRuntime",
        hooks: dict[str, Any] | None = None,
    ) -> Path:
        bundle = self.work / container_id
        bundle.mkdir()
        spec: dict[str, Any] = {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False,
                "user": {"uid": 0, "gid": 0},
                "args": args or ["/bin/busybox", "grep", "_allowed_list", "/proc/self/status"],
                "env": ["PATH=/bin"],
                "cwd": "/",
                "noNewPrivileges": True,
            },
            "root": {"path": str(self.rootfs()), "readonly": True},
            "hostname": "numaguard-test",
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "linux": {
                "cgroupsPath": cgroups_path,
                "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
                "resources": {"devices": [{"allow": False, "access": "rwm"}]},
                "maskedPaths": ["/proc/kcore", "/proc/keys"],
            },
        }
        spec["annotations"] = dict(annotations)  # runc hands them to the hook in the state, too
        if hooks is not None:
            spec["hooks"] = hooks
        elif hook_args is not None:
            spec["hooks"] = {hook_stage: [{"path": HOOK_PYTHON, "args": [HOOK_PYTHON, *hook_args], "timeout": 10}]}
        (bundle / "config.json").write_text(json.dumps(spec))
        return bundle

    def run(self, container_id: str, bundle: Path) -> RuncRun:
        """``runc run`` in the foreground: the container's output, then it is gone."""
        assert RUNC is not None
        self.containers.append(container_id)
        done = subprocess.run(
            [RUNC, "run", "--bundle", str(bundle), container_id],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        return RuncRun(done.returncode, done.stdout, done.stderr)

    def run_detached(self, container_id: str, bundle: Path, *, lines: int = 2) -> tuple[RuncRun, int]:
        """``runc run -d``: the first ``lines`` lines the container printed (read from a FIFO) and its host pid."""
        assert RUNC is not None
        self.containers.append(container_id)
        fifo = self.work / f"{container_id}.out"
        os.mkfifo(fifo)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        writer = os.open(fifo, os.O_WRONLY)
        errors = self.work / f"{container_id}.err"
        try:
            # the container keeps the stdio it inherits: files, never a pipe this call would wait on
            with open(errors, "w") as err_file:
                done = subprocess.run(
                    [RUNC, "run", "--detach", "--bundle", str(bundle), container_id],
                    stdout=writer,
                    stderr=err_file,
                    stdin=subprocess.DEVNULL,
                    timeout=60,
                )
        finally:
            os.close(writer)
        output = b""
        try:
            give_up = time.monotonic() + 30
            while done.returncode == 0 and output.count(b"\n") < lines and time.monotonic() < give_up:
                ready, _, _ = select.select([reader], [], [], give_up - time.monotonic())
                if not ready:
                    break
                chunk = os.read(reader, 4096)
                if not chunk:
                    break
                output += chunk
        finally:
            os.close(reader)
        pid = self.pid(container_id) if done.returncode == 0 else -1
        return RuncRun(done.returncode, output.decode(), errors.read_text()), pid

    def pid(self, container_id: str) -> int:
        assert RUNC is not None
        state = subprocess.run([RUNC, "state", container_id], capture_output=True, text=True, timeout=30, check=True)
        return int(json.loads(state.stdout)["pid"])

    def delete(self, container_id: str) -> None:
        assert RUNC is not None
        subprocess.run(
            [RUNC, "delete", "--force", container_id], capture_output=True, timeout=30, stdin=subprocess.DEVNULL
        )

    def cleanup(self) -> None:
        for container_id in self.containers:
            self.delete(container_id)
        remove_cgroup_tree(self.cgroup_root)


def allowed_of(pid: int) -> dict[str, str]:
    """A host process's ``Cpus_allowed_list`` / ``Mems_allowed_list``."""
    found: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Cpus_allowed_list", "Mems_allowed_list"):
            found[key] = value.strip()
    return found


def hook_args(socket: Path, *, failure_mode: str = "fail-open", deadline: float = 2.0) -> list[str]:
    mode = ["--failure-mode", failure_mode]
    return ["-I", "-S", str(HOOK_SCRIPT), "--socket", str(socket), "--deadline", str(deadline), *mode]


# The 2-CPU machine: CPU 0 reserved, CPU 1 the only one to allocate; pod-level managers on.
KUBELET: dict[str, Any] = {
    "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
    "cpuManagerPolicy": "static",
    "reservedSystemCPUs": "0",
    "topologyManagerPolicy": "single-numa-node",
    "topologyManagerScope": "pod",
}


def enforcer_settings(tmp: Path, cgroup_root: str, **extra: Any) -> settings.EnforcerSettings:
    """A standalone enforcer on this machine's topology and real cgroup v1 hierarchy, hook socket under ``tmp``."""
    overrides: dict[str, Any] = {
        "node_name": "hook-test-node",
        "kubelet": KUBELET,
        "state_dir": str(tmp / "state"),
        "cgroup_version": "v1",
        "cgroup_driver": "cgroupfs",
        "kubelet_cgroup_root": "/" + cgroup_root,
        "container_runtime": "containerd",
        "standalone": True,
        "reconcile_interval": 0,
        "hook_socket": str(tmp / "run" / "hook.sock"),
        "kubelet_config_check": False,
    }
    overrides.update(extra)
    return settings.load(None, env={}, overrides=overrides)


def guaranteed(name: str, uid: str, cpus: str = "1", memory: str = "64Mi") -> dict[str, Any]:
    resources = {"requests": {"cpu": cpus, "memory": memory}, "limits": {"cpu": cpus, "memory": memory}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


def pod_level(name: str, uid: str, cpus: str = "1", memory: str = "64Mi") -> dict[str, Any]:
    """A pod with pod-level resources only: its container runs in the pod shared pool."""
    resources = {"requests": {"cpu": cpus, "memory": memory}, "limits": {"cpu": cpus, "memory": memory}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"resources": resources, "containers": [{"name": "sidecar", "image": "busybox"}]},
    }
