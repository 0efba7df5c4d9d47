"""The runtime hook on real containers: pinning window, hook latency, and how long a foreign rewrite survives.

Run as root on a machine with runc, busybox and a writable cgroup v1 hierarchy (this one)::

    .venv/bin/python -m bench.bench_hook            # 200 starts per case, JSON on stdout
    .venv/bin/python -m bench --only hook           # the same figures in the one-command table

Measures, all in one run side by side (the machine is shared, so ratios and medians matter):

* **pinning window**: ``runc run`` of a container whose first process prints its own
  ``Cpus_allowed_list``; with the hook, the share of starts whose first instruction ran on exactly
  the allocation (CPU 1), against the same starts without the hook (today: the watch path pins later).
* **hook latency**: wall time of ``python3 -I oci_hook.py`` answering for a live container
  (interpreter start, state parse, socket round trip, the enforcer's cgroup writes and read-back),
  p50/p99; and its share of a ``runc run`` (start with hook minus start without, over start with).
* **rewrite survival**: a foreign process writes ``cpu.cfs_quota_us`` (as the kubelet does at every
  resize) or the pod's ``cpuset.cpus`` (as systemd may); time until the enforcer's value is back, for
  the inotify keeper, the 0.5 s poll fallback, and today's 30 s reconcile pass (watch path).
* **keeper CPU**: process CPU time per second with 20 hooked containers, idle, inotify vs poll.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.runc_kit import (
    CGROUP_MOUNT,
    HOOK_PYTHON,
    HOOK_SCRIPT,
    Runtime,
    containerd_annotations,
    enforcer_settings,
    guaranteed,
    hook_args,
    remove_pod_cgroup,
    unique,
    unusable,
)
from enforcer.cgroups.reconcile import CgroupTarget
from enforcer.hooks.protocol import HookRequest
from enforcer.hooks.registry import HookedContainer
from enforcer.service import requests
from enforcer.service import runtime as enforcer_runtime
from enforcer.service.metrics import EnforcerMetrics
from shared.cpuset import CPUSet

EXCLUSIVE = "1"


@dataclass(frozen=True)
class Effort:
    starts: int = 200
    hook_calls: int = 200
    rewrites: int = 20
    today_rewrites: int = 2
    cpu_seconds: float = 5.0
    cpu_containers: int = 20


QUICK = Effort(starts=20, hook_calls=20, rewrites=5, today_rewrites=0, cpu_seconds=1.0, cpu_containers=5)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Node:
    """A real enforcer (hook socket) plus a runc runtime, cleaned up on exit."""

    def __init__(self, work: Path, **settings: Any) -> None:
        self.work = work
        self.rt = Runtime(work=work / "bundles", cgroup_root=unique())
        (work / "bundles").mkdir(parents=True, exist_ok=True)
        self.config = enforcer_settings(work, self.rt.cgroup_root, **settings)
        self.metrics = EnforcerMetrics()
        self.running = enforcer_runtime.start(self.config, self.metrics)
        self.socket = self.config.hook_socket or work / "no-hook.sock"
        self.uid = str(uuid.uuid4())
        self.running.service.allocate(requests.pod_resources(guaranteed("bench", self.uid), pod_level_resources=True))

    def close(self) -> None:
        try:
            self.running.stop()
        finally:
            self.rt.cleanup()

    def start(self, *, hooked: bool, args: list[str] | None = None, detach: bool = False) -> tuple[str, str, int]:
        """(container id, first Cpus_allowed_list, pid or -1) of one ``runc run``."""
        container_id = unique("ctr")
        bundle = self.rt.bundle(
            container_id,
            annotations=containerd_annotations(self.uid, "main"),
            cgroups_path=self.rt.cgroups_path(self.uid, container_id),
            hook_args=hook_args(self.socket) if hooked else None,
            args=args,
        )
        if detach:
            run, pid = self.rt.run_detached(container_id, bundle)
        else:
            run, pid = self.rt.run(container_id, bundle), -1
            self.rt.containers.remove(container_id)  # runc run removed it already
        if run.returncode != 0:
            raise RuntimeError(f"runc run failed: {run.stderr.strip()}")
        return container_id, run.allowed().get("Cpus_allowed_list", ""), pid


def pinning(node: Node, effort: Effort) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for hooked in (False, True):
        pinned = 0
        seconds: list[float] = []
        for _ in range(effort.starts):
            remove_pod_cgroup(node.rt.cgroup_root, node.uid)  # each start makes its pod cgroup afresh
            started = time.perf_counter()
            _, cpus, _ = node.start(hooked=hooked)
            seconds.append(time.perf_counter() - started)
            pinned += cpus == EXCLUSIVE
        key = "hook" if hooked else "no_hook"
        out[key] = {"starts": effort.starts, "pinned": pinned, "start_p50_s": statistics.median(seconds)}
    with_hook, without = out["hook"]["start_p50_s"], out["no_hook"]["start_p50_s"]
    out["hook_share_of_start"] = max(0.0, with_hook - without) / with_hook
    return out


def hook_latency(node: Node, effort: Effort) -> dict[str, Any]:
    container_id, _, pid = node.start(
        hooked=True, args=["/bin/sh", "-c", "grep _allowed /proc/self/status; exec sleep 600"], detach=True
    )
    state = json.dumps(
        {"ociVersion": "1.0.2", "id": container_id, "pid": pid, "status": "created", "bundle": "/",
         "annotations": containerd_annotations(node.uid, "main")}
    )  # fmt: skip
    seconds: list[float] = []
    for _ in range(effort.hook_calls):
        started = time.perf_counter()
        done = subprocess.run(
            [HOOK_PYTHON, "-I", "-S", str(HOOK_SCRIPT), "--socket", str(node.socket), "--failure-mode", "fail-closed"],
            input=state, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        seconds.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"hook failed: {done.stderr.strip()}")
    interpreter: list[float] = []
    for _ in range(min(effort.hook_calls, 50)):
        started = time.perf_counter()
        subprocess.run([HOOK_PYTHON, "-I", "-S", "-c", "pass"], check=True, timeout=30)
        interpreter.append(time.perf_counter() - started)
    node.rt.delete(container_id)
    return {
        "calls": len(seconds),
        "p50_s": statistics.median(seconds),
        "p99_s": _pct(seconds, 0.99),
        "bare_interpreter_p50_s": statistics.median(interpreter),
    }


def _foreign_write(file: Path, value: str) -> None:
    subprocess.run(["sh", "-c", f"echo {value} > {file}"], check=True, timeout=30)


def _survival(file: Path, foreign: str, restored: str, limit: float) -> float:
    """Seconds from a foreign write until the file shows ``restored`` again (``limit`` if never)."""
    _foreign_write(file, foreign)
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        if file.read_text().strip() == restored:
            return time.perf_counter() - started
        time.sleep(0.002)  # measuring, not synchronising: 2 ms resolution
    return limit


def rewrites(node: Node, effort: Effort, *, label: str) -> dict[str, Any]:
    container_id, _, _ = node.start(
        hooked=True, args=["/bin/sh", "-c", "grep _allowed /proc/self/status; exec sleep 600"], detach=True
    )
    path = node.rt.cgroups_path(node.uid, container_id).lstrip("/")
    quota = CGROUP_MOUNT / "cpu" / path / "cpu.cfs_quota_us"
    pod_cpus = CGROUP_MOUNT / "cpuset" / path.rpartition("/")[0] / "cpuset.cpus"
    out: dict[str, Any] = {}
    for name, file, foreign, restored in (
        ("cpu.cfs_quota_us", quota, "50000", "-1"),
        ("pod cpuset.cpus", pod_cpus, "0-1", "1"),
    ):
        samples = [_survival(file, foreign, restored, 5.0) for _ in range(effort.rewrites)]
        out[name] = {"samples": len(samples), "median_s": statistics.median(samples), "max_s": max(samples)}
    node.rt.delete(container_id)
    return {label: out}


def today(work: Path, effort: Effort) -> dict[str, Any]:
    """Today's repair path: the pod watch reports the container id, the 30 s reconcile pass repairs drift."""
    if effort.today_rewrites == 0:
        return {}
    node = Node(work, reconcile_interval=30.0, hook_socket=None)
    try:
        container_id, _, _ = node.start(
            hooked=False, args=["/bin/sh", "-c", "grep _allowed /proc/self/status; exec sleep 600"], detach=True
        )
        node.running.service.observe_pod(node.uid, "Guaranteed", {"main": f"containerd://{container_id}"})
        node.running.service.reconciler.run_all("manual")
        path = node.rt.cgroups_path(node.uid, container_id).lstrip("/")
        quota = CGROUP_MOUNT / "cpu" / path / "cpu.cfs_quota_us"
        samples = [_survival(quota, "50000", "-1", 35.0) for _ in range(effort.today_rewrites)]
        node.rt.delete(container_id)
        return {
            "today_30s_reconcile": {
                "cpu.cfs_quota_us": {
                    "samples": len(samples),
                    "median_s": statistics.median(samples),
                    "max_s": max(samples),
                }
            }
        }
    finally:
        node.close()


def keeper_cpu(work: Path, effort: Effort, mode: str) -> float:
    """Process CPU seconds per wall second while the keeper guards ``cpu_containers`` idle cgroups."""
    node = Node(work, rewrite_watch=mode)
    try:
        hooks = node.running.hooks
        assert hooks is not None
        name = node.rt.cgroup_root
        for i in range(effort.cpu_containers):
            path = f"{name}/guard/c{i}"
            for controller in ("cpuset", "cpu", "memory"):
                for level in (name, f"{name}/guard", path):
                    directory = CGROUP_MOUNT / controller / level
                    if directory.is_dir():
                        continue
                    directory.mkdir()
                    if controller == "cpuset":  # a new v1 cpuset is empty: give it its parent's
                        (directory / "cpuset.cpus").write_text("0-1")
                        (directory / "cpuset.mems").write_text("0")
            target = CgroupTarget(path="/" + path, cpus=CPUSet([0, 1]), mems=(0,))
            entry = HookedContainer(
                "/" + path, HookRequest(f"c{i}", 1, node.uid, "main", "container", ""), "node-shared", (target,)
            )
            hooks.programmer.registry.put(entry)
            hooks.keeper.track(entry)
        time.sleep(1.5)  # let the keeper settle on the new entries before measuring
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        time.sleep(effort.cpu_seconds)
        after = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.perf_counter() - started
        return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / wall
    finally:
        node.close()


def run(effort: Effort) -> dict[str, Any]:
    reason = unusable()
    if reason is not None:
        return {"skipped": reason}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="numaguard-bench-hook-") as tmp:
        work = Path(tmp)
        node = Node(work / "inotify")
        try:
            results["pinning"] = pinning(node, effort)
            results["hook_latency"] = hook_latency(node, effort)
            results["rewrite_survival"] = rewrites(node, effort, label="inotify keeper")
        finally:
            node.close()
        poll = Node(work / "poll", rewrite_watch="poll")
        try:
            results["rewrite_survival"].update(rewrites(poll, effort, label="0.5 s poll keeper"))
        finally:
            poll.close()
        results["rewrite_survival"].update(today(work / "today", effort))
        results["keeper_cpu_per_s"] = {
            mode: keeper_cpu(work / f"cpu-{mode}", effort, mode) for mode in ("inotify", "poll")
        }
        results["keeper_cpu_containers"] = effort.cpu_containers
    return results


def table_rows(*, quick: bool) -> list[dict[str, str]]:
    results = run(QUICK if quick else Effort())
    if "skipped" in results:
        return [{"section": "runtime hook", "case": "skipped", "ours": results["skipped"], "reference": "-",
                 "ratio": "-", "check": "-"}]  # fmt: skip
    p = results["pinning"]
    h = results["hook_latency"]
    rows = [
        {
            "section": "runtime hook",
            "case": f"first instruction on the allocation ({p['hook']['starts']} runc starts)",
            "ours": f"{p['hook']['pinned']}/{p['hook']['starts']}",
            "reference": f"no hook: {p['no_hook']['pinned']}/{p['no_hook']['starts']}",
            "ratio": "-",
            "check": "ok" if p["hook"]["pinned"] == p["hook"]["starts"] else "FAIL",
        },
        {
            "section": "runtime hook",
            "case": "hook latency p50 / p99 (python3 -I included)",
            "ours": f"{h['p50_s'] * 1000:.1f} / {h['p99_s'] * 1000:.1f} ms",
            "reference": f"bare interpreter {h['bare_interpreter_p50_s'] * 1000:.1f} ms",
            "ratio": f"{p['hook_share_of_start']:.0%} of a runc start",
            "check": "-",
        },
    ]
    for label, fields in results["rewrite_survival"].items():
        for field, figures in fields.items():
            rows.append(
                {
                    "section": "runtime hook",
                    "case": f"foreign {field} rewrite survives ({label})",
                    "ours": f"{figures['median_s'] * 1000:.0f} ms (max {figures['max_s'] * 1000:.0f})",
                    "reference": "-",
                    "ratio": "-",
                    "check": "ok" if figures["max_s"] <= 1.0 or "30 s" in label else "FAIL",
                }
            )
    cpu = results["keeper_cpu_per_s"]
    rows.append(
        {
            "section": "runtime hook",
            "case": f"keeper CPU, {results['keeper_cpu_containers']} idle hooked containers",
            "ours": f"inotify {cpu['inotify'] * 100:.2f}% of a CPU",
            "reference": f"poll {cpu['poll'] * 100:.2f}%",
            "ratio": "-",
            "check": "-",
        }
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)
    print(json.dumps(run(QUICK if args.quick else Effort()), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
