"""Allocations become cgroup values: targets from engine views, and a cgroup v2 fixture tree driven for real."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from service_fixtures import make_settings, pod, uid_of, with_container_resources

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import v2
from enforcer.engine.view import ContainerView
from enforcer.service import reconciler, requests, runtime
from enforcer.service.metrics import EnforcerMetrics
from enforcer.service.node_service import NodeService
from shared.cpuset import CPUSet

GiB = 1024**3
DB_UID = uid_of("tightly-coupled-database")
DB_POD_PATH = f"kubepods.slice/kubepods-pod{DB_UID.replace('-', '_')}.slice"
DB_IDS = {"database": "containerd://db1", "metrics-exporter": "containerd://me1", "backup-agent": "containerd://ba1"}
WEB_UID = uid_of("burstable-web")
WEB_POD_PATH = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{WEB_UID.replace('-', '_')}.slice"


def scope(container_id: str) -> str:
    return f"cri-containerd-{container_id.removeprefix('containerd://')}.scope"


def make_cgroup(root: Path, path: str, *, cpus: str = "0-31", mems: str = "0-1") -> None:
    """A cgroup directory as the runtime leaves it: the files the v2 driver reads and writes, kernel defaults."""
    directory = root / path
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "cpuset.cpus": cpus,
        "cpuset.mems": mems,
        "cpu.max": "max 100000",
        "memory.max": "max",
        "memory.current": "0",
    }
    for name, content in files.items():
        (directory / name).write_text(content + "\n")


def read(root: Path, path: str, name: str) -> str:
    return (root / path / name).read_text().strip()


@dataclass
class Node:
    root: Path
    state_dir: Path
    running: runtime.RunningNode

    @property
    def service(self) -> NodeService:
        return self.running.service

    def admit(self, fixture: str) -> None:
        self.service.allocate(requests.pod_resources(pod(fixture), pod_level_resources=True))


def start_node(root: Path, state_dir: Path) -> runtime.RunningNode:
    """A running node whose reconciles happen only when a test asks (its worker thread stopped)."""
    settings = make_settings(state_dir, dry_run_cgroups=False)
    running = runtime.start(settings, EnforcerMetrics(), driver=v2.V2CgroupDriver(root, page_size=4096))
    running.service.reconciler.stop()
    return running


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    root = tmp_path / "cgroup"
    root.mkdir()
    running = start_node(root, tmp_path / "state")
    yield Node(root, tmp_path / "state", running)
    running.stop()


def database_cgroups(node: Node) -> None:
    make_cgroup(node.root, DB_POD_PATH)
    for container_id in DB_IDS.values():
        make_cgroup(node.root, f"{DB_POD_PATH}/{scope(container_id)}")
    node.service.observe_pod(DB_UID, "Guaranteed", DB_IDS)


# -- targets -------------------------------------------------------------------------------


def test_the_seed_database_pod_gets_the_kubelets_cgroup_values(node: Node) -> None:
    node.admit("tightly-coupled-database")
    node.service.observe_pod(DB_UID, "Guaranteed", DB_IDS)
    desired = node.service.desired_state([DB_UID])
    targets = {
        t.path: t
        for t in reconciler.pod_targets(
            desired.pods[0], layout=node.service.reconciler.layout, default_cpus=desired.default_cpus
        )
    }
    pod_target = targets[DB_POD_PATH]
    assert (str(pod_target.cpus), pod_target.mems) == ("1-4,17-20", (0,))
    assert pod_target.cpu_quota == cgdriver.CPUQuota(800_000, 100_000)
    assert pod_target.memory_limit == 16 * GiB
    database = targets[f"{DB_POD_PATH}/cri-containerd-db1.scope"]
    assert (str(database.cpus), database.mems, database.memory_limit) == ("1-3,17-19", (0,), 12 * GiB)
    assert database.cpu_quota == cgdriver.CPUQuota.unlimited()
    sidecar = targets[f"{DB_POD_PATH}/cri-containerd-me1.scope"]
    assert (str(sidecar.cpus), sidecar.cpu_quota, sidecar.memory_limit) == ("4,20", cgdriver.CPUQuota.unlimited(), None)


def test_cgroupfs_names_containerd_containers_by_bare_id() -> None:
    layout = reconciler.CgroupLayout(driver="cgroupfs", runtime="containerd", all_numa_nodes=(0, 1))
    desired = reconciler.DesiredPod(uid="1234", qos="BestEffort", container_ids={"job": "containerd://abc"})
    paths = [t.path for t in reconciler.pod_targets(desired, layout=layout, default_cpus=CPUSet([0, 1]))]
    assert paths == ["kubepods/besteffort/pod1234", "kubepods/besteffort/pod1234/abc"]


def test_a_container_with_an_empty_cpuset_leaves_its_cpus_unmanaged() -> None:
    view = ContainerView(
        name="c",
        kind="app",
        assignment="node_exclusive",
        memory_assignment="node_shared",
        cpus=CPUSet(),
        memory_numa_nodes=None,
        cfs_quota="container",
        cpu_limit_millis=1500,
        memory_limit_bytes=None,
    )
    layout = reconciler.CgroupLayout(driver="systemd", runtime="containerd", all_numa_nodes=(0, 1))
    target = reconciler.container_values(view, layout)
    assert target.cpus is None
    assert target.mems == (0, 1)
    assert target.cpu_quota == cgdriver.CPUQuota(150_000, 100_000)


# -- the v2 fixture tree, through the real driver --------------------------------------------


def test_reconcile_writes_the_allocation_into_the_pod_and_container_cgroups(node: Node) -> None:
    node.admit("tightly-coupled-database")
    database_cgroups(node)
    node.service.reconciler.run_requested()
    assert read(node.root, DB_POD_PATH, "cpuset.cpus") == "1-4,17-20"
    assert read(node.root, DB_POD_PATH, "cpu.max") == "800000 100000"
    assert read(node.root, DB_POD_PATH, "memory.max") == str(16 * GiB)
    database = f"{DB_POD_PATH}/cri-containerd-db1.scope"
    assert (read(node.root, database, "cpuset.cpus"), read(node.root, database, "cpuset.mems")) == ("1-3,17-19", "0")
    assert read(node.root, f"{DB_POD_PATH}/cri-containerd-ba1.scope", "cpuset.cpus") == "4,20"
    assert node.service.reconciler.status(DB_UID).in_sync  # type: ignore[union-attr]


def test_shared_containers_of_other_pods_leave_new_exclusive_cpus(node: Node) -> None:
    node.admit("burstable-web")
    make_cgroup(node.root, WEB_POD_PATH)
    make_cgroup(node.root, f"{WEB_POD_PATH}/cri-containerd-web1.scope")
    node.service.observe_pod(WEB_UID, "Burstable", {"web": "containerd://web1"})
    node.service.reconciler.run_requested()
    assert read(node.root, f"{WEB_POD_PATH}/cri-containerd-web1.scope", "cpuset.cpus") == "0-31"

    node.admit("tightly-coupled-database")
    database_cgroups(node)
    node.service.reconciler.run_requested()
    assert read(node.root, f"{WEB_POD_PATH}/cri-containerd-web1.scope", "cpuset.cpus") == "0,5-16,21-31"
    assert read(node.root, WEB_POD_PATH, "cpuset.cpus") == "0,5-16,21-31"


def test_a_pod_the_engine_does_not_manage_still_follows_the_default_set(node: Node) -> None:
    stranger = uid_of("unmanaged")
    path = f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{stranger.replace('-', '_')}.slice"
    make_cgroup(node.root, path)
    make_cgroup(node.root, f"{path}/cri-containerd-x1.scope")
    node.service.observe_pod(stranger, "BestEffort", {"job": "containerd://x1"})
    node.admit("tightly-coupled-database")
    node.service.reconciler.run_requested()
    assert read(node.root, f"{path}/cri-containerd-x1.scope", "cpuset.cpus") == "0,5-16,21-31"
    assert read(node.root, f"{path}/cri-containerd-x1.scope", "cpu.max") == "max 100000"  # only cpusets are ours


def test_drift_is_repaired_and_reported(node: Node) -> None:
    node.admit("tightly-coupled-database")
    database_cgroups(node)
    node.service.reconciler.run_requested()
    database = f"{DB_POD_PATH}/cri-containerd-db1.scope"
    (node.root / database / "cpuset.cpus").write_text("0-31\n")
    node.service.reconciler.run_all("periodic")
    assert read(node.root, database, "cpuset.cpus") == "1-3,17-19"
    status = node.service.reconciler.status(DB_UID)
    assert status is not None
    assert [(d.path, d.field, d.actual) for d in status.divergences] == [(database, "cpus", "0-31")]
    assert 'numaguard_enforcer_cgroup_divergences_total{field="cpus"}' in node.service.metrics_text().decode()


def test_containers_not_started_yet_are_pending_not_failures(node: Node) -> None:
    node.admit("tightly-coupled-database")
    make_cgroup(node.root, DB_POD_PATH)
    node.service.observe_pod(DB_UID, "Guaranteed", DB_IDS)
    node.service.reconciler.run_requested()
    status = node.service.reconciler.status(DB_UID)
    assert status is not None
    assert len(status.pending) == 3
    assert status.failures == []
    assert read(node.root, DB_POD_PATH, "cpuset.cpus") == "1-4,17-20"


def test_the_first_reconcile_after_start_reports_what_diverged_while_stopped(tmp_path: Path, node: Node) -> None:
    node.admit("tightly-coupled-database")
    database_cgroups(node)
    node.service.reconciler.run_requested()
    node.running.stop()
    (node.root / DB_POD_PATH / "cpu.max").write_text("max 100000\n")
    node.running = start_node(node.root, node.state_dir)
    # the restarted enforcer has not seen the containers yet: the pod cgroup is what it can name
    report = node.service.reconciler.startup_divergences
    assert [(d.path, d.field, d.actual, d.expected) for d in report] == [
        (DB_POD_PATH, "cpu_quota", "max 100000", "800000 100000")
    ]
    assert read(node.root, DB_POD_PATH, "cpu.max") == "800000 100000"
    assert node.service.allocations().startup_divergences[0].field == "cpu_quota"


def test_an_accepted_resize_reaches_the_cgroups(node: Node) -> None:
    raw = pod("burstable-web")
    node.admit("burstable-web")
    make_cgroup(node.root, WEB_POD_PATH)
    make_cgroup(node.root, f"{WEB_POD_PATH}/cri-containerd-web1.scope")
    node.service.observe_pod(WEB_UID, "Burstable", {"web": "containerd://web1"})
    node.service.reconciler.run_requested()
    container = f"{WEB_POD_PATH}/cri-containerd-web1.scope"
    assert read(node.root, container, "cpu.max") == "100000 100000"

    bigger = with_container_resources(raw, "web", "2", "1Gi")
    bigger["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "512Mi"}
    desired = requests.pod_resources(bigger, pod_level_resources=True, uid=WEB_UID)
    result = node.service.resize(WEB_UID, desired)
    assert result.status == "Accepted"
    assert node.service.allocation(WEB_UID).resize.state == "InProgress"  # type: ignore[union-attr]
    node.service.reconciler.run_requested()
    assert read(node.root, container, "cpu.max") == "200000 100000"
    assert read(node.root, container, "memory.max") == str(GiB)
    assert read(node.root, WEB_POD_PATH, "cpu.max") == "200000 100000"
    assert node.service.allocation(WEB_UID).resize is None


# -- incremental passes ----------------------------------------------------------------------


def test_a_change_pass_re_programs_the_changed_pod_and_the_ones_that_follow_the_default_set(node: Node) -> None:
    node.admit("burstable-web")  # node_shared: follows the default set
    node.service.reconciler.run_all()
    node.admit("tightly-coupled-database")  # exclusive CPUs: the default set shrinks

    first = node.service.reconciler.run_requested()
    assert first is not None
    assert any(DB_UID.replace("-", "_") in path for path in first.pending)
    assert any(WEB_UID.replace("-", "_") in path for path in first.pending)

    node.admit("ml-workload")
    second = node.service.reconciler.run_requested()
    assert second is not None
    examined = " ".join(second.pending)
    assert uid_of("ml-workload").replace("-", "_") in examined
    assert WEB_UID.replace("-", "_") in examined  # the default set shrank again
    assert DB_UID.replace("-", "_") not in examined  # its cpusets do not depend on the default set


def test_a_follower_is_known_without_a_full_pass_and_forgotten_on_release(node: Node) -> None:
    node.admit("burstable-web")
    assert node.service.reconciler.run_requested() is not None  # the change pass sees web: a follower now
    node.admit("tightly-coupled-database")
    report = node.service.reconciler.run_requested()
    assert report is not None and WEB_UID.replace("-", "_") in " ".join(report.pending)

    node.service.release(WEB_UID)
    node.admit("ml-workload")
    report = node.service.reconciler.run_requested()
    assert report is not None and WEB_UID.replace("-", "_") not in " ".join(report.pending)
