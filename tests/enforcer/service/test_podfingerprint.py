"""The pod-set fingerprint against github.com/k8stopologyawareschedwg/podfingerprint's own test vectors.

``testdata/compat-tiny-3pods-1ns.{txt,sign}`` and ``testdata/compat-small-10pods-3ns.{txt,sign}`` at
commit 7eea983e (the .txt files list ``namespace name ...`` per pod; the .sign files hold the expected
fingerprint), copied here verbatim; and the pod selection of scheduler-plugins'
``resourcerequests.AreExclusiveForPod`` (Guaranteed, an app or restartable init container with an
integral CPU count, memory or hugepages).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.service import nrt, podfingerprint
from enforcer.topology import synthetic
from shared.pod import parse_pod

TINY = """\
production                      jaeger-dpgjk      1/1 Running 1 42d
production                      nginx-rt684       1/1 Running 1 42d
production                      envoy-g9m22       1/1 Running 1 42d
"""
SMALL = """\
analytics                       controller-69dkj  1/1 Running 1 42d
kube-public                     subscriber-tq6v7  1/1 Running 1 42d
kube-public                     transformer-hfbng 1/1 Running 1 42d
kube-public                     validator-c6pn5   1/1 Running 1 42d
kube-system                     proxy-wszrd       1/1 Running 1 42d
middleware                      processor-jkrl4   1/1 Running 1 42d
network                         gateway-vsll5     1/1 Running 1 42d
network                         importer-kzdfr    1/1 Running 1 42d
network                         importer-q5vt9    1/1 Running 1 42d
staging                         prometheus-bwgbn  1/1 Running 1 42d
"""


def pods_of(listing: str) -> list[tuple[str, str]]:
    return [(line.split()[0], line.split()[1]) for line in listing.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("listing", "expected"),
    [(TINY, "pfp0v001607b76a0e9d3aeb4"), (SMALL, "pfp0v001567144e4a561bb5a"), ("", "pfp0v001ef46db3751d8e999")],
)
def test_upstream_vectors(listing: str, expected: str) -> None:
    assert podfingerprint.sign(pods_of(listing)) == expected


def test_xxh64_reference_values() -> None:
    assert podfingerprint.xxh64(b"") == 0xEF46DB3751D8E999
    assert podfingerprint.xxh64(b"a") == 0xD24EC4F1A98C6E5B
    assert podfingerprint.xxh64(b"abc") == 0x44BC2CF5AD770999


@given(st.lists(st.tuples(st.text(max_size=20), st.text(max_size=40)), max_size=30), st.randoms())
def test_order_does_not_matter(pods: list[tuple[str, str]], rng: object) -> None:
    shuffled = list(pods)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert podfingerprint.sign(shuffled) == podfingerprint.sign(pods)


def _pod(spec: dict[str, object], name: str = "p") -> object:
    raw = {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec}
    resources = parse_pod(raw).to_resources(pod_level_resources=True)
    from dataclasses import replace

    from shared import qos

    return replace(resources, qos_class=qos.qos_class(resources, pod_level_resources_gate=True))


def _container(cpu: str | None, memory: str | None, **extra: object) -> dict[str, object]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "image": "x", "resources": {"requests": requests, "limits": requests}, **extra}


@pytest.mark.parametrize(
    ("spec", "exclusive"),
    [
        ({"containers": [_container("2", "1Gi")]}, True),  # integral CPUs
        ({"containers": [_container("1500m", "1Gi")]}, True),  # Guaranteed memory counts alone
        ({"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}}}]}, False),  # Burstable
        ({"containers": [{"name": "c", "image": "x"}]}, False),  # BestEffort
        (  # pod-level budget only: the containers request nothing, the scheduler's rule sees nothing exclusive
            {
                "resources": {"requests": {"cpu": "4", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "4Gi"}},
                "containers": [{"name": "c", "image": "x"}],
            },
            False,
        ),
    ],
)
def test_the_pod_selection_is_the_schedulers(spec: dict[str, object], exclusive: bool) -> None:
    assert podfingerprint.has_exclusive_resources(_pod(spec)) is exclusive  # type: ignore[arg-type]


def test_the_nrt_object_fingerprints_the_pods_with_exclusive_resources() -> None:
    kubelet = {
        "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
        "cpuManagerPolicy": "static",
        "reservedSystemCPUs": "0",
        "topologyManagerPolicy": "single-numa-node",
        "topologyManagerScope": "pod",
    }
    engine = builder.build(synthetic.regular(2, cores_per_numa=4), from_kubelet(kubelet))
    assert engine.admit(_pod({"containers": [_container("2", "1Gi")]}, "db")).admitted  # type: ignore[arg-type]
    assert engine.admit(_pod({"containers": [{"name": "c", "image": "x"}]}, "web")).admitted  # type: ignore[arg-type]
    doc = nrt.build_node_resource_topology("n", engine.topology, engine)
    attributes = {a["name"]: a["value"] for a in doc["attributes"]}
    assert attributes["nodeTopologyPodsFingerprint"] == podfingerprint.sign([("ns", "db")])
    assert attributes["nodeTopologyPodsFingerprintMethod"] == "with-exclusive-resources"
    assert doc["metadata"]["annotations"]["topology.node.k8s.io/fingerprint"] == podfingerprint.sign([("ns", "db")])
