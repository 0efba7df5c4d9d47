"""The admission stories of issue 12, replayed through a model of kube-apiserver's admission chain.

No kube-apiserver exists here, so this file models the part of it that
decides the stories: for a request it selects the shipped webhooks
(``manifests/base/webhook/*webhookconfiguration.yaml``: rules, the
namespaceSelector against the namespace's labels, matchConditions in CEL),
calls each over HTTPS with an AdmissionReview v1 shaped as the apiserver sends
it (``k8s.io/apiserver/pkg/admission/plugin/webhook/request``: uid per call,
kind/resource/subResource, requestKind, userInfo, options), bounded by the
hook's ``timeoutSeconds``; a call that fails (refused, timed out) applies the
hook's ``failurePolicy``; ``allowed: false`` rejects; mutating patches are
applied before the validating phase.  The shipped ValidatingAdmissionPolicy
numaguard-pod-resources is evaluated on CREATE (the harness of
``tests/deploy``), with or without the webhook.

The parts are real: the webhook under uvicorn with TLS (its settings as in
``manifests/base/config/webhook.yaml``: 10 s, 3 s enforcer budget, deny),
the enforcer as a process over mutual TLS; an enforcer that is down is a
closed port, a slow one is a TLS listener that never answers the handshake,
a node without an enforcer is absent from the webhook's enforcer map, and a
webhook that is down is a closed port.

The matrix: pod kind (Guaranteed with exclusive CPUs, Burstable, BestEffort,
no resources, invalid) x namespace (opted in, not opted in, kube-system) x
node (enforced and healthy, enforcer down, enforcer slow, no enforcer) x
webhook (up, down), each with the outcome RELIABILITY.md's failure matrix
promises.
"""

from __future__ import annotations

import base64
import copy
import json
import socket
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import httpx
import pytest
import yaml
from celpy.adapter import json_to_cel
from reliability_kit import EnforcerNode, Pki, fixture_pod, free_port, https_client

from servicekit import serve, tls
from shared import contract
from webhook import main, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from cel_policy_harness import compiled_policy, stored_pod  # noqa: E402

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
WEBHOOK_DIR = REPO / "manifests" / "base" / "webhook"
DEPLOYED = yaml.safe_load((REPO / "manifests" / "base" / "config" / "webhook.yaml").read_text())

NAMESPACES: dict[str, dict[str, str]] = {
    "opted-in": {"kubernetes.io/metadata.name": "opted-in", "numaguard.io/admission": "enabled"},
    "default": {"kubernetes.io/metadata.name": "default"},
    "kube-system": {"kubernetes.io/metadata.name": "kube-system"},
}
# node name -> what runs there (the webhook's enforcer map is built from this)
NODES = ("enforced", "enforcer-down", "enforcer-slow", "no-enforcer")


# -- the apiserver model ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    obj: dict[str, Any] | None = None


def _hooks() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, phase in (
        ("mutatingwebhookconfiguration.yaml", "mutate"),
        ("validatingwebhookconfiguration.yaml", "validate"),
    ):
        for hook in yaml.safe_load((WEBHOOK_DIR / name).read_text())["webhooks"]:
            found.append((phase, hook))
    return found


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        value, values = labels.get(expression["key"]), expression.get("values", [])
        if expression["operator"] == "In" and value not in values:
            return False
        if expression["operator"] == "NotIn" and value in values:
            return False
    return True


def _matches(hook: Mapping[str, Any], operation: str, resource: str, labels: Mapping[str, str], obj: Any) -> bool:
    if not any(operation in r["operations"] and resource in r["resources"] for r in hook["rules"]):
        return False
    if not _selects(hook.get("namespaceSelector", {}), labels):
        return False
    env = celpy.Environment()
    for condition in hook.get("matchConditions", []):
        if not bool(env.program(env.compile(condition["expression"])).evaluate({"object": json_to_cel(obj)})):
            return False
    return True


def _apply_patch(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    for op in patch:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = result
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        if op["op"] in ("add", "replace"):
            target[parts[-1]] = op["value"]
        elif op["op"] == "remove":
            target.pop(parts[-1], None)
    return result


@dataclass
class Apiserver:
    webhook_url: str
    ca: Path

    def admit(
        self, *, operation: str, kind: str, sub_resource: str, namespace: str, obj: dict[str, Any],
        old: dict[str, Any] | None = None, user: str = "system:kube-scheduler",
    ) -> Outcome:  # fmt: skip
        labels = NAMESPACES[namespace]
        resource = f"pods/{sub_resource}" if sub_resource else "pods"
        warnings: list[str] = []
        for phase, hook in _hooks():
            if not _matches(hook, operation, resource, labels, obj):
                continue
            review = self._review(operation, kind, sub_resource, namespace, obj, old, user)
            try:
                with https_client(self.webhook_url, self.ca, timeout=float(hook["timeoutSeconds"])) as http:
                    answer = http.post(hook["clientConfig"]["service"]["path"], json=review)
                response = answer.json()["response"]
            except (httpx.HTTPError, ValueError, KeyError) as err:
                if hook["failurePolicy"] == "Ignore":
                    continue
                message = f'Internal error occurred: failed calling webhook "{hook["name"]}": {type(err).__name__}'
                return Outcome(False, 500, "InternalError", message)
            warnings += response.get("warnings") or []
            if not response["allowed"]:
                status = response.get("status", {})
                return Outcome(False, status.get("code", 403), status.get("reason", ""), status.get("message", ""),
                               warnings)  # fmt: skip
            if phase == "mutate" and response.get("patch"):
                obj = _apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
        if operation == "CREATE" and kind == "Pod" and _selects(_policy_selector(), labels):
            denials = compiled_policy().evaluate(stored_pod(obj), operation="CREATE").denials
            if denials:
                return Outcome(False, 422, "Invalid", denials[0].message, warnings)
        return Outcome(True, warnings=warnings, obj=obj)

    @staticmethod
    def _review(
        operation: str, kind: str, sub_resource: str, namespace: str, obj: dict[str, Any],
        old: dict[str, Any] | None, user: str,
    ) -> dict[str, Any]:  # fmt: skip
        gvk = {"group": "", "version": "v1", "kind": kind}
        gvr = {"group": "", "version": "v1", "resource": "pods"}
        request: dict[str, Any] = {
            "uid": str(uuid.uuid4()),  # one per webhook call, as the apiserver does
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": obj["metadata"].get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
            "options": {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"},
        }
        if sub_resource:
            request["subResource"] = request["requestSubResource"] = sub_resource
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _policy_selector() -> Mapping[str, Any]:
    policy = yaml.safe_load((REPO / "manifests/optional/validating-admission-policy/policy.yaml").read_text())
    selector: Mapping[str, Any] = policy["spec"]["matchConstraints"]["namespaceSelector"]
    return selector


# -- the cluster --------------------------------------------------------------------------------------------


@dataclass
class Cluster:
    apiserver: Apiserver
    webhook: serve.BackgroundServer | None


@pytest.fixture(scope="module")
def slow_enforcer() -> Iterator[int]:
    """A listener that accepts TCP and never answers the TLS handshake: an enforcer that hangs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


@pytest.fixture(scope="module")
def enforcer(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[str]:
    node = EnforcerNode(tmp_path_factory.mktemp("chain-node"), pki)
    config = yaml.safe_load(node.config_file.read_text())
    config["node"]["name"] = "enforced"
    node.config_file.write_text(yaml.safe_dump(config))
    with node.running() as process:
        yield process.base_url


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki, enforcer: str, slow_enforcer: int) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("chain-webhook")
    enforcers = directory / "enforcers.json"
    enforcers.write_text(json.dumps({
        "enforced": enforcer,
        "enforcer-down": f"https://127.0.0.1:{free_port()}",
        "enforcer-slow": f"https://127.0.0.1:{slow_enforcer}",
    }))  # fmt: skip
    bundle = pki.bundle
    deployed = {k: DEPLOYED[k] for k in ("timeoutSeconds", "enforcerBudgetSeconds", "enforcerRetries", "failureMode")}
    config = settings.load(
        env={},
        overrides={
            **deployed,
            "listen": "127.0.0.1:0",
            "tls_cert": bundle.cert("webhook"),
            "tls_key": bundle.key("webhook"),
            "client_cert": bundle.cert("webhook-client"),
            "client_key": bundle.key("webhook-client"),
            "enforcer_ca": pki.ca,
            "enforcers_file": enforcers,
            "pod_source": "seen",
        },
    )
    files = main.server_tls_files(config)
    assert files is not None
    with serve.BackgroundServer(main.create_app(config), cert_reloader=tls.ReloadingServerContext(files)) as server:
        yield Cluster(Apiserver(f"https://localhost:{server.port}", pki.ca), server)


@pytest.fixture(scope="module")
def cluster_without_webhook(pki: Pki) -> Cluster:
    return Cluster(Apiserver(f"https://localhost:{free_port()}", pki.ca), None)


# -- the pods -----------------------------------------------------------------------------------------------

POD_KINDS = ("guaranteed", "burstable", "besteffort", "no-resources")


def pod_of(kind: str, name: str, namespace: str) -> dict[str, Any]:
    fixture = {"guaranteed": "tightly-coupled-database", "burstable": "burstable-web", "besteffort": "besteffort-batch",
               "no-resources": "besteffort-batch"}[kind]  # fmt: skip
    pod = fixture_pod(fixture, name=name, namespace=namespace)
    if kind == "no-resources":
        for container in pod["spec"]["containers"]:
            container.pop("resources", None)
    return pod


def binding_of(pod: dict[str, Any], node: str) -> dict[str, Any]:
    metadata = pod["metadata"]
    return {
        "kind": "Binding",
        "apiVersion": "v1",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"]},
        "target": {"kind": "Node", "name": node},
    }


def expected_binding(pod_kind: str, namespace: str, node: str, webhook_up: bool) -> tuple[bool, str]:
    """RELIABILITY.md's failure matrix for pods/binding: (allowed, reason when denied)."""
    if namespace != "opted-in":
        return True, ""  # numaguard is not asked at all
    if not webhook_up:
        return False, "InternalError"  # failurePolicy Fail: opted-in pods wait (Pending) until a replica answers
    if node in ("enforcer-down", "enforcer-slow") and pod_kind == "guaranteed":
        return False, "EnforcerUnavailable"
    return True, ""


CASES = [
    (pod_kind, namespace, node, webhook_up)
    for webhook_up in (True, False)
    for namespace in NAMESPACES
    for node in NODES
    for pod_kind in POD_KINDS
    if webhook_up or node == "enforced"  # with the webhook down no node is asked: one node kind covers it
]


@pytest.mark.parametrize(
    ("pod_kind", "namespace", "node", "webhook_up"),
    CASES,
    ids=[f"{p}-{ns}-{n}-{'webhook-up' if up else 'webhook-down'}" for p, ns, n, up in CASES],
)
def test_every_pod_kind_on_every_node_kind_through_every_outage(
    request: pytest.FixtureRequest, pod_kind: str, namespace: str, node: str, webhook_up: bool
) -> None:
    cluster: Cluster = request.getfixturevalue("cluster" if webhook_up else "cluster_without_webhook")
    name = f"{pod_kind}-{namespace}-{node}-{webhook_up}"
    pod = pod_of(pod_kind, name, namespace)
    created = cluster.apiserver.admit(operation="CREATE", kind="Pod", sub_resource="", namespace=namespace, obj=pod)
    assert created.allowed, created  # CREATE never waits for numaguard (Ignore; the policy runs in the apiserver)
    bound = cluster.apiserver.admit(
        operation="CREATE", kind="Binding", sub_resource="binding", namespace=namespace, obj=binding_of(pod, node)
    )
    allowed, reason = expected_binding(pod_kind, namespace, node, webhook_up)
    assert (bound.allowed, bound.reason) == (allowed, reason), bound
    if allowed and webhook_up and namespace == "opted-in" and node == "enforced":
        annotations = (bound.obj or {})["metadata"].get("annotations", {})
        assert annotations[contract.NODE_ANNOTATION] == "enforced"  # the allocation is recorded on the pod


@pytest.mark.parametrize("webhook_up", [True, False], ids=["webhook-up", "webhook-down"])
def test_an_invalid_pod_is_refused_by_the_policy_even_while_the_webhook_is_down(
    request: pytest.FixtureRequest, webhook_up: bool
) -> None:
    cluster: Cluster = request.getfixturevalue("cluster" if webhook_up else "cluster_without_webhook")
    pod = fixture_pod("invalid-plr-aggregate", name=f"invalid-{webhook_up}", namespace="opted-in")
    created = cluster.apiserver.admit(operation="CREATE", kind="Pod", sub_resource="", namespace="opted-in", obj=pod)
    assert not created.allowed and created.code == 422, created
