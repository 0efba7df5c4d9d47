"""manifests/optional/scheduler-extender: schema-valid for v1.36, buildable by kustomize, consistent with the code.

The second scheduler profile (a kube-scheduler Deployment whose KubeSchedulerConfiguration names the
extender) and the extender itself.  No kube-scheduler runs here: the configuration is checked against
the upstream field names of ``kubescheduler.config.k8s.io/v1`` ``Extender`` (urlPrefix, filterVerb,
prioritizeVerb, weight, enableHTTPS, tlsConfig, httpTimeout, nodeCacheCapable, ignorable) and against
the objects it points at.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from extender import settings as extender_settings
from numaguard_cli.main import SUBCOMMANDS

REPO = Path(__file__).resolve().parents[2]
DIRECTORY = REPO / "manifests" / "optional" / "scheduler-extender"
KUBECTL = shutil.which("kubectl")
EXTENDER_FIELDS = {
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "bindVerb",
    "weight",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
}


def objects() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(DIRECTORY.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def the(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in objects() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}"
    return found[0]


def scheduler_config() -> dict[str, Any]:
    data = the("ConfigMap", "numaguard-scheduler-config")["data"]["scheduler-config.yaml"]
    parsed: dict[str, Any] = yaml.safe_load(data)
    return parsed


def mounts(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """mountPath -> the volume behind it, for the deployment's first container."""
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in spec["containers"][0]["volumeMounts"]}


def test_kustomize_builds_and_every_object_validates() -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed: kustomize builds are not checked here")
    built = subprocess.run([KUBECTL, "kustomize", str(DIRECTORY)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    assert {"Deployment", "ConfigMap", "Service", "ServiceAccount", "Certificate"} <= {d["kind"] for d in docs}
    for doc in docs:
        if doc["apiVersion"].startswith("cert-manager.io/"):
            continue  # a CRD kind: the Kubernetes API schemas do not define it
        kubernetes_validate.validate(doc, "1.36.0", strict=True)
        assert doc["metadata"].get("namespace") in ("numaguard", "kube-system", None)


def test_the_scheduler_profile_names_the_extender_as_issue_13_requires() -> None:
    config = scheduler_config()
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1" and config["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in config["profiles"]] == ["numaguard-scheduler"]
    [extender] = config["extenders"]
    assert set(extender) <= EXTENDER_FIELDS
    assert extender["filterVerb"] == "filter" and extender["prioritizeVerb"] == "prioritize"
    assert extender["nodeCacheCapable"] is True and extender["ignorable"] is True and extender["enableHTTPS"] is True
    assert "bindVerb" not in extender  # the binding webhook stays the authority; the scheduler binds itself
    assert extender["weight"] >= 1


def test_the_extender_url_is_its_service_and_its_certificate_names_it() -> None:
    [extender] = scheduler_config()["extenders"]
    url = urlsplit(extender["urlPrefix"])
    service = the("Service", "numaguard-scheduler-extender")
    assert url.scheme == "https"
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert url.port == service["spec"]["ports"][0]["port"]
    assert url.hostname in the("Certificate", "numaguard-scheduler-extender-tls")["spec"]["dnsNames"]
    pod = the("Deployment", "numaguard-scheduler-extender")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_the_scheduler_mounts_its_config_and_the_extenders_ca() -> None:
    deployment = the("Deployment", "numaguard-scheduler")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    [flag] = [a for a in container["command"] if a.startswith("--config=")]
    config_path = Path(flag.removeprefix("--config="))
    mounted = mounts(deployment)
    assert mounted[str(config_path.parent)]["configMap"]["name"] == "numaguard-scheduler-config"
    ca = Path(scheduler_config()["extenders"][0]["tlsConfig"]["caFile"])
    assert mounted[str(ca.parent)]["secret"]["secretName"] == "numaguard-scheduler-extender-tls"
    assert container["image"].startswith("registry.k8s.io/kube-scheduler:v1.36")


def test_the_extender_settings_load_and_every_file_they_name_is_mounted(tmp_path: Path) -> None:
    text = the("ConfigMap", "numaguard-scheduler-extender-config")["data"]["extender.yaml"]
    path = tmp_path / "extender.yaml"
    path.write_text(text)
    loaded = extender_settings.load(path)
    assert loaded.enforcer_discovery == "daemonset" and loaded.enforcer_server_name == "numaguard-enforcer"
    deployment = the("Deployment", "numaguard-scheduler-extender")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["numaguard", "extender"] and "extender" in SUBCOMMANDS
    mounted = mounts(deployment)
    tls = mounted["/etc/numaguard/tls"]["projected"]["sources"]
    files = {f"/etc/numaguard/tls/{item['path']}" for source in tls for item in source["secret"]["items"]}
    named = {
        str(v) for v in (loaded.tls_cert, loaded.tls_key, loaded.enforcer_ca, loaded.client_cert, loaded.client_key)
    }
    assert named <= files
    assert "/etc/numaguard/extender.yaml" in mounted


def test_the_extender_reads_only_the_enforcer_pods() -> None:
    role = the("Role", "numaguard-scheduler-extender-enforcers")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
