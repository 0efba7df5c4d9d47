"""Foreign rewrites of a hooked container's cgroup are undone by the keeper, woken by inotify.

The kubelet (``cpuManagerPolicy: none``) rewrites ``cpu.cfs_quota_us`` at every
resize, systemd may reset a cpuset: here a separate process writes the file,
as they would.  The test waits on the keeper's own signal (an event set when it
re-applied values), never on the clock.
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from hook_kit import HookNode, guaranteed
from runc_kit import CGROUP_MOUNT, allowed_of, containerd_annotations, hook_args, remove_cgroup_tree, unique, unusable

from enforcer.cgroups import watch
from enforcer.cgroups.reconcile import CgroupTarget, ReconcileReport

pytestmark = pytest.mark.kernel


def _foreign_write(file: Path, value: str) -> None:
    subprocess.run(["sh", "-c", f"echo {value} > {file}"], check=True, timeout=30)


def test_inotify_sees_foreign_writes_to_cgroup_v1_files() -> None:
    """IN_MODIFY fires for a write(2) by another process; a removed cgroup sends nothing (the tick checks)."""
    reason = unusable()
    if reason is not None:
        pytest.skip(reason)
    name = unique()
    cpu_dir = CGROUP_MOUNT / "cpu" / name
    cpu_dir.mkdir()
    files = watch.FileWatch()
    try:
        assert files.add("c", [cpu_dir / "cpu.cfs_quota_us"]) == 1
        _foreign_write(cpu_dir / "cpu.cfs_quota_us", "50000")
        assert files.wait(10).changed == {"c"}
    finally:
        files.close()
        remove_cgroup_tree(name)


def test_a_foreign_rewrite_is_undone(hook_node: HookNode) -> None:
    hooks = hook_node.running.hooks
    assert hooks is not None and hooks.keeper.mode == "inotify"
    reapplied = threading.Event()
    program = hooks.programmer._program

    def observed(targets: Sequence[CgroupTarget]) -> ReconcileReport:
        report = program(targets)
        if report.applied:
            reapplied.set()
        return report

    hooks.programmer._program = observed
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    rt = hook_node.runtime
    container_id = unique("ctr")
    cgroups_path = rt.cgroups_path(uid, container_id)
    bundle = rt.bundle(
        container_id,
        annotations=containerd_annotations(uid, "main"),
        cgroups_path=cgroups_path,
        hook_args=hook_args(hook_node.socket),
        args=["/bin/sh", "-c", "grep _allowed_list /proc/self/status; exec sleep 60"],
    )
    started, pid = rt.run_detached(container_id, bundle)
    try:
        assert started.returncode == 0, started.stderr
        assert allowed_of(pid)["Cpus_allowed_list"] == "1"
        pod_cpuset = CGROUP_MOUNT / "cpuset" / cgroups_path.lstrip("/").rpartition("/")[0] / "cpuset.cpus"
        quota = CGROUP_MOUNT / "cpu" / cgroups_path.lstrip("/") / "cpu.cfs_quota_us"
        assert quota.read_text().strip() == "-1"  # exclusive: quota off
        # the kubelet rewrites the container's quota; something widens the pod's cpuset (v1 forbids a
        # container cpuset outside its pod's, so a foreign cpuset writer meets the pod cgroup first)
        for file, foreign, restored in ((quota, "50000", "-1"), (pod_cpuset, "0-1", "1")):
            reapplied.clear()
            _foreign_write(file, foreign)
            assert reapplied.wait(10), f"the keeper did not undo the rewrite of {file}"
            assert file.read_text().strip() == restored
        assert allowed_of(pid)["Cpus_allowed_list"] == "1"
        assert hook_node.metric("numaguard_enforcer_hook_reapplied_writes_total", trigger="rewrite") >= 2
    finally:
        rt.delete(container_id)


def test_the_poll_fallback_undoes_a_rewrite_too(tmp_path: Path) -> None:
    """``rewriteWatch: poll`` (no inotify): the keeper re-reads the hooked containers' files every 0.5 s."""
    reason = unusable()
    if reason is not None:
        pytest.skip(reason)
    from bench.bench_hook import Node

    node = Node(tmp_path, rewrite_watch="poll")
    try:
        hooks = node.running.hooks
        assert hooks is not None and hooks.keeper.mode == "poll"
        reapplied = threading.Event()
        program = hooks.programmer._program

        def observed(targets: Sequence[CgroupTarget]) -> ReconcileReport:
            report = program(targets)
            if report.applied:
                reapplied.set()
            return report

        hooks.programmer._program = observed
        container_id, cpus, _ = node.start(
            hooked=True, args=["/bin/sh", "-c", "grep _allowed /proc/self/status; exec sleep 60"], detach=True
        )
        assert cpus == "1"
        quota = CGROUP_MOUNT / "cpu" / node.rt.cgroups_path(node.uid, container_id).lstrip("/") / "cpu.cfs_quota_us"
        reapplied.clear()  # the hook's own programming set it
        _foreign_write(quota, "50000")
        assert reapplied.wait(10)
        assert quota.read_text().strip() == "-1"
    finally:
        node.close()


def test_a_hooked_container_follows_its_pods_allocation(hook_node: HookNode) -> None:
    """No hook runs on an allocation change: the keeper's once-a-second check moves the container."""
    hooks = hook_node.running.hooks
    assert hooks is not None
    moved = threading.Event()
    reapply = hooks.programmer.reapply

    def observed(entries: Sequence[object], *, trigger: str) -> ReconcileReport | None:
        report = reapply(entries, trigger=trigger)  # type: ignore[arg-type]
        if trigger == "change" and report is not None and report.applied:
            moved.set()
        return report

    hooks.programmer.reapply = observed  # type: ignore[method-assign]
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    rt = hook_node.runtime
    container_id = unique("ctr")
    bundle = rt.bundle(
        container_id,
        annotations=containerd_annotations(uid, "main"),
        cgroups_path=rt.cgroups_path(uid, container_id),
        hook_args=hook_args(hook_node.socket),
        args=["/bin/sh", "-c", "grep _allowed_list /proc/self/status; exec sleep 60"],
    )
    started, pid = rt.run_detached(container_id, bundle)
    try:
        assert started.returncode == 0, started.stderr
        assert allowed_of(pid)["Cpus_allowed_list"] == "1"
        hook_node.running.service.release(uid)  # the pod is no longer held: the node shared pool, now 0-1
        assert moved.wait(10)
        assert allowed_of(pid)["Cpus_allowed_list"] == "0-1"
    finally:
        rt.delete(container_id)


def test_a_restarted_enforcer_guards_the_running_hooked_containers(hook_node: HookNode, tmp_path: Path) -> None:
    from bench.runc_kit import enforcer_settings
    from enforcer.service import runtime as enforcer_runtime
    from enforcer.service.metrics import EnforcerMetrics

    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    rt = hook_node.runtime
    container_id = unique("ctr")
    cgroups_path = rt.cgroups_path(uid, container_id)
    bundle = rt.bundle(
        container_id,
        annotations=containerd_annotations(uid, "main"),
        cgroups_path=cgroups_path,
        hook_args=hook_args(hook_node.socket),
        args=["/bin/sh", "-c", "grep _allowed_list /proc/self/status; exec sleep 60"],
    )
    started, pid = rt.run_detached(container_id, bundle)
    again = None
    try:
        assert started.returncode == 0, started.stderr
        hook_node.running.stop()
        config = enforcer_settings(hook_node.socket.parent.parent, rt.cgroup_root)
        again = enforcer_runtime.start(config, EnforcerMetrics())
        assert again.hooks is not None
        entry = again.hooks.programmer.registry.get(cgroups_path)
        assert entry is not None and entry.request.container_id == container_id
        quota = CGROUP_MOUNT / "cpu" / cgroups_path.lstrip("/") / "cpu.cfs_quota_us"
        reapplied = threading.Event()
        program = again.hooks.programmer._program

        def observed(targets: Sequence[CgroupTarget]) -> ReconcileReport:
            report = program(targets)
            if report.applied:
                reapplied.set()
            return report

        again.hooks.programmer._program = observed
        _foreign_write(quota, "50000")
        assert reapplied.wait(10)
        assert quota.read_text().strip() == "-1" and allowed_of(pid)["Cpus_allowed_list"] == "1"
    finally:
        rt.delete(container_id)
        if again is not None:
            again.stop()
