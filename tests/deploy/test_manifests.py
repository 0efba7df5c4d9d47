"""The Kubernetes manifests: schema-valid for v1.36, buildable by kustomize, and consistent with the code.

Schemas come from the ``kubernetes-validate`` package (the v1.36 OpenAPI schemas, strict: unknown
fields are errors), offline.  CRD kinds (cert-manager, Prometheus Operator) have no schema there and
are skipped with that reason.  Beyond the schemas, the tests pin what the schemas cannot see: the
admission hooks' policies, the security settings, and that every path a config file names is
mounted into its pod.
"""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel

from enforcer.engine import builder
from enforcer.engine import config as node_config
from enforcer.service import settings as enforcer_settings
from enforcer.topology import discovery
from numaguard_cli.main import SUBCOMMANDS
from servicekit import certs
from webhook import discovery as enforcer_directory
from webhook import settings as webhook_settings

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
BASE = MANIFESTS / "base"
APISERVER = MANIFESTS / "apiserver"  # files for the apiserver's own flags, not cluster objects
OPT_OUT = MANIFESTS / "components" / "opt-out"  # JSON patches, not objects
K8S_VERSION = "1.36.0"
CRD_GROUPS = {"cert-manager.io", "monitoring.coreos.com"}
KUSTOMIZE_BUILDS = [MANIFESTS, MANIFESTS / "overlays" / "cert-manager", MANIFESTS / "overlays" / "monitoring"]
BUNDLED_TOPOLOGIES = REPO / "enforcer" / "topology" / "fixtures"
KUBECTL = shutil.which("kubectl")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def object_files() -> list[Path]:
    """Every manifest file holding cluster objects (not kustomization files, not service configs)."""
    return sorted(
        p
        for p in MANIFESTS.rglob("*.yaml")
        if p.name != "kustomization.yaml" and not {BASE / "config", APISERVER, OPT_OUT} & set(p.parents)
    )


@functools.cache
def all_objects() -> tuple[tuple[Path, dict[str, Any]], ...]:
    """Parsed once per session; tests copy before changing anything."""
    return tuple((path, doc) for path in object_files() for doc in documents(path))


def the(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for _, d in all_objects() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def group_of(doc: dict[str, Any]) -> str:
    api_version: str = doc["apiVersion"]
    return api_version.split("/")[0] if "/" in api_version else ""


def validate_or_skip_crd(doc: dict[str, Any]) -> None:
    if group_of(doc) in CRD_GROUPS:
        pytest.skip(f"{doc['kind']} is a CRD kind ({doc['apiVersion']}): the Kubernetes API schemas do not define it")
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


# -- schemas ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(doc, id=f"{path.relative_to(MANIFESTS)}:{doc['kind']}/{doc['metadata']['name']}")
        for path, doc in all_objects()
    ],
)
def test_every_manifest_document_validates_against_the_kubernetes_1_36_schema(doc: dict[str, Any]) -> None:
    validate_or_skip_crd(doc)


def test_schema_validation_rejects_an_unknown_field() -> None:
    broken = copy.deepcopy(the("Deployment", "numaguard-webhook"))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def kustomize(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    built = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


@pytest.fixture(scope="module", params=KUSTOMIZE_BUILDS, ids=lambda p: str(p.relative_to(REPO)))
def built(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed: kustomize builds are not checked here")
    return kustomize(request.param)


def test_kustomize_builds_and_every_built_object_validates(built: list[dict[str, Any]]) -> None:
    kinds = {doc["kind"] for doc in built}
    assert {"Namespace", "Deployment", "DaemonSet", "MutatingWebhookConfiguration", "ConfigMap"} <= kinds
    for doc in built:
        if group_of(doc) not in CRD_GROUPS:  # CRD kinds: no schema in the Kubernetes API (see above)
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kustomize_points_workloads_at_the_generated_config_maps(built: list[dict[str, Any]]) -> None:
    config_maps = {d["metadata"]["name"] for d in built if d["kind"] == "ConfigMap"}
    for workload in (d for d in built if d["kind"] in ("Deployment", "DaemonSet")):
        for volume in workload["spec"]["template"]["spec"]["volumes"]:
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps


def test_default_build_needs_no_crd() -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed: kustomize builds are not checked here")
    assert {group_of(doc) for doc in kustomize(MANIFESTS)}.isdisjoint(CRD_GROUPS)


# -- admission hooks ---------------------------------------------------------------------------------


def hooks() -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in the(kind)["webhooks"]:
            yield kind, hook


def rules_of(kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (operation, resource): hook
        for hook in the(kind)["webhooks"]
        for rule in hook["rules"]
        for operation in rule["operations"]
        for resource in rule["resources"]
    }


@dataclass(frozen=True)
class HookCase:
    kind: str
    operation: str
    resource: str
    failure_policy: str


HOOK_CASES = [
    HookCase("MutatingWebhookConfiguration", "CREATE", "pods", "Ignore"),
    HookCase("MutatingWebhookConfiguration", "CREATE", "pods/binding", "Fail"),
    # issue 12: a resize is decided once (validating hook); the pods UPDATE hook did nothing and is gone; the
    # CREATE validation that must hold while the webhook is down is the ValidatingAdmissionPolicy, not a Fail hook
    HookCase("ValidatingWebhookConfiguration", "UPDATE", "pods/resize", "Fail"),
]


@pytest.mark.parametrize("case", HOOK_CASES, ids=lambda c: f"{c.kind[:8]} {c.operation} {c.resource}")
def test_each_hook_has_its_documented_failure_policy(case: HookCase) -> None:
    assert rules_of(case.kind)[(case.operation, case.resource)]["failurePolicy"] == case.failure_policy


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_hooks_cover_exactly_the_documented_operations(kind: str) -> None:
    expected = {(c.operation, c.resource) for c in HOOK_CASES if c.kind == kind}
    assert set(rules_of(kind)) == expected


def test_every_hook_shares_the_safety_settings() -> None:
    for kind, hook in hooks():
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "NoneOnDryRun"
        assert 1 <= hook["timeoutSeconds"] <= 30
        assert hook["clientConfig"]["service"] == {
            "name": "numaguard-webhook",
            "namespace": "numaguard",
            "path": "/mutate" if kind.startswith("Mutating") else "/validate",
            "port": 443,
        }
        # opt-in: only namespaces labelled for it (no system namespace is, nor numaguard's own, whatever its name)
        assert hook["namespaceSelector"] == {"matchLabels": {"numaguard.io/admission": "enabled"}}
        if kind.startswith("Mutating"):
            assert hook["reinvocationPolicy"] == "IfNeeded"


def test_hook_names_are_unique_and_fully_qualified() -> None:
    names = [hook["name"] for _, hook in hooks()]
    assert len(names) == len(set(names))
    assert all(name.count(".") >= 2 for name in names)


def test_ca_bundles_are_injected_from_the_webhook_serving_certificate() -> None:
    certificate = the("Certificate", "numaguard-webhook-tls")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotation = the(kind)["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    assert "numaguard-webhook.numaguard.svc" in certificate["spec"]["dnsNames"]


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


MATCH_CASES = [
    ("no resources anywhere", pod({"containers": [{"name": "app", "image": "x", "resources": {}}]}), False),
    ("resources key absent", pod({"containers": [{"name": "app", "image": "x"}]}), False),
    ("container requests", pod({"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}]}), True),
    ("container limits only", pod({"containers": [{"name": "app", "resources": {"limits": {"memory": "1Gi"}}}]}), True),
    ("pod-level resources", pod({"resources": {"limits": {"cpu": "4"}}, "containers": [{"name": "app"}]}), True),
    (
        "init container only",
        pod(
            {
                "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1"}}}],
                "containers": [{"name": "app", "resources": {}}],
            }
        ),
        True,
    ),
    ("empty init containers", pod({"initContainers": [], "containers": [{"name": "app", "resources": {}}]}), False),
]


@pytest.mark.parametrize(("description", "obj", "expected"), MATCH_CASES, ids=[c[0] for c in MATCH_CASES])
def test_match_conditions_skip_exactly_the_pods_that_request_nothing(
    description: str, obj: dict[str, Any], expected: bool
) -> None:
    env = celpy.Environment()
    conditioned = [(kind, hook) for kind, hook in hooks() if hook.get("matchConditions")]
    assert len(conditioned) == 1  # the resize hook; CREATE sees every pod (podSource seen must know them all)
    for _, hook in conditioned:
        [condition] = hook["matchConditions"]
        program = env.program(env.compile(condition["expression"]))
        assert bool(program.evaluate({"object": json_to_cel(obj)})) is expected, hook["name"]


def test_binding_hook_has_no_match_condition_because_a_binding_carries_no_pod_spec() -> None:
    assert "matchConditions" not in rules_of("MutatingWebhookConfiguration")[("CREATE", "pods/binding")]


# -- workloads -------------------------------------------------------------------------------------------


def pod_spec(kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = the(kind, name)["spec"]["template"]["spec"]
    return spec


def test_webhook_runs_two_spread_replicas_protected_by_a_disruption_budget() -> None:
    deployment = the("Deployment", "numaguard-webhook")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] == 2
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == (
        "kubernetes.io/hostname"
    )
    budget = the("PodDisruptionBudget", "numaguard-webhook")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_webhook_service_maps_443_to_the_container_https_port() -> None:
    service = the("Service", "numaguard-webhook")
    [container] = pod_spec("Deployment", "numaguard-webhook")["containers"]
    [port] = service["spec"]["ports"]
    assert port["port"] == 443
    assert {"name": port["targetPort"], "containerPort": 8443, "protocol": "TCP"} in container["ports"]


@pytest.mark.parametrize(("kind", "name"), [("Deployment", "numaguard-webhook"), ("DaemonSet", "numaguard-enforcer")])
def test_probes_use_https_health_endpoints(kind: str, name: str) -> None:
    [container] = pod_spec(kind, name)["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}


def test_webhook_pods_run_unprivileged_with_a_read_only_root() -> None:
    spec = pod_spec("Deployment", "numaguard-webhook")
    [container] = spec["containers"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])


def test_enforcer_gets_only_the_host_access_it_justifies() -> None:
    spec = pod_spec("DaemonSet", "numaguard-enforcer")
    [container] = spec["containers"]
    assert spec["nodeSelector"] == {"numaguard.io/enforce": "true"}
    assert spec["hostPID"] is False and spec["hostNetwork"] is False
    assert {"operator": "Exists"} in spec["tolerations"]
    security = container["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]} and security["readOnlyRootFilesystem"] is True
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == {
        "sys": "/sys",
        "cgroup": "/sys/fs/cgroup",
        "state": "/var/lib/numaguard",
        # the runtime hook (docs/runtime-hook.md): its socket, the host's pids, the kubelet's config,
        # and what the install-hook initContainer reads (/) and writes (the hook, containerd's base spec)
        "hook-socket": "/run/numaguard",
        "host-proc": "/proc",
        "kubelet-config": "/var/lib/kubelet/config.yaml",
        "host-root": "/",
        "hook-bin": "/opt/numaguard",
        "runtime-config": "/etc/containerd",
    }
    assert all(m["readOnly"] for m in container["volumeMounts"] if m["name"] in ("host-proc", "kubelet-config"))
    [installer] = spec["initContainers"]
    assert installer["command"][:2] == ["numaguard", "install-hook"]
    assert installer["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_CHROOT"]}
    assert {m["name"]: m.get("readOnly", False) for m in installer["volumeMounts"]}["host-root"] is True
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["sys"]["readOnly"] is True
    assert mounts["state"]["mountPath"] == "/var/lib/numaguard"


def test_enforcer_is_told_its_node_name_from_the_downward_api() -> None:
    [container] = pod_spec("DaemonSet", "numaguard-enforcer")["containers"]
    assert container["command"][-2:] == ["--node-name", "$(NODE_NAME)"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        ("Deployment", "numaguard-webhook", ["numaguard", "webhook", "--config", "/etc/numaguard/webhook.yaml"]),
        (
            "DaemonSet",
            "numaguard-enforcer",
            ["numaguard", "enforcer", "--config", "/etc/numaguard/enforcer.yaml", "--node-name", "$(NODE_NAME)"],
        ),
    ],
)
def test_container_command_lines_name_existing_subcommands(kind: str, name: str, expected: list[str]) -> None:
    [container] = pod_spec(kind, name)["containers"]
    assert container["command"] == expected
    assert container["command"][1] in SUBCOMMANDS


# -- configuration files versus mounts -------------------------------------------------------------------


def mounted_files(kind: str, name: str) -> set[str]:
    """Every file path the pod's container sees from its ConfigMap and Secret volumes."""
    spec = pod_spec(kind, name)
    [container] = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    files: set[str] = set()
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "subPath" in mount:
            files.add(mount["mountPath"])
        elif "projected" in volume:
            for source in volume["projected"]["sources"]:
                files.update(f"{mount['mountPath']}/{item['path']}" for item in source["secret"]["items"])
    return files


def etc_paths(value: Any) -> Iterator[str]:
    if isinstance(value, str) and value.startswith("/etc/numaguard/"):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from etc_paths(item)
    elif isinstance(value, list):
        for item in value:
            yield from etc_paths(item)


@pytest.mark.parametrize(
    ("config", "kind", "name"),
    [("webhook.yaml", "Deployment", "numaguard-webhook"), ("enforcer.yaml", "DaemonSet", "numaguard-enforcer")],
)
def test_every_file_a_config_names_is_mounted_into_its_pod(config: str, kind: str, name: str) -> None:
    named = set(etc_paths(yaml.safe_load((BASE / "config" / config).read_text())))
    assert named, f"{config} names no files"
    assert named <= mounted_files(kind, name)
    assert f"/etc/numaguard/{config}" in mounted_files(kind, name)


def test_projected_secrets_are_those_the_cert_manager_component_issues() -> None:
    issued = {d["spec"]["secretName"] for _, d in all_objects() if d["kind"] == "Certificate"}
    for kind, name in (("Deployment", "numaguard-webhook"), ("DaemonSet", "numaguard-enforcer")):
        for volume in pod_spec(kind, name)["volumes"]:
            for source in volume.get("projected", {}).get("sources", []):
                assert source["secret"]["name"] in issued


def secret_names(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if "secret" in value and isinstance(value["secret"], dict):
            yield value["secret"]["name"]
        if "keySecret" in value:
            yield value["keySecret"]["name"]
        for item in value.values():
            yield from secret_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from secret_names(item)


def test_service_monitors_use_secrets_the_cert_manager_component_issues() -> None:
    issued = {d["spec"]["secretName"] for _, d in all_objects() if d["kind"] == "Certificate"}
    monitors = [d for _, d in all_objects() if d["kind"] == "ServiceMonitor"]
    assert monitors
    for monitor in monitors:
        assert set(secret_names(monitor["spec"])) <= issued
    enforcer_tls = the("ServiceMonitor", "numaguard-enforcer")["spec"]["endpoints"][0]["tlsConfig"]
    assert (
        enforcer_tls["cert"]["secret"]["name"] == "numaguard-metrics-client-tls"
    )  # read-only identity  # /metrics is authenticated


def test_cert_manager_certificates_match_the_cli_bundle() -> None:
    webhook = the("Certificate", "numaguard-webhook-tls")["spec"]
    enforcer = the("Certificate", "numaguard-enforcer-tls")["spec"]
    assert webhook["dnsNames"] == list(certs.service_dns_names(certs.WEBHOOK_SERVICE, "numaguard"))
    assert set(certs.service_dns_names(certs.ENFORCER_SERVICE, "numaguard")) <= set(enforcer["dnsNames"])
    assert the("Certificate", "numaguard-webhook-client-tls")["spec"]["commonName"] == certs.WEBHOOK_CLIENT_IDENTITY
    assert the("Certificate", "numaguard-operator-client-tls")["spec"]["commonName"] == certs.OPERATOR_CLIENT_IDENTITY
    assert "client auth" in the("Certificate", "numaguard-webhook-client-tls")["spec"]["usages"]


def test_webhook_config_loads_and_agrees_with_the_hooks_and_certificates() -> None:
    loaded = webhook_settings.load(BASE / "config" / "webhook.yaml", env={})
    binding = rules_of("MutatingWebhookConfiguration")[("CREATE", "pods/binding")]
    assert loaded.timeout_seconds == binding["timeoutSeconds"]
    assert loaded.listen_address()[1] == 8443
    assert loaded.enforcer_server_name is None  # derived from the pod's namespace (downward API)
    [container] = pod_spec("Deployment", "numaguard-webhook")["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["WEBHOOK_ENFORCER_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert loaded.enforcer_selector == "app.kubernetes.io/name=numaguard-enforcer"
    enforcer_labels = the("DaemonSet", "numaguard-enforcer")["spec"]["template"]["metadata"]["labels"]
    assert enforcer_labels["app.kubernetes.io/name"] == "numaguard-enforcer"


def test_static_enforcer_map_alternative_loads() -> None:
    directory = enforcer_directory.StaticDirectory.from_file(BASE / "config" / "enforcers.yaml")
    assert directory.url_for("worker-1") == "https://worker-1:8443"


def test_enforcer_config_loads_as_enforcer_settings() -> None:
    loaded = enforcer_settings.load(BASE / "config" / "enforcer.yaml", env={}, overrides={"node_name": "worker-1"})
    assert loaded.listen_address()[1] == 8443
    assert loaded.machine_source == Path("/host/sys")
    assert loaded.state_dir == Path("/var/lib/numaguard")
    [container] = pod_spec("DaemonSet", "numaguard-enforcer")["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert (str(loaded.cgroup_root), str(loaded.sysfs_root)) == (mounts["cgroup"], mounts["sys"])


@pytest.mark.parametrize("machine", ["sysfs-2numa-16cpu", "sysfs-4numa-32cpu"])
def test_enforcer_kubelet_configuration_builds_a_node_engine(machine: str) -> None:
    raw = yaml.safe_load((BASE / "config" / "enforcer.yaml").read_text())
    config = node_config.from_kubelet(raw["kubelet"])
    assert (config.cpu_manager_policy, config.memory_manager_policy) == ("static", "Static")
    builder.build(discovery.discover(BUNDLED_TOPOLOGIES / machine), config)


# -- RBAC -------------------------------------------------------------------------------------------------


def grants(kind: str, name: str) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in the(kind, name)["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_enforcer_rbac_is_exactly_its_needs() -> None:
    assert grants("ClusterRole", "numaguard-enforcer") == {
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "patch"),  # narrowed to its own node's pods by numaguard-enforcer-own-node
    }  # NodeResourceTopology rules live only in optional/node-resource-topology


def test_webhook_rbac_only_reads_pods() -> None:
    assert grants("ClusterRole", "numaguard-webhook") == {("", "pods", v) for v in ("get", "list", "watch")}
    assert grants("Role", "numaguard-webhook-enforcers") == {("", "pods", v) for v in ("list", "watch")}


# Roles every cluster has (kube-apiserver's RBAC bootstrap policy), bound by the optional second scheduler.
BUILT_IN_ROLES = {
    ("ClusterRole", "system:kube-scheduler"),
    ("ClusterRole", "system:volume-scheduler"),
    ("Role", "extension-apiserver-authentication-reader"),
}


@pytest.mark.parametrize("binding_kind", ["ClusterRoleBinding", "RoleBinding"])
def test_role_bindings_name_existing_service_accounts_and_roles(binding_kind: str) -> None:
    accounts = {d["metadata"]["name"] for _, d in all_objects() if d["kind"] == "ServiceAccount"}
    roles = {(d["kind"], d["metadata"]["name"]) for _, d in all_objects() if d["kind"] in ("ClusterRole", "Role")}
    roles |= BUILT_IN_ROLES
    for _, binding in ((p, d) for p, d in all_objects() if d["kind"] == binding_kind):
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in roles
        assert all(s["name"] in accounts and s["namespace"] == "numaguard" for s in binding["subjects"])


def test_every_hook_in_the_webhook_configurations_is_a_webhook_label_value_of_our_metrics() -> None:
    """numaguard_webhook_*{webhook} joins the apiserver's apiserver_admission_webhook_*{name}: same names."""
    from webhook.metrics import hook_name

    base = Path(__file__).resolve().parents[2] / "manifests" / "base" / "webhook"
    for kind, mode in (("mutatingwebhookconfiguration", "mutate"), ("validatingwebhookconfiguration", "validate")):
        document = yaml.safe_load((base / f"{kind}.yaml").read_text())
        for hook in document["webhooks"]:
            operation = hook["name"].split(".")[0].removeprefix("pods-")
            assert hook["clientConfig"]["service"]["path"] == f"/{mode}"
            assert hook_name(operation, mode) == hook["name"]


# -- issue 12: scope, priorities, namespace-agnostic builds, the enforcer's own-node policy -------------------


def test_the_daemonset_and_the_webhook_run_at_system_critical_priority() -> None:
    assert pod_spec("DaemonSet", "numaguard-enforcer")["priorityClassName"] == "system-node-critical"
    assert pod_spec("Deployment", "numaguard-webhook")["priorityClassName"] == "system-cluster-critical"


def test_numaguard_opts_its_own_namespace_out_and_the_policies_select_the_same_namespaces() -> None:
    assert the("Namespace")["metadata"]["labels"]["numaguard.io/admission"] == "disabled"
    policy = the("ValidatingAdmissionPolicy", "numaguard-pod-resources")
    assert policy["spec"]["matchConstraints"]["namespaceSelector"] == {
        "matchLabels": {"numaguard.io/admission": "enabled"}
    }


def test_a_kustomize_namespace_carries_through_every_reference(tmp_path: Path) -> None:
    """Finding 8: `namespace: platform-numa` left the webhook's own namespace unexcluded and references behind."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"namespace": "platform-numa", "resources": [os.path.relpath(BASE, tmp_path)]})
    )
    built = kustomize(tmp_path)
    namespaced = [d for d in built if d["metadata"].get("namespace") is not None]
    assert namespaced and {d["metadata"]["namespace"] for d in namespaced} == {"platform-numa"}
    for doc in built:
        if doc["kind"].endswith("WebhookConfiguration"):
            for hook in doc["webhooks"]:
                assert hook["clientConfig"]["service"]["namespace"] == "platform-numa"
                assert hook["namespaceSelector"] == {"matchLabels": {"numaguard.io/admission": "enabled"}}
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert {s["namespace"] for s in doc["subjects"]} == {"platform-numa"}
    [namespace] = [d for d in built if d["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["numaguard.io/admission"] == "disabled"  # still opted out
    [config] = [d for d in built if d["kind"] == "ConfigMap" and "webhook.yaml" in d.get("data", {})]
    assert "numaguard.svc" not in config["data"]["webhook.yaml"]  # the enforcer's name comes from the pod


OWN_NODE_REQUEST = {
    "userInfo": {
        "username": "system:serviceaccount:numaguard:numaguard-enforcer",
        "extra": {"authentication.kubernetes.io/node-name": ["worker-1"]},
    }
}


def _pod_on(node: str, annotations: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "annotations": annotations, "labels": labels or {"app": "x"}},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
    }


OWN_NODE_CASES = [
    (
        "own node, numaguard annotation",
        _pod_on("worker-1", {}),
        _pod_on("worker-1", {"numaguard.io/resize": "x"}),
        True,
    ),
    ("another node", _pod_on("worker-2", {}), _pod_on("worker-2", {"numaguard.io/resize": "x"}), False),
    ("a foreign annotation", _pod_on("worker-1", {}), _pod_on("worker-1", {"team": "evil"}), False),
    ("a label", _pod_on("worker-1", {}), _pod_on("worker-1", {}, {"app": "y"}), False),
]


@pytest.mark.parametrize(("description", "old", "new", "allowed"), OWN_NODE_CASES, ids=[c[0] for c in OWN_NODE_CASES])
def test_the_enforcer_may_only_annotate_pods_of_its_own_node(
    description: str, old: dict[str, Any], new: dict[str, Any], allowed: bool
) -> None:
    policy = the("ValidatingAdmissionPolicy", "numaguard-enforcer-own-node")["spec"]
    env = celpy.Environment()
    activation: dict[str, Any] = {
        "request": json_to_cel(OWN_NODE_REQUEST),
        "object": json_to_cel(new),
        "oldObject": json_to_cel(old),
    }
    [condition] = policy["matchConditions"]
    assert bool(env.program(env.compile(condition["expression"])).evaluate(activation))
    variables = celtypes.MapType({})
    for variable in policy["variables"]:
        value = env.program(env.compile(variable["expression"])).evaluate({**activation, "variables": variables})
        variables = celtypes.MapType({**variables, celtypes.StringType(variable["name"]): value})
    activation["variables"] = variables
    verdicts = [bool(env.program(env.compile(v["expression"])).evaluate(activation)) for v in policy["validations"]]
    assert all(verdicts) is allowed, verdicts


def test_the_apiserver_admission_configuration_names_the_webhook_service() -> None:
    admission, kubeconfig = documents(APISERVER / "admission-configuration.yaml")
    assert admission["kind"] == "AdmissionConfiguration"
    plugins = {p["name"]: p["configuration"] for p in admission["plugins"]}
    assert set(plugins) == {"MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"}
    assert {c["kubeConfigFile"] for c in plugins.values()} == {
        "/etc/kubernetes/admission/numaguard-webhook-kubeconfig.yaml"
    }
    service = the("Service", "numaguard-webhook")
    [user] = kubeconfig["users"]
    assert user["name"] == f"numaguard-webhook.{service['metadata']['namespace']}.svc:443"


@pytest.mark.parametrize("overlay", ["cert-manager", "monitoring"])
def test_a_copy_of_an_overlay_with_another_namespace_renames_every_reference(tmp_path: Path, overlay: str) -> None:
    """Finding 8: cert-manager's inject-ca-from kept pointing at numaguard/ after re-namespacing."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    source = MANIFESTS / "overlays" / overlay
    document = yaml.safe_load((source / "kustomization.yaml").read_text())
    document["namespace"] = "platform-numa"
    document["resources"] = [os.path.relpath(source / r, tmp_path) for r in document["resources"]]
    document["components"] = [os.path.relpath(source / c, tmp_path) for c in document["components"]]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(document))
    built = kustomize(tmp_path)
    text = yaml.safe_dump_all(built)
    for stale in ("numaguard.svc", "-webhook.numaguard", "-enforcer.numaguard", "namespace: numaguard\n"):
        assert stale not in text, stale
    for doc in built:
        if doc["kind"].endswith("WebhookConfiguration"):
            annotation = doc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            assert annotation == "platform-numa/numaguard-webhook-tls"
        if doc["kind"] == "Certificate" and doc["metadata"]["name"] == "numaguard-webhook-tls":
            assert "numaguard-webhook.platform-numa.svc" in doc["spec"]["dnsNames"]


def _selected(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        if (e["operator"] == "NotIn") == (labels.get(e["key"]) in e["values"]):
            return False
    return True


@pytest.mark.parametrize(
    ("namespace", "labels", "opt_in", "opt_out"),
    [
        ("ml", {"numaguard.io/admission": "enabled"}, True, True),
        ("default", {}, False, True),
        ("numaguard", {"numaguard.io/admission": "disabled"}, False, False),
        ("kube-system", {}, False, False),
        ("kube-node-lease", {"numaguard.io/admission": "enabled"}, True, False),  # opt-out excludes it by name
    ],
)
def test_opt_in_and_opt_out_modes_select_the_documented_namespaces(
    tmp_path: Path, namespace: str, labels: dict[str, str], opt_in: bool, opt_out: bool
) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(BASE, tmp_path)],
                "components": [os.path.relpath(MANIFESTS / "components" / "opt-out", tmp_path)],
            }
        )
    )
    all_labels = {"kubernetes.io/metadata.name": namespace, **labels}
    for build, expected in ((kustomize(BASE), opt_in), (kustomize(tmp_path), opt_out)):
        selectors = [
            hook["namespaceSelector"] for doc in build if doc["kind"].endswith("WebhookConfiguration")
            for hook in doc["webhooks"]
        ]  # fmt: skip
        selectors += [
            doc["spec"]["matchConstraints"]["namespaceSelector"]
            for doc in build
            if doc["kind"] == "ValidatingAdmissionPolicy" and doc["metadata"]["name"] == "numaguard-pod-resources"
        ]
        assert len(selectors) == 4
        assert {_selected(s, all_labels) for s in selectors} == {expected}


def test_the_optional_webhook_network_policy_admits_only_the_control_plane_range_and_scrapers(tmp_path: Path) -> None:
    """Managed clusters cannot make the apiserver present a client certificate: the network is the guard."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "namespace": "numaguard",  # as the overlays set it: a component's objects take the overlay's
                "resources": [os.path.relpath(BASE, tmp_path)],
                "components": [os.path.relpath(MANIFESTS / "components" / "webhook-networkpolicy", tmp_path)],
            }
        )
    )
    build = kustomize(tmp_path)
    [policy] = [d for d in build if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "numaguard-webhook"]
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    [deployment] = [d for d in build if d["kind"] == "Deployment" and d["metadata"]["name"] == "numaguard-webhook"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert all(pod_labels.get(k) == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    ports = {p["name"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    [rule] = policy["spec"]["ingress"]
    assert {p["port"] for p in rule["ports"]} <= ports
    peers = rule["from"]
    assert [p["ipBlock"]["cidr"] for p in peers if "ipBlock" in p] == ["192.0.2.0/24"]  # the documented placeholder
    assert {"namespaceSelector": {"matchLabels": {"numaguard.io/metrics-scraper": "true"}}} in peers
    assert not any("podSelector" in p and "namespaceSelector" not in p for p in peers)  # no workload pod
