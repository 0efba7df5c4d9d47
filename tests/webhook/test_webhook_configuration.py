"""Settings precedence and validation, and where enforcers are found (static map, DaemonSet pods)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook import discovery, errors, plan, settings

# -- settings -----------------------------------------------------------------------------------------


def test_defaults_deny_on_unreachable_enforcers_with_a_3s_budget_inside_10s() -> None:
    config = settings.load(env={})
    assert (config.failure_mode, config.effective_unknown_pod_mode()) == ("deny", "allow")  # podSource seen
    assert settings.load(env={"WEBHOOK_POD_SOURCE": "kubernetes"}).effective_unknown_pod_mode() == "deny"
    assert (config.timeout_seconds, config.enforcer_budget_seconds) == (10, 3.0)
    assert config.max_body_bytes == 3 * 1024 * 1024
    assert config.listen_address() == ("0.0.0.0", 8443)


def test_file_then_environment_then_flags_each_override_the_previous(tmp_path: Path) -> None:
    path = tmp_path / "webhook.yaml"
    path.write_text("failureMode: allow\ntopologyManagerScope: container\nnumaCpus: 16\nnuma_memory: 64Gi\n")
    config = settings.load(
        path,
        env={"WEBHOOK_FAILURE_MODE": "deny", "WEBHOOK_NUMA_CPUS": "32"},
        overrides={"numa_cpus": 8, "listen": None},
    )
    assert config.failure_mode == "deny"  # env over file
    assert config.topology_manager_scope == "container"  # file only
    assert config.numa_cpus == 8  # flag over env
    assert config.listen == "0.0.0.0:8443"  # an unset flag overrides nothing
    assert config.plan_policy() == plan.PlanPolicy(
        scope="container", numa_node=plan.NUMANodeSize(8, 64 * 1024**3), pod_level_resource_managers=True
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"enforcer_budget_seconds": 6}, "must stay well inside timeout_seconds 10"),
        ({"timeout_seconds": 31}, "timeout_seconds"),
        ({"tls_cert": "/x.crt"}, "tls_cert and tls_key go together"),
        ({"numa_cpus": 16}, "numa_cpus and numa_memory go together"),
        ({"numa_cpus": 16, "numa_memory": "lots"}, "numa_memory: quantities must match"),
        ({"listen": "8443"}, "listen must be HOST:PORT"),
        ({"failure_mode": "maybe"}, "failure_mode"),
        ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
    ],
)
def test_settings_that_cannot_work_are_a_config_error_naming_the_field(values: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        settings.load(env={}, overrides=values)
    assert message in str(caught.value)


def test_a_config_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "webhook.json"
    path.write_text("[1, 2]")
    with pytest.raises(errors.ConfigError, match="must hold a mapping"):
        settings.load(path, env={})


def test_a_missing_config_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="cannot read config file"):
        settings.load(tmp_path / "nope.yaml", env={})


# -- static directory -----------------------------------------------------------------------------------


def test_a_static_map_answers_named_nodes_and_falls_back_to_the_template(tmp_path: Path) -> None:
    path = tmp_path / "enforcers.yaml"
    path.write_text("nodes:\n  node-a: https://10.0.0.11:8443/\n  '*': https://{node}.enforcers.example:8443\n")
    directory = discovery.StaticDirectory.from_file(path)
    assert directory.url_for("node-a") == "https://10.0.0.11:8443"
    assert directory.url_for("node-b") == "https://node-b.enforcers.example:8443"
    assert directory.is_ready()


def test_a_static_map_without_a_template_knows_only_its_nodes() -> None:
    assert discovery.StaticDirectory({"node-a": "https://a:1"}).url_for("node-b") is None


@pytest.mark.parametrize(
    "url", ["http://node-a:8443", "https://", "https://user@node-a:8443", "https://node-a:8443/?x=1", 8443]
)
def test_enforcer_urls_must_be_plain_https(url: object) -> None:
    with pytest.raises(errors.ConfigError):
        discovery.StaticDirectory({"node-a": url})  # type: ignore[dict-item]


# -- DaemonSet directory ---------------------------------------------------------------------------


def enforcer_pod(uid: str, node: str, ip: str, *, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": f"numaguard-enforcer-{uid}", "namespace": "numaguard"},
        "spec": {"nodeName": node},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_the_daemonset_directory_maps_each_node_to_its_ready_enforcer_pod() -> None:
    directory = discovery.DaemonSetDirectory(port=8443)
    assert not directory.is_ready()
    directory.replace_all([enforcer_pod("1", "node-a", "10.244.1.5"), enforcer_pod("2", "node-b", "fd00::7")])
    assert directory.is_ready()
    assert directory.url_for("node-a") == "https://10.244.1.5:8443"
    assert directory.url_for("node-b") == "https://[fd00::7]:8443"


def test_a_not_ready_enforcer_pod_is_not_used() -> None:
    directory = discovery.DaemonSetDirectory(port=8443)
    directory.apply("ADDED", enforcer_pod("1", "node-a", "10.244.1.5", ready=False))
    assert directory.url_for("node-a") is None


def test_during_a_rolling_update_the_ready_pod_wins_and_a_deleted_pod_is_forgotten() -> None:
    directory = discovery.DaemonSetDirectory(port=8443)
    directory.apply("ADDED", enforcer_pod("old", "node-a", "10.244.1.5"))
    directory.apply("ADDED", enforcer_pod("new", "node-a", "10.244.1.9", ready=False))
    assert directory.url_for("node-a") == "https://10.244.1.5:8443"
    directory.apply("MODIFIED", enforcer_pod("new", "node-a", "10.244.1.9"))
    assert directory.url_for("node-a") == "https://10.244.1.9:8443"
    directory.apply("DELETED", enforcer_pod("new", "node-a", "10.244.1.9"))
    assert directory.url_for("node-a") == "https://10.244.1.5:8443"
    directory.apply("DELETED", enforcer_pod("old", "node-a", "10.244.1.5"))
    assert directory.url_for("node-a") is None


# -- the configuration files the project ships ----------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_SETTINGS = ["manifests/base/config/webhook.yaml", "deploy/compose/webhook.yaml"]
SHIPPED_ENFORCER_MAPS = ["manifests/base/config/enforcers.yaml", "deploy/compose/enforcers.yaml"]


@pytest.mark.parametrize("relative", SHIPPED_SETTINGS)
def test_every_shipped_webhook_config_loads(relative: str) -> None:
    path = ROOT / relative
    if not path.exists():
        pytest.skip(f"{relative} is not in this tree")
    config = settings.load(path, env={})
    assert config.enforcer_budget_seconds <= config.timeout_seconds / 2


@pytest.mark.parametrize("relative", SHIPPED_ENFORCER_MAPS)
def test_every_shipped_enforcer_map_loads(relative: str) -> None:
    path = ROOT / relative
    if not path.exists():
        pytest.skip(f"{relative} is not in this tree")
    assert discovery.StaticDirectory.from_file(path).url_for("node-a") is not None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_node_is_enforced_while_it_has_an_enforcer_pod_and_for_a_grace_period_after() -> None:
    """Issue 12: a rollout or crash loop must not turn a node into "not enforced" (pods would bind unallocated)."""
    clock = Clock()
    directory = discovery.DaemonSetDirectory(port=8443, absent_grace_seconds=600, clock=clock)
    directory.replace_all([enforcer_pod("1", "node-a", "10.244.1.5")])
    assert directory.is_enforced("node-a") and not directory.is_enforced("node-b")
    directory.apply("MODIFIED", enforcer_pod("1", "node-a", "10.244.1.5", ready=False))
    assert directory.is_enforced("node-a") and directory.url_for("node-a") is None  # enforced, enforcer down
    clock.now += 10_000  # a pod that exists keeps its node enforced however long it is not ready
    assert directory.is_enforced("node-a")
    directory.apply("DELETED", enforcer_pod("1", "node-a", "10.244.1.5"))
    clock.now += 599
    assert directory.is_enforced("node-a")
    clock.now += 2
    assert not directory.is_enforced("node-a")  # the node was unlabelled: numaguard has no say there any more


def test_a_pending_enforcer_pod_without_an_ip_already_marks_its_node_enforced() -> None:
    directory = discovery.DaemonSetDirectory(port=8443)
    pod = enforcer_pod("1", "node-a", "", ready=False)
    directory.apply("ADDED", pod)
    assert directory.is_enforced("node-a") and directory.url_for("node-a") is None


def test_a_static_map_enforces_exactly_its_nodes() -> None:
    directory = discovery.StaticDirectory({"node-a": "https://a:8443"})
    assert directory.is_enforced("node-a") and not directory.is_enforced("node-b")
    assert discovery.StaticDirectory({"*": "https://{node}:8443"}).is_enforced("anything")
