"""Real containers (runc + busybox) pinned by the OCI hook before their first instruction.

The container's first (and only) process is ``busybox grep _allowed_list
/proc/self/status``: what it prints is the affinity it was born with.  The
machine has 2 CPUs; CPU 0 is reserved, CPU 1 the only one the enforcer can
hand out, so an exclusive container must print ``1`` and everything else ``0``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from hook_kit import HookNode, guaranteed, pod_level
from runc_kit import RuncRun, allowed_of, containerd_annotations, crio_annotations, hook_args, unique

pytestmark = pytest.mark.kernel

PINNED_EXCLUSIVE = {"Cpus_allowed_list": "1", "Mems_allowed_list": "0"}
NODE_SHARED = {"Cpus_allowed_list": "0", "Mems_allowed_list": "0"}
UID_KEY = "io.kubernetes.cri.sandbox-uid"
TYPE_KEY = "io.kubernetes.cri.container-type"
UNPINNED = {"Cpus_allowed_list": "0-1", "Mems_allowed_list": "0"}


def _start(node: HookNode, pod_uid: str, name: str, *, qos: str = "", **bundle_options: object) -> dict[str, str]:
    rt = node.runtime
    container_id = unique("ctr")
    options: dict[str, object] = {
        "annotations": containerd_annotations(pod_uid, name),
        "hook_args": hook_args(node.socket),
    }
    options.update(bundle_options)
    bundle = rt.bundle(container_id, cgroups_path=rt.cgroups_path(pod_uid, container_id, qos), **options)  # type: ignore[arg-type]
    result = rt.run(container_id, bundle)
    assert result.returncode == 0, result.stderr
    return result.allowed()


def test_exclusive_container_starts_on_its_exclusive_cpu(hook_node: HookNode) -> None:
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    assert _start(hook_node, uid, "main") == PINNED_EXCLUSIVE
    assert hook_node.metric("numaguard_enforcer_hook_requests_total", outcome="pinned", pool="exclusive") == 1


def test_pod_shared_pool_container_and_its_sandbox_start_in_the_pod_pool(hook_node: HookNode) -> None:
    uid = str(uuid.uuid4())
    hook_node.allocate(pod_level("web", uid))
    view = hook_node.running.service.allocation(uid)
    pool = json.loads(view.model_dump_json(by_alias=True))["podSharedPool"]["cpus"]
    assert pool == "1"
    sandbox = containerd_annotations(uid, "", kind="sandbox")
    assert _start(hook_node, uid, "", annotations=sandbox) == PINNED_EXCLUSIVE
    assert _start(hook_node, uid, "sidecar") == PINNED_EXCLUSIVE
    assert hook_node.metric("numaguard_enforcer_hook_requests_total", outcome="pinned", pool="pod-shared") == 1
    assert hook_node.metric("numaguard_enforcer_hook_requests_total", outcome="pinned", pool="pod-pool") == 1


def test_unknown_pod_gets_the_node_shared_pool_without_the_exclusive_cpu(hook_node: HookNode) -> None:
    hook_node.allocate(guaranteed("db", str(uuid.uuid4())))
    assert _start(hook_node, str(uuid.uuid4()), "app", qos="besteffort") == NODE_SHARED


def test_cri_o_annotations(hook_node: HookNode) -> None:
    """CRI-O's keys (the kubelet's labels it copies into the spec) identify the pod as well."""
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    assert _start(hook_node, uid, "main", annotations=crio_annotations(uid, "main")) == PINNED_EXCLUSIVE


def test_prestart_stage_pins_too(hook_node: HookNode) -> None:
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    assert _start(hook_node, uid, "main", hook_stage="prestart") == PINNED_EXCLUSIVE


def test_a_restarted_container_gets_the_same_cpus(hook_node: HookNode) -> None:
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    first = _start(hook_node, uid, "main")
    second = _start(hook_node, uid, "main")  # a new container id, as the kubelet's restart makes
    assert first == second == PINNED_EXCLUSIVE


def test_without_the_hook_a_container_starts_on_every_cpu(hook_node: HookNode) -> None:
    """Today's window: the runtime starts the process unpinned."""
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    assert _start(hook_node, uid, "main", hook_args=None) == UNPINNED


def test_enforcer_down_fail_open_starts_unpinned_then_is_repaired(hook_node: HookNode) -> None:
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    rt = hook_node.runtime
    container_id = unique("ctr")
    down = hook_node.socket.parent / "down.sock"  # no enforcer there: the hook spools next to it
    bundle = rt.bundle(
        container_id,
        annotations=containerd_annotations(uid, "main"),
        cgroups_path=rt.cgroups_path(uid, container_id),
        hook_args=hook_args(down),
        args=["/bin/sh", "-c", "grep _allowed_list /proc/self/status; exec sleep 60"],
    )
    started, pid = rt.run_detached(container_id, bundle)
    try:
        assert started.returncode == 0, started.stderr
        assert started.allowed() == UNPINNED
        assert (hook_node.socket.parent / "pending" / f"{container_id}.json").is_file()
        hooks = hook_node.running.hooks
        assert hooks is not None
        hooks.keeper.drain_spool()  # what the keeper does every second (and at start-up)
        assert allowed_of(pid) == PINNED_EXCLUSIVE
        assert not (hook_node.socket.parent / "pending" / f"{container_id}.json").exists()
        assert hook_node.metric("numaguard_enforcer_hook_fail_open_repairs_total", outcome="repaired") == 1
    finally:
        rt.delete(container_id)


def test_enforcer_down_fail_closed_refuses_the_container(hook_node: HookNode) -> None:
    uid = str(uuid.uuid4())
    result = _run_raw(hook_node, uid, hook_args(hook_node.socket.parent / "down.sock", failure_mode="fail-closed"))
    assert result.returncode != 0
    assert "Cpus_allowed_list" not in result.stdout  # the process never ran
    assert "EnforcerUnreachable" in result.stderr and "fail-closed" in result.stderr


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        ({UID_KEY: "u-1", TYPE_KEY: "bogus"}, "InvalidAnnotations"),
        ({UID_KEY: "../../etc", TYPE_KEY: "sandbox"}, "InvalidAnnotations"),
        ({"unrelated": "x"}, "NoPodAnnotations"),
    ],
)
def test_garbage_annotations_fail_open_and_fail_closed(
    hook_node: HookNode, annotations: dict[str, str], reason: str
) -> None:
    opened = _run_raw(hook_node, "", hook_args(hook_node.socket), annotations=annotations)
    assert opened.returncode == 0, opened.stderr
    assert opened.allowed() == UNPINNED
    closed = _run_raw(hook_node, "", hook_args(hook_node.socket, failure_mode="fail-closed"), annotations=annotations)
    assert closed.returncode != 0
    assert reason in closed.stderr


def _run_raw(node: HookNode, pod_uid: str, args: list[str], *, annotations: dict[str, str] | None = None) -> RuncRun:
    rt = node.runtime
    container_id = unique("ctr")
    uid = pod_uid or str(uuid.uuid4())
    bundle = rt.bundle(
        container_id,
        annotations=annotations if annotations is not None else containerd_annotations(uid, "main"),
        cgroups_path=rt.cgroups_path(uid, container_id),
        hook_args=args,
    )
    return rt.run(container_id, bundle)


def test_the_hook_script_runs_without_the_project_on_the_path(tmp_path: Path) -> None:
    """Isolated mode (-I) and a copy of the file alone: what a node without the package runs."""
    import shutil
    import subprocess
    import sys

    from runc_kit import HOOK_SCRIPT

    copy = tmp_path / "oci_hook.py"
    shutil.copy2(HOOK_SCRIPT, copy)
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(copy), "--socket", str(tmp_path / "none.sock")],
        input="{}",
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert done.returncode == 0
    assert "InvalidState" in done.stderr and "fail-open" in done.stderr
