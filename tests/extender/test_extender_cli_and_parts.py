"""``numaguard extender`` from the command line, and the parts under the decisions: settings, directory, store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from extender_kit import args, engine, export, guaranteed
from service_fixtures import NODE, bundle_files, make_settings, running_enforcer

from extender import engine_adapter, settings
from extender.directory import DirectoryError, EnforcerDirectory, PodDirectory
from extender.replica import ReplicaStore
from numaguard_cli import main as cli
from servicekit import certs, tls


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> certs.Bundle:
    return certs.issue_bundle(tmp_path_factory.mktemp("certs"), namespace="numaguard")


def test_unusable_settings_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["extender"]) == 2
    assert "enforcersFile is required" in capsys.readouterr().err
    (tmp_path / "e.yaml").write_text("nodes: {a: ftp://x}\n")
    assert cli.main(["extender", "--enforcers-file", str(tmp_path / "e.yaml")]) == 2
    assert "expected an https:// URL" in capsys.readouterr().err
    (tmp_path / "ok.yaml").write_text("nodes: {'*': 'https://{node}:8443'}\n")
    assert cli.main(["extender", "--enforcers-file", str(tmp_path / "ok.yaml"), "--freshness-seconds", "0.5"]) == 2
    assert "freshnessSeconds must be at least pollIntervalSeconds" in capsys.readouterr().err


def test_settings_file_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "settings.yaml").write_text("enforcersFile: enforcers.yaml\ntlsCert: a.crt\ntlsKey: a.key\n")
    loaded = settings.load(tmp_path / "settings.yaml")
    assert loaded.enforcers_file == tmp_path / "enforcers.yaml" and loaded.tls_cert == tmp_path / "a.crt"
    with pytest.raises(settings.ConfigError, match="tlsCert and tlsKey go together"):
        settings.load(overrides={"enforcers_file": "x", "tls_cert": "a.crt"})
    with pytest.raises(settings.ConfigError, match="unknown|Extra inputs"):
        settings.load(overrides={"enforcers_file": "x", "colour": "blue"})


def test_directories() -> None:
    static = EnforcerDirectory({"a": "https://a.example:8443/", "*": "https://{node}.enforcers:8443"})
    assert static.url_for("a") == "https://a.example:8443" and static.url_for("b") == "https://b.enforcers:8443"
    assert EnforcerDirectory({"a": "https://a:1"}).url_for("b") is None
    with pytest.raises(DirectoryError):
        EnforcerDirectory({"a": "a:8443"})
    pods = PodDirectory(8443)
    ready = {"type": "Ready", "status": "True"}
    pods.replace_all(
        [
            {"spec": {"nodeName": "n1"}, "status": {"phase": "Running", "podIP": "10.0.0.5", "conditions": [ready]}},
            {"spec": {"nodeName": "n2"}, "status": {"phase": "Pending", "podIP": "10.0.0.6"}},
            {"spec": {"nodeName": "n3"}, "status": {"phase": "Running", "podIP": "fd00::7", "conditions": [ready]}},
        ]
    )
    assert pods.url_for("n1") == "https://10.0.0.5:8443" and pods.url_for("n2") is None
    assert pods.url_for("n3") == "https://[fd00::7]:8443" and pods.listed() == ("n1", "n3")


def test_the_store_orders_exports_by_incarnation_and_generation() -> None:
    store = ReplicaStore(freshness=5.0, clock=lambda: 0.0)
    empty, busy = engine(2, 4, name="n"), engine(2, 4, name="n")
    assert busy.admit(_pod(guaranteed("x", "4"))).admitted
    assert store.update("n", export("n", empty, generation=2))
    assert not store.update("n", export("n", busy, generation=1))  # older: ignored
    assert len(store.view("n").replica.engine.state.pods) == 0  # type: ignore[union-attr]
    assert store.update("n", export("n", busy, incarnation="restarted", generation=1))  # a restart replaces
    assert len(store.view("n").replica.engine.state.pods) == 1  # type: ignore[union-attr]
    broken = export("n", empty, incarnation="restarted", generation=5)
    broken["snapshot"]["topology"] = {"cpus": "nonsense"}
    with pytest.raises(engine_adapter.SnapshotError):
        store.update("n", broken)
    assert store.view("n").replica.generation == 1  # type: ignore[union-attr]  # the old replica stays
    with pytest.raises(engine_adapter.SnapshotError, match="serves node"):
        store.update("n", export("other", empty))


def test_a_dry_run_leaves_the_replica_untouched() -> None:
    eng = engine(2, 8, name="n")
    before = json.dumps(eng.snapshot(), sort_keys=True)
    outcome = engine_adapter.dry_run(eng, _pod(guaranteed("p", "6")))
    assert outcome.admitted and len(outcome.numa_nodes) == 1 and outcome.exclusive_cpus == 6
    assert json.dumps(eng.snapshot(), sort_keys=True) == before


def _pod(raw: dict[str, object]) -> engine_adapter.PodResources:
    from shared import qos
    from shared.pod import parse_pod

    resources = parse_pod(raw).to_resources(pod_level_resources=True)
    import dataclasses

    return dataclasses.replace(resources, qos_class=qos.qos_class(resources, pod_level_resources_gate=True))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_cli_serves_filter_over_https_from_a_real_enforcer(tmp_path: Path, bundle: certs.Bundle) -> None:
    config = make_settings(tmp_path / "state", **bundle_files(bundle, tmp_path))
    with running_enforcer(config) as running:
        (tmp_path / "enforcers.yaml").write_text(f"nodes:\n  {NODE}: {running.base_url}\n")
        port = _free_port()
        (tmp_path / "extender.yaml").write_text(
            f"listen: 127.0.0.1:{port}\n"
            f"tlsCert: {bundle.cert('webhook')}\ntlsKey: {bundle.key('webhook')}\n"
            f"enforcersFile: enforcers.yaml\nenforcerCa: {bundle.cert('ca')}\n"
            f"clientCert: {bundle.cert('metrics-client')}\nclientKey: {bundle.key('metrics-client')}\n"
            "pollIntervalSeconds: 0.2\nfreshnessSeconds: 5\nlogLevel: WARNING\n"
        )
        command = [sys.executable, "-m", "numaguard_cli.main", "extender", "--config", str(tmp_path / "extender.yaml")]
        process = subprocess.Popen(command, env={**os.environ}, stderr=subprocess.PIPE, text=True)
        try:
            context = tls.client_context(bundle.cert("ca"))
            with httpx.Client(base_url=f"https://localhost:{port}", verify=context, timeout=5.0) as client:
                answer = _first_exact_answer(client, process)
            assert answer["NodeNames"] == []
            assert answer["FailedAndUnresolvableNodes"] == {
                NODE: "TopologyAffinityError: Resources cannot be allocated with Topology locality"
            }
        finally:
            process.terminate()
            _, err = process.communicate(timeout=20)
        assert process.returncode == 0, err


def _first_exact_answer(client: httpx.Client, process: subprocess.Popen[str]) -> dict[str, object]:
    """Wait for ``/readyz`` (serving, every enforcer polled once), then ask once.

    A 17-CPU pod can never align on the seed node's 16-CPU NUMA nodes."""
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, "the extender exited"
        assert time.monotonic() < deadline, "the extender never became ready"
        try:
            if client.get("/readyz").status_code == 200:
                break
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.1)  # waits for a process to start; no result is read before /readyz says so
    answer: dict[str, object] = client.post("/filter", json=args(guaranteed("too-wide", "17", "1Gi"), [NODE])).json()
    return answer
