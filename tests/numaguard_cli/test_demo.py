"""``numaguard demo``: the live demo end to end (in process, loopback only), and its data helpers.

The full runs use ``--topology bundled`` so the CPUs asserted are the seed
article's on any machine; the machine choice itself is tested against sysfs
trees written to a temp dir.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import io
import json
import re
import shutil
import socket
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi import FastAPI

from numaguard_cli import demo, demo_steps, main
from numaguard_cli.demo_steps import DemoError

REPO = Path(__file__).resolve().parents[2]
SYSFS_FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
BUNDLED_SYSFS = REPO / "enforcer" / "topology" / "fixtures"
URL = re.compile(r"https://127\.0\.0\.1:(\d+)")


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    @property
    def ports(self) -> set[int]:
        return {int(port) for port in URL.findall(self.out)}

    @property
    def workdir(self) -> Path:
        found = re.search(r"^(?:removed|kept)\s+(\S+)", self.out, re.MULTILINE)
        assert found, self.out
        return Path(found.group(1))


def run_demo(*args: str) -> Run:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main.main(["demo", *args])
    return Run(code, out.getvalue(), err.getvalue())


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def server_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("uvicorn-")]


def row(*cells: str) -> re.Pattern[str]:
    """A table row with these cells separated by column padding."""
    return re.compile(r"^\s+" + r"\s+".join(re.escape(c) for c in cells) + r"\s*$", re.MULTILINE)


@pytest.fixture(scope="module")
def bundled_run() -> Run:
    return run_demo("--topology", "bundled")


# -- the live demo ------------------------------------------------------------------------------------------


def test_the_demo_succeeds_and_says_which_topology_it_chose(bundled_run: Run) -> None:
    assert bundled_run.code == 0, bundled_run.err
    assert "machine   bundled topology dual-socket-ht-32: 2 sockets, 16 cores, 32 CPUs" in bundled_run.out
    assert "(asked for with --topology bundled)" in bundled_run.out
    assert bundled_run.err == ""


def test_the_create_is_planned_and_the_binding_records_the_allocation(bundled_run: Run) -> None:
    out = bundled_run.out
    assert "/mutate: allowed, patch sets numaguard.io/plan; /validate: allowed" in out
    assert "plan     pod scope; Guaranteed; aligned 8 CPUs + 16Gi on 1 NUMA node; pod shared pool 2 CPUs + 4Gi" in out
    assert row("database", "app", "pod_exclusive x6", "pod_exclusive 12Gi").search(out)
    assert (
        "BINDING  to node-a: allowed, patch sets numaguard.io/allocation, numaguard.io/node, numaguard.io/spec-hash"
        in out
    )


@pytest.mark.parametrize(
    "cells",
    [
        ("database", "pod_exclusive", "1-3,17-19", "0", "pod_exclusive", "0", "none"),
        ("metrics-exporter", "pod_shared", "4,20", "0", "pod_shared", "0", "pod"),
        ("backup-agent", "pod_shared", "4,20", "0", "pod_shared", "0", "pod"),
        ("ml-training", "node_exclusive", "1-2,17", "0", "node_exclusive", "0", "none"),
    ],
    ids=["database", "metrics-exporter", "backup-agent", "ml-training"],
)
def test_each_seed_container_gets_the_kubelets_cpus_numa_node_assignment_and_quota_level(
    bundled_run: Run, cells: tuple[str, ...]
) -> None:
    assert row(*cells).search(bundled_run.out), bundled_run.out


def test_the_seed_allocations_match_the_kubelet_answers_recorded_in_the_scenarios(bundled_run: Run) -> None:
    assert bundled_run.out.count("same CPUs, assignments and CFS quota levels as the kubelet") == 2
    assert "DIFFERS" not in bundled_run.out
    assert bundled_run.out.count("the same allocation, cgroups in sync") == 2


def test_the_dry_run_writer_shows_each_containers_cpuset(bundled_run: Run) -> None:
    assert row("database", "cpuset.cpus=1-3,17-19  cpuset.mems=0  memory.max=12Gi").search(bundled_run.out)
    assert row("ml-training", "cpuset.cpus=1-2,17  cpuset.mems=0  memory.max=6Gi").search(bundled_run.out)


def test_a_pod_wider_than_a_numa_node_is_refused_at_binding_and_leaves_no_trace(bundled_run: Run) -> None:
    out = bundled_run.out
    assert "warning  the pod needs 2 NUMA nodes for 20 CPUs and 8Gi: single-numa-node nodes will refuse it" in out
    assert "BINDING  to node-a: DENIED 403 TopologyAffinityError: node node-a cannot admit pod" in out
    assert "GET /allocations: 1 pod held; the refusal left no trace" in out


def test_the_resize_through_pods_resize_widens_the_slice_and_keeps_the_promised_cpus(bundled_run: Run) -> None:
    out = bundled_run.out
    assert "database cpu 6 -> 8, pod cpu 8 -> 10" in out
    assert "RESIZE   /mutate: allowed; /validate: allowed" in out
    assert row("database", "pod_exclusive", "1-3,17-19", "1-4,17-20").search(out)
    assert "database keeps its CPUs 1-3,17-19" in out


def test_everything_is_stopped_and_removed_afterwards(bundled_run: Run) -> None:
    assert len(bundled_run.ports) == 4  # an enforcer and a webhook per act
    assert not [port for port in bundled_run.ports if listening(port)]
    assert server_threads() == []
    assert not bundled_run.workdir.exists()
    assert bundled_run.out.count("(ports closed)") == 2


def test_keep_leaves_the_certificates_and_state_and_says_where(tmp_path: Path) -> None:
    result = run_demo("--topology", "bundled", "--keep")
    try:
        assert result.code == 0, result.err
        assert (result.workdir / "tls" / "ca.crt").is_file()
        assert (result.workdir / "node-a").is_dir()
        assert not [port for port in result.ports if listening(port)]
    finally:
        shutil.rmtree(result.workdir, ignore_errors=True)


def test_an_interrupt_stops_the_servers_removes_the_temp_dir_and_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(demo.Demo, "_resize", interrupted)
    result = run_demo("--topology", "bundled")
    assert result.code == 130
    assert "interrupted" in result.err
    assert "stopped   enforcer node-a" in result.out
    assert not [port for port in result.ports if listening(port)]
    assert not result.workdir.exists()
    assert server_threads() == []


def test_a_server_that_cannot_start_fails_the_demo_with_a_message_and_stops_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @contextlib.asynccontextmanager
    async def failing(_: FastAPI) -> AsyncIterator[None]:
        raise RuntimeError("no webhook today")
        yield  # pragma: no cover

    monkeypatch.setattr(demo.webhook_main, "create_app", lambda *_, **__: FastAPI(lifespan=failing))
    result = run_demo("--topology", "bundled")
    assert result.code == 1
    assert "numaguard demo: the webhook of node-a did not start" in result.err
    assert "stopped   enforcer node-a" in result.out
    assert not [port for port in result.ports if listening(port)]
    assert not result.workdir.exists()
    assert server_threads() == []


def test_plan_only_runs_the_offline_simulator_without_servers() -> None:
    result = run_demo("--plan-only")
    assert result.code == 0, result.err
    assert "== seed-1-tightly-coupled-database.yaml" in result.out
    assert "1-3,17-19" in result.out
    assert result.ports == set()


# -- the machine ----------------------------------------------------------------------------------------------


def _load_make_tree() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_sysfs_make_tree", SYSFS_FIXTURES / "make_tree.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def seeds() -> list[demo_steps.Scenario]:
    return [demo_steps.load_scenario(name) for name in demo_steps.SEED_FILES]


@pytest.fixture
def large_host(tmp_path: Path) -> Path:
    """A sysfs tree of a machine as large as the bundled one (written the way the kernel shows it)."""
    document = json.loads(demo_steps.BUNDLED_TOPOLOGY_FILE.read_text())
    _load_make_tree().write_tree(document, tmp_path)
    return tmp_path


def test_a_host_that_holds_the_seed_pods_is_used_as_discovered(
    large_host: Path, seeds: list[demo_steps.Scenario]
) -> None:
    choice = demo_steps.choose_machine("auto", scenarios=seeds, sysfs_root=large_host, meminfo=None)
    assert (choice.source, choice.sysfs_root, choice.holds_seed_pods) == ("host", large_host, True)
    assert choice.topology.num_cpus == 32


def test_a_host_too_small_for_the_seed_pods_falls_back_to_the_bundled_topology_and_says_why(
    seeds: list[demo_steps.Scenario],
) -> None:
    small = BUNDLED_SYSFS / "sysfs-2numa-16cpu"  # 16Gi per NUMA node: less than 16Gi allocatable
    choice = demo_steps.choose_machine("auto", scenarios=seeds, sysfs_root=small, meminfo=None)
    assert choice.source == "bundled"
    assert choice.holds_seed_pods
    assert choice.host is not None and choice.host.num_cpus == 16
    assert choice.reason.startswith("this host is too small: the seed pods need 8 CPUs and 16Gi on one NUMA node")
    assert "default/tightly-coupled-database" in choice.reason


def test_asking_for_the_host_keeps_it_even_when_the_seed_pods_do_not_fit(seeds: list[demo_steps.Scenario]) -> None:
    small = BUNDLED_SYSFS / "sysfs-2numa-16cpu"
    choice = demo_steps.choose_machine("host", scenarios=seeds, sysfs_root=small, meminfo=None)
    assert (choice.source, choice.holds_seed_pods) == ("host", False)


def test_an_empty_sysfs_means_the_bundled_topology_or_an_error_when_the_host_was_asked_for(
    tmp_path: Path, seeds: list[demo_steps.Scenario]
) -> None:
    choice = demo_steps.choose_machine("auto", scenarios=seeds, sysfs_root=tmp_path, meminfo=None)
    assert choice.source == "bundled"
    assert choice.reason.startswith("sysfs offers too little")
    with pytest.raises(DemoError, match="cannot discover this host's topology"):
        demo_steps.choose_machine("host", scenarios=seeds, sysfs_root=tmp_path, meminfo=None)


def test_the_kubelet_reservations_follow_the_first_core_of_the_machine(seeds: list[demo_steps.Scenario]) -> None:
    from enforcer.topology import discovery

    four_numa = discovery.discover(BUNDLED_SYSFS / "sysfs-4numa-32cpu")
    kubelet = demo_steps.node_kubelet(seeds[0].kubelet, four_numa)
    assert kubelet["reservedSystemCPUs"] == "0,16"
    assert kubelet["reservedMemory"] == [{"numaNode": 0, "limits": {"memory": "1124Mi"}}]
    assert seeds[0].kubelet["reservedSystemCPUs"] == "0,16"  # the scenario itself is untouched


# -- reviews and answers --------------------------------------------------------------------------------------


def test_a_binding_review_carries_the_pod_uid_and_the_target_node() -> None:
    review = demo_steps.binding_review(namespace="default", name="db", pod_uid="u-1", node="node-a", request_uid="r")
    request = review["request"]
    assert (request["subResource"], request["operation"], request["kind"]["kind"]) == ("binding", "CREATE", "Binding")
    assert request["object"]["metadata"]["uid"] == "u-1"
    assert request["object"]["target"] == {"kind": "Node", "name": "node-a"}


def test_a_resize_review_is_an_update_of_the_resize_subresource_with_the_old_object() -> None:
    old = {"metadata": {"name": "db", "namespace": "prod"}, "spec": {}}
    review = demo_steps.resize_review(old, old, request_uid="r")
    request = review["request"]
    assert (request["subResource"], request["operation"], request["namespace"]) == ("resize", "UPDATE", "prod")
    assert request["oldObject"] == old


def _answer(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def test_an_answer_is_read_with_its_patch_warnings_and_status() -> None:
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {"numaguard.io/plan": "{}"}}]
    patch = base64.b64encode(json.dumps(ops).encode()).decode()
    answer = demo_steps.read_answer(
        _answer({"uid": "r", "allowed": True, "patch": patch, "patchType": "JSONPatch", "warnings": ["w"]}),
        request_uid="r",
    )
    assert (answer.allowed, answer.patched_keys(), answer.warnings) == (True, ["numaguard.io/plan"], ("w",))
    denied = demo_steps.read_answer(
        _answer({"uid": "r", "allowed": False, "status": {"code": 403, "reason": "TopologyAffinityError"}}),
        request_uid="r",
    )
    assert denied.denial() == "403 TopologyAffinityError"


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "Status"},
        _answer({"uid": "other", "allowed": True}),
        _answer({"uid": "r", "allowed": True, "patch": "%%%", "patchType": "JSONPatch"}),
    ],
    ids=["not-a-review", "another-request", "patch-not-base64"],
)
def test_an_answer_outside_the_protocol_stops_the_demo(body: dict[str, Any]) -> None:
    with pytest.raises(DemoError):
        demo_steps.read_answer(body, request_uid="r")


@dataclass(frozen=True)
class PatchCase:
    name: str
    document: dict[str, Any]
    ops: list[dict[str, Any]]
    expected: dict[str, Any]


PATCH_CASES = [
    PatchCase(
        "whole-annotations-map",
        {"metadata": {}},
        [{"op": "add", "path": "/metadata/annotations", "value": {"a/b": "1"}}],
        {"metadata": {"annotations": {"a/b": "1"}}},
    ),
    PatchCase(
        "escaped-key",
        {"metadata": {"annotations": {}}},
        [{"op": "add", "path": "/metadata/annotations/numaguard.io~1node", "value": "node-a"}],
        {"metadata": {"annotations": {"numaguard.io/node": "node-a"}}},
    ),
    PatchCase(
        "replace-and-remove",
        {"metadata": {"annotations": {"x": "1", "y": "2"}}},
        [
            {"op": "replace", "path": "/metadata/annotations/x", "value": "3"},
            {"op": "remove", "path": "/metadata/annotations/y"},
        ],
        {"metadata": {"annotations": {"x": "3"}}},
    ),
    PatchCase("append-to-list", {"items": [1]}, [{"op": "add", "path": "/items/-", "value": 2}], {"items": [1, 2]}),
]


@pytest.mark.parametrize("case", PATCH_CASES, ids=[c.name for c in PATCH_CASES])
def test_json_patches_apply_as_the_apiserver_applies_them(case: PatchCase) -> None:
    before = json.loads(json.dumps(case.document))
    assert demo_steps.apply_patch(case.document, case.ops) == case.expected
    assert case.document == before  # the input is not changed


def test_a_failed_patch_test_stops_the_demo() -> None:
    with pytest.raises(DemoError, match="test failed"):
        demo_steps.apply_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])


def test_growing_a_container_grows_the_pod_budget_too(seeds: list[demo_steps.Scenario]) -> None:
    database = seeds[0].pod("tightly-coupled-database")
    grown = demo_steps.grow_cpus(database, "database", 2)
    assert (demo_steps.cpu_of(grown, "database"), demo_steps.cpu_of(grown)) == ("8", "10")
    assert (demo_steps.cpu_of(database, "database"), demo_steps.cpu_of(database)) == ("6", "8")
    with pytest.raises(DemoError, match="no container 'missing'"):
        demo_steps.grow_cpus(database, "missing", 1)


def test_an_allocation_that_differs_from_the_kubelets_is_named(seeds: list[demo_steps.Scenario]) -> None:
    from shared import contract

    expected = seeds[0].expected("default/tightly-coupled-database")
    assert expected is not None
    shared = {"assignment": "pod_shared", "memoryAssignment": "pod_shared", "cpus": "4,20", "cfsQuota": "pod"}
    allocation = contract.Allocation.model_validate(
        {
            "uid": "u",
            "namespace": "default",
            "name": "tightly-coupled-database",
            "node": "node-a",
            "qosClass": "Guaranteed",
            "specHash": "h",
            "containers": {
                "database": {**shared, "assignment": "pod_exclusive", "cpus": "1-6", "cfsQuota": "none"},
                "metrics-exporter": shared,
                "backup-agent": shared,
            },
        }
    )
    assert demo_steps.expectation_mismatches(allocation, expected) == ["database.cpus: 1-6 (kubelet: 1-3,17-19)"]
